"""`kzlab.simulate`: where ggml_backend_sched would run every node of the decoder graph on a backend set.

The graph is the one kzlab builds for the given lowering; the backends are capability profiles (a
Hexagon NPU of a given ggml version, BLAS, CUDA, RPC, the CPU), so the placement can be predicted on a
laptop for a device that is not attached. The scheduler passes are in `sched.py`; this module turns
their output into per-node reasons, splits, copies, per-stage totals and a per-conv verdict table.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ggml import ggml as g

from kzlab.analysis.flops import TensorInfo, op_bytes, op_flops
from kzlab.analysis.placement import capabilities
from kzlab.analysis.placement.capabilities import BufferType, Capabilities
from kzlab.analysis.placement.defects import APPROXIMATION, approximate_nodes, kind_of, wrong_nodes
from kzlab.analysis.placement.defects import summarize as summarize_defects
from kzlab.analysis.placement.graph import build, stage_of_nodes
from kzlab.analysis.placement.rules import addr
from kzlab.analysis.placement.sched import Buffer, Result, SimBackend, Simulator
from kzlab.analysis.predict.whatif import PredictOptions, predict_placement
from kzlab.arch import not_applicable
from kzlab.errors import InvalidOptionError
from kzlab.graph.options import Lowering
from kzlab.loader import load_model
from kzlab.model.model import Model
from kzlab.runtime.profiler import tensor_ne, type_name

CAUSES = {
    "1.dst": "pinned by its buffer",
    "1.vsrc": "view of a pre-allocated tensor",
    "1.inp": "graph input (last backend)",
    "1.off": "offloaded by op_offload",
    "2.gpu-down": "expanded down from a non-CPU node",
    "2.gpu-up": "expanded up from a non-CPU node",
    "2.rest-down": "expanded down",
    "2.rest-up": "expanded up",
    "3.best": "fallback: backend with the most usable inputs",
    "3.upg": "upgraded to a higher-priority backend with the same buffer type",
    "4.vsrc": "view follows its source",
    "4.cur": "follows its consumer",
    "4.first": "fallback: first backend that supports it",
}


@dataclass
class NodePlacement:
    name: str
    op: str
    layer: str
    stage: str
    backend: str
    reason: str
    cause: str
    refused: dict[str, str] = field(default_factory=dict)
    #: what the node computes, for the time model: shape (ggml ne), type, its sources', FLOPs and bytes moved
    ne: tuple[int, ...] = ()
    type: str = ""
    src_ne: list[tuple[int, ...]] = field(default_factory=list)
    src_types: list[str] = field(default_factory=list)
    flops: int = 0
    bytes: int = 0
    #: the kernel path the node takes on its backend where the profile names one (a product's "hmx" or "hvx")
    path: str = ""
    #: the known defect of that path the node hits (its id in the profile's `[[defects]]`, "" for none), and why
    defect: str = ""
    defect_reason: str = ""
    #: that defect's kind (`defects.KINDS`: "wrong", or "approximation", judged by the emulated decode)
    defect_kind: str = ""


@dataclass
class SplitInfo:
    backend: str
    n_nodes: int
    input_bytes: int
    n_inputs: int
    first_node: str
    stage: str
    inputs: list[str] = field(default_factory=list)
    input_sources: list[str] = field(default_factory=list)  # the tensor behind each input (a view's source)


@dataclass
class ConvVerdict:
    layer: str
    kind: str
    stage: str
    c_in: int
    c_out: int
    kernel: int
    t_in: int
    src1: str
    mul_mats: int
    src1_rows: int
    backends: str
    verdict: str
    rule: str
    reason: str


@dataclass
class Placement:
    """A simulated scheduler placement; plain data (to_dict / to_json)."""

    config: dict[str, Any]
    nodes: list[NodePlacement]
    splits: list[SplitInfo]
    copied_bytes: int
    n_copies: int
    stages: list[dict[str, Any]]
    convs: list[ConvVerdict]
    #: the time model's answer (`simulate(..., predict=...)`), and each backend's memory against its budget
    predicted: Any = None
    memory: dict[str, Any] | None = None
    #: the profile's known defects that nodes of this placement hit (`defects.summarize`: each with its nodes)
    defects: list[dict[str, Any]] = field(default_factory=list)

    @property
    def defect_nodes(self) -> int:
        """How many nodes run on a kernel path that computes wrong values (whatever the data)."""
        return wrong_nodes(self.defects)

    @property
    def approximate_nodes(self) -> int:
        """How many nodes run on a kernel path that computes an approximation of their op (right or wrong by the
        emulated decode against the bound)."""
        return approximate_nodes(self.defects)

    @property
    def n_splits(self) -> int:
        return len(self.splits)

    def by_backend(self) -> dict[str, int]:
        return dict(Counter(n.backend for n in self.nodes if n.op not in ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE")))

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "nodes": [asdict(n) for n in self.nodes],
            "splits": [asdict(s) for s in self.splits],
            "copied_bytes": self.copied_bytes,
            "n_copies": self.n_copies,
            "stages": self.stages,
            "convs": [asdict(c) for c in self.convs],
            "defects": self.defects,
            **({"predicted": self.predicted.to_dict()} if self.predicted is not None else {}),
            **({"memory": {k: m.to_dict() for k, m in self.memory.items()}} if self.memory is not None else {}),
        }

    def to_json(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=1))
        return p

    def summary(self) -> str:
        """The per-conv verdict table, then split and copy totals."""
        c = self.config
        lines = [
            f"profile {c['profile']} ({' > '.join(c['backends'])}), {c['frames']} frames, "
            f"weights on {c['weights_on']}, op_offload={c['op_offload']}",
            f"lowering ({c.get('mode', 'portable')} mode): {c['lowering_label']}",
            "",
            f"{'conv layer':<18}{'kind':<6}{'T':>7}{'c_out':>6} {'src1':<7}{'rows':>7}{'mm':>4}  {'on':<9}verdict",
        ]
        for v in self.convs:
            kind = "convT" if v.kind == "conv_transpose1d" else "conv"
            why = f"  ({v.rule}: {v.reason})" if v.reason else ""
            lines.append(
                f"{v.layer:<18}{kind:<6}{v.t_in:>7}{v.c_out:>6} {v.src1:<7}{v.src1_rows:>7}{v.mul_mats:>4}  "
                f"{v.backends:<9}{v.verdict}{why}"
            )
        lines.append(
            "src1 = data: the conv MUL_MAT is mul_mat(kernel, columns), src1 rows = T; src1 = kernel: ggml_conv_1d's "
            "order mul_mat(columns, kernel), src1 rows = c_out"
        )
        acc = sum(v.verdict == "accepted" for v in self.convs)
        lines.append(f"conv verdicts: {acc} accepted, {len(self.convs) - acc} not (of {len(self.convs)})")
        per = Counter(s.backend for s in self.splits)
        lines.append(
            f"splits: {self.n_splits} ({', '.join(f'{k} {v}' for k, v in per.items())}); "
            f"copied {self.copied_bytes / 1e6:.2f} MB in {self.n_copies} tensor copies"
        )
        lines.append("per stage: nodes by backend, splits starting there, MB copied into them")
        for r in self.stages:
            by = " ".join(f"{k}={v}" for k, v in r["by_backend"].items())
            lines.append(f"  {r['stage']:<16}{by:<20}{r['splits']:>4} splits {r['input_bytes'] / 1e6:>9.2f} MB")
        per_node = ", ".join(f"{k} {v}" for k, v in self.by_backend().items())
        lines.append(f"nodes per backend (views excluded): {per_node}")
        lines += self.defect_lines()
        return "\n".join(lines)

    def defect_lines(self) -> list[str]:
        """The known defects this placement hits, each with its nodes per stage, source and fix ([] for none)."""
        out = []
        for d in self.defects:
            per = ", ".join(f"{k} {v}" for k, v in d["by_stage"].items())
            if kind_of(d) == APPROXIMATION:
                head = (f"APPROXIMATION: {d['n_nodes']} node(s) on a path that computes another function: "
                        f"{d['title']} [{d['id']}]; per stage: {per}; right or wrong by the emulated decode against "
                        "the bound (kzlab compare MODEL --device PROFILE)")
            else:
                head = (f"WRONG OUTPUT: {d['n_nodes']} node(s) ({d['gflop']:.1f} GFLOP) on a defective path: "
                        f"{d['title']} [{d['id']}]; per stage: {per}")
            out += [head, f"  source: {d['source']}", f"  holds for: {d['versions']}", f"  fix: {d['fix']}"]
        return out


# ---- backend sets -------------------------------------------------------------------------------------------
def backend_set(profile: str | Capabilities) -> list[SimBackend]:
    """The scheduler's list for a profile: that backend first, the CPU last (a lone CPU for `cpu`)."""
    p = profile if isinstance(profile, Capabilities) else capabilities.load(profile)
    cpu = capabilities.load("cpu")
    cpu_b = SimBackend(cpu.backend, cpu, cpu.buffer)
    if p.name == "cpu":
        return [cpu_b]
    return [SimBackend(p.backend, p, p.buffer), cpu_b]


