"""Correctness beside time in a what-if: which configurations compute the right audio, and the correct variants of
those that do not.

A configuration is "wrong output" when a node of its placement runs on a kernel path with a known defect (the
profile's `[[defects]]`), or when its emulated decode (`kzlab.analysis.emulate`: the device's arithmetic on the
host) has a non-finite sample or a stage below the bound against the host's F32 decode. A defect of kind
"approximation" (the path computes another function close to the op's, such as ggml-hexagon's GELU) is judged by
that decode alone: its nodes' effect is in the SNR, so the configuration is right at or above the bound, wrong
below it, and not known without an emulated decode. A wrong configuration is never recommended, however fast;
each defect names remedies (F32 columns as src1, HMX off, a fixed release, the op kept on the CPU), and the what-if
prices those variants on the same draws as the rest, so that the answer can say what the right audio costs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.errors import KzlabError


def describe_key(spec: Any, base: Any) -> str:
    """What a configuration runs, as a key: its whole lowering (the question's `base` with its options), profile,
    what-if changes, weights and stages; two specs with one key are the same configuration."""
    d = {**spec.describe(), "lowering": base.replace(**spec.options).to_dict()}
    for k in spec.options:
        d.pop(k, None)
    return json.dumps(d, sort_keys=True, default=str)


def emulation_key(placement: Any) -> str:
    """Two placements whose emulated decodes are the same computation: the same resolved graph, and each node that
    computes other values than the host's (`kernels.node_arithmetic`) on the same path with the same arithmetic.
    Releases that compute alike share a key (`kernels.arithmetic_class`: v0.15.3 and v0.21.0), and so does a
    product moved between the host and HVX with F16 weights (computed by ggml-cpu's kernel: `kernels.host_computes`): a
    placement with HMX off then decodes as the CPU-only one. A device whose arithmetic is not emulated keeps its
    own key (its verdict is "not known", not the host's)."""
    from kzlab.analysis.emulate import htp as kernels
    from kzlab.analysis.emulate.device import device_nodes

    release = placement.config.get("arith", "")
    nodes, other = [], 0
    for n, k, kind in device_nodes(placement):
        if not kind:
            other += 1
            continue
        s0, s1 = ((list(n.src_types) + ["", ""])[:2])
        arith = kernels.node_arithmetic(kind, n.path or kernels.POINTWISE_PATH, s0, s1, release)
        if arith != kernels.HOST_ARITHMETIC:
            nodes.append((n.name, k, arith))
    dev = placement.config["backends"][0]
    unemulated = dev if (other and not release and dev != "CPU") else ""
    return json.dumps([placement.config["lowering_resolved"], unemulated, nodes], sort_keys=True, default=str)


@dataclasses.dataclass
class Verdict:
    """One configuration's correctness: `correct`, and what it rests on (`accuracy`: the emulated decode's
    waveform SNR, first stage below the bound, defect nodes; or only the defects when it was not emulated)."""

    correct: bool | None
    accuracy: dict[str, Any]
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"correct": self.correct, "accuracy": self.accuracy, "why": self.why}


def verdicts(model: Any, placements: dict[str, Any], frames: int, seed: int, bound: float, emulate: bool,
             threads: int | None, progress: Any = False, cache: bool = True) -> dict[str, Verdict]:
    """Each placement's verdict: from its emulated decode (`emulate`), else from its known defects alone (then
    a configuration without a defect is `correct: None`, not known). An emulated decode's figures are kept in this
    process and, with `cache`, in `$KZLAB_CACHE/emulated/` (keyed by the file's hash, the hyperparameters it is
    decoded with, the placement's emulation key, the codes, the bound, the engine of products and the code that
    computes them), as CPU profiles are: a what-if asked again does not decode the same placements again, and
    placements with one emulation key (`emulation_key`) are decoded once. A decode stops at its first stage below
    the bound (the configuration is then wrong, and the answer says where it stopped)."""
    from kzlab.analysis.emulate.device import emulate as run_emulation
    from kzlab.analysis.emulate.device import host_stages
    from kzlab.codes import random_codes
    from kzlab.progress import Progress

    out: dict[str, Verdict] = {}
    if not emulate:
        for k, pl in placements.items():
            out[k] = _unemulated(pl, "not emulated")
        return out
    codes = random_codes(model.hparams, frames, seed)
    host: dict[str, Any] = {}
    bar = Progress(len(placements), "emulating the device's arithmetic", progress, unit="config")
    for k, pl in placements.items():
        key = emulation_cache_key(model, pl, frames, seed, bound, threads)
        summary = _recall(key, cache)
        if summary is None:
            if not host:
                bar.describe("emulating: the host's F32 decode")
                host.update(host_stages(model, codes, threads))
            bar.describe(f"emulating {k} ({pl.config.get('arith') or pl.config['backends'][0]}, "
                         f"{pl.config['lowering_label']})")
            try:
                res = run_emulation(model, placement=pl, codes=codes, host=host, bound=bound, threads=threads,
                                    stop_below_bound=True)
            except KzlabError as e:  # a product kzlab cannot emulate: its correctness is not known
                out[k] = _unemulated(pl, f"not emulated: {e}")
                continue
            summary = {"correct": res.correct, "accuracy": res.accuracy(), "failed_nodes": res.failed_nodes,
                       "first_failure": res.first_failure, "notes": res.notes,
                       "nonfinite": res.nonfinite.get("wav", 0), "first_stage_below": res.first_stage_below}
            _keep(key, summary, cache)
        acc = {**summary["accuracy"], "defect_nodes": pl.defect_nodes, "approximate_nodes": pl.approximate_nodes,
               "emulated": True}
        why = ""
        if pl.defect_nodes:
            why = _defect_why(pl)
        elif summary["failed_nodes"]:
            why = f"{summary['failed_nodes']} product(s) fail on the device ({summary['first_failure']})"
        elif summary["correct"] is False:
            why = (f"{summary['nonfinite']} non-finite samples" if summary["nonfinite"] else
                   f"stage {summary['first_stage_below']} below {bound:g} dB against the host's F32 decode")
            if summary["accuracy"].get("stopped_at"):
                why += " (the decode stopped there: the later stages were not computed)"
            if pl.approximate_nodes:
                why += f" ({_approximation_why(pl)})"
        elif summary["correct"] is None:
            why = "not emulated: " + next((n for n in summary.get("notes", []) if "not emulated" in n),
                                          "the device's arithmetic is not emulated")
        elif pl.approximate_nodes:  # right, and the answer says what the bound let through
            why = f"{_approximation_why(pl)}, within the {bound:g} dB bound"
        correct = False if pl.defect_nodes else summary["correct"]
        out[k] = Verdict(correct if correct is None else bool(correct), acc, why)
        bar.step()
    bar.close()
    return out


def _unemulated(pl: Any, why: str) -> Verdict:
    """A verdict without an emulated decode: wrong where the placement hits a known defect that computes wrong
    values, else not known (an approximating path's effect is only known from the decode)."""
    n = pl.defect_nodes
    acc = {"snr_db": None, "first_stage_below": None, "defect_nodes": n,
           "approximate_nodes": pl.approximate_nodes, "emulated": False}
    if not n and pl.approximate_nodes:
        why = f"{why}; {_approximation_why(pl)}"
    return Verdict(False if n else None, acc, _defect_why(pl) if n else why)


#: emulated decodes' figures of this process, by their cache key
_EMULATED: dict[str, dict[str, Any]] = {}


@functools.lru_cache(maxsize=1)
def emulation_code_digest() -> str:
    """A digest of the code an emulated decode's figures rest on besides the graph's: the device arithmetic, the
    decode that applies it and the comparison."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for f in (root / "emulate" / "htp.py", root / "emulate" / "device.py", root / "accuracy.py"):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def emulation_cache_key(model: Any, pl: Any, frames: int, seed: int, bound: float, threads: int | None = None) -> str:
    """The digest of everything an emulated decode's figures rest on, the thread count included: how ggml-cpu splits
    a product between threads can change its sums' order (the tiny PocketTTS decoder's emulated SNR: 27.338 dB at 1
    thread, 27.340 at 2)."""
    from kzlab.analysis.profile_cache import file_digest, graph_code_digest
    from kzlab.environment import default_threads, versions

    v = versions()
    key = {"model_sha256": file_digest(model.path), "hparams": model.hparams.to_dict(),
           "placement": emulation_key(pl), "frames": int(frames),
           "seed": int(seed), "bound": float(bound), "threads": int(threads or default_threads()),
           "graph_code": graph_code_digest(),
           "emulation_code": emulation_code_digest(), "kzlab": v.get("kzlab"), "ggml": v.get("ggml"),
           "ggml_cpu_libm": v.get("ggml_cpu_libm"), "f16_products": _f16_products()}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _f16_products() -> str:
    """What sums an emulated decode's F16 products (`emulate.device.product_engine`): its name, and for BLAS sums the
    BLAS numpy runs with its kernel and thread count (its order of sums follows them)."""
    from kzlab.analysis.emulate.device import BlasProducts, product_engine

    engine = product_engine()
    if not isinstance(engine, BlasProducts):
        return engine.name
    try:
        from threadpoolctl import threadpool_info

        blas = [(i.get("internal_api"), i.get("architecture"), i.get("num_threads"), i.get("version"))
                for i in threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:  # without threadpoolctl, the kernel is not known: keyed by the process's environment
        import os

        blas = [os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")]
    return json.dumps([engine.name, blas], default=str)


def _cache_file(key: str) -> Path:
    from kzlab.formats.named import cache_dir

    return cache_dir() / "emulated" / f"emulated-{key}.json"


def _recall(key: str, cache: bool) -> dict[str, Any] | None:
    if key in _EMULATED:
        return _EMULATED[key]
    if not cache:
        return None
    try:
        d = json.loads(_cache_file(key).read_text())
    except (OSError, ValueError):
        return None
    _EMULATED[key] = d
    return d


def _keep(key: str, summary: dict[str, Any], cache: bool) -> None:
    _EMULATED[key] = summary
    if not cache:
        return
    p = _cache_file(key)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(summary, default=str))
        tmp.replace(p)
    except OSError:  # an unwritable cache costs time, never the answer
        pass


def _defect_why(pl: Any) -> str:
    from kzlab.analysis.placement.defects import APPROXIMATION, kind_of

    return "; ".join(f"{d['n_nodes']} node(s) on a defective path: {d['title']} [{d['id']}]" for d in pl.defects
                     if kind_of(d) != APPROXIMATION)


def _approximation_why(pl: Any) -> str:
    from kzlab.analysis.placement.defects import APPROXIMATION, kind_of

    return "; ".join(f"{d['n_nodes']} node(s) on a path that approximates their op: {d['title']} [{d['id']}]"
                     for d in pl.defects if kind_of(d) == APPROXIMATION)


def recommend(totals: dict[str, np.ndarray], verdict: dict[str, Verdict]) -> dict[str, Any]:
    """The fastest configuration (lowest p50) that computes the right audio, with P(it is faster) against every
    other correct one, and the wrong configurations that would have been faster (never recommended)."""
    med = {k: float(np.median(v)) for k, v in totals.items()}
    right = sorted((k for k in totals if verdict[k].correct), key=med.get)
    if not right:
        return {"name": None, "why": "no configuration is known to compute the right audio"}
    best = right[0]
    faster_wrong = [{"name": k, "p50_ms": med[k], "p_faster": float(np.mean(totals[k] < totals[best])),
                     "why": verdict[k].why or "not known to be correct"}
                    for k in sorted(totals, key=med.get) if med[k] < med[best] and not verdict[k].correct]
    return {"name": best, "p50_ms": med[best],
            "p_faster_than": {k: float(np.mean(totals[best] < totals[k])) for k in right[1:]},
            "faster_but_wrong": faster_wrong,
            "why": "the lowest p50 of the configurations whose emulated decode computes the right audio"}
