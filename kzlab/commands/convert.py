"""`kzlab convert SOURCE -o OUT.gguf --outtype f32|f16|q8_0`: write the decoder in its family's own GGUF layout."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("convert", help="convert a Hugging Face checkpoint (or any known GGUF) to GGUF")
    p.add_argument("source", help="Hugging Face checkpoint directory (config.json + *.safetensors) or GGUF")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--outtype", choices=["f32", "f16", "q8_0"], default="f16")
    p.add_argument("--layout", help="layout map of the source (default: detect/infer)")
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.app.convert import convert
    from kzlab.loader import load_model

    out = convert(args.source, args.output, outtype=args.outtype, layout=args.layout)
    m = load_model(out)
    print(f"wrote {out} ({m.file_size / 1e6:.1f} MB, {m.n_params:,} parameters, {m.dtype_histogram()})")
    return 0
