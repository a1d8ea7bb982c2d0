"""Options shared by several subcommands (same names as the API's and the widgets')."""

from __future__ import annotations

import argparse
import dataclasses

from kzlab.graph import options as lowering_options
from kzlab.graph.options import HELP, Lowering
from kzlab.runtime.spec import BackendSpec


def add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="decoder file (.gguf) or Hugging Face checkpoint directory")
    p.add_argument("--layout", help="layout map: a built-in name or a .toml file (default: detect/infer)")
    p.add_argument("--hparam", action="append", default=[], metavar="NAME=VALUE",
                   help="a hyperparameter the file does not carry, e.g. group_norm_groups=16 (repeatable; each "
                   "family accepts its own, and an unknown name is refused with the accepted ones); recorded as "
                   "given, not read")


def open_model(args: argparse.Namespace):
    """The Model a command's `model`, `--layout` and `--hparam` name (a built-in name is built on demand)."""
    from kzlab.app.builtins import resolve_model
    from kzlab.formats.given import parse_items
    from kzlab.loader import load_model

    given = parse_items(getattr(args, "hparam", None))
    return load_model(resolve_model(args.model), layout=args.layout, hparams=given or None)


def add_lowering(p: argparse.ArgumentParser) -> None:
    """One option per Lowering field (`--conv-src1` for conv_src1), choices and help from kzlab.graph.options."""
    d = Lowering()
    g = p.add_argument_group("lowering options")
    g.add_argument("--lowering", metavar="PRESET", choices=list(lowering_options.PRESETS), default=None,
                   help="start from a named lowering: " + "; ".join(
                       f"{k} = {v.label()}" for k, v in lowering_options.PRESETS.items())
                   + " (llamacpp: llama.cpp's own graph of the decoder, qwen3tts-gen.cpp's code2wav); the options "
                   "below given with other values than their defaults change it")
    for f in dataclasses.fields(Lowering):
        flag = "--" + f.name.replace("_", "-")
        choices = getattr(lowering_options, f"{f.name.upper()}_CHOICES", None)
        value = getattr(d, f.name)
        if choices:
            g.add_argument(flag, choices=choices, default=value, help=HELP.get(f.name))
        else:
            g.add_argument(flag, type=type(value), default=value, metavar="N", help=HELP.get(f.name))


def lowering_from(args: argparse.Namespace) -> Lowering:
    """The lowering the options say: `--lowering NAME` (a preset) with every option given a non-default value on
    top of it, else the options alone."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Lowering)}
    name = getattr(args, "lowering", None)
    if not name:
        return Lowering(**given)
    d = Lowering()
    changed = {k: v for k, v in given.items() if v != getattr(d, k)}
    return lowering_options.preset(name).replace(**changed)


def add_backend(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("backend options")
    g.add_argument(
        "--backend",
        default="auto",
        help="auto (blas when built, else cpu) | cpu | blas | rpc://HOST:PORT | a device name; "
        "a comma list runs under the scheduler (last one CPU)",
    )
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: $KZLAB_THREADS, else all cores)")
    g.add_argument(
        "--sched",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--sched: run under ggml_backend_sched (even one backend); --no-sched: no scheduler (backend auto is "
        "then the plain CPU; blas or a list is refused); neither: on exactly when the backends need it",
    )
    g.add_argument("--no-op-offload", dest="op_offload", action="store_false", help="scheduler op_offload off")
    g.add_argument("--weights-on", default=None, help="backend whose buffer holds the weights")


def backend_spec(args: argparse.Namespace) -> BackendSpec:
    """The BackendSpec the backend options say (resolved later, once, by the session)."""
    names = tuple(s.strip() for s in args.backend.split(",")) if "," in args.backend else args.backend
    return BackendSpec(names, args.threads, args.sched, args.op_offload, args.weights_on)
