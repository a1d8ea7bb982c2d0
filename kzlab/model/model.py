"""A loaded decoder as plain data: hyperparameters plus weights under canonical roles.

`kzlab.loader` fills it from a file; everything after (graph builders, runtime, analysis) reads it. The
weights stay memory-mapped views of the file in their stored type; `Weight.f32()` converts on demand.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.codes import codebook_range, hparams_for_codebooks, takes_codes
from kzlab.errors import InvalidModelError

QK8_0 = 32


@dataclass(frozen=True)
class Role:
    """A canonical tensor of a decoder family: its name, shape (PyTorch order), kind and whether it may be absent.

    kind: "codebook", "conv", "convt", "dwconv", "linear", "vector", "usage" (a family may add its own)."""

    name: str
    shape: tuple[int, ...]
    kind: str
    optional: bool = False


@dataclass
class Weight:
    """One canonical tensor. `data` is the file's bytes (a view) in PyTorch order; see `f32()`."""

    role: str
    source: str
    type: str
    shape: tuple[int, ...]
    data: np.ndarray

    def f32(self) -> np.ndarray:
        """The values as float32 (dequantized for Q8_0, widened for F16/BF16)."""
        return to_f32(self.type, self.data, self.shape)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape))


def to_f32(type_name: str, data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if type_name == "F32":
        return np.asarray(data, dtype=np.float32).reshape(shape)
    if type_name == "F16":
        return np.asarray(data).astype(np.float32).reshape(shape)
    if type_name == "BF16":
        return (np.asarray(data).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if type_name == "Q8_0":
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        return dequantize(np.asarray(data), GGMLQuantizationType.Q8_0).reshape(shape).astype(np.float32)
    raise InvalidModelError(f"tensor type {type_name} is not supported (F32, F16, BF16, Q8_0)")


@dataclass
class Model:
    """The decoder as a file holds it: what every later stage starts from."""

    path: Path
    layout: str
    #: the family's hyperparameters (its class names the family: kzlab.arch.arch_of)
    hparams: Any
    weights: dict[str, Weight]
    metadata: dict[str, Any]
    file_size: int
    architecture: str | None
    kind: str = "gguf"
    notes: list[str] = field(default_factory=list)
    #: hyperparameters given by the user or a layout map's [hparams] rather than read from the file
    hparams_given: dict[str, Any] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        return sum(w.n_elements for r, w in self.weights.items() if not r.endswith(".usage"))

    def dtype_histogram(self) -> dict[str, int]:
        """Tensor count per stored type."""
        return dict(Counter(w.type for w in self.weights.values()))

    def dtype_bytes(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for w in self.weights.values():
            out[w.type] += w.nbytes
        return dict(out)

    def __getitem__(self, role: str) -> Weight:
        return self.weights[role]

    @property
    def family(self) -> str:
        """The decoder family (kzlab.arch) these weights belong to."""
        return type(self.hparams).family

    def for_codebooks(self, n: int) -> Model:
        """This model as a decode of codes with n codebooks sees it: the same weights, the family's
        hyperparameters for the first n (kzlab.codes.hparams_for_codebooks); itself for all of them. What builds
        its own session for such codes (a profile, a placement) builds the graph that decode ran."""
        hp = hparams_for_codebooks(self.hparams, n)
        return self if hp is self.hparams else dataclasses.replace(self, hparams=hp)

    def info(self) -> dict[str, Any]:
        """What `kzlab info` prints; `codebooks`: the fewest and most codebooks its codes may have (the first n
        are decoded), None for a decoder of latents."""
        return {
            "family": self.family,
            "path": str(self.path),
            "kind": self.kind,
            "layout": self.layout,
            "architecture": self.architecture,
            "file_size": self.file_size,
            "n_params": self.n_params,
            "n_tensors": len(self.weights),
            "dtypes": self.dtype_histogram(),
            "dtype_bytes": self.dtype_bytes(),
            "hparams": self.hparams.to_dict(),
            "hparams_given": dict(self.hparams_given),
            "codebooks": list(codebook_range(self.hparams)) if takes_codes(self.hparams) else None,
            "notes": list(self.notes),
        }
