"""kzlab: a workbench for running neural audio codec decoders (GGUF files of the families in kzlab.arch) with
ggml, in notebooks.

This module is the facade: the public names, imported from the layers below (ARCHITECTURE.md). Nothing inside
kzlab imports it.
"""

from __future__ import annotations

import sys as _sys
import types as _types
from importlib import abc as _abc

# before anything loads ggml: the OpenMP wait policy libgomp reads once (kzlab/openmp.py)
from kzlab import openmp as _openmp  # noqa: F401
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
from kzlab.graph.options import LLAMACPP, NAIVE, Lowering, LoweringPlan
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
    "whatif": "kzlab.analysis.predict.question",
    "WhatIf": "kzlab.analysis.predict.question",
    "ConfigSpec": "kzlab.analysis.predict.question",
    "Capabilities": "kzlab.analysis.placement.capabilities",
    "emulate": "kzlab.analysis.emulate.device",
    "DeviceAccuracy": "kzlab.analysis.emulate.device",
    "Workbench": "kzlab.ui.workbench",
    "random_codes": "kzlab.codes",
    "load_codes": "kzlab.codes",
    "audio_to_latent": "kzlab.formats.known_answer",
    "report": "kzlab.report",
    "plots": "kzlab.plots",
    "infer_layout": "kzlab.formats.infer",
    # what the notebooks use: built-in files, audio helpers, backends here, one workbench run, the report
    "TINY_DECODER": "kzlab.app.builtins",
    "SPEECH": "kzlab.app.builtins",
    "resolve_model": "kzlab.app.builtins",
    "BUILTINS": "kzlab.app.builtins",
    "GENERATED": "kzlab.app.builtins",
    "read_wav": "kzlab.audio",
    "write_wav": "kzlab.audio",
    "snr_db": "kzlab.audio",
    "snr_text": "kzlab.audio",
    "available_backends": "kzlab.runtime.backends",
    "RunSpec": "kzlab.app.runner",
    "RunRecord": "kzlab.app.runner",
    "execute": "kzlab.app.runner",
    "stream_sweep": "kzlab.app.streaming",
    "StreamSweep": "kzlab.app.streaming",
    "placement_diff": "kzlab.analysis.predict.compare",
    "write_report": "kzlab.report",
    "families": "kzlab.arch",
    "compare": "kzlab.analysis.accuracy",
    "Accuracy": "kzlab.analysis.accuracy",
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


#: the eager names above, then every lazy one (tests/test_core.py checks that each resolves)
__all__ = [
    "NAIVE",
    "LLAMACPP",
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
    *_LAZY,
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# ---- modules that moved in 0.2 (the one-way structure): old import paths keep working, with a warning ---------
#: old module -> the modules now holding its public names, each with the old names it renamed
_MOVED: dict[str, list[tuple[str, dict[str, str]]]] = {
    "kzlab.decoder": [("kzlab.runtime.decoder", {}), ("kzlab.codes", {})],
    "kzlab.validate": [("kzlab.formats.prescan", {}), ("kzlab.model.checks", {}), ("kzlab.runtime.budget", {})],
    "kzlab.model.weights": [("kzlab.model.model", {}), ("kzlab.loader", {})],
    "kzlab.graph.weights": [("kzlab.graph.prepared", {})],
    "kzlab.analysis.api": [("kzlab.analysis.profile", {}), ("kzlab.environment", {})],
    "kzlab.analysis.placement.api": [("kzlab.analysis.placement.simulate", {})],
    "kzlab.analysis.placement.validate": [("kzlab.analysis.placement.check", {})],
    "kzlab.analysis.placement.profiles": [("kzlab.analysis.placement.capabilities", {"Profile": "Capabilities"})],
    "kzlab.analysis.placement.figures": [("kzlab.plots", {"timeline": "split_timeline"})],
    "kzlab.ui.models": [("kzlab.app.builtins", {}), ("kzlab.codes", {})],
    "kzlab.ui.runner": [("kzlab.app.runner", {}), ("kzlab.environment", {})],
    "kzlab.formats.convert": [("kzlab.app.convert", {})],
    # 0.3: the first decoder family's own pieces moved into its folder (kzlab.arch.qwen3_tts_12hz)
    "kzlab.model.hparams": [("kzlab.arch.qwen3_tts_12hz.hparams", {})],
    "kzlab.model.roles": [("kzlab.arch.qwen3_tts_12hz.roles", {}), ("kzlab.model.model", {})],
    "kzlab.graph.blocks": [
        ("kzlab.arch.qwen3_tts_12hz.graph", {}), ("kzlab.arch.qwen3_tts_12hz.spec", {}), ("kzlab.graph.build", {})
    ],
}


class _MovedModule(_types.ModuleType):
    """An old module path: each public name is looked up in the modules that hold it now."""

    def __getattr__(self, name: str):
        import importlib

        for mod, renames in _MOVED[self.__name__]:
            m = importlib.import_module(mod)
            new = renames.get(name, name)
            if hasattr(m, new):
                return getattr(m, new)
        raise AttributeError(f"{self.__name__} has no {name!r} (it moved: see ARCHITECTURE.md)")


class _MovedFinder(_abc.MetaPathFinder, _abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _MOVED:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, self)

    def create_module(self, spec):
        import warnings

        where = ", ".join(m for m, _ in _MOVED[spec.name])
        warnings.warn(f"{spec.name} moved to {where}: import it from there", DeprecationWarning, stacklevel=3)
        return _MovedModule(spec.name)

    def exec_module(self, module) -> None:
        pass


_sys.meta_path.append(_MovedFinder())
