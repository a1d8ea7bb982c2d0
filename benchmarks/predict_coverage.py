"""Are the predicted bands honest where the truth exists? `sched blas+cpu` and `sched rpc+cpu` (a loopback RPC
server) on this machine, over lowering variants and frame counts.

For every case (backend set x lowering x frame count) the real scheduler's wall time is measured (median of
--runs decodes, in turns with CPU-only decodes, as `predict_accuracy.py` does), and predictions are drawn
(--draws, seeded) on the same placement, all with the CPU's nodes from a CPU-only profile of the same graph scaled
to the CPU-only wall measured in turns (its runs given, so that their observed spread is the baseline's range):

- `assumed`: the other backend from its capability profile's `[perf]` ranges only (blas.toml, rpc.toml: sourced
  ranges for x86 machines of 2-16 cores), nothing measured on it;
- `bench-ops`: the other backend's op rows and fixed costs from `kzlab bench-ops` (measured here; the rows'
  spread is the larger of the bench-ops run's own spread over its repeats and the drift between two bursts of
  measurement, observed on the CPU-only graphs of the run: each profile against its decodes in turns with the
  truth, pooled over the cases, `run_drift`);
- `calibrated` (--calibrate): its ranges as the prior, calibrated on the measured totals of two other lowerings
  (`--calibrate-on N`: N others, 7 = every other lowering; same set, at every frame count measured, so that
  fixed costs and rates can be told apart; each total's noise
  its runs' observed spread, plus the model's discrepancy between configurations estimated by leave-one-out on
  those totals), the case predicted on the posterior draws with that discrepancy.

For each it reports p10 / p50 / p90, whether the measured wall lies in [p10, p90], and the band width
(p90 - p10) / p50; then, per mode, the coverage, the median width, the ratio of the widths, and a noise floor
(how often two measurements of one graph on this machine agree within half the band: the coverage a model
without error would get). A per-op table says where the assumed ranges stand: for the device's nodes, the time
`bench-ops` measured per op type against the roofline at the assumed parameters' 10th and 90th percentiles.

    python benchmarks/predict_coverage.py --model full-f16.gguf [--frames 4,8] [--runs 4] [--threads 2]
        [--calibrate] [--save RAW.pkl] [--replay RAW.pkl] [--markdown OUT.md]

`--save` keeps what was measured (profiles, op rows, walls), `--replay` predicts again from it without measuring
(after a profile's `[perf]` table changed). `kzlab synth --preset qwen3-tts-12hz -o full-f16.gguf` writes a
full-size decoder with random weights.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

#: the lowerings measured: every im2col-f32 variant (products BLAS takes), and im2col-f16 / ktap (products it refuses)
VARIANTS = [
    ("im2col-f32", "data", "col2im"), ("im2col-f32", "data", "direct"),
    ("im2col-f32", "kernel", "col2im"), ("im2col-f32", "kernel", "direct"),
    ("im2col-f16", "data", "col2im"), ("im2col-f16", "data", "direct"),
    ("ktap", "data", "col2im"), ("ktap", "data", "direct"),
]
SETS = {
    "blas": {"sim": [("BLAS", "blas", "CPU"), ("CPU", "cpu", "CPU")], "weights_on": "BLAS", "device": "BLAS"},
    "rpc": {"sim": [("RPC", "rpc", "RPC"), ("CPU", "cpu", "CPU")], "weights_on": "RPC", "device": "RPC"},
}


def cpu_model() -> str:
    from kzlab.environment import cpu_name

    return cpu_name("unknown")


# ---- measuring ---------------------------------------------------------------------------------------------------
def measured_runs(model: Any, lowering: Any, backend: list[str], codes: Any, runs: int,
                  threads: int | None) -> tuple[list[float], list[float]]:
    """(walls of the real scheduler on `backend`, walls of the CPU-only decode), in turns (CPU, sched, CPU,
    sched...) so that a change of the machine's load between the two cancels out; every run is kept (their
    spread is what a prediction from them carries)."""
    import kzlab

    with kzlab.Decoder(model, lowering, backend=backend, sched=True, threads=threads) as d, \
            kzlab.Decoder(model, lowering, backend="cpu", sched=False, threads=threads) as c:
        d.decode(codes)  # graphs built and allocated
        c.decode(codes)
        ts: list[float] = []
        cs: list[float] = []
        for _ in range(runs):
            for dec, out in ((c, cs), (d, ts)):
                t0 = time.perf_counter()
                dec.decode(codes)
                out.append((time.perf_counter() - t0) * 1e3)
    return ts, cs


def measure(args: argparse.Namespace, model: Any) -> dict[str, Any]:
    """Every case's CPU profile, bench-ops result and measured walls (what `--save` keeps)."""
    from ggml import ggml as g

    import kzlab
    from kzlab.analysis.predict.bench_ops import bench_ops, measure_fixed_costs
    from kzlab.codes import random_codes
    from kzlab.environment import default_threads
    from kzlab.runtime.backends import init_backend
    from kzlab.runtime.rpc import rpc_server

    threads = args.threads or default_threads()
    cpu = init_backend("cpu", threads)
    cpu_fixed = measure_fixed_costs(cpu.handle)
    g.ggml_backend_free(cpu.handle)
    raw: dict[str, Any] = {"threads": threads, "runs": args.runs, "cpu_fixed": cpu_fixed, "cases": []}
    variants = [VARIANTS[int(i)] for i in args.variants.split(",")] if args.variants else VARIANTS
    t_start = time.perf_counter()
    with rpc_server(threads=threads) as srv:
        targets = {"blas": (["blas", "cpu"], "blas"), "rpc": ([srv.address, "cpu"], srv.address)}
        for conv, src1, convt in variants:
            low = kzlab.Lowering(mode="portable", conv=conv, conv_src1=src1, convt=convt)
            for frames in args.frame_counts:
                codes = random_codes(model.hparams, frames, seed=0)
                prof = kzlab.profile(model, codes=codes, backend="cpu", sched=False, lowering=low, repeat=args.runs,
                                     warmup=1, peak=False, progress=False, threads=threads)
                for name in args.backends.split(","):
                    spec, bench_backend = targets[name]
                    bench = bench_ops(model, bench_backend, frames, low, repeat=args.runs, threads=threads)
                    reals, cpu_walls = measured_runs(model, low, spec, codes, args.runs, threads)
                    real, cpu_wall = statistics.median(reals), statistics.median(cpu_walls)
                    raw["cases"].append({"set": name, "lowering": low.to_dict(), "label": f"{conv} {src1} {convt}",
                                         "frames": frames, "measured_ms": real, "cpu_only_ms": cpu_wall,
                                         "measured_all_ms": reals, "cpu_only_all_ms": cpu_walls,
                                         "cpu_profile": prof.to_dict(), "bench_records": bench.records,
                                         "bench_perf": bench.perf, "bench_wall_ms": bench.config["wall_ms"],
                                         "bench_config": bench.config, "loadavg": os.getloadavg()[0]})
                    print(f"measured {name:4s} {conv:10s} {src1:6s} {convt:6s} {frames:2d} frames: {real:8.1f} ms "
                          f"(CPU-only {cpu_wall:.1f}, profile {prof.wall_ms:.1f})  "
                          f"[{time.perf_counter() - t_start:.0f} s]", flush=True)
                if args.save:
                    Path(args.save).write_bytes(pickle.dumps(raw))
    return raw


