"""The decoder graph kzlab builds, without allocating anything: what the scheduler would be handed.

The weights are ggml tensors with shapes only (no buffer); the simulator is told which buffer type they
would be in. Nothing here computes, so a full-size graph costs only its construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from kzlab.graph.build import build_graph
from kzlab.graph.builder import GraphBuilder, LayerRecord, WeightTensors
from kzlab.graph.options import LoweringPlan
from kzlab.graph.prepared import prepare_weights
from kzlab.model.model import Model


@dataclass
class Graph:
    weights: WeightTensors
    builder: GraphBuilder
    gf: object
    layers: list[LayerRecord]

    def free(self) -> None:
        self.builder.free()
        self.weights.free()


def build(
    model: Model, plan: LoweringPlan, frames: int, weights: WeightTensors | None = None, stream: bool = False
) -> Graph:
    """Build (never allocate) the whole decoder graph for `frames` code frames; `stream`: one call of a stateful
    stream of a causal family (its carried state graph inputs `state:<key>` and outputs `state_out:<key>`), built
    from the plan a streaming call is built from (`LoweringPlan.for_stream`)."""
    if stream:
        plan, _ = plan.for_stream()
    wt = weights or WeightTensors(prepare_weights(model, plan))
    try:
        b = build_graph(wt, plan, model.hparams, frames, stream=stream)
    except BaseException:
        if weights is None:
            wt.free()
        raise
    return Graph(wt, b, b.gf, b.layers)


def stage_of_nodes(names: list[str], layers: list[LayerRecord]) -> tuple[list[str], list[str]]:
    """(layer path, stage) of each node from its `<layer path>:<OP>` name; unnamed glue joins the stage before."""
    stage = {r.path: r.stage for r in layers}
    paths, stages, last = [], [], ""
    for n in names:
        path = n.split(":", 1)[0] if ":" in n else ""
        s = stage.get(path, "")
        if not s:
            s = last
        paths.append(path if path in stage else "")
        stages.append(s)
        last = s
    first = next((s for s in stages if s), "")
    stages = [s or first for s in stages]  # glue before the first layer (input views) joins the first stage
    return paths, stages
