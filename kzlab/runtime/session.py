"""A Session: one model, one lowering, one backend setup; graphs built and allocated once per shape.

The session owns the ggml objects (weight buffer, graphs, allocators, backends) and frees them together.
Building a graph and allocating it are done once per (start stage, frames) and reused across calls, so a
sweep over many inputs of one length pays for allocation once. Codes with fewer codebooks than the decoder's
(a family that decodes the first n, kzlab.codes) get a graph of their own, built from the family's
hyperparameters for n on the same weights, and cached under a key that names n.
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ggml import ggml as g

from kzlab.arch import arch_of
from kzlab.codes import hparams_for_codebooks, takes_codes
from kzlab.errors import BackendError, Cancelled, InvalidOptionError
from kzlab.graph import fused
from kzlab.graph.build import build_graph, family_graph, first_stage
from kzlab.graph.builder import Act, GraphBuilder, LayerRecord, WeightTensors, WeightView
from kzlab.graph.options import Lowering, LoweringPlan
from kzlab.graph.prepared import prepare_weights
from kzlab.model.model import Model
from kzlab.runtime.backends import BackendSet, open_backends
from kzlab.runtime.spec import BackendSpec, ResolvedBackends, resolve_run


def graph_key(
    start: str, frames: int, stages: bool, stop: str | None = None, stream: bool = False,
    codebooks: int | None = None,
) -> tuple:
    """The cache key of one graph shape (the budget check reads it too); `codebooks`: the count of a graph built for
    fewer codebooks than the decoder's (None: all of them, the key it always had)."""
    key = (start, frames, stages) if stop is None else (start, frames, stages, stop)
    key = (*key, "stream") if stream else key
    return key if codebooks is None else (*key, ("codebooks", int(codebooks)))


def codebooks_of(hp: Any, inputs: dict[str, Any], start: str | None = None) -> int | None:
    """The codebook count of a run's codes where it is not the decoder's own (`num_quantizers`); None where it is,
    where the run starts past the codes, or where the decoder takes latents. The codes were validated
    (kzlab.codes.validate_codes), so the count is one the family decodes."""
    if not takes_codes(hp) or start not in (None, first_stage(hp)):
        return None
    codes = inputs.get("codes")
    if codes is None or np.ndim(codes) != 2:
        return None
    n = int(np.shape(codes)[0])
    return None if n == hp.num_quantizers else n


def slot_shape(slot) -> tuple[int, ...]:
    """A state slot's numpy shape: its graph tensor's ne reversed (a context 2-D, a cache 3-D)."""
    dims = 3 if slot.kind == "kv" else 2
    return tuple(int(slot.input.contents.ne[i]) for i in reversed(range(dims)))


@dataclass
class BuiltGraph:
    """A graph for one (start, frames), allocated and ready to run."""

    builder: GraphBuilder
    gf: Any
    frames: int
    start: str
    layers: list[LayerRecord]
    outputs: dict[str, Act]
    allocator: Any = None
    compute_bytes: int = 0
    extra: dict = field(default_factory=dict)
    #: the hyperparameters the graph was built from (the model's, or the family's for fewer codebooks)
    hparams: Any = None

    @property
    def n_nodes(self) -> int:
        return int(g.ggml_graph_n_nodes(self.gf))

    def nodes(self) -> list:
        return [g.ggml_graph_node(self.gf, i) for i in range(self.n_nodes)]