# ---- predicting --------------------------------------------------------------------------------------------------
def profile_of(case: dict[str, Any]) -> dict[str, Any]:
    """The case's CPU profile; one saved before a lowering option existed is taken as of that option's default
    (the only graph there was), so that `--replay` reads older measurements."""
    import kzlab

    prof = dict(case["cpu_profile"])
    cfg = dict(prof["config"])
    now = kzlab.Lowering.from_dict(case["lowering"]).resolve(cpu_only=False, where="replay").to_dict()
    for key in ("lowering_resolved", "lowering"):
        if isinstance(cfg.get(key), dict):
            cfg[key] = {**{k: v for k, v in now.items() if k not in cfg[key]}, **cfg[key]}
    prof["config"] = cfg
    return prof


def cpu_perf_of(raw: dict[str, Any]) -> dict[str, Any]:
    """The CPU's measured fixed costs as a [perf] table."""
    fixed = raw["cpu_fixed"]
    return {"source": "measured here: a one-node graph on the CPU backend",
            **{k: v for k, v in fixed.items() if k in ("sync_us", "copy_gbs")}}


def baseline_runs(case: dict[str, Any]) -> Any:
    """The CPU-only walls measured in turns with the truth: every run when they were kept (their spread is the
    baseline's range), else their median (the stated +-3 %)."""
    return list(case["cpu_only_all_ms"]) if case.get("cpu_only_all_ms") else case["cpu_only_ms"]


