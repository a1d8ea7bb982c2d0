"""kzlab's fused CPU op: SnakeBeta in one graph node (`ggml_custom_4d` running a numpy kernel).

Why: ggml 0.15.3 computes SIN with scalar `sinf` (about 10 ns per element here), and in a channels-first
activation every per-channel MUL/ADD is a broadcast of one value per row, which ggml's binary ops walk one
element at a time. Folded SnakeBeta is five such passes (MUL, SIN, SQR, MUL, ADD) over the largest tensors of
the decoder; at 31 frames it was about a third of the CPU decode. numpy's float32 `sin` is SIMD (AVX2 /
AVX-512), and working block by block keeps each block in cache for all five steps, so the fused node costs
roughly a third of the five ggml nodes (benchmarks/decode.py).

The node's sources are the activation, the two folded constant vectors (exp(alpha) and 1/(exp(beta)+1e-9))
and, where the conv before it has one, that conv's bias, which the node adds first (in a channels-first
tensor a per-channel ADD is one of those slow broadcasts). The node can also write its output in the other
memory order, which removes the transpose (a CONT) a following 1x1 conv or transposed conv needs. The
scheduler, the profiler and the placement simulator see a real node with real inputs. It runs on ggml's CPU
backend only: a device backend (RPC, GPU, Hexagon) cannot call back into this process, which is why
`Lowering.snake="auto"` picks it only when every backend is the CPU or BLAS.

ggml runs the kernel on each of its threads with (ith, nth); each thread takes a range of channels (channels-first
throughout) or of frames.
numpy releases the GIL inside its loops, so the threads overlap. An exception in the kernel cannot cross
ggml's C frames: it is recorded and raised by `raise_pending()` once the graph returns.
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


def raise_pending() -> None:
    """Raise (once), as a BackendError, an error a fused kernel recorded during the last compute."""
    with _errors_lock:
        if not _errors:
            return
        err = _errors[0]
        _errors.clear()
    raise BackendError(f"kzlab's fused SnakeBeta kernel failed: {err!r}") from err
