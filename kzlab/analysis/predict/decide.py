"""Decisions under the uncertain parameters: paired comparisons, targets, what drives the spread, and which
device measurement would settle it.

Every configuration is priced on the same draws (`Draws`), so each draw is one possible device for all of them.
"A is faster than B" is the share of draws in which it is; the ratio A/B has a distribution of its own. The
parameters are ranked by how much of the decision's spread each explains alone (a first-order variance share,
estimated by binning the draws on that parameter's quantiles), and for each the expected spread once it is known
(the spread left inside a bin) and how often the decision would then be settled (P < 10 % or > 90 %).

`paired_decision` does this for predicted placements made apart (the Workbench's A/B): their own draws are left
as they are; the parameters both rest on are drawn once and both cost models are priced on those draws.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kzlab.analysis.predict.draws import DEFAULT_DRAWS, Draws, ParameterSpace, spread
from kzlab.errors import InvalidInputError

BINS = 20
SETTLED = 0.1  # a decision is settled when P(A faster) is below this or above 1 - this


@dataclass
class Decision:
    """What `decide` found: per configuration its range, pairs, targets, sensitivities, next measurements."""

    configs: dict[str, dict[str, Any]]
    pairs: list[dict[str, Any]]
    target: dict[str, float]
    target_ms: float | None
    sensitivity: list[dict[str, Any]]
    next_measurements: list[dict[str, Any]]
    decision: dict[str, Any]
    draws: int
    seed: int
    kind: str
    calibration: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = {"configs": self.configs, "pairs": self.pairs, "target": self.target, "target_ms": self.target_ms,
             "sensitivity": self.sensitivity, "next_measurements": self.next_measurements,
             "decision": self.decision, "draws": self.draws, "seed": self.seed, "draws_from": self.kind,
             "notes": list(self.notes)}
        if self.calibration is not None:
            d["calibration"] = self.calibration
        return d


def _bins(x: np.ndarray, bins: int = BINS) -> np.ndarray:
    """The quantile bin of every draw of `x` (equal counts)."""
    order = np.argsort(x, kind="stable")
    out = np.empty(x.size, dtype=np.int64)
    out[order] = np.arange(x.size) * bins // x.size
    return out


def variance_shares(y: np.ndarray, draws: Draws, names: list[str]) -> list[tuple[str, float]]:
    """(parameter, share of Var(y) that parameter explains alone), largest first."""
    var = float(np.var(y))
    out = []
    for name in names:
        b = _bins(draws.column(name))
        means = np.bincount(b, weights=y, minlength=BINS) / np.maximum(np.bincount(b, minlength=BINS), 1)
        counts = np.bincount(b, minlength=BINS)
        between = float(np.sum(counts * (means - y.mean()) ** 2) / y.size)
        out.append((name, min(max(between / var, 0.0), 1.0) if var > 0 else 0.0))
    return sorted(out, key=lambda r: -r[1])


def known_spread(y: np.ndarray, x: np.ndarray) -> tuple[float, float]:
    """(expected p10-p90 width of y once x is known, share of cases where y's sign is then settled)."""
    b = _bins(x)
    widths, settled = [], []
    for k in range(BINS):
        yk = y[b == k]
        if yk.size < 5:
            continue
        p10, p90 = np.percentile(yk, [10, 90])
        widths.append(p90 - p10)
        p = float(np.mean(yk < 0))
        settled.append(p < SETTLED or p > 1 - SETTLED)
    if not widths:  # too few draws to bin: nothing is learnt
        p10, p90 = np.percentile(y, [10, 90])
        p = float(np.mean(y < 0))
        return float(p90 - p10), float(p < SETTLED or p > 1 - SETTLED)
    return float(np.mean(widths)), float(np.mean(settled))


def decide(totals: dict[str, np.ndarray], draws: Draws, target_ms: float | None = None,
           extra: dict[str, dict[str, Any]] | None = None, baseline: str | set[str] | None = None) -> Decision:
    """Compare the configurations' `totals` (ms per draw, all on `draws`): ranges, pairs, targets, and the
    decision between the two changes with the lowest medians (the `baseline`, what runs today or was already
    measured, is compared in the pairs but is not a change to try), with what drives it."""
    names = list(totals)
    configs = {n: {"range": spread(t), **((extra or {}).get(n, {}))} for n, t in totals.items()}
    uncertain = [n for n in draws.names if draws.params[n].uncertain]
    pairs = []
    for a, b in itertools.combinations(names, 2):
        r = totals[a] / totals[b]
        rs = spread(r)
        y = np.log(r)
        top = variance_shares(y, draws, uncertain)[:3] if uncertain and np.var(y) > 0 else []
        pairs.append({"a": a, "b": b, "p_a_faster": float(np.mean(totals[a] < totals[b])),
                      "ratio": {k: rs[k] for k in ("p10", "p50", "p90")},
                      "sensitivity": [{"parameter": n, "share": s} for n, s in top]})
    target = {}
    if target_ms is not None:
        target = {n: float(np.mean(t <= target_ms)) for n, t in totals.items()}
    decision: dict[str, Any] = {}
    sens: list[dict[str, Any]] = []
    known = {baseline} if isinstance(baseline, str) else set(baseline or ())
    changes = [n for n in names if n not in known]
    if len(changes) < 2:
        changes = names
    if len(changes) >= 2:
        # the question: which change to try first; the contenders are the two with the lowest median
        a, b = sorted(changes, key=lambda n: float(np.median(totals[n])))[:2]
        y = np.log(totals[a] / totals[b])
        p = float(np.mean(y < 0))
        lo, hi = np.percentile(y, [10, 90])
        decision = {"a": a, "b": b, "p_a_faster": p, "log_ratio_p10_p90_width": float(hi - lo),
                    "settled": p < SETTLED or p > 1 - SETTLED}
        shares = variance_shares(y, draws, uncertain) if uncertain and np.var(y) > 0 else []
        for name, share in shares:
            after, settled = known_spread(y, draws.column(name))
            sens.append({"parameter": name, "share": share, "spread_after": after,
                         "spread_before": float(hi - lo), "p_settled_after": settled})
    return Decision(configs, pairs, target, target_ms, sens, [], decision, len(draws), draws.seed, draws.kind)


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
    space = ParameterSpace.shared_by(preds)
    shared = space.sample(draws, seed)
    totals = {k: p.costs.evaluate(shared, parts=False)["total"] for k, p in preds.items()}
    dec = decide(totals, shared, target_ms)
    if not space.uncertain:
        dec.notes.append("no parameter is uncertain: every draw is the same device")
    return dec
