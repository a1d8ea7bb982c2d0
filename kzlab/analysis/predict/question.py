"""`kzlab.whatif`: the user's question, "which change do I try on the device first?", answered as probabilities.

One call profiles on the CPU each graph the configurations need (cached on disk: a chunked graph is another
graph), simulates every configuration's placement, draws the uncertain parameters once for all of them (or, with
measured device totals, from the posterior those totals leave), and compares the configurations draw by draw:
each one's range, P(A faster than B) for every pair, P(within the target), what drives the decision, and the
device measurement that would settle it. The CPU-only decode is always one of the configurations (`cpu`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.analysis.predict.decide import Decision, decide
from kzlab.analysis.predict.draws import ParameterSpace, check_draws
from kzlab.analysis.predict.inference import Posterior, infer
from kzlab.analysis.predict.needs import needs
from kzlab.analysis.predict.nextstep import command_for, context_from, decode_command
from kzlab.errors import InvalidInputError, InvalidOptionError

CPU_CONFIG = "cpu"
#: the next measurements listed: the parameters explaining at least this share of the decision's spread
MIN_SHARE = 0.05
MAX_NEXT = 3


@dataclass
class ConfigSpec:
    """One configuration: a capability profile, what-if changes to it, the stages put under the device's
    scheduler, and the lowering options that differ from the question's."""

    name: str
    profile: str
    options: dict[str, Any] = field(default_factory=dict)
    weights_on: str = "htp"
    #: ops added to (`+SIN`) or taken from (`-CONCAT`) the profile's supports_op, as a what-if
    add_ops: list[str] = field(default_factory=list)
    remove_ops: list[str] = field(default_factory=list)
    #: the profile's run-time options set (`hmx=0`: GGML_HEXAGON_USE_HMX=0)
    profile_options: dict[str, Any] = field(default_factory=dict)
    #: the stages under the device's scheduler (None: the whole graph); the rest runs on the CPU path
    stages: list[str] | None = None
    _caps: Any = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def parse(cls, text: str) -> ConfigSpec:
        """`NAME=PROFILE[,item...]`: items `key=value` (lowering options such as `mm_chunk=1024`; `stages=decoder`
        or `stages=upsample+decoder`; `weights_on=cpu`; a profile option such as `hmx=0`), `+OP` (an op the
        device would also run) and `-OP` (one it would not)."""
        if "=" not in text:
            raise InvalidOptionError(f"--config {text!r}: expected NAME=PROFILE[,mm_chunk=K,+OP,-OP,stages=S,...]")
        name, _, rest = text.partition("=")
        parts = [p.strip() for p in rest.split(",") if p.strip()]
        if not name.strip() or not parts:
            raise InvalidOptionError(f"--config {text!r}: expected NAME=PROFILE[,mm_chunk=K,+OP,-OP,stages=S,...]")
        from kzlab.analysis.placement.capabilities import load, parse_changes
        from kzlab.analysis.placement.simulate import stage_selection

        given, add, remove = parse_changes(parts[1:])
        caps = load(parts[0])
        # the options the profile declares (e.g. hmx) are its own; the rest are the lowering's (ints where digits)
        own = {k: v for k, v in given.items() if k in caps.options}
        opts: dict[str, Any] = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in given.items()
                                if k not in caps.options}
        weights_on = str(opts.pop("weights_on", "htp"))
        stages = opts.pop("stages", None)
        spec = cls(name.strip(), parts[0], opts, weights_on, add, remove, own,
                   None if stages is None else stage_selection(str(stages)))
        spec._caps = caps
        return spec

    def capabilities(self) -> Any:
        """The profile with this configuration's what-if changes (refused with the known names when unknown),
        loaded once."""
        from kzlab.analysis.placement.capabilities import load, with_changes

        if self._caps is None:
            self._caps = load(self.profile)
        if not (self.add_ops or self.remove_ops or self.profile_options):
            return self._caps
        return with_changes(self._caps, self.profile_options, self.add_ops, self.remove_ops)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"profile": self.profile, **self.options, "weights_on": self.weights_on}
        if self.add_ops or self.remove_ops:
            d["ops"] = [f"+{o}" for o in self.add_ops] + [f"-{o}" for o in self.remove_ops]
        if self.profile_options:
            d["profile_options"] = dict(self.profile_options)
        if self.stages is not None:
            d["stages"] = list(self.stages)
        return d


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
            if info.get("p50_ms") and len(info["p50_ms"]) > 4:
                lines.append("  " + " " * 24 + " p50 by part: " + ", ".join(
                    f"{k} {v:.0f}" for k, v in info["p50_ms"].items()) + " ms"
                    + (f"; under the scheduler: {'+'.join(info['sched_stages'])}" if info.get("sched_stages") else ""))
        lines.append("pairs (P(A faster than B), ratio A/B p10 / p50 / p90):")
        for p in d.pairs:
            q = p["ratio"]
            top = p.get("sensitivity") or []
            rests = f"; rests on {top[0]['parameter']} ({top[0]['share']:.2f})" if top else ""
            lines.append(f"  {p['a']} vs {p['b']}: P = {p['p_a_faster']:.2f}, ratio {q['p10']:.2f} / {q['p50']:.2f} / "
                         f"{q['p90']:.2f}{rests}")
        if d.target_ms is not None:
            lines.append(f"P(total <= {d.target_ms:g} ms): " + ", ".join(f"{k} {v:.2f}" for k, v in d.target.items()))
            for name, info in d.configs.items():
                if info.get("needs") and not info["needs"]["met"]:
                    lines.append(f"  to reach it, {name} needs: {info['needs']['text']}")
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


