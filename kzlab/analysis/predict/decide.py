"""Decisions under the uncertain parameters: paired comparisons, targets, what drives the spread, and which
device measurement would settle it.

Every configuration is priced on the same draws (`Draws`), so each draw is one possible device for all of them.
"A is faster than B" is the share of draws in which it is; the ratio A/B has a distribution of its own. The
parameters are ranked by how much of the decision's spread each explains alone (a first-order variance share,
estimated by binning the draws on that parameter's quantiles), and for each the expected spread once it is known
(the spread left inside a bin) and how often the decision would then be settled (P < 10 % or > 90 %).

`paired_decision` does this for predicted placements made apart (the Workbench's A/B): their own draws are left
as they are; the parameters both rest on are drawn once and both cost models are priced on those draws.

A probability is only as good as the draws behind it: when a calibration flagged a parameter (it contradicts
what has been measured in public, or the totals push it against a bound) and the decision's spread rests on it
(it explains the most, or at least UNSETTLING_SHARE, of the decision's variance), the decision is not settled
whatever P says, and the record names the parameters (`unsettled_by`).

Configurations may put different stages under the device's scheduler (`sched_stages`, one of them the whole
graph): their totals are still whole decodes, but a pair of them then differs in two things at once, the change
and the scope. Every pair says its scope (`scope`: same, different or against the CPU-only decode, with each
side's stages), and the notes say which pairs cross scopes.
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
#: a flagged parameter explaining at least this share of the decision's variance keeps it open
UNSETTLING_SHARE = 0.05
#: the flags that make a parameter's draws untrustworthy for a decision
UNSETTLING_FLAGS = ("contradicts_public", "at_bound")
#: what a configuration without a device scheduler is (the CPU-only decode)
CPU_ONLY = "none (the CPU-only decode)"
ALL_STAGES = "all"
#: how the note of a decision kept open by a flagged parameter begins
OPEN_NOTE = "not settled whatever P says:"


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

    def settle_against(self, flags: Any) -> None:
        """Judge `decision["settled"]` again against a calibration's flags (`apply_flags`): open, with the reason
        in the notes, when its spread rests on a flagged parameter."""
        apply_flags(self.decision, self.sensitivity, flags)
        self.notes = [n for n in self.notes if not n.startswith(OPEN_NOTE)]
        if self.decision.get("unsettled_by"):
            self.notes.append(f"{OPEN_NOTE} {self.decision['a']} before {self.decision['b']}: "
                              f"{self.decision['why_open']}")

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


def flagged_parameters(flags: Any) -> dict[str, list[str]]:
    """Parameter -> kinds from a calibration's flags (a list of flag dicts, or a mapping name -> kind(s)), keeping
    the kinds that make its draws untrustworthy (UNSETTLING_FLAGS)."""
    out: dict[str, list[str]] = {}
    if not flags:
        return out
    if isinstance(flags, Mapping):
        items = [(k, [v] if isinstance(v, str) else list(v)) for k, v in flags.items()]
    else:
        items = [(f.get("parameter"), [f.get("kind")]) for f in flags if isinstance(f, Mapping)]
    for name, kinds in items:
        keep = [k for k in kinds if k in UNSETTLING_FLAGS]
        if name and keep:
            out.setdefault(name, [])
            out[name] += [k for k in keep if k not in out[name]]
    return out


def apply_flags(decision: dict[str, Any], sensitivity: list[dict[str, Any]], flags: Any) -> dict[str, Any]:
    """Keep `decision` open where its spread rests on a flagged parameter: the top of `sensitivity`, or any with a
    share of at least UNSETTLING_SHARE. Sets `settled` False with `unsettled_by` (parameter, kinds, share) and
    `why_open`, and keeps what P alone said as `settled_by_p`; returns the decision."""
    if not decision:
        return decision
    flagged = flagged_parameters(flags)
    decision.setdefault("settled_by_p", bool(decision.get("settled")))
    rests = [s for i, s in enumerate(sensitivity)
             if s["parameter"] in flagged and (i == 0 or s["share"] >= UNSETTLING_SHARE)]
    if not rests:
        decision["unsettled_by"] = []
        decision["settled"] = decision["settled_by_p"]
        decision.pop("why_open", None)
        return decision
    decision["settled"] = False
    decision["unsettled_by"] = [{"parameter": s["parameter"], "kinds": flagged[s["parameter"]],
                                 "share": s["share"]} for s in rests]
    decision["why_open"] = (
        "its spread rests on " + ", ".join(f"{s['parameter']} ({s['share']:.2f} of the variance; flagged "
                                           f"{'/'.join(flagged[s['parameter']])})" for s in rests)
        + ": the calibration put a cost the model lacks on those parameters, so P is not to be taken at face value")
    return decision


def _scope(info: Mapping[str, Any]) -> str | list[str]:
    """A configuration's stages under the device's scheduler: a list, ALL_STAGES, or CPU_ONLY."""
    if str(info.get("profile", "")).split(" ")[0] == "cpu":
        return CPU_ONLY
    stages = info.get("sched_stages")
    return list(stages) if stages else ALL_STAGES


def pair_scope(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Whether two configurations put the same stages under the device's scheduler: `same`, `different`, or
    `cpu_only` (one is the CPU-only decode, the baseline every change is measured against), with each side's."""
    sa, sb = _scope(a), _scope(b)
    kind = "cpu_only" if CPU_ONLY in (sa, sb) else ("same" if sa == sb else "different")
    return {"kind": kind, "a_stages": sa, "b_stages": sb}


