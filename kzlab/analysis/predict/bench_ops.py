"""`kzlab bench-ops`: measure the distinct op shapes of kzlab's own graph on a backend this machine has, and write
them as `test-backend-ops perf` writes its SQL, so that a local measurement and a device's log take one path.

Each node of the graph is timed where it runs in the decode (the profiler at node granularity, on the backend
set that puts it there: `blas` runs under the scheduler with the CPU, so only the products BLAS takes are its
rows); the profiler's own cost per timed node, (sum of node times - plain wall) / nodes, is taken off each
time. Nodes of one op, types and shape are one row (their median, `n_runs` the number of measurements).
MUL_MAT rows carry test_mul_mat's vars (type_a, type_b, m, n, k, bs, nr, per, k_v, o), so that a device log of
the same products matches them; other ops carry `type` and `ne` (ggml's output shape), matched in `ne[1]`.

The backend's fixed costs are measured too and returned as a `[perf]` table: the cost of one graph compute on
it (`sync_us`: a one-node graph, median of many, plus the switch to and from the CPU around a threaded product
(see `measure_fixed_costs`)) and its input-copy bandwidth (`copy_gbs`: 16 MB set into a tensor of its buffer),
each `measured here`, with how it was measured in `sources`. `config["spread"]` is the run-to-run spread of the
measurement's own repeat walls (`config["wall_all_ms"]`): the spread its op rows carry in a prediction
(`ops_spread`).
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ggml import ggml as g

from kzlab.analysis.flops import VIEW_OPS
from kzlab.analysis.predict.oplog import FIELDS, OpRecord, parse_vars
from kzlab.analysis.predict.parameters import observed_spread
from kzlab.errors import InvalidOptionError
from kzlab.runtime.backends import init_backend, wait_computed


@dataclass
class BenchResult:
    """The rows measured, the backend's fixed costs, and how they were taken."""

    backend: str  # ggml's name of the backend measured (BLAS, CPU, RPC[...])
    records: list[OpRecord]
    perf: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)


def node_vars(node: dict[str, Any]) -> tuple[str, str] | None:
    """(op, vars) of a profiled node in test-backend-ops' form, or None for a node that computes nothing."""
    op = node["op"]
    if op in VIEW_OPS or node.get("is_view"):
        return None
    types = [t.lower() for t in node["src_types"]]
    if op == "MUL_MAT" and len(node["src_ne"]) >= 2:
        a, b = node["src_ne"][0], node["src_ne"][1]
        if a[2] * a[3] == 1 and b[2] * b[3] == 1:
            return op, (f"type_a={types[0]},type_b={types[1]},m={a[1]},n={b[1]},k={a[0]},bs=[1,1],nr=[1,1],"
                        "per=[0,1,2,3],k_v=0,o=1")
    t = types[0] if types else str(node.get("type", "f32")).lower()
    ne = ",".join(str(int(x)) for x in node["ne"])
    return op, f"type={t},ne=[{ne}]"


#: the side of the square product whose split pair is timed: big enough that OpenBLAS runs it on all its threads
#: (interface/gemm.c runs M*N*K below 65536 * GEMM_MULTITHREAD_THRESHOLD (4) on one thread; 256^3 is 64x that),
#: so that its pthread workers are woken, as a decode's products wake them
THREADED_SIDE = 256
#: the CPU split timed after it: 512^3 F32 on the CPU (a few ms here), as a decode's CPU splits between products
CPU_SPLIT_SIDE = 512
SWITCH_ROUNDS = 5


def _square_graph(handle: Any, side: int, keep: list) -> tuple[Any, Any] | None:
    """A one-node graph `side` x `side` x `side` (F32) allocated on `handle`, or None when the backend refuses it."""
    ctx = g.ggml_init(g.ggml_init_params(mem_size=g.ggml_tensor_overhead() * 4 + g.ggml_graph_overhead(),
                                         mem_buffer=None, no_alloc=True))
    a = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, side, side)
    y = g.ggml_mul_mat(ctx, a, a)
    gf = g.ggml_new_graph(ctx)
    g.ggml_build_forward_expand(gf, y)
    buf = g.ggml_backend_alloc_ctx_tensors(ctx, handle)
    keep.append((ctx, buf))
    if not buf:
        raise InvalidOptionError("bench-ops: could not allocate a buffer on the backend")
    if not g.ggml_backend_supports_op(handle, y):
        return None
    zeros = np.zeros(side * side, np.float32)
    g.ggml_backend_tensor_set(a, zeros.ctypes.data_as(ctypes.c_void_p), 0, zeros.nbytes)
    return gf, y


def _timed(fn: Any, n: int) -> list[float]:
    """`n` wall times of fn() in us."""
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e6)
    return ts


def _rel_spread(ts: list[float]) -> float:
    """The run-to-run spread of repeated times: the inter-quartile range over twice the median."""
    q1, _, q3 = statistics.quantiles(ts, n=4)
    return (q3 - q1) / (2 * statistics.median(ts))


