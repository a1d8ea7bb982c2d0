"""Decoder families: what differs from one codec decoder architecture to the next, behind one protocol.

A family is a vertical slice in `kzlab/arch/<family>/`: its data half (`spec.py`: hyperparameters, roles with
shapes, checks, stages in order with their input shapes, chunking, samples per frame) ranks with `kzlab.model`;
its graph half (`graph.py`: one builder per block, host post-processing) ranks with `kzlab.graph`. Everything
else (loader, runtime, analysis, figures, app, ui, cli) asks the `Arch` a model's hyperparameters belong to
(`arch_of(hp)`), never a family by name. llama.cpp keeps the same split: names and hyperparameters per
architecture in one table, one graph builder per architecture, and a scheduler that never asks which model it
runs.

Adding a family is one folder and one line in `_FAMILIES` (see ARCHITECTURE.md, "Adding a decoder family").
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kzlab.errors import InvalidModelError

#: Winograd's transformed matrices -> the taps of the conv they compute, for a family's count of a fused node whose
#: conv runs that way (kzlab.graph.fused.winograd: F(6, 3) has 8 matrices, F(4, 7) 10; the data half may not import
#: it, tests/test_fused_normconv.py checks the two agree)
WINOGRAD_TAPS = {8: 3, 10: 7}
#: family name -> the module holding its `ARCH` (the data half); one line per family
_FAMILIES: dict[str, str] = {
    "qwen3-tts-12hz": "kzlab.arch.qwen3_tts_12hz.spec",
    "wavtokenizer-dec": "kzlab.arch.wavtokenizer.spec",
    "mimi": "kzlab.arch.mimi.spec",
}


@dataclass(frozen=True)
class Stage:
    """One stage of a decoder: its name (as in the reference fixtures), and what figures need to know of it.

    `group` is the stage's kind for colouring and ordering (stages of one group are consecutive); `rank` is its
    position in the decoder. Plots and reports read this record, so no figure hard-codes a stage order."""

    name: str
    group: str
    rank: int


@runtime_checkable
class Arch(Protocol):
    """What a decoder family tells the generic layers. One instance per family (`ARCH` in its spec module)."""

    #: the family's name (the registry key) and a human label
    name: str
    label: str
    #: `general.architecture` values files of this family carry
    architectures: tuple[str, ...]
    #: the module of the graph half (ranks with kzlab.graph): `build_decoder`, `feed`, `finish` live there
    graph_module: str
    #: the module of the file half (ranks with kzlab.formats): the GGUF this family's files are written in
    #: (tensor names, shapes, stored types, metadata), its synthetic decoders, its built-in decoders and its
    #: layout inference (see kzlab.formats.family_files)
    files_module: str
    #: the class of the family's hyperparameters (it carries `family = name`)
    hparams_type: type
    #: default chunking of long decodes (frames per chunk, frames of left context before each chunk and of right
    #: context, a lookahead, after it; both decoded and dropped)
    chunk_size: int
    left_context: int
    right_context: int
    #: whether every layer reads only the past: a causal family streams with its state carried, exactly
    #: (`Decoder.stream`; its graph half then has `feed_stream`); another streams in overlapping windows of
    #: `stream_context` = (frames before, frames after) each call's frames, an approximation `stream_note` states
    causal: bool
    #: other names users give stages (e.g. 'latent', 'codes')
    stage_aliases: dict[str, str]
    #: whether kzlab has fused CPU nodes for this family (`mode="fast"`); without them every run is portable
    fused_nodes: bool
    #: lowering options (`kzlab.graph.options.Lowering` fields) that change nothing in this family's graph, each
    #: with the reason: the Workbench shows them disabled with it, and labels leave them out
    not_applicable: dict[str, str]

    def detect(self, architecture: str | None, tensor_names: Sequence[str]) -> bool:
        """Whether a file (its `general.architecture` and tensor names) is of this family."""

    def hparams_from(
        self, shapes: dict[str, tuple[int, ...]], meta: dict[str, Any], source: str,
        quirks: dict[str, str] | None = None, notes: list[str] | None = None,
    ) -> Any:
        """Hyperparameters from canonical shapes (torch order) and metadata; refuses what cannot be a decoder."""

    def check(self, hp: Any, meta: dict[str, Any], roles_present: set[str], source: str) -> None:
        """Refuse hyperparameters and role sets the graph builders would turn into a ggml assertion."""

    def roles(self, hp: Any) -> list[Any]:
        """Every canonical role (`kzlab.model.model.Role`-like: name, shape, kind, optional) in graph order."""

    def finish_weights(self, weights: dict[str, Any], hp: Any) -> None:
        """Last touches after the weights are checked (e.g. codebooks divided by their usage)."""

    def stages(self, hp: Any) -> list[Stage]:
        """The stages in order (their outputs can be read back by name)."""

    def stage_input_shape(self, hp: Any, stage: str, frames: int) -> tuple[int, int]:
        """(channels, T) of the input a stage takes for `frames` code frames; the first stage takes codes."""

    def describe(self, hp: Any) -> list[tuple[str, str]]:
        """(label, text) lines that say the family's sizes (`kzlab info`)."""

    def summary_stages(self, hp: Any) -> list[str]:
        """The stages a one-line T-evolution summary shows (`kzlab decode`)."""

    def samples_per_frame(self, hp: Any) -> int:
        """Output samples per code frame."""

    def keeps_f16_in_q8_0(self, role: str) -> bool:
        """Whether a matrix stays F16 when the decoder is quantized to Q8_0."""

    def chunk_split(self, hp: Any) -> tuple[str, str, int] | None:
        """Where a chunked decode splits the decoder, for a family whose early blocks see the whole sequence
        (attention, GroupNorm) and whose later ones are local: (the last stage run on the whole sequence, the
        first stage run in chunks, the frames either side on which one output frame of that local part depends).
        None: every chunk runs the whole decoder, with left and right context (upstream's chunked_decode)."""

    def custom_flops(self, name: str, out: Any, srcs: Sequence[Any]) -> int | None:
        """FLOPs of one of the family's custom (fused) graph nodes, from its name, its output and its sources
        (records with `ne` (ggml order), `n` and `type`; a source may be None); None when the node is not one of
        the family's (the op table then counts it as a pointwise chain)."""

    def custom_label(self, name: str, srcs: Sequence[Any]) -> str | None:
        """A short label for one of the family's custom nodes (what it fuses), or None."""


