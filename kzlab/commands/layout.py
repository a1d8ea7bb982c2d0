"""`kzlab layout infer FILE [-o map.toml]`, `kzlab layout show NAME|FILE`, `kzlab layout list`.

Layout maps are plain TOML (see `kzlab.formats.layout`); these commands make them visible: the built-in
dialects, any map file, and a map proposed from a file's structure, to keep, review and pass back with
`--layout`. `infer` asks every decoder family; when none maps the file it prints each family's reason (the
families whose skeleton the file has first), since one family's "not mine" does not say why nothing fits.
`--hparam` gives what the file cannot say (GroupNorm's group count of a codec.cpp WavTokenizer file, a head
count): written in the map's `[hparams]`, so that `--layout map.toml` alone loads the file as meant.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("layout", help="list, show and infer tensor layout maps")
    lsub = p.add_subparsers(dest="layout_command", metavar="ACTION")
    pi = lsub.add_parser("infer", help="propose a map for a decoder file from its tensor shapes and names")
    pi.add_argument("model", help="decoder file (.gguf) or Hugging Face checkpoint directory")
    pi.add_argument("-o", "--output", help="write the map as TOML here")
    pi.add_argument("--name", help="name of the map (default: inferred-<file stem>)")
    pi.add_argument("--hparam", action="append", default=[], metavar="NAME=VALUE",
                    help="a hyperparameter the file does not carry, e.g. group_norm_groups=16 (repeatable; checked "
                    "by the family found), written in the map's [hparams]")
    pi.set_defaults(func=run_infer)
    ps = lsub.add_parser("show", help="print a built-in map (by name) or a map file")
    ps.add_argument("spec", help="built-in name or .toml file")
    ps.set_defaults(func=run_show)
    pl = lsub.add_parser("list", help="list the built-in maps")
    pl.set_defaults(func=run_list)
    p.set_defaults(func=lambda args: (p.print_help(), 1)[1])


def run_infer(args: argparse.Namespace) -> int:
    """Print the proposal and write the map. A file no family maps is refused (kzlab.formats.infer.NoFamilyFits)
    with every family's reason in the message, which the command line prints as any refusal."""
    from kzlab.formats.given import parse_items
    from kzlab.formats.infer import infer_layout

    proposal = infer_layout(args.model, name=args.name, hparams=parse_items(args.hparam) or None)
    if args.output:  # written before printing, so a closed pipe cannot lose it
        Path(args.output).write_text(proposal.layout.to_toml(), encoding="utf-8")
    print(proposal.describe())
    if args.output:
        print(f"\nwrote {args.output}")
    return 0


def run_show(args) -> int:
    from kzlab.formats.layout import get_layout

    lm = get_layout(args.spec)
    if lm.source and Path(lm.source).is_file():
        print(Path(lm.source).read_text(encoding="utf-8"), end="")
    else:
        print(lm.to_toml(), end="")
    return 0


def run_list(args) -> int:
    from kzlab.formats.layout import builtin_layouts

    maps = builtin_layouts()
    w = max(len(lm.name) for lm in maps)
    for lm in maps:
        print(f"{lm.name:<{w}}  {lm.description}")
    return 0
