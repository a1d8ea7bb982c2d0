"""Per-node timing of the real decoder graph through ggml_backend_sched's eval callback.

How a node is timed: the scheduler asks the callback, node by node, whether the caller wants to see that
node (ask=True). Answering yes for every compute node makes the scheduler run the graph one node at a time
and call back (ask=False) after synchronizing that node's backend; the callback takes a timestamp, and a
node's time is the difference between its timestamp and the previous one. View nodes (VIEW, RESHAPE,
PERMUTE, TRANSPOSE) compute nothing: they are answered "no", run together with the next node, and get 0.
A split's input copies run before its first node, so they land in that node's time.

Each repeat is a pair of runs on the same graph and allocation, one plain (no callback) and one profiled,
taken back to back in alternating order; the overhead is the median of the pairs' ratios, which a slow
drift of the machine's load cancels out of.

Plain (non-scheduler) sessions are profiled through a scheduler of their own over the same backend, on
the graph the plain allocator already placed: every tensor is pre-allocated, so the scheduler keeps each
one where it is and the memory layout is the plain run's. ggml requires a CPU backend last in any
scheduler, so a non-CPU plain backend gets an extra CPU backend that receives no node.

What is read from ggml and what is derived: the node list, shapes, types, names, the backend of every node
(ggml_backend_sched_get_tensor_backend) and the scheduler's split count (ggml_backend_sched_get_n_splits)
are read. ggml-python does not expose the splits themselves, so their boundaries and inputs are derived the
way ggml_backend_sched_split_graph makes them: a new split where the backend of a compute node changes (or
where a weight has to be copied in and the split already has inputs), and a split's inputs are the node
sources the scheduler replaced by a copy (read back by comparing each node's sources with the ones it was
built with), counted in the first split of that backend that needs them. `n_splits_read` and
`n_splits_derived` are both reported so that any disagreement shows.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ggml import ggml as g

from kzlab.errors import BackendError, Cancelled
from kzlab.graph.builder import TYPE_NAMES
from kzlab.progress import Progress, ProgressFn
from kzlab.runtime.backends import init_backend, restore_sources, sources_of
from kzlab.runtime.ffi import tensor_address

VIEW_OP_IDS = {g.GGML_OP_VIEW, g.GGML_OP_RESHAPE, g.GGML_OP_PERMUTE, g.GGML_OP_TRANSPOSE, g.GGML_OP_NONE}
VIEW_OPS = {"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "NONE"}


def type_name(t) -> str:
    tid = int(t.contents.type)
    return TYPE_NAMES.get(tid) or g.ggml_type_name(tid).decode().upper()


def tensor_ne(t) -> tuple[int, ...]:
    return tuple(int(t.contents.ne[i]) for i in range(4))


@dataclass
class NodeInfo:
    """One graph node as read from ggml (times filled in by the profiler). What it costs in FLOPs and bytes is
    derived from these fields by the analysis layer (`kzlab.analysis.flops`), not here."""

    index: int
    name: str
    op: str
    layer: str
    ne: tuple[int, ...]
    type: str
    nbytes: int
    src_names: list[str]
    src_ne: list[tuple[int, ...]]
    src_types: list[str]
    src_nbytes: list[int]
    backend: str = ""
    is_view: bool = False
    times_ms: list[float] = field(default_factory=list)

    @property
    def time_ms(self) -> float:
        return statistics.median(self.times_ms) if self.times_ms else 0.0

    @property
    def spread_ms(self) -> float:
        return (max(self.times_ms) - min(self.times_ms)) if self.times_ms else 0.0


def describe_nodes(bg, backends: list[str]) -> list[NodeInfo]:
    """Every node of `bg` with op, shapes, types, byte sizes and layer path.

    Sources are read from the addresses recorded at build time, so a scheduler's copies never show up.
    """
    ptr = ctypes.POINTER(g.ggml_tensor)
    out = []
    for i, (node, src_addrs) in enumerate(sources_of(bg)):
        name = node.contents.name.decode()
        op = g.ggml_op_desc(node).decode()
        srcs = [ctypes.cast(a, ptr) for a in src_addrs if a]
        out.append(
            NodeInfo(
                index=i,
                name=name,
                op=op,
                layer=name.split(":", 1)[0] if ":" in name else "graph",
                ne=tensor_ne(node),
                type=type_name(node),
                nbytes=int(g.ggml_nbytes(node)),
                src_names=[s.contents.name.decode() for s in srcs],
                src_ne=[tensor_ne(s) for s in srcs],
                src_types=[type_name(s) for s in srcs],
                src_nbytes=[int(g.ggml_nbytes(s)) for s in srcs],
                backend=backends[i] if i < len(backends) else "",
                is_view=int(node.contents.op) in VIEW_OP_IDS or op in VIEW_OPS,
            )
        )
    return out


def derive_splits(bg, nodes: list[NodeInfo]) -> list[dict[str, Any]]:
    """Split boundaries and copied-in bytes, derived as ggml_backend_sched_split_graph makes them."""
    splits: list[dict[str, Any]] = []
    copied: dict[str, set[int]] = {}
    cur: dict[str, Any] | None = None
    ptr = ctypes.POINTER(g.ggml_tensor)
    for (node, src_addrs), info in zip(sources_of(bg), nodes, strict=True):
        if info.is_view:
            if cur is not None:
                cur["n_nodes"] += 1
            continue
        b = info.backend
        replaced = []
        for j, a in enumerate(src_addrs):
            if a and tensor_address(node.contents.src[j]) != a:
                replaced.append(ctypes.cast(a, ptr))
        new_inputs = [s for s in replaced if tensor_address(s) not in copied.setdefault(b, set())]
        weight_in = any(
            s.contents.buffer
            and int(g.ggml_backend_buffer_get_usage(s.contents.buffer)) == g.GGML_BACKEND_BUFFER_USAGE_WEIGHTS
            for s in new_inputs
        )
        if cur is None or cur["backend"] != b or (weight_in and cur["n_inputs"] > 0):
            cur = {"index": len(splits), "backend": b, "first_node": info.name, "n_nodes": 0, "n_inputs": 0}
            cur.update(input_bytes=0, inputs=[], time_ms=0.0)
            splits.append(cur)
        for s in new_inputs:
            copied[b].add(tensor_address(s))
            cur["n_inputs"] += 1
            cur["input_bytes"] += int(g.ggml_nbytes(s))
            cur["inputs"].append(s.contents.name.decode())
        cur["n_nodes"] += 1
        cur["time_ms"] += info.time_ms
    return splits


class _Timer:
    """The eval callback: a timestamp after every compute node."""

    def __init__(self, index_of: dict[int, int], n: int):
        self.index_of = index_of
        self.times = [0.0] * n
        self.last = 0
        self.cfunc = g.ggml_backend_sched_eval_callback(self._cb)

    def start(self) -> None:
        self.times = [0.0] * len(self.times)
        self.last = time.perf_counter_ns()

    def _cb(self, t, ask, _ud) -> bool:
        if ask:
            return int(t.contents.op) not in VIEW_OP_IDS
        now = time.perf_counter_ns()
        i = self.index_of.get(tensor_address(t))
        if i is not None:
            self.times[i] = (now - self.last) / 1e6
        self.last = now
        return True


@dataclass
class Measurement:
    nodes: list[NodeInfo]
    splits: list[dict[str, Any]]
    wall_ms: float
    wall_all_ms: list[float]
    profiled_ms: float
    profiled_all_ms: list[float]
    node_sum_all_ms: list[float]
    n_splits_read: int
    compute_bytes: int
    output: np.ndarray | None = None

    @property
    def pair_ratios(self) -> list[float]:
        """profiled / plain time of each repeat's pair of runs."""
        return [p / w for p, w in zip(self.profiled_all_ms, self.wall_all_ms, strict=True) if w > 0]

    @property
    def overhead_ratio(self) -> float:
        """The profiling overhead: the median of the pairs' ratios (1.0 = none)."""
        return _median(self.pair_ratios) if self.pair_ratios else 0.0


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


