"""kzlab: a workbench for running neural audio decoders (Qwen3-TTS 12 Hz codec) with ggml, in notebooks.

This module is the facade: the public names, imported from the layers below (ARCHITECTURE.md). Nothing inside
kzlab imports it.
"""

from __future__ import annotations

import os as _os

# ggml's CPU backend runs each graph (each scheduler split) in an OpenMP parallel region; with libgomp's
# default wait policy its idle threads spin after the region ends, on the cores OpenBLAS's threads need for
# the next split's MUL_MAT. Sleeping idle threads made the default BLAS + CPU decode about 25 % faster
# here (benchmarks/decode.py). libgomp reads this when ggml is first loaded, so it is set before that; a value
# the user set wins, and it has no effect when ggml was imported before kzlab.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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
from kzlab.graph.options import NAIVE, Lowering, LoweringPlan
from kzlab.loader import load_model
from kzlab.runtime.decoder import DecodeOutput, Decoder, load
from kzlab.runtime.spec import BackendSpec, ResolvedBackends
from kzlab.version import __version__

#: public names that live in heavier modules, imported on first use (keeps `import kzlab` fast)
_LAZY = {
    "profile": "kzlab.analysis.profile",
    "Profile": "kzlab.analysis.profile",
    "simulate": "kzlab.analysis.placement.simulate",
    "Placement": "kzlab.analysis.placement.simulate",
    "Capabilities": "kzlab.analysis.placement.capabilities",
    "Workbench": "kzlab.ui.workbench",
    "random_codes": "kzlab.codes",
    "load_codes": "kzlab.codes",
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
    # a function or class of that module (kzlab.profile is the function in kzlab.analysis.profile), else the
    # module itself (kzlab.plots)
    return getattr(m, name) if hasattr(m, name) else m


__all__ = [
    "NAIVE",
    "BackendError",
    "BackendSpec",
    "Cancelled",
    "DecodeOutput",
    "Decoder",
    "InvalidInputError",
    "InvalidModelError",
    "InvalidOptionError",
    "KzlabError",
    "LayoutError",
    "Lowering",
    "LoweringPlan",
    "ResolvedBackends",
    "ResourceError",
    "__version__",
    "load",
    "load_model",
]
