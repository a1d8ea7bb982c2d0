"""Calibration as inference: what measured device totals say about the parameters, jointly, within their ranges.

The ranges are the prior. Many draws from it are priced for every measured configuration (vectorised); each
draw is weighted by how well it reproduces the measured totals (a log-normal likelihood with the measurement's
run-to-run spread, plus the model's discrepancy between configurations when it is estimated: leave-one-out over
the measured totals), and the posterior draws are resampled from those weights. Then:

- a parameter whose posterior spread is well inside its prior's was *identified* by the totals; one whose spread
  stayed was not (`prior_only`): the totals cannot tell it apart from the others;
- a parameter the totals push against a bound of its plausible range is *flagged*, with how far past the bound
  the totals would put it (the inference rerun with that bound widened) and which cost the model may lack;
- a parameter the totals put far from what has been measured in public is *flagged* as contradicting it
  (`contradicts_public`): a cost the model lacks put on it, never a finding. A flagged parameter is neither
  identified nor left at its prior: the totals did move it, to where it cannot be taken at face value, so it is
  listed apart (`flagged`, with the kinds of its flags) and every decision resting on it stays open;
- predictions of the other configurations are made on the posterior draws, so they keep the spread that the
  totals could not remove.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kzlab.analysis.predict.costs import CostModel
from kzlab.analysis.predict.draws import Draws, ParameterSpace, spread
from kzlab.analysis.predict.parameters import MEASURED_SPREAD, Parameter
from kzlab.errors import InvalidInputError

IDENTIFIED = 0.5  # posterior p10-p90 width (log) below this share of the prior's: identified
MIN_ESS = 50
EDGE = 0.05  # the outer share of a log range counted as "at its bound"
WIDEN = 30.0  # how far past a bound the rerun lets a flagged parameter go

#: what a parameter pushed out of its range may stand for: the cost the model lacks or misattributes
MISSING_COST = {
    "sync_us": "a per-split cost larger than a queue round trip: a FastRPC call or session work per graph, or "
               "cache maintenance of the split's buffers counted here as dispatch",
    "launch_us": "a per-op cost larger than a queued dispatch: ops each waiting for the DSP, or per-op "
                 "repacking of an operand",
    "copy_gbs": "more bytes crossing than the scheduler's split inputs: weights re-copied or repacked per run, "
                "or copies through a buffer that is not host-visible",
    "cache_gbs": "cache maintenance by address slower than a dirty line's write-back allows, or over more bytes than "
                 "the ops' small tensors (inputs carried over from an earlier split)",
    "l2flush_us": "whole-cache flushes dearer than a full L2 written back, or more of them than the tensors above "
                  "the threshold and the batches give",
    "map_us": "a first use that maps more than the device's buffers (weights repacked, sessions opened)",
    "bandwidth_gbs": "ops the HTP runs slowly in F32 (qf32 conversions) or on a scalar path, counted as "
                     "memory traffic",
    "gflops.MUL_MAT": "products on a slower kernel than their path says (HVX or the CPU instead of HMX, F32 "
                      "conversions per call)",
    "gflops": "the op on a slower path than its class's (unaligned rows, F32 conversions, a scalar fallback)",
    "spin_ms": "worker threads that keep the cores longer than they spin (a thread pool of another library)",
    "contention": "more threads than cores during the CPU splits (other processes, oversubscription)",
    "baseline_ms": "a CPU-only total measured under other conditions (threads, clocks, thermal state)",
    "matmul_skew": "the device CPU's products differ from this machine's by more than the range allows "
                   "(another kernel: i8mm, KleidiAI)",
    "measured_ops": "ops that run slower in a decode than when timed alone (cold caches, contention)",
    "cpu_relative": "a server whose CPU backend runs the graph unlike the host CPU's profile (another thread count, "
                    "other cores, another ggml build)",
}


#: costs a model can lack that make a device rate look slower (or a fixed cost larger) than measured in public:
#: what a calibration that contradicts a public figure may stand for, in the order worth checking
PUBLIC_CANDIDATES = {
    "gflops.MUL_MAT": [
        "operands converted and re-tiled per call beyond the bytes the roofline counts (F32 activations to F16, "
        "weights to HMX tiles)",
        "products the matrix unit refuses (too few rows, alignment) running on HVX or on the CPU",
        "a wake-up or queue round trip per op batch larger than launch_us / sync_us allow",
        "CPU ops reading weights or activations from the host-mapped HTP buffer (uncached)",
        "more bytes crossing between CPU and NPU than the split inputs (weights re-copied), or cache maintenance "
        "beyond the per-op flushes the model prices",
    ],
    "gflops": [
        "the op on a slower path than the public figure's (unaligned rows, F32 conversions, a scalar fallback)",
        "a per-op cost larger than launch_us allows",
        "bytes crossing between CPU and NPU that the model does not count",
    ],
    "bandwidth_gbs": [
        "the op on the DDR path or unaligned rows where the public figure ran from VTCM",
        "a per-op cost larger than launch_us allows, for small ops",
        "copies over more bytes than the split inputs, or cache maintenance beyond the per-op flushes priced",
    ],
    "launch_us": [
        "ops each waiting for the DSP instead of running as a batch",
        "per-op repacking or conversion of an operand",
    ],
}
PUBLIC_COMMAND = ("GGML_HEXAGON_PROFILE=1 GGML_SCHED_DEBUG=2 <the measured decode> 2> htp-profile.log; then "
                  "`--ops htp-profile.log`: each op's own time on the HTP, which totals cannot give, tells a slow "
                  "rate from a cost the model lacks")


def public_candidates(name: str) -> list[str]:
    for key in sorted(PUBLIC_CANDIDATES, key=len, reverse=True):
        if key in name:
            return list(PUBLIC_CANDIDATES[key])
    return [missing_cost(name)]


#: how far (as a factor) a posterior median may lie from a public interval before it contradicts it, when its
#: [p10, p90] still touches it
PUBLIC_FACTOR = 10.0


def public_conflict(name: str, p: Parameter, q10: float, q50: float, q90: float) -> dict[str, Any] | None:
    """A flag when a posterior contradicts what has been measured in public: its [p10, p90] lies outside the
    parameter's public interval, or its median lies PUBLIC_FACTOR times or more away from it."""
    if p.public is None:
        return None
    lo, hi = p.public
    if q50 < lo:
        side, factor = "below", lo / q50
    elif q50 > hi:
        side, factor = "above", q50 / hi
    else:
        return None
    if not (q90 < lo or q10 > hi or factor >= PUBLIC_FACTOR):
        return None
    cands = public_candidates(name)
    msg = (f"{name} contradicts public measurements: the totals put it at p50 {q50:.4g} {p.unit} (p10 {q10:.4g}, "
           f"p90 {q90:.4g}), {factor:.3g}x {side} what has been measured in public ({lo:.4g}-{hi:.4g} {p.unit}: "
           f"{p.public_source}). Not a finding about the device: the model likely lacks a cost that the totals "
           "put on this parameter; candidates: " + "; ".join(cands) + f". Tells them apart: {PUBLIC_COMMAND}")
    return {"parameter": name, "kind": "contradicts_public", "public": [lo, hi], "public_source": p.public_source,
            "posterior": {"p10": q10, "p50": q50, "p90": q90}, "side": side, "factor": factor,
            "candidates": cands, "command": PUBLIC_COMMAND, "message": msg}