def custom_backends(spec: list[tuple[str, str | Capabilities, str]]) -> list[SimBackend]:
    """[(backend name, profile, buffer type id), ...], highest priority first and the CPU last. Backends given
    the same buffer type id share one buffer type (as BLAS and the CPU do), which the upgrade pass relies on."""
    out = []
    for name, prof, buft_id in spec:
        p = prof if isinstance(prof, Capabilities) else capabilities.load(prof)
        out.append(SimBackend(name, p, BufferType(buft_id, p.buffer.kind, p.buffer.host)))
    if not out or out[-1].profile.name != "cpu":
        raise InvalidOptionError("the backend list must end with the CPU (profile 'cpu')")
    return out


def _weights_buft(backends: list[SimBackend], weights_on: str) -> BufferType:
    w = weights_on.lower()
    for b in backends:
        if b.name.lower() == w or b.profile.name == w:
            return b.buft
    if w in ("device", "htp", "npu", "gpu") and len(backends) > 1:
        return backends[0].buft
    raise InvalidOptionError(f"weights_on={weights_on!r}: one of {[b.name.lower() for b in backends]}")


# ---- result shaping -------------------------------------------------------------------------------------------
def _info(ptr) -> TensorInfo:
    return TensorInfo(tensor_ne(ptr), type_name(ptr), int(g.ggml_nbytes(ptr)))


