"""`kzlab bench-ops --backend NAME MODEL [--frames N] [lowering options] -o FILE.sql [--profile-out FILE.toml]`:
measure the op shapes of the decoder graph on a backend this machine has and write them in test-backend-ops'
SQL format (see kzlab.analysis.predict.bench_ops); the backend's fixed costs go into a capability profile."""

from __future__ import annotations

from kzlab.commands.common import add_lowering, add_model, lowering_from, open_model


def register(sub) -> None:
    p = sub.add_parser("bench-ops", help="measure the graph's op shapes on a backend (test-backend-ops SQL format)")
    add_model(p)
    p.add_argument("--backend", required=True, help="cpu | blas | rpc://HOST:PORT | a device name")
    p.add_argument("--frames", type=int, default=31, help="code frames of the graph (default 31)")
    p.add_argument("--repeat", type=int, default=5, help="timed runs (medians are written)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: $KZLAB_THREADS, else all cores)")
    p.add_argument("-o", "--output", required=True, help="SQL file to write (test-backend-ops --output sql)")
    p.add_argument("--profile-out", metavar="FILE.toml",
                   help="also write the backend's capability profile with its measured fixed costs in [perf]")
    add_lowering(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from kzlab.analysis.predict.bench_ops import bench_ops, write_sql
    from kzlab.analysis.predict.calibrate import measured_profile_text

    model = open_model(args)
    res = bench_ops(model, args.backend, args.frames, lowering_from(args), repeat=args.repeat, threads=args.threads)
    write_sql(res.records, args.output)
    print(f"{len(res.records)} op shapes measured on {res.backend} ({res.config['backend_label']}, "
          f"{args.frames} frames); wrote {args.output}")
    print("fixed costs: " + ", ".join(f"{k} = {v:.4g}" for k, v in res.perf.items()
                                   if k not in ("source", "sources")))
    print(f"run-to-run spread of the measurement's walls: +-{res.config['spread']:.1%}")
    if args.profile_out:
        Path(args.profile_out).write_text(measured_profile_text(args.backend, res.perf))
        print(f"wrote {args.profile_out}")
    return 0
