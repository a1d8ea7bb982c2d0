"""Options shared by several subcommands (same names as the API's and the widgets')."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from kzlab.errors import InvalidInputError
from kzlab.graph.options import (
    CONV_CHOICES,
    CONV_SRC1_CHOICES,
    CONVT_CHOICES,
    HELP,
    RESUNIT_CHOICES,
    SNAKE_CHOICES,
    WTYPE_CHOICES,
    Lowering,
)


def add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="decoder file (.gguf) or Hugging Face checkpoint directory")
    p.add_argument("--layout", help="layout map: a built-in name or a .toml file (default: detect/infer)")


def add_lowering(p: argparse.ArgumentParser) -> None:
    d = Lowering()
    g = p.add_argument_group("lowering options")
    g.add_argument("--conv", choices=CONV_CHOICES, default=d.conv, help=HELP["conv"])
    g.add_argument("--conv-src1", choices=CONV_SRC1_CHOICES, default=d.conv_src1, help=HELP["conv_src1"])
    g.add_argument("--convt", choices=CONVT_CHOICES, default=d.convt, help=HELP["convt"])
    g.add_argument("--mm-chunk", type=int, default=d.mm_chunk, metavar="N", help=HELP["mm_chunk"])
    g.add_argument("--conv-tile", type=int, default=d.conv_tile, metavar="N", help=HELP["conv_tile"])
    g.add_argument("--snake", choices=SNAKE_CHOICES, default=d.snake, help=HELP["snake"])
    g.add_argument("--wtype", choices=WTYPE_CHOICES, default=d.wtype, help=HELP["wtype"])
    g.add_argument("--resunit", choices=RESUNIT_CHOICES, default=d.resunit, help=HELP["resunit"])


def lowering_from(args: argparse.Namespace) -> Lowering:
    return Lowering(
        conv=args.conv,
        conv_src1=args.conv_src1,
        convt=args.convt,
        mm_chunk=args.mm_chunk,
        conv_tile=args.conv_tile,
        snake=args.snake,
        wtype=args.wtype,
        resunit=args.resunit,
    )


def add_backend(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("backend options")
    g.add_argument(
        "--backend",
        default="auto",
        help="auto (blas when built, else cpu) | cpu | blas | rpc://HOST:PORT | a device name; "
        "a comma list runs under the scheduler (last one CPU)",
    )
    g.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    g.add_argument("--sched", action="store_true", help="use ggml_backend_sched even for one backend")
    g.add_argument("--no-op-offload", dest="op_offload", action="store_false", help="scheduler op_offload off")
    g.add_argument("--weights-on", default=None, help="backend whose buffer holds the weights")


def backend_kw(args: argparse.Namespace) -> dict:
    spec = [s.strip() for s in args.backend.split(",")] if "," in args.backend else args.backend
    return dict(
        backend=spec,
        threads=args.threads,
        sched=True if args.sched else None,
        op_offload=args.op_offload,
        weights_on=args.weights_on,
    )


def load_codes(path: str) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"{p}: no such codes file")
    try:
        if p.suffix == ".npz":
            z = np.load(p)
            key = "codes" if "codes" in z else list(z.keys())[0]
            return z[key]
        if p.suffix == ".json":
            return np.asarray(json.loads(p.read_text()))
        return np.load(p, allow_pickle=False)
    except (ValueError, OSError, json.JSONDecodeError) as e:
        raise InvalidInputError(f"{p}: cannot read codes: {e}") from None


def random_codes(frames: int, hp, seed: int = 0) -> np.ndarray:
    if frames < 1:
        raise InvalidInputError(f"frames must be >= 1; got {frames}")
    rng = np.random.default_rng(seed)
    c = rng.integers(0, hp.codebook_size, size=(hp.num_quantizers, frames), dtype=np.int32)
    c[0] = rng.integers(0, hp.semantic_codebook_size, size=frames)
    return c