def burst_drift(case: dict[str, Any]) -> float:
    """How far the same CPU-only graph moved between two bursts of measurement on this machine: its profile's
    wall (taken just before the op rows) against its decodes in turns with the truth (relative). Measured on the
    CPU graph, never on the case's own truth."""
    return abs(case["cpu_profile"]["wall_ms"] / case["cpu_only_ms"] - 1.0)


def run_drift(raw: dict[str, Any]) -> float:
    """The drift between bursts of measurement on this machine during the run, as a log-uniform spread: one
    pair per case (`burst_drift`) is a single sample of it, so the run's pairs are pooled. A log-uniform +-s
    puts its p10 / p90 at about +-0.8 s; s is the 80th percentile of the pooled drifts / 0.8, so that the
    rows' [p10, p90] spans the drift as often as such a band claims to (80 %)."""
    drifts = sorted(burst_drift(c) for c in raw["cases"])
    return statistics.quantiles(drifts, n=10)[7] / 0.8 if len(drifts) >= 2 else 0.0


def ops_spread(case: dict[str, Any], raw: dict[str, Any]) -> float:
    """The op rows' relative spread: they were timed in another burst than the truth, so the larger of the
    bench-ops run's own spread over its repeats (when kept) and the run's drift between bursts (`run_drift`)."""
    from kzlab.analysis.predict.parameters import observed_spread

    own = observed_spread((case.get("bench_config") or {}).get("wall_all_ms")) or 0.0
    if "_drift" not in raw:
        raw["_drift"] = run_drift(raw)
    return min(0.95, max(own, raw["_drift"]))


def measured_noise(case: dict[str, Any]) -> float:
    """A measured total's relative spread: observed over its runs when they were kept, else the stated 3 %."""
    from kzlab.analysis.predict.parameters import MEASURED_SPREAD, observed_spread

    return min(0.95, max(1e-3, observed_spread(case.get("measured_all_ms")) or MEASURED_SPREAD))


def predictions(model: Any, case: dict[str, Any], raw: dict[str, Any], draws: int,
                baseline: bool = True) -> dict[str, Any]:
    """The case's two predictions (placements with their Prediction) keyed by mode. With `baseline`, the CPU
    profile is scaled to the CPU-only wall measured in turns with the truth (as `--cpu-baseline-ms` scales it to a
    device's CPU-only decode): the machine's load drifts between the profile and the measurement. The CPU's fixed
    costs are measured here in both modes (the question is the other backend)."""
    import kzlab

    s = SETS[case["set"]]
    cpu_perf = cpu_perf_of(raw)
    common: dict[str, Any] = {"cpu_profile": profile_of(case), "draws": draws, "seed": 0}
    if baseline:
        common["cpu_baseline_ms"] = baseline_runs(case)
    modes = {
        "assumed": {**common, "perf": {"CPU": cpu_perf}},
        "bench-ops": {**common, "ops": case["bench_records"], "ops_spread": ops_spread(case, raw),
                      "perf": {s["weights_on"]: case["bench_perf"], "CPU": cpu_perf}},
    }
    low = kzlab.Lowering.from_dict(case["lowering"])
    return {m: kzlab.simulate(model, frames=case["frames"], lowering=low, backends=s["sim"],
                              weights_on=s["weights_on"], predict=opts) for m, opts in modes.items()}


