"""The graph builder: a ggml context, the weights as ggml tensors, and lowerings of the decoder's ops.

Every tensor created inside `layer(path, ...)` is named `path:OP` (or `path:OP.n`), so that profiles,
placements and traces can attribute each node to the logical layer it belongs to, like llama.cpp's model
graphs do. Activations carry their memory order with them (`Act.cl`): channels-last means ggml ne
[C, T] (a torch [T, C] array), channels-first means ne [T, C] (torch [C, T]). Each lowering states the order
it needs and the builder inserts the (named, counted) transposes, so lowering variants stay honest.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from ggml import ggml as g

from kzlab.errors import InvalidOptionError
from kzlab.graph import fused
from kzlab.graph.options import KTAP, LoweringPlan
from kzlab.graph.prepared import Prepared

GGML_TYPES = {"F32": g.GGML_TYPE_F32, "F16": g.GGML_TYPE_F16, "BF16": g.GGML_TYPE_BF16, "Q8_0": g.GGML_TYPE_Q8_0}
TYPE_NAMES = {v: k for k, v in GGML_TYPES.items()} | {g.GGML_TYPE_I32: "I32"}
MAX_NODES = 32768
#: ggml_set keeps its byte offset in an int32 op parameter and asserts it is below 1 GiB
SET_MAX_OFFSET = 1 << 30
MAX_TILES = 64  # per conv: beyond it a tile grows instead, so a very long input cannot exhaust the graph


def window_mask(queries: np.ndarray, keys: np.ndarray, window: int) -> np.ndarray:
    """A causal attention mask over a window, as SOFT_MAX's mask input (0 where a key is seen, -inf elsewhere):
    query position q sees key position k iff 0 <= k <= q and k > q - window. `queries` [Tq, 1] and `keys` [1, Tk]
    are absolute positions; a key before the stream's start (k < 0: a cache slot not filled yet) is hidden."""
    allowed = (keys >= 0) & (keys <= queries) & (keys > queries - window)
    return np.where(allowed, 0.0, -np.inf).astype(np.float32)


def fit_mask(t, mask: np.ndarray) -> np.ndarray:
    """`mask` ([queries, keys], from `window_mask`) as the graph's mask input `t` holds it (`attention_mask`):
    float32 as it is for SOFT_MAX, or FLASH_ATTN_EXT's float16 with -inf rows padding the queries."""
    if int(t.contents.type) != g.GGML_TYPE_F16:
        return mask
    rows = int(t.contents.ne[1]) - mask.shape[0]
    return np.pad(mask, ((0, rows), (0, 0)), constant_values=-np.inf).astype(np.float16)


@dataclass
class LayerRecord:
    """One logical layer of the model (what the profiler's `layers` rows are made of)."""

    path: str
    stage: str
    kind: str
    c_in: int = 0
    c_out: int = 0
    kernel: int = 0
    t_in: int = 0
    t_out: int = 0
    macs: int = 0
    macs_seed: int = 0
    extra: dict = field(default_factory=dict)


class Act(NamedTuple):
    """An activation tensor and its memory order (cl = channels-last, ggml ne [C, T])."""

    t: ctypes._Pointer
    cl: bool

    @property
    def C(self) -> int:
        return int(self.t.contents.ne[0] if self.cl else self.t.contents.ne[1])

    @property
    def T(self) -> int:
        return int(self.t.contents.ne[1] if self.cl else self.t.contents.ne[0])


def ne_of(t) -> tuple[int, ...]:
    return tuple(int(t.contents.ne[i]) for i in range(4))


@dataclass
class StateSlot:
    """One tensor of a streaming graph's carried state: what the graph reads as `state:<key>` and writes back.

    `kind` is "context" (the last `frames` frames of a layer's input, the left context a causal conv, a transposed
    conv's overlap or a depthwise conv reads; zeros before the first call, which is what the offline decode's
    causal padding gives) or "kv" (an attention layer's keys or values after RoPE, `frames` of them, each with
    `channels` values; masked out before they exist). `cl`: a context's memory order, channels-last (ggml ne
    [C, frames]) or channels-first (ne [frames, C]); a kv slot is ne [channels, frames]."""

    key: str
    kind: str
    channels: int
    frames: int
    cl: bool
    input: ctypes._Pointer
    output: ctypes._Pointer


class Carry:
    """The state a streaming graph takes in and gives back, slot by slot (see GraphBuilder.context)."""

    def __init__(self) -> None:
        self.slots: dict[str, StateSlot] = {}


class WeightTensors:
    """The prepared weights as ggml tensors in their own no-alloc context (allocated by the runtime)."""

    def __init__(self, prepared: dict[str, Prepared]):
        self.prepared = prepared
        size = g.ggml_tensor_overhead() * (len(prepared) + 8)
        self.ctx = g.ggml_init(g.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=True))
        self.tensors: dict[str, ctypes._Pointer] = {}
        for name, p in prepared.items():
            ne = p.ne
            t = g.ggml_new_tensor(self.ctx, GGML_TYPES[p.type], len(ne), (ctypes.c_int64 * len(ne))(*ne))
            g.ggml_set_name(t, name.encode()[:63])
            self.tensors[name] = t
        self.buffer = None

    def __getitem__(self, name: str):
        return self.tensors[name]

    def upload(self) -> None:
        """Copy (or, for zero-copy weights, read through) the bytes into the allocated tensors, then drop kzlab's
        own copies of them (`Prepared.release`).

        F16 weights an F32 lowering needs are widened straight into a host buffer's memory (one pass);
        a device buffer gets them widened in numpy first."""
        host = bool(self.buffer) and bool(g.ggml_backend_buffer_is_host(self.buffer))
        for name, p in self.prepared.items():
            t = self.tensors[name]
            if g.ggml_nbytes(t) != p.nbytes:
                raise AssertionError(f"weight {name}: {p.nbytes} bytes for a tensor of {g.ggml_nbytes(t)}")
            if p.widen and host:
                n = int(np.prod(p.ne))
                dst = np.ctypeslib.as_array(ctypes.cast(t.contents.data, ctypes.POINTER(ctypes.c_float)), (n,))
                np.copyto(dst, np.asarray(p.stored()).reshape(-1), casting="same_kind")
                p.release()
                continue
            data = np.ascontiguousarray(p.values())
            g.ggml_backend_tensor_set(t, data.ctypes.data, 0, data.nbytes)
            p.release()

    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.prepared.values())

    def free(self) -> None:
        if self.buffer is not None:
            g.ggml_backend_buffer_free(self.buffer)
            self.buffer = None
        if self.ctx is not None:
            g.ggml_free(self.ctx)
            self.ctx = None


