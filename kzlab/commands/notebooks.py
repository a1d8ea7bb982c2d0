"""`kzlab notebooks DIR [--overwrite]`: copy the notebooks shipped in the package into DIR (for an installed
wheel, where there is no checkout to open them from)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("notebooks", help="copy the notebooks (and their jupytext sources) into a folder")
    p.add_argument("dest", metavar="DIR", help="folder to copy them into (created if missing)")
    p.add_argument("--overwrite", action="store_true", help="replace notebooks already there")
    p.set_defaults(func=run)


def run(args) -> int:
    from kzlab.app.builtins import copy_notebooks

    written = copy_notebooks(args.dest, overwrite=args.overwrite)
    for p in written:
        print(f"wrote {p}")
    if not written:
        print(f"nothing written: the notebooks are already in {args.dest} (--overwrite replaces them)")
    print(f"open them with: jupyter lab {args.dest}")
    return 0