def describe(res: Result, sim: Simulator, layers) -> tuple[list[NodePlacement], list[SplitInfo]]:
    names = [t.name for t in sim.nodes]
    paths, stages = stage_of_nodes(names, layers)
    bname = [b.name for b in res.backends]
    nodes = []
    for i, t in enumerate(sim.nodes):
        b = res.node_backend[i]
        refused = {bname[c]: f"{r[0]}: {r[1]}" for c, r in res.refusals[i].items()}
        cause = res.node_cause[i]
        reason = CAUSES.get(cause, cause)
        if cause.startswith("1.wgt"):
            reason = f"pinned by weights (src{cause[5:]})"
        higher = [
            f"refused by {bname[c]} ({res.refusals[i][c][0]}: {res.refusals[i][c][1]})"
            for c in range(b)
            if c in res.refusals[i]
        ]
        if higher:
            reason += "; " + "; ".join(higher)
        op = g.ggml_op_desc(t.ptr).decode()
        out = _info(t.ptr)
        srcs = [_info(sp) for sp in t.srcs]
        prof = res.backends[b].profile
        kernel = prof.kernel_path(t.ptr, sim) if b != len(bname) - 1 else ""
        hit = prof.defect(t.ptr, kernel) if b != len(bname) - 1 else None
        nodes.append(
            NodePlacement(
                t.name, op, paths[i], stages[i], bname[b], reason, cause, refused,
                ne=out.ne, type=out.type, src_ne=[x.ne for x in srcs], src_types=[x.type for x in srcs],
                flops=op_flops(op, out, srcs), bytes=op_bytes(op, out, srcs), path=kernel,
                defect=hit[0]["id"] if hit else "", defect_reason=hit[1] if hit else "",
                defect_kind=kind_of(hit[0]) if hit else "",
            )
        )
    splits = [
        SplitInfo(
            bname[s.backend],
            s.i_end - s.i_start,
            s.input_bytes,
            len(s.inputs),
            names[s.i_start],
            stages[s.i_start],
            [sim.info[a].name for a in s.inputs],
            [sim.info[sim.info[a].view_src or a].name for a in s.inputs],
        )
        for s in res.splits
    ]
    return nodes, splits


