"""The ggml side of kzlab's fused CPU nodes: `ggml_custom_4d` nodes whose callbacks run the numpy kernels of
`kernels.py` on each of ggml's threads (ith, nth), each thread taking a range of channels or frames.

An exception in a kernel cannot cross ggml's C frames: it is recorded and raised by `after_compute()` once
the graph returns. The callbacks are module-level objects: their C pointers must outlive every graph.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
from ggml import ggml as g

from kzlab.errors import BackendError
from kzlab.graph.fused.kernels import (
    BLOCK,
    CONVT_SPLIT_CHANNELS_BYTES,
    CONVT_SPLIT_PHASES_FRAMES,
    NORMCONV_GROUPS,
    NORMCONV_PRODUCT_BYTES,
    NORMCONV_ROWS,
    NORMCONV_TILE_BYTES,
    convt_channel_rows,
    convt_rows,
    convt_tile_rows,
    dwmlp_rows,
    dwmlp_tile_rows,
    group_norm_affine,
    normconv_inputs,
    normconv_outputs,
    snake_block,
    tile_rows,
    unit_conv1_channels,
    unit_conv2_channels,
    unit_rows,
    unit_tile_rows,
)
from kzlab.graph.fused.threads import blas_one_thread, restore_blas

_errors: list[BaseException] = []
_errors_lock = threading.Lock()
#: userdata bits: input channels-last, output channels-last, a bias vector is source 3, the unit's conv weight
#: holds Winograd's F(m, 7) matrices; the normalised conv's affine and residual sources are present
IN_CL, OUT_CL, HAS_BIAS, WINOGRAD, HAS_AFFINE, HAS_RESIDUAL = 1, 2, 4, 8, 16, 32


def _callback(kernel):
    """A fused node's C callback running `kernel(dst, ith, nth, flags)` on each of ggml's threads: an exception in
    it cannot unwind ggml's C frames, so it is recorded and raised by `after_compute()` once the graph returns.
    Kept at module level by its caller: the C pointer must outlive every graph."""

    def run(dst, ith: int, nth: int, userdata) -> None:
        try:
            kernel(dst, ith, nth, int(userdata or 0))
        except BaseException as e:
            with _errors_lock:
                _errors.append(e)

    return g.ggml_custom_op_t(run)


def _array(t, shape: tuple[int, ...]) -> np.ndarray:
    """A float32 tensor's data as a writable numpy view of `shape`.

    Through a ctypes array at the data's address (about 2 us) rather than `np.ctypeslib.as_array` of a pointer
    (about 12 us): a kernel views each of its sources on every thread, the threads' Python runs one at a time under
    the GIL, and a streaming call of the full-size decoder runs some 30 fused nodes."""
    n = 1
    for d in shape:
        n *= d
    return np.frombuffer((ctypes.c_float * n).from_address(t.contents.data), np.float32).reshape(shape)


def _channels_frames(x, in_cl: bool) -> tuple[int, int]:
    """(C, T) of a 2-D activation, channels-last (ne [C, T]) or channels-first (ne [T, C])."""
    ne0, ne1 = int(x.contents.ne[0]), int(x.contents.ne[1])
    return (ne0, ne1) if in_cl else (ne1, ne0)


def _node(ctx, callback, srcs: list, ne0: int, ne1: int, flags: int):
    """A fused node: an F32 [ne0, ne1] `ggml_custom_4d` over `srcs` whose C `callback` gets `flags` as its
    userdata; the input (the first source) made contiguous, since every kernel reads it as rows."""
    if not g.ggml_is_contiguous(srcs[0]):
        srcs = [g.ggml_cont(ctx, srcs[0]), *srcs[1:]]
    args = (ctypes.POINTER(g.ggml_tensor) * len(srcs))(*srcs)
    return g.ggml_custom_4d(ctx, g.GGML_TYPE_F32, ne0, ne1, 1, 1, args, len(srcs), callback, -1, flags)


def _snake_kernel(dst, ith: int, nth: int, flags: int) -> None:
    d = dst.contents
    src = d.src[0].contents
    in_cl, out_cl = bool(flags & IN_CL), bool(flags & OUT_CL)
    C = int(src.ne[0]) if in_cl else int(src.ne[1])
    T = int(src.ne[1]) if in_cl else int(src.ne[0])
    # numpy views in torch terms: x and y are [C, T] whatever the memory order
    x = _array(d.src[0], (T, C)).T if in_cl else _array(d.src[0], (C, T))
    y = _array(dst, (T, C)).T if out_cl else _array(dst, (C, T))
    vec = [_array(d.src[i], (C,))[:, None] for i in (1, 2)]
    bias = _array(d.src[3], (C,))[:, None] if flags & HAS_BIAS else None
    if not in_cl and not out_cl:  # channels-first throughout: each thread takes whole channels
        c0, c1 = C * ith // nth, C * (ith + 1) // nth
        step = max(1, BLOCK // max(T, 1))
        for s in range(c0, c1, step):
            e = min(c1, s + step)
            bb = bias[s:e] if bias is not None else None
            snake_block(x[s:e], y[s:e], vec[0][s:e], vec[1][s:e], bb)
        return
    t0, t1 = T * ith // nth, T * (ith + 1) // nth  # otherwise each thread takes a range of frames
    step = max(1, BLOCK // max(C, 1))
    for s in range(t0, t1, step):
        e = min(t1, s + step)
        snake_block(x[:, s:e], y[:, s:e], vec[0], vec[1], bias)


_SNAKE_CB = _callback(_snake_kernel)  # module-level: the C pointer must outlive every graph


def snake(ctx, x, in_cl: bool, alpha, inv_beta, bias=None, out_cl: bool | None = None):
    """The fused SnakeBeta node over `x` (F32, 2-D) with folded constants `alpha`, `inv_beta` ([C] each).

    `bias` ([C]) is added to `x` first (the bias of the conv before it); `out_cl` sets the output's memory
    order (default: the input's), so the transpose a following conv would need costs no extra pass."""
    out_cl = in_cl if out_cl is None else out_cl
    srcs = [x, alpha, inv_beta] + ([bias] if bias is not None else [])
    C, T = _channels_frames(x, in_cl)
    ne0, ne1 = (C, T) if out_cl else (T, C)
    flags = (IN_CL if in_cl else 0) | (OUT_CL if out_cl else 0) | (HAS_BIAS if bias is not None else 0)
    return _node(ctx, _SNAKE_CB, srcs, ne0, ne1, flags)


# ---- the residual unit ---------------------------------------------------------------------------------------
#: sources of the unit node, in order
UNIT_SOURCES = (
    "x",
    "act1.alpha",
    "act1.beta",
    "conv1.weight",
    "conv1.bias",
    "act2.alpha",
    "act2.beta",
    "conv2.weight",
    "conv2.bias",
)


#: userdata bits above the flags: the unit's dilation, the transposed conv's stride
_PARAM_SHIFT = 8


def _rows_view(d, flags: int) -> tuple[np.ndarray, int, int]:
    """The node's activation (source 0) as a [T, C] numpy view whatever its memory order; (x, C, T)."""
    src = d.src[0].contents
    if flags & IN_CL:
        C, T = int(src.ne[0]), int(src.ne[1])
        return _array(d.src[0], (T, C)), C, T
    C, T = int(src.ne[1]), int(src.ne[0])
    return _array(d.src[0], (C, T)).T, C, T


def _share(ith: int, nth: int, T: int, tile: int, rows, lead: int = 0) -> None:
    """This thread's even share of the frames [lead, T), handed to `rows(start, end, tile)` in tiles of at most
    `tile` frames, evened out, with numpy's BLAS on one thread (each ggml thread runs its own products).

    The frames are split first and tiled second: split as whole tiles, one thread could get a tile more than the
    other (8 against 7 tiles of 341 frames at 4960 frames), and the node takes as long as its slowest thread."""
    n = T - lead
    a, b = lead + n * ith // nth, lead + n * (ith + 1) // nth
    if a < b:
        n_tiles = -(-(b - a) // tile)
        blas_one_thread()
        rows(a, b, -(-(b - a) // n_tiles))


#: below this many output frames a thread, the direct residual unit splits its output channels between the threads
#: instead of its frames (two phases and a barrier, `unit_conv1_channels` then `unit_conv2_channels`): split by
#: frames, each thread's products are [T / nth, C] x [C, C] and every thread streams every weight for its few rows
#: (a stream's short calls: 32 frames a call at the first block's 768 channels)
UNIT_SPLIT_CHANNELS_FRAMES = 64


def _unit_kernel(dst, ith: int, nth: int, flags: int) -> None:
    d = dst.contents
    x, C, T = _rows_view(d, flags)
    lead = T - int(d.ne[1])  # a stream's past in front of the input: no output rows
    y = _array(dst, (T - lead, C))  # the node always writes channels-last
    K = int(d.src[3].contents.ne[2])  # taps, or Winograd's m + 6 matrices
    shapes = [(C,), (C,), (K, C, C), (C,), (C,), (C,), (C, C), (C,)]
    names = UNIT_SOURCES[1:]
    p = {name: _array(d.src[i + 1], shp) for i, (name, shp) in enumerate(zip(names, shapes, strict=True))}
    wino = bool(flags & WINOGRAD)
    if not wino and nth > 1 and (T - lead) < UNIT_SPLIT_CHANNELS_FRAMES * nth and C >= 16 * nth:
        _unit_by_channels(x, y, p, flags >> _PARAM_SHIFT, lead, ith, nth, int(d.data or 0))
        return
    tile = unit_tile_rows(C)
    _share(ith, nth, T, tile, lambda a, b, n: unit_rows(x, y, p, flags >> _PARAM_SHIFT, a, b, n, wino, lead), lead)


def _unit_by_channels(x, y, p, dilation: int, lead: int, ith: int, nth: int, key: int) -> None:
    """The residual unit split by output channels: conv1's share into the meeting's H, a barrier, conv2's share."""
    blas_one_thread()
    c0, c1 = _channel_share(y.shape[1], ith, nth)  # none of its own: it still meets the others
    _in_two_phases(
        key, nth, y.shape,
        lambda H: unit_conv1_channels(x, H, p, dilation, c0, c1, lead) if c0 < c1 else None,
        lambda H: unit_conv2_channels(x, H, y, p, c0, c1, lead) if c0 < c1 else None,
    )


_UNIT_CB = _callback(_unit_kernel)


def residual_unit(ctx, x, in_cl: bool, w: dict, dilation: int, winograd: bool = False, lead: int = 0):
    """The fused residual-unit node over `x` (F32, 2-D, C channels); writes channels-last [C, T - lead]: the first
    `lead` frames of `x` are a stream's past (the conv's left context), read and given no output.

    `w` maps UNIT_SOURCES[1:] to the weight tensors: folded snake constants ([C]), conv1.weight as ne
    [C_out, C_in, K] (numpy [K, C_in, C_out]; with `winograd`, Winograd's m + 6 transformed matrices, ne
    [C_out, C_in, m + 6]), conv2.weight as ne [C_out, C_in], biases [C]."""
    C, T = _channels_frames(x, in_cl)
    flags = (IN_CL if in_cl else 0) | OUT_CL | (WINOGRAD if winograd else 0) | (dilation << _PARAM_SHIFT)
    return _node(ctx, _UNIT_CB, [x] + [w[k] for k in UNIT_SOURCES[1:]], C, T - lead, flags)


# ---- SnakeBeta + transposed conv ------------------------------------------------------------------------------
def _convt_kernel(dst, ith: int, nth: int, flags: int) -> None:
    stride = flags >> _PARAM_SHIFT
    d = dst.contents
    x, C, T = _rows_view(d, flags)
    w = d.src[3].contents
    c_out, k = int(w.ne[0]), int(w.ne[1])
    lead = T - int(d.ne[1]) // stride  # a stream's past in front of the input: read for its overlap only
    y = _array(dst, ((T - lead) * stride, c_out))
    shapes = {"alpha": (C,), "beta": (C,), "weight": (C, k, c_out), "bias": (c_out,)}
    p = {name: _array(d.src[i + 1], shp) for i, (name, shp) in enumerate(shapes.items())}
    tile = convt_tile_rows(k, c_out)
    if 4 * C * k * c_out > CONVT_SPLIT_CHANNELS_BYTES:
        if T - lead <= CONVT_SPLIT_PHASES_FRAMES and stride % nth == 0:
            j0, j1 = stride * ith // nth, stride * (ith + 1) // nth
            blas_one_thread()
            convt_channel_rows(x, y, p, stride, 0, c_out, T, lead, (j0, j1))
            return
        c0, c1 = c_out * ith // nth, c_out * (ith + 1) // nth
        if c0 < c1:
            blas_one_thread()
            convt_channel_rows(x, y, p, stride, c0, c1, min(tile, T), lead)
    else:
        _share(ith, nth, T, tile, lambda a, b, n: convt_rows(x, y, p, stride, a, b, n, lead), lead)


_CONVT_CB = _callback(_convt_kernel)


def snake_convt(ctx, x, in_cl: bool, alpha, inv_beta, weight, bias, stride: int, lead: int = 0):
    """The fused SnakeBeta + transposed-conv node over `x` (F32, 2-D); writes channels-last [C_out, (T - lead) x
    stride]: the first `lead` frames of `x` are a stream's past, read for their overlap only.

    `weight` is ne [C_out, K, C_in] (numpy [C_in, K, C_out]) with K = 2 x stride; `alpha`, `inv_beta` the
    folded snake constants ([C_in]); `bias` [C_out]."""
    T = _channels_frames(x, in_cl)[1]
    c_out = int(weight.contents.ne[0])
    flags = (IN_CL if in_cl else 0) | OUT_CL | (stride << _PARAM_SHIFT)
    return _node(ctx, _CONVT_CB, [x, alpha, inv_beta, weight, bias], c_out, (T - lead) * stride, flags)


# ---- a stream's context joined in front of a call's frames ----------------------------------------------------
#: below this many bytes a context join is one task (ggml's first thread copies it all): every thread that runs a
#: fused node enters Python, and a thread other than the one that called ggml takes the GIL from it to do so (about
#: 50 us a node with two threads, 0.4 us with one). The copy is bound by memory: on two threads a 3 MB join took
#: 0.23-0.29 ms either way, a 1.5 MB one 0.19 ms split and 0.08 ms on one
JOIN_SPLIT_BYTES = 1 << 22


def _join_kernel(dst, ith: int, nth: int, flags: int) -> None:
    d = dst.contents
    past, x = d.src[0].contents, d.src[1].contents
    if flags & IN_CL:  # ne [C, L] and [C, T]: frames are rows, each thread an even share of the L + T rows
        C, L, T = int(d.ne[0]), int(past.ne[1]), int(x.ne[1])
        y, p, a = _array(dst, (L + T, C)), _array(d.src[0], (L, C)), _array(d.src[1], (T, C))
        r0, r1 = (L + T) * ith // nth, (L + T) * (ith + 1) // nth
        if r0 < L:
            y[r0 : min(r1, L)] = p[r0 : min(r1, L)]
        if r1 > L:
            y[max(r0, L) : r1] = a[max(r0, L) - L : r1 - L]
        return
    C, L, T = int(d.ne[1]), int(past.ne[0]), int(x.ne[0])  # ne [L, C] and [T, C]: each channel a row of frames
    y, p, a = _array(dst, (C, L + T)), _array(d.src[0], (C, L)), _array(d.src[1], (C, T))
    c0, c1 = C * ith // nth, C * (ith + 1) // nth
    y[c0:c1, :L] = p[c0:c1]
    y[c0:c1, L:] = a[c0:c1]


_JOIN_CB = _callback(_join_kernel)


def join_frames(ctx, past, x, cl: bool):
    """`past` (a stream's carried frames of a layer's input, F32 2-D) joined in front of `x` (the call's frames, the
    same channels) along time: channels-last ne [C, L + T], or channels-first ne [L + T, C], as ggml_concat gives.

    Why: ggml 0.15.3's CONCAT copies element by element and splits its work by ne[2], which a 2-D activation does not
    have, so one thread copies all of it. A 4-frame streaming call of the full-size Qwen3-TTS decoder joins its
    residual units' and transposed convs' context in front of activations of up to 7734 x 96 frames x channels: 1.2 ms
    each (about 10 ms a call) against 0.3 ms as two block copies (rows split between the threads from
    `JOIN_SPLIT_BYTES` on)."""
    srcs = [t if g.ggml_is_contiguous(t) else g.ggml_cont(ctx, t) for t in (past, x)]
    if cl:
        C, L, T = int(x.contents.ne[0]), int(past.contents.ne[1]), int(x.contents.ne[1])
        ne0, ne1 = C, L + T
    else:
        C, L, T = int(x.contents.ne[1]), int(past.contents.ne[0]), int(x.contents.ne[0])
        ne0, ne1 = L + T, C
    args = (ctypes.POINTER(g.ggml_tensor) * 2)(*srcs)
    tasks = -1 if 4 * C * (L + T) >= JOIN_SPLIT_BYTES else 1  # -1: every thread
    return g.ggml_custom_4d(ctx, g.GGML_TYPE_F32, ne0, ne1, 1, 1, args, 2, _JOIN_CB, tasks, IN_CL if cl else 0)


# ---- the ConvNeXt block --------------------------------------------------------------------------------------
#: sources of the ConvNeXt node, in order (ggml_custom_4d takes at most nine); "vectors" is the block's five
#: per-channel vectors stacked (VECTOR_ROWS), one tensor so that the node stays within that limit
DWMLP_SOURCES = ("x", "dw.weight", "vectors", "pw1.weight", "pw1.bias", "pw2.weight")
#: the rows of "vectors", in order
VECTOR_ROWS = ("dw.bias", "norm.weight", "norm.bias", "pw2.bias", "gamma")
#: where the LayerNorm epsilon sits in the node's userdata (its float32 bits); the left padding sits below it
_EPS_SHIFT = 32


def _f32_bits(v: float) -> int:
    return int(np.array(v, np.float32).view(np.uint32))


def _dwmlp_kernel(dst, ith: int, nth: int, flags: int) -> None:
    left = (flags >> _PARAM_SHIFT) & ((1 << (_EPS_SHIFT - _PARAM_SHIFT)) - 1)
    eps = float(np.array(flags >> _EPS_SHIFT, np.uint32).view(np.float32))
    d = dst.contents
    x, C, T = _rows_view(d, flags)
    y = _array(dst, (T, C))  # the node always writes channels-last
    k = int(d.src[1].contents.ne[1])
    f = int(d.src[3].contents.ne[1])
    shapes = [(k, C), (len(VECTOR_ROWS), C), (f, C), (f,), (C, f)]
    names = DWMLP_SOURCES[1:]
    p = {name: _array(d.src[i + 1], shp) for i, (name, shp) in enumerate(zip(names, shapes, strict=True))}
    p.update(zip(VECTOR_ROWS, p.pop("vectors"), strict=True))
    t0, t1 = T * ith // nth, T * (ith + 1) // nth  # each thread its own frames, read with their halo
    if t0 < t1:
        blas_one_thread()
        dwmlp_rows(x, y, p, left, eps, t0, t1, dwmlp_tile_rows(f))


_DWMLP_CB = _callback(_dwmlp_kernel)


def dwmlp(ctx, x, in_cl: bool, w: dict, left: int, eps: float):
    """The fused ConvNeXt block over `x` (F32, 2-D, C channels): depthwise conv (its taps read frames t - left
    ... t - left + K - 1, zeros outside), LayerNorm, pointwise MLP with the exact GELU, gamma, residual; writes
    channels-last [C, T].

    `w` maps DWMLP_SOURCES[1:] to F32 tensors: the depthwise kernel as ne [C, K], the stacked vectors ne
    [C, 5] (VECTOR_ROWS: the depthwise bias, the LayerNorm's weight and bias, pw2's bias, gamma), pw1.weight
    ne [C, F], pw1.bias [F], pw2.weight ne [F, C]."""
    if not (0.0 < eps < 1.0):
        raise ValueError(f"the fused ConvNeXt node's LayerNorm epsilon {eps} is not in (0, 1)")
    k = int(w["dw.weight"].contents.ne[1])
    if not 0 <= left < k:
        raise ValueError(f"the fused ConvNeXt node's left padding {left} must be below its kernel size {k}")
    C, T = _channels_frames(x, in_cl)
    flags = (IN_CL if in_cl else 0) | OUT_CL | (left << _PARAM_SHIFT) | (_f32_bits(eps) << _EPS_SHIFT)
    return _node(ctx, _DWMLP_CB, [x] + [w[n] for n in DWMLP_SOURCES[1:]], C, T, flags)


# ---- GroupNorm statistics and the normalised conv -------------------------------------------------------------
#: where the GroupNorm's group count sits in the statistics node's userdata (above the flags, below the epsilon)
_GROUPS_BITS = _EPS_SHIFT - _PARAM_SHIFT


def _gn_affine_kernel(dst, ith: int, nth: int, flags: int) -> None:
    groups = (flags >> _PARAM_SHIFT) & ((1 << _GROUPS_BITS) - 1)
    eps = float(np.array(flags >> _EPS_SHIFT, np.uint32).view(np.float32))
    d = dst.contents
    x, C, T = _rows_view(d, flags)
    vec = _array(d.src[1], (2, C))  # the norm's weight and bias
    out = _array(dst, (2, C))
    g0, g1 = groups * ith // nth, groups * (ith + 1) // nth  # each thread whole groups, over every frame
    if g0 < g1:
        cg = C // groups
        group_norm_affine(x, vec[0], vec[1], groups, eps, g0 * cg, g1 * cg, out)


_GN_AFFINE_CB = _callback(_gn_affine_kernel)


def group_norm_affine_node(ctx, x, in_cl: bool, vectors, groups: int, eps: float):
    """GroupNorm's statistics over `x` (F32, 2-D, C channels, every frame) folded with its weight and bias into a
    per-channel affine: ne [C, 2], row 0 the scale, row 1 the shift (`kernels.group_norm_affine`). `vectors` is
    the norm's weight and bias stacked, ne [C, 2]. What the normalised conv (`normconv`) applies on its tiles."""
    C = _channels_frames(x, in_cl)[0]
    if groups < 1 or C % groups or groups >= 1 << _GROUPS_BITS:
        raise ValueError(f"GroupNorm of {groups} groups over {C} channels: the groups must divide the channels")
    if not (0.0 < eps < 1.0):
        raise ValueError(f"the GroupNorm epsilon {eps} is not in (0, 1)")
    flags = (IN_CL if in_cl else 0) | (groups << _PARAM_SHIFT) | (_f32_bits(eps) << _EPS_SHIFT)
    return _node(ctx, _GN_AFFINE_CB, [x, vectors], C, 2, flags)


class _Meeting:
    """What the threads of one normalised conv call share: the transformed inputs V and the barrier between the two
    phases. Made by the first thread to arrive, dropped by the last to leave (V is 4/3 of the input's size, so
    it is not kept between calls)."""

    def __init__(self, nth: int, shape: tuple[int, ...]):
        self.barrier = threading.Barrier(nth)
        self.V = np.empty(shape, np.float32)
        self.left = nth
        self.failed = False  # a thread's first phase raised: nobody computes from V


_meetings: dict[int, _Meeting] = {}
_meetings_lock = threading.Lock()
#: seconds a thread waits at the normalised conv's barrier before giving up (and failing the compute): only a
#: thread that never arrives (a ggml that ran the node on fewer threads than it said) would take that long
MEETING_TIMEOUT_S = 300.0


def _meet(key: int, nth: int, shape: tuple[int, ...]) -> _Meeting:
    """The meeting of this call's threads, made by the first to arrive. ggml runs a node only once every thread has
    left the one before, so a meeting found here is this call's, unless its barrier broke: a thread of an earlier
    call never arrived (MEETING_TIMEOUT_S), and that meeting is replaced."""
    with _meetings_lock:
        mt = _meetings.get(key)
        if mt is None or mt.barrier.broken:
            mt = _meetings[key] = _Meeting(nth, shape)
        return mt


def _leave(key: int, mt: _Meeting) -> None:
    with _meetings_lock:
        mt.left -= 1
        if mt.left == 0 and _meetings.get(key) is mt:
            del _meetings[key]


def _in_two_phases(key: int, nth: int, shape: tuple[int, ...], first, second) -> None:
    """Every thread runs `first(V)`, meets the others at a barrier, then runs `second(V)`: V is the meeting's array of
    `shape`, shared by this node's threads (`_meet`). A thread whose first phase raised still meets the others (they
    would wait for it), then fails, and nobody computes the second phase from V."""
    mt = _meet(key, nth, shape)
    try:
        err = None
        try:
            first(mt.V)
        except BaseException as e:
            err, mt.failed = e, True
        mt.barrier.wait(MEETING_TIMEOUT_S)
        if err is not None:
            raise err
        if not mt.failed:
            second(mt.V)
    finally:
        _leave(key, mt)


def _channel_share(c: int, ith: int, nth: int) -> tuple[int, int]:
    """This thread's output channels: an even share in whole runs of 16 (a 64-byte line of float32)."""
    runs = -(-c // 16)
    return min(c, 16 * (runs * ith // nth)), min(c, 16 * (runs * (ith + 1) // nth))


def _normconv_kernel(dst, ith: int, nth: int, flags: int) -> None:
    """Two phases with a barrier between them: each thread transforms the inputs of its share of the frames, then
    computes its share of the output channels for every frame. Split by frames alone, each thread's Winograd
    products were [T / (m nth), C_in] x [C_in, C_out] and every thread streamed every transformed weight (9.4 MB
    at 768 channels) for its few rows: 76 GF/s a core at 375 frames against 92-99 for the products split by
    channels: the posnet's conv node took 10.3 ms at 750 frames, 8.5 ms in two phases."""
    taps = flags >> _PARAM_SHIFT
    d = dst.contents
    x, c_in, T = _rows_view(d, flags)
    w = d.src[1].contents
    c_out, n_mat = int(w.ne[0]), int(w.ne[2])
    y = _array(dst, (T, c_out))  # the node always writes channels-last
    p = {"weight": _array(d.src[1], (n_mat, c_in, c_out)), "bias": _array(d.src[2], (c_out,))}
    i = 3
    if flags & HAS_AFFINE:
        p["affine"] = _array(d.src[i], (2, c_in))
        i += 1
    res = _array(d.src[i], (T, c_out)) if flags & HAS_RESIDUAL else None
    m = n_mat - taps + 1
    G = -(-T // m)
    in_tile = max(1, tile_rows(NORMCONV_TILE_BYTES, c_in, *NORMCONV_ROWS) // m)
    blas_one_thread()
    key = int(d.data or 0)
    g0, g1 = G * ith // nth, G * (ith + 1) // nth
    c0, c1 = _channel_share(c_out, ith, nth)

    def outputs(V) -> None:
        if c0 < c1:
            groups = tile_rows(NORMCONV_PRODUCT_BYTES, n_mat * (c1 - c0), *NORMCONV_GROUPS)
            normconv_outputs(V, y, p, taps, c0, c1, groups, res)

    _in_two_phases(
        key, nth, (n_mat, G, c_in),
        lambda V: normconv_inputs(x, V, p, taps, g0, g1, in_tile) if g0 < g1 else None,
        outputs,
    )


_NORMCONV_CB = _callback(_normconv_kernel)


def normconv(ctx, x, in_cl: bool, weight, bias, taps: int, affine=None, residual=None):
    """The normalised conv node over `x` (F32, 2-D, C_in channels): y = conv(act(x)) + bias (+ residual), a 'same'
    conv of `taps` taps by Winograd (`kernels.normconv_inputs`, then `normconv_outputs`), act = swish(x * scale +
    shift) with `affine` (ne [C_in, 2], `group_norm_affine_node`) or the identity; writes channels-last [C_out, T].

    `weight` holds Winograd's transformed matrices, ne [C_out, C_in, m + taps - 1]; `bias` [C_out]; `residual`
    channels-last [C_out, T]."""
    if taps < 2 or taps % 2 == 0:
        raise ValueError(f"the normalised conv takes an odd number of taps ('same' padding); got {taps}")
    srcs = [x, weight, bias] + ([affine] if affine is not None else []) + ([residual] if residual is not None else [])
    T = _channels_frames(x, in_cl)[1]
    c_out = int(weight.contents.ne[0])
    flags = ((IN_CL if in_cl else 0) | OUT_CL | (HAS_AFFINE if affine is not None else 0)
             | (HAS_RESIDUAL if residual is not None else 0) | (taps << _PARAM_SHIFT))
    return _node(ctx, _NORMCONV_CB, srcs, c_out, T, flags)


def after_compute() -> None:
    """Call once a graph compute returns: gives numpy's BLAS setting back (see `threads.restore_blas`) and raises
    (once), as a BackendError, an error a fused kernel recorded during the compute."""
    restore_blas()
    raise_pending()


def raise_pending() -> None:
    """Raise (once), as a BackendError, an error a fused kernel recorded during the last compute."""
    with _errors_lock:
        if not _errors:
            return
        err = _errors[0]
        _errors.clear()
    raise BackendError(f"a kzlab fused kernel failed: {err!r}") from err
