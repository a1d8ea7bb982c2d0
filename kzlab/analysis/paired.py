"""A/B of predicted placements on paired draws: P(A faster than B) and the ratio's distribution.

Two predictions each carry their own distribution, drawn on their own; comparing those two spreads would count
a device that is fast for A and slow for B. Here the uncertain parameters both rest on are drawn once
(`ParameterSpace(...).sample`), both compiled cost models are priced on the same draws, and
`kzlab.analysis.predict.decide.decide` counts, draw by draw, how often A is faster and what ratio A/B the draws
give, with what drives it. The predictions themselves are left as they are (their own draws, their `total_ms`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kzlab.analysis.predict.decide import Decision, decide
from kzlab.analysis.predict.draws import DEFAULT_DRAWS, ParameterSpace
from kzlab.errors import InvalidInputError


def _prediction(obj: Any, name: str) -> Any:
    """The Prediction of a placement (or the prediction itself), refused when it cannot be re-drawn."""
    pred = getattr(obj, "predicted", obj)
    if pred is None:
        raise InvalidInputError(f"{name}: not predicted (simulate with predict=...)")
    if isinstance(pred, Mapping) or getattr(pred, "costs", None) is None:
        raise InvalidInputError(f"{name}: a prediction read back from JSON has no cost model to draw again; "
                                "simulate it with predict=... in this process")
    return pred


def paired_decision(items: Mapping[str, Any], draws: int = DEFAULT_DRAWS, seed: int = 0,
                    target_ms: float | None = None) -> Decision:
    """Compare predicted placements (name -> Placement or Prediction) on one seeded set of paired draws.

    Raises InvalidInputError when they cannot share draws: a parameter with two different ranges (e.g. two CPU-only
    baselines), or a prediction without its cost model."""
    if len(items) < 2:
        raise InvalidInputError("a paired comparison needs two predicted placements")
    preds = {k: _prediction(v, k) for k, v in items.items()}
    space = ParameterSpace()
    for k, p in preds.items():
        used = p.costs.parameter_names()
        space.add([q for q in p.parameters if q.name in used], where=k)
    shared = space.sample(draws, seed)
    totals = {k: p.costs.evaluate(shared, parts=False)["total"] for k, p in preds.items()}
    dec = decide(totals, shared, target_ms)
    if not space.uncertain:
        dec.notes.append("no parameter is uncertain: every draw is the same device")
    return dec


__all__ = ["paired_decision"]
