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
import functools
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
    #: what computed it: HOST_KERNEL (ggml-cpu's own MUL_MAT is the kernel's arithmetic: `kernels.host_computes`),
    #: HOST_KERNEL_F16 (the same, its result rounded to F16), or the emulation's engine (`kernels.matmul`)
    computed_by: str = ""


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
    #: the device's arithmetic is emulated (a profile's release, or the host itself): else `correct` is not known
    arith_emulated: bool = True
    #: the stage the decode stopped after, below the bound (`emulate(stop_below_bound=True)`); None: decoded whole
    stopped_at: str | None = None

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
    def correct(self) -> bool | None:
        """The device computes the right audio: no node on a path that computes wrong values or failing, no
        non-finite sample, every stage at or above the bound (which judges the nodes on an approximating path).
        None where nothing says it is wrong but the device's arithmetic is not emulated (not known)."""
        if (self.defect_nodes or self.failed_nodes or any(self.nonfinite.values())
                or self.first_stage_below is not None):
            return False
        return True if self.arith_emulated else None

    def accuracy(self) -> dict[str, Any]:
        """The what-if's summary of it: waveform SNR, first stage below the bound, defect nodes."""
        return {"snr_db": jsonable_db(self.snr_db), "first_stage_below": self.first_stage_below,
                "defect_nodes": self.defect_nodes, "approximate_nodes": self.approximate_nodes,
                "failed_nodes": self.failed_nodes,
                "nonfinite_samples": self.nonfinite.get(OUTPUT, 0),
                "bound_db": self.bound_db, "emulated_nodes": len(self.emulated), "arith": self.arith,
                "arith_emulated": self.arith_emulated, "stopped_at": self.stopped_at}

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
        verdict = {True: "RIGHT audio", False: "WRONG OUTPUT", None: "NOT EMULATED"}[self.correct]
        snr = self.snr_db
        arith = (f"arithmetic of {self.arith}" if self.arith else
                 "the host's arithmetic" if self.arith_emulated else "its arithmetic not emulated")
        lines = [f"{self.profile} ({arith}), {self.frames} frames, {self.lowering}"
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
    """The eval callback: asks ggml to stop after each node it computes itself (ggml computes none of them: their op
    is NONE while the graph runs), then writes its output; with `watch`, checks each stage's output against the
    host's as it is computed and stops the decode at the first one below the bound."""

    def __init__(self, jobs: dict[int, dict[str, Any]], release: str, products: kernels.Products,
                 watch: dict[int, str] | None = None, check: Any = None):
        self.jobs = jobs  # node address -> {kind, path, node record, host: `kernels.host_computes` or None}
        self.release = release
        self.products = products
        self.watch = watch or {}  # stage output address -> stage name
        self.check = check  # stage name, tensor -> True to go on
        self.error: BaseException | None = None
        self.stopped_at: str | None = None
        self._fn = _EVAL_CALLBACK(self._cb)
        self.cfunc = ctypes.cast(self._fn, g.ggml_backend_sched_eval_callback)

    def _cb(self, addr, ask, _ud) -> bool:
        if ask:
            return self.stopped_at is not None or addr in self.jobs or addr in self.watch
        if self.stopped_at is not None:
            return False
        try:
            job = self.jobs.get(addr)
            if job is not None:
                self._compute(ctypes.cast(addr, _TENSOR_P), job)
            stage = self.watch.get(addr)
            if stage is not None and not self.check(stage, ctypes.cast(addr, _TENSOR_P)):
                self.stopped_at = stage
                return False
        except BaseException as e:  # handed to the caller: ggml must not see a Python exception
            self.error = e
            return False
        return True

    def _compute(self, t, job: dict[str, Any]) -> None:
        c = t.contents
        node = job["node"]
        if job.get("host") is not None:  # ggml-cpu computed it as the device's kernel does
            self._host_computed(t, job)
            return
        try:
            if job["kind"] == "unary":
                out = kernels.unary(node.op, operand(c.src[0]), self.release)
            else:
                out = kernels.matmul(operand(c.src[0]), operand(c.src[1]), job["path"], self.release,
                                     products=self.products)
        except BackendError as e:  # the device's kernel fails (an error status): nothing it computes is kept
            node.failed = str(e)
            out = np.full(int(g.ggml_nelements(t)), np.nan, dtype=np.float32)
        except InvalidInputError as e:
            raise InvalidInputError(f"{c.name.decode()} ({job['path'] or 'the host'}): {e}") from None
        out = np.ascontiguousarray(out, dtype=np.float32)
        if out.nbytes != int(g.ggml_nbytes(t)) or type_name(t) != "F32":
            raise KzlabError(f"emulated {c.name.decode()}: {out.nbytes} bytes for an output of "
                             f"{int(g.ggml_nbytes(t))} ({type_name(t)})")
        ctypes.memmove(c.data, out.ctypes.data, out.nbytes)
        node.nonfinite = int(out.size - np.count_nonzero(np.isfinite(out)))

    def _host_computed(self, t, job: dict[str, Any]) -> None:
        """A product ggml-cpu computed as the device's kernel does (`kernels.host_computes`): its operands checked as
        the kernel would refuse them, its result rounded to F16 where the device stores it so (HMX), its non-finite
        values counted."""
        c = t.contents
        kernels.check_operands(_meta(c.src[0]), _meta(c.src[1]), job["path"], self.release)
        n = int(g.ggml_nelements(t))
        out = np.ctypeslib.as_array(ctypes.cast(c.data, ctypes.POINTER(ctypes.c_float)), shape=(n,))
        if job["host"] == kernels.F16_RESULT:
            out[:] = widen_f16(to_f16(out))
        job["node"].nonfinite = int(n - np.count_nonzero(np.isfinite(out)))


@dataclass(frozen=True)
class _Meta:
    """A source tensor's type and layout, as `kernels.check_operands` reads them."""

    type: str
    ne: tuple[int, ...]
    nb: tuple[int, ...]


def _meta(t) -> _Meta:
    ne = tuple(tensor_ne(t))
    return _Meta(type_name(t).lower(), ne + (1,) * (4 - len(ne)), tuple(int(t.contents.nb[i]) for i in range(4)))


class BlasProducts(kernels.Products):
    """Products (`kernels.Products`) at the host's speed: the activations rounded to F16 by ggml-cpu's converter
    (F16C, round to nearest even: `kernels.host_computes` has the lines), the exact F16 x F16 products, or F32 ones,
    summed in float32 by numpy's BLAS (its order). numpy's own F16 casts take a scalar path, and float64 sums
    twice the time of float32 ones: the reference engine (`kernels.EXACT`) costs several decodes' time on a
    full-size decoder. A row holding a NaN gives NaN without a product (`kernels.exact_product` has why)."""

    name = "F16C rounding, BLAS float32 sums"

    def f16(self, a: np.ndarray, w: np.ndarray) -> np.ndarray:
        a32 = widen_f16(a if a.dtype == np.float16 else to_f16(a))
        w32 = widen_f16(w) if w.dtype == np.float16 else np.ascontiguousarray(w, dtype=np.float32)
        return kernels.nan_rows_matmul(a32, w32)

    def f32(self, a: np.ndarray, w: np.ndarray) -> np.ndarray:
        return kernels.nan_rows_matmul(np.ascontiguousarray(a, dtype=np.float32),
                                       np.ascontiguousarray(w, dtype=np.float32))


def to_f16(x: np.ndarray) -> np.ndarray:
    """F32 -> F16 by ggml-cpu's converter (F16C, round to nearest even): `kernels.f32_to_f16`'s values, NaN payloads
    aside, at the hardware's speed."""
    return _convert(x, np.float32, np.float16, g.ggml_cpu_fp32_to_fp16)


def widen_f16(h: np.ndarray) -> np.ndarray:
    """F16 -> F32 (exact) by ggml-cpu's converter."""
    return _convert(h, np.float16, np.float32, g.ggml_cpu_fp16_to_fp32)


_C_TYPES = {np.float32: ctypes.c_float, np.float16: g.ggml_fp16_t}


def _convert(x: np.ndarray, src: type, dst: type, fn) -> np.ndarray:
    """One of ggml-cpu's row converters over a whole array (`fn(src*, dst*, n)`)."""
    x = np.ascontiguousarray(x, dtype=src)
    out = np.empty(x.shape, dst)
    if x.size:
        fn(x.ctypes.data_as(ctypes.POINTER(_C_TYPES[src])), out.ctypes.data_as(ctypes.POINTER(_C_TYPES[dst])), x.size)
    return out


def product_engine() -> kernels.Products:
    """The engine of F16 products a decode takes: `BlasProducts` where `products_probe` finds ggml-cpu's converter and
    F16 products as `kernels.host_computes` has them, else the reference (numpy, float64 sums)."""
    return BlasProducts() if products_probe()[0] else kernels.EXACT


@functools.lru_cache(maxsize=1)
def products_probe() -> tuple[bool, str]:
    """Whether this ggml-cpu build computes F16 products as `kernels.host_computes` says, asked of it, not assumed
    from the build: no llamafile sgemm; its converter's rounding of ties to even (1 + 2^-11 -> 1, 1 + 3 2^-11 ->
    1 + 2^-9), of F16 overflows (65520 -> inf) and subnormals; and 4096 unit products summed to 4096 by a MUL_MAT
    (an F16 accumulator, as an AVX512-FP16 build has, stops at 2048). Returns (ok, why not)."""
    if g.ggml_cpu_has_llamafile():
        return False, "ggml-cpu was built with llamafile's sgemm"
    x = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 65520.0, 65519.0, 2.0**-24 * 1.5, 2.0**-25, -3e-6], np.float32)
    with np.errstate(over="ignore"):
        want = kernels.f32_to_f16(x).view(np.uint16)
    got = to_f16(x).view(np.uint16)
    if not np.array_equal(got, want):
        return False, f"ggml-cpu's F16 converter gave {got.tolist()} where round to nearest even gives {want.tolist()}"
    total = _ggml_f16_sum(4096)
    if total != 4096.0:
        return False, f"ggml-cpu's F16 MUL_MAT summed 4096 unit products to {total!r}: not F32 sums"
    return True, ""


