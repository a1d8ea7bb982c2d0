"""Accuracy per stage: the SNR of every stage's activation of one run against another run or a reference.

A waveform SNR says that a decode is off, not where. Comparing each stage (as the decoder's family names them,
`kzlab.arch`) against a reference of the same stages tells where the error comes in: an F16 im2col costs a few
dB at the first conv and every stage after it carries that; a wrong inverse STFT leaves every stage exact and only
the waveform off. The first stage whose SNR falls below a bound is where to look.

Two ways to compare:
- a run against a reference `.npz` of stage activations, in the fixtures' format: `codes` (codebooks, T) and one
  array per stage, channel-first `(C, T)`, named as the family names its stages, plus `wav` (tests/data);
- a run (B) against another run (A) of the same file: the same options with some changed (`against`), e.g. a
  lowering toggle, a weight type or a backend. Each run is decoded once for its stages, then timed.

`stage_accuracy` compares two mappings of stage arrays (a Workbench's two runs, say); `compare` runs decodes.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.arch import arch_of, not_applicable
from kzlab.audio import snr_db
from kzlab.codes import random_codes, validate_codes
from kzlab.errors import InvalidInputError, InvalidOptionError
from kzlab.graph.options import Lowering
from kzlab.loader import load_model
from kzlab.model.model import Model
from kzlab.runtime.decoder import Decoder
from kzlab.runtime.spec import BackendSpec

#: the default bound, in dB: what the reference tests ask of F16 weights (F32 reaches 70 dB, Q8_0 25 dB)
DEFAULT_BOUND_DB = 40.0
#: the decoder's output, compared after every stage of the family
OUTPUT = "wav"
#: `BackendSpec` fields an `against` run may change, next to the `Lowering` fields
BACKEND_KEYS = ("backend", "threads", "sched", "op_offload", "weights_on")
_BOOL = {"1": True, "true": True, "on": True, "yes": True, "0": False, "false": False, "off": False, "no": False}


@dataclass
class StageAccuracy:
    """One stage: its SNR in dB against the reference (inf: equal; None: not comparable, `note` says why)."""

    stage: str
    snr_db: float | None
    shape: tuple[int, ...] = ()
    ref_rms: float = 0.0
    max_abs_err: float = 0.0
    note: str = ""
    #: non-finite values (NaN, inf) in this run's stage: each counted as lost (0), never a NaN SNR
    nonfinite: int = 0

    def row(self) -> dict[str, Any]:
        snr = "" if self.snr_db is None else ("exact" if math.isinf(self.snr_db) else round(self.snr_db, 2))
        return {"stage": self.stage, "snr_db": snr, "shape": "x".join(map(str, self.shape)),
                "ref_rms": self.ref_rms, "max_abs_err": self.max_abs_err, "note": self.note}


def stage_accuracy(test: Mapping[str, Any], ref: Mapping[str, Any], order: Sequence[str]) -> list[StageAccuracy]:
    """The SNR of each stage of `test` against `ref`, in the order given (the family's stages, then the output).

    A stage missing on either side, or of another shape, gets a row with `snr_db` None and the reason."""
    rows = []
    for name in order:
        a, r = test.get(name), ref.get(name)
        if a is None or r is None:
            what = "this run" if a is None else "the reference"
            rows.append(StageAccuracy(name, None, note=f"not in {what}"))
            continue
        a, r = np.asarray(a), np.asarray(r)
        if a.shape != r.shape:
            rows.append(StageAccuracy(name, None, tuple(a.shape), note=f"shape {a.shape} vs the reference's {r.shape}"))
            continue
        db, bad = snr_counting_nonfinite(a, r)
        d = np.where(np.isfinite(a), a, 0.0).astype(np.float64) - r.astype(np.float64)
        rms = float(np.sqrt(np.mean(r.astype(np.float64) ** 2)))
        rows.append(StageAccuracy(name, db, tuple(a.shape), rms, float(np.max(np.abs(d))) if d.size else 0.0,
                                  note=f"{bad} non-finite values, counted as lost" if bad else "", nonfinite=bad))
    return rows


def snr_counting_nonfinite(out: Any, ref: Any) -> tuple[float, int]:
    """(SNR in dB of `out` against `ref`, the number of non-finite values in `out`): a NaN or inf value counts as
    lost (taken as 0, so that its error is the reference's value there), never as a crash or a NaN SNR."""
    o = np.asarray(out, dtype=np.float64).reshape(-1)
    bad = ~np.isfinite(o)
    n_bad = int(bad.sum())
    return snr_db(np.where(bad, 0.0, o) if n_bad else o, ref), n_bad


def first_below(rows: Sequence[StageAccuracy], bound_db: float) -> str | None:
    """The first stage (in decoder order) whose SNR is below `bound_db`; None when every comparable one holds."""
    for r in rows:
        if r.snr_db is not None and r.snr_db < bound_db:
            return r.stage
    return None


@dataclass
class Accuracy:
    """`compare`'s result: B (the run under test) against A (a reference file or another run), stage by stage.

    `a` and `b` say what each side is: for a run, its label, backends, mode, resolved lowering and decode time
    (`decode_ms`, the median of `repeat` timed decodes); for a reference, its path."""

    model: str
    family: str
    frames: int
    bound_db: float
    a: dict[str, Any]
    b: dict[str, Any]
    stages: list[StageAccuracy] = field(default_factory=list)

    @property
    def first_below(self) -> str | None:
        return first_below(self.stages, self.bound_db)

    @property
    def snr(self) -> dict[str, float | None]:
        """Stage -> SNR in dB (None where not comparable)."""
        return {s.stage: s.snr_db for s in self.stages}

    @property
    def ok(self) -> bool:
        """Every comparable stage at or above the bound."""
        return self.first_below is None

    def rows(self) -> list[dict[str, Any]]:
        return [{**s.row(), "below": "yes" if s.snr_db is not None and s.snr_db < self.bound_db else ""}
                for s in self.stages]

    def summary(self) -> str:
        worst = [s for s in self.stages if s.snr_db is not None]
        low = min(worst, key=lambda s: s.snr_db) if worst else None
        where = self.first_below
        text = (f"B against A over {self.frames} frames: "
                + (f"lowest {db_text(low.snr_db)} at {low.stage}; " if low else "")
                + (f"first stage below {self.bound_db:g} dB: {where}" if where
                   else f"every stage at or above {self.bound_db:g} dB"))
        ms = [f"{self.a['decode_ms']:.2f} ms (A)"] if self.a.get("decode_ms") else []
        ms += [f"{self.b['decode_ms']:.2f} ms (B)"] if self.b.get("decode_ms") else []
        if ms:
            text += "; decode " + ", ".join(ms)
        return text

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stages"] = [{**asdict(s), "shape": list(s.shape), "snr_db": jsonable_db(s.snr_db)} for s in self.stages]
        d["first_below"] = self.first_below
        return d

    def to_json(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=1, default=str))
        return p


def db_text(x: float | None) -> str:
    """An SNR as a table shows it: `exact`, `52.3 dB`, or `-` where there is none."""
    if x is None:
        return "-"
    return "exact" if math.isinf(x) and x > 0 else f"{x:.1f} dB"


def jsonable_db(x: float | None) -> float | str | None:
    """An SNR as JSON can hold it: `inf` and `-inf` as text."""
    return x if x is None or math.isfinite(x) else ("inf" if x > 0 else "-inf")


def read_reference(path: str | Path) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
    """A reference `.npz` in the fixtures' format: (its `codes`, or for a decoder of latents its `latents`, or None;
    every other array by name)."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"reference {p}: no such file")
    try:
        with np.load(p, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in z.files}
    except (OSError, ValueError) as e:
        raise InvalidInputError(f"reference {p} is not a readable .npz of arrays: {e}") from e
    codes = arrays.pop("codes", None)
    if codes is None:
        codes = arrays.pop("latents", None)
    return codes, arrays


def parse_run(options: str | Mapping[str, Any] | Lowering | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(lowering options, backend options) of a run given as `'conv=im2col-f16 gelu=tanh backend=cpu'` (the
    command line's --against; separated by spaces or ';', `-` or `_` in names), a dict of the same, or a Lowering."""
    if options is None:
        return {}, {}
    if isinstance(options, Lowering):
        return dict((options.requested if getattr(options, "requested", None) else options).to_dict()), {}
    if isinstance(options, str):
        items: dict[str, Any] = {}
        for tok in shlex.split(options.replace(";", " ")):
            if "=" not in tok:
                raise InvalidOptionError(f"run option {tok!r}: expected NAME=VALUE (e.g. conv=im2col-f16)")
            k, v = tok.split("=", 1)
            items[k.strip().replace("-", "_")] = v.strip()
    elif isinstance(options, Mapping):
        items = {str(k).replace("-", "_"): v for k, v in options.items()}
    else:
        raise InvalidOptionError(f"a run's options: a string, a dict or a Lowering, not {type(options).__name__}")
    low_fields = set(Lowering().to_dict())
    low, bk = {}, {}
    for k, v in items.items():
        if k in low_fields:
            low[k] = _typed(k, v, type(getattr(Lowering(), k)))
        elif k in BACKEND_KEYS:
            bk[k] = _backend_value(k, v)
        else:
            known = ", ".join([*sorted(low_fields), *BACKEND_KEYS])
            raise InvalidOptionError(f"unknown run option {k!r}: one of {known}")
    return low, bk


def _typed(name: str, v: Any, kind: type) -> Any:
    if kind is int and isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            raise InvalidOptionError(f"run option {name}={v!r}: expected an integer") from None
    return v


def _backend_value(name: str, v: Any) -> Any:
    if not isinstance(v, str):
        return v
    if name in ("sched", "op_offload"):
        if v.lower() in ("none", "auto") and name == "sched":
            return None
        if v.lower() not in _BOOL:
            raise InvalidOptionError(f"run option {name}={v!r}: expected on/off (true/false)")
        return _BOOL[v.lower()]
    if name == "threads":
        return _typed(name, v, int)
    if name == "backend" and "," in v:
        return tuple(s.strip() for s in v.split(","))
    return v or None


def codes_to_decode(hp: Any, ref: str | Path | None, codes: Any, frames: Any, seed: int
                    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(the reference's stage arrays, the codes to decode): a reference's own codes (never beside `codes=`), else
    `codes`, else `frames` random frames (seeded), each validated against the decoder's hyperparameters."""
    ref_codes, ref_stages = read_reference(ref) if ref is not None else (None, {})
    if ref is not None:
        if ref_codes is None:
            raise InvalidInputError(f"reference {ref} has no 'codes' array: nothing to decode")
        if codes is not None:
            raise InvalidOptionError("a reference brings its own codes: give ref= or codes=, not both")
        return ref_stages, validate_codes(ref_codes, hp)
    if codes is not None:
        return ref_stages, validate_codes(codes, hp)
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise InvalidOptionError(f"frames={frames!r}: expected an integer >= 1 (or pass codes=)")
    return ref_stages, random_codes(hp, frames, seed)


def _run(model: Model, low: Lowering, spec: BackendSpec, codes: np.ndarray, repeat: int) -> dict[str, Any]:
    """Decode `codes` once with every stage kept, then `repeat` times for the time; what ran, stages and wav."""
    dec = Decoder(model, low, spec)
    try:
        out = dec.decode(codes, intermediates=True)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            dec.decode(codes)
            times.append((time.perf_counter() - t0) * 1e3)
        stages = dict(out.stages)
        stages[OUTPUT] = out.wav
        plan = dec.lowering
        return {
            "what": {
                "label": f"{dec.backend_label} {plan.label(not_applicable(model.hparams))}",
                "backend_label": dec.backend_label,
                "sched": dec.resolved_backends.sched,
                "threads": dec.resolved_backends.threads,
                "mode": plan.mode,
                "lowering_resolved": plan.to_dict(),
                "lowering_requested": plan.request_dict(),
                "decode_ms": float(np.median(times)) if times else 0.0,
                "repeat": repeat,
            },
            "stages": stages,
        }
    finally:
        dec.close()


def compare(
    model_or_path: Model | str | Path,
    ref: str | Path | None = None,
    against: str | Mapping[str, Any] | Lowering | None = None,
    *,
    codes: Any = None,
    frames: int | None = None,
    bound: float = DEFAULT_BOUND_DB,
    lowering: Lowering | None = None,
    backends: BackendSpec | None = None,
    repeat: int = 3,
    seed: int = 0,
    layout: str | None = None,
    **options: Any,
) -> Accuracy:
    """The SNR of every stage of one run (B) against a reference (`ref`, a `.npz` of stage activations in the
    fixtures' format, whose `codes` are decoded) or against another run (A: `against`, this run's options with
    some changed, e.g. `against="conv=im2col-f32 gelu=erf"` or `{"wtype": "f32", "backend": "cpu"}`).

    B's options: `lowering=Lowering(...)`, `backends=BackendSpec(...)`, or any of their fields as keywords
    (`conv="im2col-f16"`, `gelu="tanh"`, `backend="cpu"`, `threads=2`). Codes: the reference's, else `codes`,
    else `frames` random frames (seeded; 31 by default). `bound` (dB): `Accuracy.first_below` names the first
    stage below it. `repeat`: timed decodes per run (0: none). The file is read once."""
    if ref is not None and against is not None:
        raise InvalidOptionError("compare against a reference (ref=) or another run (against=), not both")
    if ref is None and against is None:
        raise InvalidOptionError("compare needs ref= (a .npz of stage activations) or against= (another run's "
                                 "options, e.g. 'conv=im2col-f32')")
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not math.isfinite(bound):
        raise InvalidOptionError(f"bound={bound!r}: expected a number of dB")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0:
        raise InvalidOptionError(f"repeat={repeat!r}: expected an integer >= 0")
    low_kw, bk_kw = parse_run(options)
    low_b = (lowering or Lowering()).replace(**low_kw) if low_kw else (lowering or Lowering())
    if getattr(low_b, "requested", None) is not None:
        low_b = low_b.requested
    spec_b = BackendSpec.from_kw(backends, **bk_kw) if bk_kw else (backends or BackendSpec())
    model = model_or_path if isinstance(model_or_path, Model) else load_model(model_or_path, layout=layout)
    hp = model.hparams
    arch = arch_of(hp)
    ref_stages, c = codes_to_decode(hp, ref, codes, 31 if frames is None else frames, seed)
    order = [s.name for s in arch.stages(hp)] + [OUTPUT]
    b = _run(model, low_b, spec_b, c, repeat)
    if ref is not None:
        base, a_what = ref_stages, {"label": f"reference {Path(ref).name}", "reference": str(ref)}
        known = set(order)
        extra = sorted(k for k in ref_stages if k not in known)
        if extra:
            a_what["not_compared"] = extra  # arrays the reference has that are not a stage of this family
    else:
        a_low_kw, a_bk_kw = parse_run(against)
        low_a = low_b.replace(**a_low_kw)
        spec_a = BackendSpec(**{**{k: getattr(spec_b, k) for k in BACKEND_KEYS}, **a_bk_kw})
        a = _run(model, low_a, spec_a, c, repeat)
        base, a_what = a["stages"], a["what"]
        a_what["changed"] = {**a_low_kw, **a_bk_kw}
    rows = stage_accuracy(b["stages"], base, order)
    return Accuracy(model=str(model.path), family=arch.name, frames=int(c.shape[1]), bound_db=float(bound),
                    a=a_what, b=b["what"], stages=rows)


__all__ = ["DEFAULT_BOUND_DB", "Accuracy", "StageAccuracy", "codes_to_decode", "compare", "db_text", "first_below",
           "jsonable_db", "parse_run", "read_reference", "snr_counting_nonfinite", "stage_accuracy"]
