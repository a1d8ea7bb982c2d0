"""The `kzlab` command line: one subcommand per module in `kzlab.commands`, each calling the same public
functions as the notebooks and widgets. Every kzlab error ends the command with its message and exit
status 2, never with a traceback or a signal."""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from kzlab.errors import KzlabError
from kzlab.progress import set_quiet

#: subcommand modules, in the order `kzlab --help` lists them
COMMANDS = [
    "info", "decode", "convert", "synth", "profile", "compare", "simulate", "whatif", "calibrate", "bench_ops",
    "report", "layout", "rpc_server", "demo", "notebooks",
]


def build_parser() -> argparse.ArgumentParser:
    from kzlab.version import __version__

    p = argparse.ArgumentParser(
        prog="kzlab", description="Run, profile and inspect neural audio codec decoders (GGUF) with ggml."
    )
    p.add_argument("--version", action="version", version=f"kzlab {__version__}")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"kzlab.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"kzlab.commands.{name}":
                continue
            raise
        mod.register(sub)
    for sp in sub.choices.values():  # `kzlab demo --quiet` as well as `kzlab --quiet demo`
        sp.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.quiet:
        set_quiet(True)
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    with warnings.catch_warnings():
        if not getattr(args, "verbose", False):
            warnings.simplefilter("default")
            warnings.formatwarning = lambda m, c, *a, **k: f"warning: {m}\n"
        try:
            return int(args.func(args) or 0)
        except KzlabError as e:
            print(f"kzlab {args.command}: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"kzlab {args.command}: interrupted", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
