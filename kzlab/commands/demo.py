"""`kzlab demo` (what `make demo` runs): build the built-in decoders if missing, decode, profile, and
write demo-report.html in the current directory.

The runs are kept small so a fresh machine finishes in a few minutes: the full-size synthetic decoder on a
few frames of random codes with two conv lowerings (an A/B comparison, one with the Hexagon what-if), and
the known-answer decoder turning a few seconds of the shipped speech sample back into audio.
"""

from __future__ import annotations

import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("demo", help="build the default decoders, decode, profile, write demo-report.html")
    p.add_argument("-o", "--output", default="demo-report.html")
    p.add_argument("--frames", type=int, default=6, help="code frames of the profiled runs (default 6)")
    p.add_argument("--seconds", type=float, default=3.0, help="seconds of speech for the known-answer run")
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.report import write_report
    from kzlab.ui.models import SPEECH, cache_dir, ensure_builtin
    from kzlab.ui.runner import RunSpec, execute

    t0 = time.perf_counter()
    for name in ("synthetic", "known-answer"):
        p = ensure_builtin(name, progress=print)
        print(f"decoder {name}: {p}")
    # conv_src1="data" (mul_mat(kernel, columns)) is the form whose src1 rows grow with T: the Hexagon
    # what-if of run A shows which of those MUL_MATs v0.15.2's 1024-row limit refuses
    low_a = {"conv": "im2col-f32", "conv_src1": "data"}
    low_b = {"conv": "ktap", "conv_src1": "data"}
    frames_speech = max(1, round(args.seconds * 12.5))
    specs = [
        RunSpec(model="synthetic", input="random", frames=args.frames, threads=args.threads, lowering=low_a,
                repeat=2, hexagon_profile="hexagon-v0.15.2", label="A: synthetic, conv im2col-f32, src1=data"),
        RunSpec(model="synthetic", input="random", frames=args.frames, threads=args.threads, lowering=low_b,
                repeat=2, label="B: synthetic, conv ktap, src1=data"),
        RunSpec(model="known-answer", input="audio", audio_path=str(SPEECH), frames=frames_speech,
                threads=args.threads, profile=False, label="known-answer: speech through the full-size vocoder"),
    ]
    recs = []
    for spec in specs:
        print(spec.label)
        rec = execute(spec, lambda k, n, text: print(f"  [{k}/{n}] {text}", flush=True))
        if rec.error:
            print(f"  error: {rec.error}")
        for note in rec.notes:
            print(f"  note: {note.splitlines()[0]}")
        recs.append(rec)
    out = write_report(recs, args.output, "kzlab demo")
    nb = Path(__file__).resolve().parents[2] / "notebooks"
    print(f"\nwrote {out.resolve()} in {time.perf_counter() - t0:.0f} s; open it in a browser (it is self-contained)")
    print(f"decoders are cached in {cache_dir()} (set KZLAB_CACHE to move them)")
    print(f"notebooks: jupyter lab {nb}  (start with 01_quickstart.ipynb; kzlab.Workbench() is the widget UI)")
    return 0 if all(r.ok for r in recs) else 2
