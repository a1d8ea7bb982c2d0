"""`kzlab info MODEL [--json]`: layout, architecture, hyperparameters, parameter count, dtypes, size."""

from __future__ import annotations

import json

from kzlab.commands.common import add_model


def register(sub) -> None:
    p = sub.add_parser("info", help="describe a decoder file")
    add_model(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.loader import load_model

    m = load_model(args.model, layout=args.layout)
    info = m.info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    hp = info["hparams"]
    print(f"file        {info['path']} ({info['file_size'] / 1e6:.1f} MB, {info['kind']})")
    print(f"layout      {info['layout']}   architecture {info['architecture']}")
    print(f"parameters  {info['n_params']:,} in {info['n_tensors']} tensors")
    print(
        "dtypes      "
        + ", ".join(f"{k}: {v} ({info['dtype_bytes'][k] / 1e6:.1f} MB)" for k, v in info["dtypes"].items())
    )
    print(
        f"quantizer   {hp['num_quantizers']} codebooks of {hp['codebook_size']} x {hp['vq_dim']} "
        f"-> {hp['codebook_dim']}"
    )
    print(
        f"transformer {hp['num_layers']} layers, hidden {hp['hidden_size']}, {hp['num_heads']} heads of "
        f"{hp['head_dim']}, ffn {hp['intermediate_size']}, window {hp['sliding_window']}"
    )
    print(
        f"upsampling  {hp['upsampling_ratios']} then {hp['upsample_rates']}, latent {hp['latent_dim']}, "
        f"decoder_dim {hp['decoder_dim']}"
    )
    for n in info["notes"]:
        print(f"note        {n}")
    return 0