#: what an identification from totals alone rests on
CAVEAT = ("a parameter identified from totals alone carries any cost the model lacks; the next measurement that "
          "times it directly confirms it")


def missing_cost(name: str) -> str:
    for key, text in MISSING_COST.items():
        if key in name:
            return text
    return "a cost the model does not have"


@dataclass
class Posterior:
    """Posterior draws and what the totals identified, left at the prior and flagged."""

    draws: Draws
    measured: dict[str, float]
    noise: float
    ess: float
    reproduced: dict[str, dict[str, float]]
    parameters: list[dict[str, Any]]
    flags: list[dict[str, Any]] = field(default_factory=list)
    #: each measurement's noise in the likelihood (its own spread with the discrepancy added)
    noises: dict[str, float] = field(default_factory=dict)
    #: the model's error between configurations (relative, one sigma): 0, given, or estimated by leave-one-out
    discrepancy: float = 0.0
    leave_one_out: dict[str, float] = field(default_factory=dict)

    def predict(self, model: CostModel, seed: int | None = None) -> np.ndarray:
        """Totals (ms) of another configuration on the posterior draws, each with the model's discrepancy drawn
        (log-normal, seeded): what the totals could not pin down and what the model misses between
        configurations."""
        total = model.evaluate(self.draws, parts=False)["total"]
        if self.discrepancy <= 0:
            return total
        rng = np.random.default_rng((self.draws.seed if seed is None else seed) + 2)
        return total * np.exp(rng.normal(0.0, self.discrepancy, total.shape[0]))

    @property
    def flagged(self) -> dict[str, list[str]]:
        """Parameter -> the kinds of its flags (`contradicts_public`, `at_bound`), in the order flagged."""
        out: dict[str, list[str]] = {}
        for f in self.flags:
            if f.get("parameter"):
                kinds = out.setdefault(f["parameter"], [])
                if f.get("kind") not in kinds:
                    kinds.append(f.get("kind"))
        return out

    @property
    def identified(self) -> list[str]:
        """Parameters the totals narrowed well inside their prior, and not flagged."""
        flagged = self.flagged
        return [p["parameter"] for p in self.parameters
                if p["verdict"] == "identified" and p["parameter"] not in flagged]

    @property
    def contradicts_public(self) -> list[str]:
        """Parameters the totals put where what has been measured in public says they cannot be."""
        return [k for k, kinds in self.flagged.items() if "contradicts_public" in kinds]

    @property
    def prior_only(self) -> list[str]:
        """Parameters the totals left (about) where the prior had them: neither identified nor flagged."""
        flagged = self.flagged
        return [p["parameter"] for p in self.parameters
                if p["verdict"] != "identified" and p["parameter"] not in flagged
                and p["verdict"] != "contradicts public"]

    def status(self, name: str) -> str:
        """One word for a parameter: identified, contradicts public, at bound, unreliable or prior."""
        kinds = self.flagged.get(name, [])
        if "contradicts_public" in kinds:
            return "contradicts public"
        if "at_bound" in kinds:
            return "at bound"
        verdict = next((p["verdict"] for p in self.parameters if p["parameter"] == name), "prior")
        return verdict if verdict in ("identified", "unreliable") else "prior"

    def to_dict(self) -> dict[str, Any]:
        flagged = self.flagged
        params = [{**p, "flags": flagged.get(p["parameter"], []), "status": self.status(p["parameter"])}
                  for p in self.parameters]
        return {"identified": self.identified, "prior_only": self.prior_only,
                "contradicts_public": self.contradicts_public, "flagged": flagged, "flags": list(self.flags),
                "measured": dict(self.measured), "noise": self.noise, "noises": dict(self.noises),
                "discrepancy": self.discrepancy, "leave_one_out": dict(self.leave_one_out),
                "effective_draws": self.ess,
                "reproduced": self.reproduced, "parameters": params,
                "notes": [CAVEAT] if self.identified else []}

    def summary(self) -> str:
        lines = [f"calibrated on {', '.join(f'{k}={v:g} ms' for k, v in self.measured.items())} "
                 f"(+-{self.noise:.0%} each; {self.ess:.0f} effective prior draws)"]
        if self.discrepancy > 0:
            lines.append(f"  model discrepancy +-{self.discrepancy:.0%} between configurations"
                         + (" (leave-one-out: " + ", ".join(f"{k} {np.expm1(v):+.0%}" for k, v in
                                                             self.leave_one_out.items()) + ")"
                            if self.leave_one_out else "") + ", in the noise and in every prediction")
        for k, r in self.reproduced.items():
            lines.append(f"  {k}: measured {r['measured']:.0f} ms, reproduced p50 {r['p50']:.0f} ms "
                         f"(p10 {r['p10']:.0f}, p90 {r['p90']:.0f})")
        flagged = self.flagged
        for p in self.parameters:
            kinds = flagged.get(p["parameter"])
            mark = f" [flagged: {', '.join(kinds)}]" if kinds else ""
            lines.append(f"  {p['parameter']}: {p['verdict']}{mark}, prior [{p['low']:.4g} .. {p['high']:.4g}] -> "
                         f"p10 {p['p10']:.4g} p50 {p['p50']:.4g} p90 {p['p90']:.4g} (spread x{p['shrink']:.2f})")
        lines.append(f"  identified: {', '.join(self.identified) or 'none'}; flagged (neither identified nor at their "
                     f"prior): {', '.join(flagged) or 'none'}; left at their prior: {len(self.prior_only)}")
        lines += [f"  FLAG: {f['message']}" for f in self.flags]
        if self.identified:
            lines.append(f"  note: {CAVEAT}")
        return "\n".join(lines)


