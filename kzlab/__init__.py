"""kzlab: a workbench for running neural audio decoders (Qwen3-TTS 12 Hz codec) with ggml, in notebooks."""

from __future__ import annotations

__version__ = "0.1.0"

import os as _os

# ggml's CPU backend runs each graph (each scheduler split) in an OpenMP parallel region; with libgomp's
# default wait policy its idle threads spin after the region ends, on the cores OpenBLAS's threads need for
# the next split's MUL_MAT. Sleeping idle threads made the default BLAS + CPU decode about 25 % faster
# here (benchmarks/decode.py). libgomp reads this when ggml is first loaded, so it is set before that; a value
# the user set wins, and it has no effect when ggml was imported before kzlab.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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

#: public names that live in heavier modules, imported on first use (keeps `import kzlab` fast)
_LAZY = {
    "profile": "kzlab.analysis.api",
    "Profile": "kzlab.analysis.api",
    "simulate": "kzlab.analysis.placement.api",
    "Placement": "kzlab.analysis.placement.api",
    "Workbench": "kzlab.ui.workbench",
    "audio_to_latent": "kzlab.formats.known_answer",
    "report": "kzlab.report",
    "plots": "kzlab.plots",
    "infer_layout": "kzlab.formats.infer",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kzlab' has no attribute {name!r}")
    import importlib

    m = importlib.import_module(mod)
    return m if mod.endswith("." + name) else getattr(m, name)


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
