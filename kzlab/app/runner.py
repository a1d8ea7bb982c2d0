"""One workbench run, with no widgets: resolve the decoder and input, decode, profile, simulate placement.

The workbench, `kzlab report` and `kzlab demo` all call `execute(RunSpec(...))`, so a run made in the widget
is the same computation as one made from the command line. `execute` never raises for a bad file, option
or input: the error text goes into `RunRecord.error`, so a caller (a widget callback in a kernel) cannot
be taken down by it. Progress is reported per step through a callback; a cancel request is honoured
between steps and, during the decode, at the next ggml node boundary (`Session.cancel()`).
"""

from __future__ import annotations

import importlib
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.app.builtins import SPEECH, fixture_codes, resolve_model
from kzlab.codes import load_codes, random_codes, takes_codes
from kzlab.environment import machine_info
from kzlab.errors import Cancelled, InvalidInputError, InvalidOptionError, KzlabError
from kzlab.graph.options import Lowering
from kzlab.runtime.spec import BackendSpec

INPUTS = ("fixture", "random", "npy", "audio")
STEPS = ("load", "input", "decode", "profile", "placement")
HEXAGON_PROFILES = ("hexagon-v0.15.2", "hexagon-v0.15.3")


@dataclass
class RunSpec:
    """Everything one run needs; the workbench's widgets map one to one onto these fields."""

    model: str = "synthetic"
    input: str = "random"  # fixture | random | npy | audio (audio: the known-answer decoder only)
    frames: int = 8
    npy_path: str = ""
    audio_path: str = ""
    backend: str | list[str] = "auto"
    threads: int | None = None
    sched: bool | None = None  # True: under the scheduler; False: none; None: as the backends need
    op_offload: bool = True
    weights_on: str | None = None
    lowering: dict = field(default_factory=dict)
    repeat: int = 1
    profile: bool = True  # False: decode (and placement) only
    hexagon_profile: str | None = None
    #: what-if changes to the Hexagon profile (`+SIN -CONCAT hmx=0`) and the stages under its scheduler
    #: (`decoder`; empty: the whole graph)
    hexagon_changes: str = ""
    hexagon_stages: str = ""
    #: with a Hexagon profile: put milliseconds and bytes on the placement (a CPU-only profile of the portable graph
    #: is taken for its CPU nodes), scaled to `cpu_baseline_ms` (the CPU-only decode measured on the device) if set
    predict: bool = False
    cpu_baseline_ms: float | None = None
    label: str = ""
    #: a reference `.npz` of stage activations (the fixtures' format): its codes are decoded (whatever `input`
    #: says) and every stage is compared with it (`RunRecord.accuracy`); `bound` (dB) names the first stage below
    ref: str = ""
    bound: float = 40.0
    #: hyperparameters the file does not carry, given (`{"group_norm_groups": 16}`; kzlab.formats.given)
    hparams: dict = field(default_factory=dict)

    def lowering_obj(self) -> Lowering:
        return Lowering.from_dict(dict(self.lowering))

    def backend_spec(self) -> BackendSpec:
        backend = tuple(self.backend) if isinstance(self.backend, list | tuple) else self.backend
        return BackendSpec(backend, self.threads, self.sched, self.op_offload, self.weights_on or None)