def _weights(totals: dict[str, np.ndarray], measured: dict[str, float], noise: dict[str, float]) -> np.ndarray:
    ll = np.zeros(next(iter(totals.values())).shape[0])
    for k, m in measured.items():
        ll += -0.5 * ((np.log(totals[k]) - np.log(m)) / noise[k]) ** 2
    w = np.exp(ll - ll.max())
    return w / w.sum()


def _resample(w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Systematic resampling: `n` row indices drawn in proportion to `w`."""
    u = (rng.uniform() + np.arange(n)) / n
    return np.minimum(np.searchsorted(np.cumsum(w), u), w.size - 1)


def split_key(key: str) -> tuple[str, str]:
    """A measurement's key: `CONFIG` (a whole decode) or `CONFIG:STAGE` (the stages named so: a stage or a prefix
    of stage names, as `decoder` takes `decoder.0`, `decoder.1`, ...)."""
    config, _, stage = key.partition(":")
    return config, stage


def stage_columns(model: CostModel, stage: str, key: str) -> list[int]:
    """The columns of `model`'s per-stage times that a measurement of `stage` covers (refused when none)."""
    cols = [i for i, s in enumerate(model.stages) if s == stage or s.startswith(stage + ".")]
    if not cols:
        raise InvalidInputError(f"measured {key}: {stage!r} is no stage of that configuration (its stages: "
                                f"{', '.join(model.stages)}; a prefix takes all of its kind)")
    return cols