def calibrated(model: Any, cases: list[dict[str, Any]], i: int, raw: dict[str, Any], draws: int,
               loo: bool = True, frame_counts: str = "all", on: int = 2) -> dict[str, float]:
    """Case i predicted on the posterior of a calibration from the measured totals of `on` other lowerings (the
    same backend set, the next `on` lowerings in the list, at every frame count): the device's assumed ranges are
    the prior, the CPU is fixed by its profile scaled to the CPU-only wall measured in turns (the predicted case's
    with its +-3 %). The case's own lowering is never among them."""
    import kzlab
    from kzlab.analysis.predict.draws import ParameterSpace, spread
    from kzlab.analysis.predict.inference import infer

    me = cases[i]
    peers = [c for c in cases if c["set"] == me["set"] and c["frames"] == me["frames"]]
    k = peers.index(me)
    on = min(on, len(peers) - 1)
    chosen = [peers[(k + d) % len(peers)]["label"] for d in range(1, on + 1)]
    # the other lowerings at every frame count measured: the frame counts tell fixed costs from rates
    others = [c for c in cases if c["set"] == me["set"] and c["label"] in chosen] if frame_counts == "all" else \
        [peers[(k + d) % len(peers)] for d in range(1, on + 1)]
    s = SETS[me["set"]]
    cpu_perf = cpu_perf_of(raw)
    preds = {}
    for j, c in enumerate([me, *others]):
        # the case predicted keeps its CPU part's spread (+-3 %); the two measured ones are fixed by their own
        opts = {"cpu_profile": profile_of(c), "perf": {"CPU": cpu_perf}, "draws": draws, "seed": 0}
        if j == 0:
            opts["cpu_baseline_ms"] = baseline_runs(c)
        else:
            opts["cpu_scale"] = c["cpu_only_ms"] / c["cpu_profile"]["wall_ms"]
        preds[f"c{j}"] = kzlab.simulate(model, frames=c["frames"], lowering=kzlab.Lowering.from_dict(c["lowering"]),
                                        backends=s["sim"], weights_on=s["weights_on"], predict=opts).predicted
    space = ParameterSpace()
    for p in preds.values():  # the CPU's are fixed per case (its profile, scaled): only the priced ones are drawn
        space.add([q for q in p.parameters if q.name in p.costs.parameter_names()])
    # each total's noise is its own runs' spread; the model's discrepancy between lowerings is estimated by
    # leave-one-out on the two (each predicted from the other alone) and carried into the prediction
    post = infer({k: p.costs for k, p in preds.items()}, space,
                 {f"c{j + 1}": c["measured_ms"] for j, c in enumerate(others)}, n=draws, seed=0,
                 noise={f"c{j + 1}": measured_noise(c) for j, c in enumerate(others)}, flag_bounds=False,
                 discrepancy="loo" if loo else None)
    r = spread(post.predict(preds["c0"].costs))
    r["from"] = ", ".join(f"{c['label']} @{c['frames']}" for c in others)
    r["discrepancy"] = post.discrepancy
    return r


def band(pred: Any, measured: float) -> dict[str, Any]:
    return band_of(pred.range, measured)


def band_of(r: dict[str, float], measured: float) -> dict[str, Any]:
    return {"p10": r["p10"], "p50": r["p50"], "p90": r["p90"], "inside": r["p10"] <= measured <= r["p90"],
            "width": (r["p90"] - r["p10"]) / r["p50"], "position": position(r, measured),
            "p50_error": r["p50"] / measured - 1.0}


