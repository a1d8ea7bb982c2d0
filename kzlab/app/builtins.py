"""Built-in decoders and fixture inputs: what the workbench, the demo and the notebooks start from.

Each decoder family registers its built-in names (kzlab.formats.named): full-size decoders written on first
use into a cache folder ($KZLAB_CACHE, else ~/.cache/kzlab), so a fresh machine needs no download (`synthetic`
and `known-answer` for the Qwen3-TTS 12 Hz decoder, `wavtokenizer-synthetic`), and small reference decoders
shipped inside the package (`tiny`, `wavtokenizer-tiny`; `kzlab/data/`, see its README), with the reference
codes and the speech sample: everything here is package data, found through `importlib.resources`, so an
installed wheel works outside the checkout.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.errors import InvalidInputError, InvalidOptionError
from kzlab.formats.named import builtin_names, builtin_path, cache_dir, ensure_builtin, generated_names, package_data

#: decoders built into the cache on first use (full size), every family's
GENERATED = generated_names()
#: every built-in name a model field accepts (each family registers its own)
BUILTINS = builtin_names()

#: the first family's tiny reference decoder (F32), its codes and the speech sample, shipped in the package
TINY_DECODER = builtin_path("tiny")
SPEECH = package_data("speech-24k.wav")
CODES = package_data("codes.npz")
NOTEBOOKS = Path(str(resources.files("kzlab") / "notebooks"))


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


def fixture_codes(hp: Any) -> np.ndarray:
    """The reference codes that fit these hyperparameters (full size: [16, 31], the seed case; tiny: [16, 100])."""
    with np.load(CODES) as z:
        for key in ("full", "tiny"):
            codes = z[key]
            top = int(codes.max())
            if codes.shape[0] == hp.num_quantizers and top < min(hp.codebook_size, hp.semantic_codebook_size):
                return codes
    raise InvalidInputError(f"no reference codes fit this decoder (codebook size {hp.codebook_size}) in {CODES}")


def copy_notebooks(dest: str | os.PathLike, overwrite: bool = False) -> list[Path]:
    """Copy the notebooks (`.ipynb`, with their jupytext `.py` sources) into `dest`; existing files are kept
    unless `overwrite`. Returns the files written."""
    d = Path(dest).expanduser()
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for src in sorted(NOTEBOOKS.iterdir()):
        if src.suffix not in (".ipynb", ".py", ".md") or src.name.startswith("_"):
            continue
        target = d / src.name
        if target.exists() and not overwrite:
            continue
        shutil.copyfile(src, target)
        out.append(target)
    return out


__all__ = [
    "BUILTINS", "CODES", "GENERATED", "NOTEBOOKS", "SPEECH", "TINY_DECODER", "builtin_path", "cache_dir",
    "copy_notebooks", "ensure_builtin", "fixture_codes", "package_data", "resolve_model",
]
