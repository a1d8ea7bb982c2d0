"""`kzlab synth --preset qwen3-tts-12hz [--dtype f32|f16|q8_0] -o OUT.gguf`: a random-weight decoder."""

from __future__ import annotations


def register(sub) -> None:
    from kzlab.formats.synth import PRESETS

    p = sub.add_parser("synth", help="write a synthetic decoder of the shipped shapes")
    p.add_argument("--preset", choices=list(PRESETS), default="qwen3-tts-12hz")
    p.add_argument("--dtype", choices=["f32", "f16", "q8_0"], default="f16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--known-answer",
        action="store_true",
        help="an exactly invertible vocoder path: kzlab.audio_to_latent(wav) decodes back to wav",
    )
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.loader import load_model

    if args.known_answer:
        from kzlab.formats.known_answer import synth_known_answer

        out = synth_known_answer(args.output, preset=args.preset, dtype=args.dtype, seed=args.seed)
    else:
        from kzlab.formats.synth import synth

        out = synth(args.output, preset=args.preset, dtype=args.dtype, seed=args.seed)
    m = load_model(out)
    print(f"wrote {out} ({m.file_size / 1e6:.1f} MB, {m.n_params:,} parameters, {m.dtype_histogram()})")
    return 0