def _price(models: dict[str, CostModel], measured: dict[str, float], draws: Draws) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    parts: dict[str, dict[str, np.ndarray]] = {}
    for k in measured:
        config, stage = split_key(k)
        if not stage:
            out[k] = models[config].evaluate(draws, parts=False)["total"]
            continue
        if config not in parts:
            parts[config] = models[config].evaluate(draws, parts=True)
        out[k] = parts[config]["by_stage"][:, stage_columns(models[config], stage, k)].sum(axis=1)
    return out


def _noises(noise: float | dict[str, float], measured: dict[str, float]) -> dict[str, float]:
    """Each measurement's relative spread (one sigma): one for all, or one per configuration."""
    per = noise if isinstance(noise, dict) else {k: noise for k in measured}
    out = {}
    for k in measured:
        v = per.get(k, MEASURED_SPREAD)
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1:
            raise InvalidInputError(f"noise of {k}: {v!r}; expected a relative spread between 0 and 1")
        out[k] = float(v)
    return out


def leave_one_out(models: dict[str, CostModel], space: ParameterSpace, measured: dict[str, float],
                  noise: dict[str, float], n: int, seed: int, groups: dict[str, str] | None = None) -> dict[str, float]:
    """For each measurement, the log error of its value predicted (posterior p50) from a calibration on the other
    configurations alone: how far the model carries what some configurations say to another one. A
    configuration is left out whole (`groups`: measurement -> configuration; default the name before any
    `:STAGE`), so that a stage or another frame count of the same configuration does not stand in for it."""
    groups = groups or {k: split_key(k)[0] for k in measured}
    missing = [k for k in measured if k not in groups]
    if missing:
        raise InvalidInputError(f"leave-one-out groups name no configuration for {', '.join(missing)}")
    out = {}
    for g in dict.fromkeys(groups[k] for k in measured):
        left = [k for k in measured if groups[k] == g]
        rest = {j: v for j, v in measured.items() if groups[j] != g}
        post = infer(models, space, rest, n, seed, {j: noise[j] for j in rest}, flag_bounds=False)
        priced = _price(models, {k: measured[k] for k in left}, post.draws)
        for k in left:
            out[k] = float(np.log(measured[k] / float(np.median(priced[k]))))
    return out