def family_names() -> list[str]:
    return list(_FAMILIES)


def get_arch(name: str) -> Arch:
    """The family called `name` (a KeyError names the known ones)."""
    if name not in _FAMILIES:
        raise KeyError(f"unknown decoder family {name!r}: kzlab decodes {', '.join(_FAMILIES)}")
    return importlib.import_module(_FAMILIES[name]).ARCH


def families() -> list[Arch]:
    return [get_arch(n) for n in _FAMILIES]


def arch_of(hp: Any) -> Arch:
    """The family a hyperparameter record belongs to (its class says: `family`)."""
    name = getattr(type(hp), "family", None)
    if name is None:
        raise TypeError(f"{type(hp).__name__} is not the hyperparameters of a decoder family")
    return get_arch(name)


def detect(architecture: str | None, tensor_names: Iterable[str]) -> Arch | None:
    """The family whose files look like this one, if any."""
    names = list(tensor_names)
    for a in families():
        if a.detect(architecture, names):
            return a
    return None


def known_architectures() -> list[str]:
    return sorted({x for a in families() for x in a.architectures})


def unknown_family_error(path: Any, architecture: str | None) -> InvalidModelError:
    """The refusal of a GGUF of a family kzlab does not decode (e.g. a language model); where a family knows the
    architecture as another part of its models (`Arch.other_files`: a talker beside its decoder file), it says
    where the decoder is."""
    what = f"a {architecture!r} file" if architecture else "a file with no general.architecture"
    hints = [h for a in families() for arch, h in (getattr(a, "other_files", {}) or {}).items()
             if arch == architecture]
    if hints:
        return InvalidModelError(f"{path} is {what}: {'; '.join(hints)}")
    return InvalidModelError(f"{path} is {what}; kzlab decodes: {', '.join(_FAMILIES)}")


def not_applicable(hp: Any) -> dict[str, str]:
    """Lowering option -> why it does not apply to the family of `hp` (empty for a family that does not say)."""
    return dict(getattr(arch_of(hp), "not_applicable", {}) or {})


def stage_order(hp: Any) -> dict[str, int]:
    """Stage name -> position, for sorting records of one model."""
    return {s.name: s.rank for s in arch_of(hp).stages(hp)}


__all__ = [
    "Arch", "Stage", "arch_of", "detect", "families", "family_names", "get_arch", "known_architectures",
    "not_applicable", "stage_order", "unknown_family_error",
]
