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

Each number a prediction rests on is a `Parameter` with its source; the result says which were assumed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kzlab.analysis.flops import VIEW_OPS
from kzlab.analysis.predict.parameters import BackendPerf, Parameter
from kzlab.errors import InvalidInputError

CPU_NAMES = {"cpu"}


@dataclass
class Prediction:
    """A predicted decode: totals, the breakdowns, per-node and per-split rows, and every parameter used."""

    total_ms: float
    by_backend_ms: dict[str, float]
    by_stage_ms: dict[str, float]
    copy_ms: float
    sync_ms: float
    parameters: list[Parameter]
    nodes: list[dict[str, Any]] = field(default_factory=list)
    splits: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def assumed(self) -> list[str]:
        """Names of the parameters nobody measured."""
        return [p.name for p in self.parameters if p.assumed]

    def to_dict(self, rows: bool = False) -> dict[str, Any]:
        d = {
            "total_ms": self.total_ms,
            "by_backend_ms": dict(self.by_backend_ms),
            "by_stage_ms": dict(self.by_stage_ms),
            "copy_ms": self.copy_ms,
            "sync_ms": self.sync_ms,
            "parameters": [p.to_dict() for p in self.parameters],
            "assumed": self.assumed,
            "notes": list(self.notes),
        }
        if rows:
            d["nodes"], d["splits"] = list(self.nodes), list(self.splits)
        return d

    def summary(self) -> str:
        lines = [f"predicted total {self.total_ms:.1f} ms"]
        lines.append("  by backend: " + ", ".join(f"{k} {v:.1f} ms" for k, v in self.by_backend_ms.items()))
        lines.append(f"  input copies {self.copy_ms:.1f} ms, split synchronisation {self.sync_ms:.1f} ms")
        lines.append("  by stage: " + ", ".join(f"{k} {v:.1f}" for k, v in self.by_stage_ms.items()))
        lines.append("parameters:")
        lines += [f"  {p.text()}" for p in self.parameters]
        if self.assumed:
            lines.append(f"this prediction rests on {len(self.assumed)} assumed value(s): {', '.join(self.assumed)}")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


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
    mine = c.get("lowering_resolved") or c.get("lowering") or {}
    theirs = placement_config.get("lowering_resolved") or placement_config.get("lowering") or {}
    diff = [k for k in theirs if k != "mode" and mine.get(k) != theirs[k]]
    if diff:
        got = ", ".join(f"{k}={mine.get(k)!r} (placement: {theirs[k]!r})" for k in diff)
        raise InvalidInputError(
            f"the {where} is of another lowering: {got}; profile the placement's graph (same options, "
            "mode='portable') on the CPU"
        )


def cpu_times(profile: dict[str, Any]) -> tuple[dict[tuple[str, int], float], float, float]:
    """((node name, occurrence) -> ms, the profile's plain wall ms, the sum of its node times). Names are
    keyed with their occurrence count: a graph may name two glue nodes alike."""
    times: dict[tuple[str, int], float] = {}
    seen: dict[str, int] = {}
    for n in profile["nodes"]:
        k = seen.get(n["name"], 0)
        seen[n["name"]] = k + 1
        times[(n["name"], k)] = float(n["time_ms"])
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


