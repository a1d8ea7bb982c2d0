"""Timing of the real decoder graph through ggml_backend_sched's eval callback, in measured stretches.

How a stretch is timed: the scheduler asks the callback, node by node, whether the caller wants to see that
node (ask=True). Where the callback says no, the scheduler keeps going; where it says yes, it computes every
node since the last yes as one graph (one ggml_backend_graph_compute, one wake-up of the backend's threads),
synchronizes the backend and calls back (ask=False); the callback takes a timestamp. The nodes between two
"yes" form a stretch, and the difference between its closing timestamp and the previous one is its measured
time: the timestamps tile the run, so the stretch times sum to the profiled wall time.

Where to say yes is the granularity (`GRANULARITIES`):

* `"auto"` (the default) budgets the separate computes by time: from an estimate of every node's time (the
  calibration runs below, or a cost model the caller passes), with tau = the estimated run / `budget`, a node
  of tau or more is a stretch of its own (measured alone), and smaller consecutive nodes gather, closing at
  the end of a layer path once their stretch holds tau. The number of stretches stays near `budget` whatever
  the graph's size, and the big nodes, where the time goes, are measured alone.
* `"node"` answers yes for every compute node, so each node is computed and timed alone: the old per-node
  timing. It is the most direct, and the most costly: over a thousand separate computes for the portable
  lowering, each with its thread wake-up and barrier, and a chain of elementwise ops computed op by op loses
  the cache reuse it has inside one graph (a folded snake measured op by op takes up to 40 % longer).
* `"layer"` answers yes at the last compute node of each run of consecutive nodes of one layer path
  `<layer>:<OP>`; `"split"` only at the end of each scheduler split (what a plain run computes as one graph
  anyway); an integer N closes a stretch after N compute nodes.

Every granularity also closes a stretch at the end of each split, so a stretch never spans two backends. A
node alone in its stretch is measured; the nodes of a longer stretch share its time, apportioned by the
analysis layer (`kzlab.analysis.profile`) with a cost model. View nodes (VIEW, RESHAPE, PERMUTE, TRANSPOSE)
compute nothing: they are answered "no", run with the next node, and get 0. A split's input copies run
before its first node, so they land in the first stretch of that split.

Each repeat is a pair of runs on the same graph and allocation, one plain (no callback) and one profiled,
taken back to back in alternating order; the overhead is the median of the pairs' ratios, which a slow
drift of the machine's load cancels out of. The warm-up runs come in pairs too (plain first); with
`calibrate`, their profiled runs are taken at node granularity instead: each node's time alone (its own
compute and the separate compute's cost around it), which the analysis may use to weigh the nodes of a stretch.

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
`n_splits_derived` are both reported so that any disagreement shows. A derived boundary that the scheduler
does not make only costs an extra stretch; one it makes that is not derived lands a split's tail in the next
split's first stretch (the stretch then names the backend of its last node).
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ggml import ggml as g

from kzlab.errors import BackendError, Cancelled, InvalidOptionError
from kzlab.graph.build import family_graph
from kzlab.graph.builder import TYPE_NAMES
from kzlab.progress import Progress, ProgressFn
from kzlab.runtime.backends import init_backend, restore_sources, sources_of, wait_computed
from kzlab.runtime.ffi import tensor_address
from kzlab.runtime.session import codebooks_of

VIEW_OP_IDS = {g.GGML_OP_VIEW, g.GGML_OP_RESHAPE, g.GGML_OP_PERMUTE, g.GGML_OP_TRANSPOSE, g.GGML_OP_NONE}
VIEW_OPS = {"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "NONE"}
GRANULARITIES = ("auto", "node", "layer", "split")  # or a positive integer: at most N compute nodes a stretch
DEFAULT_GRANULARITY = "auto"
DEFAULT_BUDGET = 64  # "auto": a node of 1/64 of the run is timed alone; smaller ones gather up to that


def check_granularity(granularity: str | int) -> str | int:
    """`granularity` as given when it is one of `GRANULARITIES` or an integer >= 1; InvalidOptionError else."""
    if isinstance(granularity, str) and granularity in GRANULARITIES:
        return granularity
    if isinstance(granularity, int) and not isinstance(granularity, bool) and granularity >= 1:
        return granularity
    raise InvalidOptionError(
        f"granularity={granularity!r}: one of {', '.join(map(repr, GRANULARITIES))} or an integer >= 1"
    )


def type_name(t) -> str:
    tid = int(t.contents.type)
    return TYPE_NAMES.get(tid) or g.ggml_type_name(tid).decode().upper()


def tensor_ne(t) -> tuple[int, ...]:
    return tuple(int(t.contents.ne[i]) for i in range(4))


class _Timed:
    """The median and spread of `times_ms` (one value per profiled run)."""

    times_ms: list[float]

    @property
    def time_ms(self) -> float:
        return statistics.median(self.times_ms) if self.times_ms else 0.0

    @property
    def spread_ms(self) -> float:
        return (max(self.times_ms) - min(self.times_ms)) if self.times_ms else 0.0


@dataclass
class NodeInfo(_Timed):
    """One graph node as read from ggml. What it costs in FLOPs and bytes is derived from these fields by the
    analysis layer (`kzlab.analysis.flops`), not here. `stretch` is the index of the measured stretch the node
    runs in; `times_ms` holds its own time per repeat only where it was measured alone (the one compute node
    of its stretch); `calib_ms` its time alone in each calibration run (the warm-up's profiled runs at node
    granularity)."""

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
    #: the graph position of each source that is a node of this graph (-1: a leaf, a weight or an input)
    src_nodes: list[int] = field(default_factory=list)
    split: int = 0
    stretch: int = -1
    times_ms: list[float] = field(default_factory=list)
    calib_ms: list[float] = field(default_factory=list)



def describe_nodes(bg, backends: list[str]) -> list[NodeInfo]:
    """Every node of `bg` with op, shapes, types, byte sizes and layer path.

    Sources are read from the addresses recorded at build time, so a scheduler's copies never show up.
    """
    ptr = ctypes.POINTER(g.ggml_tensor)
    out = []
    position: dict[int, int] = {}
    for i, (node, src_addrs) in enumerate(sources_of(bg)):
        name = node.contents.name.decode()
        op = g.ggml_op_desc(node).decode()
        srcs = [ctypes.cast(a, ptr) for a in src_addrs if a]
        position[ctypes.cast(node, ctypes.c_void_p).value] = i
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
                src_nodes=[position.get(a, -1) for a in src_addrs if a],
            )
        )
    return out


def derive_splits(bg, nodes: list[NodeInfo]) -> list[dict[str, Any]]:
    """Split boundaries and copied-in bytes, derived as ggml_backend_sched_split_graph makes them; sets each
    node's `split` (a view: the split it falls in). Each split's `time_ms` is filled in after the runs."""
    splits: list[dict[str, Any]] = []
    copied: dict[str, set[int]] = {}
    cur: dict[str, Any] | None = None
    ptr = ctypes.POINTER(g.ggml_tensor)
    for (node, src_addrs), info in zip(sources_of(bg), nodes, strict=True):
        if info.is_view:
            if cur is not None:
                cur["n_nodes"] += 1
                info.split = cur["index"]
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
        info.split = cur["index"]
    return splits


@dataclass
class Stretch(_Timed):
    """Consecutive nodes computed as one graph between two callbacks, and their measured time per repeat."""

    index: int
    backend: str
    split: int
    nodes: list[int]  # every node index in it, views included, in graph order
    compute: list[int]  # the compute (non-view) nodes among them; the last one closes the stretch
    times_ms: list[float] = field(default_factory=list)


    @property
    def measured_alone(self) -> bool:
        """True when the stretch has a single compute node: that node's time is measured, not apportioned."""
        return len(self.compute) == 1