class ComputeThread:
    """One long-lived daemon thread that runs the functions handed to it, one at a time."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="kzlab-compute", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            del job  # a finished job must not keep its session (and so this thread) alive while idle

    def submit(self, job) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        """Let the thread end after the job it runs (a compute cannot be cut short from outside)."""
        self._jobs.put(None)


class Session:
    """Runs the decoder graph on a chosen backend setup (see `kzlab.runtime.backends`)."""

    def __init__(
        self,
        model: Model,
        lowering: Lowering | None = None,
        backends: BackendSpec | ResolvedBackends | None = None,
        **backend_kw,
    ):
        """`backends`: a BackendSpec (or one already resolved), or its fields as keywords (backend=, threads=,
        sched=, op_offload=, weights_on=). Backends and lowering are resolved once, here
        (`kzlab.runtime.spec.resolve_run`)."""
        self.model = model
        if not isinstance(backends, ResolvedBackends):
            backends = BackendSpec.from_kw(backends, **backend_kw)
        elif backend_kw:
            raise InvalidOptionError("Session: a resolved backend set takes no further backend options")
        arch = arch_of(model.hparams)
        resolved, self.plan = resolve_run(
            lowering, backends, fused_nodes=arch.fused_nodes, absent=dict(getattr(arch, "not_applicable", {}) or {})
        )
        self.backends: BackendSet = open_backends(resolved)
        self._lock = threading.RLock()
        self._graphs: dict[tuple, BuiltGraph] = {}
        self.weights: WeightTensors | None = None
        self._stream_weights: WeightTensors | None = None
        self._abort = False
        self._thread: ComputeThread | None = None
        self._abort_cb = g.ggml_abort_callback(lambda _data: self._abort)
        self.backends.set_abort_callback(self._abort_cb)

    @property
    def resolved(self) -> ResolvedBackends:
        """The backends as they run (names, scheduler, threads, weights placement)."""
        return self.backends.resolved

    @property
    def lowering(self) -> LoweringPlan:
        """The resolved lowering (no `auto`): what the graphs of this session are built from."""
        return self.plan

    @property
    def lock(self) -> threading.RLock:
        """The lock every use of this session's graphs holds (decode, profiler, readers of a built graph)."""
        return self._lock

    # ---- weights ------------------------------------------------------------------------------------------
    def ensure_weights(self) -> WeightTensors:
        """The weights prepared for this session's plan and uploaded to its weights' backend (once); what a
        caller building its own graph on this session's weights (placement's check, a scheduler log) needs."""
        if self.weights is None:
            self.weights = self._upload(WeightTensors(prepare_weights(self.model, self.plan)))
        return self.weights

    _ensure_weights = ensure_weights  # the name before it was public

    def stream_weights(self) -> tuple[WeightTensors | WeightView, LoweringPlan]:
        """The weights and plan a streaming call's graph is built from (`LoweringPlan.for_stream`): the session's
        own, plus, where the stream's plan lays some weights out otherwise, those few in a set of their own,
        prepared and uploaded on the first streaming call."""
        main = self.ensure_weights()
        plan, changes = self.plan.for_stream()
        if not changes:
            return main, plan
        if self._stream_weights is None:
            mine = main.prepared
            other = {n: p for n, p in prepare_weights(self.model, plan).items()
                     if n in mine and (p.layout, p.type, p.ne) != (mine[n].layout, mine[n].type, mine[n].ne)}
            self._stream_weights = self._upload(WeightTensors(other))
        return WeightView(main, self._stream_weights), plan

    def _upload(self, wt: WeightTensors) -> WeightTensors:
        buf = g.ggml_backend_alloc_ctx_tensors_from_buft(wt.ctx, self.backends.weights_buft)
        if not buf:
            wt.free()
            raise BackendError(
                f"could not allocate {wt.nbytes() / 1e6:.1f} MB of weights on {self.backends.weights_name}"
            )
        g.ggml_backend_buffer_set_usage(buf, g.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
        wt.buffer = buf
        try:
            wt.upload()
        except Exception as e:
            wt.free()
            raise BackendError(f"uploading weights to {self.backends.weights_name} failed: {e}") from e
        return wt

    # ---- graphs -------------------------------------------------------------------------------------------
    def hparams_for(self, codebooks: int | None = None) -> Any:
        """The hyperparameters a graph for codes of `codebooks` codebooks is built from (None: the model's)."""
        hp = self.model.hparams
        return hp if codebooks is None else hparams_for_codebooks(hp, codebooks)

    def graph(
        self, frames: int, start: str | None = None, stages: bool = False, stop: str | None = None,
        stream: bool = False, codebooks: int | None = None,
    ) -> BuiltGraph:
        """The built and allocated graph for this shape (cached); `stages` keeps every stage's output; `start`
        defaults to the stage that takes codes; `stop` ends the graph at that stage (see `Arch.chunk_split`);
        `stream`: one call of a stateful stream (its state is graph inputs and outputs); `codebooks`: codes with
        that many codebooks, fewer than the decoder's (`codebooks_of`; None: all of them)."""
        start = start or first_stage(self.model.hparams)
        if codebooks is not None and (start != first_stage(self.model.hparams) or
                                      codebooks == self.model.hparams.num_quantizers):
            codebooks = None  # the graph does not read the codes, or reads all of them: the one graph
        key = graph_key(start, frames, stages, stop, stream, codebooks)
        with self._lock:
            if key in self._graphs:
                return self._graphs[key]
            hp = self.hparams_for(codebooks)
            weights, plan = self.stream_weights() if stream else (self.ensure_weights(), self.plan)
            b = build_graph(weights, plan, hp, frames, start, stages, stop, stream)
            built = BuiltGraph(b, b.gf, frames, start, b.layers, b.outputs, hparams=hp)
            self.backends.allocate(built)
            self._graphs[key] = built
            return built

    def release_graphs(self) -> None:
        with self._lock:
            for bg in self._graphs.values():
                self.backends.release(bg)
                bg.builder.free()
            self._graphs.clear()

    # ---- running ------------------------------------------------------------------------------------------
    def set_inputs(self, bg: BuiltGraph, inputs: dict[str, np.ndarray], derive: bool = True) -> None:
        """Copy the graph's inputs in; with `derive`, those that follow from the shape (positions, masks...) are
        the family graph half's `feed` (a stream gives its own, which follow from its position too)."""
        hp = bg.hparams or self.model.hparams
        feed = {**(family_graph(hp).feed(hp, bg.frames, bg.builder.inputs) if derive else {}), **inputs}
        for name, t in bg.builder.inputs.items():
            if name not in feed:
                raise KeyError(f"graph input {name!r} was not given")
            a = np.ascontiguousarray(feed[name])
            if a.nbytes != g.ggml_nbytes(t):
                raise AssertionError(f"input {name}: {a.nbytes} bytes for a tensor of {g.ggml_nbytes(t)}")
            g.ggml_backend_tensor_set(t, a.ctypes.data, 0, a.nbytes)

    def compute(self, bg: BuiltGraph) -> None:
        """Run the graph once (inputs already set), on the compute thread; KeyboardInterrupt aborts it cleanly."""
        status, interrupted = self.on_compute_thread(lambda: self.backends.compute(bg))
        if interrupted:
            raise Cancelled("decode interrupted (KeyboardInterrupt); the decoder is ready for the next call")
        if self._abort or status == g.GGML_STATUS_ABORTED:
            raise Cancelled("decode interrupted")
        if status != g.GGML_STATUS_SUCCESS:
            raise BackendError(f"graph compute failed on {self.backends.describe()} (status {status})")

    def on_compute_thread(self, fn: Callable[[], Any]) -> tuple[Any, bool]:
        """Run `fn` (a ggml compute) on the session's compute thread; returns (its result, interrupted).

        Python delivers SIGINT only to the main thread, between bytecodes, so a main thread blocked in a long
        ggml_backend_graph_compute would not see Jupyter's stop button until the whole graph finished. The
        main thread waits in short slices instead, and on KeyboardInterrupt sets the abort flag that ggml's
        CPU abort callback polls between nodes, then waits for the worker to stop (so the next compute starts
        from a quiet backend). The thread lives as long as the session: OpenMP keeps one pool of worker
        threads per calling thread, and the fused kernels set numpy's BLAS threads once per thread, so every
        compute (decodes and the profiler's runs alike) finds the same warm threads. An error a fused kernel
        recorded is raised here as a BackendError.
        """
        self._abort = False
        result: dict[str, Any] = {}
        done = threading.Event()  # not Thread.join: an interrupted join can report a live thread as ended

        def work() -> None:
            try:
                result["value"] = fn()
            except BaseException as e:  # handed to the caller's thread
                result["error"] = e
            finally:
                done.set()

        self._worker().submit(work)
        interrupted = False
        while not done.is_set():
            try:
                done.wait(0.05)
            except KeyboardInterrupt:
                interrupted = True
                self._abort = True
        if "error" in result:
            raise result["error"]
        fused.after_compute()
        return result.get("value"), interrupted

    def read(self, a: Act) -> np.ndarray:
        """An activation as a torch-order [C, T] float32 array."""
        t = a.t
        ne0, ne1 = int(t.contents.ne[0]), int(t.contents.ne[1])
        out = np.empty((ne1, ne0), dtype=np.float32)
        g.ggml_backend_tensor_get(t, out.ctypes.data_as(ctypes.c_void_p), 0, out.nbytes)
        return np.ascontiguousarray(out.T) if a.cl else out

    def run(
        self, frames: int, inputs: dict[str, np.ndarray], start: str | None = None, stages: bool = False,
        stop: str | None = None,
    ) -> dict[str, np.ndarray]:
        """Outputs by name: every stage's with `stages`, else the waveform (`wav`, [1, samples]), or with `stop`
        that stage's output. A family whose waveform is made on the host (its graph ends earlier) gets it from
        its graph half's `finish`."""
        with self._lock:
            bg = self.graph(frames, start, stages, stop, codebooks=codebooks_of(self.model.hparams, inputs, start))
            self.backends.prepare(bg)
            self.set_inputs(bg, inputs)
            self.compute(bg)
            out = {k: self.read(a) for k, a in bg.outputs.items()}
            hp = bg.hparams or self.model.hparams
            out = family_graph(hp).finish(out, self.plan, hp)
            if stages:
                return out
            return {stop: out[stop]} if stop is not None else {"wav": out["wav"]}

    def stream_feed(self, bg: BuiltGraph, position: int, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A streaming graph's inputs but its codes: the positions and mask at stream position `position` (the
        family graph half's `feed_stream`) and each state slot as `state:<key>` (zeros where `state` has none: the
        stream's start)."""
        hp = bg.hparams or self.model.hparams
        feed = dict(family_graph(hp).feed_stream(hp, bg.frames, position, bg.builder.inputs))
        for key, slot in bg.builder.carry.slots.items():
            shape = slot_shape(slot)
            have = state.get(key)
            if have is None:
                have = np.zeros(shape, np.float32)
            elif have.shape != shape:
                raise AssertionError(f"state {key}: shape {have.shape}, the graph's is {shape}")
            feed[f"state:{key}"] = have
        return feed

    def run_stream(
        self, frames: int, inputs: dict[str, np.ndarray], state: dict[str, np.ndarray], position: int
    ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, tuple]]:
        """One call of a stateful stream: `frames` new frames at stream position `position`, with the state the
        previous call gave back (a slot missing from `state` starts at zeros: the stream's start). Returns the
        waveform of these frames, the new state, each slot as its graph tensor's bytes (numpy shape = ggml's ne
        reversed), and each slot's (kind, channels, frames, channels-last). Codes of fewer codebooks run a graph of
        their own (`codebooks_of`) whose state slots are the same: a codebook lookup reads one frame and carries
        nothing."""
        with self._lock:
            bg = self.graph(frames, stream=True, codebooks=codebooks_of(self.model.hparams, inputs))
            self.backends.prepare(bg)
            hp = bg.hparams or self.model.hparams
            feed = self.stream_feed(bg, position, state)
            self.set_inputs(bg, {**feed, **inputs}, derive=False)
            self.compute(bg)
            wav = family_graph(hp).finish({k: self.read(a) for k, a in bg.outputs.items()}, self.plan, hp)["wav"]
            new = {}
            for key, slot in bg.builder.carry.slots.items():
                arr = np.empty(slot_shape(slot), np.float32)
                g.ggml_backend_tensor_get(slot.output, arr.ctypes.data_as(ctypes.c_void_p), 0, arr.nbytes)
                new[key] = arr
            meta = {k: (sl.kind, sl.channels, sl.frames, sl.cl) for k, sl in bg.builder.carry.slots.items()}
            return wav, new, meta

    def _worker(self) -> ComputeThread:
        if self._thread is None:
            self._thread = ComputeThread()
        return self._thread

    def cancel(self) -> None:
        """Ask a running compute to stop at the next node boundary (thread-safe)."""
        self._abort = True

    def close(self) -> None:
        with self._lock:
            if self._thread is not None:
                self._thread.stop()
                self._thread = None
            self.release_graphs()
            if self.weights is not None:
                self.weights.free()
                self.weights = None
            if self._stream_weights is not None:
                self._stream_weights.free()
                self._stream_weights = None
            self.backends.free()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; explicit close() is preferred
        try:
            self.close()
        except Exception:
            pass
