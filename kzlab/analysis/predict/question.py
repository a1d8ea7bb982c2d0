"""`kzlab.whatif`: the user's question, "which change do I try on the device first?", answered as probabilities.

One call profiles on the CPU each graph the configurations need (cached on disk: a chunked graph is another
graph), simulates every configuration's placement, draws the uncertain parameters once for all of them (or, with
measured device totals, from the posterior those totals leave), and compares the configurations draw by draw:
each one's range, P(A faster than B) for every pair, P(within the target), what drives the decision, and the
device measurement that would settle it. The CPU-only decode is always one of the configurations (`cpu`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.analysis.predict.decide import Decision, decide
from kzlab.analysis.predict.draws import ParameterSpace, check_draws
from kzlab.analysis.predict.inference import Posterior, infer
from kzlab.analysis.predict.nextstep import command_for, context_from
from kzlab.errors import InvalidInputError, InvalidOptionError

CPU_CONFIG = "cpu"
#: the next measurements listed: the parameters explaining at least this share of the decision's spread
MIN_SHARE = 0.05
MAX_NEXT = 3


@dataclass
class ConfigSpec:
    """One configuration: a capability profile and the lowering options that differ from the question's."""

    name: str
    profile: str
    options: dict[str, Any] = field(default_factory=dict)
    weights_on: str = "htp"

    @classmethod
    def parse(cls, text: str) -> ConfigSpec:
        """`NAME=PROFILE[,key=value,...]`, e.g. `chunk=hexagon-v0.15.2,mm_chunk=1024` (values: int, else str)."""
        if "=" not in text:
            raise InvalidOptionError(f"--config {text!r}: expected NAME=PROFILE[,mm_chunk=K,...]")
        name, _, rest = text.partition("=")
        parts = [p.strip() for p in rest.split(",") if p.strip()]
        if not name.strip() or not parts:
            raise InvalidOptionError(f"--config {text!r}: expected NAME=PROFILE[,mm_chunk=K,...]")
        opts: dict[str, Any] = {}
        for p in parts[1:]:
            k, eq, v = p.partition("=")
            if not eq:
                raise InvalidOptionError(f"--config {text!r}: option {p!r} is not key=value")
            opts[k.strip()] = int(v) if v.strip().lstrip("-").isdigit() else v.strip()
        weights_on = str(opts.pop("weights_on", "htp"))
        return cls(name.strip(), parts[0], opts, weights_on)


@dataclass
class WhatIf:
    """The answer: the decision record, the placements it rests on, the calibration, and how it was made."""

    decision: Decision
    placements: dict[str, Any]
    posterior: Posterior | None
    profiles: dict[str, dict[str, Any]]
    config: dict[str, Any]
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = self.decision.to_dict()
        d["question"] = self.config
        d["cpu_profiles"] = self.profiles
        d["seconds"] = self.seconds
        return d

    def summary(self) -> str:
        d, c = self.decision, self.config
        kind = "posterior" if self.posterior is not None else "the stated ranges"
        lines = [f"what-if at {c['frames']} frames ({c['lowering_label']}), {d.draws} paired draws from {kind} "
                 f"(seed {d.seed})"]
        for name, info in d.configs.items():
            r = info["range"]
            mem = info.get("memory") or {}
            fits = "" if not mem else "; " + ", ".join(
                f"{b} {m['total_bytes'] / 1e6:.0f} MB{'' if m['fits'] in (True, None) else ' OVER BUDGET'}"
                for b, m in mem.items())
            lines.append(f"  {name:24s} p10 {r['p10']:8.0f}  p50 {r['p50']:8.0f}  p90 {r['p90']:8.0f} ms  "
                         f"[min {r['min']:.0f}, max {r['max']:.0f}]  {info.get('splits', 0)} splits{fits}")
        lines.append("pairs (P(A faster than B), ratio A/B p10 / p50 / p90):")
        for p in d.pairs:
            q = p["ratio"]
            top = p.get("sensitivity") or []
            rests = f"; rests on {top[0]['parameter']} ({top[0]['share']:.2f})" if top else ""
            lines.append(f"  {p['a']} vs {p['b']}: P = {p['p_a_faster']:.2f}, ratio {q['p10']:.2f} / {q['p50']:.2f} / "
                         f"{q['p90']:.2f}{rests}")
        if d.target_ms is not None:
            lines.append(f"P(total <= {d.target_ms:g} ms): " + ", ".join(f"{k} {v:.2f}" for k, v in d.target.items()))
        if d.decision:
            dd = d.decision
            state = "settled" if dd["settled"] else "not settled"
            lines.append(f"decision: {dd['a']} before {dd['b']} with P = {dd['p_a_faster']:.2f} ({state})")
        if d.sensitivity:
            lines.append("what the decision's spread rests on (share of its variance, alone):")
            lines += [f"  {s['parameter']:28s} {s['share']:.2f}" for s in d.sensitivity[:6]]
        for m in d.next_measurements:
            lines.append(f"next measurement for {m['parameter']} (spread {m['spread_before']:.2f} -> "
                         f"{m['spread_after']:.2f} in log ratio; settled afterwards with P "
                         f"{m['p_settled_after']:.2f}):")
            lines.append(f"  on the device: {m['command']}")
            lines.append(f"  then: {m['then']}")
        if self.posterior is not None:
            lines.append(self.posterior.summary())
        lines.append("CPU profiles: " + ", ".join(f"{k}: {'cached' if v['cached'] else 'measured'}"
                                                   for k, v in self.profiles.items()))
        lines += [f"note: {n}" for n in d.notes]
        return "\n".join(lines)


