"""The device measurement that pins a parameter, written out as commands the user runs on the device.

Each parameter of the time model is pinned by something the device can show directly: a rate by the ops that
use it timed on the device (`GGML_HEXAGON_PROFILE=1` times every op of this graph at its own shape; test-backend-
ops times them alone), a fixed cost by two decodes that share their splits and differ in work, a crossing cost
by an A/B that moves the ops on a split boundary off the NPU (`GGML_HEXAGON_OPFILTER`, a regex of op names
ggml-hexagon then does not claim: ggml-hexagon.cpp at eced84c8, `opt_opfilter`), the cache maintenance by an op
trace that times every flush (`GGML_HEXAGON_PROFILE=3`: L2FLUSH events from v0.21.0 on, htp-tensor.c at 8599e0ea),
a first use by two decodes in one process, each timed. Each command's output goes back into kzlab (`--ops FILE`,
`--measured NAME=MS`), which turns the parameter from a range into a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kzlab.analysis.predict.parameters import LONG_ROWS, OP_CLASSES
from kzlab.analysis.predict.timing import field_of


@dataclass
class MeasureContext:
    """What the commands need to name: the device's ggml backend, the configurations and their graphs."""

    device: str = "HTP0"
    frames: int = 31
    configs: dict[str, str] = field(default_factory=dict)  # name -> a description of what to run
    #: per rate parameter, the op of this graph that spends the most under it: (op, src types, src shapes)
    heaviest: dict[str, tuple[str, list[str], list[tuple[int, ...]]]] = field(default_factory=dict)
    ops_by_param: dict[str, list[str]] = field(default_factory=dict)
    #: per bandwidth parameter, the ops of this graph it prices
    ops_by_bandwidth: dict[str, list[str]] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=dict)
    #: whether a configuration's device maintains its cache per op (`[perf.cache]`): its `cache_gbs` is then a pass
    #: by address over small tensors, timed by the op trace, not the bytes crossing
    per_op_cache: bool = False


def context_from(placements: dict[str, Any], device: str = "HTP0", frames: int = 31) -> MeasureContext:
    """A MeasureContext from simulated placements with predictions (their roofline nodes name the rates)."""
    ctx = MeasureContext(device=device, frames=frames)
    best: dict[str, tuple[float, tuple[str, list[str], list[tuple[int, ...]]]]] = {}
    for name, pl in placements.items():
        ctx.splits[name] = len(field_of(pl, "splits"))
        cfg = field_of(pl, "config")
        ctx.configs[name] = f"{cfg['profile']}, {cfg['lowering_label']}"
        pred = field_of(pl, "predicted")
        if pred is None or pred.costs is None:
            continue
        cm = pred.costs
        if any("cache_flushes" in r for r in (pred.splits or [])):
            ctx.per_op_cache = True
        roof = [n for n in field_of(pl, "nodes") if n.backend.lower() not in ("cpu",)
                and n.op not in ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "NONE")]
        by_name = {}
        for n in roof:
            by_name.setdefault(n.name, n)
        rows = [r for r in pred.nodes if r["how"] == "roofline"]
        for r, rate, bw in zip(rows, cm.roof_rate_p, cm.roof_bw_p, strict=False):
            n = by_name.get(r["name"])
            if n is None:
                continue
            for table, key in ((ctx.ops_by_param, rate), (ctx.ops_by_bandwidth, bw)):
                if n.op not in table.setdefault(key, []):
                    table[key].append(n.op)
            if r["ms"] > best.get(rate, (-1.0, None))[0]:
                best[rate] = (r["ms"], (n.op, list(n.src_types), [tuple(x) for x in n.src_ne]))
    ctx.heaviest = {k: v[1] for k, v in best.items()}
    return ctx


def decode_command(ctx: MeasureContext, config: str, env: str = "", frames: int | None = None) -> str:
    """The placeholder of a decode the user runs on the device, naming the configuration."""
    f = frames or ctx.frames
    what = ctx.configs.get(config, config)
    return f"{env + ' ' if env else ''}<your decode of {f} frames, configuration {config!r}: {what}>"


