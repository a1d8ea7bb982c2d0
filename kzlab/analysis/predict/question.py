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

import numpy as np

from kzlab.analysis.accuracy import DEFAULT_BOUND_DB
from kzlab.analysis.predict.correctness import describe_key, recommend, verdicts
from kzlab.analysis.predict.decide import Decision, decide
from kzlab.analysis.predict.draws import ParameterSpace, check_draws
from kzlab.analysis.predict.inference import Posterior, infer
from kzlab.analysis.predict.needs import needs
from kzlab.analysis.predict.nextstep import command_for, context_from, decode_command
from kzlab.analysis.predict.stream_whatif import StreamQuestion, check_streamable
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
    #: a correct variant the what-if added: the configuration it fixes and the remedy (a defect's `remedies` item)
    variant_of: str = field(default="", compare=False)
    remedy: str = field(default="", compare=False)
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
    #: where those seconds went: "profiling" (CPU profiles measured or read), "placing" (the placements
    #: simulated), "emulation" (the device's arithmetic on the host: the verdicts), "drawing" (draws, decision,
    #: what reaching the target takes)
    timings: dict[str, float] = field(default_factory=dict)
    #: the fastest configuration that computes the right audio (`correctness.recommend`)
    recommended: dict[str, Any] = field(default_factory=dict)
    #: the streaming answer (`stream=`): the question, what is modelled, the overall recommended chunk; each
    #: configuration's sizes are in `decision.configs[name]["stream"]`
    stream: dict[str, Any] | None = None
    #: the streaming calls' placements: configuration -> chunk size -> Placement
    stream_placements: dict[str, dict[int, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = self.decision.to_dict()
        d["recommended"] = self.recommended.get("name")
        d["recommendation"] = self.recommended
        d["question"] = self.config
        d["cpu_profiles"] = self.profiles
        d["seconds"] = self.seconds
        d["timings"] = self.timings
        if self.stream is not None:
            d["stream"] = self.stream
            d["recommended_chunk"] = self.stream["recommended_chunk"]
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
            if "correct" in info:
                lines.append("  " + " " * 24 + " " + _verdict_text(info))
            first = info.get("first_decode")
            if first:
                fr = first["range"]
                lines.append("  " + " " * 24 + f" first decode (a warm one plus {first['buffers_mapped']} buffer "
                             f"mapping(s) on the DSP): p10 {fr['p10']:.0f} / p50 {fr['p50']:.0f} / p90 {fr['p90']:.0f}"
                             f" ms, +{first['added_ms']:.0f} ms at p50")
            if info.get("p50_ms") and len(info["p50_ms"]) > 4:
                lines.append("  " + " " * 24 + " p50 by part: " + ", ".join(
                    f"{k} {v:.0f}" for k, v in info["p50_ms"].items()) + " ms"
                    + (f"; under the scheduler: {'+'.join(info['sched_stages'])}" if info.get("sched_stages") else ""))
        lines.append("pairs (P(A faster than B), ratio A/B p10 / p50 / p90; a correct variant against the "
                     "configuration it fixes):")
        of = {k: info.get("variant_of", "") for k, info in d.configs.items()}
        for p in d.pairs:
            if (of[p["a"]] or of[p["b"]]) and p["a"] != of[p["b"]] and p["b"] != of[p["a"]]:
                continue  # a variant is shown against the configuration it fixes (every pair is in the JSON)
            q = p["ratio"]
            top = p.get("sensitivity") or []
            rests = f"; rests on {top[0]['parameter']} ({top[0]['share']:.2f})" if top else ""
            scope = p.get("scope") or {}
            diff = ""
            if scope.get("kind") == "different":
                diff = f"; DIFFERENT stages under the scheduler ({_stages(scope['a_stages'])} / " \
                       f"{_stages(scope['b_stages'])})"
            lines.append(f"  {p['a']} vs {p['b']}: P = {p['p_a_faster']:.2f}, ratio {q['p10']:.2f} / {q['p50']:.2f} / "
                         f"{q['p90']:.2f}{rests}{diff}")
        if d.target_ms is not None:
            lines.append(f"P(total <= {d.target_ms:g} ms): " + ", ".join(f"{k} {v:.2f}" for k, v in d.target.items()))
            for name, info in d.configs.items():
                if info.get("needs") and not info["needs"]["met"]:
                    lines.append(f"  to reach it, {name} needs: {info['needs']['text']}")
        if d.decision:
            dd = d.decision
            state = "settled" if dd["settled"] else "not settled"
            if dd.get("unsettled_by"):
                state = "not settled: rests on flagged " + ", ".join(
                    f"{u['parameter']} ({', '.join(u['kinds'])})" for u in dd["unsettled_by"])
            lines.append(f"decision: {dd['a']} before {dd['b']} with P = {dd['p_a_faster']:.2f} ({state})"
                         + (" among the configurations that compute the right audio" if self.recommended else ""))
        rec = self.recommended
        if rec:
            if rec.get("name"):
                lines.append(f"recommended: {rec['name']} (p50 {rec['p50_ms']:.0f} ms), {rec['why']}")
            else:
                lines.append(f"recommended: none ({rec['why']})")
            for w in rec.get("faster_but_wrong", []):
                lines.append(f"  not recommended though faster: {w['name']} (p50 {w['p50_ms']:.0f} ms, P(faster) = "
                             f"{w['p_faster']:.2f}): WRONG OUTPUT, {w['why']}")
        if d.sensitivity:
            lines.append("what the decision's spread rests on (share of its variance, alone):")
            lines += [f"  {s['parameter']:28s} {s['share']:.2f}" for s in d.sensitivity[:6]]
        for m in d.next_measurements:
            lines.append(f"next measurement for {m['parameter']} (spread {m['spread_before']:.2f} -> "
                         f"{m['spread_after']:.2f} in log ratio; settled afterwards with P "
                         f"{m['p_settled_after']:.2f}):")
            lines.append(f"  on the device: {m['command']}")
            lines.append(f"  then: {m['then']}")
        if self.stream is not None:
            lines += self.stream_lines()
        if self.posterior is not None:
            lines.append(self.posterior.summary())
        lines.append("CPU profiles: " + ", ".join(f"{k}: {'cached' if v['cached'] else 'measured'}"
                                                   for k, v in self.profiles.items()))
        lines += [f"note: {n}" for n in d.notes]
        return "\n".join(lines)

    def stream_lines(self) -> list[str]:
        """The streaming answer as text: a compact table per configuration, the recommended chunk, what is
        modelled and what is not."""
        from kzlab.analysis.predict.stream_whatif import frames_text, table

        st = self.stream or {}
        q = st["question"]
        pace = (f"; codes paced at {q['pace_fps']:g} frames/s, P(underrun) over a {q['utterance_s']:g} s utterance"
                if q["pace_fps"] is not None else "")
        lines = [f"streaming calls of {', '.join(map(str, q['sizes']))} frames (a frame is {q['frame_ms']:g} ms of "
                 f"audio; P(rt) = P(call < K frames of audio); first audio: the first call, with "
                 f"its first-use costs{pace}; ms, on the draws above):"]
        for name, info in self.decision.configs.items():
            if "stream" in info:
                lines += table(name, info["stream"], info["recommended_chunk"], q["pace_fps"] is not None)
        rec = st["recommended_chunk"]
        if rec.get("config"):
            f = rec["first_audio_ms"]
            lines.append(f"recommended chunk: {frames_text(rec['frames'])} on {rec['config']} (P(real time) = "
                         f"{rec['p_realtime']:.2f} >= {q['realtime_p']:g}; first audio p50 {f['p50']:.0f} ms, "
                         f"p10-p90 {f['p10']:.0f}-{f['p90']:.0f}), {rec['why']}")
        else:
            lines.append(f"recommended chunk: none ({rec['why']})")
        for w in rec.get("not_recommended", []):
            lines.append(f"  not recommended though it keeps real time: {w['name']} at {frames_text(w['frames'])} "
                         f"(P = {w['p_realtime']:.2f}): WRONG OUTPUT, {w['why']}")
        lines += [f"stream note: {n}" for n in st["notes"]]
        return lines


def _stream_placements(m: Any, specs: list[ConfigSpec], base: Any, sizes: tuple[int, ...], opts: dict[str, Any],
                       ops: Any, cpu_profile: Any, profiles: dict[str, dict[str, Any]], threads: int | None,
                       cache: bool, progress: Any) -> tuple[dict[str, dict[int, Any]], dict[tuple[str, int], float]]:
    """Each configuration's streaming call of each size, placed and predicted (one draw: they are priced on the
    shared draws), the CPU nodes from a CPU profile of the same streaming graph scaled by the whole decode's
    baseline (`cpu_baseline_profile`: the CPU-only decode measured on the device is of the offline graph); and per
    (lowering, size) the call's CPU time per frame against the whole decode's, both as timed here."""
    from kzlab.analysis.placement.simulate import simulate
    from kzlab.analysis.profile_cache import cached_cpu_profile

    taken: dict[tuple[str, int], Any] = {}
    per_frame: dict[tuple[str, int], float] = {}

    def stream_profile(low: Any, k: int) -> Any:
        label = low.resolve(cpu_only=False, where="the what-if").label()
        if (label, k) not in taken:
            prof, info = cached_cpu_profile(m, k, low, threads=threads, cache=cache, progress=progress, stream=True)
            whole = cpu_profile(low)
            taken[(label, k)] = prof
            profiles[f"{label} (stream call of {k})"] = info
            # the call's CPU time per frame against the whole decode's of the same lowering, both timed here
            per_frame[(label, k)] = (prof["wall_ms"] / k) / (whole["wall_ms"] / whole["config"]["frames"])
        return taken[(label, k)]

    out: dict[str, dict[int, Any]] = {CPU_CONFIG: {}}
    for k in sizes:
        out[CPU_CONFIG][k] = simulate(m, "cpu", frames=k, lowering=base, weights_on="cpu", stream=True,
                                      predict={**opts, "cpu_profile": stream_profile(base, k),
                                               "cpu_baseline_profile": cpu_profile(base)})
    for s in specs:
        low = base.replace(**s.options)
        out[s.name] = {k: simulate(m, s.capabilities(), frames=k, lowering=low, weights_on=s.weights_on,
                                   stages=s.stages, stream=True,
                                   predict={**opts, "cpu_profile": stream_profile(low, k), "ops": list(ops),
                                            "cpu_baseline_profile": cpu_profile(base)})
                       for k in sizes}
    return out, per_frame


def _stream_answer(m: Any, streams: dict[str, dict[int, Any]], per_frame: dict[tuple[str, int], float], shared: Any,
                   seed: int, verdict: dict[str, Any], q: StreamQuestion, dec: Decision) -> dict[str, Any]:
    """Price every configuration's streaming calls on the shared draws (extended by the parameters only the
    streaming graphs read), put each configuration's sizes in `dec.configs[name]["stream"]` with its
    `recommended_chunk`, and return the question, the overall recommendation and the notes."""
    from kzlab.analysis.predict.stream_whatif import (
        MODELLED,
        NOT_MODELLED,
        extend_draws,
        frame_ms,
        price,
        recommend_chunk,
        recommend_overall,
    )

    preds = {f"{name} (stream {k})": pl.predicted for name, per in streams.items() for k, pl in per.items()}
    draws = extend_draws(shared, preds, seed)
    frame = frame_ms(m.hparams)
    rows = {}
    for name, per in streams.items():
        rows[name] = price(per, draws, verdict[name], q, frame)
        dec.configs[name]["stream"] = rows[name]
        dec.configs[name]["recommended_chunk"] = recommend_chunk(rows[name], q.realtime_p)
    added = [n for n in draws.names if n not in shared.names]
    notes = [f"modelled: {MODELLED}", f"not modelled: {NOT_MODELLED}"]
    if per_frame:
        r = list(per_frame.values())
        notes.append("the CPU profiles of the streaming calls and of the whole decodes were each one timed run on "
                     f"this machine: a call's CPU time per frame is {min(r):.2f}-{max(r):.2f} x the whole decode's of "
                     "the same lowering (each call also reads its layers' carried context; a ratio far from 1 at the "
                     "larger sizes is this machine's load between the runs, and every call's CPU part carries it)")
    if added:
        notes.append(f"drawn for the streaming calls alone (the whole decodes do not read them; from their ranges, "
                     f"apart from the draws above): {', '.join(added)}")
    if q.pace is not None:
        notes.append(f"paced: codes arrive at {q.pace:g} frames/s; chunk i's codes are complete at (i + 1) K / "
                     f"{q.pace:g} s, calls run one after another, playback starts with the first chunk's audio, an "
                     f"underrun is a chunk ready after the audio before it ran out (a {q.utterance_s:g} s "
                     "utterance); every call of a draw takes that draw's time: call-to-call jitter is not modelled")
    question = {"sizes": list(q.sizes), "frame_ms": frame, "realtime_p": q.realtime_p, "pace_fps": q.pace,
                "utterance_s": q.utterance_s if q.pace is not None else None, "draws": len(draws)}
    return {"question": question, "recommended_chunk": recommend_overall(rows, q.realtime_p), "notes": notes}


def _stages(x: Any) -> str:
    return x if isinstance(x, str) else "+".join(x)


def _verdict_text(info: dict[str, Any]) -> str:
    """A configuration's correctness in one line: right audio, wrong output and why, or not known."""
    acc = info.get("accuracy") or {}
    snr = acc.get("snr_db")
    snr_s = "" if snr is None else (f"wav {snr:.1f} dB" if isinstance(snr, float) else f"wav {snr} dB")
    variant = f" (variant of {info['variant_of']}: {info['remedy']})" if info.get("variant_of") else ""
    if info["correct"] is True:
        bound = acc.get("bound_db", 0)
        why = f"; {info['why']}" if info.get("why") else ""  # e.g. the approximations the bound let through
        return f"RIGHT audio: {snr_s} against the host's F32 decode, every stage >= {bound:g} dB{why}{variant}"
    if info["correct"] is False:
        return f"WRONG OUTPUT: {info.get('why', '')}" + (f"; {snr_s}" if snr_s else "") + variant
    return f"correctness not known: {info.get('why', '')}{variant}"


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


def remedy_specs(spec: Any, placement: Any, taken: set[str], base: Any) -> list[Any]:
    """The variants of `spec` its placement's defects propose (`remedies`: configuration items such as
    `conv=im2col-f32,conv_src1=data`, `hmx=0` or `profile=NAME`), each a ConfigSpec named `NAME [items]` with
    `variant_of` and `remedy` set; a variant already asked for (the same configuration of the question's lowering
    `base`, `describe_key`) is left out."""
    from kzlab.analysis.placement.capabilities import load, parse_changes

    out = []
    for d in placement.defects:
        for remedy in d.get("remedies", []):
            given, add, remove = parse_changes([x for x in remedy.split(",") if x.strip()])
            profile = given.pop("profile", spec.profile)
            caps = load(profile)
            own = {k: v for k, v in given.items() if k in caps.options}
            opts = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in given.items() if k not in caps.options}
            v = ConfigSpec(f"{spec.name} [{remedy}]", profile, {**spec.options, **opts}, spec.weights_on,
                           [*spec.add_ops, *add], [*spec.remove_ops, *remove],
                           {**{k: x for k, x in spec.profile_options.items() if k in caps.options}, **own},
                           spec.stages)
            key = describe_key(v, base)
            if key in taken:
                continue
            taken.add(key)
            v.variant_of, v.remedy = spec.name, remedy
            out.append(v)
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
           threads: int | None = None, progress: Any = False, noise: float | None = None,
           accuracy: bool = True, remedies: bool = True, bound: float | None = None, stream: Any = None,
           pace: float | None = None, utterance_s: float | None = None, realtime_p: float | None = None) -> WhatIf:
    """Answer "which configuration first" for `configs` (ConfigSpec or `NAME=PROFILE[,k=v]` strings), all on
    the same draws. `measured`: device totals (config name -> ms; `cpu` for the CPU-only decode) to calibrate
    on. `cache=False` profiles every graph anew.

    Correctness beside time: every configuration's placement is checked for known defects, and (`accuracy`) its
    decode emulated with the device's arithmetic (`kzlab.analysis.emulate`) against the host's F32 decode with
    `bound` dB (default: `kzlab.analysis.accuracy.DEFAULT_BOUND_DB`); one that computes wrong values is never a
    contender nor recommended. `remedies`: a configuration that hits a defect gets the defect's correct variants
    (F32 columns, HMX off, a fixed release) priced beside it on the same draws.

    `stream` (chunk sizes: an int, a list or "1,4,16,72"; a causal family): one streaming call of each size placed
    and priced on every configuration, on the same draws (`kzlab.analysis.predict.stream_whatif`): per size the call
    time's range, P(real time), the time to first audio's range and, with `pace` (codes arriving at that many
    frames a second), P(underrun) over an utterance of `utterance_s` seconds (default 10); the smallest chunk with
    P(real time) >= `realtime_p` (default 0.9) that computes the right audio is recommended, per configuration and
    overall."""
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
    squestion = None
    if stream is not None:
        squestion = StreamQuestion.of(stream, pace, utterance_s, realtime_p)
    elif pace is not None or utterance_s is not None or realtime_p is not None:
        raise InvalidOptionError("pace, utterance and realtime_p ask about a stream: give the chunk sizes too "
                                 "(--stream K[,K...])")
    m = model if isinstance(model, Model) else load_model(model)
    if squestion is not None:
        check_streamable(m.hparams)
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

    spent = {"profiling": 0.0, "placing": 0.0, "emulation": 0.0}

    def cpu_profile(low: Any) -> dict[str, Any]:
        key = low.resolve(cpu_only=False, where="the what-if").label()
        if key not in graphs:
            t = time.perf_counter()
            prof, info = cached_cpu_profile(m, frames, low, threads=threads, cache=cache, progress=progress)
            spent["profiling"] += time.perf_counter() - t
            graphs[key] = (prof, info)
            profiles[key] = info
        return graphs[key][0]

    placements: dict[str, Any] = {}
    # one draw each: every prediction is priced below on the draws the configurations share
    opts = {"cpu_baseline_ms": cpu_baseline_ms, "draws": 1, "seed": seed}
    base_profile = cpu_profile(base)
    t = time.perf_counter()
    placements[CPU_CONFIG] = simulate(m, "cpu", frames=frames, lowering=base, weights_on="cpu",
                                      predict={**opts, "cpu_profile": base_profile})
    spent["placing"] += time.perf_counter() - t

    def place(s: ConfigSpec) -> Any:
        low = base.replace(**s.options)
        prof, baseline = cpu_profile(low), cpu_profile(base)
        t = time.perf_counter()
        pl = simulate(m, s.capabilities(), frames=frames, lowering=low, weights_on=s.weights_on, stages=s.stages,
                      predict={**opts, "cpu_profile": prof, "ops": list(ops), "cpu_baseline_profile": baseline})
        spent["placing"] += time.perf_counter() - t
        return pl

    for s in specs:
        placements[s.name] = place(s)
    variants: list[ConfigSpec] = []
    if remedies:
        taken = {describe_key(s, base) for s in specs}
        for s in specs:
            for v in remedy_specs(s, placements[s.name], taken, base):
                placements[v.name] = place(v)
                variants.append(v)
    streams: dict[str, dict[int, Any]] = {}
    per_frame: dict[tuple[str, int], float] = {}
    if squestion is not None:
        streams, per_frame = _stream_placements(m, specs + variants, base, squestion.sizes, opts, ops, cpu_profile,
                                                profiles, threads, cache, progress)
    bound_db = DEFAULT_BOUND_DB if bound is None else float(bound)
    t_emulation = time.perf_counter()
    verdict = verdicts(m, placements, frames, seed, bound_db, accuracy, threads, progress, cache=cache)
    spent["emulation"] = time.perf_counter() - t_emulation
    wrong = {k for k, v in verdict.items() if v.correct is False}
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
                    "p50_ms": {**pr.by_backend_ms, "copies": pr.copy_ms, "sync": pr.sync_ms, "cache": pr.cache_ms},
                    "first_decode": ({"range": pr.first_range, "added_ms": pr.first_ms,
                                      "buffers_mapped": pr.first_buffers} if pr.first_range else None)}
    for v in variants:
        extra[v.name].update(variant_of=v.variant_of, remedy=v.remedy)
    for k in placements:
        extra[k].update(verdict[k].to_dict())
    dec = decide(totals, shared, target_ms, extra, baseline={CPU_CONFIG, *(k.partition(":")[0] for k in measured)},
                 exclude=wrong, flags=posterior.flags if posterior is not None else None)
    for s in specs:
        fixes = [v for v in variants if v.variant_of == s.name]
        if fixes:
            dec.configs[s.name]["correct_variants"] = [
                {"name": v.name, "remedy": v.remedy, "correct": verdict[v.name].correct,
                 "range": dec.configs[v.name]["range"],
                 "p_faster_than_it": float(np.mean(totals[v.name] < totals[s.name]))} for v in fixes]
    device = next((pl.config["backends"][0] for k, pl in placements.items() if k != CPU_CONFIG), "HTP")
    ctx = context_from(placements, device=f"{device}0", frames=frames)
    if target_ms is not None:
        for k, pl in placements.items():
            dev = None if k == CPU_CONFIG else pl.config["backends"][0]
            dec.configs[k]["needs"] = needs(pl.predicted.costs, shared, target_ms, pl.nodes, pl.predicted.nodes, dev)
    for s in specs:  # what reaching the target takes starts from the right audio
        need = dec.configs[s.name].get("needs")
        if need is not None and s.name in wrong and dec.configs[s.name].get("correct_variants"):
            right = [c for c in dec.configs[s.name]["correct_variants"] if c["correct"]]
            need["correct_variants"] = right
            need["text"] = (f"the right audio first: {s.name} computes wrong output; its correct variants on the "
                            "same draws: " + ("; ".join(f"[{c['remedy']}] p50 {c['range']['p50']:.0f} ms, "
                                                        f"P(<= target) {dec.target.get(c['name'], 0.0):.2f}"
                                                        for c in right) or "none")
                            + f". As it is: {need['text']}")
    for s in specs:
        dec.notes += added_op_notes(s, placements[s.name])
    chosen = dec.decision.get("a")
    for s in [s for s in dec.sensitivity if s["share"] >= MIN_SHARE][:MAX_NEXT]:
        cmd, then = command_for(s["parameter"], ctx, chosen or specs[0].name)
        dec.next_measurements.append({"parameter": s["parameter"], "command": cmd, "then": then,
                                      "spread_after": s["spread_after"], "spread_before": s["spread_before"],
                                      "p_settled_after": s["p_settled_after"]})
    for k in sorted({k.partition(":")[0] for k in measured} & wrong):
        dec.notes.insert(0, f"{k} was measured on the device, yet its placement here computes wrong output "
                         f"({verdict[k].why}): either that run computed those nodes wrongly, or it did not place them "
                         "as simulated (weights in another buffer, another release or lowering). The run's "
                         "GGML_SCHED_DEBUG=2 log settles it (each node's backend and each weight's buffer), and so "
                         "does its output against the host's decode of the same codes (`kzlab compare MODEL --ref` "
                         "on a dump of its stages, or its WAV); until then the calibration on it may price a "
                         "placement the device did not run")
    if wrong:  # before the calibration's note, which goes first: it qualifies every probability
        dec.notes.insert(0, "wrong output (never a contender nor recommended): " + "; ".join(
            f"{k}: {verdict[k].why}" for k in placements if k in wrong))
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
    cfg["accuracy"] = {"emulated": accuracy, "bound_db": bound_db, "remedies": remedies,
                       "variants": {v.name: {"variant_of": v.variant_of, "remedy": v.remedy} for v in variants}}
    answer = None
    if squestion is not None:
        answer = _stream_answer(m, streams, per_frame, shared, seed, verdict, squestion, dec)
        cfg["stream"] = answer["question"]
    out = WhatIf(dec, placements, posterior, profiles, cfg, recommended=recommend(totals, verdict),
                 stream=answer, stream_placements=streams)
    out.seconds = time.perf_counter() - t0
    out.timings = {**spent, "drawing": out.seconds - sum(spent.values())}
    return out

