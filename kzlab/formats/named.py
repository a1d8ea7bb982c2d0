"""Built-in decoder names: each family registers its own (`BUILTINS` in its files half, see
kzlab.formats.family_files), and a built-in name works wherever a file does (`kzlab info tiny`,
`kzlab.load('wavtokenizer-tiny')`).

A built-in is either package data (`kzlab/data/`, found through `importlib.resources`, so an installed wheel
has it outside the checkout) or a full-size decoder written on first use into a cache folder ($KZLAB_CACHE,
else ~/.cache/kzlab), so a fresh machine needs no download. This sits below the loader so that the loader can
resolve names; kzlab.app.builtins adds what the workbench needs on top.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from kzlab.errors import InvalidOptionError
from kzlab.formats.family_files import all_halves


def package_data(name: str) -> Path:
    """A file shipped in kzlab's package data (`kzlab/data/NAME`), as a path on disk."""
    return Path(str(resources.files("kzlab") / "data" / name))


def cache_dir() -> Path:
    """$KZLAB_CACHE or ~/.cache/kzlab (created)."""
    d = Path(os.environ.get("KZLAB_CACHE") or Path.home() / ".cache" / "kzlab").expanduser()
    d.mkdir(parents=True, exist_ok=True)
    return d


def registry() -> dict[str, tuple[Any, Any, str, str]]:
    """Every built-in name -> (family Arch, its files half, kind, what): kind "package" (what: the file in
    kzlab/data) or a generated kind ("synthetic", "known-answer"; what: the preset)."""
    out: dict[str, tuple[Any, Any, str, str]] = {}
    for arch, fh in all_halves():
        for name, (kind, what) in fh.BUILTINS.items():
            if name in out:
                raise InvalidOptionError(f"built-in decoder name {name!r} is registered by two families")
            out[name] = (arch, fh, kind, what)
    return out


def builtin_names() -> tuple[str, ...]:
    return tuple(registry())


def generated_names() -> tuple[str, ...]:
    return tuple(n for n, (_a, _f, kind, _w) in registry().items() if kind != "package")


def builtin_path(name: str, dtype: str = "f16") -> Path:
    """Where a built-in decoder lives (a generated one may not be built yet)."""
    reg = registry()
    if name not in reg:
        raise InvalidOptionError(f"unknown built-in decoder {name!r}: one of {', '.join(reg)}")
    arch, _fh, kind, what = reg[name]
    if kind == "package":
        return package_data(what)
    short = name.removeprefix(arch.name.split("-")[0] + "-")  # `wavtokenizer-synthetic` -> `synthetic`
    return cache_dir() / f"{arch.name}-{short}-{dtype}.gguf"


def ensure_builtin(name: str, dtype: str = "f16", progress: Callable[[str], None] | None = None) -> Path:
    """The path of a built-in decoder, written into the cache first if missing (a few seconds)."""
    p = builtin_path(name, dtype)
    if p.is_file():
        return p
    _arch, fh, kind, what = registry()[name]
    if kind == "package":
        raise InvalidOptionError(f"built-in decoder {name!r}: package data {p} is missing (a broken install?)")
    if progress:
        progress(f"building the {name} decoder into {p.parent} (first use)")
    return fh.make_builtin(kind, what, p, dtype)


def resolve_name(spec: str | os.PathLike) -> str | os.PathLike | Path:
    """A built-in name as its path (built on demand); anything else unchanged. An existing file or folder of
    that name wins over the built-in."""
    s = str(spec).strip()
    if s in registry() and not Path(s).expanduser().exists():
        return ensure_builtin(s)
    return spec


__all__ = [
    "builtin_names", "builtin_path", "cache_dir", "ensure_builtin", "generated_names", "package_data", "registry",
    "resolve_name",
]