def stage_totals(nodes: list[NodePlacement], splits: list[SplitInfo]) -> list[dict[str, Any]]:
    order: dict[str, dict[str, Any]] = {}
    for n in nodes:
        row = order.setdefault(
            n.stage, {"stage": n.stage, "nodes": 0, "by_backend": Counter(), "splits": 0, "input_bytes": 0,
                      "defect_nodes": 0, "approximate_nodes": 0}
        )
        row["nodes"] += 1
        approx = n.defect_kind == APPROXIMATION
        row["defect_nodes"] += bool(n.defect) and not approx
        row["approximate_nodes"] += bool(n.defect) and approx
        if n.op not in ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"):
            row["by_backend"][n.backend] += 1
    for s in splits:
        row = order[s.stage]
        row["splits"] += 1
        row["input_bytes"] += s.input_bytes
    return [dict(r, by_backend=dict(r["by_backend"])) for r in order.values()]


def conv_verdicts(nodes: list[NodePlacement], sim: Simulator, layers, low: Lowering, first: str) -> list[ConvVerdict]:
    """For each conv1d / conv-transpose layer: its MUL_MATs (or conv op), src1 rows, where they run and why."""
    by_layer: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        by_layer.setdefault(n.layer, []).append(i)
    out = []
    for r in layers:
        if r.kind not in ("conv1d", "conv_transpose1d") or "groups" in r.extra or r.extra.get("projection"):
            continue
        idx = by_layer.get(r.path, [])
        mm = [i for i in idx if nodes[i].op == "MUL_MAT"]
        if r.kind == "conv1d":
            src1 = "data" if low.conv_src1 == "data" else "kernel"
        else:
            src1 = "data" if low.convt in ("col2im", "shift") else "-"
        key = mm or [i for i in idx if nodes[i].op in ("CONV_TRANSPOSE_1D", "COL2IM_1D", "IM2COL")]
        rows = max((int(g.ggml_nrows(sim.nodes[i].ptr.contents.src[1])) for i in mm), default=0)
        on = sorted({nodes[i].backend for i in key})
        refused = [(nodes[i].refused[first]) for i in key if first in nodes[i].refused]
        if not key:
            verdict, rule, reason = "n/a", "", ""
        elif all(nodes[i].backend == first for i in key):
            verdict, rule, reason = "accepted", "", ""
        else:
            verdict = "refused" if refused else "not placed"
            rule, _, reason = refused[0].partition(": ") if refused else ("", "", "placed elsewhere by the scheduler")
        out.append(
            ConvVerdict(
                r.path,
                r.kind,
                r.stage,
                r.c_in,
                r.c_out,
                r.kernel,
                r.t_in,
                src1,
                len(mm),
                rows,
                "+".join(on),
                verdict,
                rule,
                reason,
            )
        )
    return out


def stage_selection(stages: list[str] | str | None) -> list[str] | None:
    """`stages` as a list of names (a string may join several with `+`), None for all."""
    if stages is None:
        return None
    items = stages.split("+") if isinstance(stages, str) else list(stages)
    items = [str(x).strip() for x in items if str(x).strip()]
    if not items:
        raise InvalidOptionError(f"stages={stages!r} names no stage (e.g. stages=decoder)")
    return items


def in_stages(stage: str, selection: list[str]) -> bool:
    """A stage is selected by its own name or by a prefix of it that ends at a dot (`decoder` selects `decoder.2`)."""
    return any(stage == s or stage.startswith(s + ".") for s in selection)


def _pin_outside(sim: Simulator, layers, stages: list[str] | str | None) -> list[str] | None:
    """Refuse the device backends every node outside the selected stages (they run on the CPU path)."""
    selection = stage_selection(stages)
    if selection is None:
        return None
    _, node_stages = stage_of_nodes([t.name for t in sim.nodes], layers)
    known = list(dict.fromkeys(node_stages))
    bad = [s for s in selection if not any(in_stages(k, [s]) for k in known)]
    if bad:
        kind = known[-1].split(".")[0]
        raise InvalidOptionError(f"stages: {', '.join(bad)} is not a stage of this graph (its stages: "
                                 f"{', '.join(known)}; a prefix such as {kind} takes all of its kind)")
    why = f"outside the stages under the scheduler ({'+'.join(selection)}): runs on the CPU path"
    outside = [t.addr for t, st in zip(sim.nodes, node_stages, strict=True) if not in_stages(st, selection)]
    sim.pinned = dict.fromkeys(outside, why)
    return selection


