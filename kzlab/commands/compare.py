"""`kzlab compare MODEL [--ref REF.npz | --against 'OPTIONS' | --device PROFILE[,ITEM...]] [--bound DB] [--json OUT]`:
the SNR of every stage of one run against a reference of stage activations or against another run, and the first
stage below a bound (`kzlab.compare`, the same function the Workbench's Compare tab and the report use); with
`--device`, the device's arithmetic emulated on the host (`kzlab.analysis.emulate`) against the host's F32 decode."""

from __future__ import annotations

from kzlab.commands.common import add_backend, add_lowering, add_model, backend_spec, lowering_from, open_model


def register(sub) -> None:
    from kzlab.analysis.accuracy import DEFAULT_BOUND_DB

    p = sub.add_parser(
        "compare", help="accuracy per stage: SNR of each stage against a reference .npz or another run",
        description="Decode with the given lowering and backend options (run B) and give the SNR of every stage "
        "against a reference .npz of stage activations (--ref, the fixtures' format: codes and one (C, T) array "
        "per stage) or against another run (--against: these options with some changed), and the first stage "
        "whose SNR is below --bound.",
    )
    add_model(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ref", metavar="REF.npz", help="reference stage activations (its codes are decoded)")
    p.add_argument("--device", metavar="PROFILE[,ITEM...]",
                   help="the device's arithmetic emulated on the host: the placed graph (as `kzlab simulate "
                   "--profile PROFILE` places it, what-if items such as hmx=0 or +SIN after commas) decoded with "
                   "every product the device runs computed as its kernel computes it, against the host's F32 decode "
                   "(and --ref when given); --weights-on names the weights' buffer (default htp)")
    g.add_argument("--against", metavar="OPTIONS",
                   help="run A: this run with these options changed, e.g. 'conv=im2col-f32 gelu=erf' or "
                   "'wtype=f32 backend=cpu' (lowering and backend option names, NAME=VALUE separated by spaces)")
    p.add_argument("--bound", type=float, default=DEFAULT_BOUND_DB, metavar="DB",
                   help=f"name the first stage whose SNR is below DB (default {DEFAULT_BOUND_DB:g})")
    p.add_argument("--frames", type=int, default=None, help="frames of random codes with --against (default 31)")
    p.add_argument("--codes", default=None, help="codes file (.npy/.npz) to decode with --against")
    p.add_argument("--repeat", type=int, default=3, help="timed decodes per run (0: none)")
    p.add_argument("--json", metavar="OUT", default=None, help="write the result as JSON")
    p.add_argument("--stages", default=None, metavar="S[+S...]",
                   help="with --device: only these stages under the device's scheduler (e.g. decoder)")
    p.add_argument("--wav", metavar="OUT.wav", default=None,
                   help="with --device: write the emulated waveform (and OUT-host.wav, the host's F32 decode)")
    add_backend(p)
    add_lowering(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.analysis.accuracy import compare
    from kzlab.codes import load_codes
    from kzlab.errors import InvalidOptionError

    codes = load_codes(args.codes) if args.codes else None
    if args.device:
        if args.against:
            raise InvalidOptionError("--device compares against the host's F32 decode (and --ref): not --against")
        return run_device(args, codes)
    if not (args.ref or args.against):
        raise InvalidOptionError("compare needs --ref REF.npz, --against 'OPTIONS' or --device PROFILE")
    res = compare(open_model(args), ref=args.ref, against=args.against, codes=codes, frames=args.frames,
                  bound=args.bound, lowering=lowering_from(args), backends=backend_spec(args), repeat=args.repeat)
    print(f"{res.model} ({res.family}), {res.frames} frames")
    print(f"  A: {res.a['label']}")
    print(f"  B: {res.b['label']}")
    w = max([len(s.stage) for s in res.stages] + [5])
    print(f"  {'stage':<{w}} {'SNR dB':>8} {'max |err|':>10}  {'shape':<12}")
    for s in res.stages:
        db = "-" if s.snr_db is None else ("exact" if s.snr_db == float("inf") else f"{s.snr_db:.1f}")
        flag = "  < bound" if s.snr_db is not None and s.snr_db < res.bound_db else ""
        print(f"  {s.stage:<{w}} {db:>8} {s.max_abs_err:>10.3g}  {'x'.join(map(str, s.shape)):<12}{flag}"
              + (f"  ({s.note})" if s.note else ""))
    print(res.summary())
    if args.json:
        print(f"wrote {res.to_json(args.json)}")
    return 0 if res.ok else 1


def run_device(args, codes) -> int:
    """`--device`: the emulated decode of the placed graph; exit 1 when it computes the wrong audio."""
    from pathlib import Path

    from kzlab.analysis.emulate.device import emulate

    res = emulate(open_model(args), args.device, frames=31 if args.frames is None else args.frames,
                  lowering=lowering_from(args), codes=codes, stages=args.stages, weights_on=args.weights_on or "htp",
                  bound=args.bound, ref=args.ref, threads=args.threads)
    print(res.summary())
    if args.wav:
        out = Path(args.wav)
        print(f"wrote {res.save_wav(out)} (emulated) and {res.save_wav(out.with_name(out.stem + '-host.wav'), True)}"
              " (host F32)")
    if args.json:
        print(f"wrote {res.to_json(args.json)}")
    return 0 if res.correct else 1