def device_node_ms(
    node: Any, perf: BackendPerf, measured: Any | None, used: set[str] | None = None
) -> tuple[float, str]:
    """(ms, how) for a node on a device backend: measured rows when they have it, else the roofline. The names of
    the parameters the answer used are added to `used`."""
    op = field_of(node, "op")
    if measured is not None:
        est = measured(node)
        if est is not None:
            return est.time_us / 1e3, f"measured ({est.how})"
    flops, nbytes = int(field_of(node, "flops", 0)), int(field_of(node, "bytes", 0))
    rate = perf.rate(op, _type_of(node))
    if used is not None:
        used.update({rate.name, perf.bandwidth_gbs.name, perf.launch_us.name})
    t = max(flops / (rate.value * 1e9), nbytes / (perf.bandwidth_gbs.value * 1e9)) * 1e3
    return t + perf.launch_us.value / 1e3, "roofline"


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
) -> Prediction:
    """Predict one placement (nodes with op/backend/stage/flops/bytes, splits with backend and input bytes).

    `perf` maps each device backend name to its BackendPerf; `measured` maps a backend name to a function
    node -> Estimate | None (from `kzlab.analysis.predict.oplog`). CPU nodes need `cpu_profile`, else the CPU
    is modelled as a device too (its `perf`, marked assumed).
    """
    if cpu_scale is not None and cpu_baseline_ms is not None:
        raise InvalidInputError("give cpu_scale or cpu_baseline_ms, not both")
    nodes, splits = list(nodes), list(splits)
    params: list[Parameter] = list(extra_parameters)
    notes: list[str] = []
    scale, times, norm = 1.0, None, 1.0
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
        if cpu_baseline_ms is not None:
            if not cpu_baseline_ms > 0:
                raise InvalidInputError(f"cpu_baseline_ms={cpu_baseline_ms!r}: expected a time in ms > 0")
            scale = cpu_baseline_ms / wall
            params.append(Parameter("cpu.scale", scale, "x", f"from the CPU-only baseline {cpu_baseline_ms:g} ms"))
        elif cpu_scale is not None:
            if not cpu_scale > 0:
                raise InvalidInputError(f"cpu_scale={cpu_scale!r}: expected a factor > 0")
            scale = float(cpu_scale)
            params.append(Parameter("cpu.scale", scale, "x", "given (--cpu-scale)"))
    elif cpu_scale is not None or cpu_baseline_ms is not None:
        raise InvalidInputError("cpu_scale / cpu_baseline_ms scale a cpu profile: give cpu_profile too")
    used_perf: set[str] = set()
    used: set[str] = set()  # the parameters an answer rested on: only those are listed
    rows = []
    by_backend: dict[str, float] = {}
    by_stage: dict[str, float] = {}
    missing = []
    seen: dict[str, int] = {}
    for n in nodes:
        name, op, b = field_of(n, "name"), field_of(n, "op"), field_of(n, "backend")
        occurrence = seen.get(name, 0)
        seen[name] = occurrence + 1
        stage = field_of(n, "stage", "") or "(graph)"
        if b.lower() in CPU_NAMES and times is not None:  # as measured (a view's time is its share, often 0)
            if (name, occurrence) not in times:
                missing.append(name)
                continue
            t, how = times[(name, occurrence)] * norm * scale, "cpu profile"
        elif op in VIEW_OPS:
            t, how = 0.0, "view"
        else:
            key = b if b in perf else b.lower()
            if key not in perf:
                raise InvalidInputError(f"no performance model for backend {b!r} (node {name})")
            used_perf.add(key)
            fn = (measured or {}).get(key) or (measured or {}).get(b)
            t, how = device_node_ms(n, perf[key], fn, used)
        rows.append({"name": name, "op": op, "backend": b, "stage": stage, "ms": t, "how": how})
        by_backend[b] = by_backend.get(b, 0.0) + t
        by_stage[stage] = by_stage.get(stage, 0.0) + t
    if missing:
        raise InvalidInputError(
            f"the cpu profile has no time for {len(missing)} node(s) of this graph (first: {missing[0]}): "
            "it is of another graph"
        )
    split_rows = []
    copy_total = sync_total = 0.0
    for i, s in enumerate(splits):
        b = field_of(s, "backend")
        key = b if b in perf else b.lower()
        nbytes = int(field_of(s, "input_bytes", 0))
        copy = sync = 0.0
        if key in perf:
            p = perf[key]
            used_perf.add(key)
            if nbytes and not p.host_visible_copies:
                copy = nbytes / (p.copy_gbs.value * 1e9) * 1e3
                used.add(p.copy_gbs.name)
            sync = p.sync_us.value / 1e3
            used.add(p.sync_us.name)
        split_rows.append(
            {
                "index": i,
                "backend": b,
                "input_bytes": nbytes,
                "copy_ms": copy,
                "sync_ms": sync,
                "stage": field_of(s, "stage", ""),
            }
        )
        copy_total += copy
        sync_total += sync
        st = field_of(s, "stage", "") or "(graph)"
        by_stage[st] = by_stage.get(st, 0.0) + copy + sync
    for key in sorted(used_perf):
        p = perf[key]
        params += [q for q in p.parameters() if q.name in used]
        if p.host_visible_copies and any(s["input_bytes"] for s in split_rows if s["backend"].lower() == key):
            params.append(
                Parameter(
                    f"{key}.copy_into_host_visible",
                    0.0,
                    "ms",
                    "assumed: the profile says its buffer is host-visible, so input copies cost nothing",
                )
            )
    total = sum(by_backend.values()) + copy_total + sync_total
    return Prediction(total, by_backend, by_stage, copy_total, sync_total, params, rows, split_rows, notes)
