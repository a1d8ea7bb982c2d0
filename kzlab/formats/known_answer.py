"""Known-answer decoders: full-size shapes whose vocoder path is exactly invertible, so that a listener can
hear whether a backend or lowering is right (a random-weight decoder only proves that the graph runs).

A family that has one names its module in its files half (`KNOWN_ANSWER`, kzlab.formats.family_files); that
module holds `synth_known_answer`, `audio_to_latent` and `sample_channel_map`. This module finds it: by the
hyperparameters given, by the preset's family, else the first family that has one.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from kzlab.errors import InvalidOptionError
from kzlab.formats.family_files import all_halves, files_half


def _module(preset: str | None = None, hparams: Any = None) -> tuple[ModuleType, str | None]:
    if hparams is not None:
        fh = files_half(hparams)
    elif preset is not None:
        from kzlab.formats.synth import PRESETS

        if preset not in PRESETS:
            raise InvalidOptionError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        fh = files_half(PRESETS[preset])
    else:
        fh = next((h for _a, h in all_halves() if getattr(h, "KNOWN_ANSWER", None)), None)
        if fh is None:
            raise InvalidOptionError("no decoder family has a known-answer decoder")
        preset = fh.DEFAULT_PRESET
    name = getattr(fh, "KNOWN_ANSWER", None)
    if not name:
        raise InvalidOptionError(f"{fh.DEFAULT_NAME}: this decoder family has no known-answer decoder")
    return importlib.import_module(name), preset


def synth_known_answer(
    out: str | Path, preset: str | None = None, dtype: str = "f16", seed: int = 0, hparams: Any = None
) -> Path:
    """Write a known-answer decoder of the preset's shapes (default: the first such family's full size)."""
    mod, preset = _module(preset, hparams)
    return mod.synth_known_answer(out, preset=preset, dtype=dtype, seed=seed, hparams=hparams)


def audio_to_latent(wav, hparams: Any = None) -> np.ndarray:
    """A 24 kHz recording as the latent that a known-answer decoder turns back into it (see the family's
    module for the exact layout)."""
    mod, _ = _module(None, hparams)
    return mod.audio_to_latent(wav, hparams)


def _sample_channel_map(hp: Any) -> np.ndarray:
    """Which latent channel carries each sample of a frame (the family's `sample_channel_map`)."""
    mod, _ = _module(None, hp)
    return mod.sample_channel_map(hp)


def vocoder_upsample(hp: Any) -> int:
    mod, _ = _module(None, hp)
    return mod.vocoder_upsample(hp)


__all__ = ["audio_to_latent", "synth_known_answer", "vocoder_upsample"]
