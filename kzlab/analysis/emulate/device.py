"""The device's arithmetic on the host: a placed graph decoded with each product the device runs (and each pointwise
op whose kernel computes another function than ggml-cpu's) computed as its kernel computes it, stage by stage
against the host's F32 decode.

A placement says where each node would run and on which kernel path (a product's HMX or HVX); whether the device
then computes the right values is a question of that kernel's arithmetic: the conversions it makes (weights and
activations to F16 tiles), what it accumulates in, and its known defects (an F16 src1 read as F32 on HMX; GELU
computed as GELU_QUICK). This module decodes the very graph the simulator placed on the host's CPU backend, under
ggml's scheduler with an eval callback: after ggml computes a node the device would run on a named kernel path,
the callback overwrites its output with what that path computes from the same operands (`kernels.matmul`, at the
profile's `arith` release); a pointwise op of `kernels.UNARY` (the HTP's GELU is x * sigmoid(1.702 x)) is
overwritten the same way (`kernels.unary`). Every node after it then reads the device's values, as it would on
the device. The result is each stage's SNR against the host's own F32 decode of the same codes (and against a
reference of stage activations, when one is given), the first stage below the bound, the number of non-finite
samples, and both waveforms to listen to.

What is and is not emulated is recorded with the result: only the products (MUL_MAT) the device runs and the
pointwise ops of `kernels.UNARY` are computed as its kernels do; its other ops (HVX element-wise, norms, softmax)
are taken as the host computes them, and so are the nodes on the CPU. A node on a path that approximates its op
(a defect of kind `defects.APPROXIMATION`) is judged by this decode alone, so it must be emulated: a decode that
would compute it as the host does is refused rather than reported as right. Bytes a kernel reads past its
operand's end are a stated stand-in (zeros): on the device they are whatever follows the tensor in its buffer.
"""

from __future__ import annotations

import ctypes
import math
import time
import wave
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from ggml import ggml as g

from kzlab.analysis.accuracy import (
    DEFAULT_BOUND_DB,
    OUTPUT,
    StageAccuracy,
    codes_to_decode,
    db_text,
    jsonable_db,
    stage_accuracy,
)
from kzlab.analysis.emulate import htp as kernels
from kzlab.analysis.placement.defects import APPROXIMATION, kind_of
from kzlab.arch import arch_of
from kzlab.errors import BackendError, InvalidInputError, InvalidOptionError, KzlabError
from kzlab.graph.options import Lowering
from kzlab.loader import load_model
from kzlab.model.model import Model
from kzlab.runtime.profiler import tensor_ne, type_name
from kzlab.runtime.session import Session

#: what the bytes a kernel reads past its operand's end are taken to be (the device finds its buffer's next bytes)
PAST_END = "zeros"
#: the host decode every emulated one is compared against: ggml ops only, F32 activations, on the CPU backend
HOST_REFERENCE = Lowering(mode="portable")

_EVAL_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)
_TENSOR_P = ctypes.POINTER(g.ggml_tensor)


@dataclass
class EmulatedNode:
    """A node computed as the device's kernel computes it."""

    name: str
    stage: str
    op: str
    path: str
    defect: str = ""
    #: the defect's kind (`defects.KINDS`; "" for none): an approximation is judged by the decode's SNR
    defect_kind: str = ""
    nonfinite: int = 0  # non-finite values in its emulated output
    failed: str = ""  # the device's kernel returns an error for it (its output then taken as NaN), and why