def plan_stretches(
    nodes: list[NodeInfo],
    granularity: str | int,
    est_ms: dict[int, float] | None = None,
    budget: int = DEFAULT_BUDGET,
) -> list[Stretch]:
    """Group the nodes (their `split`s set) into stretches for `granularity` (see the module docstring).

    A stretch closes at its last compute node; it also closes where the split changes, so that it never spans
    two backends. Views join the stretch of the next compute node (they run with it); trailing views join the
    last stretch. `"auto"` needs `est_ms` (node index -> an estimate of the compute node's time, from a
    calibration run or a cost model): with tau = (the estimates' sum) / `budget`, a node estimated at tau or
    more is a stretch of its own, and consecutive smaller nodes gather, layer by layer, until their stretch
    holds tau: at most about 3 `budget` stretches besides the splits' ends, whatever the size of the graph
    (in practice fewer than `budget`).
    """
    granularity = check_granularity(granularity)
    compute = [n for n in nodes if not n.is_view]
    tau, held = 0.0, 0.0  # "auto": the threshold, and the estimated time of the stretch being built
    if granularity == "auto":
        if est_ms is None:
            raise ValueError('granularity="auto" needs estimates of the node times (est_ms)')
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise InvalidOptionError(f"budget={budget!r}: expected an integer >= 1")
        est = {n.index: max(0.0, float(est_ms.get(n.index, 0.0))) for n in compute}
        total = sum(est.values())
        tau = total / budget if total > 0 else float("inf")
    following = {n.index: (compute[k + 1] if k + 1 < len(compute) else None) for k, n in enumerate(compute)}
    stretches: list[Stretch] = []
    acc: list[int] = []  # node indices (views included) since the last stretch closed
    cur: list[int] = []  # the compute nodes among them
    for n in nodes:
        acc.append(n.index)
        if n.is_view:
            continue
        cur.append(n.index)
        nxt = following[n.index]
        if nxt is None or nxt.split != n.split or nxt.backend != n.backend or granularity == "node":
            close = True
        elif granularity == "layer":
            close = nxt.layer != n.layer
        elif granularity == "split":
            close = False
        elif granularity == "auto":
            held += est[n.index]
            close = est[n.index] >= tau or est[nxt.index] >= tau or (nxt.layer != n.layer and held >= tau)
        else:
            close = len(cur) >= granularity
        if close:
            stretches.append(Stretch(len(stretches), n.backend, n.split, acc, cur))
            acc, cur, held = [], [], 0.0
    if acc:  # trailing views run with the last stretch (or, in a graph of views only, make one untimed stretch)
        if stretches:
            stretches[-1].nodes.extend(acc)
        else:
            stretches.append(Stretch(0, nodes[-1].backend, nodes[-1].split, acc, []))
    return stretches


