"""The machine's reference peak: a MUL_MAT microbenchmark on the backend being profiled.

Achieved GF/s of a node or a layer only means something next to what this machine reaches on its best
op, so the peak is measured here rather than taken from a datasheet. It is cached per process, backend,
thread count and weight type, because a microbenchmark costs about a second.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
from ggml import ggml as g

from kzlab.environment import default_threads
from kzlab.runtime.backends import init_backend

_CACHE: dict[tuple[str, int, str, int], dict] = {}
TYPES = {"F32": g.GGML_TYPE_F32, "F16": g.GGML_TYPE_F16}


def mul_mat_peak(threads: int | None = None, wtype: str = "F32", n: int = 1024, repeat: int = 3) -> dict:
    """Best GF/s of an n x n x n MUL_MAT (weights `wtype`, activations F32) on the CPU backend."""
    threads = threads or default_threads()
    key = ("cpu", threads, wtype, n)
    if key in _CACHE:
        return _CACHE[key]
    be = init_backend("cpu", threads)
    ctx = g.ggml_init(
        g.ggml_init_params(
            mem_size=16 * g.ggml_tensor_overhead() + g.ggml_graph_overhead(), mem_buffer=None, no_alloc=True
        )
    )
    try:
        a = g.ggml_new_tensor_2d(ctx, TYPES[wtype], n, n)
        b = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, n, n)
        c = g.ggml_mul_mat(ctx, a, b)
        gf = g.ggml_new_graph(ctx)
        g.ggml_build_forward_expand(gf, c)
        buf = g.ggml_backend_alloc_ctx_tensors(ctx, be.handle)
        rng = np.random.default_rng(0)
        av = rng.standard_normal((n, n)).astype(np.float16 if wtype == "F16" else np.float32)
        bv = rng.standard_normal((n, n)).astype(np.float32)
        g.ggml_backend_tensor_set(a, av.ctypes.data_as(ctypes.c_void_p), 0, av.nbytes)
        g.ggml_backend_tensor_set(b, bv.ctypes.data_as(ctypes.c_void_p), 0, bv.nbytes)
        g.ggml_backend_graph_compute(be.handle, gf)  # warm-up
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            g.ggml_backend_graph_compute(be.handle, gf)
            best = min(best, time.perf_counter() - t0)
        g.ggml_backend_buffer_free(buf)
    finally:
        g.ggml_free(ctx)
        g.ggml_backend_free(be.handle)
    flops = 2 * n * n * n
    out = {
        "gflops": flops / best / 1e9,
        "op": f"MUL_MAT {wtype} x F32 {n}x{n}x{n}",
        "threads": threads,
        "best_ms": best * 1e3,
        "backend": "cpu",
    }
    _CACHE[key] = out
    return out


def achieved(flops: int, time_ms: float) -> float:
    """GF/s of `flops` done in `time_ms` (0 when nothing was timed)."""
    return flops / (time_ms * 1e6) if time_ms > 0 else 0.0
