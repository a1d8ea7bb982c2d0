"""Checks of a decoder's stored tensors (whatever its family), made before any graph is built.

The checks of a family's hyperparameters live with the family (kzlab.arch.<family>).

A NaN or Inf in a weight would silently spoil every decode; it is counted here, from the raw bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def count_nonfinite(type_name: str, data: Any) -> int:
    """NaN/Inf values in stored weights, read from the raw bytes for every supported type (for Q8_0 the
    per-block F16 scales: a non-finite scale poisons its whole block)."""
    a = np.ascontiguousarray(data).reshape(-1)
    if type_name == "Q8_0":
        a = a.view(np.uint8).reshape(-1, 34)[:, :2].copy().reshape(-1).view(np.float16)
        type_name = "F16"
    # an exponent of all ones is Inf or NaN: tested on the bits, in slices (np.isfinite widens F16 to F32
    # and allocates a mask of the whole tensor; this is several times faster on a 100M-parameter file)
    bits = {"F32": (np.uint32, 0x7F800000), "F16": (np.uint16, 0x7C00), "BF16": (np.uint16, 0x7F80)}
    if type_name not in bits:
        return 0
    utype, mask = bits[type_name]
    u = a.view(utype)
    step = 1 << 20
    return sum(int(np.count_nonzero((u[i : i + step] & mask) == mask)) for i in range(0, u.size, step))


def __getattr__(name: str):
    """The first family's checks moved to kzlab.arch.qwen3_tts_12hz.checks: old imports keep working."""
    if name in ("check_hparams", "check_counts"):
        import warnings

        from kzlab.arch.qwen3_tts_12hz import checks

        warnings.warn(f"kzlab.model.checks.{name} moved to kzlab.arch.qwen3_tts_12hz.checks", DeprecationWarning,
                      stacklevel=2)
        return getattr(checks, name)
    raise AttributeError(f"module 'kzlab.model.checks' has no attribute {name!r}")
