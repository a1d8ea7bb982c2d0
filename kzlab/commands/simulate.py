"""`kzlab simulate MODEL --profile hexagon-v0.15.2|PATH.toml [--frames N] [lowering options] [--weights-on htp|cpu]
[--predict [--cpu-profile P.json] [--cpu-scale X | --cpu-baseline-ms MS] [--ops FILE ...]] [--json OUT]
[--sched-log LOG] [--stages S] [--what-if +OP -OP hmx=0 ...]`: predict where ggml_backend_sched would place every
node on a backend described by a capability profile (changed as a what-if), and with --predict how long the
decode would take and whether it fits each backend's memory; with a real scheduler log (GGML_SCHED_DEBUG=2),
print where the real one disagreed."""

from __future__ import annotations

from kzlab.commands.common import add_lowering, add_model, lowering_from, open_model


def register(sub) -> None:
    from kzlab.analysis.placement.capabilities import names

    p = sub.add_parser("simulate", help="predict the scheduler's node placement on a backend profile (no device)")
    add_model(p)
    p.add_argument(
        "--profile",
        default="hexagon-v0.15.2",
        metavar="NAME|PATH",
        help=f"capability profile: a built-in one ({', '.join(names())}) or a .toml file",
    )
    p.add_argument("--frames", type=int, default=31, help="code frames of the graph (default 31)")
    p.add_argument("--stages", metavar="S[+S...]",
                   help="only these stages under the device's scheduler (a stage or a prefix: decoder takes "
                   "decoder.0, decoder.1, ...); the rest runs on the CPU path")
    p.add_argument("--what-if", nargs="+", default=[], metavar="ITEM",
                   help="change the profile as a what-if: +OP (the device would run OP), -OP (it would not), "
                   "NAME=VALUE for one of its options (hmx=0: GGML_HEXAGON_USE_HMX=0)")
    p.add_argument("--weights-on", default="htp", help="htp (the profile's device buffer) or cpu")
    p.add_argument("--no-op-offload", dest="op_offload", action="store_false", help="scheduler op_offload off")
    p.add_argument("--json", help="write the placement (nodes, splits, copied_bytes, ...) as JSON")
    p.add_argument("--figure", help="write the timeline sketch (PNG/SVG)")
    p.add_argument(
        "--sched-log",
        metavar="LOG",
        help="a GGML_SCHED_DEBUG=2 log of the real scheduler on the same graph: print the nodes it placed elsewhere",
    )
    p.add_argument(
        "--sched-pass", type=int, default=-1, metavar="N", help="which scheduling pass of the log (default: the last)"
    )
    pr = p.add_argument_group("time and memory (--predict)")
    pr.add_argument("--predict", action="store_true", help="predict the time and each backend's memory")
    pr.add_argument("--cpu-profile", metavar="P.json",
                    help="a `kzlab profile --backend cpu --lowering device --json` of the same graph: the CPU "
                    "nodes' times")
    scale = pr.add_mutually_exclusive_group()
    scale.add_argument("--cpu-scale", type=float, metavar="X", help="multiply the CPU profile's times by X")
    scale.add_argument("--cpu-baseline-ms", type=float, metavar="MS",
                       help="scale the CPU profile so that the CPU-only decode takes MS (e.g. 3340, measured on "
                       "the device)")
    pr.add_argument("--ops", nargs="+", default=[], metavar="FILE",
                    help="op timings measured on the device: test-backend-ops perf output (console or sql), "
                    "`kzlab bench-ops` output, or a ggml-hexagon log written under GGML_HEXAGON_PROFILE=1 "
                    "(its profile-op lines)")
    pr.add_argument("--draws", type=int, default=500,
                    help="draws of the uncertain parameters (the predicted range; total_ms is their p50)")
    pr.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    add_lowering(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.analysis.placement import capabilities
    from kzlab.analysis.placement.simulate import simulate

    # a bad name, file, key or what-if is refused before the model is read
    caps = capabilities.load_changed(args.profile, args.what_if)
    log = None
    if args.sched_log:
        from kzlab.analysis.predict import schedlog

        log = schedlog.read(args.sched_log)
    wants = args.predict or args.cpu_profile or args.cpu_scale or args.cpu_baseline_ms or args.ops
    predict = dict(cpu_profile=args.cpu_profile, cpu_scale=args.cpu_scale, cpu_baseline_ms=args.cpu_baseline_ms,
                   ops=args.ops, draws=args.draws, seed=args.seed) if wants else None
    pl = simulate(
        open_model(args),
        profile=caps,
        frames=args.frames,
        stages=args.stages,
        lowering=lowering_from(args),
        weights_on=args.weights_on,
        op_offload=args.op_offload,
        predict=predict,
    )
    print(pl.summary())
    if pl.predicted is not None:
        print()
        print(pl.predicted.summary())
        print("memory:")
        for m in pl.memory.values():
            print(f"  {m.verdict()}")
    if log is not None:
        from kzlab.analysis.predict.schedlog import diff_placement

        print()
        print(f"real scheduler log {args.sched_log}:")
        print(diff_placement(log, pl, args.sched_pass).summary())
    if args.json:
        pl.to_json(args.json)
        print(f"wrote {args.json}")
    if args.figure:
        from kzlab.plots import split_timeline as timeline

        timeline(pl).savefig(args.figure, dpi=120)
        print(f"wrote {args.figure}")
    return 0