def measure_fixed_costs(backend_handle: Any, runs: int = 200, cpu_handle: Any = None) -> dict[str, Any]:
    """`sync_us` and `copy_gbs` of one backend, and how they were measured (`sync_how`, `sync_spread`).

    `sync_us` starts as a one-node graph (a 64 x 64 product, which every backend here takes) computed `runs` times
    (median). An op the backend refuses is never computed (ggml would abort): a backend without that product gets
    no `sync_us`. `copy_gbs`: a 16 MB tensor set 5 times.

    With `cpu_handle` (a device backend next to the CPU), `sync_us` also holds the cost of switching between the
    two, as a decode's splits do: the CPU's threads and the device's (OpenBLAS's, a server's) go idle, or keep
    spinning, while the other runs. It is measured around a product big enough to be threaded (THREADED_SIDE):
    (the device's product then a CPU split of a few ms on every CPU thread, in turns) - (the product alone, back
    to back) - (the CPU split alone), each a median, in SWITCH_ROUNDS rounds (their median; the rounds' spread
    is `sync_spread`). The 64 x 64 product runs on one OpenBLAS thread and never wakes
    its workers, which spin for 2^28 cycles after a threaded call (OpenBLAS driver/others/blas_server.c,
    THREAD_TIMEOUT) and take cores from the next CPU split; the threaded pair pays that."""
    keep: list = []
    try:
        small = _square_graph(backend_handle, 64, keep)
        if small is not None:
            gf, y = small

            def device() -> None:
                g.ggml_backend_graph_compute(backend_handle, gf)
                wait_computed(y)

            ts = _timed(device, runs)
            sync_us = statistics.median(ts)
            how = f"a one-node graph (64 x 64 x 64 F32 product), median of {runs}"
            spread = _rel_spread(ts)
        else:
            sync_us, how, spread = None, "", 0.0
        if sync_us is not None and cpu_handle is not None:
            big = _square_graph(backend_handle, THREADED_SIDE, keep)
            # the CPU split after it: a product of a few ms on every CPU thread, as a decode's CPU splits between
            # two device products are (a spinning worker takes a share of it)
            cpu_split = _square_graph(cpu_handle, CPU_SPLIT_SIDE, keep)
            if big is not None and cpu_split is not None:
                (bgf, by), (cgf, cy) = big, cpu_split

                def product() -> None:
                    g.ggml_backend_graph_compute(backend_handle, bgf)
                    wait_computed(by)

                def cpu_graph() -> None:
                    g.ggml_backend_graph_compute(cpu_handle, cgf)
                    wait_computed(cy)

                n = max(10, runs // 20)
                product()  # pools created
                switch = []
                for _ in range(SWITCH_ROUNDS):  # blocks in turns: a change of load moves all three alike
                    cpu_alone = statistics.median(_timed(cpu_graph, n))
                    prod_alone = statistics.median(_timed(product, n))
                    pair = statistics.median(_timed(lambda: (product(), cpu_graph()), n))
                    switch.append(pair - cpu_alone - prod_alone)
                extra = max(0.0, statistics.median(switch))
                spread = max(spread, observed_spread([sync_us + max(0.0, x) for x in switch]) or 0.0)
                sync_us += extra
                how += (f" + the switch around a threaded product ({THREADED_SIDE}^3 F32) and a CPU split of a few ms "
                        f"({CPU_SPLIT_SIDE}^3 F32 on the CPU): pair - product alone - CPU split alone, medians of "
                        f"{n}, the median of {SWITCH_ROUNDS} rounds ({', '.join(f'{x:.0f}' for x in switch)} us)")
        data = np.ones(4 << 20, np.float32)
        ctx = g.ggml_init(g.ggml_init_params(mem_size=g.ggml_tensor_overhead() * 2, mem_buffer=None, no_alloc=True))
        bigt = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, 4 << 20)
        buf = g.ggml_backend_alloc_ctx_tensors(ctx, backend_handle)
        keep.append((ctx, buf))
        if not buf:
            raise InvalidOptionError("bench-ops: could not allocate a buffer on the backend")
        cs = []
        for _ in range(5):
            t0 = time.perf_counter()
            g.ggml_backend_tensor_set(bigt, data.ctypes.data_as(ctypes.c_void_p), 0, data.nbytes)
            wait_computed(bigt)
            cs.append(time.perf_counter() - t0)
    finally:
        for c, b in keep:
            if b:
                g.ggml_backend_buffer_free(b)
            g.ggml_free(c)
    out: dict[str, Any] = {"copy_gbs": data.nbytes / statistics.median(cs) / 1e9}
    if sync_us is not None:
        out["sync_us"] = sync_us
        out["sync_how"] = how
        out["sync_spread"] = spread
    return out


