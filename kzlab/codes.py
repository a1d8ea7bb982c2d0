"""Codes, the decoder's input: read from a file, generated at random, and validated before ggml sees them.

Wrong codes (a float array, a wrong shape, a code past its codebook) would otherwise index outside a ggml
tensor; here they are a clear `InvalidInputError`. `hp` is the decoder's HParams (anything with
`num_quantizers`, `codebook_size` and `semantic_codebook_size`). A decoder whose first stage takes continuous
latents instead (its hyperparameters say `takes_codes` False and give `input_channels`) gets float32 frames
[input_channels, T] in the same places: validated as finite floats, drawn as standard normals.

How many codebooks codes may have is the family's to say, on its hyperparameters: `num_quantizers` at most and
`min_quantizers` at least (absent: exactly `num_quantizers`). A family that decodes the first n of its codebooks
(as its upstream decode does) gives `min_quantizers` and `for_codebooks(n)`, the hyperparameters of a decode of n
codebooks (`hparams_for_codebooks`); a wrong count is refused with the family's `codebook_count_hint(n)`: what it
needs, and the option that would take such codes where there is one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.errors import InvalidInputError


def takes_codes(hp: Any) -> bool:
    """Whether the decoder's first stage takes codes (else float latents [input_channels, T])."""
    return bool(getattr(hp, "takes_codes", True))


def validate_float(x, channels: int, what: str) -> np.ndarray:
    """Float frames [channels, T] (a batch of one accepted) as float32, finite, or a clear InvalidInputError that
    says what is wrong with `what` (e.g. 'latents', 'the input of decoder.0')."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise InvalidInputError(f"{what} must be a float array of shape [{channels}, T]; {e}") from None
    if not np.issubdtype(a.dtype, np.floating):
        raise InvalidInputError(f"{what} must be a float array of shape [{channels}, T]; got dtype {a.dtype}")
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 2 or a.shape[0] != channels:
        raise InvalidInputError(f"{what} must have shape [{channels}, T]; got {list(a.shape)}")
    if a.shape[1] < 1:
        raise InvalidInputError(f"{what}: no frames (T = 0)")
    if not np.all(np.isfinite(a)):
        raise InvalidInputError(f"{what}: NaN or Inf values")
    return np.ascontiguousarray(a, dtype=np.float32)


def validate_latents(x, hp) -> np.ndarray:
    """Latents as float32 [input_channels, T], finite, or a clear InvalidInputError saying what is wrong."""
    return validate_float(x, int(hp.input_channels), "latents")


def codebook_range(hp: Any) -> tuple[int, int]:
    """(fewest, most) codebooks codes for this decoder may have: the family's `min_quantizers` (absent: all of them)
    and `num_quantizers`. Codes with n of them decode the first n."""
    most = int(hp.num_quantizers)
    return min(int(getattr(hp, "min_quantizers", most)), most), most


def codebooks_shape(hp: Any) -> str:
    """The codes' shape in words: '[16, T]', or '[n, T] with n from 1 to 32' where the count may vary."""
    lo, hi = codebook_range(hp)
    return f"[{hi}, T]" if lo == hi else f"[n, T] with n from {lo} to {hi} (the first n codebooks)"


def hparams_for_codebooks(hp: Any, n: int) -> Any:
    """The hyperparameters of a decode of codes with `n` codebooks (validated: `validate_codes`): `hp` itself for
    all of them, else the family's `for_codebooks(n)` (the graph built for the first n)."""
    if n == hp.num_quantizers:
        return hp
    lo, hi = codebook_range(hp)
    if not lo <= n <= hi:
        raise InvalidInputError(f"codes must have shape {codebooks_shape(hp)}; got {n} codebooks")
    return hp.for_codebooks(int(n))


def _count_error(hp: Any, shape: list[int]) -> InvalidInputError:
    """Codes of the wrong shape: what the decoder takes, and the family's word on what would take them."""
    text = f"codes must have shape {codebooks_shape(hp)}; got {shape}"
    hint = getattr(hp, "codebook_count_hint", None)
    if hint is not None and len(shape) == 2:
        note = hint(int(shape[0]))
        if note:
            text += f": {note}"
    return InvalidInputError(text)


def validate_codes(codes, hp) -> np.ndarray:
    """Codes as int32 [n, T] (n codebooks, from the family's `min_quantizers` to `num_quantizers`, see
    `codebook_range`), or a clear InvalidInputError saying what is wrong (a decoder of latents:
    `validate_latents`)."""
    if not takes_codes(hp):
        return validate_latents(codes, hp)
    try:
        a = np.asarray(codes)
    except (ValueError, TypeError) as e:  # ragged nested lists and the like
        raise InvalidInputError(f"codes must be an integer array of shape {codebooks_shape(hp)}; {e}") from None
    if a.dtype == object or not (np.issubdtype(a.dtype, np.integer) or a.dtype == bool):
        if np.issubdtype(a.dtype, np.floating) and a.size and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            raise InvalidInputError(
                f"codes must be an integer array; got {a.dtype} (convert with codes.astype(np.int32) if intended)"
            )
        raise InvalidInputError(
            f"codes must be an integer array of shape {codebooks_shape(hp)}; got dtype {a.dtype}"
        )
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    lo, hi = codebook_range(hp)
    if a.ndim != 2 or not lo <= a.shape[0] <= hi:
        raise _count_error(hp, list(a.shape))
    if a.shape[1] < 1:
        raise InvalidInputError("codes have no frames (T = 0)")
    if a.min() < 0:
        i, t = np.argwhere(a < 0)[0]
        raise InvalidInputError(f"codes must be >= 0; codebook {i}, frame {t} is {a[i, t]}")
    limits = np.array([hp.semantic_codebook_size] + [hp.codebook_size] * (a.shape[0] - 1))
    over = a >= limits[:, None]
    if over.any():
        i, t = np.argwhere(over)[0]
        raise InvalidInputError(
            f"code {a[i, t]} at codebook {i}, frame {t} is out of range: that codebook has {limits[i]} entries"
        )
    return np.ascontiguousarray(a, dtype=np.int32)


def load_codes(path: str) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"{p}: no such codes file")
    try:
        if p.suffix == ".npz":
            z = np.load(p)
            key = "codes" if "codes" in z else list(z.keys())[0]
            return z[key]
        if p.suffix == ".json":
            return np.asarray(json.loads(p.read_text()))
        return np.load(p, allow_pickle=False)
    except (ValueError, OSError, json.JSONDecodeError) as e:
        raise InvalidInputError(f"{p}: cannot read codes: {e}") from None


def random_codes(hp: Any, frames: int, seed: int = 0) -> np.ndarray:
    """Uniform random codes [num_quantizers, frames] within each codebook's range (reproducible by `seed`); for a
    decoder of latents, standard normal latents [input_channels, frames] (float32)."""
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 1:
        raise InvalidInputError(f"frames must be an integer >= 1; got {frames!r}")
    rng = np.random.default_rng(seed)
    if not takes_codes(hp):
        return rng.standard_normal((int(hp.input_channels), int(frames)), dtype=np.float32)
    c = rng.integers(0, hp.codebook_size, size=(hp.num_quantizers, int(frames)), dtype=np.int32)
    c[0] = rng.integers(0, hp.semantic_codebook_size, size=int(frames))
    return c