def _scope_text(stages: str | list[str]) -> str:
    return stages if isinstance(stages, str) else "+".join(stages)


def scope_note(crossed: list[dict[str, Any]]) -> str:
    """The note for pairs whose configurations put different stages under the device's scheduler."""
    by: dict[str, list[str]] = {}
    for p in crossed:
        s = p["scope"]
        key = f"{_scope_text(s['a_stages'])} vs {_scope_text(s['b_stages'])}"
        by.setdefault(key, []).append(f"{p['a']} vs {p['b']}")
    parts = [f"{k}: {', '.join(v)}" for k, v in by.items()]
    return (f"{len(crossed)} pair(s) compare configurations with different stages under the device's scheduler ("
            + "; ".join(parts) + "): each such ratio mixes the change with the scope; compare them at one scope "
            "(the same stages=... on both) to see the change alone")


def decide(totals: dict[str, np.ndarray], draws: Draws, target_ms: float | None = None,
           extra: dict[str, dict[str, Any]] | None = None, baseline: str | set[str] | None = None,
           exclude: set[str] | frozenset[str] = frozenset(), flags: Any = None) -> Decision:
    """Compare the configurations' `totals` (ms per draw, all on `draws`): ranges, pairs, targets, and the
    decision between the two changes with the lowest medians (the `baseline`, what runs today or was already
    measured, is compared in the pairs but is not a change to try), with what drives it. `exclude`: the
    configurations that compute wrong values, compared in the pairs but never a contender.

    `flags`: a calibration's flags (`Posterior.flags`, or parameter -> kind): a decision whose spread rests on a
    flagged parameter is not settled (`apply_flags`). `extra[name]["sched_stages"]` (with its `profile`) gives
    every pair its scope."""
    names = list(totals)
    configs = {n: {"range": spread(t), **((extra or {}).get(n, {}))} for n, t in totals.items()}
    uncertain = [n for n in draws.names if draws.params[n].uncertain]
    scoped = extra is not None and any("sched_stages" in (extra.get(n) or {}) for n in names)
    pairs = []
    crossed = []
    for a, b in itertools.combinations(names, 2):
        r = totals[a] / totals[b]
        rs = spread(r)
        y = np.log(r)
        top = variance_shares(y, draws, uncertain)[:3] if uncertain and np.var(y) > 0 else []
        pair = {"a": a, "b": b, "p_a_faster": float(np.mean(totals[a] < totals[b])),
                "ratio": {k: rs[k] for k in ("p10", "p50", "p90")},
                "sensitivity": [{"parameter": n, "share": s} for n, s in top]}
        if scoped:
            pair["scope"] = pair_scope(configs[a], configs[b])
            if pair["scope"]["kind"] == "different":
                crossed.append(pair)
        pairs.append(pair)
    target = {}
    if target_ms is not None:
        target = {n: float(np.mean(t <= target_ms)) for n, t in totals.items()}
    decision: dict[str, Any] = {}
    sens: list[dict[str, Any]] = []
    known = {baseline} if isinstance(baseline, str) else set(baseline or ())
    changes = [n for n in names if n not in known and n not in exclude]
    if len(changes) < 2:
        changes = [n for n in names if n not in exclude]
    if len(changes) >= 2:
        # the question: which change to try first; the contenders are the two with the lowest median
        a, b = sorted(changes, key=lambda n: float(np.median(totals[n])))[:2]
        y = np.log(totals[a] / totals[b])
        p = float(np.mean(y < 0))
        lo, hi = np.percentile(y, [10, 90])
        decision = {"a": a, "b": b, "p_a_faster": p, "log_ratio_p10_p90_width": float(hi - lo),
                    "settled": p < SETTLED or p > 1 - SETTLED}
        if scoped:
            decision["scope"] = pair_scope(configs[a], configs[b])
        shares = variance_shares(y, draws, uncertain) if uncertain and np.var(y) > 0 else []
        for name, share in shares:
            after, settled = known_spread(y, draws.column(name))
            sens.append({"parameter": name, "share": share, "spread_after": after,
                         "spread_before": float(hi - lo), "p_settled_after": settled})
    dec = Decision(configs, pairs, target, target_ms, sens, [], decision, len(draws), draws.seed, draws.kind)
    if crossed:
        dec.notes.append(scope_note(crossed))
    if decision:
        dec.settle_against(flags)
    return dec


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