@dataclass
class DeviceAccuracy:
    """An emulated decode of one placement: what the device would compute, against the host's F32 decode."""

    model: str
    family: str
    profile: str
    arith: str
    frames: int
    lowering: str
    lowering_resolved: dict[str, Any]
    sched_stages: list[str] | None
    weights_on: str
    bound_db: float
    emulated: list[EmulatedNode]
    #: device nodes computed as the host computes them, counted per op (their device arithmetic is not emulated)
    host_computed: dict[str, int]
    stages: list[StageAccuracy]
    #: against a reference of stage activations (`ref=`), when one was given
    reference: list[StageAccuracy] | None = None
    nonfinite: dict[str, int] = field(default_factory=dict)
    defects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wav: np.ndarray | None = field(default=None, repr=False)
    host_wav: np.ndarray | None = field(default=None, repr=False)
    sample_rate: int = 24000
    seconds: float = 0.0

    @property
    def snr_db(self) -> float | None:
        """The waveform's SNR against the host's F32 decode (non-finite samples counted as lost)."""
        return next((s.snr_db for s in self.stages if s.stage == OUTPUT), None)

    @property
    def first_stage_below(self) -> str | None:
        for s in self.stages:
            if s.snr_db is not None and s.snr_db < self.bound_db:
                return s.stage
        return None

    @property
    def defect_nodes(self) -> int:
        """Emulated nodes on a path that computes wrong values whatever the data (the output is then wrong)."""
        return sum(1 for n in self.emulated if n.defect and n.defect_kind != APPROXIMATION)

    @property
    def approximate_nodes(self) -> int:
        """Emulated nodes on a path that approximates their op: their effect is in the SNR, which the bound judges."""
        return sum(1 for n in self.emulated if n.defect and n.defect_kind == APPROXIMATION)

    @property
    def failed_nodes(self) -> int:
        """Products whose device kernel returns an error (the decode fails on the device)."""
        return sum(1 for n in self.emulated if n.failed)

    @property
    def correct(self) -> bool:
        """The device computes the right audio: no node on a path that computes wrong values or failing, no
        non-finite sample, every stage at or above the bound (which judges the nodes on an approximating path)."""
        return (not self.defect_nodes and not self.failed_nodes and not any(self.nonfinite.values())
                and self.first_stage_below is None)

    def accuracy(self) -> dict[str, Any]:
        """The what-if's summary of it: waveform SNR, first stage below the bound, defect nodes."""
        return {"snr_db": jsonable_db(self.snr_db), "first_stage_below": self.first_stage_below,
                "defect_nodes": self.defect_nodes, "approximate_nodes": self.approximate_nodes,
                "failed_nodes": self.failed_nodes,
                "nonfinite_samples": self.nonfinite.get(OUTPUT, 0),
                "bound_db": self.bound_db, "emulated_nodes": len(self.emulated), "arith": self.arith}

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("wav", "host_wav", "stages", "reference")}
        d["stages"] = [_row(s) for s in self.stages]
        d["reference"] = None if self.reference is None else [_row(s) for s in self.reference]
        d.update(correct=self.correct, snr_db=jsonable_db(self.snr_db), first_stage_below=self.first_stage_below,
                 defect_nodes=self.defect_nodes, approximate_nodes=self.approximate_nodes)
        return d

    def to_json(self, path: str | Path) -> Path:
        import json

        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=1))
        return p

    def playable(self, host: bool = False) -> np.ndarray:
        """The emulated waveform (or the host's, `host=True`) as a player takes it: non-finite samples as 0 (they are
        counted in `nonfinite`), clipped to [-1, 1] as a DAC would."""
        w = self.host_wav if host else self.wav
        if w is None:
            raise InvalidInputError("this result holds no waveform")
        pcm = np.nan_to_num(np.asarray(w, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        return np.clip(pcm, -1.0, 1.0).astype(np.float32)

    def save_wav(self, path: str | Path, host: bool = False) -> Path:
        """The emulated waveform (or the host's, `host=True`) as 16-bit PCM (`playable`)."""
        pcm = (self.playable(host).astype(np.float64) * 32767).astype("<i2")
        p = Path(path)
        with wave.open(str(p), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(self.sample_rate)
            f.writeframes(pcm.tobytes())
        return p

    @property
    def first_failure(self) -> str:
        """The first product whose device kernel fails, and why ("" for none)."""
        n = next((n for n in self.emulated if n.failed), None)
        return f"{n.name}: {n.failed}" if n else ""

    def summary(self) -> str:
        verdict = "RIGHT audio" if self.correct else "WRONG OUTPUT"
        snr = self.snr_db
        lines = [f"{self.profile} (arithmetic of {self.arith}), {self.frames} frames, {self.lowering}"
                 + (f", under the scheduler: {'+'.join(self.sched_stages)}" if self.sched_stages else ""),
                 f"  {verdict}: waveform {db_text(snr)} against the host's F32 decode"
                 + (f", {self.nonfinite.get(OUTPUT, 0)} non-finite samples" if self.nonfinite.get(OUTPUT) else "")
                 + (f"; first stage below {self.bound_db:g} dB: {self.first_stage_below}"
                    if self.first_stage_below else f"; every stage >= {self.bound_db:g} dB"),
                 f"  emulated: {len(self.emulated)} device node(s) ("
                 + ", ".join(f"{op} {p} {n}" for (op, p), n in Counter((n.op, n.path) for n in self.emulated).items())
                 + f"), {self.defect_nodes} on a defective path"
                 + (f", {self.approximate_nodes} on a path that approximates its op (judged by the bound)"
                    if self.approximate_nodes else "")
                 + (f", {self.failed_nodes} failing on the device (e.g. {self.first_failure})"
                    if self.failed_nodes else "")]
        w = max([len(s.stage) for s in self.stages] + [5])
        for s in self.stages:
            bad = self.nonfinite.get(s.stage, 0)
            lines.append(f"  {s.stage:<{w}} {db_text(s.snr_db):>10}" + (f"  {bad} non-finite" if bad else "")
                         + ("  < bound" if s.snr_db is not None and s.snr_db < self.bound_db else ""))
        for d in self.defects:
            what = "approximation" if kind_of(d) == APPROXIMATION else "defect"
            lines.append(f"  {what} {d['id']}: {d['title']} ({d['n_nodes']} nodes); fix: {d['fix']}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _row(s: StageAccuracy) -> dict[str, Any]:
    return {"stage": s.stage, "snr_db": jsonable_db(s.snr_db), "shape": list(s.shape), "note": s.note}


def _compare(test: dict[str, np.ndarray], ref: dict[str, np.ndarray], order: list[str]
             ) -> tuple[list[StageAccuracy], dict[str, int]]:
    """Each stage's accuracy (`stage_accuracy`: non-finite values counted as lost) and its non-finite count."""
    rows = stage_accuracy(test, ref, order)
    return rows, {r.stage: r.nonfinite for r in rows if r.snr_db is not None}


# ---- reading a node's operands as the device would find them ---------------------------------------------------
def operand(t) -> kernels.Operand:
    """One source tensor's memory (host memory: the CPU backend computes the graph), its type and layout, and the
    stand-in for the bytes past its end (`PAST_END`: one row's worth more than any kernel reads past it)."""
    c = t.contents
    nbytes = int(g.ggml_nbytes(t))
    raw = np.frombuffer(ctypes.string_at(c.data, nbytes), dtype=np.uint8) if nbytes else np.zeros(0, np.uint8)
    nb = tuple(int(c.nb[i]) for i in range(4))
    return kernels.Operand(raw=raw, type=type_name(t).lower(), ne=tuple(tensor_ne(t)) + (1,) * (4 - len(tensor_ne(t))),
                           nb=nb, after=np.zeros(2 * nb[1], dtype=np.uint8))


class _Emulator:
    """The eval callback: asks ggml to stop after each node to emulate, then overwrites its output."""

    def __init__(self, targets: dict[int, dict[str, Any]], release: str):
        self.targets = targets  # node address -> {path, node record}
        self.release = release
        self.error: BaseException | None = None
        self._fn = _EVAL_CALLBACK(self._cb)
        self.cfunc = ctypes.cast(self._fn, g.ggml_backend_sched_eval_callback)

    def _cb(self, addr, ask, _ud) -> bool:
        if ask:
            return addr in self.targets
        job = self.targets.get(addr)
        if job is None:
            return True
        try:
            t = ctypes.cast(addr, _TENSOR_P)
            c = t.contents
            try:
                if job["kind"] == "unary":
                    out = kernels.unary(job["node"].op, operand(c.src[0]), self.release)
                else:
                    out = kernels.matmul(operand(c.src[0]), operand(c.src[1]), job["path"], self.release)
            except BackendError as e:  # the device's kernel fails (an error status): nothing it computes is kept
                job["node"].failed = str(e)
                out = np.full(int(g.ggml_nelements(t)), np.nan, dtype=np.float32)
            except InvalidInputError as e:
                raise InvalidInputError(f"{c.name.decode()} ({job['path']}): {e}") from None
            out = np.ascontiguousarray(out, dtype=np.float32)
            if out.nbytes != int(g.ggml_nbytes(t)) or type_name(t) != "F32":
                raise KzlabError(f"emulated {c.name.decode()}: {out.nbytes} bytes for an output of "
                                 f"{int(g.ggml_nbytes(t))} ({type_name(t)})")
            ctypes.memmove(c.data, out.ctypes.data, out.nbytes)
            job["node"].nonfinite = int((~np.isfinite(out)).sum())
        except BaseException as e:  # handed to the caller: ggml must not see a Python exception
            self.error = e
            return False
        return True


def _decode(model: Model, low: Lowering, codes: np.ndarray, threads: int | None,
            targets: dict[tuple[str, int], dict[str, Any]] | None = None, release: str = ""
            ) -> tuple[dict[str, np.ndarray], dict[str, Any], list[EmulatedNode]]:
    """Every stage's output of one decode on the CPU backend under the scheduler; with `targets` ((node name,
    occurrence) -> path and node record), those nodes emulated."""
    kw = {} if threads is None else {"threads": threads}
    s = Session(model, low, backend="cpu", sched=True, **kw)
    done: list[EmulatedNode] = []
    try:
        frames = int(codes.shape[1])
        bg = s.graph(frames, stages=True)
        emu = None
        if targets is not None:
            by_addr: dict[int, dict[str, Any]] = {}
            seen: dict[str, int] = {}
            for t in bg.nodes():
                name = t.contents.name.decode()
                k = seen.get(name, 0)
                seen[name] = k + 1
                job = targets.get((name, k))
                if job is not None:
                    by_addr[ctypes.cast(t, ctypes.c_void_p).value] = job
                    done.append(job["node"])
            missing = len(targets) - len(by_addr)
            if missing:
                raise KzlabError(f"{missing} placed node(s) to emulate are not in the decoded graph: the graph differs "
                                 "from the placed one")
            emu = _Emulator(by_addr, release)
            s.backends.prepare(bg)
            g.ggml_backend_sched_set_eval_callback(s.backends.sched, emu.cfunc, None)
        try:
            out = s.run(frames, {"codes": codes}, stages=True)
        finally:
            if emu is not None:
                g.ggml_backend_sched_set_eval_callback(s.backends.sched, g.ggml_backend_sched_eval_callback(), None)
        if emu is not None and emu.error is not None:
            raise emu.error
        return out, s.plan.to_dict(), done
    finally:
        s.close()


def emulate(
    model_or_path: Model | str | Path,
    profile: Any = "hexagon-v0.15.3",
    frames: int = 31,
    lowering: Lowering | dict | None = None,
    *,
    codes: Any = None,
    seed: int = 0,
    stages: list[str] | str | None = None,
    weights_on: str = "htp",
    bound: float = DEFAULT_BOUND_DB,
    ref: str | Path | None = None,
    threads: int | None = None,
    placement: Any = None,
    host: dict[str, np.ndarray] | None = None,
    layout: str | None = None,
    **lowering_kw: Any,
) -> DeviceAccuracy:
    """Decode `codes` (else `frames` seeded random frames) as the device of `profile` (a profile name, a path, a
    `Capabilities` with what-if changes, or `NAME,ITEM,...` such as `hexagon-v0.15.3,hmx=0`) would compute the
    placed graph, and compare every stage with the host's F32 decode (`HOST_REFERENCE`) of the same codes, and
    with `ref` (a `.npz` of stage activations, whose codes are then decoded) when given.

    The graph is the simulator's for `lowering` (portable mode; the device's choices for `auto`), placed as
    `kzlab.simulate` places it (`stages`, `weights_on`), or `placement` when one is given. `host`: the host's
    stage outputs for these codes when already decoded (a what-if reuses them across configurations)."""
    from kzlab.analysis.placement.capabilities import Capabilities, load_changed
    from kzlab.analysis.placement.simulate import simulate

    t0 = time.perf_counter()
    if isinstance(bound, bool) or not isinstance(bound, int | float) or not math.isfinite(bound):
        raise InvalidOptionError(f"bound={bound!r}: expected a number of dB")
    model = model_or_path if isinstance(model_or_path, Model) else load_model(model_or_path, layout=layout)
    if isinstance(profile, str) and "," in profile:
        name, _, items = profile.partition(",")
        profile = load_changed(name.strip(), items)
    # the codes first (the reference read once): without a placement, their length is the graph's
    ref_stages, c = codes_to_decode(model.hparams, ref, codes, frames if placement is None else
                                    placement.config["frames"], seed)
    if placement is None:
        caps = profile if isinstance(profile, Capabilities) else load_changed(profile)
        if isinstance(lowering, dict):
            lowering = Lowering.from_dict(lowering)
        placement = simulate(model, caps, frames=int(c.shape[1]), lowering=lowering, weights_on=weights_on,
                             stages=stages, **lowering_kw)
    cfg = placement.config
    release = cfg.get("arith", "")
    if int(c.shape[1]) != int(cfg["frames"]):
        raise InvalidInputError(f"{c.shape[1]} frames of codes for a placement of {cfg['frames']} frames")
    dev = cfg["backends"][0]
    targets: dict[tuple[str, int], dict[str, Any]] = {}
    host_computed: dict[str, int] = {}
    views = ("NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")
    unjudged: list[str] = []
    for n, k, kind in device_nodes(placement):
        if n.op in views:
            continue
        if kind:
            path = n.path or kernels.POINTWISE_PATH
            targets[(n.name, k)] = {"kind": kind, "path": path, "node": EmulatedNode(
                n.name, n.stage, n.op, path, n.defect, n.defect_kind if n.defect else "")}
        else:
            host_computed[n.op] = host_computed.get(n.op, 0) + 1
            if n.defect and n.defect_kind == APPROXIMATION:
                unjudged.append(n.name)
    if targets and not release:
        raise InvalidOptionError(f"profile {cfg['profile']} names no device arithmetic (`arith`): its products "
                                 "cannot be emulated")
    if unjudged:
        raise KzlabError(f"{len(unjudged)} node(s) on a path that approximates their op are not emulated at "
                         f"{release or 'no release'} (e.g. {unjudged[0]}): the decode could not judge them")
    hp = model.hparams
    arch = arch_of(hp)
    order = [s.name for s in arch.stages(hp)] + [OUTPUT]
    low = Lowering.from_dict(cfg["lowering_resolved"])
    out, plan, done = _decode(model, low, c, threads, targets, release)
    if plan != cfg["lowering_resolved"]:
        raise KzlabError(f"the decoded graph's lowering {plan} is not the placed one {cfg['lowering_resolved']}")
    if host is None:
        host = _decode(model, HOST_REFERENCE, c, threads)[0]
    rows, bad = _compare(out, host, order)
    reference = None
    if ref is not None:
        reference = _compare(out, ref_stages, order)[0]
    notes = []
    if host_computed:
        notes.append(f"{sum(host_computed.values())} other node(s) on {dev} computed as the host computes them "
                     f"(their device arithmetic is not emulated): "
                     + ", ".join(f"{k} {v}" for k, v in sorted(host_computed.items())))
    if any(n.defect and n.defect_kind != APPROXIMATION for n in done):
        notes.append(f"bytes read past an operand's end taken as {PAST_END} (on the device: the buffer's next bytes)")
    res = DeviceAccuracy(
        model=str(model.path), family=arch.name, profile=cfg["profile"], arith=release, frames=int(c.shape[1]),
        lowering=cfg["lowering_label"], lowering_resolved=cfg["lowering_resolved"],
        sched_stages=cfg.get("sched_stages"), weights_on=cfg["weights_on"], bound_db=float(bound), emulated=done,
        host_computed=host_computed, stages=rows, reference=reference, nonfinite=bad,
        defects=list(getattr(placement, "defects", [])), notes=notes,
        wav=np.asarray(out[OUTPUT]).reshape(-1), host_wav=np.asarray(host[OUTPUT]).reshape(-1),
        sample_rate=int(hp.sample_rate),
    )
    res.seconds = time.perf_counter() - t0
    return res


def device_nodes(placement: Any) -> list[tuple[Any, int, str | None]]:
    """Each node the placement puts on its device (the first backend), with its occurrence among the nodes of its
    name and what of it is emulated at the profile's `arith` release (`kernels.emulated_kind`: "matmul", "unary"
    or None)."""
    dev = placement.config["backends"][0]
    release = placement.config.get("arith", "")
    out, seen = [], {}
    for n in placement.nodes:
        k = seen.get(n.name, 0)
        seen[n.name] = k + 1
        if n.backend == dev:
            out.append((n, k, kernels.emulated_kind(n.op, n.path, release)))
    return out


def host_stages(model: Model, codes: np.ndarray, threads: int | None = None) -> dict[str, np.ndarray]:
    """The host's F32 decode of `codes`, every stage kept (what `emulate` compares against; reuse it with `host=`)."""
    return _decode(model, HOST_REFERENCE, codes, threads)[0]