def position(r: dict[str, float], x: float) -> str:
    if x < r["p10"]:
        return f"below p10 by {100 * (1 - x / r['p10']):.0f} %"
    if x > r["p90"]:
        return f"above p90 by {100 * (x / r['p90'] - 1):.0f} %"
    return "inside"


def quantile(p: Any, q: float) -> float:
    """The q-quantile of a parameter drawn log-uniformly over [low, high] (its value when it has no range)."""
    if not p.uncertain:
        return p.value
    return math.exp(math.log(p.low) + q * (math.log(p.high) - math.log(p.low)))


def op_terms(pl_assumed: Any, pl_bench: Any, device: str) -> dict[str, list[float]]:
    """Per op type on the device: [measured ms (bench-ops), roofline ms at the assumed parameters' fast end (rates
    at their 90th percentile, launch at its 10th) and slow end (the reverse)]."""
    pred = pl_assumed.predicted
    params = {p.name: p for p in pred.parameters}
    bench_ms: dict[str, float] = {}
    for row in pl_bench.predicted.nodes:
        if row["backend"] == device and row["how"] != "view":
            bench_ms[row["op"]] = bench_ms.get(row["op"], 0.0) + row["ms"]
    out: dict[str, list[float]] = {}
    costs = pred.costs
    # the roofline terms were compiled in node order, one for each row priced "roofline"
    rows = [r for r in pred.nodes if r["how"] == "roofline"]
    for r, flops, nbytes, rate_p, bw_p, launch_p in zip(rows, costs.roof_flops, costs.roof_bytes, costs.roof_rate_p,
                                                        costs.roof_bw_p, costs.roof_launch_p, strict=True):
        if r["backend"] != device:
            continue
        t = []
        for q in (0.9, 0.1):
            rate, bw, launch = quantile(params[rate_p], q), quantile(params[bw_p], q), quantile(params[launch_p], 1 - q)
            t.append(max(flops / (rate * 1e9), nbytes / (bw * 1e9)) * 1e3 + launch / 1e3)
        e = out.setdefault(r["op"], [bench_ms.get(r["op"], 0.0), 0.0, 0.0])
        e[1] += t[0]
        e[2] += t[1]
    return out


