"""Built-in decoders and fixture inputs: what the workbench, the demo and the notebooks start from.

The built-in decoders are full-size files written on first use into a cache folder ($KZLAB_CACHE, else
~/.cache/kzlab), so a fresh machine needs no download: `synthetic` (seeded random weights, the shipped
shapes) and `known-answer` (the same shapes with an exactly invertible vocoder path, see
`kzlab.formats.known_answer`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kzlab.errors import InvalidInputError, InvalidOptionError
from kzlab.model.hparams import HParams

BUILTINS = ("synthetic", "known-answer")
REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "data"
SPEECH = REPO / "data" / "speech-24k.wav"


def cache_dir() -> Path:
    """$KZLAB_CACHE or ~/.cache/kzlab (created)."""
    d = Path(os.environ.get("KZLAB_CACHE") or Path.home() / ".cache" / "kzlab").expanduser()
    d.mkdir(parents=True, exist_ok=True)
    return d


def builtin_path(name: str, dtype: str = "f16") -> Path:
    """Where a built-in decoder lives in the cache (it may not be built yet)."""
    if name not in BUILTINS:
        raise InvalidOptionError(f"unknown built-in decoder {name!r}: one of {', '.join(BUILTINS)}")
    return cache_dir() / f"qwen3-tts-12hz-{name}-{dtype}.gguf"


def ensure_builtin(name: str, dtype: str = "f16", progress: Callable[[str], None] | None = None) -> Path:
    """The path of a built-in decoder, written into the cache first if missing (a few seconds)."""
    p = builtin_path(name, dtype)
    if p.is_file():
        return p
    if progress:
        progress(f"building the {name} decoder into {p.parent} (first use)")
    if name == "synthetic":
        from kzlab.formats.synth import synth

        return synth(p, preset="qwen3-tts-12hz", dtype=dtype, seed=0)
    from kzlab.formats.known_answer import synth_known_answer

    return synth_known_answer(p, preset="qwen3-tts-12hz", dtype=dtype, seed=0)


def resolve_model(spec: str, progress: Callable[[str], None] | None = None) -> Path:
    """A model field's value as a path: a built-in name (built on demand) or a file/directory that exists."""
    s = str(spec).strip()
    if s in BUILTINS:
        return ensure_builtin(s, progress=progress)
    if not s:
        raise InvalidOptionError("no decoder chosen: give a GGUF path or pick a built-in decoder")
    p = Path(s).expanduser()
    if not p.exists():
        raise InvalidOptionError(f"{p}: no such decoder file")
    return p


def fixture_codes(hp: HParams) -> np.ndarray:
    """The reference codes of the test fixtures that fit these hyperparameters (full: [16, 31]; tiny: [16, 100])."""
    for sub in ("qwen3-tts-12hz-full", "qwen3-tts-12hz-tiny"):
        f = FIXTURES / sub / "reference.npz"
        if not f.is_file():
            continue
        codes = np.load(f)["codes"]
        if codes.shape[0] == hp.num_quantizers and int(codes.max()) < min(hp.codebook_size, hp.semantic_codebook_size):
            return codes
    raise InvalidInputError(f"no fixture codes fit this decoder (codebook size {hp.codebook_size}) in {FIXTURES}")
