"""Synthetic decoders: a family's shipped shapes with seeded random weights, for speed work and demos.

Each family says its presets (shapes) and how to draw each role's weights so that activations stay in range
through all blocks (`random_weight` in its files half, kzlab.formats.family_files); this module draws them in
the family's role order and writes the family's own GGUF layout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.arch import arch_of
from kzlab.errors import InvalidOptionError
from kzlab.formats.family_files import all_halves, files_half
from kzlab.formats.writer import write_gguf


def _presets() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _arch, fh in all_halves():
        out.update(fh.PRESETS)
    return out


#: every family's presets: name -> hyperparameters
PRESETS: dict[str, Any] = _presets()


def family_preset(family: str) -> str:
    """The preset of a family's full-size synthetic (`kzlab synth --family NAME`); a family is named by its
    registry name or by a prefix of it (`wavtokenizer` for `wavtokenizer-dec`)."""
    from kzlab.arch import family_names

    hits = [n for n in family_names() if n == family] or [n for n in family_names() if n.startswith(family)]
    if len(hits) != 1:
        raise InvalidOptionError(f"unknown decoder family {family!r}: one of {', '.join(family_names())}")
    return files_half(hits[0]).DEFAULT_PRESET


def synth(
    out: str | Path,
    preset: str = "qwen3-tts-12hz",
    dtype: str = "f16",
    seed: int = 0,
    hparams: Any = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write a random-weight decoder of the preset's shapes as a GGUF in its family's layout."""
    if hparams is None:
        if preset not in PRESETS:
            raise InvalidOptionError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        hparams = PRESETS[preset]
    arch = arch_of(hparams)
    fh = files_half(arch)
    rng = np.random.default_rng(seed)
    roles = [r for r in arch.roles(hparams) if not r.optional]
    tensors = [(r.name, (lambda r=r: fh.random_weight(r, rng, hparams))) for r in roles]
    return write_gguf(
        out,
        hparams,
        tensors,
        outtype=dtype,
        name=f"kzlab synthetic {preset} (seed {seed})",
        extra_metadata={"kzlab.synthetic": True, "kzlab.seed": seed},
        progress=progress,
    )


def random_weight(role: Any, rng: np.random.Generator, hparams: Any = None) -> np.ndarray:
    """One role's random weight as the family of `hparams` draws it (default: the first registered family)."""
    from kzlab.arch import family_names

    return files_half(hparams if hparams is not None else family_names()[0]).random_weight(role, rng, hparams)


__all__ = ["PRESETS", "family_preset", "random_weight", "synth"]