def _resolve_measured(measured: dict[str, float], specs: list[ConfigSpec]) -> dict[str, float]:
    """Measured keys are configuration names, or a profile name that exactly one plain configuration uses."""
    out = {}
    names = [CPU_CONFIG] + [s.name for s in specs]
    for k, v in measured.items():
        if k in names:
            out[k] = v
            continue
        if k.lower() in ("cpu-only", "cpu_only"):
            out[CPU_CONFIG] = v
            continue
        plain = [s.name for s in specs if s.profile == k and not s.options]
        if len(plain) != 1:
            raise InvalidInputError(f"--measured {k}: not a configuration ({', '.join(names)}) nor the profile of "
                                    "exactly one configuration without options")
        out[plain[0]] = v
    return out


def whatif(model: Any, configs: list[ConfigSpec | str], frames: int = 31, lowering: Any = None,
           cpu_baseline_ms: float | None = None, measured: dict[str, float] | None = None, ops: list[Any] = (),
           target_ms: float | None = None, draws: int = 1000, seed: int = 0, cache: bool = True,
           threads: int | None = None, progress: Any = False, noise: float | None = None) -> WhatIf:
    """Answer "which configuration first" for `configs` (ConfigSpec or `NAME=PROFILE[,k=v]` strings), all on
    the same draws. `measured`: device totals (config name -> ms; `cpu` for the CPU-only decode) to calibrate
    on. `cache=False` profiles every graph anew."""
    from kzlab.analysis.placement.simulate import simulate
    from kzlab.analysis.profile_cache import cached_cpu_profile
    from kzlab.graph.options import Lowering
    from kzlab.loader import load_model
    from kzlab.model.model import Model

    t0 = time.perf_counter()
    check_draws(draws, seed)
    specs = [c if isinstance(c, ConfigSpec) else ConfigSpec.parse(c) for c in configs]
    if not specs:
        raise InvalidOptionError("whatif needs at least one --config NAME=PROFILE")
    if len({s.name for s in specs}) != len(specs) or any(s.name == CPU_CONFIG for s in specs):
        raise InvalidOptionError(f"configuration names must be distinct and not {CPU_CONFIG!r} (the CPU-only decode)")
    if target_ms is not None and not target_ms > 0:
        raise InvalidOptionError(f"target_ms={target_ms!r}: expected a time in ms > 0")
    measured = _resolve_measured(dict(measured or {}), specs)
    m = model if isinstance(model, Model) else load_model(model)
    if isinstance(lowering, dict):
        lowering = Lowering.from_dict(lowering)
    base = (lowering or Lowering()).replace(mode="portable")
    from kzlab.analysis.placement.capabilities import load as load_caps

    for s in specs:
        load_caps(s.profile)  # a bad profile is refused before anything is profiled
        try:
            base.replace(**s.options)
        except TypeError as e:
            raise InvalidOptionError(f"--config {s.name}: {e}") from None
    graphs: dict[str, tuple[Any, dict[str, Any]]] = {}
    profiles: dict[str, dict[str, Any]] = {}

    def cpu_profile(low: Any) -> dict[str, Any]:
        key = low.resolve(cpu_only=False, where="the what-if").label()
        if key not in graphs:
            prof, info = cached_cpu_profile(m, frames, low, threads=threads, cache=cache, progress=progress)
            graphs[key] = (prof, info)
            profiles[key] = info
        return graphs[key][0]

    placements: dict[str, Any] = {}
    # one draw each: every prediction is priced below on the draws the configurations share
    opts = {"cpu_baseline_ms": cpu_baseline_ms, "draws": 1, "seed": seed}
    placements[CPU_CONFIG] = simulate(m, "cpu", frames=frames, lowering=base, weights_on="cpu",
                                      predict={**opts, "cpu_profile": cpu_profile(base)})
    for s in specs:
        low = base.replace(**s.options)
        placements[s.name] = simulate(m, s.profile, frames=frames, lowering=low, weights_on=s.weights_on,
                                      predict={**opts, "cpu_profile": cpu_profile(low), "ops": list(ops),
                                               "cpu_baseline_profile": cpu_profile(base)})
    preds = {k: pl.predicted for k, pl in placements.items()}
    space = ParameterSpace.shared_by(preds)
    posterior = None
    if measured:
        kw = {"noise": noise} if noise is not None else {}
        posterior = infer({k: p.costs for k, p in preds.items()}, space, measured, n=draws, seed=seed, **kw)
        shared = posterior.draws
    else:
        shared = space.sample(draws, seed)
    totals = {}
    extra = {}
    for k, pl in placements.items():
        totals[k] = pl.predicted.apply(shared)
        extra[k] = {"splits": pl.n_splits, "memory": {b: mm.to_dict() for b, mm in (pl.memory or {}).items()},
                    "profile": pl.config["profile"], "lowering": pl.config["lowering_label"]}
    dec = decide(totals, shared, target_ms, extra, baseline={CPU_CONFIG, *measured})
    device = next((pl.config["backends"][0] for k, pl in placements.items() if k != CPU_CONFIG), "HTP")
    ctx = context_from(placements, device=f"{device}0", frames=frames)
    chosen = dec.decision.get("a")
    for s in [s for s in dec.sensitivity if s["share"] >= MIN_SHARE][:MAX_NEXT]:
        cmd, then = command_for(s["parameter"], ctx, chosen or specs[0].name)
        dec.next_measurements.append({"parameter": s["parameter"], "command": cmd, "then": then,
                                      "spread_after": s["spread_after"], "spread_before": s["spread_before"],
                                      "p_settled_after": s["p_settled_after"]})
    if posterior is not None:
        dec.calibration = posterior.to_dict()
    assumed = sorted({q for p in preds.values() for q in p.assumed})
    dec.notes.append(f"assumed (drawn over their ranges): {', '.join(assumed)}")
    if cpu_baseline_ms is None:
        dec.notes.append("no --cpu-baseline-ms: the CPU nodes take this machine's times")
    cfg = {"model": str(getattr(m, "path", "")), "frames": frames, "lowering_label": base.label(),
           "cpu_baseline_ms": cpu_baseline_ms, "configs": {s.name: {"profile": s.profile, **s.options,
                                                                     "weights_on": s.weights_on} for s in specs},
           "measured": measured, "target_ms": target_ms, "draws": draws, "seed": seed, "cache": cache,
           "ops": [str(Path(o)) if isinstance(o, str | Path) else "<records>" for o in ops]}
    out = WhatIf(dec, placements, posterior, profiles, cfg)
    out.seconds = time.perf_counter() - t0
    return out

