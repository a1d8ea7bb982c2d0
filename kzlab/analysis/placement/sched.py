"""ggml_backend_sched_split_graph (ggml 0.15.3, ggml-backend.cpp), re-implemented over a real ggml graph.

The passes, their order and their tie-breaks follow the C code line by line, so that the result can be
checked node for node against the real scheduler where the backends exist, and trusted for a backend that
does not exist here (its supports_op/supports_buft come from a capability profile instead of a device).
Buffers are the one thing not read from the tensors directly: the caller says which tensors are
pre-allocated and in which buffer type, which lets weights "live" in a buffer type this machine lacks.

Not simulated: user assignments (ggml_backend_sched_set_tensor_backend), pipeline parallelism (n_copies > 1)
and ggml_backend_graph_optimize (which may reorder nodes inside a split on some backends; none of the
backends modelled here reorders).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from ggml import ggml as g

from kzlab.analysis.placement.capabilities import BufferType, Capabilities
from kzlab.analysis.placement.rules import addr
from kzlab.errors import KzlabError

MAX_SPLIT_INPUTS = 30  # GGML_SCHED_MAX_SPLIT_INPUTS
VIEW_OPS = {g.GGML_OP_VIEW, g.GGML_OP_RESHAPE, g.GGML_OP_PERMUTE, g.GGML_OP_TRANSPOSE}


class SchedulerAbort(KzlabError):
    """The real scheduler would GGML_ABORT/GGML_ASSERT here (e.g. a pre-allocated tensor no backend can use)."""


@dataclass(frozen=True)
class SimBackend:
    """One entry of the scheduler's backend list: a name, its capability profile and its default buffer type."""

    name: str
    profile: Capabilities
    buft: BufferType


@dataclass(frozen=True)
class Buffer:
    """Where a pre-allocated tensor lives: its buffer type and whether the buffer's usage is WEIGHTS."""

    buft: BufferType
    weights: bool


@dataclass
class Split:
    backend: int
    i_start: int
    i_end: int = 0
    inputs: list[int] = field(default_factory=list)
    input_bytes: int = 0


@dataclass
class Result:
    backends: list[SimBackend]
    node_backend: list[int]
    node_cause: list[str]
    splits: list[Split]
    refusals: list[dict[int, tuple[str, str]]]
    copies: dict[tuple[int, int], int]  # (tensor address, backend) -> bytes


class Tensor:
    """The fields of one ggml tensor the scheduler reads, with the live pointer for the rules."""

    __slots__ = ("ptr", "addr", "op", "srcs", "view_src", "flags", "name", "nbytes")

    def __init__(self, ptr):
        c = ptr.contents
        self.ptr = ptr
        self.addr = addr(ptr)
        self.op = int(c.op)
        self.srcs = [c.src[i] for i in range(g.GGML_MAX_SRC) if c.src[i]]
        self.view_src = addr(c.view_src) if c.view_src else 0
        self.flags = int(c.flags)
        self.name = c.name.decode(errors="replace")
        self.nbytes = int(g.ggml_nbytes(ptr))


def graph_tensors(gf) -> tuple[list, list]:
    """(nodes, leafs) in ggml's order. Leafs are not exposed by the bindings: they are the op-NONE srcs that
    ggml_visit_parents would have collected; pass 1 treats each leaf independently, so order is immaterial."""
    nodes = [g.ggml_graph_node(gf, i) for i in range(g.ggml_graph_n_nodes(gf))]
    seen = {addr(n) for n in nodes}
    leafs, stack = [], list(nodes)
    while stack:
        t = stack.pop()
        for i in range(g.GGML_MAX_SRC):
            s = t.contents.src[i]
            if s and addr(s) not in seen:
                seen.add(addr(s))
                stack.append(s)
                if int(s.contents.op) == g.GGML_OP_NONE:
                    leafs.append(s)
    return nodes, leafs


