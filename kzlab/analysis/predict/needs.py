"""What reaching a target would take, per configuration: the value one parameter must reach, or that none does,
and which ops the device refuses that keep the CPU's part above the target.

A configuration meets the target when P(total <= target) >= GOAL on the draws it was priced on. For each
parameter it rests on, the others stay drawn and that one is set to a value across its range: where the
probability crosses GOAL inside the range, the answer is that value ("HTP.gflops.MUL_MAT.F16.hmx >= 3200
GFLOP/s", "HTP.sync_us <= 120 us"); where it does not, no value of that parameter alone, within its range, does
it. The CPU's nodes set a floor no device parameter moves: when their time alone (p50) exceeds the target, the
ops the device refuses on that path are what would have to run on the device (a `+OP` what-if prices that).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from kzlab.analysis.predict.costs import CostModel, cpu_node_factors
from kzlab.analysis.predict.draws import Draws

GOAL = 0.5
GRID = 24  # values tried across a range (log-spaced), then refined by bisection
REFINE = 10
MAX_DRAWS = 400  # draws used per try: enough for a probability near GOAL to +-0.05


def _p_within(cost: CostModel, draws: Draws, col: int | None, value: float | None, target: float) -> float:
    theta = draws.theta
    if col is not None:
        theta = theta.copy()
        theta[:, col] = value
    d = Draws(draws.names, theta, draws.seed, draws.params)
    return float(np.mean(cost.evaluate(d, parts=False)["total"] <= target))


def _threshold(cost: CostModel, draws: Draws, col: int, low: float, high: float, target: float,
               rising: bool) -> float:
    """The value (log-bisected) where P(total <= target) crosses GOAL, P rising with the value when `rising`."""
    lo, hi = np.log(low), np.log(high)
    for _ in range(REFINE):
        mid = 0.5 * (lo + hi)
        ok = _p_within(cost, draws, col, float(np.exp(mid)), target) >= GOAL
        if ok == rising:
            hi = mid
        else:
            lo = mid
    return float(np.exp(hi if rising else lo))


def one_parameter(cost: CostModel, draws: Draws, target: float) -> list[dict[str, Any]]:
    """For each uncertain parameter the cost model reads: the value it must reach alone (the others drawn) for
    P(total <= target) >= GOAL, or that none within its range does it."""
    out = []
    used = cost.parameter_names()
    for name in draws.names:
        p = draws.params[name]
        if name not in used or not p.uncertain:
            continue
        col = draws.names.index(name)
        grid = np.exp(np.linspace(np.log(p.low), np.log(p.high), GRID))
        probs = [_p_within(cost, draws, col, float(v), target) for v in grid]
        rising = probs[-1] >= probs[0]
        best = max(probs)
        row: dict[str, Any] = {"parameter": name, "unit": p.unit, "low": p.low, "high": p.high,
                               "p_at_low": probs[0], "p_at_high": probs[-1]}
        if best < GOAL:
            row.update(reaches=False, text=f"no value of {name} within [{p.low:.4g}, {p.high:.4g}] {p.unit} alone "
                       f"(P at most {best:.2f})")
        elif min(probs) >= GOAL:
            continue  # the target holds whatever this parameter is
        else:
            v = _threshold(cost, draws, col, p.low, p.high, target, rising)
            op = ">=" if rising else "<="
            where = float((np.log(v) - np.log(p.low)) / (np.log(p.high) - np.log(p.low)))
            row.update(reaches=True, op=op, value=v, position_in_range=where,
                       text=f"{name} {op} {v:.4g} {p.unit} (its range {p.low:.4g}-{p.high:.4g})")
            if p.public is not None:
                inside = p.public[0] <= v <= p.public[1]
                row["public"] = list(p.public)
                row["text"] += (f"; measured in public: {p.public[0]:.4g}-{p.public[1]:.4g}"
                                + ("" if inside else (" (beyond it)" if (v > p.public[1]) == rising else
                                                      " (the public figures already do it)")))
        out.append(row)
    return sorted(out, key=lambda r: (not r.get("reaches", False), -max(r["p_at_low"], r["p_at_high"])))


def best_case(cost: CostModel, draws: Draws) -> float:
    """The total with every parameter the model reads at the bound of its range that makes it fastest (each
    parameter's direction taken with the others at their stated values): what no draw can beat."""
    used = cost.parameter_names()
    point = np.array([[draws.params[n].value for n in draws.names]])
    for j, name in enumerate(draws.names):
        p = draws.params[name]
        if name not in used or not p.uncertain:
            continue
        ends = np.repeat(np.array([[draws.params[n].value for n in draws.names]]), 2, axis=0)
        ends[:, j] = (p.low, p.high)
        t = cost.evaluate(Draws(draws.names, ends, draws.seed, draws.params), parts=False)["total"]
        point[0, j] = p.low if t[0] <= t[1] else p.high
    return float(cost.evaluate(Draws(draws.names, point, draws.seed, draws.params), parts=False)["total"][0])


def cpu_floor(cost: CostModel, draws: Draws, nodes: list[Any], device: str | None) -> tuple[float, list[dict]]:
    """(p50 ms of the CPU's nodes alone, the ops on the CPU that `device` refused, by CPU time at the stated
    values, largest first)."""
    if cost.cpu_ms:
        col = {n: i for i, n in enumerate(draws.names)}
        s, k, j = cost.cpu.factors(lambda n: draws.theta[:, col[n]], np.ones(len(draws)))
        f = cpu_node_factors(np.asarray(cost.cpu_mm, dtype=bool), np.asarray(cost.cpu_libm, dtype=bool), k, j)
        floor = float(np.median(s * (f * np.asarray(cost.cpu_ms)[None, :]).sum(axis=1)))
    else:
        floor = 0.0
    by_op: dict[str, dict[str, Any]] = defaultdict(lambda: {"nodes": 0, "reasons": []})
    for n in nodes:
        backend = n["backend"] if isinstance(n, dict) else n.backend
        refused = (n.get("refused") if isinstance(n, dict) else n.refused) or {}
        if device is None or backend == device or device not in refused:
            continue
        if refused[device].startswith("stages:"):  # left off the scheduler by choice, not refused by the device
            continue
        op = n["op"] if isinstance(n, dict) else n.op
        e = by_op[op]
        e["nodes"] += 1
        why = refused[device]
        if why not in e["reasons"] and len(e["reasons"]) < 2:
            e["reasons"].append(why)
    return floor, [{"op": op, **v} for op, v in by_op.items()]


def needs(cost: CostModel, draws: Draws, target: float, nodes: list[Any], rows: list[dict[str, Any]],
          device: str | None) -> dict[str, Any]:
    """What this configuration needs to reach `target` with P >= GOAL (the JSON `needs`)."""
    if len(draws) > MAX_DRAWS:
        draws = draws.select(np.arange(MAX_DRAWS), draws.kind)
    p_now = _p_within(cost, draws, None, None, target)
    floor, refused = cpu_floor(cost, draws, nodes, device)
    cpu_ms: dict[str, float] = defaultdict(float)
    for r in rows:
        if r["backend"].lower() == "cpu":
            cpu_ms[r["op"]] += r["ms"]
    for e in refused:
        e["cpu_ms"] = cpu_ms.get(e["op"], 0.0)
    refused.sort(key=lambda e: -e["cpu_ms"])
    outside = 0.0  # the CPU time of the stages left off the device's scheduler (`stages=`), at the stated values
    for n, r in zip(nodes, rows, strict=False):
        why = (n.get("refused") if isinstance(n, dict) else n.refused) or {}
        if device is not None and str(why.get(device, "")).startswith("stages:"):
            outside += r["ms"]
    out: dict[str, Any] = {"target_ms": target, "goal": GOAL, "p_now": p_now, "met": p_now >= GOAL,
                           "cpu_floor_ms": floor, "outside_stages_ms": outside}
    if p_now >= GOAL:
        out["text"] = f"already P = {p_now:.2f} of <= {target:g} ms"
        return out
    out["best_case_ms"] = best = best_case(cost, draws)
    singles = one_parameter(cost, draws, target)
    reach = [r for r in singles if r.get("reaches")]
    out["one_parameter"] = reach
    out["not_alone"] = [r["parameter"] for r in singles if not r.get("reaches")]
    out["no_single_parameter"] = not reach
    out["refused_on_cpu_path"] = refused[:8]
    parts = []
    if reach:
        parts.append("one of: " + "; ".join(r["text"] for r in reach[:4]))
    else:
        parts.append("no single parameter within its range reaches it")
    parts.append(f"with every parameter at its most favourable bound: {best:.0f} ms"
                 + (" (the target lies beyond every range)" if best > target else ""))
    if outside > 0:
        parts.append(f"the stages left off the scheduler take {outside:.0f} ms on the CPU (at the stated values)")
    if floor > target:
        ops = ", ".join(f"{e['op']} ({e['nodes']} nodes, {e['cpu_ms']:.0f} ms on the CPU)" for e in refused[:5])
        parts.append(f"the CPU's part alone takes {floor:.0f} ms (p50) > {target:g} ms: ops the device refuses "
                     f"would have to run on it{': ' + ops if ops else ''}")
    elif refused:
        parts.append(f"the CPU's part alone takes {floor:.0f} ms (p50); largest refused on the CPU path: " + ", ".join(
            f"{e['op']} ({e['cpu_ms']:.0f} ms)" for e in refused[:3]))
    out["text"] = "; ".join(parts)
    return out