def bench_ops(model: Any, backend: str, frames: int, lowering: Any = None, repeat: int = 5,
              threads: int | None = None) -> BenchResult:
    """Measure the nodes of the decoder graph that run on `backend` (cpu, blas, rpc://HOST:PORT, a device).
    On an RPC server the whole measurement runs in a worker process (a lost server aborts that, not the caller)."""
    from kzlab.runtime.remote import call_isolated, check_servers, in_worker
    from kzlab.runtime.spec import is_rpc

    if isinstance(backend, str) and is_rpc(backend.strip()) and not in_worker():
        check_servers([backend.strip()])
        res = call_isolated("kzlab.analysis.predict.bench_ops:bench_ops", model, backend, frames, lowering, repeat,
                            threads, label=backend.strip(), doing="measuring op shapes")
        res.config["isolated"] = "worker process"
        return res
    from kzlab.analysis.profile import profile
    from kzlab.graph.options import Lowering
    from kzlab.runtime.spec import BackendSpec

    low = lowering or Lowering()
    if low.mode == "auto":
        low = low.replace(mode="portable")  # the graph a device runs, as the simulator places it
    name = backend.strip().lower()
    spec = BackendSpec(backend, threads, None)
    prof = profile(model, frames=frames, backends=spec, lowering=low, repeat=repeat, warmup=1, peak=False,
                   progress=False, granularity="node")
    rb_names = prof.config["backend"]
    target = next((b for b in rb_names if b.lower() == name or b.lower().startswith(name)), None)
    if target is None:
        raise InvalidOptionError(f"bench-ops: no node ran on {backend!r} ({prof.config['backend_label']})")
    timed = [n for n in prof.nodes if not n["is_view"]]
    norm = prof.wall_ms / max(1e-9, sum(n["time_ms"] for n in timed))
    groups: dict[tuple[str, str], list[float]] = {}
    for n in timed:
        if n["backend"] != target:
            continue
        key = node_vars(n)
        if key is None:
            continue
        groups.setdefault(key, []).append(n["time_ms"] * norm * 1e3)

    b = init_backend(target if not target.startswith("rpc") else backend, prof.config["threads"])
    cpu = init_backend("cpu", prof.config["threads"]) if target != "cpu" else None
    try:
        ggml_name = g.ggml_backend_name(b.handle).decode()
        fixed = measure_fixed_costs(b.handle, cpu_handle=cpu.handle if cpu is not None else None)
    finally:
        g.ggml_backend_free(b.handle)
        if cpu is not None:
            g.ggml_backend_free(cpu.handle)
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    records = []
    for (op, vars_), ts in sorted(groups.items()):
        records.append(OpRecord(backend=ggml_name, op=op, vars=vars_, params=parse_vars(vars_), supported=True,
                                time_us=float(statistics.median(ts)), n_runs=len(ts) * int(prof.config["repeat"]),
                                fmt="sql", extra={"test_time": now, "build_commit": "kzlab bench-ops"}))
    src = f"measured here: kzlab bench-ops on {prof.config['backend_label']}, {frames} frames"
    perf: dict[str, Any] = {"source": src, **{k: v for k, v in fixed.items() if k in ("sync_us", "copy_gbs")}}
    if "sync_how" in fixed:
        perf["sources"] = {"sync_us": f"{src}: {fixed['sync_how']}"}
    walls = [float(w) for w in prof.config.get("wall_all_ms") or [prof.wall_ms]]
    cfg = {"backend_label": prof.config["backend_label"], "frames": frames,
           "lowering": prof.config["lowering_resolved"], "normalisation": norm,
           "wall_ms": prof.wall_ms, "wall_all_ms": walls, "spread": observed_spread(walls),
           "fixed": dict(fixed)}
    return BenchResult(ggml_name, records, perf, cfg)


def _sql_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:f}"
    return str(v)


def write_sql(records: list[OpRecord], path: Any) -> None:
    """The records as `test-backend-ops perf --output sql` writes its results (every test_result field)."""
    lines = ["CREATE TABLE IF NOT EXISTS test_backend_ops ("]
    types = {"time_us": "REAL", "flops": "REAL", "bandwidth_gb_s": "REAL", "memory_kb": "INTEGER", "n_runs": "INTEGER",
             "supported": "INTEGER", "passed": "INTEGER"}
    lines += [f"  {f} {types.get(f, 'TEXT')}{',' if i < len(FIELDS) - 1 else ''}" for i, f in enumerate(FIELDS)]
    lines.append(");")
    for r in records:
        values = {
            "test_time": r.extra.get("test_time", ""),
            "build_commit": r.extra.get("build_commit", ""),
            "backend_name": r.backend,
            "op_name": r.op,
            "op_params": r.vars,
            "test_mode": "perf",
            "supported": True,
            "passed": True,
            "error_message": "",
            "time_us": float(r.time_us or 0.0),
            "flops": 0.0,
            "bandwidth_gb_s": 0.0,
            "memory_kb": 0,
            "n_runs": int(r.n_runs or 0),
            "device_description": "",
            "backend_reg_name": "",
        }
        fields = ", ".join(FIELDS)
        vals = ", ".join(f"'{_sql_value(values[f])}'" for f in FIELDS)
        lines.append(f"INSERT INTO test_backend_ops ({fields}) VALUES ({vals});")
    from pathlib import Path

    Path(path).write_text("\n".join(lines) + "\n")