def infer(models: dict[str, CostModel], space: ParameterSpace, measured: dict[str, float], n: int = 1000,
          seed: int = 0, noise: float | dict[str, float] = MEASURED_SPREAD, prior_draws: int | None = None,
          flag_bounds: bool = True, discrepancy: str | float | None = None,
          groups: dict[str, str] | None = None) -> Posterior:
    """Posterior draws of `space` given `measured` totals (config name -> ms) of the `models` (config name ->
    CostModel). `noise`: the measurements' relative spread (one sigma), one for all or per configuration (e.g.
    observed over each measurement's runs).

    `discrepancy`: the model's own error between configurations (relative, one sigma), added to every
    measurement's noise in the likelihood and to every prediction made on the posterior (`Posterior.predict`).
    "loo" estimates it from the data: with measurements of two or more configurations, each configuration's are
    predicted from a calibration on the others alone (leave-one-out; `groups` maps a measurement to its
    configuration, by default the name before `:STAGE`) and the discrepancy is the root mean square of those log
    errors. None: 0."""
    for k, v in measured.items():
        config, stage = split_key(k)
        if config not in models:
            raise InvalidInputError(f"measured {k}={v}: no configuration of that name ({', '.join(models)})")
        if stage:
            stage_columns(models[config], stage, k)
        if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v) or v <= 0:
            raise InvalidInputError(f"measured total {k}={v!r}: expected a time in ms > 0")
    noises = _noises(noise, measured)
    loo: dict[str, float] = {}
    if discrepancy == "loo":
        names = {(groups or {}).get(k, split_key(k)[0]) for k in measured}
        if len(names) < 2:
            raise InvalidInputError("discrepancy='loo' needs measurements of two or more configurations (one is "
                                    "left out)")
        loo = leave_one_out(models, space, measured, noises, n, seed, groups)
        disc = float(np.sqrt(np.mean(np.square(list(loo.values())))))
    elif discrepancy is None:
        disc = 0.0
    elif isinstance(discrepancy, int | float) and not isinstance(discrepancy, bool) and 0 <= discrepancy < 5:
        disc = float(discrepancy)
    else:
        raise InvalidInputError(f"discrepancy={discrepancy!r}: expected None, 'loo' or a relative error >= 0")
    noises = {k: float(np.hypot(v, disc)) for k, v in noises.items()}
    n_prior = prior_draws or max(20_000, 20 * n)
    prior = space.sample(n_prior, seed)
    totals = _price(models, measured, prior)
    w = _weights(totals, measured, noises)
    ess = float(1.0 / np.sum(w ** 2))
    if ess < MIN_ESS and prior_draws is None:  # the measurements sit in a thin part of the prior: draw more
        prior = space.sample(n_prior * 10, seed)
        totals = _price(models, measured, prior)
        w = _weights(totals, measured, noises)
        ess = float(1.0 / np.sum(w ** 2))
    rng = np.random.default_rng(seed + 1)
    rows = _resample(w, n, rng)
    post = prior.select(rows, "posterior (" + ", ".join(f"{k}={v:g} ms" for k, v in measured.items()) + ")")
    reproduced = {}
    for k, m in measured.items():
        s = spread(totals[k][rows])
        reproduced[k] = {"measured": float(m), **{q: s[q] for q in ("p10", "p50", "p90")},
                         "prior_min": float(totals[k].min()), "prior_max": float(totals[k].max())}
    params = []
    public_flags: list[dict[str, Any]] = []
    for name in space.uncertain:
        p = space.params[name]
        lp, hp = np.log(p.low), np.log(p.high)
        x = np.log(post.column(name))
        q10, q50, q90 = np.percentile(x, [10, 50, 90])
        q5, q95 = np.percentile(x, [5, 95])
        shrink = float((q90 - q10) / (0.8 * (hp - lp)))
        verdict = "identified" if shrink < IDENTIFIED else ("narrowed" if shrink < 0.8 else "prior")
        conflict = public_conflict(name, p, *(float(np.exp(q)) for q in (q10, q50, q90)))
        if conflict is not None and verdict != "prior":  # never "identified" against public measurements
            verdict = "contradicts public"
            public_flags.append(conflict)
        if ess < MIN_ESS:  # a handful of draws: their spread says nothing about what the totals identify
            verdict = "unreliable"
        at_low = float(np.mean(x < lp + EDGE * (hp - lp)))
        at_high = float(np.mean(x > hp - EDGE * (hp - lp)))
        params.append({"parameter": name, "verdict": verdict, "value": p.value, "low": p.low, "high": p.high,
                       "public": list(p.public) if p.public is not None else None,
                       "p10": float(np.exp(q10)), "p50": float(np.exp(q50)), "p90": float(np.exp(q90)),
                       "range_low": float(np.exp(q5)), "range_high": float(np.exp(q95)), "shrink": shrink,
                       "at_low": at_low, "at_high": at_high})
    flags = []
    for k, r in reproduced.items():
        if not r["prior_min"] <= r["measured"] <= r["prior_max"]:
            flags.append({"parameter": None, "kind": "outside_prior", "public": None, "config": k, "message":
                          f"{k}: the measured {r['measured']:.0f} ms lies outside everything the ranges allow "
                          f"({r['prior_min']:.0f}..{r['prior_max']:.0f} ms): the model lacks a cost, or a range "
                          "is wrong"})
    if ess < MIN_ESS:
        flags.append({"parameter": None, "kind": "few_draws", "public": None, "config": None, "message":
                      f"only {ess:.0f} effective draws reproduce the totals: they sit at the edge of the ranges"})
    if ess >= MIN_ESS:
        flags += public_flags
    if flag_bounds:
        for p in params:
            side = "low" if p["at_low"] > 5 * EDGE else ("high" if p["at_high"] > 5 * EDGE else None)
            if side is None:
                continue
            flags.append(_bound_flag(models, space, measured, p, side, n, seed, noises))
    shown = max(noises.values()) if noises else float(MEASURED_SPREAD)
    return Posterior(post, dict(measured), shown, ess, reproduced, params, flags, noises=noises,
                     discrepancy=disc, leave_one_out=loo)