class WeightView:
    """Weight tensors of several sets seen as one (a later set's tensor of a name wins): a streaming graph reads
    the few weights its plan lays out otherwise (`LoweringPlan.for_stream`) from a set of their own."""

    def __init__(self, *sets: WeightTensors):
        self.sets = sets
        self.prepared = {k: v for s in sets for k, v in s.prepared.items()}

    def __getitem__(self, name: str):
        for s in reversed(self.sets):
            if name in s.tensors:
                return s.tensors[name]
        raise KeyError(name)


class StageRun:
    """A decoder's stages built in order: `run(name, fn)` builds stage `name` as `x = fn(x)` inside its name
    (`GraphBuilder.stage`, which the layers record) and marks its output, when the stage lies between `first` and
    `last` (positions in `stages`: a graph may start at a stage, or stop at one); `x` is the activation so far."""

    def __init__(self, b: GraphBuilder, stages: list[str], x: Act | None, first: int = 0, last: int | None = None):
        self.b, self.stages, self.x = b, stages, x
        self.first, self.last = first, len(stages) - 1 if last is None else last

    def __call__(self, name: str, fn) -> None:
        if not self.first <= self.stages.index(name) <= self.last:
            return
        self.b.stage = name
        self.x = fn(self.x)
        self.b.mark_output(name, self.x)