# ---- the entry point ---------------------------------------------------------------------------------------------
def simulate(
    model_or_path: Model | str | Path,
    profile: str | Capabilities = "hexagon-v0.15.2",
    frames: int = 31,
    lowering: Lowering | dict | None = None,
    weights_on: str = "htp",
    op_offload: bool = True,
    layout: str | None = None,
    backends: list[tuple[str, str | Capabilities, str]] | None = None,
    predict: Any = None,
    stages: list[str] | str | None = None,
    stream: bool = False,
    **lowering_kw: Any,
) -> Placement:
    """Predict ggml_backend_sched's placement of the decoder graph on `profile`'s backend + the CPU.

    `lowering` is a Lowering, a dict of its fields, or given as keyword arguments (conv=..., mm_chunk=...).
    `weights_on` is "htp" (the device backend's buffer) or "cpu" (or a backend name of `backends`).
    `backends` replaces the profile's pair by an explicit list [(name, profile, buffer type id), ...], CPU last.
    `predict`: True, or a dict / `PredictOptions` (cpu_profile, cpu_scale, cpu_baseline_ms, ops, perf), adds the
    predicted time (`Placement.predicted`) and each backend's memory (`Placement.memory`).
    `stages`: the stages put under the device's scheduler (a stage name, or a prefix of stage names: `decoder`
    takes `decoder.0`, `decoder.1`, ...); every other stage runs on the CPU path, as a port that schedules one
    part of the decoder runs it (its nodes are refused by the device backends, rule `stages`). None: all.
    `stream`: place one call of a stateful stream of `frames` code frames (a causal family, `Arch.causal`): its
    carried state is graph inputs (`state:<key>`, placed and copied into the splits that read them like any other
    input) and outputs (`state_out:<key>`); the config says so (`stream`, `state_bytes`, `state_inputs`), and a
    prediction needs a CPU profile of the same streaming graph (`kzlab.profile(stream=K)`).
    Nothing is allocated or computed.
    """
    options = PredictOptions.of(predict)
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise InvalidOptionError(f"frames={frames!r}: expected an integer >= 1")
    if isinstance(lowering, dict):
        lowering = Lowering.from_dict(lowering)
    low = (lowering or Lowering()).replace(**lowering_kw) if lowering_kw else (lowering or Lowering())
    if getattr(low, "requested", None) is not None:
        low = low.requested
    # the device's graph: the portable lowering (ggml ops only); `fast` or a fused node is refused
    low = low.resolve(cpu_only=False, where="the simulated device")
    model = model_or_path if isinstance(model_or_path, Model) else load_model(model_or_path, layout=layout)
    backends = custom_backends(backends) if backends else backend_set(profile)
    wbuft = _weights_buft(backends, weights_on)
    gr = build(model, low, frames, stream=stream)
    try:
        buffers = {addr(t): Buffer(wbuft, True) for t in gr.weights.tensors.values()}
        sim = Simulator(gr.gf, backends, buffers, op_offload)
        sched_stages = _pin_outside(sim, gr.layers, stages)
        res = sim.run()
        nodes, splits = describe(res, sim, gr.layers)
        convs = conv_verdicts(nodes, sim, gr.layers, low, backends[0].name)
        cfg = {
            "model": str(model_or_path) if not isinstance(model_or_path, Model) else str(model.path),
            "profile": backends[0].profile.label,
            "profile_source": backends[0].profile.source,
            "profile_changes": list(backends[0].profile.changes),
            "profile_options": dict(backends[0].profile.options),
            "arith": backends[0].profile.arith,
            "sched_stages": sched_stages,
            "backends": [b.name for b in backends],
            "frames": frames,
            "mode": low.mode,
            "lowering": low.to_dict(),
            "lowering_resolved": low.to_dict(),
            "lowering_requested": low.request_dict(),
            "lowering_label": low.label(not_applicable(model.hparams)),
            "weights_on": next(b.name for b in backends if b.buft == wbuft),
            "op_offload": op_offload,
        }
        if stream:
            slots = gr.builder.carry.slots.values()
            cfg["stream"] = True
            cfg["state_inputs"] = len(slots)
            cfg["state_bytes"] = sum(int(g.ggml_nbytes(sl.input)) for sl in slots)
        pl = Placement(
            cfg, nodes, splits, sum(res.copies.values()), len(res.copies), stage_totals(nodes, splits), convs,
            defects=summarize_defects(backends[0].profile.defects, nodes),
        )
        if options is not None:
            pl.predicted, pl.memory = predict_placement(
                nodes, splits, cfg, backends, gr.gf, gr.weights.tensors, res.copies, options
            )
        return pl
    finally:
        gr.free()
