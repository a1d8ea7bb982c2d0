"""The time model: milliseconds for every node, split, stage and backend of a placement, and in total.

- A node on the host CPU takes its time from a measured kzlab profile of the same graph (`cpu_profile`), as
  the profiler measured it, normalised so that the profile's node times add up to its plain wall time (the
  profiler's own cost is taken out), then optionally scaled to the device's CPU (`cpu_scale`, or
  `cpu_baseline_ms`: the scale that makes the whole CPU-only decode take that long).
- A node on a device backend takes the time measured for the same op and shape on that device when a
  `test-backend-ops perf` log (or `kzlab bench-ops` output) has it (exact or interpolated in the row count),
  else a roofline: max(FLOPs / rate(op, type), bytes / bandwidth) plus a launch cost.
- Every split costs its input copies (bytes / copy bandwidth, free into a host-visible buffer when the
  profile says so) and a synchronisation cost on its backend.
- A device that shares its buffers with the CPU without coherence cleans and invalidates its cache per op, as
  its source does it (`[perf.cache]`): a tensor above the threshold costs one flush of the whole data cache
  (`l2flush_us`), whatever its size, a smaller one a pass by address over its bytes (`cache_gbs`).
- The total is a warm decode's. A first decode also pays the buffers the device maps on their first use
  (`map_us` each): reported beside it (`first_range`), never added to what the decisions compare.

Each number a prediction rests on is a `Parameter` with its source; the result says which were assumed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.analysis.flops import TYPE_BYTES, VIEW_OPS
from kzlab.analysis.predict.costs import CostModel, CpuTerm
from kzlab.analysis.predict.draws import DEFAULT_DRAWS, Draws, ParameterSpace, spread
from kzlab.analysis.predict.parameters import (
    LIBM_OPS,
    LONG_ROWS,
    MEASURED_SPREAD,
    BackendPerf,
    CacheScheme,
    Parameter,
    observed_spread,
)
from kzlab.errors import InvalidInputError
from kzlab.graph.options import AUTO_CPU, AUTO_DEVICE

CPU_NAMES = {"cpu"}


@dataclass
class Prediction:
    """A predicted decode as a distribution over the uncertain parameters, with its breakdowns, the per-node and
    per-split rows (priced at the parameters' stated values) and every parameter used.

    `total_ms` is the median (p50) of the draws; `range` holds p10/p50/p90/min/max. `by_backend_ms`,
    `by_stage_ms`, `copy_ms` and `sync_ms` are medians too (medians do not add up; the rows and `nominal_ms`,
    priced at the stated values, do)."""

    total_ms: float
    by_backend_ms: dict[str, float]
    by_stage_ms: dict[str, float]
    copy_ms: float
    sync_ms: float
    parameters: list[Parameter]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    splits: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nominal_ms: float = 0.0
    range: dict[str, float] = field(default_factory=dict)
    backend_ranges: dict[str, dict[str, float]] = field(default_factory=dict)
    stage_ranges: dict[str, dict[str, float]] = field(default_factory=dict)
    cache_ms: float = 0.0
    seed: int = 0
    #: the compiled terms (re-evaluated on shared draws by `kzlab.analysis.predict.decide`); not serialised
    costs: CostModel | None = None
    #: a first decode's total (p10 ... max): the warm total plus the buffers the device maps on their first use;
    #: empty where nothing is mapped lazily
    first_range: dict[str, float] = field(default_factory=dict)
    #: what the first decode adds (p50 ms), and how many buffers it maps
    first_ms: float = 0.0
    first_buffers: int = 0

    @property
    def assumed(self) -> list[str]:
        """Names of the parameters nobody measured."""
        return [p.name for p in self.parameters if p.assumed]

    @property
    def uncertain(self) -> list[str]:
        """Names of the parameters drawn over a range."""
        return [p.name for p in self.parameters if p.uncertain]

    def to_dict(self, rows: bool = False) -> dict[str, Any]:
        d = {
            "total_ms": self.total_ms,
            "total_is": "p50 of the draws",
            "nominal_ms": self.nominal_ms,
            "range": dict(self.range),
            "by_backend_ms": dict(self.by_backend_ms),
            "by_stage_ms": dict(self.by_stage_ms),
            "backend_ranges": {k: dict(v) for k, v in self.backend_ranges.items()},
            "stage_ranges": {k: dict(v) for k, v in self.stage_ranges.items()},
            "copy_ms": self.copy_ms,
            "sync_ms": self.sync_ms,
            "cache_ms": self.cache_ms,
            "total_of": "a warm decode (the device's buffers already mapped)",
            "seed": self.seed,
            "parameters": [p.to_dict() for p in self.parameters],
            "assumed": self.assumed,
            "notes": list(self.notes),
        }
        if self.first_range:
            d["first_decode"] = {"range": dict(self.first_range), "added_ms": self.first_ms,
                                 "buffers_mapped": self.first_buffers, "what": FIRST_USE}
        if rows:
            d["nodes"], d["splits"] = list(self.nodes), list(self.splits)
        return d

    def summary(self) -> str:
        r = self.range
        lines = [f"predicted total {self.total_ms:.1f} ms (p50 of {r.get('draws', 0)} draws; "
                 f"p10 {r.get('p10', 0):.1f}, p90 {r.get('p90', 0):.1f}, "
                 f"min {r.get('min', 0):.1f}, max {r.get('max', 0):.1f}; "
                 f"{self.nominal_ms:.1f} at the stated values)"]
        lines.append("  by backend (p10 / p50 / p90): " + ", ".join(
            f"{k} {v['p10']:.1f} / {v['p50']:.1f} / {v['p90']:.1f} ms" for k, v in self.backend_ranges.items()))
        lines.append(f"  input copies {self.copy_ms:.1f} ms, split synchronisation {self.sync_ms:.1f} ms, "
                     f"cache maintenance {self.cache_ms:.1f} ms (p50)")
        lines.append("  by stage (p50): " + ", ".join(f"{k} {v:.1f}" for k, v in self.by_stage_ms.items()))
        if self.first_range:
            f = self.first_range
            lines.append(f"  a first decode: p10 {f['p10']:.1f}, p50 {f['p50']:.1f}, p90 {f['p90']:.1f} ms "
                         f"(+{self.first_ms:.1f} ms p50: {self.first_buffers} buffer(s) mapped on first use); the "
                         "total above is a warm decode's")
        lines.append("parameters:")
        lines += [f"  {p.text()}" for p in self.parameters]
        if self.assumed:
            lines.append(f"this prediction rests on {len(self.assumed)} assumed value(s): {', '.join(self.assumed)}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def apply(self, draws: Draws) -> np.ndarray:
        """Set the distribution fields from `draws` (the prediction's own, or ones shared with other placements);
        returns the total of every draw (ms)."""
        ev = self.costs.evaluate(draws)
        self.range = spread(ev["total"])
        self.total_ms = self.range["p50"]
        self.backend_ranges = {b: spread(ev["by_backend"][:, i]) for i, b in enumerate(self.costs.backends)}
        self.stage_ranges = {s: spread(ev["by_stage"][:, i]) for i, s in enumerate(self.costs.stages)}
        self.by_backend_ms = {b: v["p50"] for b, v in self.backend_ranges.items()}
        self.by_stage_ms = {s: v["p50"] for s, v in self.stage_ranges.items()}
        self.copy_ms, self.sync_ms, self.cache_ms = (float(np.median(ev[k])) for k in ("copy", "sync", "cache"))
        if self.first_buffers:
            self.first_range = spread(ev["total"] + ev["first"])
            self.first_ms = float(np.median(ev["first"]))
        self.seed = draws.seed
        return ev["total"]


# ---- the CPU profile -------------------------------------------------------------------------------------------
def read_profile(source: Any) -> dict[str, Any]:
    """A kzlab profile as a dict: a `Profile`, its `to_dict()`, or the path of `kzlab profile --json`."""
    if hasattr(source, "to_dict"):
        return source.to_dict()
    if isinstance(source, dict):
        return source
    p = Path(source)
    if not p.is_file():
        raise InvalidInputError(f"{p}: no such profile file (write one with `kzlab profile MODEL --json P.json`)")
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidInputError(f"{p}: not a kzlab profile (not JSON: {e})") from None
    if not isinstance(d, dict) or not isinstance(d.get("config"), dict) or not isinstance(d.get("nodes"), list):
        raise InvalidInputError(f"{p}: not a kzlab profile (no `config` and `nodes`)")
    return d


def check_same_graph(profile: dict[str, Any], placement_config: dict[str, Any], where: str = "cpu profile") -> None:
    """Refuse a profile of another graph: another frame count or another lowering."""
    c = profile["config"]
    if int(c.get("frames", -1)) != int(placement_config["frames"]):
        raise InvalidInputError(
            f"the {where} has {c.get('frames')} frames but the placement {placement_config['frames']}: profile the "
            "same frame count"
        )
    if bool(c.get("stream")) != bool(placement_config.get("stream")):
        what = {True: "one streaming call's graph", False: "the offline decode's graph"}
        raise InvalidInputError(
            f"the {where} is of {what[bool(c.get('stream'))]} but the placement is of "
            f"{what[bool(placement_config.get('stream'))]}: profile the same graph (a streaming call: "
            "kzlab.profile(stream=K))"
        )
    mine = c.get("lowering_resolved") or c.get("lowering") or {}
    theirs = placement_config.get("lowering_resolved") or placement_config.get("lowering") or {}
    diff = [k for k in theirs if k != "mode" and mine.get(k) != theirs[k]]
    if diff:
        got = ", ".join(f"{k}={mine.get(k)!r} (placement: {theirs[k]!r})" for k in diff)
        hint = ""
        by_backend = [k for k in AUTO_CPU if k in diff]
        if by_backend:  # choices `auto` makes by backend: the CPU profile was taken of the CPU's, not a device's
            cpu, dev = (", ".join(d[k] for k in by_backend) for d in (AUTO_CPU, AUTO_DEVICE))
            hint = (f" ({' and '.join(by_backend)} 'auto' {'are' if len(by_backend) > 1 else 'is'} {cpu} on the CPU "
                    f"and {dev} for a device: profile `lowering.portable()`; on the command line `--lowering device`)")
        raise InvalidInputError(
            f"the {where} is of another lowering: {got}; profile the placement's graph (same options, "
            f"mode='portable') on the CPU{hint}"
        )


def keyed_nodes(profile: dict[str, Any]) -> Iterable[tuple[tuple[str, int], dict[str, Any]]]:
    """A profile's nodes with their keys, (node name, occurrence): a graph may name two glue nodes alike."""
    seen: dict[str, int] = {}
    for n in profile["nodes"]:
        k = seen.get(n["name"], 0)
        seen[n["name"]] = k + 1
        yield (n["name"], k), n


def cpu_times(profile: dict[str, Any]) -> tuple[dict[tuple[str, int], float], float, float]:
    """((node name, occurrence) -> ms, the profile's plain wall ms, the sum of its node times). Names are
    keyed with their occurrence count: a graph may name two glue nodes alike."""
    times = {key: float(n["time_ms"]) for key, n in keyed_nodes(profile)}
    wall = float(profile.get("wall_ms") or 0.0)
    total = float(sum(times.values()))
    if wall <= 0 or total <= 0:
        raise InvalidInputError("the cpu profile has no timed run (wall_ms or node times are zero)")
    return times, wall, total


# ---- the model ---------------------------------------------------------------------------------------------------
def field_of(obj: Any, name: str, default: Any = None) -> Any:
    """`obj.name` or `obj[name]`: nodes and splits come as objects or as their to_dict() rows."""
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _type_of(node: Any) -> str:
    types = field_of(node, "src_types") or []
    return (types[0] if types else field_of(node, "type", "F32")) or "F32"


def src1_rows(node: Any) -> int:
    """A product's src1 rows (the activations' row count, ne[1] of src1): its shape class (`LONG_ROWS`); 0 for
    another op."""
    src = field_of(node, "src_ne") or []
    if field_of(node, "op") != "MUL_MAT" or len(src) < 2 or len(src[1]) < 2:
        return 0
    return int(src[1][1])


def node_rate(perf: BackendPerf, node: Any) -> Parameter:
    """The rate a device node is priced at: by op, type, kernel path and, for a product, its shape class."""
    return perf.rate(field_of(node, "op"), _type_of(node), field_of(node, "path", "") or "", src1_rows(node))


def tensor_bytes(ne: Any, type_name: str) -> int:
    """A tensor's bytes from its shape and type (4 bytes an element for a type the table lacks: an upper bound for
    the outputs a device writes, F32 or narrower)."""
    n = 1
    for x in ne or ():
        n *= int(x)
    return int(n * TYPE_BYTES.get(str(type_name).upper(), 4.0))


#: what a first decode pays that a warm one does not
FIRST_USE = ("the device maps each of its buffers on the first batch that uses it (FASTRPC_MAP_FD_DELAYED at "
             "registration, HAP_mmap2 on the DSP: ggml-hexagon.cpp 707321c4 line 219, htp/main.c lines 678-705): "
             "a first decode pays map_us per buffer, a warm one nothing; the total is a warm decode's")


#: the spread given to an op time measured alone (test-backend-ops, bench-ops): in a decode it runs between other
#: ops, with other cache contents
OP_SPREAD = 0.08


def device_node_ms(
    node: Any, perf: BackendPerf, est: Any | None, used: set[str] | None = None
) -> tuple[float, str]:
    """(ms, how) for a node on a device backend at the stated values: `est`, the measured rows' estimate for it,
    when they have one, else the roofline. The names of the parameters the answer used are added to `used`."""
    op = field_of(node, "op")
    if est is not None:
        return est.time_us / 1e3, f"measured ({est.how})"
    flops, nbytes = int(field_of(node, "flops", 0)), int(field_of(node, "bytes", 0))
    rate, bw = node_rate(perf, node), perf.bandwidth_for(op)
    if used is not None:
        used.update({rate.name, bw.name, perf.launch_us.name})
    t = max(flops / (rate.value * 1e9), nbytes / (bw.value * 1e9)) * 1e3
    return t + perf.launch_us.value / 1e3, "roofline"


def check_spread(x: Any, what: str) -> float:
    """A relative run-to-run spread given by a caller: a number in [0, 1)."""
    if isinstance(x, bool) or not isinstance(x, int | float) or not np.isfinite(x) or not 0 <= x < 1:
        raise InvalidInputError(f"{what}={x!r}: expected a relative spread from 0 to 1 (0.05 for +-5 %)")
    return float(x)


def baseline_of(cpu_baseline_ms: Any, spread: float | None = None) -> tuple[float, float, str]:
    """(ms, relative spread, how the spread is known) of a CPU-only baseline: one total (the stated run-to-run
    spread, MEASURED_SPREAD, unless `spread` is given) or the list of its measured runs (their median, and the
    largest deviation of a run from it as the spread)."""
    seen = None
    stated = f"run to run, +-{MEASURED_SPREAD:.0%} (stated, not observed)"
    if isinstance(cpu_baseline_ms, list | tuple):
        runs = list(cpu_baseline_ms)
        for r in runs:
            if isinstance(r, bool) or not isinstance(r, int | float) or not np.isfinite(r) or r <= 0:
                raise InvalidInputError(f"cpu_baseline_ms: run {r!r} is not a time in ms > 0")
        if not runs:
            raise InvalidInputError("cpu_baseline_ms=[]: give the CPU-only total, or its measured runs")
        ms, seen = float(np.median(runs)), observed_spread(runs)
        stated = f"one run: the stated run-to-run spread, +-{MEASURED_SPREAD:.0%}"
    elif isinstance(cpu_baseline_ms, bool) or not isinstance(cpu_baseline_ms, int | float) or not cpu_baseline_ms > 0:
        raise InvalidInputError(f"cpu_baseline_ms={cpu_baseline_ms!r}: expected a time in ms > 0")
    else:
        ms = float(cpu_baseline_ms)
    if spread is not None:
        return ms, check_spread(spread, "cpu_baseline_spread"), "as given (cpu_baseline_spread)"
    if seen is not None:
        return ms, seen, f"observed over its {len(runs)} runs (largest deviation from their median)"
    return ms, MEASURED_SPREAD, stated


def _cpu_term(prof: dict[str, Any], wall: float, norm: float, cpu_perf: BackendPerf | None,
              cpu_scale: float | None, cpu_baseline_ms: Any, params: list[Parameter],
              baseline_profile: Any = None, baseline_spread: float | None = None) -> CpuTerm:
    """How the CPU nodes' profiled times scale, with the parameters that says. The baseline total belongs to
    `baseline_profile`'s graph (default: this one): another graph (a chunked one) is scaled by the same factor,
    not forced to the same total.

    The spreads are measured where the data says them: a baseline given as its runs carries their spread; a
    profile carries the spread of its own repeat walls (`config.wall_all_ms`); only a single number falls back
    to the stated MEASURED_SPREAD."""
    src = f"measured here: {prof['config'].get('backend_label', 'cpu')} profile of this graph"
    if cpu_baseline_ms is not None:
        ms, rel, how = baseline_of(cpu_baseline_ms, baseline_spread)
        base = prof
        if baseline_profile is not None:
            base = read_profile(baseline_profile)
            _, wall, total = cpu_times(base)
            norm = wall / total
        mm = sum(float(n["time_ms"]) for n in base["nodes"] if n.get("op") == "MUL_MAT") * norm
        params.append(Parameter("cpu.scale", ms / wall, "x",
                                f"from the CPU-only baseline {ms:g} ms (at matmul_skew 1)"))
        params.append(Parameter("cpu.baseline_ms", ms, "ms",
                                f"measured on the device: the CPU-only decode, +-{rel:.1%} {how}").with_spread(rel))
        skew = cpu_perf.matmul_skew if cpu_perf is not None else None
        if skew is not None:
            params.append(skew)
        return CpuTerm("baseline", baseline="cpu.baseline_ms", skew=skew.name if skew is not None else "",
                       profile_mm_ms=mm, profile_rest_ms=wall - mm)
    if cpu_scale is not None:
        if not cpu_scale > 0:
            raise InvalidInputError(f"cpu_scale={cpu_scale!r}: expected a factor > 0")
        params.append(Parameter("cpu.scale", float(cpu_scale), "x", "given (--cpu-scale)"))
        return CpuTerm("fixed", scale=float(cpu_scale))
    runs = prof["config"].get("wall_all_ms") or []
    seen = observed_spread(runs)
    if seen is None:
        rel, how = MEASURED_SPREAD, f"its run-to-run spread, +-{MEASURED_SPREAD:.0%} (stated: one timed run)"
    else:
        rel, how = seen, (f"its run-to-run spread, +-{seen:.1%}: the largest deviation of its {len(runs)} plain "
                          "repeat walls from their median")
    params.append(Parameter("cpu.profile_spread", 1.0, "x", f"{src}: {how}").with_spread(rel))
    return CpuTerm("profile", baseline="cpu.profile_spread")


def predict(
    nodes: Iterable[Any],
    splits: Iterable[Any],
    config: dict[str, Any],
    perf: dict[str, BackendPerf],
    cpu_profile: Any = None,
    cpu_scale: float | None = None,
    cpu_baseline_ms: float | None = None,
    measured: dict[str, Any] | None = None,
    extra_parameters: Iterable[Parameter] = (),
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    cpu_baseline_profile: Any = None,
    cpu_baseline_spread: float | None = None,
    ops_spread: float | None = None,
) -> Prediction:
    """Predict one placement (nodes with op/backend/stage/flops/bytes, splits with backend and input bytes).

    `perf` maps each backend name (lower case) to its BackendPerf; `measured` maps a backend name to a function
    node -> Estimate | None (from `kzlab.analysis.predict.oplog`). CPU nodes need `cpu_profile`, else the CPU
    is modelled as a device too (its `perf`, marked assumed). The uncertain parameters are drawn `draws` times
    (seeded) and the prediction is their distribution; the rows are priced at the stated values.

    `cpu_baseline_ms` is one CPU-only total or the list of its measured runs (their spread is its range);
    `cpu_baseline_spread` states that spread instead. `ops_spread`: the measured op rows' relative spread (e.g.
    `kzlab bench-ops`' `config["spread"]`, observed over its repeat walls); default OP_SPREAD.
    """
    if cpu_scale is not None and cpu_baseline_ms is not None:
        raise InvalidInputError("give cpu_scale or cpu_baseline_ms, not both")
    if cpu_baseline_spread is not None and cpu_baseline_ms is None:
        raise InvalidInputError("cpu_baseline_spread is the spread of cpu_baseline_ms: give cpu_baseline_ms too")
    op_rel = OP_SPREAD if ops_spread is None else check_spread(ops_spread, "ops_spread")
    nodes, splits = list(nodes), list(splits)
    params: list[Parameter] = list(extra_parameters)
    notes: list[str] = []
    times, norm = None, 1.0
    libm_nodes: set[tuple[str, int]] = set()  # the CPU nodes that take the libm skew
    cpu_term = CpuTerm("fixed")
    if cpu_profile is not None:
        prof = read_profile(cpu_profile)
        check_same_graph(prof, config)
        times, wall, total = cpu_times(prof)
        norm = wall / total
        src = f"measured here: {prof['config'].get('backend_label', 'cpu')} profile of this graph"
        params.append(Parameter("cpu.profile_wall_ms", wall, "ms", src))
        params.append(Parameter("cpu.profile_normalisation", norm, "x", f"{src} (plain wall / sum of node times)"))
        if prof["config"].get("backend") not in (["cpu"], "cpu"):
            notes.append(f"the cpu profile ran on {prof['config'].get('backend_label')}, not on the plain CPU")
        cpu_term = _cpu_term(prof, wall, norm, perf.get("cpu"), cpu_scale, cpu_baseline_ms, params,
                             cpu_baseline_profile, cpu_baseline_spread)
        libm_nodes = _libm_skew(cpu_term, prof, cpu_baseline_profile, perf, params, notes)
    elif cpu_scale is not None or cpu_baseline_ms is not None:
        raise InvalidInputError("cpu_scale / cpu_baseline_ms scale a cpu profile: give cpu_profile too")
    cm = CostModel([], [], cpu_term)
    relative_ok = _relative_ok(prof if times is not None else None, perf, notes)
    factor = {kind: _nominal_cpu_factor(cpu_term, kind, params) for kind in ("other", "mm", "libm")}
    used_perf: set[str] = set()
    used: set[str] = set()  # the parameters an answer rested on: only those are listed
    rows = []
    missing = []
    seen: dict[str, int] = {}
    measured_params: dict[str, Parameter] = {}
    node_cpu: list[float] = []  # each node's profiled CPU ms (0 off the CPU): the contention term's input
    long_hmx: list[tuple[int, str]] = []  # (src1 rows, rate) of the HMX products past the public figures' shapes
    device_ops: dict[str, int] = {}  # ops each device backend runs (views excluded)
    for n in nodes:
        name, op, b = field_of(n, "name"), field_of(n, "op"), field_of(n, "backend")
        occurrence = seen.get(name, 0)
        seen[name] = occurrence + 1
        stage = field_of(n, "stage", "") or "(graph)"
        si, bi = cm.stage_index(stage), cm.backend_index(b)
        if b.lower() in CPU_NAMES and times is not None:  # as measured (a view's time is its share, often 0)
            if (name, occurrence) not in times:
                missing.append(name)
                continue
            base = times[(name, occurrence)] * norm
            node_cpu.append(base)
            cm.cpu_ms.append(base)
            libm = (name, occurrence) in libm_nodes
            cm.cpu_mm.append(op == "MUL_MAT")
            cm.cpu_libm.append(libm)
            cm.cpu_stage.append(si)
            cm.cpu_backend.append(bi)
            t, how = base * factor[_factor_kind(op, libm)], "cpu profile"
        else:
            node_cpu.append(0.0)
            key = b if b in perf else b.lower()
            pf = perf.get(key)
            fn = (measured or {}).get(key) or (measured or {}).get(b)
            est = fn(n) if fn is not None and op not in VIEW_OPS else None  # measured rows come first
            rel = pf.cpu_relative if relative_ok and pf is not None and est is None else None
            if rel is not None:
                # a backend that computes with ggml-cpu's kernels: the host CPU's time for this node (a view's
                # share too, as on the CPU) x the backend's factor
                if (name, occurrence) not in times:
                    missing.append(name)
                    continue
                used_perf.add(key)
                used.add(rel.name)
                base = times[(name, occurrence)] * norm
                libm = (name, occurrence) in libm_nodes
                cm.rel_ms.append(base)
                cm.rel_mm.append(op == "MUL_MAT")
                cm.rel_libm.append(libm)
                cm.rel_p.append(rel.name)
                cm.rel_stage.append(si)
                cm.rel_backend.append(bi)
                t, how = base * factor[_factor_kind(op, libm)] * rel.value, f"cpu profile x {rel.name}"
            elif op in VIEW_OPS:
                t, how = 0.0, "view"
            else:
                if pf is None:
                    raise InvalidInputError(f"no performance model for backend {b!r} (node {name})")
                used_perf.add(key)
                device_ops[key] = device_ops.get(key, 0) + 1
                t, how = device_node_ms(n, pf, est, used)
                if how == "roofline":
                    cm.roof_flops.append(float(field_of(n, "flops", 0)))
                    cm.roof_bytes.append(float(field_of(n, "bytes", 0)))
                    cm.roof_rate_p.append(node_rate(pf, n).name)
                    if field_of(n, "path", "") == "hmx" and src1_rows(n) > LONG_ROWS:
                        long_hmx.append((src1_rows(n), cm.roof_rate_p[-1]))
                    cm.roof_bw_p.append(pf.bandwidth_for(op).name)
                    cm.roof_launch_p.append(pf.launch_us.name)
                    cm.roof_stage.append(si)
                    cm.roof_backend.append(bi)
                else:
                    pname = f"{pf.backend}.measured_ops"
                    if pname not in measured_params:
                        how = (f"+-{op_rel:.1%} as observed over the measurement's repeats (ops_spread)"
                               if ops_spread is not None else
                               f"+-{OP_SPREAD:.0%} stated between an op timed alone and in a decode")
                        measured_params[pname] = Parameter(pname, 1.0, "x", f"measured on {pf.backend}: op times "
                                                           f"from its log, {how}").with_spread(op_rel)
                    cm.meas_ms.append(t)
                    cm.meas_p.append(pname)
                    cm.meas_stage.append(si)
                    cm.meas_backend.append(bi)
        row = {"name": name, "op": op, "backend": b, "stage": stage, "ms": t, "how": how}
        if field_of(n, "path", ""):
            row["path"] = field_of(n, "path")
        if how == "roofline":
            row["rate"], row["bandwidth"] = cm.roof_rate_p[-1], cm.roof_bw_p[-1]
        rows.append(row)
    if missing:
        raise InvalidInputError(
            f"the cpu profile has no time for {len(missing)} node(s) of this graph (first: {missing[0]}): "
            "it is of another graph"
        )
    # the device whose buffers are shared with the CPU without coherence: its cache is maintained, per op where its
    # profile states how ([perf.cache]), else by address over the bytes crossing
    shared = [k for k in perf if k not in CPU_NAMES and perf[k].cache_maintenance]
    spans = split_spans(splits, len(nodes))
    out_bytes = {}  # a node's output bytes by name (a split input is named after the tensor it copies)
    for n in nodes:
        out_bytes.setdefault(field_of(n, "name"), tensor_bytes(field_of(n, "ne"), field_of(n, "type", "F32")))
    split_rows = []
    for i, s in enumerate(splits):
        b = field_of(s, "backend")
        key = b if b in perf else b.lower()
        nbytes = int(field_of(s, "input_bytes", 0))
        st = field_of(s, "stage", "") or "(graph)"
        si = cm.stage_index(st)
        copy = sync = cache = 0.0
        row: dict[str, Any] = {}
        if key in perf:
            p = perf[key]
            used_perf.add(key)
            if nbytes and not p.host_visible_copies:
                copy = nbytes / (p.copy_gbs.value * 1e9) * 1e3
                used.add(p.copy_gbs.name)
                cm.split_terms.append(("copy", float(nbytes), p.copy_gbs.name, si))
            sync = p.sync_us.value / 1e3
            used.add(p.sync_us.name)
            cm.split_terms.append(("sync", 1.0, p.sync_us.name, si))
            owner = key if key in shared else (shared[0] if len(shared) == 1 and key in CPU_NAMES else None)
            scheme = perf[owner].cache if owner is not None else None
            if scheme is not None and spans is not None:
                # the device maintains its cache around its own ops; the host flushes only its message buffer
                if owner == key:
                    ops = [n for n in nodes[spans[i][0]:spans[i][1]] if field_of(n, "op") not in VIEW_OPS]
                    cache, row = _per_op_cache(cm, s, ops, scheme, perf[owner], out_bytes, si, used)
                    used_perf.add(owner)
            elif nbytes and owner is not None:
                q = perf[owner].cache_gbs
                used_perf.add(owner)
                used.add(q.name)
                cache = nbytes / (q.value * 1e9) * 1e3
                cm.split_terms.append(("cache", float(nbytes), q.name, si))
        split_rows.append({"index": i, "backend": b, "input_bytes": nbytes, "copy_ms": copy, "sync_ms": sync,
                           "cache_ms": cache, "stage": field_of(s, "stage", ""), **row})
    if shared and any(perf[k].cache is not None for k in shared) and spans is None and splits:
        notes.append("the splits do not cover the nodes in order: no per-op cache maintenance is priced")
    first = _first_use(cm, perf, device_ops, config, used, notes)
    if long_hmx:
        rates = sorted({r for _, r in long_hmx})
        extrapolated = [r for r in rates if not r.endswith(".long")]
        notes.append(f"{len(long_hmx)} HMX product(s) have more than {LONG_ROWS} src1 rows (up to "
                     f"{max(x for x, _ in long_hmx)}), past every public HMX figure's shape: priced at "
                     f"{', '.join(rates)}" + (" (one rate for every shape, extrapolated to them)" if extrapolated
                                              else " (a rate of its own, no public figure at that shape)"))
    _contention(cm, splits, node_cpu if times is not None else [], perf, split_rows, used, used_perf,
                factor["other"])
    for key in sorted(used_perf):
        p = perf[key]
        params += [q for q in p.parameters() if q.name in used]
        if p.hardware is not None:  # the fixed facts its rates' bounds derive from, with their SoC
            params += p.hardware.parameters(p.backend)
        if p.host_visible_copies and any(s["input_bytes"] for s in split_rows if s["backend"].lower() == key):
            params.append(
                Parameter(
                    f"{key}.copy_into_host_visible",
                    0.0,
                    "ms",
                    "assumed: the profile says its buffer is host-visible, so input copies cost nothing",
                )
            )
    params += list(measured_params.values())
    space = ParameterSpace()
    space.add(params)
    pred = Prediction(0.0, {}, {}, 0.0, 0.0, params, rows, split_rows, notes, costs=cm, first_buffers=first)
    pred.nominal_ms = float(sum(r["ms"] for r in rows) + sum(s["copy_ms"] + s["sync_ms"] + s["cache_ms"]
                                                               + s.get("contention_ms", 0.0) for s in split_rows))
    pred.apply(space.sample(draws, seed))
    return pred


def split_spans(splits: list[Any], n_nodes: int) -> list[tuple[int, int]] | None:
    """Each split's [start, end) in the node list (splits cover the nodes in order), or None when they do not add
    up to the nodes."""
    start, out = 0, []
    for s in splits:
        n = int(field_of(s, "n_nodes", 0))
        out.append((start, start + n))
        start += n
    return out if splits and start == n_nodes else None


def _input_sizes(split: Any, out_bytes: dict[str, int]) -> list[int]:
    """The bytes of each input a split copies: a node's output where the input is named after one, the rest of the
    split's input bytes shared evenly among the others (graph inputs, weights copied from the CPU, views)."""
    names = list(field_of(split, "inputs") or [])
    n = max(int(field_of(split, "n_inputs", len(names)) or 0), len(names))
    known = [out_bytes[x] for x in names if x in out_bytes]
    unknown = n - len(known)
    rest = max(int(field_of(split, "input_bytes", 0)) - sum(known), 0)
    return known + ([rest // unknown] * unknown if unknown else [])


def _per_op_cache(cm: CostModel, split: Any, ops: list[Any], scheme: CacheScheme, p: BackendPerf,
                  out_bytes: dict[str, int], si: int, used: set[str]) -> tuple[float, dict[str, Any]]:
    """The cache maintenance of one device split, as the device's source does it: each op's output (and, where
    `scheme.inputs`, each input the CPU wrote, before its first use in the batch) above `flush_all_bytes` is one
    flush of the whole data cache, a smaller one a clean and invalidate by address over its bytes; plus the
    whole-cache flushes per batch. Adds the terms (per stage: an op's own) and returns (ms at the stated values,
    the split row's counts)."""
    flushes: dict[int, float] = {}
    by_addr: dict[int, float] = {}

    def one(nbytes: int, stage: int) -> None:
        if nbytes > scheme.flush_all_bytes:
            flushes[stage] = flushes.get(stage, 0.0) + 1.0
        elif nbytes > 0:
            by_addr[stage] = by_addr.get(stage, 0.0) + float(nbytes)

    if scheme.inputs and ops:
        for nbytes in _input_sizes(split, out_bytes):
            one(nbytes, si)
    for n in ops:
        one(tensor_bytes(field_of(n, "ne"), field_of(n, "type", "F32")),
            cm.stage_index(field_of(n, "stage", "") or "(graph)"))
    if ops and scheme.batch_flushes:
        batches = -(-len(ops) // scheme.batch_ops)
        flushes[si] = flushes.get(si, 0.0) + float(scheme.batch_flushes * batches)
    for stage, count in flushes.items():
        cm.split_terms.append(("flush", count, p.l2flush_us.name, stage))
    for stage, nbytes in by_addr.items():
        cm.split_terms.append(("cache", nbytes, p.cache_gbs.name, stage))
    if flushes:
        used.add(p.l2flush_us.name)
    if by_addr:
        used.add(p.cache_gbs.name)
    n_flush, n_bytes = sum(flushes.values()), sum(by_addr.values())
    ms = n_flush * p.l2flush_us.value / 1e3 + n_bytes / (p.cache_gbs.value * 1e9) * 1e3
    return ms, {"cache_flushes": int(n_flush), "cache_bytes_by_address": int(n_bytes)}


def _first_use(cm: CostModel, perf: dict[str, BackendPerf], device_ops: dict[str, int], config: dict[str, Any],
               used: set[str], notes: list[str]) -> int:
    """The buffers a device maps on their first use (`map_us`): its compute buffer, and its weights' buffer where
    the weights are on it (one each: ggml-hexagon's buffers hold up to 1 GiB, opt_mbuf). A first decode's addition,
    kept out of the total. Returns how many."""
    total = 0
    weights_on = str(config.get("weights_on", "")).lower()
    for key, n_ops in sorted(device_ops.items()):
        p = perf.get(key)
        if p is None or p.map_us is None or not n_ops:
            continue
        n = 1 + (weights_on == key.lower())
        cm.split_terms.append(("first", float(n), p.map_us.name, 0))
        used.add(p.map_us.name)
        total += n
        notes.append(f"a first decode maps {n} {p.backend} buffer(s) on their first use ({p.map_us.name} each, "
                     "beside the total): the total is a warm decode's; two decodes in one process, each timed, "
                     "measure both")
    return total


def _factor_kind(op: str, libm: bool) -> str:
    """Which of the CPU's factors a node's profiled time takes (`_nominal_cpu_factor`, `costs.cpu_node_factors`):
    "libm" for a libm op that takes the skew, "mm" for a MUL_MAT, else "other"."""
    return "libm" if libm else "mm" if op == "MUL_MAT" else "other"


def _relative_ok(prof: dict[str, Any] | None, perf: dict[str, BackendPerf], notes: list[str]) -> bool:
    """Whether a backend with `cpu_relative` (one that computes with ggml-cpu's kernels) can take its nodes' times
    from the CPU profile: only from a profile of the plain CPU (a BLAS profile's products are not ggml-cpu's)."""
    rel = sorted(p.backend for k, p in perf.items() if k not in CPU_NAMES and p.cpu_relative is not None)
    if not rel or prof is None:
        return False
    if prof["config"].get("backend") in (["cpu"], "cpu"):
        return True
    notes.append(f"{', '.join(rel)}: priced by the roofline, not relative to the CPU profile: the profile ran on "
                 f"{prof['config'].get('backend_label')}, not on the plain CPU whose kernels the backend runs")
    return False


def _contention(cm: CostModel, splits: list[Any], node_cpu: list[float], perf: dict[str, BackendPerf],
                split_rows: list[dict[str, Any]], used: set[str], used_perf: set[str], scale: float) -> None:
    """The CPU split right after a split on a backend with spinning workers (`spin_ms`, `contention`) runs slower:
    one term per such pair, on the next split's profiled CPU time (splits cover the nodes in order)."""
    if not node_cpu or len(node_cpu) < sum(int(field_of(s, "n_nodes", 0)) for s in splits):
        return
    start, ranges = 0, []
    for s in splits:
        n = int(field_of(s, "n_nodes", 0))
        ranges.append((start, start + n))
        start += n
    for i in range(len(splits) - 1):
        b = field_of(splits[i], "backend")
        key = b if b in perf else b.lower()
        nxt = field_of(splits[i + 1], "backend")
        if key not in perf or perf[key].contention is None or nxt.lower() not in CPU_NAMES:
            continue
        t = float(sum(node_cpu[ranges[i + 1][0]:ranges[i + 1][1]]))
        if t <= 0:
            continue
        p = perf[key]
        st = cm.stage_index(field_of(splits[i + 1], "stage", "") or "(graph)")
        cm.contention_terms.append((t, st, cm.backend_index(nxt), p.contention.name, p.spin_ms.name))
        used.update({p.contention.name, p.spin_ms.name})
        used_perf.add(key)
        split_rows[i + 1]["contention_ms"] = p.contention.value * min(scale * t, p.spin_ms.value)


def _nominal_cpu_factor(term: CpuTerm, kind: str, params: list[Parameter]) -> float:
    """A CPU node's factor at the parameters' stated values (the cost model's formula, at one point); `kind`:
    "mm" (a MUL_MAT), "libm" (a libm op that takes the skew) or "other"."""
    values = {p.name: p.value for p in params}
    s, k, j = term.factors(values.__getitem__, 1.0)
    return s * {"mm": k, "libm": j}.get(kind, 1.0)


def measured_libm_nodes(prof: dict[str, Any]) -> set[tuple[str, int]]:
    """(name, occurrence) of a profile's libm-op nodes (LIBM_OPS) timed alone: only their times measure the libm
    this machine's ggml calls. A node sharing its stretch with others (`timing: "apportioned"`) has a share of the
    stretch's time from a cost model that does not know the libm, so a skew would scale a guess."""
    return {key for key, n in keyed_nodes(prof) if n.get("op") in LIBM_OPS and _timed_alone(n)}


def _timed_alone(node: dict[str, Any]) -> bool:
    return node.get("timing", "measured") == "measured"


def profile_libm(prof: dict[str, Any]) -> str:
    """How the ggml that made a CPU profile called libm (`kzlab.environment.ggml_cpu_libm`); a profile from before
    kzlab recorded it is of a scalar build (the only one there was)."""
    return str((prof["config"].get("versions") or {}).get("ggml_cpu_libm", "scalar"))


def _libm_skew(term: CpuTerm, prof: dict[str, Any], baseline_profile: Any, perf: dict[str, BackendPerf],
               params: list[Parameter], notes: list[str]) -> set[tuple[str, int]]:
    """Where a device says its host CPU calls libm per element and the CPU profile came from a ggml that calls
    glibc's vector libm, the profile's libm ops (LIBM_OPS) are many times faster than the device's CPU would run
    them: their times take the CPU's `libm_skew` (a total the CPU-only baseline gives stays reproduced). Returns
    the keys of `prof`'s nodes that take it (none where it does not apply)."""
    hosts = {p.host_libm for k, p in perf.items() if k != "cpu" and p.host_libm}
    skew = perf["cpu"].libm_skew if perf.get("cpu") is not None else None
    if "scalar" not in hosts or profile_libm(prof) != "libmvec" or skew is None:
        return set()
    libm = [n for n in prof["nodes"] if n.get("op") in LIBM_OPS]
    apportioned = sorted({n["op"] for n in libm if not _timed_alone(n)})
    timed = sorted({n["op"] for n in libm if _timed_alone(n)})
    if apportioned:
        notes.append(f"the CPU profile's {', '.join(apportioned)} times are apportioned shares of longer stretches "
                     f"(a cost model's, not this machine's libm): those nodes are taken as profiled, without "
                     f"{skew.name}; profile with granularity='node' to time them alone")
    if not timed:
        return set()
    base = read_profile(baseline_profile) if baseline_profile is not None else prof
    times, wall, total = cpu_times(base)
    term.libm = skew.name
    term.profile_libm_ms = sum(times[k] for k in measured_libm_nodes(base)) * wall / total
    params.append(skew)
    span = f" [{skew.low:g}-{skew.high:g}]" if skew.low is not None and skew.high is not None else ""
    notes.append(f"this machine's ggml calls glibc's vector libm and the device's CPU a scalar one: the CPU's "
                 f"{', '.join(timed)} nodes timed alone are taken x{skew.value:g}{span} ({skew.name})")
    return measured_libm_nodes(prof)
