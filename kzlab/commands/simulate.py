"""`kzlab simulate MODEL --profile hexagon-v0.15.2 [--frames N] [lowering options] [--weights-on htp|cpu] [--json OUT]`:
predict where ggml_backend_sched would place every node on a backend described by a capability profile."""

from __future__ import annotations

from kzlab.commands.common import add_lowering, add_model, lowering_from


def register(sub) -> None:
    from kzlab.analysis.placement.capabilities import names

    p = sub.add_parser("simulate", help="predict the scheduler's node placement on a backend profile (no device)")
    add_model(p)
    p.add_argument("--profile", default="hexagon-v0.15.2", choices=names(), help="capability profile")
    p.add_argument("--frames", type=int, default=31, help="code frames of the graph (default 31)")
    p.add_argument("--weights-on", default="htp", help="htp (the profile's device buffer) or cpu")
    p.add_argument("--no-op-offload", dest="op_offload", action="store_false", help="scheduler op_offload off")
    p.add_argument("--json", help="write the placement (nodes, splits, copied_bytes, ...) as JSON")
    p.add_argument("--figure", help="write the timeline sketch (PNG/SVG)")
    add_lowering(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.analysis.placement.simulate import simulate

    pl = simulate(
        args.model,
        profile=args.profile,
        frames=args.frames,
        lowering=lowering_from(args),
        weights_on=args.weights_on,
        op_offload=args.op_offload,
        layout=args.layout,
    )
    print(pl.summary())
    if args.json:
        pl.to_json(args.json)
        print(f"wrote {args.json}")
    if args.figure:
        from kzlab.plots import split_timeline as timeline

        timeline(pl).savefig(args.figure, dpi=120)
        print(f"wrote {args.figure}")
    return 0
