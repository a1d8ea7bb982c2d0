"""kzlab: a workbench for running neural audio decoders (Qwen3-TTS 12 Hz codec) with ggml, in notebooks."""

from __future__ import annotations

__version__ = "0.1.0"

from kzlab.decoder import DecodeOutput, Decoder, load
from kzlab.errors import (
    BackendError,
    Cancelled,
    InvalidInputError,
    InvalidModelError,
    InvalidOptionError,
    KzlabError,
    LayoutError,
    ResourceError,
)
from kzlab.graph.options import Lowering
from kzlab.model.weights import load_model

__all__ = [
    "BackendError",
    "Cancelled",
    "DecodeOutput",
    "Decoder",
    "InvalidInputError",
    "InvalidModelError",
    "InvalidOptionError",
    "KzlabError",
    "LayoutError",
    "Lowering",
    "ResourceError",
    "__version__",
    "load",
    "load_model",
]