def _bound_flag(models: dict[str, CostModel], space: ParameterSpace, measured: dict[str, float], p: dict[str, Any],
                side: str, n: int, seed: int, noise: dict[str, float]) -> dict[str, Any]:
    """A flag for a parameter pushed against a bound: rerun with that bound widened and say how far it goes."""
    name = p["parameter"]
    old = space.params[name]
    low, high = (old.low / WIDEN, old.high) if side == "low" else (old.low, old.high * WIDEN)
    wide = ParameterSpace(dict(space.params))
    wide.params[name] = old.with_range(low, high)
    post = infer(models, wide, measured, n, seed, noise, flag_bounds=False)
    med = float(np.median(post.draws.column(name)))
    bound = old.low if side == "low" else old.high
    factor = bound / med if side == "low" else med / bound
    beyond = (med < old.low) if side == "low" else (med > old.high)
    where = f"{factor:.2g}x {'below' if side == 'low' else 'above'} its {side} bound {bound:.4g} {old.unit}"
    msg = (f"{name} is pushed to its {side} bound ({p['at_' + side]:.0%} of the posterior in the outer "
           f"{EDGE:.0%} of its range); with the bound widened x{WIDEN:g} the totals put it at {med:.4g} "
           f"{old.unit}" + (f", {where}" if beyond else ", inside its range") +
           f". A value outside the plausible range would stand for {missing_cost(name)}")
    return {"parameter": name, "kind": "at_bound", "public": list(old.public) if old.public else None,
            "side": side, "bound": bound, "widened_p50": med,
            "factor": factor if beyond else 1.0, "message": msg}
