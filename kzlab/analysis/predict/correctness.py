"""Correctness beside time in a what-if: which configurations compute the right audio, and the correct variants of
those that do not.

A configuration is "wrong output" when a node of its placement runs on a kernel path with a known defect (the
profile's `[[defects]]`), or when its emulated decode (`kzlab.analysis.emulate`: the device's arithmetic on the
host) has a non-finite sample or a stage below the bound against the host's F32 decode. A wrong configuration is
never recommended, however fast; each defect names remedies (F32 columns as src1, HMX off, a fixed release), and
the what-if prices those variants on the same draws as the rest, so that the answer can say what the right audio
costs.
"""

from __future__ import annotations

import dataclasses
import json
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
    """Two placements whose emulated decodes are the same computation: the same resolved graph, the same device
    arithmetic, the same nodes on the same kernel paths."""
    dev = placement.config["backends"][0]
    nodes = [(n.name, n.path) for n in placement.nodes if n.backend == dev and n.op == "MUL_MAT" and n.path]
    return json.dumps([placement.config["lowering_resolved"], placement.config.get("arith", ""), nodes],
                      sort_keys=True, default=str)


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
             threads: int | None, progress: Any = False) -> dict[str, Verdict]:
    """Each placement's verdict: from its emulated decode (`emulate`), else from its known defects alone (then
    a configuration without a defect is `correct: None`, not known)."""
    from kzlab.analysis.emulate.device import emulate as run_emulation
    from kzlab.analysis.emulate.device import host_stages
    from kzlab.codes import random_codes

    out: dict[str, Verdict] = {}
    if not emulate:
        for k, pl in placements.items():
            n = pl.defect_nodes
            acc = {"snr_db": None, "first_stage_below": None, "defect_nodes": n, "emulated": False}
            out[k] = Verdict(False if n else None, acc, _defect_why(pl) if n else "not emulated")
        return out
    codes = random_codes(model.hparams, frames, seed)
    host: dict[str, Any] = {}
    for i, (k, pl) in enumerate(placements.items()):
        key = (_model_key(model), emulation_key(pl), frames, seed, float(bound))
        res = _EMULATED.get(key)
        if res is None:
            if not host:
                host.update(host_stages(model, codes, threads))
            try:
                res = run_emulation(model, placement=pl, codes=codes, host=host, bound=bound, threads=threads)
            except KzlabError as e:  # a product kzlab cannot emulate: its correctness is not known
                n = pl.defect_nodes
                acc = {"snr_db": None, "first_stage_below": None, "defect_nodes": n, "emulated": False}
                out[k] = Verdict(False if n else None, acc, _defect_why(pl) if n else f"not emulated: {e}")
                continue
            _remember(key, res)
        acc = {**res.accuracy(), "defect_nodes": pl.defect_nodes, "emulated": True}
        why = ""
        if pl.defect_nodes:
            why = _defect_why(pl)
        elif res.failed_nodes:
            why = f"{res.failed_nodes} product(s) fail on the device ({res._first_failure()})"
        elif not res.correct:
            bad = res.nonfinite.get("wav", 0)
            why = (f"{bad} non-finite samples" if bad else
                   f"stage {res.first_stage_below} below {bound:g} dB against the host's F32 decode")
        out[k] = Verdict(pl.defect_nodes == 0 and res.correct, acc, why)
        if callable(progress):
            progress(i + 1, len(placements))
    return out


#: emulated decodes of this process, by (model file, emulation_key, frames, seed, bound): a what-if asked again (the
#: calibrated answer after the prior one) does not decode the same placements twice
_EMULATED: dict[tuple, Any] = {}
_MAX_REMEMBERED = 64


def _model_key(model: Any) -> tuple:
    from pathlib import Path

    p = Path(str(model.path))
    try:
        st = p.stat()
        return str(p.resolve()), st.st_size, st.st_mtime_ns
    except OSError:
        return str(p), id(model)


def _remember(key: tuple, res: Any) -> None:
    if len(_EMULATED) >= _MAX_REMEMBERED:
        _EMULATED.pop(next(iter(_EMULATED)))
    res.wav = res.host_wav = None  # the figures are what the what-if keeps, not the audio
    _EMULATED[key] = res


def _defect_why(pl: Any) -> str:
    return "; ".join(f"{d['n_nodes']} node(s) on a defective path: {d['title']} [{d['id']}]" for d in pl.defects)


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