def fmt_ms(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--frames", default="4,8", help="comma list of frame counts")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--backends", default="blas,rpc")
    ap.add_argument("--variants", default="", help="comma list of variant numbers (default: all)")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--save", default="", help="keep what was measured in this pickle")
    ap.add_argument("--replay", default="", help="predict from a --save pickle instead of measuring")
    ap.add_argument("--calibrate", action="store_true",
                    help="also predict each case from a calibration on other lowerings' measured totals")
    ap.add_argument("--calibrate-on", type=int, default=2,
                    help="how many other lowerings the calibration reads (each at every frame count; 7 = all)")
    ap.add_argument("--markdown", default="", help="write the tables as markdown here")
    args = ap.parse_args()
    args.frame_counts = [int(f) for f in args.frames.split(",")]
    warnings.simplefilter("ignore")
    import kzlab

    model = kzlab.load_model(args.model)
    raw = pickle.loads(Path(args.replay).read_bytes()) if args.replay else measure(args, model)

    rows = []
    terms: dict[str, dict[str, list[float]]] = {}
    shown: dict[str, list[str]] = {}  # each set's assumed device parameters, as the first case states them
    for case in raw["cases"]:
        pls = predictions(model, case, raw, args.draws)
        real = case["measured_ms"]
        row = {"set": case["set"], "label": case["label"], "frames": case["frames"], "measured": real,
               "cpu_only": case["cpu_only_ms"], "profile_wall": case["cpu_profile"]["wall_ms"],
               "bench_wall": case.get("bench_wall_ms"), "load": case.get("loadavg"),
               "splits": pls["assumed"].n_splits, **{m: band(pl.predicted, real) for m, pl in pls.items()}}
        if args.calibrate:
            c = calibrated(model, raw["cases"], raw["cases"].index(case), raw, args.draws, on=args.calibrate_on)
            row["calibrated"] = band_of(c, real)
        unscaled = predictions(model, case, raw, args.draws, baseline=False)
        row |= {f"{m} (profile only)": band(pl.predicted, real) for m, pl in unscaled.items()}
        rows.append(row)
        dev = SETS[case["set"]]["device"]
        for op, (meas, fast, slow) in op_terms(pls["assumed"], pls["bench-ops"], dev).items():
            e = terms.setdefault(case["set"], {}).setdefault(op, [0.0, 0.0, 0.0, 0])
            e[0] += meas
            e[1] += fast
            e[2] += slow
            e[3] += 1
        shown.setdefault(case["set"], [p.text() for p in pls["assumed"].predicted.parameters
                                       if p.name.startswith(dev)])

    modes = ["assumed", "bench-ops", *(["calibrated"] if args.calibrate else [])]
    lines = [
        "| set | lowering (conv src1 convt) | frames | splits | CPU-only ms (profile) | measured ms (bench-ops run) | "
        "load | " + " | ".join(f"{m} p10 / p50 / p90 | in | width" for m in modes) + " |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | " + " | ".join("--- | :-: | ---:" for _ in modes) + " |",
    ]
    for r in rows:
        cells = [f"{fmt_ms(r[m]['p10'])} / {fmt_ms(r[m]['p50'])} / {fmt_ms(r[m]['p90'])} | "
                 f"{'yes' if r[m]['inside'] else 'no'} | {100 * r[m]['width']:.1f} %" for m in modes]
        lines.append(f"| {r['set']} | {r['label']} | {r['frames']} | {r['splits']} | "
                     f"{fmt_ms(r['cpu_only'])} ({fmt_ms(r['profile_wall'])}) | {fmt_ms(r['measured'])}"
                     + (f" ({fmt_ms(r['bench_wall'])})" if r["bench_wall"] else "") + " | "
                     + (f"{r['load']:.1f}" if r["load"] is not None else "-") + " | " + " | ".join(cells) + " |")
    misses = [f"- {r['set']} {r['label']} {r['frames']} frames, {m}: {r[m]['position']}"
              for r in rows for m in modes if not r[m]["inside"]]
    drift = [abs(r["profile_wall"] / r["cpu_only"] - 1) for r in rows]

    summary = ["| set | mode | cases | coverage [p10, p90] | median width | width / assumed width (median of cases) | "
               "p50 within +-10 % | median abs. p50 error | noise floor | p50 noise floor |",
               "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    all_modes = [*modes, "assumed (profile only)", "bench-ops (profile only)"]
    for name in [*args.backends.split(","), "all"]:
        rs = [r for r in rows if name in ("all", r["set"])]
        if not rs:
            continue
        for m in all_modes:
            ref = "assumed (profile only)" if "profile only" in m else "assumed"
            cov = 100 * sum(r[m]["inside"] for r in rs) / len(rs)
            wid = statistics.median(r[m]["width"] for r in rs)
            ratio = statistics.median(r[m]["width"] / r[ref]["width"] for r in rs)
            # the coverage a perfect model with this mode's bands would get, given how far two measurements of one
            # graph (the CPU profile, then the CPU-only decodes in turns) lie apart on this machine
            floor = 100 * sum(abs(r["profile_wall"] / r["cpu_only"] - 1) <= r[m]["width"] / 2 for r in rs) / len(rs)
            near = 100 * sum(abs(r[m]["p50_error"]) <= 0.10 for r in rs) / len(rs)
            err = 100 * statistics.median(abs(r[m]["p50_error"]) for r in rs)
            # the share of cases a model without error could get within +-10 %: two measurements of one graph
            # on this machine (as for the noise floor) agreeing within 10 %
            floor10 = 100 * sum(abs(r["profile_wall"] / r["cpu_only"] - 1) <= 0.10 for r in rs) / len(rs)
            summary.append(f"| {name} | {m} | {len(rs)} | {cov:.0f} % | {100 * wid:.1f} % | {ratio:.3f} | "
                           f"{near:.0f} % | {err:.1f} % | {floor:.0f} % | {floor10:.0f} % |")

    term_lines = ["| set | op | measured ms (bench-ops, all cases) | assumed roofline, fast end | slow end | "
                  "measured in [fast, slow] |", "| --- | --- | ---: | ---: | ---: | :-: |"]
    for name, ops in terms.items():
        for op, (meas, fast, slow, _n) in sorted(ops.items(), key=lambda kv: -kv[1][0]):
            term_lines.append(f"| {name} | {op} | {fmt_ms(meas)} | {fmt_ms(fast)} | {fmt_ms(slow)} | "
                              f"{'yes' if fast <= meas <= slow else ('faster' if meas < fast else 'slower')} |")

    out = ["## Cases", "", *lines, "",
           "CPU-only ms: the CPU-only wall measured in turns with the truth (in brackets: the wall of the CPU profile "
           "of the same graph, taken just before). Measured ms: the median wall of the real scheduler (in brackets: "
           "the wall of the bench-ops run on the same backend set). Load: the 1-minute load average after the case.",
           "", "## Summary", "", *summary, "",
           "Width: (p90 - p10) / p50 of the predicted total. In: the measured wall lies in [p10, p90]. `assumed` "
           "and `bench-ops` scale the CPU profile to the CPU-only wall measured in turns with the truth "
           "(`cpu_baseline_ms`, its runs: their observed spread); the `profile only` rows do not (the spread of "
           "the profile's own repeat walls only); bench-ops rows carry the larger of their run's spread and the "
           f"drift between bursts pooled over the run's CPU-only pairs (+-{100 * raw.get('_drift', 0):.0f} %); "
           "`calibrated` scales the CPU part the same way and draws the device's parameters "
           f"from the posterior of a calibration on the measured totals of {args.calibrate_on} other lowerings "
           "(the next ones in the list; never the case's own; same set, every "
           "frame count measured: the frame counts tell fixed costs from rates; each total's noise its runs' "
           "spread, or 3 % when they were not kept, with the model's discrepancy estimated by leave-one-out on "
           "those totals; their CPU parts fixed at their own scale) and "
           "multiplies each draw by that discrepancy (log-normal). Noise floor: the share of cases in which two "
           "measurements of one graph on this machine (the CPU profile's wall, then the CPU-only decodes in turns "
           "with the truth) lie within half the case's band width of each other: the coverage a model without "
           "error would get with these bands; p50 noise floor: the share in which those two measurements agree "
           "within +-10 %, what a model without error could reach on the p50 yardstick. "
           "The CPU profile's wall differed from the CPU-only wall measured in turns by "
           f"{100 * statistics.median(drift):.0f} % "
           f"(median of cases; at most {100 * max(drift):.0f} %).", "",
           "## Outside the band", "", *(misses or ["- none"]), "",
           "## Per op on the device (where the assumed ranges stand or miss)", "", *term_lines, "",
           "Fast / slow end: each node's roofline with the rates and bandwidth at their 90th / 10th percentile and the "
           "launch cost at its 10th / 90th (a per-op band, not the total's).", "",
           "## The assumed device parameters", ""]
    for name, ps in shown.items():
        out += [f"- {name}: `{p}`" for p in ps]
    text = "\n".join(out)
    header = (f"machine: {cpu_model()}, {raw['threads']} threads, {raw['runs']} runs per measurement, "
              f"{args.draws} draws (seed 0); python {platform.python_version()}; command: "
              f"`{' '.join([Path(sys.executable).name, *sys.argv])}`")
    print(header)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(header + "\n\n" + text + "\n")


if __name__ == "__main__":
    main()
