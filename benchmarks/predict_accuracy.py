"""How well the time model predicts a placement, where the truth exists: `sched blas+cpu` and `sched rpc+cpu`
(a loopback RPC server) on this machine.

For every lowering variant (portable: im2col-f32, im2col-f16, ktap; each conv_src1 order; col2im and direct
transposed convs) the prediction is made only from a CPU-only profile of the variant plus `kzlab bench-ops`
of the other backend (its op rows and its fixed costs, all measured here), and compared with the measured wall
time of the real scheduler on the same graph (median of --runs decodes, taken in turns with CPU-only decodes,
whose median scales the CPU profile as `--cpu-baseline-ms` would: the machine's load drifts between minutes).
Prints the table, the error of each
row, and the Spearman rank correlation of predicted against measured per backend set.

    python benchmarks/predict_accuracy.py --model full-f16.gguf [--frames 8] [--runs 5] [--backends blas,rpc]

(`kzlab synth --preset qwen3-tts-12hz -o full-f16.gguf` writes a full-size decoder with random weights.)
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
import warnings

import numpy as np


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 1 else float("nan")


def measured_ms(model, lowering, backend: list[str], codes, runs: int, threads: int | None) -> tuple[float, float]:
    """(median wall of the real scheduler on `backend`, median wall of the CPU-only decode), in turns (CPU, sched,
    CPU, sched...) so that a change of the machine's load between the two cancels out."""
    import kzlab

    with kzlab.Decoder(model, lowering, backend=backend, sched=True, threads=threads) as d, \
            kzlab.Decoder(model, lowering, backend="cpu", sched=False, threads=threads) as c:
        d.decode(codes)  # graphs built and allocated
        c.decode(codes)
        ts, cs = [], []
        for _ in range(runs):
            for dec, out in ((c, cs), (d, ts)):
                t0 = time.perf_counter()
                dec.decode(codes)
                out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts), statistics.median(cs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--backends", default="blas,rpc")
    ap.add_argument("--variants", default="", help="comma list of variant numbers to run (default: all)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from ggml import ggml as g

    import kzlab
    from kzlab.analysis.predict.bench_ops import bench_ops, measure_fixed_costs
    from kzlab.codes import random_codes
    from kzlab.environment import default_threads
    from kzlab.runtime.backends import init_backend
    from kzlab.runtime.rpc import rpc_server

    model = kzlab.load_model(args.model)
    codes = random_codes(model.hparams, args.frames, seed=0)
    variants = [
        kzlab.Lowering(mode="portable", conv=c, conv_src1=s, convt=t)
        for c, s, t in itertools.product(["im2col-f32", "im2col-f16", "ktap"], ["data", "kernel"], ["col2im", "direct"])
    ]
    if args.variants:
        variants = [variants[int(i)] for i in args.variants.split(",")]
    cpu = init_backend("cpu", args.threads or default_threads())
    cpu_fixed = measure_fixed_costs(cpu.handle)
    g.ggml_backend_free(cpu.handle)
    cpu_perf = {"source": "measured here: a one-node graph on the CPU backend", **cpu_fixed}
    rows = []
    with rpc_server(threads=args.threads or default_threads()) as srv:
        sets = {
            "blas": (["blas", "cpu"], [("BLAS", "blas", "CPU"), ("CPU", "cpu", "CPU")], "BLAS", "blas"),
            "rpc": ([srv.address, "cpu"], [("RPC", "rpc", "RPC"), ("CPU", "cpu", "CPU")], "RPC", srv.address),
        }
        for i, low in enumerate(variants):
            label = f"{low.conv} src1={low.conv_src1} {low.convt}"
            cpu_prof = kzlab.profile(model, codes=codes, backend="cpu", sched=False, lowering=low, repeat=args.runs,
                                     warmup=1, peak=False, progress=False, threads=args.threads)
            for name in args.backends.split(","):
                spec, sim, won, bench_backend = sets[name]
                bench = bench_ops(model, bench_backend, args.frames, low, repeat=args.runs, threads=args.threads)
                real, cpu_wall = measured_ms(model, low, spec, codes, args.runs, args.threads)
                # the CPU profile scaled to the CPU-only wall measured in turns with the truth (as --cpu-baseline-ms
                # scales it to the CPU-only decode measured on a device)
                pl = kzlab.simulate(model, frames=args.frames, lowering=low, backends=sim, weights_on=won,
                                    predict={"cpu_profile": cpu_prof, "cpu_baseline_ms": cpu_wall,
                                             "ops": bench.records, "perf": {won: bench.perf, "CPU": cpu_perf}})
                pred = pl.predicted.total_ms
                rows.append({"variant": label, "set": name, "predicted": pred, "measured": real,
                             "error": pred / real - 1, "splits": pl.n_splits, "assumed": pl.predicted.assumed})
                print(f"{i:2d} {label:32s} {name:5s} predicted {pred:9.1f} ms  measured {real:9.1f} ms  "
                      f"{100 * (pred / real - 1):+6.1f} %  splits {pl.n_splits}", flush=True)
    print()
    for name in args.backends.split(","):
        r = [x for x in rows if x["set"] == name]
        worst = max(abs(x["error"]) for x in r)
        rho = spearman([x["predicted"] for x in r], [x["measured"] for x in r])
        print(f"{name}: {len(r)} variants, worst error {100 * worst:.1f} %, Spearman {rho:.3f}; "
              f"assumed: {sorted({a for x in r for a in x['assumed']}) or 'none'}")


if __name__ == "__main__":
    main()