def _ggml_f16_sum(k: int) -> float:
    """ggml-cpu's MUL_MAT of k F16 ones by k F32 ones (one output)."""
    size = 2 * k + 4 * k + 8 * g.ggml_tensor_overhead() + g.ggml_graph_overhead() + 2 * k + (1 << 16)
    ctx = g.ggml_init(g.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=False))
    if not ctx:
        raise BackendError(f"ggml_init of {size} bytes failed")
    try:
        w = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F16, k)
        a = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, k)
        ones16, ones = np.ones(k, np.float16), np.ones(k, np.float32)
        ctypes.memmove(w.contents.data, ones16.ctypes.data, ones16.nbytes)
        ctypes.memmove(a.contents.data, ones.ctypes.data, ones.nbytes)
        out = g.ggml_mul_mat(ctx, w, a)
        gf = g.ggml_new_graph(ctx)
        g.ggml_build_forward_expand(gf, out)
        if g.ggml_graph_compute_with_ctx(ctx, gf, 1) != g.GGML_STATUS_SUCCESS:
            return float("nan")
        return float(ctypes.cast(out.contents.data, ctypes.POINTER(ctypes.c_float))[0])
    finally:
        g.ggml_free(ctx)


def _skip_compute(addrs: list[int]) -> list[tuple[Any, int]]:
    """Set each node's op to GGML_OP_NONE (after the graph was allocated: its buffers stay as they were); returns
    what to restore."""
    out = []
    for a in addrs:
        t = ctypes.cast(a, _TENSOR_P)
        out.append((t, int(t.contents.op)))
        t.contents.op = g.GGML_OP_NONE
    return out