# the eval callback's C signature with the tensor as a bare address: ggml asks about every node of the graph,
# so the callback must be cheap, and a plain int costs less than a ctypes tensor pointer built for each call
_EVAL_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)


_TENSOR_P = ctypes.POINTER(g.ggml_tensor)
class _Timer:
    """The eval callback: says yes at the closing node of each stretch and takes a timestamp there."""

    def __init__(self, closing: dict[int, int], n: int):
        self.closing = closing  # address of a stretch's closing node -> stretch index
        self.times = [0.0] * n
        self.last = 0
        self._fn = _EVAL_CALLBACK(self._cb)
        self.cfunc = ctypes.cast(self._fn, g.ggml_backend_sched_eval_callback)

    def start(self) -> None:
        self.times = [0.0] * len(self.times)
        self.last = time.perf_counter_ns()

    def _cb(self, addr, ask, _ud) -> bool:
        if ask:
            return addr in self.closing
        wait_computed(ctypes.cast(addr, _TENSOR_P))
        now = time.perf_counter_ns()
        i = self.closing.get(addr)
        if i is not None:
            self.times[i] = (now - self.last) / 1e6
        self.last = now
        return True


@dataclass
class Measurement:
    nodes: list[NodeInfo]
    splits: list[dict[str, Any]]
    stretches: list[Stretch]
    granularity: str | int
    wall_ms: float
    wall_all_ms: list[float]
    profiled_ms: float
    profiled_all_ms: list[float]
    node_sum_all_ms: list[float]  # per profiled run: its stretch times, summed
    n_splits_read: int
    compute_bytes: int
    calib_all_ms: list[float] = field(default_factory=list)  # wall time of each calibration run
    budget: int = 0  # "auto": the stretch budget it was planned with
    planned_on: str = ""  # "auto": what the plan's node times came from ("calibration" or "estimate")
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
        out = bg.builder.final.t

        def compute() -> int:
            status = self.bs.compute(bg)
            wait_computed(out)  # an RPC compute returns before the server has finished
            return status

        status, dt = self._timed(compute)
        if status != g.GGML_STATUS_SUCCESS:
            raise BackendError(f"graph compute failed on {self.bs.describe()} (status {status})")
        return dt

    def _profiled_once(self, sched, bg, inputs, timer: _Timer) -> float:
        """One run through `sched` with `timer` as its eval callback; wall milliseconds."""
        g.ggml_backend_sched_set_eval_callback(sched, timer.cfunc, None)
        self.s.set_inputs(bg, inputs)

        out = bg.builder.final.t

        def compute() -> int:
            timer.start()  # on the compute thread, right before the graph
            status = g.ggml_backend_sched_graph_compute(sched, bg.gf)
            wait_computed(out)
            return status

        try:
            status, dt = self._timed(compute)
        finally:
            g.ggml_backend_sched_set_eval_callback(sched, g.ggml_backend_sched_eval_callback(), None)
        if status != g.GGML_STATUS_SUCCESS:
            raise BackendError(f"profiled compute failed on {self.bs.describe()} (status {status})")
        return dt

    def measure(
        self,
        frames: int,
        inputs: dict,
        start: str | None = None,
        repeat: int = 5,
        warmup: int = 1,
        progress: ProgressFn | bool | None = None,
        granularity: str | int = DEFAULT_GRANULARITY,
        calibrate: bool = False,
        estimate: Callable[[NodeInfo], float] | None = None,
        budget: int = DEFAULT_BUDGET,
        stream: bool = False,
    ) -> Measurement:
        """`warmup` untimed pairs (their profiled runs at node granularity when `calibrate`: the calibration
        runs), then `repeat` timed plain/profiled pairs at `granularity`; `progress` reports each pair (see
        kzlab.progress). `"auto"` places its stretches from the calibration runs' node times when there are
        any, else from `estimate(node)` (relative times from a cost model; the analysis layer passes one).
        `stream`: time one call of a stateful stream (`Session.graph(frames, stream=True)`); `inputs` then holds
        every graph input (codes, the state as `state:<key>`, the positions and mask for the stream's position),
        so each run is the same call."""
        granularity = check_granularity(granularity)
        if granularity == "auto" and not (calibrate and warmup) and estimate is None:
            raise InvalidOptionError('granularity="auto" needs calibration runs (calibrate, warmup >= 1) or estimate')
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise InvalidOptionError(f"budget={budget!r}: expected an integer >= 1")
        s, bs = self.s, self.bs
        with s.lock:
            bg = s.graph(frames, start, stream=stream, codebooks=codebooks_of(s.model.hparams, inputs, start))
            bs.prepare(bg)
            backends = bs.node_backends(bg)
            n_read = bs.n_splits(bg)
            nodes = describe_nodes(bg, backends)
            splits = derive_splits(bg, nodes) if bs.use_sched else [_one_split(nodes, bs.primary.name)]
            addr = [tensor_address(n) for n, _ in sources_of(bg)]

            def timer_for(stretches: list[Stretch]) -> _Timer:
                return _Timer({addr[st.compute[-1]]: st.index for st in stretches if st.compute}, len(stretches))

            calibrate = bool(calibrate and warmup)
            fine = plan_stretches(nodes, "node") if calibrate else []
            fine_timer = timer_for(fine)
            stretches: list[Stretch] = []
            timer = None
            if granularity != "auto":
                stretches = plan_stretches(nodes, granularity)
                timer = timer_for(stretches)
            elif not calibrate and estimate is not None:
                est = {n.index: float(estimate(n)) for n in nodes if not n.is_view}
                stretches = plan_stretches(nodes, granularity, est, budget)
                timer = timer_for(stretches)
            wall: list[float] = []
            prof: list[float] = []
            sums: list[float] = []
            calib: list[float] = []
            sched, cleanup = self._profiling_sched(bg)
            bar = Progress(warmup + repeat, "profiling", progress, unit="pair")
            try:
                for _ in range(warmup):
                    self._plain_once(bg, inputs)
                    if calibrate:
                        calib.append(self._profiled_once(sched, bg, inputs, fine_timer))
                        for st, t in zip(fine, fine_timer.times, strict=True):
                            if st.compute:
                                nodes[st.compute[0]].calib_ms.append(t)
                    else:
                        self._profiled_once(sched, bg, inputs, timer)
                    bar.step()
                if timer is None:  # "auto" from the calibration runs
                    est = {n.index: _median(n.calib_ms) for n in nodes if not n.is_view}
                    stretches = plan_stretches(nodes, granularity, est, budget)
                    timer = timer_for(stretches)
                # plain and profiled runs come in pairs whose order alternates (plain first, then profiled
                # first), so that neither a change of machine load nor the order itself favours one side
                for r in range(repeat):
                    if r % 2 == 0:
                        dt_plain = self._plain_once(bg, inputs)
                        dt = self._profiled_once(sched, bg, inputs, timer)
                    else:
                        dt = self._profiled_once(sched, bg, inputs, timer)
                        dt_plain = self._plain_once(bg, inputs)
                    wall.append(dt_plain)
                    prof.append(dt)
                    sums.append(sum(timer.times))
                    for st, t in zip(stretches, timer.times, strict=True):
                        st.times_ms.append(t)
                    bar.step()
            finally:
                bar.close()
                g.ggml_backend_sched_set_eval_callback(sched, g.ggml_backend_sched_eval_callback(), None)
                cleanup()
            for st in stretches:
                for i in st.nodes:
                    nodes[i].stretch = st.index
                if st.measured_alone:
                    nodes[st.compute[0]].times_ms = list(st.times_ms)
                splits[min(st.split, len(splits) - 1)]["time_ms"] += st.time_ms
            hp = bg.hparams or s.model.hparams
            read = {k: s.read(a) for k, a in bg.outputs.items()}
            output = family_graph(hp).finish(read, s.plan, hp)["wav"][0].copy()
            return Measurement(
                nodes=nodes,
                splits=splits,
                stretches=stretches,
                granularity=granularity,
                wall_ms=_median(wall),
                wall_all_ms=wall,
                profiled_ms=_median(prof),
                profiled_all_ms=prof,
                node_sum_all_ms=sums,
                n_splits_read=n_read,
                compute_bytes=int(bg.compute_bytes),
                calib_all_ms=calib,
                budget=budget if granularity == "auto" else 0,
                planned_on=("calibration" if calibrate else "estimate") if granularity == "auto" else "",
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
        "time_ms": 0.0,
    }