def added_op_notes(spec: ConfigSpec, placement: Any) -> list[str]:
    """What a `+OP` what-if assumed: the added op's nodes priced at its class's ranges (no kernel exists), or that
    the scheduler still placed them elsewhere."""
    out = []
    dev = placement.config["backends"][0]
    for op in spec.add_ops:
        rows = [r for r in (placement.predicted.nodes if placement.predicted else []) if r["op"] == op]
        on = [r for r in rows if r["backend"] == dev]
        if not rows:
            out.append(f"{spec.name}: +{op} changes nothing: this graph has no {op} node")
        elif not on:
            out.append(f"{spec.name}: +{op}: {dev} would accept {op}, yet the scheduler keeps its {len(rows)} node(s) "
                       "off it (its other rules, such as the buffers, refuse them)")
        else:
            rates = sorted({r.get("rate", "measured") for r in on})
            bws = sorted({r.get("bandwidth", "") for r in on} - {""})
            out.append(f"{spec.name}: +{op} is a what-if ({spec.profile} does not run {op}): its {len(on)} node(s) on "
                       f"{dev} are priced at {', '.join(rates)}" + (f" and {', '.join(bws)}" if bws else "") +
                       " (the op class's ranges), a kernel nobody has measured")
    return out


def _resolve_measured(measured: dict[str, float], specs: list[ConfigSpec]) -> dict[str, float]:
    """Measured keys are configuration names, or a profile name that exactly one plain configuration uses, each
    optionally with `:STAGE` (the time of those stages alone, e.g. `v0.15.2:decoder=3760`)."""
    out = {}
    names = [CPU_CONFIG] + [s.name for s in specs]
    for key, v in measured.items():
        k, colon, stage = key.partition(":")
        if colon and not stage.strip():
            raise InvalidInputError(f"--measured {key}: expected NAME=MS or NAME:STAGE=MS")
        suffix = f":{stage.strip()}" if colon else ""
        if k in names:
            out[k + suffix] = v
            continue
        if k.lower() in ("cpu-only", "cpu_only"):
            out[CPU_CONFIG + suffix] = v
            continue
        plain = [s.name for s in specs if s.profile == k and not s.options and s.describe() == {
            "profile": s.profile, "weights_on": s.weights_on}]
        if len(plain) != 1:
            raise InvalidInputError(f"--measured {key}: not a configuration ({', '.join(names)}) nor the profile of "
                                    "exactly one configuration without options")
        out[plain[0] + suffix] = v
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

    known = [f.name for f in dataclasses.fields(Lowering)]
    for s in specs:
        caps = s.capabilities()  # a bad profile or what-if is refused before anything is profiled
        bad = [k for k in s.options if k not in known]
        if bad:
            own = ", ".join(sorted(caps.options)) or "none"
            raise InvalidOptionError(f"--config {s.name}: unknown option {', '.join(bad)} (lowering options: "
                                     f"{', '.join(known)}; {s.profile}'s options: {own}; also stages=, weights_on=, "
                                     "+OP, -OP)")
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
        placements[s.name] = simulate(m, s.capabilities(), frames=frames, lowering=low, weights_on=s.weights_on,
                                      stages=s.stages,
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
        pr = pl.predicted
        extra[k] = {"splits": pl.n_splits, "memory": {b: mm.to_dict() for b, mm in (pl.memory or {}).items()},
                    "profile": pl.config["profile"], "lowering": pl.config["lowering_label"],
                    "sched_stages": pl.config.get("sched_stages"),
                    "p50_ms": {**pr.by_backend_ms, "copies": pr.copy_ms, "sync": pr.sync_ms, "cache": pr.cache_ms}}
    dec = decide(totals, shared, target_ms, extra, baseline={CPU_CONFIG, *(k.partition(":")[0] for k in measured)})
    device = next((pl.config["backends"][0] for k, pl in placements.items() if k != CPU_CONFIG), "HTP")
    ctx = context_from(placements, device=f"{device}0", frames=frames)
    if target_ms is not None:
        for k, pl in placements.items():
            dev = None if k == CPU_CONFIG else pl.config["backends"][0]
            dec.configs[k]["needs"] = needs(pl.predicted.costs, shared, target_ms, pl.nodes, pl.predicted.nodes, dev)
    for s in specs:
        dec.notes += added_op_notes(s, placements[s.name])
    chosen = dec.decision.get("a")
    for s in [s for s in dec.sensitivity if s["share"] >= MIN_SHARE][:MAX_NEXT]:
        cmd, then = command_for(s["parameter"], ctx, chosen or specs[0].name)
        dec.next_measurements.append({"parameter": s["parameter"], "command": cmd, "then": then,
                                      "spread_after": s["spread_after"], "spread_before": s["spread_before"],
                                      "p_settled_after": s["p_settled_after"]})
    if posterior is not None:
        dec.calibration = posterior.to_dict()
        ran = next((k.partition(":")[0] for k in measured if not k.startswith(CPU_CONFIG)), chosen or specs[0].name)
        for f in dec.calibration["flags"]:
            if f.get("kind") == "contradicts_public":
                f["command"] = f["command"].replace("<the measured decode>", decode_command(ctx, ran))
                f["message"] = f["message"].replace("<the measured decode>", decode_command(ctx, ran))
        against = [f["parameter"] for f in dec.calibration["flags"] if f.get("kind") == "contradicts_public"]
        if against:
            dec.notes.insert(0, f"the calibration contradicts public measurements ({', '.join(against)}): every range "
                             "and probability above is priced with a cost the model lacks put on those parameters; "
                             "the flagged device measurement comes before any choice between the configurations")
    assumed = sorted({q for p in preds.values() for q in p.assumed})
    dec.notes.append(f"assumed (drawn over their ranges): {', '.join(assumed)}")
    if cpu_baseline_ms is None:
        dec.notes.append("no --cpu-baseline-ms: the CPU nodes take this machine's times")
    cfg = {"model": str(getattr(m, "path", "")), "frames": frames, "lowering_label": base.label(),
           "cpu_baseline_ms": cpu_baseline_ms, "configs": {s.name: s.describe() for s in specs},
           "measured": measured, "target_ms": target_ms, "draws": draws, "seed": seed, "cache": cache,
           "ops": [str(Path(o)) if isinstance(o, str | Path) else "<records>" for o in ops]}
    out = WhatIf(dec, placements, posterior, profiles, cfg)
    out.seconds = time.perf_counter() - t0
    return out

