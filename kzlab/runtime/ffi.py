"""Correct ctypes prototypes for the few ggml functions whose ggml-python 0.0.45 binding is unusable.

ggml-python declares some functions returning a pointer with a `typing.NewType` as restype; ctypes then
reads the result as a C int and the pointer is truncated to 32 bits (dereferencing it crashes). These are
re-declared here straight from the shared library, with pointer results.
"""

from __future__ import annotations

import ctypes
from functools import cache

from ggml import ggml as g


@cache
def _sched_get_tensor_backend():
    f = g.lib.ggml_backend_sched_get_tensor_backend
    f.restype = ctypes.c_void_p
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return f


def sched_tensor_backend(sched, tensor) -> int | None:
    """The backend (ggml_backend_t as an int) the scheduler assigned to `tensor`, or None if unassigned."""
    ptr = ctypes.cast(tensor, ctypes.c_void_p)
    return _sched_get_tensor_backend()(sched, ptr) or None


def tensor_address(t) -> int:
    """The C address of a ggml tensor pointer (a stable key across ctypes wrappers)."""
    return ctypes.cast(t, ctypes.c_void_p).value or 0
