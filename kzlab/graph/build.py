"""The one place a decoder graph is built: the family's graph half, asked through the model's `Arch`.

Decode, the compute-budget estimate, placement and the scheduler check all call `build_graph`; none of them
knows which family it builds. The family's graph module (`Arch.graph_module`, ranked with this layer) gives
`build_decoder` (one function per block, every node named by its block path), `feed` (graph inputs derived from
the shape, such as positions and masks) and `finish` (host post-processing of the outputs).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from kzlab.arch import arch_of
from kzlab.errors import InvalidOptionError
from kzlab.graph.builder import GraphBuilder, WeightTensors
from kzlab.graph.options import LoweringPlan


def family_graph(hp: Any) -> ModuleType:
    """The graph half of the family `hp` belongs to."""
    return importlib.import_module(arch_of(hp).graph_module)


def first_stage(hp: Any) -> str:
    """The stage that takes codes."""
    return arch_of(hp).stages(hp)[0].name


def build_graph(
    weights: WeightTensors, plan: LoweringPlan, hp: Any, frames: int, start: str | None = None,
    keep_stages: bool = False, stop: str | None = None, stream: bool = False,
) -> GraphBuilder:
    """A GraphBuilder whose `gf` holds the graph from `start` (default: the codes) to the family's last output,
    or to stage `stop` (its output is then the graph's: a family that splits its chunked decode there,
    `Arch.chunk_split`, takes `stop`); the caller frees it. `stream`: one call of a stateful stream (a causal
    family, `Arch.causal`): the carried state is graph inputs and outputs (`GraphBuilder.carry`)."""
    if stream and not getattr(arch_of(hp), "causal", False):
        raise InvalidOptionError(f"the {arch_of(hp).name} family is not causal: it has no stateful stream")
    b = GraphBuilder(weights, plan, keep_stages=keep_stages, stream=stream)
    try:
        extra = {} if stop is None else {"stop": stop}
        b.finish(family_graph(hp).build_decoder(b, hp, frames, start or first_stage(hp), **extra))
    except BaseException:
        b.free()
        raise
    return b
