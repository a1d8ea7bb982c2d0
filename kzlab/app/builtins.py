"""Built-in decoders and fixture inputs: what the workbench, the demo and the notebooks start from.

Two full-size decoders are written on first use into a cache folder ($KZLAB_CACHE, else ~/.cache/kzlab), so a
fresh machine needs no download: `synthetic` (seeded random weights, the shipped shapes) and `known-answer`
(the same shapes with an exactly invertible vocoder path, see `kzlab.formats.known_answer`). `tiny` is the
small reference decoder shipped inside the package (`kzlab/data/`, see its README), with the reference codes
and the speech sample: everything here is package data, found through `importlib.resources`, so an
installed wheel works outside the checkout.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np

from kzlab.arch.qwen3_tts_12hz.hparams import HParams
from kzlab.errors import InvalidInputError, InvalidOptionError

#: decoders built into the cache on first use (full size)
GENERATED = ("synthetic", "known-answer")
#: every built-in name a model field accepts
BUILTINS = (*GENERATED, "tiny")


def package_data(name: str) -> Path:
    """A file shipped in kzlab's package data (`kzlab/data/NAME`), as a path on disk."""
    return Path(str(resources.files("kzlab") / "data" / name))


#: the tiny reference decoder (qwentts.cpp layout, F32), its codes and the speech sample, shipped in the package
TINY_DECODER = package_data("qwen3-tts-12hz-tiny-f32.gguf")
SPEECH = package_data("speech-24k.wav")
CODES = package_data("codes.npz")
NOTEBOOKS = Path(str(resources.files("kzlab") / "notebooks"))


def cache_dir() -> Path:
    """$KZLAB_CACHE or ~/.cache/kzlab (created)."""
    d = Path(os.environ.get("KZLAB_CACHE") or Path.home() / ".cache" / "kzlab").expanduser()
    d.mkdir(parents=True, exist_ok=True)
    return d


def builtin_path(name: str, dtype: str = "f16") -> Path:
    """Where a built-in decoder lives (a generated one may not be built yet)."""
    if name == "tiny":
        return TINY_DECODER
    if name not in GENERATED:
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