#: EmulatedNode.computed_by: ggml-cpu's own MUL_MAT of the node (`kernels.host_computes` SAME)
HOST_KERNEL = "ggml-cpu's MUL_MAT (the kernel's arithmetic)"
#: ... and its result rounded to F16 (`kernels.F16_RESULT`: HMX's hf store)
HOST_KERNEL_F16 = "ggml-cpu's MUL_MAT, its result rounded to F16 (the kernel's arithmetic)"


@dataclass
class _Stop:
    """Stop a decode at the first stage below `bound` dB against `host`'s stage outputs (a what-if's verdict needs no
    more: the output is wrong from there on)."""

    host: dict[str, np.ndarray]
    bound: float


def _decode(model: Model, low: Lowering, codes: np.ndarray, threads: int | None,
            targets: dict[tuple[str, int], dict[str, Any]] | None = None, release: str = "",
            stop: _Stop | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any], list[EmulatedNode], str | None]:
    """Every stage's output of one decode on the CPU backend under the scheduler; with `targets` ((node name,
    occurrence) -> path and node record), those nodes emulated: a product whose kernel ggml-cpu's own MUL_MAT
    computes alike (`kernels.host_computes`, where `products_probe` finds this build's as it says) is left to
    ggml-cpu (its result rounded to F16 where HMX stores it so), so that it computes the same values whether the
    placement leaves it on the host or puts it on HVX; every other node is computed by the emulator (`kernels`,
    with `product_engine`'s sums) instead of ggml. With `stop`, the decode ends at the first stage below the
    bound: the stage's name is returned, and the stages after it are not in the outputs."""
    kw = {} if threads is None else {"threads": threads}
    s = Session(model, low, backend="cpu", sched=True, **kw)
    done: list[EmulatedNode] = []
    targets = targets or {}
    try:
        frames = int(codes.shape[1])
        bg = s.graph(frames, stages=True)
        jobs: dict[int, dict[str, Any]] = {}
        seen: dict[str, int] = {}
        found = 0
        for t in bg.nodes():
            name = t.contents.name.decode()
            k = seen.get(name, 0)
            seen[name] = k + 1
            addr = ctypes.cast(t, ctypes.c_void_p).value
            job = targets.get((name, k))
            if job is not None:
                jobs[addr] = job
                done.append(job["node"])
                found += 1
        if found != len(targets):
            raise KzlabError(f"{len(targets) - found} placed node(s) to emulate are not in the decoded graph: the "
                             "graph differs from the placed one")
        watch, check = {}, None
        if stop is not None:
            watch = {ctypes.cast(a.t, ctypes.c_void_p).value: k for k, a in bg.outputs.items() if k in stop.host}

            def check(stage: str, _t) -> bool:
                got = s.read(bg.outputs[stage])
                db = stage_accuracy({stage: got}, {stage: stop.host[stage]}, [stage])[0].snr_db
                return db is None or db >= stop.bound  # no SNR (another shape): the comparison after says why

        engine = product_engine()
        native = products_probe()[0]
        for a, job in jobs.items():
            c = ctypes.cast(a, _TENSOR_P).contents
            job["host"] = (kernels.host_computes(job["path"], type_name(c.src[0]), type_name(c.src[1]))
                           if native and job["kind"] == "matmul" else None)
            job["node"].computed_by = {kernels.SAME: HOST_KERNEL, kernels.F16_RESULT: HOST_KERNEL_F16}.get(
                job["host"], f"the kernel's conversions, products summed by {engine.name}"
                if job["kind"] == "matmul" else "the kernel's steps in numpy")
        emu = _Emulator(jobs, release, engine, watch, check)
        s.backends.prepare(bg)
        g.ggml_backend_sched_set_eval_callback(s.backends.sched, emu.cfunc, None)
        # each node the emulator computes is not computed by ggml first: its op is NONE while the graph runs (ggml-cpu
        # skips a NONE node: ggml-cpu/ggml-cpu.c @ eced84c8 1705), so the callback also reads its sources as the
        # graph left them, not overwritten by an in-place result (a unary op is allocated in place over its source)
        skipped = _skip_compute([a for a, j in jobs.items() if j["host"] is None])
        try:
            out = s.run(frames, {"codes": codes}, stages=True)
        finally:
            for t, op in skipped:
                t.contents.op = op
            g.ggml_backend_sched_set_eval_callback(s.backends.sched, g.ggml_backend_sched_eval_callback(), None)
        if emu.error is not None:
            raise emu.error
        if emu.stopped_at is not None:
            order = list(stop.host)
            keep = set(order[: order.index(emu.stopped_at) + 1])
            out = {k: v for k, v in out.items() if k in keep}
        return out, s.plan.to_dict(), done, emu.stopped_at
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
    stop_below_bound: bool = False,
    **lowering_kw: Any,
) -> DeviceAccuracy:
    """Decode `codes` (else `frames` seeded random frames) as the device of `profile` (a profile name, a path, a
    `Capabilities` with what-if changes, or `NAME,ITEM,...` such as `hexagon-v0.15.3,hmx=0`) would compute the
    placed graph, and compare every stage with the host's F32 decode (`HOST_REFERENCE`) of the same codes, and
    with `ref` (a `.npz` of stage activations, whose codes are then decoded) when given.

    The graph is the simulator's for `lowering` (portable mode; the device's choices for `auto`), placed as
    `kzlab.simulate` places it (`stages`, `weights_on`), or `placement` when one is given. `host`: the host's
    stage outputs for these codes when already decoded (a what-if reuses them across configurations).
    `stop_below_bound`: end the decode at the first stage below the bound (the verdict is then known: wrong output)
    and say so; the later stages, the waveform's among them, are not computed."""
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
    if host is None:
        host = host_stages(model, c, threads)
    halt = _Stop({k: host[k] for k in order if k in host}, float(bound)) if stop_below_bound else None
    out, plan, done, stopped = _decode(model, low, c, threads, targets, release, halt)
    if plan != cfg["lowering_resolved"]:
        raise KzlabError(f"the decoded graph's lowering {plan} is not the placed one {cfg['lowering_resolved']}")
    rows, bad = _compare(out, host, order)
    if stopped is not None:
        rows = [r for r in rows if r.stage in out] + [
            StageAccuracy(stage=k, snr_db=None, shape=tuple(np.shape(host[k])) if k in host else (),
                          note=f"not computed: the decode stopped after {stopped}, below the bound")
            for k in order if k not in out]
    reference = None
    if ref is not None:
        reference = _compare(out, ref_stages, order)[0]
    notes = []
    # the host's own arithmetic is emulated (it is the host's); another device's only where a release names it
    arith_emulated = bool(release) or dev == "CPU" or not host_computed
    if host_computed:
        notes.append(f"{sum(host_computed.values())} other node(s) on {dev} computed as the host computes them "
                     f"(their device arithmetic is not emulated): "
                     + ", ".join(f"{k} {v}" for k, v in sorted(host_computed.items())))
    if not arith_emulated:
        notes.append(f"{dev}'s arithmetic is not emulated (its profile names none): what its kernels compute is not "
                     "known here, so the audio's correctness on it is not either")
    if stopped is not None:
        notes.append(f"stopped after {stopped}, the first stage below {float(bound):g} dB: the output is wrong from "
                     "there on, and the later stages were not computed")
    if done:
        notes.append(f"products of F16 values: {product_engine().name} (the device's order of sums is not emulated)")
    if any(n.defect and n.defect_kind != APPROXIMATION for n in done):
        notes.append(f"bytes read past an operand's end taken as {PAST_END} (on the device: the buffer's next bytes)")
    res = DeviceAccuracy(
        model=str(model.path), family=arch.name, profile=cfg["profile"], arith=release, frames=int(c.shape[1]),
        lowering=cfg["lowering_label"], lowering_resolved=cfg["lowering_resolved"],
        sched_stages=cfg.get("sched_stages"), weights_on=cfg["weights_on"], bound_db=float(bound), emulated=done,
        host_computed=host_computed, stages=rows, reference=reference, nonfinite=bad,
        defects=list(getattr(placement, "defects", [])), notes=notes,
        wav=np.asarray(out[OUTPUT]).reshape(-1) if OUTPUT in out else None,
        host_wav=np.asarray(host[OUTPUT]).reshape(-1), sample_rate=int(hp.sample_rate),
        arith_emulated=arith_emulated, stopped_at=stopped,
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
