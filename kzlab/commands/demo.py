"""`kzlab demo` (what `make demo` runs): see `kzlab.app.demo`."""

from __future__ import annotations

import time


def register(sub) -> None:
    p = sub.add_parser("demo", help="build the default decoders, decode, profile, write demo-report.html")
    p.add_argument("-o", "--output", default="demo-report.html")
    p.add_argument("--frames", type=int, default=6, help="code frames of the profiled runs (default 6)")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds of speech for the known-answer run")
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.app.builtins import cache_dir
    from kzlab.app.demo import run_demo

    t0 = time.perf_counter()
    out, recs = run_demo(args.output, args.frames, args.seconds, args.threads, say=lambda t: print(t, flush=True))
    print(f"\nwrote {out.resolve()} in {time.perf_counter() - t0:.0f} s; open it in a browser (it is self-contained)")
    print(f"decoders are cached in {cache_dir()} (set KZLAB_CACHE to move them)")
    print("notebooks: kzlab notebooks DIR copies them out, then jupyter lab DIR (start with 01_quickstart.ipynb; "
          "kzlab.Workbench() is the widget UI)")
    return 0 if all(r.ok for r in recs) else 2
