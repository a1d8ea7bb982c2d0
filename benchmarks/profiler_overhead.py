"""What `kzlab.profile` costs, per granularity: the stretch-timed default against node-by-node timing.

For {cpu, auto (sched blas+cpu here)} x {portable, fast} lowering, each granularity is profiled in turns
(auto, node, auto, node, ... for `--rounds` rounds), all in one process on one loaded decoder, so that a
drift of the machine's load hits both alike. Each profile reports:

* overhead: its `overhead_ratio`, the median over its repeats of profiled / plain, each repeat a
  back-to-back pair of runs in alternating order, and the pairs' ratios themselves;
* min/min: its fastest profiled run over its fastest plain run (what the overhead is with the machine's load
  taken out as far as it goes: on a shared machine the slow outliers are someone else's work);
* sum/wall: the node rows' times summed (the stretches' medians), over the median profiled wall time; run:
  the same within each profiled run (its stretch times over its wall time), the median over the runs;
* plain: the median plain wall time; stretches: how many separate measured computes a profiled run makes
  (with the scheduler's splits among them); alone: the share of the node time measured alone rather than
  apportioned.

    .venv/bin/kzlab synth --preset qwen3-tts-12hz -o /tmp/full-f32.gguf
    .venv/bin/python benchmarks/profiler_overhead.py /tmp/full-f32.gguf --frames 31 --repeat 5 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import kzlab


def parse_granularity(text: str) -> str | int:
    return int(text) if text.isdigit() else text


def one(model: str, backend: str, mode: str, granularity: str | int, args) -> dict:
    p = kzlab.profile(
        model,
        frames=args.frames,
        backend=backend,
        threads=args.threads,
        mode=mode,
        repeat=args.repeat,
        warmup=args.warmup,
        peak=False,
        progress=False,
        granularity=granularity,
    )
    c = p.config
    return {
        "label": c["backend_label"],
        "overhead": p.overhead_ratio,
        "pairs": c["overhead_pair_ratios"],
        "minmin": min(c["profiled_all_ms"]) / min(c["wall_all_ms"]),
        "sum_wall": p.node_time_ms / p.profiled_ms if p.profiled_ms else 0.0,
        "run_sum_wall": statistics.median(
            s / w for s, w in zip(c["node_sum_all_ms"], c["profiled_all_ms"], strict=True) if w > 0
        ),
        "plain": p.wall_ms,
        "stretches": c["n_stretches"],
        "splits": c["n_splits_derived"],
        "alone": c["measured_share"],
        "apportion": c["apportion"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a decoder GGUF (full size: kzlab synth --preset qwen3-tts-12hz -o F)")
    ap.add_argument("--frames", type=int, default=31)
    ap.add_argument("--repeat", type=int, default=5, help="plain/profiled pairs per profile")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up pairs per profile (the calibration runs)")
    ap.add_argument("--rounds", type=int, default=1, help="profiles per granularity, taken in turns")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--backends", default="cpu,auto", help="comma-separated (default cpu,auto)")
    ap.add_argument("--modes", default="portable,fast", help="comma-separated lowering modes")
    ap.add_argument("--granularity", default="auto,node", help="comma-separated; node is the old per-node timing")
    args = ap.parse_args(argv)
    if not Path(args.model).is_file():
        print(f"no model at {args.model}: kzlab synth --preset qwen3-tts-12hz -o {args.model}", file=sys.stderr)
        return 2
    grans = [parse_granularity(x) for x in args.granularity.split(",")]
    head = (
        f"{'backend':<16} {'mode':<9} {'granularity':<11} {'overhead':>8} {'min/min':>7} {'sum/wall':>8} "
        f"{'run':>5} {'plain ms':>9} {'stretches':>9} {'alone':>6}  pair ratios"
    )
    print(f"{Path(args.model).name}, {args.frames} frames, {args.repeat} pairs + {args.warmup} warm-up per profile")
    print(head, flush=True)
    summary: list[tuple[str, str, str | int, list[dict]]] = []
    for backend in args.backends.split(","):
        for mode in args.modes.split(","):
            runs: dict[str | int, list[dict]] = {g: [] for g in grans}
            for _ in range(args.rounds):
                for g in grans:
                    r = one(args.model, backend, mode, g, args)
                    runs[g].append(r)
                    pairs = " ".join(f"{x:.3f}" for x in r["pairs"])
                    print(
                        f"{r['label']:<16} {mode:<9} {str(g):<11} {r['overhead']:>8.3f} {r['minmin']:>7.3f} "
                        f"{r['sum_wall']:>8.3f} {r['run_sum_wall']:>5.3f} {r['plain']:>9.0f} "
                        f"{r['stretches']:>5}/{r['splits']:<3} "
                        f"{r['alone']:>6.2f}  {pairs}",
                        flush=True,
                    )
            for g in grans:
                summary.append((runs[g][0]["label"], mode, g, runs[g]))
    if args.rounds > 1:
        print("\nmedians over the rounds")
        print(head[: head.index("  pair")])
        for label, mode, g, rs in summary:
            keys = ("overhead", "minmin", "sum_wall", "run_sum_wall", "plain", "alone")
            med = {k: statistics.median(r[k] for r in rs) for k in keys}
            print(
                f"{label:<16} {mode:<9} {str(g):<11} {med['overhead']:>8.3f} {med['minmin']:>7.3f} "
                f"{med['sum_wall']:>8.3f} {med['run_sum_wall']:>5.3f} {med['plain']:>9.0f} "
                f"{rs[0]['stretches']:>5}/{rs[0]['splits']:<3} "
                f"{med['alone']:>6.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
