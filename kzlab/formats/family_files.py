"""A decoder family's file half: how its GGUF files are written, which synthetic and built-in decoders it
has, and how a file of unknown names is mapped back to its roles.

Each family names the module in its `Arch.files_module` (`kzlab/arch/<family>/files.py`, ranked with
kzlab.formats). The generic writer, synthesiser, built-in registry and layout inference ask that module and
never name a family's tensors themselves. What a files half holds:

- `ARCHITECTURE` (the `general.architecture` its files carry) and `DEFAULT_NAME` (`general.name`);
- `tensor_name(role)`, `file_array(role, a)` (the canonical float32 array in the file's own shape) and
  `storage_type(role, shape, outtype)` ("F32", "F16" or "Q8_0": what the family's own converter stores);
- `metadata(hp, outtype, n_params)`: the hyperparameter keys, in the types the family's readers expect;
- `PRESETS` (name -> hyperparameters) and `random_weight(role, rng, hp)` for synthetic decoders;
- `BUILTINS`: name -> `("package", file)` for a decoder shipped in kzlab/data, or `("synthetic", preset)`
  and `("known-answer", preset)` for one written into the cache on first use; `make_builtin(kind, preset,
  path, dtype)` writes the latter;
- `infer_layout(raw, name)`: a `kzlab.formats.infer.Proposal` for a file whose names no layout map knows.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from kzlab.arch import Arch, arch_of, families, get_arch


def files_half(family: Arch | str | Any) -> ModuleType:
    """The files half of a family, given as its `Arch`, its name, or a hyperparameter record of it."""
    if isinstance(family, str):
        arch = get_arch(family)
    elif isinstance(family, Arch):
        arch = family
    else:
        arch = arch_of(family)
    return importlib.import_module(arch.files_module)


def all_halves() -> list[tuple[Arch, ModuleType]]:
    """Every registered family with its files half, in registry order."""
    return [(a, files_half(a)) for a in families()]


__all__ = ["all_halves", "files_half"]
