"""`kzlab profile MODEL [--frames N | --codes F] [--stream K [--warm P]] [--backend ...] [--repeat R] [--json OUT]
[--trace OUT]`.

Prints the time per stage and per op of one decode, timed node by node (see kzlab.runtime.profiler); with
`--stream K`, of one call of K frames of a stateful stream, its state what the calls before it left.
"""

from __future__ import annotations

from kzlab.codes import load_codes
from kzlab.commands.common import add_backend, add_lowering, add_model, backend_spec, lowering_from, open_model


def register(sub) -> None:
    p = sub.add_parser("profile", help="time every node of one decode (per stage, per op; JSON and trace)")
    add_model(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--frames", type=int, default=31, help="random codes of N frames (default 31)")
    src.add_argument("--codes", help="codes [codebooks, T] (or [T] for a one-codebook family) as .npy / .npz / .json")
    p.add_argument("--stream", type=int, metavar="K", default=None,
                   help="profile one streaming call of K frames (a causal family), not a whole decode: its state "
                   "is what pushing --warm frames in calls of K left; --codes: the last K frames are the call")
    p.add_argument("--warm", type=int, metavar="P", default=None,
                   help="with --stream: frames pushed before the profiled call (default: enough calls of K to fill "
                   "the longest state tensor)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs (medians are reported)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs first")
    p.add_argument("--json", dest="json_out", metavar="OUT", help="write the profile as JSON")
    p.add_argument("--trace", metavar="OUT", help="write a Chrome trace JSON (opens in Perfetto)")
    p.add_argument("--no-peak", dest="peak", action="store_false", help="skip the MUL_MAT peak microbenchmark")
    p.add_argument("--granularity", default="auto", metavar="auto|node|layer|split|N",
                   help="where the profiler times the run: auto (stretches planned to keep its cost low; the big "
                   "nodes alone) | node (every node alone: the most direct, the most costly) | layer | split | N nodes")
    p.add_argument("--apportion", default="auto", choices=("auto", "calibrated", "roofline"),
                   help="how a stretch's time is shared among its nodes (auto: calibrated from the warm-up run)")
    add_backend(p)
    add_lowering(p)
    p.set_defaults(func=run)


def _table(rows: list[dict], key: str, peak: float) -> list[str]:
    lines = [f"{key:<18} {'ms':>10} {'share':>7} {'GFLOP':>9} {'GF/s':>8} {'% peak':>7} {'MB':>9}"]
    for r in rows:
        pct = 100 * r["gflops"] / peak if peak > 0 else 0.0
        lines.append(
            f"{str(r[key])[:18]:<18} {r['time_ms']:>10.3f} {100 * r['share']:>6.1f}% {r['flops'] / 1e9:>9.3f} "
            f"{r['gflops']:>8.2f} {pct:>6.1f}% {r['bytes'] / 1e6:>9.2f}"
        )
    return lines


def run(args) -> int:
    from kzlab.analysis.profile import profile

    codes = load_codes(args.codes) if args.codes else None
    prof = profile(
        open_model(args),
        frames=args.frames,
        codes=codes,
        lowering=lowering_from(args),
        repeat=args.repeat,
        warmup=args.warmup,
        peak=args.peak,
        granularity=int(args.granularity) if args.granularity.isdigit() else args.granularity,
        apportion=args.apportion,
        backends=backend_spec(args),
        stream=args.stream,
        warm=args.warm,
    )
    c = prof.config
    print(f"model      {c['model']}  ({c['frames']} frames -> {c['samples']} samples)")
    if c.get("stream"):
        st = c["stream"]
        print(f"stream     {c['graph']}: the state ({st['state_tensors']} tensors, {st['state_bytes'] / 1e6:.3f} MB) "
              f"left by {len(st['warmed_by'])} calls before it ({st['codes']} codes)"
              + "".join(f"; {k}: {v}" for k, v in st["plan_changes"].items()))
    sched = "on" if c["sched"] else "off"
    print(f"backend    {c['backend_label']}  scheduler {sched}  threads {c['threads']}  weights on {c['weights_on']}")
    print(f"lowering   {c['lowering_label']}")
    print(
        f"wall       {prof.wall_ms:.2f} ms plain, {prof.profiled_ms:.2f} ms profiled "
        f"(overhead x{prof.overhead_ratio:.2f}); node sum {prof.node_time_ms:.2f} ms"
    )
    if prof.peak_gflops:
        print(f"peak       {prof.peak_gflops:.1f} GF/s ({c['peak']['op']}, {c['peak']['threads']} threads)")
    print(f"splits     {c['n_splits_read']} (scheduler), {sum(s['input_bytes'] for s in prof.splits)} bytes copied in")
    print()
    print("\n".join(_table(prof.by_stage(), "stage", prof.peak_gflops)))
    print()
    print("\n".join(_table(prof.by_op(), "op", prof.peak_gflops)))
    blocks = ", ".join(f"{r['group']} {100 * r['share']:.1f}% ({r['flops'] / 1e9:.3f} GFLOP)" for r in prof.by_group())
    print(f"\nby block ({c.get('family', '?')}): {blocks}; shares of the node time")
    if args.json_out:
        prof.to_json(args.json_out)
        print(f"wrote {args.json_out}")
    if args.trace:
        prof.write_trace(args.trace)
        print(f"wrote {args.trace}")
    return 0
