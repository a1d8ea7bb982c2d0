"""`kzlab calibrate MODEL --cpu-profile P.json --measured cpu=3340 hexagon-v0.15.2=3950 [--fit sync_us]
[--frames N] [lowering options] -o PROFILE.toml`: fit the time model to whole decodes measured on the device and
write the device's capability profile with the fitted values (see kzlab.analysis.predict.calibrate)."""

from __future__ import annotations

from kzlab.commands.common import add_lowering, add_model, lowering_from, open_model


def _measured(items: list[str]) -> dict[str, float]:
    from kzlab.errors import InvalidInputError

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise InvalidInputError(f"--measured {item!r}: expected NAME=MS, e.g. cpu=3340") from None
    return out


def register(sub) -> None:
    from kzlab.analysis.predict.calibrate import FITTABLE

    p = sub.add_parser("calibrate", help="fit the time model to decode times measured on the device")
    add_model(p)
    p.add_argument("--cpu-profile", required=True, metavar="P.json",
                   help="`kzlab profile MODEL --backend cpu --lowering device --json P.json` of the same graph")
    p.add_argument("--measured", nargs="+", required=True, metavar="NAME=MS",
                   help="whole-decode times measured on the device: cpu=MS (CPU only) and PROFILE=MS per device "
                   "configuration (a capability profile name or .toml path), e.g. cpu=3340 hexagon-v0.15.2=3950")
    p.add_argument("--fit", choices=FITTABLE, default="sync_us",
                   help="the device parameter to fit (default sync_us: the cost of each split on the device)")
    p.add_argument("--frames", type=int, default=31, help="code frames of the measured decodes (default 31)")
    p.add_argument("--weights-on", default="htp", help="htp (the device's buffer) or cpu")
    p.add_argument("-o", "--output", required=True, help="capability profile TOML to write")
    add_lowering(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from kzlab.analysis.predict.calibrate import calibrate

    measured = _measured(args.measured)
    model = open_model(args)
    cal = calibrate(model, measured, args.cpu_profile, args.frames, lowering_from(args), fit=args.fit,
                    weights_on=args.weights_on)
    Path(args.output).write_text(cal.profile_text)
    print(cal.summary())
    print(f"wrote {args.output}: use it as --profile {args.output} with --cpu-scale {cal.cpu_scale.value:.6g}")
    return 0