@dataclass
class RunRecord:
    """What a run produced. `profile` and `placement` are None when that step was not asked for or failed
    (the reason is in `notes`); `error` is set when the run as a whole failed."""

    spec: RunSpec
    label: str
    model_path: str = ""
    wav: np.ndarray | None = None
    sample_rate: int = 24000
    decode: Any = None  # DecodeOutput with stages
    decode_s: float = 0.0
    profile: Any = None
    placement: Any = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    reference: np.ndarray | None = None  # the recording a known-answer latent came from
    machine: dict = field(default_factory=dict)
    #: what ran, resolved once when the decoder opened: backends (names, sched, threads...), mode, lowering
    backends_resolved: dict = field(default_factory=dict)
    backend_label: str = ""
    mode: str = ""
    lowering_resolved: dict = field(default_factory=dict)
    #: the decoder's family (kzlab.arch): its name and label, its stages in order, and the lowering options that
    #: change nothing in it (option -> why)
    family: str = ""
    family_label: str = ""
    stage_names: list[str] = field(default_factory=list)
    not_applicable: dict = field(default_factory=dict)
    #: code frames decoded; the per-stage comparison with `spec.ref` (a `kzlab.analysis.accuracy.Accuracy`)
    frames: int = 0
    accuracy: Any = None
    #: the codes' codebook count (the first n of the decoder's; the profile and placement are of that graph too);
    #: None for a decoder of latents
    codebooks_used: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def config(self) -> dict:
        """The run configuration as plain values (for tables and reports): what was asked (`*_requested`)
        next to what ran (backend_label, sched, mode, lowering_resolved)."""
        d = asdict(self.spec)
        d["backend_requested"] = d.pop("backend")
        d["sched_requested"] = d.pop("sched")
        d["lowering_requested"] = dict(self.spec.lowering)
        d.pop("lowering")
        d["model_path"] = self.model_path
        d["backend_label"] = self.backend_label
        d["sched"] = self.backends_resolved.get("sched")
        d["threads"] = self.backends_resolved.get("threads", d["threads"])
        d["mode"] = self.mode
        d["lowering_resolved"] = dict(self.lowering_resolved)
        d["family"] = self.family
        d["codebooks_used"] = self.codebooks_used
        return d


def optional_api(module: str, name: str):
    """A public function of an analysis module, or None when this installation does not have it."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ModuleNotFoundError, AttributeError):
        return None


class Canceller:
    """A cancel flag shared by the caller and the worker; also stops a decode in progress."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.session = None

    def cancel(self) -> None:
        self.event.set()
        if self.session is not None:
            self.session.cancel()

    def check(self) -> None:
        if self.event.is_set():
            raise Cancelled("run cancelled")


def input_of(spec: RunSpec, dec) -> tuple[str, np.ndarray, np.ndarray | None]:
    """A run's input for this decoder: ('codes', codes, None) or ('latent', latent, reference recording)."""
    hp = dec.hparams
    if spec.ref:
        from kzlab.analysis.accuracy import read_reference

        codes, _ = read_reference(spec.ref)
        if codes is None:
            raise InvalidInputError(f"reference {spec.ref} has no 'codes' (or 'latents') array: nothing to decode")
        return "codes", codes, None
    if spec.input == "fixture":
        if not takes_codes(hp):
            raise InvalidInputError("the fixture input is codes, and this decoder takes latents: pick 'random' "
                                    "(standard normal latents), 'npy' (a latents file) or a reference")
        return "codes", fixture_codes(hp), None
    if spec.input == "random":
        return "codes", random_codes(hp, int(spec.frames)), None
    if spec.input == "npy":
        if not spec.npy_path:
            raise InvalidInputError("input 'npy' needs a codes file path")
        return "codes", load_codes(spec.npy_path), None
    if spec.input == "audio":
        from kzlab.audio import read_wav
        from kzlab.formats.known_answer import audio_to_latent

        if not dec.model.metadata.get("kzlab.known_answer"):
            raise InvalidInputError("audio input needs the known-answer decoder (pick 'known-answer')")
        wav, _ = read_wav(spec.audio_path or SPEECH, hp.sample_rate)
        if spec.frames and spec.frames > 0:
            wav = wav[: int(spec.frames) * dec.arch.samples_per_frame(hp)]
        return "latent", audio_to_latent(wav, hp), wav
    raise InvalidOptionError(f"input {spec.input!r}: one of {', '.join(INPUTS)}")


def peek_family(model: str) -> Any | None:
    """The decoder family (`kzlab.arch.Arch`) of a model field's value, from the file's header and tensor names
    without loading its weights: what the Workbench shows before a run. None when it cannot tell yet (a built-in
    not built yet, no such file, a file no family claims); the run itself then says why. A preview: it never
    raises (a damaged file is the run's to report)."""
    s = str(model).strip()
    try:
        from kzlab.app.builtins import BUILTINS, builtin_path
        from kzlab.arch import detect, get_arch
        from kzlab.formats import reader
        from kzlab.loader import detect_layout, layout_by_names, layout_family

        p = builtin_path(s) if s in BUILTINS else Path(s).expanduser()
        if not s or not p.exists():
            return None
        raw = reader.read(p)
        lm = detect_layout(raw) or layout_by_names(raw)
        return get_arch(layout_family(lm)) if lm is not None else detect(raw.architecture, list(raw.tensors))
    except Exception:  # a widget callback must not fail on what the user is still typing
        return None