class GraphBuilder:
    """Builds one compute graph. Block functions (kzlab.graph.blocks) call the lowering methods below."""

    def __init__(
        self, weights: WeightTensors | WeightView, low: LoweringPlan, n_nodes: int = MAX_NODES,
        keep_stages: bool = False,
        stream: bool = False,
    ):
        if not isinstance(low, LoweringPlan):  # a request still saying `auto` must be resolved first, once
            raise TypeError(f"GraphBuilder needs a LoweringPlan (Lowering.resolve), got {type(low).__name__}")
        self.w = weights
        self.low = low
        #: keep every stage's output allocated to the end (to read intermediates); else only the waveform, so
        #: the allocator can reuse a stage's memory (on long inputs, most of the compute buffer)
        self.keep_stages = keep_stages
        size = g.ggml_tensor_overhead() * n_nodes + g.ggml_graph_overhead_custom(n_nodes, False)
        self.ctx = g.ggml_init(g.ggml_init_params(mem_size=size, mem_buffer=None, no_alloc=True))
        self.gf = g.ggml_new_graph_custom(self.ctx, n_nodes, False)
        self.layers: list[LayerRecord] = []
        self.stage = ""
        self.inputs: dict[str, ctypes._Pointer] = {}
        self.outputs: dict[str, Act] = {}
        self._path: list[str] = []
        self._last = None
        self.final: Act | None = None
        #: a streaming graph's carried state (None: an offline graph, whose causal layers pad with zeros)
        self.carry: Carry | None = Carry() if stream else None

    # ---- naming -------------------------------------------------------------------------------------
    @contextmanager
    def layer(self, path: str, kind: str, **info) -> Iterator[LayerRecord]:
        rec = LayerRecord(path=path, stage=self.stage, kind=kind, **info)
        self.layers.append(rec)
        self._name_new("")  # anything created before belongs to no layer; mark it so
        self._path.append(path)
        try:
            yield rec
        finally:
            self._name_new(path)
            self._path.pop()

    def _name_new(self, path: str) -> None:
        """Name every tensor created since the last call (ggml keeps them in creation order)."""
        t = g.ggml_get_next_tensor(self.ctx, self._last) if self._last else g.ggml_get_first_tensor(self.ctx)
        counts: dict[str, int] = {}
        base = path or (self._path[-1] if self._path else "graph")
        while t:
            if not t.contents.name:
                op = g.ggml_op_desc(t).decode()
                n = counts.get(op, 0)
                counts[op] = n + 1
                g.ggml_set_name(t, (f"{base}:{op}" + (f".{n}" if n else "")).encode()[:63])
            self._last = t
            t = g.ggml_get_next_tensor(self.ctx, t)

    def input(self, name: str, type_: int, *ne: int):
        t = g.ggml_new_tensor(self.ctx, type_, len(ne), (ctypes.c_int64 * len(ne))(*ne))
        g.ggml_set_name(t, name.encode())
        g.ggml_set_input(t)
        self.inputs[name] = t
        self._name_new("")
        return t

    def attention_mask(self, keys: int, queries: int):
        """The graph input `mask` of the attention (`attend`): SOFT_MAX's float32 [keys, queries], or with
        attn='flash' FLASH_ATTN_EXT's float16 with the queries padded to GGML_KQ_MASK_PAD rows (ggml-cpu's kernel
        asserts it; the padding rows are never queried). `fit_mask` writes a `window_mask` into either."""
        if self.low.attn == "flash":
            pad = int(g.GGML_KQ_MASK_PAD)
            return self.input("mask", g.GGML_TYPE_F16, keys, -(-queries // pad) * pad)
        return self.input("mask", g.GGML_TYPE_F32, keys, queries)

    def attend(self, q, k, v, mask, scale: float) -> Act:
        """softmax(scale * k.q + mask) v for every head: q ne [D, H, Tq], k and v ne [D, KV, Tk] (KV divides H:
        grouped heads share theirs); returns ne [D * H, Tq], channels-last. attn='mulmat': two products around
        SOFT_MAX (the values transposed first); attn='flash': one FLASH_ATTN_EXT node, which the CPU computes
        without the scores tensor and which gives [D, H, Tq] directly (a 25-frame kyutai/mimi decode, 8 layers of
        50 steps: 108 -> 98 ms here, the values' product of 50 x 50 scores alone 0.67 ms a layer on BLAS)."""
        ctx = self.ctx
        D, H, Tq = (int(q.contents.ne[i]) for i in range(3))
        q = g.ggml_permute(ctx, q, 0, 2, 1, 3)  # [D, Tq, H]
        k = g.ggml_permute(ctx, k, 0, 2, 1, 3)  # [D, Tk, KV]
        if self.low.attn == "flash":
            v = g.ggml_permute(ctx, v, 0, 2, 1, 3)  # [D, Tk, KV]
            o = g.ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0, 0.0)  # [D, H, Tq]
        else:
            vt = g.ggml_cont(ctx, g.ggml_permute(ctx, v, 1, 2, 0, 3))  # [Tk, D, KV]
            kq = g.ggml_soft_max_ext(ctx, g.ggml_mul_mat(ctx, k, q), mask, scale, 0.0)  # [Tk, Tq, H]
            o = g.ggml_cont(ctx, g.ggml_permute(ctx, g.ggml_mul_mat(ctx, vt, kq), 0, 2, 1, 3))  # [D, H, Tq]
        return Act(g.ggml_reshape_2d(ctx, o, D * H, Tq), True)

    def mark_output(self, stage: str, a: Act) -> None:
        """Record a stage's output; flag it as a graph output (kept to the end) if it will be read.

        A stage's view is copied first: ggml's allocator keeps the tensor flagged, not the one a view reads, so a
        view's memory could be reused by a later node before the output is read (the waveform is the last node:
        nothing comes after it)."""
        if self.keep_stages or stage == "wav":
            if stage != "wav" and a.t.contents.view_src:
                a = Act(g.ggml_cont(self.ctx, a.t), a.cl)
            g.ggml_set_output(a.t)
            self.outputs[stage] = a

    def finish(self, final: Act):
        #: the graph's last output (the waveform, or what the family's host post-processing starts from)
        self.final = final
        for a in self.outputs.values():
            g.ggml_build_forward_expand(self.gf, a.t)
        for slot in (self.carry.slots.values() if self.carry else ()):
            g.ggml_build_forward_expand(self.gf, slot.output)
        g.ggml_build_forward_expand(self.gf, final.t)
        self._name_new("graph")
        return self.gf

    def free(self) -> None:
        if self.ctx is not None:
            g.ggml_free(self.ctx)
            self.ctx = None

    # ---- layout -------------------------------------------------------------------------------------
    def as_cl(self, a: Act) -> Act:
        if a.cl:
            return a
        return Act(g.ggml_cont(self.ctx, g.ggml_transpose(self.ctx, a.t)), True)

    def as_cf(self, a: Act) -> Act:
        if not a.cl:
            return a
        return Act(g.ggml_cont(self.ctx, g.ggml_transpose(self.ctx, a.t)), False)

    def pad_left(self, a: Act, n: int) -> Act:
        if n == 0:
            return a
        if a.cl:
            return Act(g.ggml_pad_ext(self.ctx, a.t, 0, 0, n, 0, 0, 0, 0, 0), True)
        return Act(g.ggml_pad_ext(self.ctx, a.t, n, 0, 0, 0, 0, 0, 0, 0), False)

    def context(self, key: str | None, a: Act, frames: int, fused_join: bool = False) -> tuple[Act, int]:
        """`a` with `frames` frames of its past in front, and how many zero frames a causal layer must still pad.

        Offline (no carry, or no `key`): `a` as it is and `frames` (the layer pads zeros itself). Streaming: the
        graph input `state:<key>` (the last `frames` frames this layer read in the previous call, zeros before the
        first) joined in front of `a`, 0 zeros to pad, and the last `frames` frames of the join written back as the
        state's output: chunk after chunk the layer reads exactly the frames the offline decode's layer reads.

        `fused_join`: the join is kzlab's CPU node (`fused.join_frames`: the same bytes, as block copies) instead of
        ggml's CONCAT (one thread, element by element); for a layer that runs on the CPU in the fast mode (a fused
        node, or a conv reading one's output), where kzlab's nodes can run."""
        if self.carry is None or key is None or frames == 0:
            return a, frames
        if key in self.carry.slots:
            raise ValueError(f"state {key!r} taken twice in one graph")
        C, T = a.C, a.T
        ne = (C, frames) if a.cl else (frames, C)
        st = self.input(f"state:{key}", g.GGML_TYPE_F32, *ne)
        if fused_join:
            full = Act(fused.join_frames(self.ctx, st, a.t, a.cl), a.cl)
        else:
            full = Act(g.ggml_concat(self.ctx, st, a.t, 1 if a.cl else 0), a.cl)
        out = g.ggml_cont(self.ctx, self.time_view(full, T, frames).t)
        self._state_out(key, "context", C, frames, a.cl, st, out)
        return full, 0

    def kv_cache(self, key: str, t, frames: int):
        """Streaming attention: the cached keys (or values) of the last `frames` positions, ne [D, heads, frames]
        (graph input `state:<key>`), joined in front of this call's `t` (ne [D, heads, T]); the last `frames` of the
        join are written back. Offline: `t` as it is."""
        if self.carry is None:
            return t
        D, H, T = (int(t.contents.ne[i]) for i in range(3))
        st = self.input(f"state:{key}", g.GGML_TYPE_F32, D, H, frames)
        full = g.ggml_concat(self.ctx, st, t, 2)
        nb1, nb2 = int(full.contents.nb[1]), int(full.contents.nb[2])
        out = g.ggml_cont(self.ctx, g.ggml_view_3d(self.ctx, full, D, H, frames, nb1, nb2, T * nb2))
        self._state_out(key, "kv", D * H, frames, True, st, out)
        return full

    def _state_out(self, key: str, kind: str, channels: int, frames: int, cl: bool, st, out) -> None:
        """Register a state output; it joins the graph here, right after the join it is cut from: expanded only at
        the end, every layer's joined input would stay allocated through the whole graph (a 1-frame call's
        compute buffer was 14.5 MB at full size, 7x the offline decode's)."""
        g.ggml_set_name(out, f"state_out:{key}".encode()[:63])
        g.ggml_set_output(out)
        g.ggml_build_forward_expand(self.gf, out)
        self.carry.slots[key] = StateSlot(key, kind, channels, frames, cl, st, out)

    def chan(self, a: Act, name: str):
        """A per-channel weight vector shaped to broadcast over `a`."""
        v = self.w[name]
        n = int(v.contents.ne[0])
        return g.ggml_reshape_2d(self.ctx, v, n, 1) if a.cl else g.ggml_reshape_2d(self.ctx, v, 1, n)

    def add_bias(self, a: Act, name: str) -> Act:
        return Act(g.ggml_add(self.ctx, a.t, self.chan(a, name)), a.cl)

    def mul_chan(self, a: Act, name: str) -> Act:
        return Act(g.ggml_mul(self.ctx, a.t, self.chan(a, name)), a.cl)

    def time_view(self, a: Act, start: int, length: int) -> Act:
        """Frames [start, start+length) of `a` (a view; contiguous for channels-last)."""
        t = a.t
        if a.cl:
            nb1 = int(t.contents.nb[1])
            return Act(g.ggml_view_2d(self.ctx, t, a.C, length, nb1, start * nb1), True)
        nb0, nb1 = int(t.contents.nb[0]), int(t.contents.nb[1])
        return Act(g.ggml_view_2d(self.ctx, t, length, a.C, nb1, start * nb0), False)

    def join(self, parts: list, dim: int):
        """2-D tensors joined along `dim` (0 or 1) by writing each into its place in one output.

        The first part padded to the full size, then one in-place SET per other part (a row-wise copy), instead
        of a tree of CONCATs (log2(parts) passes of ggml's element-by-element concat). Each SET returns a view
        of the output whose source is the previous SET, so the parts land in order.

        In the portable mode the join is the CONCAT a device port would write (SET is a CPU-side trick that no
        device backend takes, so it would put every join, and the splits around it, on the CPU)."""
        if len(parts) == 1:
            return parts[0]
        if self.low.mode == "portable":
            return self._concat_tree(parts, dim)
        ctx = self.ctx
        ne = [int(parts[0].contents.ne[0]), int(parts[0].contents.ne[1])]
        ne[dim] = sum(int(p.contents.ne[dim]) for p in parts)
        nb1 = 4 * ne[0]
        last = ne[dim] - int(parts[-1].contents.ne[dim])
        if (4 if dim == 0 else nb1) * last >= SET_MAX_OFFSET or nb1 >= 2**31:
            return self._concat_tree(parts, dim)
        # the output is the first part padded to full size: a node, allocated when it is computed (a new leaf
        # would be allocated by ggml's allocator at the start of the graph and held through all of it)
        first = parts[0]
        if not g.ggml_is_contiguous(first):
            first = g.ggml_cont(ctx, first)
        rest = ne[dim] - int(first.contents.ne[dim])
        out = g.ggml_pad_ext(ctx, first, 0, rest if dim == 0 else 0, 0, rest if dim == 1 else 0, 0, 0, 0, 0)
        at = int(parts[0].contents.ne[dim])
        for p in parts[1:]:
            out = g.ggml_set_2d_inplace(ctx, out, p, nb1, at * (4 if dim == 0 else nb1))
            at += int(p.contents.ne[dim])
        return out

    def _concat_tree(self, parts: list, dim: int):
        """The join for outputs beyond SET's offset range: a balanced tree of CONCATs (log2(parts) passes)."""
        while len(parts) > 1:
            nxt = [g.ggml_concat(self.ctx, parts[i], parts[i + 1], dim) for i in range(0, len(parts) - 1, 2)]
            if len(parts) % 2:
                nxt.append(parts[-1])
            parts = nxt
        return parts[0]

    def room(self, tensors: int, why: str) -> None:
        """Refuse (InvalidOptionError) before the graph's context runs out of room for `tensors` more tensors: ggml
        would abort the process (GGML_ASSERT in ggml_new_tensor), and in Jupyter the user's kernel with it."""
        left = int(g.ggml_get_mem_size(self.ctx)) - int(g.ggml_used_mem(self.ctx))
        if tensors * int(g.ggml_tensor_overhead()) > left:
            raise InvalidOptionError(f"{why}: the graph would need more than its {MAX_NODES} tensors; ask for fewer "
                                     "pieces (a larger mm_chunk, or fewer frames)")

    # ---- matrix products ------------------------------------------------------------------------------
    def mul_mat(self, a, b):
        """ggml_mul_mat(a, b), split into chunks of at most mm_chunk rows of src1 when asked."""
        n = self.low.mm_chunk
        ne_b = ne_of(b)
        rows = ne_b[1] * ne_b[2] * ne_b[3]
        if not n or rows <= n or ne_b[2] * ne_b[3] != 1:
            return g.ggml_mul_mat(self.ctx, a, b)
        chunks = -(-rows // n)
        self.room(3 * chunks, f"mm_chunk={n} splits a product of {rows} src1 rows into {chunks} chunks")
        parts = []
        nb1 = int(b.contents.nb[1])
        for s in range(0, rows, n):
            m = min(n, rows - s)
            view = g.ggml_view_2d(self.ctx, b, ne_b[0], m, nb1, s * nb1)
            parts.append(g.ggml_mul_mat(self.ctx, a, view))
        return self.join(parts, 1)

    def linear(self, x: Act, wname: str, bname: str | None = None) -> Act:
        """y = W x (+ b) over channels; channels-last in and out."""
        x = self.as_cl(x)
        y = Act(self.mul_mat(self.w[wname], x.t), True)
        return self.add_bias(y, bname) if bname else y

    # ---- convolutions -------------------------------------------------------------------------------
    def conv_input_cl(self, k: int, c_out: int = 0) -> bool:
        """Whether the conv1d lowering reads a channels-last input (else channels-first)."""
        if self.low.conv == "im2col-f32" and self.low.conv_src1 == "kernel" and c_out == 1:
            return True  # the taps product (see _taps_conv)
        return self.low.conv in KTAP or (k == 1 and self.low.conv == "im2col-f32")

    def convt_input_cl(self) -> bool:
        return self.low.convt in ("col2im", "shift", "fused")  # fused: the upsample convs outside the blocks are col2im

    def conv1d(
        self, x: Act, wname: str, bname: str | None, dilation: int = 1, padding: tuple[int, int] | None = None,
        state: str | None = None, fused_join: bool = False,
    ) -> Act:
        """Causal conv1d (left padding (k-1)*d, stride 1), lowered as `low.conv` says. `padding` (ktap only): the
        zeros (left, right) instead, in one PAD, the output as many frames as the padded input gives ('same':
        ((k-1)*d/2, (k-1)*d/2), T frames, with no shifted view to copy after). `state`: the key of the conv's left
        context in a streaming graph (`context`): there the frames before the input are the previous call's, not
        zeros; `fused_join` joins them by kzlab's CPU node (`context`), in the fast mode only."""
        if fused_join and self.low.mode != "fast":
            raise ValueError("fused_join: kzlab's CPU nodes run in the fast mode only")
        p = self.w.prepared[wname]
        if p.layout == "taps":
            k = int(self.w[wname].contents.ne[1])
        elif self.low.conv in KTAP:
            k = p.ne[2]
        else:
            k = p.ne[0] // x.C
        pad = (k - 1) * dilation
        if padding is not None and (self.low.conv not in KTAP or sum(padding) != pad or state is not None):
            raise ValueError(f"conv1d padding {padding}: ktap only, {pad} frames in all")
        x, zeros = self.context(state, x, pad, fused_join)
        left, right = padding or (zeros, 0)
        T_in, T = x.T, x.T + left + right - pad  # input and output frames
        if p.layout == "taps":
            out = self._taps_conv(x, wname, dilation, left)
            return self.add_bias(out, bname) if bname else out
        if self.low.conv in KTAP:
            cin, cout, k = p.ne
        else:
            kc, cout = p.ne
            cin = x.C
        acc = self._acc_spans(T_in, T, k, dilation, left, cout) if self.low.conv == "ktap-acc" else None
        if acc is not None:
            out = self._ktap_acc(x, wname, cin, cout, dilation, left, T, *acc)
        elif self.low.conv in KTAP:
            xl = self.as_cl(x)
            xp = Act(g.ggml_pad_ext(self.ctx, xl.t, 0, 0, left, right, 0, 0, 0, 0), True) if left or right else xl
            W = self.w[wname]
            acc = None
            for j in range(k):
                wk = g.ggml_view_2d(self.ctx, W, cin, cout, int(W.contents.nb[1]), j * int(W.contents.nb[2]))
                xs = self.time_view(xp, j * dilation, T)
                if self.low.conv_src1 == "data":
                    y = Act(self.mul_mat(wk, xs.t), True)
                else:
                    y = Act(self.mul_mat(xs.t, wk), False)
                acc = y if acc is None else Act(g.ggml_add(self.ctx, acc.t, y.t), y.cl)
            out = acc
        elif k == 1 and self.low.conv == "im2col-f32":
            # a pointwise conv is a plain product: im2col would only copy (and transpose) the input
            xl = self.as_cl(x)
            if self.low.conv_src1 == "data":
                out = Act(self.mul_mat(self.w[wname], xl.t), True)
            else:
                out = Act(self.mul_mat(xl.t, self.w[wname]), False)
        elif self.low.conv == "im2col-f16":
            # ggml_conv_1d's graph: pad, im2col to F16 columns, one product
            xc = self.pad_left(self.as_cf(x), left)
            kshape = g.ggml_new_tensor_2d(self.ctx, g.GGML_TYPE_F16, k, cin)  # im2col reads only its shape
            cols = g.ggml_im2col(self.ctx, kshape, xc.t, 1, 0, 0, 0, dilation, 0, False, g.GGML_TYPE_F16)
            cols = g.ggml_reshape_2d(self.ctx, cols, k * cin, T)
            out = self._conv_product(wname, cols)
        else:
            out = self._im2col_f32_conv(self.as_cf(x), wname, k, cin, dilation, left)
        return self.add_bias(out, bname) if bname else out

    def _acc_spans(
        self, T_in: int, T: int, k: int, dilation: int, left: int, cout: int
    ) -> tuple[list[tuple[int, int, int]], int] | None:
        """ktap-acc's taps as (j, t0, t1): output frame t takes tap j from input frame t + j*d - left (`left` zeros
        before the `T_in` input frames, T frames out), so tap j reaches output frames
        [t0, t1) = [max(0, left - j*d), min(T, T_in + left - j*d)); with the tap that reaches every frame, the sum's
        start. None where ACC cannot sum them (a pointwise conv has nothing to sum), and the conv's layer record
        says why: ACC keeps its byte offsets in 32 bits, and a sum needs a tap that reaches every frame to start
        from."""
        if k == 1:
            return None
        spans = [(j, max(0, left - j * dilation), min(T, T_in + left - j * dilation)) for j in range(k)]
        full = next((j for j, t0, t1 in spans if t0 == 0 and t1 == T), None)
        why = ("output over 1 GiB: ACC's offsets are 32-bit" if 4 * cout * T >= SET_MAX_OFFSET
               else "no tap reaches every output frame" if full is None else None)
        if why is None:
            return spans, full
        if self.layers:
            self.layers[-1].extra["taps_summed"] = f"ADD on a padded copy ({why})"
        return None

    def _ktap_acc(
        self, x: Act, wname: str, cin: int, cout: int, dilation: int, left: int, T: int,
        spans: list[tuple[int, int, int]], full: int,
    ) -> Act:
        """ktap without the padded copy: each tap's product over the input frames it reads (`spans`, see
        `_acc_spans`), added in place (ACC) into the output frames it reaches, from the tap `full` that reaches
        every frame on. PAD would write the whole input once more, one element at a time in ggml-cpu (3.4 GB/s
        here); ACC adds rows with ggml's vector add."""
        ctx, W = self.ctx, self.w[wname]
        xl = self.as_cl(x)
        data = self.low.conv_src1 == "data"

        def product(j: int, t0: int, t1: int) -> Act:
            wk = g.ggml_view_2d(ctx, W, cin, cout, int(W.contents.nb[1]), j * int(W.contents.nb[2]))
            xs = self.time_view(xl, t0 + j * dilation - left, t1 - t0)
            return Act(self.mul_mat(wk, xs.t), True) if data else Act(self.mul_mat(xs.t, wk), False)

        acc = product(full, 0, T)
        nb = [int(v) for v in acc.t.contents.nb[1:4]]  # channels-last: a row is a frame; channels-first: a channel
        for j, t0, t1 in spans:
            if j != full and t1 > t0:
                offset = t0 * (nb[0] if data else 4)
                acc = Act(g.ggml_acc_inplace(ctx, acc.t, product(j, t0, t1).t, *nb, offset), acc.cl)
        if self.layers:  # the products skip the padding's zeros: fewer multiply-adds than the conv's own count
            self.layers[-1].extra["product_macs"] = cin * cout * sum(max(0, t1 - t0) for _, t0, t1 in spans)
        return acc

    def _taps_conv(self, x: Act, wname: str, dilation: int, left: int) -> Act:
        """A conv with one output channel: one product gives every tap's dot product per frame, P [T, K]
        (P[k, t] = w_k . x_t), then y[t] = sum_k P[k, t + k*d - pad] is K shifted views added up.

        im2col would write K copies of the input (for the final 96 -> 1 conv, 160 MB at 31 frames) for a
        product with one output row; here the largest new tensor is P, K floats per frame. `left`: the zeros in
        front of the input (the causal padding; 0 where the input brings its own past, `context`)."""
        ctx, W = self.ctx, self.w[wname]
        k = int(W.contents.ne[1])
        xl = self.as_cl(x)
        T = xl.T + left - (k - 1) * dilation
        P = self.mul_mat(xl.t, W)  # ne [T_in, K]
        if left:
            P = g.ggml_pad_ext(ctx, P, left, 0, 0, 0, 0, 0, 0, 0)  # causal zeros in front of every tap's row
        nb1 = int(P.contents.nb[1])
        acc = None
        for j in range(k):
            v = g.ggml_view_2d(ctx, P, T, 1, nb1, j * nb1 + j * dilation * 4)
            acc = v if acc is None else g.ggml_add(ctx, acc, v)
        return Act(acc, False)

    def _conv_product(self, wname: str, cols) -> Act:
        if self.low.conv_src1 == "data":
            return Act(self.mul_mat(self.w[wname], cols), True)
        return Act(self.mul_mat(cols, self.w[wname]), False)

    def _im2col_f32_conv(self, xc: Act, wname: str, k: int, cin: int, dilation: int, left: int) -> Act:
        """im2col F32 + one product per tile of at most `conv_tile` output frames, outputs joined in time.

        im2col pads both ends by p0 itself and the first columns are the causal ones, so no PAD node (a full
        copy of the input) is needed. Tiling keeps the columns (k x c_in floats per frame, 7x the input) to
        one tile: the allocator reuses that memory from tile to tile, so a long input does not need
        gigabytes of columns, and a tile's columns are still in cache when the product reads them. `left`: the
        causal zeros before the input, (k-1)*d, or 0 where the input brings its own past (`context`).
        """
        ctx = self.ctx
        pad = (k - 1) * dilation
        T = xc.T + left - pad
        tile = max(self.low.conv_tile, -(-T // MAX_TILES)) if self.low.conv_tile else T  # bounded node count
        kshape = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F16, k, cin)  # im2col reads only its shape
        nb1 = int(xc.t.contents.nb[1])
        parts = []
        for s in range(0, T, tile):
            n = min(tile, T - s)
            if s == 0 and left:  # zeros on the left come from p0; the right-hand p0 columns are not read
                src, p0 = (xc.t if n == T else g.ggml_view_2d(ctx, xc.t, n, cin, nb1, 0)), pad
            elif s == 0 and n + pad == xc.T:
                src, p0 = xc.t, 0
            else:  # the `pad` frames before the tile are real input
                src, p0 = g.ggml_view_2d(ctx, xc.t, n + pad, cin, nb1, (s - left) * 4), 0
            cols = g.ggml_im2col(ctx, kshape, src, 1, 0, p0, 0, dilation, 0, False, g.GGML_TYPE_F32)
            cols = g.ggml_reshape_2d(ctx, cols, k * cin, n + p0)
            if p0:
                cols = g.ggml_view_2d(ctx, cols, k * cin, n, int(cols.contents.nb[1]), 0)
            parts.append(self._conv_product(wname, cols))
        cl = parts[0].cl
        return Act(self.join([p.t for p in parts], 1 if cl else 0), cl)

    def conv_transpose1d(
        self, x: Act, wname: str, bname: str, stride: int, kernel: int, state: str | None = None
    ) -> Act:
        """Causal ConvTranspose1d: full output trimmed by (kernel - stride) on the right. `state`: the key of its
        carried input in a streaming graph: the ceil(kernel / stride) - 1 input frames before the call, whose
        products overlap this call's first outputs (their tail), recomputed from those frames."""
        lead = -(-kernel // stride) - 1
        x, zeros = self.context(state, x, lead)
        lead -= zeros  # input frames in front of the call's own (0 offline: nothing before the first frame)
        T = x.T - lead
        p = self.w.prepared[wname]
        if p.layout == "shift":
            return self.add_bias(self._convt_shift(x, wname, p.ne[1] // kernel, stride, kernel, lead), bname)
        if self.low.convt == "direct":
            cout = p.ne[1]
            y = g.ggml_conv_transpose_1d(self.ctx, self.w[wname], self.as_cf(x).t, stride, 0, 1)
            full = Act(g.ggml_reshape_2d(self.ctx, y, int(y.contents.ne[0]), cout), False)
        else:
            cout = p.ne[1] // kernel
            xl = self.as_cl(x)
            tile = self._convt_tile(x.T, stride)
            if tile < x.T and kernel <= 2 * stride:
                full = self._col2im_tiled(xl, wname, cout, stride, tile)
                out = self.time_view(full, lead * stride, T * stride) if lead else full
                return self.add_bias(out, bname)
            cols = self.mul_mat(self.w[wname], xl.t)
            full = Act(g.ggml_col2im_1d(self.ctx, cols, stride, cout, 0), False)
        out = self.time_view(full, lead * stride, T * stride) if kernel != stride or lead else full
        return self.add_bias(out, bname)

    def _convt_shift(self, x: Act, wname: str, cout: int, stride: int, kernel: int, lead: int) -> Act:
        """The transposed conv as products of the stride's taps, summed shifted: with M = K / stride, slice m of
        the weight (taps m * stride ... m * stride + stride - 1, stride * C_out rows, contiguous in the tap-major
        layout) applied to input frame t - m gives output frames t * stride ... t * stride + stride - 1. Slice 0
        reaches every output frame and starts the sum; each later slice is a product over only the input frames
        it reads, added in place (ACC) into the frames it reaches. No COL2IM_1D, no transposes, and no padded copy
        of the input (PAD writes it once more, one element at a time: 6 ms of a 25-frame decode of kyutai/mimi
        here). Channels-last in and out (ne [C_out, stride * T]). `lead`: the input frames in front of the call's
        own (the previous call's in a stream); offline the frames before the first are zeros, which a slice's
        product simply skips."""
        ctx = self.ctx
        if kernel % stride:
            raise InvalidOptionError(f"convt='shift' adds whole slices of the stride's taps; this transposed conv's "
                                     f"kernel {kernel} is not a multiple of its stride {stride}: use convt='col2im'")
        M = kernel // stride
        xl = self.as_cl(x)
        T = xl.T - lead
        rows = stride * cout
        W = self.w[wname]
        nbw = int(W.contents.nb[1])
        if 4 * rows * T >= SET_MAX_OFFSET:  # ACC keeps its byte offsets in 32 bits
            return self._convt_shift_padded(xl, wname, cout, stride, M, lead)

        def product(m: int, t0: int) -> Act:
            wm = g.ggml_view_2d(ctx, W, int(W.contents.ne[0]), rows, nbw, m * rows * nbw)
            return Act(self.mul_mat(wm, self.time_view(xl, t0 + lead - m, T - t0).t), True)

        acc = product(0, 0)
        nb = [int(v) for v in acc.t.contents.nb[1:4]]
        for m in range(1, M):
            t0 = max(0, m - lead)
            if t0 < T:
                acc = Act(g.ggml_acc_inplace(ctx, acc.t, product(m, t0).t, *nb, t0 * nb[0]), True)
        return Act(g.ggml_reshape_2d(ctx, acc.t, cout, stride * T), True)

    def _convt_shift_padded(self, xl: Act, wname: str, cout: int, stride: int, M: int, lead: int) -> Act:
        """`_convt_shift` for outputs past ACC's 32-bit offsets: one product of every tap over the input with
        zeros padded in front, its slices added as shifted views."""
        ctx = self.ctx
        xp = self.pad_left(xl, M - 1 - lead)
        T = xp.T - (M - 1)
        P = self.mul_mat(self.w[wname], xp.t)  # ne [K * C_out, T + M - 1]
        nb1 = int(P.contents.nb[1])
        rows = stride * cout
        acc = None
        for m in range(M):
            v = g.ggml_view_2d(ctx, P, rows, T, nb1, m * rows * 4 + (M - 1 - m) * nb1)
            acc = v if acc is None else g.ggml_add(ctx, acc, v)
        if M == 1 and not g.ggml_is_contiguous(acc):
            acc = g.ggml_cont(ctx, acc)
        return Act(g.ggml_reshape_2d(ctx, acc, cout, stride * T), True)

    def _convt_tile(self, T: int, stride: int) -> int:
        """Input frames per col2im tile: `conv_tile` output frames, at most MAX_TILES tiles (0 = no tiling)."""
        if not self.low.conv_tile:
            return T
        return max(1, self.low.conv_tile // stride, -(-T // MAX_TILES))

    def _col2im_tiled(self, xl: Act, wname: str, cout: int, stride: int, tile: int) -> Act:
        """The col2im transposed conv computed `tile` input frames at a time, outputs written in place.

        The columns (c_out x K floats per input frame, 3x the output for K = 2 x stride) are the largest tensor
        of a long decode; tiling bounds them like the im2col columns. With K <= 2 x stride an output frame
        depends on input frames t // stride and the one before, so each tile reads one frame before its
        start and keeps the output frames whose inputs were all inside: tiles need no overlap-add."""
        ctx, T = self.ctx, xl.T
        parts = []
        for a in range(0, T, tile):
            b_ = min(T, a + tile)
            a0 = max(0, a - 1)
            cols = self.mul_mat(self.w[wname], self.time_view(xl, a0, b_ - a0).t)
            full = Act(g.ggml_col2im_1d(ctx, cols, stride, cout, 0), False)
            parts.append(self.time_view(full, (a - a0) * stride, (b_ - a) * stride).t)
        return Act(self.join(parts, 0), False)

    def depthwise_conv(self, x: Act, wname: str, bname: str, state: str | None = None) -> Act:
        """Causal depthwise conv (ConvNeXt's dwconv): one multiply-add per tap, channels-last. `state`: the key of
        its left context in a streaming graph (`context`)."""
        W = self.w[wname]
        C, k = (int(W.contents.ne[0]), int(W.contents.ne[1]))
        x, zeros = self.context(state, x, k - 1)
        xp = self.pad_left(self.as_cl(x), zeros)
        T = x.T + zeros - (k - 1)
        acc = None
        for j in range(k):
            wj = g.ggml_view_2d(self.ctx, W, C, 1, int(W.contents.nb[1]), j * int(W.contents.nb[1]))
            y = g.ggml_mul(self.ctx, self.time_view(xp, j, T).t, wj)
            acc = y if acc is None else g.ggml_add(self.ctx, acc, y)
        return self.add_bias(Act(acc, True), bname)

    def depthwise_conv_transpose1d(self, x: Act, wname: str, stride: int, state: str | None = None) -> Act:
        """Causal depthwise ConvTranspose1d without bias (groups = channels; kernel K a multiple of the stride),
        the full output trimmed by K - stride on the right: output frame t * stride + r of channel c is
        sum over m < K / stride of w[c, m * stride + r] * x[c, t - m]. Per m, the input frames shifted by m
        (REPEATed over the stride's sub-frames) times the kernel's m-th slice (MUL broadcasts it over time), then
        the slices ADDed: channels-last, ne [C, stride, T] read as [C, stride * T]. The weight is laid out one
        column per tap, ne [C, K] (kzlab.graph.prepared: a `dwconv.weight`). `state`: the key of the K / stride - 1
        input frames before the call in a streaming graph (`context`)."""
        ctx, W = self.ctx, self.w[wname]
        C, K = int(W.contents.ne[0]), int(W.contents.ne[1])
        if K % stride:
            raise ValueError(f"depthwise transposed conv: kernel {K} is not a multiple of the stride {stride}")
        M = K // stride
        x, zeros = self.context(state, x, M - 1)
        xp = self.pad_left(self.as_cl(x), zeros)
        T = xp.T - (M - 1)
        shape = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_F32, C, stride, T)  # REPEAT reads only its shape
        acc = None
        for m in range(M):
            xs = g.ggml_reshape_3d(ctx, self.time_view(xp, M - 1 - m, T).t, C, 1, T)
            wm = g.ggml_view_3d(ctx, W, C, stride, 1, int(W.contents.nb[1]), int(W.contents.nb[1]) * stride,
                                m * stride * int(W.contents.nb[1]))
            y = g.ggml_mul(ctx, g.ggml_repeat(ctx, xs, shape), wm)
            acc = y if acc is None else g.ggml_add(ctx, acc, y)
        return Act(g.ggml_reshape_2d(ctx, acc, C, stride * T), True)

    # ---- activations --------------------------------------------------------------------------------
    def snake(self, x: Act, prefix: str, out_cl: bool | None = None, bias: str | None = None) -> Act:
        """SnakeBeta: h + 1/(exp(beta)+1e-9) * sin(h * exp(alpha))^2, h = x (+ bias).

        The fused lowering adds `bias` and writes the memory order `out_cl` inside its one node; the others
        add the bias with a ggml ADD and leave any transpose to the consumer."""
        ctx = self.ctx
        if self.low.fused_snake:
            w = self.w
            bt = w[bias] if bias else None
            y = fused.snake(ctx, x.t, x.cl, w[prefix + ".alpha"], w[prefix + ".beta"], bt, out_cl)
            return Act(y, x.cl if out_cl is None else out_cl)
        if bias:
            x = self.add_bias(x, bias)
        if self.low.snake == "folded":
            a = self.chan(x, prefix + ".alpha")
            inv_b = self.chan(x, prefix + ".beta")
            s = g.ggml_sqr(ctx, g.ggml_sin(ctx, g.ggml_mul(ctx, x.t, a)))
            return Act(g.ggml_add(ctx, x.t, g.ggml_mul(ctx, s, inv_b)), x.cl)
        a = g.ggml_exp(ctx, self.chan(x, prefix + ".alpha"))
        b = g.ggml_scale_bias(ctx, g.ggml_exp(ctx, self.chan(x, prefix + ".beta")), 1.0, 1e-9)
        s = g.ggml_sqr(ctx, g.ggml_sin(ctx, g.ggml_mul(ctx, x.t, a)))
        return Act(g.ggml_add(ctx, x.t, g.ggml_div(ctx, s, b)), x.cl)