class Simulator:
    def __init__(self, gf, backends: list[SimBackend], buffers: dict[int, Buffer], op_offload: bool = True):
        self.backends = backends
        self.n = len(backends)
        self.buffers = buffers
        self.op_offload = op_offload
        nodes, leafs = graph_tensors(gf)
        self.nodes = [Tensor(p) for p in nodes]
        self.leafs = [Tensor(p) for p in leafs]
        self.info = {t.addr: t for t in self.nodes + self.leafs}
        self.ids: dict[int, int] = {}
        self.cause: dict[int, str] = {}
        self._sup: dict[tuple[int, int], tuple[str, str] | None] = {}
        #: nodes every backend but the last (the CPU) refuses, with the reason: the parts of a graph a port runs
        #: outside the scheduler, on the CPU path
        self.pinned: dict[int, str] = {}

    # ---- what the rules and the passes ask --------------------------------------------------------------------
    def buffer_kind(self, t) -> str | None:
        b = self.buffers.get(addr(t))
        return b.buft.kind if b else None

    def refusal(self, b: int, t: Tensor) -> tuple[str, str] | None:
        key = (b, t.addr)
        if key not in self._sup:
            if b != self.n - 1 and t.addr in self.pinned:
                self._sup[key] = ("stages", self.pinned[t.addr])
            else:
                self._sup[key] = self.backends[b].profile.refusal(t.ptr, self)
        return self._sup[key]

    def supports_op(self, b: int, t: Tensor) -> bool:
        return self.refusal(b, t) is None

    def supports_buft(self, b: int, buft: BufferType) -> bool:
        return self.backends[b].profile.supports_buft(buft)

    def own_buffer(self, t: Tensor) -> Buffer | None:
        return self.buffers.get(t.view_src) if t.view_src else self.buffers.get(t.addr)

    def tid(self, a: int) -> int:
        return self.ids.get(a, -1) if a else -1

    def tensor(self, p) -> Tensor:
        a = addr(p)
        if a not in self.info:
            self.info[a] = Tensor(p)
        return self.info[a]

    # ---- ggml_backend_sched_backend_from_buffer / _id_from_cur / _buffer_supported ---------------------------
    def backend_from_buffer(self, t: Tensor, op: Tensor) -> int:
        buf = self.own_buffer(t)
        if buf is None:
            return -1
        for i in range(self.n):
            if self.supports_buft(i, buf.buft) and self.supports_op(i, op):
                return i
        return -1

    def from_cur(self, t: Tensor) -> tuple[int, str]:
        b = self.backend_from_buffer(t, t)
        if b != -1:
            return b, "1.dst"
        if t.view_src:
            b = self.backend_from_buffer(self.info[t.view_src], t)
            if b != -1:
                return b, "1.vsrc"
        if self.own_buffer(t) is not None:
            raise SchedulerAbort(f"pre-allocated tensor ({t.name}) in a buffer that cannot run the operation")
        if t.flags & g.GGML_TENSOR_FLAG_INPUT:
            return self.n - 1, "1.inp"
        for i, sp in enumerate(t.srcs):
            s = self.tensor(sp)
            buf = self.buffers.get(s.addr)
            if t.op != g.GGML_OP_ROPE and buf is not None and buf.weights:
                sb = self.backend_from_buffer(s, t)
                if self.op_offload and sb == self.n - 1 and buf.buft.host:
                    for b in range(sb):
                        if self.supports_op(b, t) and self.backends[b].profile.offloads(t.ptr):
                            return b, "1.off"
                return sb, f"1.wgt{i}"
        return -1, ""

    def buffer_supported(self, t: Tensor, b: int) -> bool:
        buf = self.own_buffer(t)
        if buf is not None:
            buft = buf.buft
        else:
            tb = self.tid(t.addr)
            if tb == -1 and t.view_src:
                tb = self.tid(t.view_src)
            buft = self.backends[tb].buft if tb != -1 else None
        return buft is not None and self.supports_buft(b, buft)

    def set_if_supported(self, t: Tensor, b: int, cause: str) -> None:
        if self.supports_op(b, t):
            self.ids[t.addr] = b
            self.cause[t.addr] = cause

    # ---- the passes ---------------------------------------------------------------------------------------------
    def run(self) -> Result:
        n_last = self.n - 1
        for t in self.leafs + self.nodes:  # pass 1
            if self.tid(t.addr) == -1:
                b, c = self.from_cur(t)
                self.ids[t.addr] = b
                if b != -1:
                    self.cause[t.addr] = c
        order = [t for t in self.nodes if t.op not in VIEW_OPS]
        for seq, skip_cpu, cause in (  # pass 2
            (order, True, "2.gpu-down"),
            (order[::-1], True, "2.gpu-up"),
            (order, False, "2.rest-down"),
            (order[::-1], False, "2.rest-up"),
        ):
            cur = -1
            for t in seq:
                b = self.tid(t.addr)
                if b != -1:
                    cur = -1 if (skip_cpu and b == n_last) else b
                elif cur != -1:
                    self.set_if_supported(t, cur, cause)
        for t in order:  # pass 3
            b = self.tid(t.addr)
            if b == -1:
                best = -1
                for c in range(self.n):
                    if self.supports_op(c, t):
                        k = sum(
                            1
                            for sp in t.srcs
                            if (self.tid(addr(sp)) != -1 or self.tid(self.tensor(sp).view_src) != -1)
                            and self.buffer_supported(self.tensor(sp), c)
                        )
                        if k > best:
                            best = k
                            self.ids[t.addr] = c
                            self.cause[t.addr] = "3.best"
            else:
                for c in range(b):
                    if self.backends[c].buft == self.backends[b].buft and self.supports_op(c, t):
                        if all(self.buffer_supported(self.tensor(sp), c) for sp in t.srcs):
                            self.ids[t.addr] = c
                            self.cause[t.addr] = "3.upg"
                            break
        for t in self.nodes:  # pass 4
            if t.view_src and self.tid(t.addr) == -1:
                self.ids[t.addr] = self.tid(t.view_src)
                self.cause[t.addr] = "4.vsrc"
            cur = self.tid(t.addr)
            for sp in t.srcs:
                s = self.tensor(sp)
                if self.tid(s.addr) == -1:
                    if s.view_src:
                        self.ids[s.addr] = self.tid(s.view_src)
                        self.cause[s.addr] = "4.vsrc"
                    else:
                        self.ids[s.addr] = cur
                        self.cause[s.addr] = "4.cur"
            for c in range(self.n):
                if self.tid(t.addr) != -1:
                    break
                self.set_if_supported(t, c, "4.first")
            if self.tid(t.addr) == -1:
                raise SchedulerAbort(f"no backend can run {t.name} (no CPU fallback)")
        splits = self.split()
        nb = [self.tid(t.addr) for t in self.nodes]
        refusals = []
        for t, b in zip(self.nodes, nb, strict=True):
            refusals.append({c: r for c in range(self.n) if c != b and (r := self.refusal(c, t)) is not None})
        return Result(
            self.backends, nb, [self.cause.get(t.addr, "") for t in self.nodes], splits, refusals, self.copies
        )

    def split(self) -> list[Split]:
        """Pass 5: splits and the input copies (one per tensor per backend, reused by later splits)."""
        self.copies: dict[tuple[int, int], int] = {}
        splits: list[Split] = []
        first = 0
        while first < len(self.nodes) and self.nodes[first].op in VIEW_OPS:
            first += 1
        if first == len(self.nodes):
            return splits
        split = Split(self.tid(self.nodes[first].addr), 0)
        splits.append(split)
        cur = split.backend
        for i in range(first, len(self.nodes)):
            t = self.nodes[i]
            if t.op in VIEW_OPS:
                continue
            b = self.tid(t.addr)
            need_new = False
            if b == cur and split.inputs:
                for sp in t.srcs:
                    s = self.tensor(sp)
                    buf = self.buffers.get(s.addr)
                    if buf is not None and buf.weights:
                        if self.tid(s.addr) != cur and not self.buffer_supported(s, cur):
                            need_new = True
                            break
                    if len(split.inputs) == MAX_SPLIT_INPUTS:
                        if (
                            self.tid(s.addr) != cur
                            and (s.addr, cur) not in self.copies
                            and not self.buffer_supported(s, cur)
                        ):
                            need_new = True
                            break
            if b != cur or need_new:
                split.i_end = i
                split = Split(b, i)
                splits.append(split)
                cur = b
            for sp in t.srcs:
                s = self.tensor(sp)
                sb = self.tid(s.addr)
                if sb == -1:
                    raise SchedulerAbort(f"input {s.name} of {t.name} unassigned")
                if sb != cur and not self.buffer_supported(s, cur):
                    if (s.addr, cur) not in self.copies:
                        if len(split.inputs) >= MAX_SPLIT_INPUTS:
                            raise SchedulerAbort(f"split {len(splits) - 1} needs more than {MAX_SPLIT_INPUTS} inputs")
                        self.copies[(s.addr, cur)] = s.nbytes
                        split.inputs.append(s.addr)
                        split.input_bytes += s.nbytes
        split.i_end = len(self.nodes)
        return splits


def real_buffers(tensors: list, bufts: dict[int, BufferType]) -> dict[int, Buffer]:
    """The pre-allocated tensors of a real graph and their buffers (for validating against the real scheduler)."""
    out: dict[int, Buffer] = {}
    for t in tensors:
        b = t.contents.buffer
        if b:
            bt = int(ctypes.cast(g.ggml_backend_buffer_get_type(b), ctypes.c_void_p).value or 0)
            usage = int(g.ggml_backend_buffer_get_usage(b))
            out[addr(t)] = Buffer(bufts[bt], usage == g.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
    return out