def _frames_of(dec: Any, kind: str, x: np.ndarray) -> int:
    """Code frames of a stage input `x` (its length over the stage's frames per code frame, as the family says)."""
    stage = dec.arch.stage_aliases.get(kind, kind)
    return max(1, x.shape[1] // dec.arch.stage_input_shape(dec.hparams, stage, 1)[1])


def _prediction_inputs(spec: RunSpec, rec: RunRecord, model, codes, low: Lowering, prof_fn) -> dict:
    """What `simulate(predict=...)` needs: a CPU-only profile of the portable graph (this run's own profile when it
    is one, else one taken now) and the CPU-only baseline to scale it to."""
    portable = low.portable()
    own = rec.profile
    if own is not None and own.config.get("backend") == ["cpu"] and own.config.get("mode") == "portable" and (
        own.config.get("lowering_resolved") == portable.resolve(cpu_only=True).to_dict()
    ):
        cpu_profile = own
    else:
        if prof_fn is None:
            raise InvalidOptionError("a prediction needs the profiler (kzlab.analysis.profile)")
        rec.notes.append("a CPU-only profile of the portable graph was taken for the prediction's CPU nodes")
        cpu_profile = prof_fn(model, codes=codes, backends=BackendSpec("cpu", spec.threads, False),
                              lowering=portable, repeat=max(1, int(spec.repeat)), warmup=1, peak=False, progress=False)
    return {"cpu_profile": cpu_profile, "cpu_baseline_ms": spec.cpu_baseline_ms or None}


def _reference_accuracy(spec: RunSpec, rec: RunRecord):
    """This run's stages against the reference's (`spec.ref`), in the family's stage order."""
    from kzlab.analysis.accuracy import OUTPUT, Accuracy, read_reference, stage_accuracy
    from kzlab.report.render import what_ran

    _, ref = read_reference(spec.ref)
    rows = stage_accuracy({**rec.decode.stages, OUTPUT: rec.wav}, ref, [*rec.stage_names, OUTPUT])
    return Accuracy(model=rec.model_path, family=rec.family, frames=rec.frames, bound_db=float(spec.bound),
                    a={"label": f"reference {Path(spec.ref).name}", "reference": spec.ref},
                    b={"label": rec.label, **what_ran(rec)}, stages=rows)


def execute(
    spec: RunSpec,
    progress: Callable[[float, int, str], None] | None = None,
    canceller: Canceller | None = None,
) -> RunRecord:
    """Run `spec`; never raises for kzlab errors (they land in `record.error`).

    `progress(i, n, text)`: step i of n is starting; i is fractional while a step reports its own progress
    (the profile's runs)."""
    from kzlab.loader import load_model
    from kzlab.runtime.decoder import Decoder

    canc = canceller or Canceller()
    rec = RunRecord(spec=spec, label=spec.label or "run", machine=machine_info())
    n = len(STEPS)

    def step(i: float, text: str) -> None:
        canc.check()
        if progress:
            progress(i, n, text)

    dec = None
    try:
        step(0, "loading the decoder")
        path = resolve_model(spec.model, progress=lambda m: progress(0, n, m) if progress else None)
        rec.model_path = str(path)
        if not spec.label:
            rec.label = Path(path).stem
        low = spec.lowering_obj()
        # the file is read once: the decode, the profile and the placement all take this Model
        model = load_model(path, hparams=dict(spec.hparams) or None)
        if model.hparams_given:  # the loader's notes say who gave them: the user, or the layout map
            rec.notes += [n for n in model.notes if n.startswith("hyperparameters given")]
        dec = Decoder(model, low, spec.backend_spec())
        hp = model.hparams
        rec.family, rec.family_label = dec.arch.name, dec.arch.label
        rec.stage_names = [s.name for s in dec.arch.stages(hp)]
        rec.not_applicable = dict(getattr(dec.arch, "not_applicable", {}) or {})
        canc.session = dec.session
        rec.backends_resolved = dec.resolved_backends.to_dict()
        rec.backend_label, rec.mode = dec.backend_label, dec.mode
        rec.lowering_resolved = dec.lowering.to_dict()
        if not spec.label:
            rec.label = f"{rec.label} {rec.backend_label} {rec.mode}"
        rec.sample_rate = dec.sample_rate
        step(1, "preparing the input")
        kind, x, rec.reference = input_of(spec, dec)
        step(2, "decoding")
        t0 = time.perf_counter()
        out = dec.decode(x, intermediates=True) if kind == "codes" else dec.decode_from("latent", x, intermediates=True)
        rec.decode_s = time.perf_counter() - t0
        rec.decode, rec.wav = out, out.wav
        rec.frames = int(x.shape[1]) if kind == "codes" else _frames_of(dec, kind, x)
        rec.codebooks_used = out.codebooks_used
        if out.codebooks_used is not None:  # the profile and the placement below: the graph this decode ran
            model = model.for_codebooks(out.codebooks_used)
        if spec.ref:
            rec.accuracy = _reference_accuracy(spec, rec)
        canc.session = None
        step(3, "profiling")
        prof_fn = optional_api("kzlab.analysis.profile", "profile")
        if not spec.profile:
            rec.notes.append("not profiled (profile=False)")
        elif prof_fn is None:
            rec.notes.append("profiler not available in this installation (kzlab.analysis.profile)")
        else:
            codes = x if kind == "codes" else random_codes(dec.hparams, _frames_of(dec, kind, x))
            try:
                def within(done: int, total: int) -> None:  # the step moves with the profile's runs
                    step(3 + done / total, f"profiling: run {done}/{total}")

                rec.profile = prof_fn(
                    model,
                    codes=codes,
                    backends=spec.backend_spec(),
                    lowering=low,
                    progress=within if progress else None,
                    repeat=max(1, int(spec.repeat)),
                    warmup=1,
                )
            except KzlabError as e:
                rec.notes.append(f"profile failed: {e}")
        step(4, "simulating placement")
        if spec.hexagon_profile:
            sim = optional_api("kzlab.analysis.placement.simulate", "simulate")
            if sim is None:
                rec.notes.append("placement simulator not available in this installation")
            else:
                frames = x.shape[1] if kind == "codes" else _frames_of(dec, kind, x)
                codes = x if kind == "codes" else random_codes(dec.hparams, frames)
                try:
                    predict = _prediction_inputs(spec, rec, model, codes, low, prof_fn) if spec.predict else None
                    # the device's graph is the portable one whatever this run's mode (fast is CPU-only)
                    # a what-if on the profile, refused when unknown
                    load_changed = optional_api("kzlab.analysis.placement.capabilities", "load_changed")
                    caps = load_changed(spec.hexagon_profile, spec.hexagon_changes.strip())
                    rec.placement = sim(
                        model, profile=caps, frames=frames, lowering=low.portable(), weights_on="htp",
                        predict=predict, stages=spec.hexagon_stages.strip() or None,
                    )
                except KzlabError as e:
                    rec.notes.append(f"placement failed: {e}")
        if progress:
            progress(n, n, "done")
    except Exception as e:
        record_error(rec, e)
    finally:
        if dec is not None:
            dec.close()
    return rec


def record_error(rec: Any, e: Exception) -> None:
    """A use case's error into its record (`error`, and for a bug its traceback in `notes`): a run from the
    Workbench never raises, so a bug cannot kill the kernel; the widget shows it."""
    if isinstance(e, Cancelled):
        rec.error = f"cancelled: {e}"
    elif isinstance(e, KzlabError):
        rec.error = str(e)
    else:
        rec.error = f"{type(e).__name__}: {e}"
        rec.notes.append(traceback.format_exc(limit=4))


__all__ = [
    "Canceller", "HEXAGON_PROFILES", "INPUTS", "RunRecord", "RunSpec", "execute", "input_of", "machine_info",
    "peek_family",
]
