"""`kzlab report MODEL [MODEL2] [options] [--whatif WHATIF.json ...] -o report.html`: one self-contained HTML file
of decode, profile, placement and audio for one or two decoders (two: a side-by-side comparison), and the answer
of each what-if `kzlab whatif --json` wrote (a what-if alone needs no MODEL)."""

from __future__ import annotations

from kzlab.commands.common import add_backend, add_lowering, backend_spec, lowering_from


def register(sub) -> None:
    from kzlab.app.runner import INPUTS

    p = sub.add_parser("report", help="write a self-contained HTML report (figures, tables, audio)")
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="decoder files (.gguf), or the built-in 'synthetic' / 'known-answer'; two are compared")
    p.add_argument("-o", "--output", default="report.html", help="HTML file to write (default report.html)")
    p.add_argument("--input", choices=INPUTS, default="random",
                   help="fixture codes, random codes of --frames frames, --codes FILE, or --audio (known-answer)")
    p.add_argument("--frames", type=int, default=8, help="frames of random codes (audio: at most this many)")
    p.add_argument("--codes", default="", help="codes file for --input npy")
    p.add_argument("--audio", default="", help="24 kHz WAV for --input audio (default: data/speech-24k.wav)")
    p.add_argument("--repeat", type=int, default=3, help="profile repeats")
    p.add_argument("--hexagon", default=None, metavar="PROFILE", help="also simulate placement, e.g. hexagon-v0.15.2")
    p.add_argument("--predict", action="store_true", help="with --hexagon: the placement's predicted time and memory")
    p.add_argument("--cpu-baseline-ms", type=float, default=None, metavar="MS",
                   help="with --predict: the CPU-only decode measured on the device (scales the CPU nodes)")
    p.add_argument("--whatif", action="append", default=[], metavar="WHATIF.json",
                   help="add the what-if that `kzlab whatif ... --json WHATIF.json` wrote (repeatable)")
    p.add_argument("--ref", default="", metavar="REF.npz",
                   help="reference stage activations (codes + one array per stage): decode its codes and compare "
                   "every stage with it (as `kzlab compare --ref`)")
    p.add_argument("--bound", type=float, default=40.0, metavar="DB",
                   help="with --ref or two models: name the first stage whose SNR is below DB (default 40)")
    p.add_argument("--title", default="kzlab report")
    p.add_argument("--hparam", action="append", default=[], metavar="NAME=VALUE",
                   help="a hyperparameter the files do not carry, e.g. group_norm_groups=16 (repeatable; recorded "
                   "as given in the report)")
    add_backend(p)
    add_lowering(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.app.runner import RunSpec, execute
    from kzlab.report import read_whatif, write_report

    if len(args.models) > 2:
        print("kzlab report: at most two models (the second is compared with the first)")
        return 2
    if not args.models and not args.whatif:
        print("kzlab report: give a MODEL (or two), or --whatif WHATIF.json")
        return 2
    from kzlab.formats.given import parse_items

    whatifs = [read_whatif(w) for w in args.whatif]  # a bad file is refused before anything runs
    given = parse_items(args.hparam)
    low = lowering_from(args).to_dict()
    bk = backend_spec(args)
    recs = []
    for i, m in enumerate(args.models):
        spec = RunSpec(model=m, input=args.input, frames=args.frames, npy_path=args.codes, audio_path=args.audio,
                       backend=bk.backend, threads=bk.threads, sched=bk.sched, op_offload=bk.op_offload,
                       weights_on=bk.weights_on, lowering=low, repeat=args.repeat,
                       hexagon_profile=args.hexagon, predict=bool(args.predict and args.hexagon),
                       cpu_baseline_ms=args.cpu_baseline_ms, label=f"{'AB'[i]}: {m}", ref=args.ref,
                       bound=args.bound, hparams=given)
        rec = execute(spec, lambda k, n, text: print(f"  [{k}/{n}] {text}", flush=True))
        ran = f"{len(rec.wav)} samples on {rec.backend_label}, {rec.mode} mode" if rec.ok else ""
        print(f"{spec.label}: " + (f"error: {rec.error}" if rec.error else ran))
        if rec.accuracy is not None:
            print(f"  accuracy: {rec.accuracy.summary()}")
        for note in rec.notes:
            print(f"  note: {note.splitlines()[0]}")
        recs.append(rec)
    out = write_report(recs, args.output, args.title, whatifs, bound=args.bound)
    print(f"wrote {out.resolve()}")
    return 0 if all(r.ok for r in recs) else 2
