"""`kzlab synth [--family NAME | --preset NAME] [--dtype f32|f16|q8_0] [-o OUT.gguf]`: a random-weight decoder
at a family's shipped shapes, in that family's own GGUF layout."""

from __future__ import annotations


def register(sub) -> None:
    from kzlab.arch import family_names
    from kzlab.formats.synth import PRESETS

    p = sub.add_parser("synth", help="write a synthetic decoder of the shipped shapes")
    p.add_argument(
        "--family",
        help=f"decoder family (or a prefix of its name): {', '.join(family_names())}; its full-size preset",
    )
    p.add_argument("--preset", choices=list(PRESETS), help="shapes by preset name (default: the first family's)")
    p.add_argument("--dtype", choices=["f32", "f16", "q8_0"], default="f16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--known-answer",
        action="store_true",
        help="an exactly invertible vocoder path: kzlab.audio_to_latent(wav) decodes back to wav",
    )
    p.add_argument("-o", "--output", help="output file (default: <preset>-synthetic-<dtype>.gguf here)")
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.errors import InvalidOptionError
    from kzlab.formats.family_files import files_half
    from kzlab.formats.synth import PRESETS, family_preset
    from kzlab.loader import load_model

    preset = args.preset
    if args.family:
        want = family_preset(args.family)
        if preset is not None and files_half(PRESETS[preset]) is not files_half(PRESETS[want]):
            raise InvalidOptionError(f"preset {preset!r} is not of family {args.family!r}")
        preset = preset or want
    preset = preset or next(iter(PRESETS))
    output = args.output or f"{preset}-{'known-answer' if args.known_answer else 'synthetic'}-{args.dtype}.gguf"
    if args.known_answer:
        if not any(kind == "known-answer" for kind, _ in files_half(PRESETS[preset]).BUILTINS.values()):
            raise InvalidOptionError(f"preset {preset!r}: its family has no known-answer decoder")
        from kzlab.formats.known_answer import synth_known_answer

        out = synth_known_answer(output, preset=preset, dtype=args.dtype, seed=args.seed)
    else:
        from kzlab.formats.synth import synth

        out = synth(output, preset=preset, dtype=args.dtype, seed=args.seed)
    m = load_model(out)
    print(f"wrote {out} ({m.file_size / 1e6:.1f} MB, {m.n_params:,} parameters, {m.dtype_histogram()})")
    return 0
