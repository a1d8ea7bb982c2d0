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
    from kzlab.arch import arch_of
    from kzlab.loader import load_model

    m = load_model(args.model, layout=args.layout)
    info = m.info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    arch = arch_of(m.hparams)
    print(f"family      {arch.name} ({arch.label})")
    print(f"file        {info['path']} ({info['file_size'] / 1e6:.1f} MB, {info['kind']})")
    print(f"layout      {info['layout']}   architecture {info['architecture']}")
    print(f"parameters  {info['n_params']:,} in {info['n_tensors']} tensors")
    print(
        "dtypes      "
        + ", ".join(f"{k}: {v} ({info['dtype_bytes'][k] / 1e6:.1f} MB)" for k, v in info["dtypes"].items())
    )
    for label, text in arch.describe(m.hparams):
        print(f"{label:<11} {text}")
    for n in info["notes"]:
        print(f"note        {n}")
    return 0