class Profiler:
    """Times one session's graph: plain runs (no callback) and profiled runs (callback), same graph."""

    def __init__(self, session):
        self.s = session
        self.bs = session.backends

    def _profiling_sched(self, bg):
        """The scheduler used for profiled runs, allocated for `bg`; returns (sched, cleanup)."""
        bs = self.bs
        if bs.use_sched:
            bs.prepare(bg)
            return bs.sched, lambda: None
        handles = [bs.primary.handle]
        extra = None
        if int(g.ggml_backend_dev_type(g.ggml_backend_get_device(bs.primary.handle))) != g.GGML_BACKEND_DEVICE_TYPE_CPU:
            extra = init_backend("cpu", bs.threads)
            handles.append(extra.handle)
        arr = (g.ggml_backend_t_ctypes * len(handles))(*handles)
        sched = g.ggml_backend_sched_new(arr, None, len(handles), 32768, False, False)
        if not sched:
            raise BackendError(f"could not create a profiling scheduler over {bs.describe()}")
        sources_of(bg)
        if not g.ggml_backend_sched_alloc_graph(sched, bg.gf):
            g.ggml_backend_sched_free(sched)
            raise BackendError(f"the profiling scheduler could not take the graph on {bs.describe()}")

        def cleanup() -> None:
            g.ggml_backend_sched_free(sched)
            restore_sources(bg)
            if extra is not None:
                g.ggml_backend_free(extra.handle)

        cleanup.arr = arr  # keep the handle array alive as long as the scheduler
        return sched, cleanup

    def _timed(self, compute) -> tuple[int, float]:
        """Run `compute` on the session's compute thread (where decodes run); (status, milliseconds)."""

        def run() -> tuple[int, float]:
            t0 = time.perf_counter()
            status = compute()
            return status, (time.perf_counter() - t0) * 1e3

        (status, dt), interrupted = self.s.on_compute_thread(run)
        if interrupted:
            raise Cancelled("profile interrupted (KeyboardInterrupt); the decoder is ready for the next call")
        return status, dt

    def _plain_once(self, bg, inputs) -> float:
        s = self.s
        s.backends.prepare(bg)
        s.set_inputs(bg, inputs)
        status, dt = self._timed(lambda: self.bs.compute(bg))
        if status != g.GGML_STATUS_SUCCESS:
            raise BackendError(f"graph compute failed on {self.bs.describe()} (status {status})")
        return dt

    def measure(
        self,
        frames: int,
        inputs: dict,
        start: str = "quantizer",
        repeat: int = 5,
        warmup: int = 1,
        progress: ProgressFn | bool | None = None,
    ) -> Measurement:
        """`warmup` then `repeat` plain/profiled pairs; `progress` reports each pair (see kzlab.progress)."""
        s, bs = self.s, self.bs
        with s._lock:
            bg = s.graph(frames, start)
            bs.prepare(bg)
            backends = bs.node_backends(bg)
            n_read = bs.n_splits(bg)
            nodes = describe_nodes(bg, backends)
            index_of = {tensor_address(n): i for i, (n, _) in enumerate(sources_of(bg))}
            timer = _Timer(index_of, len(nodes))
            off = g.ggml_backend_sched_eval_callback()  # NULL: no callback
            wall: list[float] = []
            prof: list[float] = []
            sums: list[float] = []  # per run: the node times of that run, summed
            sched, cleanup = self._profiling_sched(bg)
            bar = Progress(warmup + repeat, "profiling", progress, unit="pair")
            try:

                def profiled_once() -> float:
                    g.ggml_backend_sched_set_eval_callback(sched, timer.cfunc, None)
                    s.set_inputs(bg, inputs)

                    def compute() -> int:
                        timer.start()  # on the compute thread, right before the graph
                        return g.ggml_backend_sched_graph_compute(sched, bg.gf)

                    try:
                        status, dt = self._timed(compute)
                    finally:
                        g.ggml_backend_sched_set_eval_callback(sched, off, None)
                    if status != g.GGML_STATUS_SUCCESS:
                        raise BackendError(f"profiled compute failed on {bs.describe()} (status {status})")
                    return dt

                # plain and profiled runs come in pairs whose order alternates (plain first, then profiled
                # first), so that neither a change of machine load nor the order itself favours one side
                for r in range(warmup + repeat):
                    if r % 2 == 0:
                        dt_plain = self._plain_once(bg, inputs)
                        dt = profiled_once()
                    else:
                        dt = profiled_once()
                        dt_plain = self._plain_once(bg, inputs)
                    if r >= warmup:
                        wall.append(dt_plain)
                        prof.append(dt)
                        sums.append(sum(timer.times))
                        for n, t in zip(nodes, timer.times, strict=True):
                            n.times_ms.append(t)
                    bar.step()
            finally:
                bar.close()
                g.ggml_backend_sched_set_eval_callback(sched, off, None)
                cleanup()
            output = s.read(bg.outputs["wav"])[0].copy()
            splits = derive_splits(bg, nodes) if bs.use_sched else [_one_split(nodes, bs.primary.name)]
            return Measurement(
                nodes=nodes,
                splits=splits,
                wall_ms=_median(wall),
                wall_all_ms=wall,
                profiled_ms=_median(prof),
                profiled_all_ms=prof,
                node_sum_all_ms=sums,
                n_splits_read=n_read,
                compute_bytes=int(bg.compute_bytes),
                output=output,
            )


def _one_split(nodes: list[NodeInfo], backend: str) -> dict[str, Any]:
    return {
        "index": 0,
        "backend": backend,
        "first_node": nodes[0].name if nodes else "",
        "n_nodes": len(nodes),
        "n_inputs": 0,
        "input_bytes": 0,
        "inputs": [],
        "time_ms": sum(n.time_ms for n in nodes),
    }
