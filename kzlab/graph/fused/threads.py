"""numpy's BLAS threads inside ggml's threads.

Each ggml thread runs its own tile products, so BLAS threads of its own would only oversubscribe the cores:
a kernel puts numpy's BLAS on one thread in the ggml thread that calls it (`blas_one_thread`), and
`restore_blas` gives the user's setting back once the compute returns. No ggml here.
"""

from __future__ import annotations

import threading

import numpy as np

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


def blas_one_thread() -> None:
    """Put numpy's BLAS on one thread for the calling ggml thread (kept until `restore_blas`).

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


def restore_blas() -> None:
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