def command_for(parameter: str, ctx: MeasureContext, config: str) -> tuple[str, str]:
    """(shell commands for the device, what to give kzlab afterwards) that pin `parameter`, for the decision's
    configuration `config`."""
    dev = ctx.device
    kind = parameter.split(".", 1)[1] if "." in parameter else parameter
    if kind.startswith("gflops."):
        op_key = kind[len("gflops."):]
        op = op_key.split(".")[0] if op_key != "default" and op_key not in OP_CLASSES else None
        ops = [op] if op else ctx.ops_by_param.get(parameter, [])[:4] or ["SOFT_MAX", "RMS_NORM"]
        heavy = ctx.heaviest.get(parameter)
        shape = ""
        if heavy and heavy[0] == "MUL_MAT" and len(heavy[2]) >= 2:
            a, b = heavy[2][0], heavy[2][1]
            shape = f" (this graph's largest: type_a={heavy[1][0].lower()}, type_b={heavy[1][1].lower()}, " \
                    f"m={a[1]}, n={b[1]}, k={a[0]})"
        type_filter = f' -p "type_a={op_key.split(".")[1].lower()}"' if op and "." in op_key else ""
        cmd = (f"GGML_HEXAGON_PROFILE=1 {decode_command(ctx, config)} 2> htp-profile.log; "
               f"test-backend-ops perf -b {dev} -o {','.join(ops)}{type_filter} --output sql > htp-ops.sql")
        long = (f" (this rate prices the products with more than {LONG_ROWS} src1 rows: the decode's profile "
                "times them at this graph's shapes, test-backend-ops at its own)") if op_key.endswith(".long") else ""
        return cmd, f"--ops htp-profile.log htp-ops.sql: times {', '.join(ops)} on the device{shape}{long}"
    if kind.startswith("bandwidth_gbs"):
        cls = kind.partition(".")[2]
        ops = [o for o in ctx.ops_by_bandwidth.get(parameter, []) if o != "MUL_MAT"][:4] or \
            list(OP_CLASSES.get(cls, ("ADD", "MUL", "CONCAT")))[:3]
        cmd = f"test-backend-ops perf -b {dev} -o {','.join(ops)} --output sql > htp-stream.sql"
        return cmd, "--ops htp-stream.sql: the streaming ops' GB/s on the device"
    if kind in ("launch_us", "sync_us"):
        short = max(1, ctx.frames // 4)
        cmd = (f"GGML_SCHED_DEBUG=2 GGML_HEXAGON_PROFILE=1 {decode_command(ctx, config)} 2> sched-{ctx.frames}.log; "
               f"GGML_HEXAGON_PROFILE=1 {decode_command(ctx, config, frames=short)} 2> sched-{short}.log")
        return cmd, (f"--measured {config}=MS at {ctx.frames} and {short} frames: the same {ctx.splits.get(config, 0)} "
                     "splits with a quarter of the work; the fixed part of the total is dispatch and split costs "
                     "(the logs give the splits and each op's HTP time)")
    if kind == "l2flush_us" or (kind == "cache_gbs" and ctx.per_op_cache):
        cmd = f"GGML_HEXAGON_PROFILE=3 {decode_command(ctx, config)} 2> htp-trace.log"
        return cmd, ("the trace's L2FLUSH events (a build of v0.21.0 or later traces them: htp-tensor.c 8599e0ea "
                     "lines 29-36, 285-291): their cycles over the clock (~2114 cycles/us) time each flush, the whole-"
                     "cache ones apart from the by-address ones; a 0.15.x device runs the same flush instruction "
                     "(qurt_mem_cache_clean). Put the values in a profile's [perf] (l2flush_us, cache_gbs) and "
                     "predict with it")
    if kind == "map_us":
        cmd = (f"<your harness: {decode_command(ctx, config)} twice in one process, timing each decode> "
               "(llama.cpp's own tools time a warm run after a warm-up; keep the first)")
        return cmd, (f"--measured {config}=MS with the second (warm) time; the first minus the second is the "
                     f"buffers mapped on first use ({kind} each)")
    if kind in ("copy_gbs", "cache_gbs"):
        run = decode_command(ctx, config)
        cmd = f"{run}; GGML_HEXAGON_OPFILTER='CONCAT|PAD|CONT|CPY' {run}"
        return cmd, (f"--measured {config}=MS for both: the ops at the split boundaries moved to the CPU change "
                     "the bytes crossing between the CPU and the NPU, not the products")
    if kind == "baseline_ms":
        cmd = f"GGML_HEXAGON_OPFILTER='.*' {decode_command(ctx, config)}  # 5 times, the median"
        return cmd, "--cpu-baseline-ms MS: the CPU-only total again, under the same clocks and threads"
    if kind == "matmul_skew":
        cmd = "test-backend-ops perf -b CPU -o MUL_MAT --output sql > cpu-mm-device.sql"
        return cmd, ("compare with `kzlab bench-ops MODEL --backend cpu` here: the device CPU's products against "
                     "this machine's")
    if kind == "measured_ops":
        return f"GGML_HEXAGON_PROFILE=1 {decode_command(ctx, config)} 2> htp-profile.log", \
            "--ops htp-profile.log: the ops timed inside the decode instead of alone"
    return decode_command(ctx, config), f"--measured {config}=MS"
