"""`kzlab whatif MODEL --frames N [lowering options] --cpu-baseline-ms MS --config NAME=PROFILE[,mm_chunk=K,...] ...
[--measured NAME=MS ...] [--ops FILE ...] [--target-ms MS] [--draws N] [--seed S] [--json OUT] [--no-cache]
[--no-accuracy] [--no-remedies] [--bound DB] [--stream K[,K...] [--pace FPS] [--utterance SECONDS]
[--realtime-p P]]`: which configuration to try on the device first, as probabilities over the parameters nobody
measured, with the device measurement that would settle it; each configuration's emulated accuracy beside its time,
and the fastest one that computes the right audio recommended. `--stream`: one streaming call of each size placed and
priced on each configuration (call time, P(real time), time to first audio, P(underrun) when paced) and the
smallest chunk that keeps real time recommended."""

from __future__ import annotations

import json

from kzlab.commands.common import add_lowering, add_model, lowering_from, open_model


def _measured(items: list[str]) -> dict[str, float]:
    from kzlab.errors import InvalidOptionError

    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            eq = ""
        if not eq or not name.strip():
            raise InvalidOptionError(f"--measured {item!r}: expected NAME=MS (e.g. cpu=3340 hexagon-v0.15.2=3950)")
    return out


def register(sub) -> None:
    p = sub.add_parser("whatif", help="which configuration first: paired predicted ranges, probabilities, the next "
                       "device measurement")
    add_model(p)
    p.add_argument("--frames", type=int, default=31, help="code frames of the graph (default 31)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=PROFILE[,k=v...]", required=True,
                   help="a configuration: a capability profile and lowering options that differ, e.g. "
                   "chunk=hexagon-v0.15.2,mm_chunk=1024 (repeat; the CPU-only decode 'cpu' is always compared)")
    p.add_argument("--cpu-baseline-ms", type=float, metavar="MS",
                   help="the CPU-only decode measured on the device (scales this machine's CPU profile)")
    p.add_argument("--measured", nargs="+", default=[], metavar="NAME=MS",
                   help="device totals to calibrate on (cpu=MS, a configuration or profile name=MS)")
    p.add_argument("--ops", nargs="+", default=[], metavar="FILE",
                   help="op timings measured on the device (test-backend-ops perf, GGML_HEXAGON_PROFILE log, "
                   "kzlab bench-ops)")
    p.add_argument("--target-ms", type=float, metavar="MS", help="the probability of reaching this total")
    p.add_argument("--draws", type=int, default=1000, help="paired draws of the uncertain parameters (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws (default 0)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of the profiles (default: all cores)")
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="profile every graph anew instead of reusing a cached CPU profile")
    p.add_argument("--no-accuracy", dest="accuracy", action="store_false",
                   help="do not emulate each configuration's arithmetic (a configuration on a known defective path is "
                   "still wrong output; the others' correctness is then not known and none is recommended)")
    p.add_argument("--no-remedies", dest="remedies", action="store_false",
                   help="do not price the correct variants of a configuration that hits a known defect")
    p.add_argument("--bound", type=float, default=None, metavar="DB",
                   help="a configuration computes the right audio when every stage of its emulated decode is within "
                   "DB of the host's F32 decode (default 40)")
    p.add_argument("--stream", metavar="K[,K...]",
                   help="price one streaming call of each chunk size (code frames a call) on each configuration: "
                   "call time, P(real time), time to first audio; recommends the smallest chunk that keeps real time")
    p.add_argument("--pace", type=float, metavar="FPS",
                   help="with --stream: the codes arrive at FPS frames a second (P(underrun) over the utterance)")
    p.add_argument("--utterance", type=float, metavar="SECONDS",
                   help="with --pace: the utterance's length in seconds (default 10)")
    p.add_argument("--realtime-p", type=float, metavar="P",
                   help="with --stream: the probability of real time a recommended chunk reaches (default 0.9)")
    p.add_argument("--json", help="write the answer (configs, pairs, target, sensitivity, next_measurements, "
                   "calibration) as JSON")
    add_lowering(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.analysis.predict.question import whatif

    result = whatif(open_model(args), args.config, frames=args.frames, lowering=lowering_from(args),
                    cpu_baseline_ms=args.cpu_baseline_ms, measured=_measured(args.measured), ops=args.ops,
                    target_ms=args.target_ms, draws=args.draws, seed=args.seed, cache=args.cache,
                    threads=args.threads, progress=None, accuracy=args.accuracy, remedies=args.remedies,
                    bound=args.bound, stream=args.stream, pace=args.pace, utterance_s=args.utterance,
                    realtime_p=args.realtime_p)
    print(result.summary())
    print(f"({result.seconds:.1f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items()) + ")")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_dict(), f, indent=1)
        print(f"wrote {args.json}")
    return 0
