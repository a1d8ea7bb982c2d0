"""kzlab's fused CPU nodes (`ggml_custom_4d` running numpy kernels): SnakeBeta, and the whole BigVGAN residual unit.

Why SnakeBeta: ggml 0.15.3 computes SIN with scalar `sinf` (about 10 ns per element here), and in a
channels-first activation every per-channel MUL/ADD is a broadcast of one value per row, which ggml's binary
ops walk one element at a time. Folded SnakeBeta is five such passes (MUL, SIN, SQR, MUL, ADD) over the
largest tensors of the decoder; at 31 frames it was about a third of the CPU decode. numpy's float32 `sin` is
SIMD (AVX2 / AVX-512), and working block by block keeps each block in cache for all five steps, so the fused
node costs roughly a third of the five ggml nodes (benchmarks/decode.py).

The snake node's sources are the activation, the two folded constant vectors (exp(alpha) and
1/(exp(beta)+1e-9)) and, where the conv before it has one, that conv's bias, which the node adds first (in a
channels-first tensor a per-channel ADD is one of those slow broadcasts). The node can also write its output
in the other memory order, which removes the transpose (a CONT) a following 1x1 conv or transposed conv needs.

Why the residual unit (SnakeBeta, dilated k=7 conv, SnakeBeta, 1x1 conv, residual add): lowered to ggml ops it
is an IM2COL that writes 7 copies of its input (ggml's F32 im2col moves about 2 GB/s here), a PAD, a product
and four more passes over tensors of 6-23 MB, i.e. mostly memory traffic. The fused node works on tiles of a
few hundred frames that stay in cache: snake, the conv as K shifted products accumulated in place (no im2col),
snake, the 1x1 product, bias and residual, then the tile is written once. The products are numpy's BLAS
(sgemm), each ggml thread taking its own range of tiles, so numpy's BLAS is held to one thread in ggml's
threads (`after_compute` gives the user's setting back).

The scheduler, the profiler and the placement simulator see real nodes with real inputs. They run on ggml's
CPU backend only: a device backend (RPC, GPU, Hexagon) cannot call back into this process, which is why
`Lowering.snake="auto"` and `Lowering.resunit="auto"` pick them only when every backend is the CPU or BLAS.

ggml runs a kernel on each of its threads with (ith, nth); each thread takes a range of channels or frames.
numpy releases the GIL inside its loops and BLAS calls, so the threads overlap. An exception in a kernel
cannot cross ggml's C frames: it is recorded and raised by `after_compute()` once the graph returns.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
from ggml import ggml as g

from kzlab.errors import BackendError

#: elements per block: small enough to stay in L2 across the five steps
BLOCK = 1 << 15

_F32P = ctypes.POINTER(ctypes.c_float)
_errors: list[BaseException] = []
_errors_lock = threading.Lock()
#: userdata bits: input channels-last, output channels-last, a bias vector is source 3
IN_CL, OUT_CL, HAS_BIAS = 1, 2, 4


def _array(t, shape: tuple[int, ...]) -> np.ndarray:
    return np.ctypeslib.as_array(ctypes.cast(t.contents.data, _F32P), shape=shape)


def snake_block(x: np.ndarray, y: np.ndarray, a: np.ndarray, inv_b: np.ndarray, bias: np.ndarray | None) -> None:
    """y = h + inv_b * sin(a * h)^2 with h = x (+ bias); a, inv_b, bias broadcast against x (numpy rules).

    `y` may be a transposed view of the output (the fused node also changes the memory order)."""
    h = x + bias if bias is not None else x
    tmp = np.multiply(h, a)
    np.sin(tmp, out=tmp)
    np.square(tmp, out=tmp)
    tmp *= inv_b
    np.add(tmp, h, out=y)


def _snake_kernel(dst, ith: int, nth: int, userdata) -> None:
    try:
        flags = int(userdata or 0)
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
    except BaseException as e:  # ggml's C frames cannot unwind a Python exception
        with _errors_lock:
            _errors.append(e)


_SNAKE_CB = g.ggml_custom_op_t(_snake_kernel)  # module-level: the C pointer must outlive every graph


def snake(ctx, x, in_cl: bool, alpha, inv_beta, bias=None, out_cl: bool | None = None):
    """The fused SnakeBeta node over `x` (F32, 2-D) with folded constants `alpha`, `inv_beta` ([C] each).

    `bias` ([C]) is added to `x` first (the bias of the conv before it); `out_cl` sets the output's memory
    order (default: the input's), so the transpose a following conv would need costs no extra pass."""
    if not g.ggml_is_contiguous(x):
        x = g.ggml_cont(ctx, x)
    out_cl = in_cl if out_cl is None else out_cl
    srcs = [x, alpha, inv_beta] + ([bias] if bias is not None else [])
    args = (ctypes.POINTER(g.ggml_tensor) * len(srcs))(*srcs)
    C, T = (int(x.contents.ne[0]), int(x.contents.ne[1])) if in_cl else (int(x.contents.ne[1]), int(x.contents.ne[0]))
    ne0, ne1 = (C, T) if out_cl else (T, C)
    flags = (IN_CL if in_cl else 0) | (OUT_CL if out_cl else 0) | (HAS_BIAS if bias is not None else 0)
    return g.ggml_custom_4d(ctx, g.GGML_TYPE_F32, ne0, ne1, 1, 1, args, len(srcs), _SNAKE_CB, -1, flags)


# ---- the residual unit ---------------------------------------------------------------------------------------
#: bytes of one tile's activation rows (frames x channels x 4): a tile, its snake and its products stay in L2
UNIT_TILE_BYTES = 1 << 19
UNIT_MIN_ROWS, UNIT_MAX_ROWS = 256, 4096
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


def unit_tile_rows(C: int) -> int:
    """Frames per tile of the fused residual unit for C channels."""
    return int(min(UNIT_MAX_ROWS, max(UNIT_MIN_ROWS, UNIT_TILE_BYTES // (4 * C))))


def _snake_rows(
    x: np.ndarray, y: np.ndarray, a: np.ndarray, inv_b: np.ndarray, tmp: np.ndarray, bias: np.ndarray | None = None
) -> None:
    """SnakeBeta on [rows, C] blocks without allocating: y = h + inv_b * sin(a * h)^2, h = x (+ bias).

    `y` may be `x` (in place); `tmp` is scratch of the same shape."""
    h = x
    if bias is not None:
        np.add(x, bias, out=y)
        h = y
    np.multiply(h, a, out=tmp)
    np.sin(tmp, out=tmp)
    np.square(tmp, out=tmp)
    tmp *= inv_b
    np.add(h, tmp, out=y)


def unit_rows(
    x: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray], dilation: int, t0: int, t1: int, tile: int
) -> None:
    """Output frames [t0, t1) of one residual unit, a tile at a time; x and y are [T, C] (any strides).

    y = x + conv2(snake2(conv1(snake1(x)) + b1)) + b2, conv1 causal with kernel K and `dilation`: output frame t
    reads snake1(x) at t - (K-1)*dilation ... t, zeros before frame 0 (the conv's left padding)."""
    W1, W2 = p["conv1.weight"], p["conv2.weight"]  # [K, C, C] and [C, C], numpy order: h @ W
    K, C = W1.shape[0], W1.shape[1]
    halo = (K - 1) * dilation
    S = np.empty((tile + halo, C), np.float32)  # snake1 of the tile and the frames its first outputs read
    S_tmp = np.empty_like(S)
    H = np.empty((tile, C), np.float32)
    tmp = np.empty((tile, C), np.float32)
    for s in range(t0, t1, tile):
        n = min(tile, t1 - s)
        lo = s - halo
        if lo < 0:
            S[:-lo] = 0.0
            _snake_rows(x[: s + n], S[-lo : halo + n], p["act1.alpha"], p["act1.beta"], S_tmp[-lo : halo + n])
        else:
            _snake_rows(x[lo : s + n], S[: halo + n], p["act1.alpha"], p["act1.beta"], S_tmp[: halo + n])
        h, tm = H[:n], tmp[:n]
        np.matmul(S[:n], W1[0], out=h)
        for k in range(1, K):
            np.matmul(S[k * dilation : k * dilation + n], W1[k], out=tm)
            h += tm
        _snake_rows(h, h, p["act2.alpha"], p["act2.beta"], tm, bias=p["conv1.bias"])
        out = y[s : s + n]
        np.matmul(h, W2, out=tm)
        tm += p["conv2.bias"]
        np.add(tm, x[s : s + n], out=out)


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


def _share(ith: int, nth: int, T: int, tile: int, rows) -> None:
    """This thread's share of whole tiles of [0, T), handed to `rows(start, end)` with numpy's BLAS on one
    thread (each ggml thread runs its own products)."""
    n_tiles = -(-T // tile)
    a, b = n_tiles * ith // nth, n_tiles * (ith + 1) // nth
    if a < b:
        _blas_one_thread()
        rows(a * tile, min(T, b * tile))


def _unit_kernel(dst, ith: int, nth: int, userdata) -> None:
    try:
        flags = int(userdata or 0)
        d = dst.contents
        x, C, T = _rows_view(d, flags)
        y = _array(dst, (T, C))  # the node always writes channels-last
        K = int(d.src[3].contents.ne[2])
        shapes = [(C,), (C,), (K, C, C), (C,), (C,), (C,), (C, C), (C,)]
        names = UNIT_SOURCES[1:]
        p = {name: _array(d.src[i + 1], shp) for i, (name, shp) in enumerate(zip(names, shapes, strict=True))}
        tile = unit_tile_rows(C)
        _share(ith, nth, T, tile, lambda a, b: unit_rows(x, y, p, flags >> _PARAM_SHIFT, a, b, tile))
    except BaseException as e:  # ggml's C frames cannot unwind a Python exception
        with _errors_lock:
            _errors.append(e)


_UNIT_CB = g.ggml_custom_op_t(_unit_kernel)


def residual_unit(ctx, x, in_cl: bool, w: dict, dilation: int):
    """The fused residual-unit node over `x` (F32, 2-D, C channels); writes channels-last [C, T].

    `w` maps UNIT_SOURCES[1:] to the weight tensors: folded snake constants ([C]), conv1.weight as ne
    [C_out, C_in, K] (numpy [K, C_in, C_out]), conv2.weight as ne [C_out, C_in], biases [C]."""
    if not g.ggml_is_contiguous(x):
        x = g.ggml_cont(ctx, x)
    srcs = [x] + [w[k] for k in UNIT_SOURCES[1:]]
    args = (ctypes.POINTER(g.ggml_tensor) * len(srcs))(*srcs)
    C, T = (int(x.contents.ne[0]), int(x.contents.ne[1])) if in_cl else (int(x.contents.ne[1]), int(x.contents.ne[0]))
    flags = (IN_CL if in_cl else 0) | OUT_CL | (dilation << _PARAM_SHIFT)
    return g.ggml_custom_4d(ctx, g.GGML_TYPE_F32, C, T, 1, 1, args, len(srcs), _UNIT_CB, -1, flags)


# ---- SnakeBeta + transposed conv ------------------------------------------------------------------------------
#: bytes of one tile's products (input frames x K x C_out x 4)
CONVT_TILE_BYTES = 1 << 21
#: at least this many frames per tile: each tile streams the whole weight through the cache once
CONVT_MIN_ROWS = 256


def convt_tile_rows(k: int, c_out: int) -> int:
    """Input frames per tile of the fused transposed conv."""
    return int(max(CONVT_MIN_ROWS, CONVT_TILE_BYTES // (4 * k * c_out)))


def convt_rows(x: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray], stride: int, a: int, b: int, tile: int) -> None:
    """Input frames [a, b) of SnakeBeta + causal ConvTranspose1d (kernel 2 x stride, trimmed on the right).

    x is [T, C_in] (any strides), y is [T x stride, C_out] channels-last. Output frame t*stride + j is
    snake(x)[t] . W[:, j] + snake(x)[t-1] . W[:, j + stride] + bias, so a tile reads one input frame before
    its start: one product per tile, P [frames, K, C_out], and the overlap-add is one add of two halves of P."""
    W = p["weight"]  # [C_in, K, C_out]
    c_in, k, c_out = W.shape
    W2 = W.reshape(c_in, k * c_out)
    r = stride
    S = np.empty((tile + 1, c_in), np.float32)
    S_tmp = np.empty_like(S)
    P = np.empty((tile + 1, k * c_out), np.float32)
    for s in range(a, b, tile):
        e = min(b, s + tile)
        s0 = max(0, s - 1)
        n = e - s0
        _snake_rows(x[s0:e], S[:n], p["alpha"], p["beta"], S_tmp[:n])
        P3 = np.matmul(S[:n], W2, out=P[:n]).reshape(n, k, c_out)
        y3 = y[s * r : e * r].reshape(e - s, r, c_out)
        if s0 == s:  # the first frame of the signal: nothing before it
            np.copyto(y3[0], P3[0, :r])
            np.add(P3[1:, :r], P3[:-1, r:], out=y3[1:])
        else:
            np.add(P3[1:, :r], P3[:-1, r:], out=y3)
        y3 += p["bias"]


def _convt_kernel(dst, ith: int, nth: int, userdata) -> None:
    try:
        flags = int(userdata or 0)
        stride = flags >> _PARAM_SHIFT
        d = dst.contents
        x, C, T = _rows_view(d, flags)
        w = d.src[3].contents
        c_out, k = int(w.ne[0]), int(w.ne[1])
        y = _array(dst, (T * stride, c_out))
        shapes = {"alpha": (C,), "beta": (C,), "weight": (C, k, c_out), "bias": (c_out,)}
        p = {name: _array(d.src[i + 1], shp) for i, (name, shp) in enumerate(shapes.items())}
        tile = convt_tile_rows(k, c_out)
        _share(ith, nth, T, tile, lambda a, b: convt_rows(x, y, p, stride, a, b, tile))
    except BaseException as e:  # ggml's C frames cannot unwind a Python exception
        with _errors_lock:
            _errors.append(e)


_CONVT_CB = g.ggml_custom_op_t(_convt_kernel)


def snake_convt(ctx, x, in_cl: bool, alpha, inv_beta, weight, bias, stride: int):
    """The fused SnakeBeta + transposed-conv node over `x` (F32, 2-D); writes channels-last [C_out, T x stride].

    `weight` is ne [C_out, K, C_in] (numpy [C_in, K, C_out]) with K = 2 x stride; `alpha`, `inv_beta` the
    folded snake constants ([C_in]); `bias` [C_out]."""
    if not g.ggml_is_contiguous(x):
        x = g.ggml_cont(ctx, x)
    srcs = [x, alpha, inv_beta, weight, bias]
    args = (ctypes.POINTER(g.ggml_tensor) * len(srcs))(*srcs)
    T = int(x.contents.ne[1]) if in_cl else int(x.contents.ne[0])
    c_out = int(weight.contents.ne[0])
    flags = (IN_CL if in_cl else 0) | OUT_CL | (stride << _PARAM_SHIFT)
    return g.ggml_custom_4d(ctx, g.GGML_TYPE_F32, c_out, T * stride, 1, 1, args, len(srcs), _CONVT_CB, -1, flags)


# ---- numpy's BLAS threads ---------------------------------------------------------------------------------------
_blas_libs: list | None = None
_blas_lock = threading.Lock()


def _numpy_blas_libs() -> list:
    """threadpoolctl controllers of the BLAS numpy calls (found once); [] when it cannot be told apart."""
    global _blas_libs
    with _blas_lock:
        if _blas_libs is None:
            try:
                from pathlib import Path

                from threadpoolctl import ThreadpoolController

                site = Path(np.__file__).resolve().parent.parent
                blas = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
                own = [c for c in blas if Path(c.filepath).resolve().is_relative_to(site)]
                _blas_libs = own or blas
            except Exception:  # no threadpoolctl or an unknown BLAS: products run with its own threading
                _blas_libs = []
    return _blas_libs


_tls = threading.local()
_blas_saved: list[tuple[int, object, int]] = []  # (thread ident, controller, its setting before)


def _blas_one_thread() -> None:
    """Put numpy's BLAS on one thread for the calling ggml thread (kept until `after_compute`).

    Each ggml thread runs its own products, so BLAS threads of its own would only oversubscribe the cores.
    Recent OpenBLAS keeps this setting per calling thread (set in one ggml thread, it does not reach the
    other), older ones process-wide. Setting it once per thread matters: each change wakes OpenBLAS's
    pool, whose threads then spin for a while on the cores the kernels need."""
    if getattr(_tls, "blas_one", False):
        return
    me = threading.get_ident()
    for c in _numpy_blas_libs():
        n = c.get_num_threads()
        if n != 1:
            c.set_num_threads(1)
            with _blas_lock:
                _blas_saved.append((me, c, n))
    _tls.blas_one = True


def _restore_blas() -> None:
    """Give numpy's BLAS its setting back where the user can see it: in the calling thread (the profiler
    computes on the main thread) and, with a process-wide setting, everywhere. ggml's own worker threads
    keep one BLAS thread for the next compute."""
    me = threading.get_ident()
    with _blas_lock:
        saved = list(_blas_saved)
        _blas_saved.clear()
    done = set()
    for ident, c, n in saved:
        if id(c) in done:
            continue
        if ident == me or c.get_num_threads() == 1:
            c.set_num_threads(n)
            done.add(id(c))
    if any(ident == me for ident, _, _ in saved):
        _tls.blas_one = False


def after_compute() -> None:
    """Call once a graph compute returns: gives numpy's BLAS setting back (see `_restore_blas`) and raises
    (once), as a BackendError, an error a fused kernel recorded during the compute."""
    _restore_blas()
    raise_pending()


def raise_pending() -> None:
    """Raise (once), as a BackendError, an error a fused kernel recorded during the last compute."""
    with _errors_lock:
        if not _errors:
            return
        err = _errors[0]
        _errors.clear()
    raise BackendError(f"a kzlab fused kernel failed: {err!r}") from err
