"""`kzlab.profile(...)`: time the real decoder graph node by node and return a `Profile` of plain data.

(`Profile` is a timing result; a backend's capabilities are `kzlab.analysis.placement.capabilities`.)

A Profile is what plots, widgets, reports and the CLI read, so its field names are an interface:
`config`, `wall_ms`, `profiled_ms`, `overhead_ratio`, `layers`, `nodes`, `splits`, `peak_gflops`,
`evolution`, `wav`. Times are medians over `repeat` runs after `warmup` runs. `wall_ms` is the plain run
(no callback), `profiled_ms` the run with the per-node callback, on the same session and graph;
`overhead_ratio` is what profiling costs: the median over repeats of profiled / plain, each repeat's two runs
taken back to back (their ratios are in `config["overhead_pair_ratios"]`).

What a node's time is: the profiled run is timed in stretches of consecutive nodes (`granularity`, see
`kzlab.runtime.profiler`), each stretch's time measured. A node alone in its stretch has its own measured time
(`timing: "measured"`); the nodes of a longer stretch share its measured time in proportion to a cost model
(`timing: "apportioned"`), so that the rows of a stretch sum to its time exactly (`stretch`, `stretch_ms`); a
view computes nothing (`timing: "view"`, 0). The cost model (`apportion`) is `"calibrated"`: each node's time
alone in the warm-up's profiled runs (taken at node granularity), less the smallest such time (what a
separate compute costs around a node, at most), or `"roofline"`: max(FLOPs / peak, bytes / bandwidth) from the
op table, with a nominal machine balance (only ratios inside a stretch matter). `granularity="auto"` (the
default) measures every node of more than 1/`budget` of the run alone and gathers smaller ones, layer by
layer, into stretches of about that size; `granularity="node"` times every node alone (each a separate
compute, which costs more overhead); `"layer"`, `"split"` or an integer N are in between. The config records
the granularity, the cost model, the number of stretches and the share of the node time measured alone.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.analysis.evolution import evolution as stage_evolution
from kzlab.analysis.flops import CustomFlops, TensorInfo, op_bytes, op_flops
from kzlab.analysis.roofline import achieved, mul_mat_peak
from kzlab.analysis.trace import write_trace as _write_trace
from kzlab.arch import arch_of, not_applicable
from kzlab.codes import random_codes, takes_codes, validate_codes
from kzlab.environment import machine, versions
from kzlab.errors import InvalidOptionError
from kzlab.graph.options import Lowering
from kzlab.loader import load_model
from kzlab.model.model import Model
from kzlab.progress import ProgressFn
from kzlab.runtime.decoder import Decoder
from kzlab.runtime.profiler import DEFAULT_BUDGET, NodeInfo, Profiler, check_granularity
from kzlab.runtime.remote import call_isolated, check_servers, in_worker
from kzlab.runtime.session import Session
from kzlab.runtime.spec import BackendSpec, is_rpc

ROW_KINDS = ("layers", "nodes", "splits", "stages", "ops", "evolution")


@dataclass
class Profile:
    """The result of `kzlab.profile` (see the module docstring for the fields)."""

    config: dict[str, Any]
    wall_ms: float
    profiled_ms: float
    overhead_ratio: float
    layers: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    splits: list[dict[str, Any]]
    peak_gflops: float
    evolution: list[dict[str, Any]]
    wav: np.ndarray | None = field(default=None, repr=False)

    # ---- aggregates -----------------------------------------------------------------------------------
    @property
    def node_time_ms(self) -> float:
        """Sum of the node times: of the stretches' medians (close to `profiled_ms`: the callback timestamps tile
        each run)."""
        return float(sum(n["time_ms"] for n in self.nodes))

    def by_stage(self) -> list[dict[str, Any]]:
        """Time, FLOPs, bytes and MACs per stage, in model order."""
        total = self.node_time_ms or 1.0
        out: dict[str, dict[str, Any]] = {}
        for lay in self.layers:
            r = out.setdefault(
                lay["stage"],
                {"stage": lay["stage"], "n_layers": 0, "time_ms": 0.0, "flops": 0, "bytes": 0, "macs": 0},
            )
            r.setdefault("macs_seed", 0)
            r["n_layers"] += 1
            for k in ("time_ms", "flops", "bytes", "macs", "macs_seed"):
                r[k] += lay[k]
        # nodes outside every layer (views and copies ggml named after their source): to the stage they were
        # attributed to (see _attribute_stages), else to "(graph)"
        paths = {lay["path"] for lay in self.layers}
        for n in self.nodes:
            if n["layer"] in paths:
                continue
            st = n["stage"] or "(graph)"
            r = out.setdefault(st, {"stage": st, "n_layers": 0, "time_ms": 0.0, "flops": 0})
            r.update(bytes=r.get("bytes", 0), macs=r.get("macs", 0), macs_seed=r.get("macs_seed", 0))
            r["time_ms"] += n["time_ms"]
            r["flops"] += n["flops"]
            r["bytes"] += n["bytes"]
        return _with_rates(out.values(), total)

    def by_op(self) -> list[dict[str, Any]]:
        """Time, count, FLOPs and bytes per ggml op, slowest first."""
        total = self.node_time_ms or 1.0
        out: dict[str, dict[str, Any]] = {}
        for n in self.nodes:
            r = out.setdefault(n["op"], {"op": n["op"], "n": 0, "time_ms": 0.0, "flops": 0, "bytes": 0})
            r["n"] += 1
            r["time_ms"] += n["time_ms"]
            r["flops"] += n["flops"]
            r["bytes"] += n["bytes"]
        return sorted(_with_rates(out.values(), total), key=lambda r: -r["time_ms"])

    def by_group(self) -> list[dict[str, Any]]:
        """Time and FLOPs per block kind (the family's stage groups, `config["stage_groups"]`, e.g. all ConvNeXt
        blocks together), in model order, with each one's share of the node time."""
        groups = self.config.get("stage_groups") or {}
        out: dict[str, dict[str, Any]] = {}
        for r in self.by_stage():
            grp = groups.get(r["stage"], r["stage"].split(".")[0])
            g = out.setdefault(grp, {"group": grp, "n_stages": 0, "time_ms": 0.0, "flops": 0, "bytes": 0})
            g["n_stages"] += 1
            for k in ("time_ms", "flops", "bytes"):
                g[k] += r[k]
        return _with_rates(out.values(), self.node_time_ms or 1.0)

    def share(self, stage_prefix: str = "decoder.") -> float:
        """Fraction of the node time spent in stages whose name starts with `stage_prefix`."""
        total = self.node_time_ms
        part = sum(n["time_ms"] for n in self.nodes if n["stage"].startswith(stage_prefix))
        return part / total if total else 0.0

    # ---- export ---------------------------------------------------------------------------------------
    def rows(self, kind: str = "layers") -> list[dict[str, Any]]:
        """Plain rows of one table: layers, nodes, splits, stages, ops or evolution."""
        if kind not in ROW_KINDS:
            raise InvalidOptionError(f"rows({kind!r}): one of {', '.join(ROW_KINDS)}")
        if kind == "stages":
            return self.by_stage()
        if kind == "ops":
            return self.by_op()
        return [dict(r) for r in getattr(self, kind)]

    def dataframe(self, kind: str = "layers"):
        """rows(kind) as a pandas DataFrame (pandas is optional)."""
        import pandas as pd

        return pd.DataFrame(self.rows(kind))

    def to_dict(self) -> dict[str, Any]:
        """Everything but the waveform, JSON-ready."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "wav"}
        d["node_time_ms"] = self.node_time_ms
        d["stages"] = self.by_stage()
        d["ops"] = self.by_op()
        return json.loads(json.dumps(d, default=_jsonable))

    def to_json(self, path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=1))
        return p

    def write_trace(self, path) -> Path:
        """Chrome trace JSON (Perfetto): a track per backend, stages > layers > ops, microseconds."""
        stage_of = {lay["path"]: lay["stage"] for lay in self.layers}
        return _write_trace(path, self.nodes, stage_of, f"kzlab {Path(self.config.get('model', '')).name}")


def _with_rates(rows, total_ms: float) -> list[dict[str, Any]]:
    """Aggregated rows with their share of the node time and their achieved GF/s added."""
    rows = list(rows)
    for r in rows:
        r["share"] = r["time_ms"] / total_ms
        r["gflops"] = achieved(r["flops"], r["time_ms"])
    return rows


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


# ---- building a Profile ----------------------------------------------------------------------------------
def _layer_rows(records, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    per: dict[str, dict[str, Any]] = {}
    for n in nodes:
        r = per.setdefault(n["layer"], {"time_ms": 0.0, "flops": 0, "bytes": 0, "bt": {}})
        r["time_ms"] += n["time_ms"]
        r["flops"] += n["flops"]
        r["bytes"] += n["bytes"]
        if not n["is_view"]:
            r["bt"][n["backend"]] = r["bt"].get(n["backend"], 0.0) + n["time_ms"] + 1e-12
    rows = []
    for rec in records:
        agg = per.get(rec.path, {"time_ms": 0.0, "flops": 0, "bytes": 0, "bt": {}})
        bt = agg["bt"]
        rows.append(
            {
                "path": rec.path,
                "stage": rec.stage,
                "kind": rec.kind,
                "c_in": rec.c_in,
                "c_out": rec.c_out,
                "kernel": rec.kernel,
                "t_in": rec.t_in,
                "t_out": rec.t_out,
                "macs": rec.macs,
                "macs_seed": rec.macs_seed,
                "time_ms": agg["time_ms"],
                "flops": agg["flops"],
                "bytes": agg["bytes"],
                "backend": max(bt, key=bt.get) if bt else "",
                "backends": sorted(bt),
                "extra": dict(rec.extra),
            }
        )
    return rows


def _node_cost(n, custom: CustomFlops | None = None) -> tuple[int, int]:
    """(FLOPs, bytes moved) of a measured node, from the op table (`custom`: the family's count of its custom
    nodes)."""
    out = TensorInfo(tuple(n.ne), n.type, n.nbytes)
    srcs = [TensorInfo(tuple(ne), t, nb) for ne, t, nb in zip(n.src_ne, n.src_types, n.src_nbytes, strict=True)]
    return op_flops(n.op, out, srcs, custom=custom, name=n.name), op_bytes(n.op, out, srcs)


APPORTION = ("auto", "calibrated", "roofline")
# the roofline cost model's machine: only the balance (FLOPs per byte) matters, as it weighs nodes inside a stretch
ROOFLINE_GFLOPS = 100.0
ROOFLINE_GBS = 20.0


def _roofline_ms(cost: tuple[int, int]) -> float:
    """Roofline time of a node of (FLOPs, bytes) on the nominal machine, in milliseconds."""
    return max(cost[0] / (ROOFLINE_GFLOPS * 1e6), cost[1] / (ROOFLINE_GBS * 1e6))


def _roofline_estimate(n: NodeInfo, custom: CustomFlops | None = None) -> float:
    return _roofline_ms(_node_cost(n, custom))


def _calibrated_ms(nodes: list[NodeInfo], costs: list[tuple[int, int]]) -> dict[int, float]:
    """Each compute node's median time alone in the calibration runs, less the smallest of them (about what a
    separate compute costs around any node), and never below the node's roofline time (so that no node that
    reads or writes anything is weighed 0)."""
    med = {n.index: float(np.median(n.calib_ms)) for n in nodes if not n.is_view and n.calib_ms}
    floor = min(med.values(), default=0.0)
    return {i: max(t - floor, _roofline_ms(costs[i])) for i, t in med.items()}


def _apportion(meas, costs: list[tuple[int, int]], model: str) -> dict[int, tuple[float, float]]:
    """node index -> (its share of its stretch's time, the stretch's time) for every compute node.

    A node alone in its stretch has share 1. Within a longer stretch the shares are the model's weights
    normalized to 1; where every weight of a stretch is 0, the stretch is shared equally.
    """
    calib = _calibrated_ms(meas.nodes, costs) if model == "calibrated" else {}
    out: dict[int, tuple[float, float]] = {}
    for st in meas.stretches:
        if not st.compute:
            continue
        if model == "calibrated":
            w = [calib.get(i, 0.0) for i in st.compute]
        else:
            w = [_roofline_ms(costs[i]) for i in st.compute]
        if sum(w) <= 0:
            w = [1.0] * len(st.compute)
        total = sum(w)
        for i, wi in zip(st.compute, w, strict=True):
            out[i] = (wi / total, st.time_ms)
    return out


def _attribute_stages(nodes, stage_of: dict[str, str]) -> dict[int, str]:
    """node index -> its stage. A node of a layer has its layer's stage. A node outside every layer (ggml names a
    view, reshape or copy after its source, e.g. `x.weight (reshaped)` or ` (view) (cont)`, so the builder's
    layer naming misses it) takes the stage of its first source node that has one (sources come first in graph
    order), else of its first consumer that has one; a node with neither stays outside ("")."""
    out = {n.index: stage_of.get(n.layer, "") for n in nodes}
    for n in nodes:
        if not out[n.index]:
            out[n.index] = next((out[i] for i in n.src_nodes if out.get(i)), "")
    for n in reversed(nodes):  # consumers come after their sources: walk back
        if out[n.index]:
            for i in n.src_nodes:
                if i in out and not out[i]:
                    out[i] = out[n.index]
    return out


def _node_rows(
    meas, stage_of: dict[str, str], model: str, custom: CustomFlops | None = None, custom_label=None
) -> list[dict[str, Any]]:
    nodes = meas.nodes
    costs = [_node_cost(n, custom) for n in nodes]
    shares = _apportion(meas, costs, model)
    stages = _attribute_stages(nodes, stage_of)
    rows = []
    for n, cost in zip(nodes, costs, strict=True):
        st = meas.stretches[n.stretch] if 0 <= n.stretch < len(meas.stretches) else None
        share, stretch_ms = shares.get(n.index, (0.0, st.time_ms if st else 0.0))
        if n.is_view:
            timing = "view"
        elif st is not None and st.measured_alone:
            timing = "measured"
        else:
            timing = "apportioned"
        rows.append(
            {
                "index": n.index,
                "name": n.name,
                "op": n.op,
                "layer": n.layer,
                "stage": stages[n.index],
                "backend": n.backend,
                "time_ms": share * stretch_ms,
                "spread_ms": share * (st.spread_ms if st else 0.0),
                "timing": timing,
                "stretch": n.stretch,
                "stretch_ms": stretch_ms,
                "flops": cost[0],
                "bytes": cost[1],
                "ne": list(n.ne),
                "type": n.type,
                "src_names": n.src_names,
                "src_ne": [list(x) for x in n.src_ne],
                "src_types": n.src_types,
                "is_view": n.is_view,
                "fused": (custom_label(n.name, n.src_ne) or "") if custom_label and n.op.startswith("CUSTOM") else "",
            }
        )
    return rows


def profile(
    model_or_path,
    frames: int | None = 31,
    codes=None,
    backend: str | list[str] | None = None,
    threads: int | None = None,
    sched: bool | None = None,
    op_offload: bool = True,
    weights_on: str | None = None,
    lowering: Lowering | None = None,
    repeat: int = 5,
    warmup: int = 1,
    layout=None,
    seed: int = 0,
    peak: bool = True,
    backends: BackendSpec | None = None,
    progress: ProgressFn | bool | None = None,
    granularity: str | int = "auto",
    apportion: str = "auto",
    budget: int = DEFAULT_BUDGET,
    stream: int | None = None,
    warm: int | None = None,
    **lowering_kw,
) -> Profile:
    """Profile one decode of `codes` (or of `frames` random frames) on the given backend setup.

    `model_or_path`: a decoder file / HF directory, a loaded `Model`, or a `Decoder` (its model and, unless
    given here, its lowering request). Backends: `backends=BackendSpec(...)` or its fields as keywords
    (`sched=False` means no scheduler). Lowering options may be passed as `lowering=Lowering(...)` or as keywords
    (`conv="ktap"`, `mode="portable"`). `peak=False` skips the MUL_MAT microbenchmark (peak_gflops is then 0).
    `progress` reports the runs (None: a bar unless kzlab is quiet; False: none; or fn(done, total)).
    `granularity` ("auto", "node", "layer", "split" or an integer), `apportion` ("auto": "calibrated" when
    there is a warm-up, else "roofline") and `budget` ("auto": about how many stretches) say how node times are
    measured and shared out (see the module docstring).
    The config records what was asked (`*_requested`) next to what ran (backend, sched, mode,
    `lowering_resolved`, granularity, apportion, `codebooks_used`: codes with fewer codebooks than the decoder's,
    where its family decodes the first n, are profiled in the graph built for n, as decode runs them).

    `stream=K`: profile one call of a stateful stream (`Decoder.stream`, a causal family) of K frames instead of
    a whole decode: the call's graph (its state as inputs and outputs) at stream position `warm`, with the state
    that pushing `warm` frames in calls of K left (default: enough calls of K to fill the longest state tensor,
    e.g. an attention layer's window of keys, so that every tensor holds real frames); the codes are `codes` (its
    first T - K frames warm the state, the last K are the profiled call) or `warm + K` random frames. The graph is
    built in the streaming plan (`LoweringPlan.for_stream`): `lowering_resolved` is that plan and
    `config["stream"]` says what was profiled (frames, position, the state's tensors and bytes, the choices the
    streaming plan changes).
    """
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise InvalidOptionError(f"repeat={repeat!r}: expected an integer >= 1")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise InvalidOptionError(f"warmup={warmup!r}: expected an integer >= 0")
    granularity = check_granularity(granularity)
    if apportion not in APPORTION:
        raise InvalidOptionError(f"apportion={apportion!r}: one of {', '.join(map(repr, APPORTION))}")
    if granularity == "node":
        model_used = "none"  # every node is measured alone: nothing to apportion, nothing to calibrate
    elif apportion == "calibrated" and warmup < 1:
        raise InvalidOptionError('apportion="calibrated" calibrates on the warm-up runs: it needs warmup >= 1')
    else:
        model_used = apportion if apportion != "auto" else ("calibrated" if warmup >= 1 else "roofline")
    spec = BackendSpec.from_kw(
        backends, backend=backend, threads=threads, sched=sched, op_offload=op_offload, weights_on=weights_on
    )
    if isinstance(model_or_path, Decoder):
        model = model_or_path.model
        lowering = lowering or model_or_path.plan.requested or model_or_path.plan
    elif isinstance(model_or_path, Model):
        model = model_or_path
    else:
        model = load_model(model_or_path, layout=layout)
    if lowering_kw:
        lowering = (lowering or Lowering()).replace(**lowering_kw)
    lowering = lowering or Lowering()
    hp = model.hparams
    if stream is not None:
        check_stream_call(hp, stream, warm, codes)
    if codes is not None:
        if hp.num_quantizers == 1 and np.ndim(codes) == 1:  # [T] for a one-codebook family, as decode takes
            codes = np.asarray(codes)[None, :]
        c = validate_codes(codes, hp)
        if takes_codes(hp):  # codes of fewer codebooks than the decoder's: the graph decode runs for the first n
            model = model.for_codebooks(int(c.shape[0]))
            hp = model.hparams
        if stream is not None and c.shape[1] <= stream:
            raise InvalidOptionError(f"stream={stream}: the codes' {c.shape[1]} frames leave none to warm the state "
                                     f"(the last {stream} are the profiled call); pass more, or no codes")
    elif stream is not None:
        c = None  # random frames once the state's length is known (the session's graph of K frames)
    else:
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
            raise InvalidOptionError(f"frames={frames!r}: expected an integer >= 1 (or pass codes=)")
        c = random_codes(hp, frames, seed)
    T = int(stream) if stream is not None else int(c.shape[1])  # the profiled graph's frames
    if any(is_rpc(n) for n in spec.names()) and not in_worker():
        # ggml aborts the process when an RPC server goes away: profile in a worker process, as decode does
        check_servers(spec.names())
        prof = call_isolated(
            "kzlab.analysis.profile:profile", model, codes=c, backends=spec, lowering=lowering, repeat=repeat,
            warmup=warmup, peak=peak, progress=False, granularity=granularity, apportion=apportion, budget=budget,
            stream=stream, warm=warm, seed=seed, label=", ".join(spec.names()), doing="profiling",
        )
        prof.config["isolated"] = "worker process"
        return prof
    custom = arch_of(hp).custom_flops
    with Session(model, lowering, spec) as s:
        call = stream_call(s, stream, warm, c, seed) if stream is not None else None
        meas = Profiler(s).measure(
            T,
            call.inputs if call else {"codes": c},
            repeat=repeat,
            warmup=warmup,
            progress=progress,
            granularity=granularity,
            calibrate=model_used == "calibrated",
            estimate=functools.partial(_roofline_estimate, custom=custom),
            budget=budget,
            stream=call is not None,
        )
        records = list(s.graph(T, stream=call is not None).layers)
        rb = s.resolved
        plan = s.plan.for_stream()[0] if call else s.plan  # what the profiled graph was built from
        config = {
            **plan.to_dict(),
            "mode": plan.mode,
            "lowering": plan.to_dict(),
            "lowering_resolved": plan.to_dict(),
            "lowering_requested": plan.request_dict(),
            "lowering_label": plan.label(not_applicable(hp)),
            "backend": list(rb.names),
            "backend_label": rb.label,
            "backend_requested": _request_text(spec.backend),
            "threads": rb.threads,
            "sched": rb.sched,
            "sched_requested": spec.sched,
            "op_offload": rb.op_offload,
            "weights_on": rb.weights_on,
            "family": arch_of(hp).name,
            "codebooks_used": int(hp.num_quantizers) if takes_codes(hp) else None,
            "stage_groups": {st.name: st.group for st in arch_of(hp).stages(hp)},
            "frames": T,
            "samples": int(meas.output.shape[-1]) if meas.output is not None else 0,
            "model": str(model.path),
            "layout": model.layout,
            "repeat": repeat,
            "warmup": warmup,
            "n_nodes": len(meas.nodes),
            "n_splits_read": meas.n_splits_read,
            "n_splits_derived": len(meas.splits),
            "compute_bytes": meas.compute_bytes,
            "wall_all_ms": meas.wall_all_ms,
            "profiled_all_ms": meas.profiled_all_ms,
            "overhead_pair_ratios": meas.pair_ratios,
            "node_sum_all_ms": meas.node_sum_all_ms,
            "granularity": meas.granularity,
            "granularity_requested": granularity,
            "stretch_budget": meas.budget,
            "stretches_planned_on": {"calibration": "calibration", "estimate": "roofline"}.get(meas.planned_on, ""),
            "n_stretches": len(meas.stretches),
            "apportion": model_used,
            "apportion_requested": apportion,
            "calibration_runs": len(meas.calib_all_ms),
            "calib_all_ms": meas.calib_all_ms,
            "isolated": "",
            "versions": versions(),
            "machine": machine(),
            "stream": call.config() if call else None,
        }
        if call:
            config["graph"] = f"one streaming call of {T} frames at position {call.position}"
            config["lowering_stream_changes"] = dict(call.plan_changes)
    peak_info = mul_mat_peak(config["threads"]) if peak else {"gflops": 0.0}
    config["peak"] = peak_info
    stage_of = {r.path: r.stage for r in records}
    nodes = _node_rows(meas, stage_of, model_used, custom, arch_of(hp).custom_label)
    total = sum(n["time_ms"] for n in nodes)
    config["n_measured"] = sum(n["timing"] == "measured" for n in nodes)
    config["n_apportioned"] = sum(n["timing"] == "apportioned" for n in nodes)
    config["measured_share"] = sum(n["time_ms"] for n in nodes if n["timing"] == "measured") / total if total else 0.0
    if model_used == "roofline":
        config["roofline_machine"] = {"gflops": ROOFLINE_GFLOPS, "gbs": ROOFLINE_GBS, "nominal": True}
    return Profile(
        config=config,
        wall_ms=meas.wall_ms,
        profiled_ms=meas.profiled_ms,
        overhead_ratio=meas.overhead_ratio,
        layers=_layer_rows(records, nodes),
        nodes=nodes,
        splits=meas.splits,
        peak_gflops=float(peak_info["gflops"]),
        evolution=stage_evolution(records),
        wav=meas.output,
    )


# ---- one call of a stream ---------------------------------------------------------------------------------
def check_stream_call(hp, stream, warm, codes) -> None:
    """Refuse what `profile(stream=K)` cannot profile: a family that does not stream with its state, a bad K or
    warm-up."""
    arch = arch_of(hp)
    if not getattr(arch, "causal", False):
        raise InvalidOptionError(
            f"stream={stream!r}: the {arch.name} family is not causal, so it has no streaming call of its own (it "
            "streams in overlapping windows, each call an offline decode of its window: profile that with frames=)"
        )
    if isinstance(stream, bool) or not isinstance(stream, int | np.integer) or stream < 1:
        raise InvalidOptionError(f"stream={stream!r}: expected the frames of one call, an integer >= 1")
    if warm is not None and (isinstance(warm, bool) or not isinstance(warm, int | np.integer) or warm < 0):
        raise InvalidOptionError(f"warm={warm!r}: expected the frames pushed before the call, an integer >= 0")
    if warm is not None and codes is not None:
        raise InvalidOptionError("warm= and codes= both say where the call is: with codes, every frame before the "
                                 "last K warms the state")


@dataclass
class ProfiledCall:
    """The streaming call `profile(stream=K)` times: every input of its graph at stream position `position`, with
    the state the calls before it left."""

    frames: int
    position: int
    warm_calls: list[int]
    inputs: dict[str, np.ndarray]
    state: list[dict[str, Any]]
    plan_changes: dict[str, str]
    codes: str

    def config(self) -> dict[str, Any]:
        return {
            "call_frames": self.frames,
            "position": self.position,
            "warmed_by": self.warm_calls,
            "codes": self.codes,
            "state_tensors": len(self.state),
            "state_bytes": sum(r["nbytes"] for r in self.state),
            "state": self.state,
            "plan_changes": self.plan_changes,
        }


def stream_call(s: Session, k: int, warm: int | None, codes: np.ndarray | None, seed: int = 0) -> ProfiledCall:
    """Push the warm-up frames through `s` in calls of `k` (`Session.run_stream`), then give every input of the
    next call of `k` frames: its codes, the state the warm-up left (`state:<key>`, as the graph names it) and the
    positions and mask the family's graph half feeds at that position (`Session.stream_feed`)."""
    hp = s.model.hparams
    bg = s.graph(k, stream=True)
    slots = bg.builder.carry.slots
    if codes is None:
        longest = max((sl.frames for sl in slots.values()), default=0)
        position = -(-longest // k) * k if warm is None else int(warm)
        codes = random_codes(hp, position + k, seed)
        source = f"random (seed {seed})"
    else:
        position = int(codes.shape[1]) - k
        source = "given"
    state: dict[str, np.ndarray] = {}
    sizes, at = [], 0
    while at < position:
        n = min(k, position - at)
        _, state, _ = s.run_stream(n, {"codes": codes[:, at : at + n]}, state, at)
        sizes.append(n)
        at += n
    feed = s.stream_feed(bg, position, state)  # zeros for a slot no call wrote: the stream's start
    records = [{"key": key, "kind": sl.kind, "channels": int(sl.channels), "frames": int(sl.frames),
                "nbytes": int(feed[f"state:{key}"].nbytes)} for key, sl in slots.items()]
    feed["codes"] = np.ascontiguousarray(codes[:, position : position + k])
    return ProfiledCall(k, position, sizes, feed, records, dict(s.plan.for_stream()[1]), source)


def _request_text(backend: str | tuple[str, ...]) -> str | list[str]:
    return backend if isinstance(backend, str) else list(backend)
