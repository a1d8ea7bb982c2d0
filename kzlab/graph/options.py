"""Lowering options: the ways one decoder computation can be written as a ggml graph.

Each option changes which ggml ops run (and so what a device backend is asked to accept), never the result
beyond rounding. The names are the same in the API, the CLI (`--conv`, `--conv-src1`, ...) and the widgets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kzlab.errors import InvalidOptionError

CONV_CHOICES = ("ktap", "im2col-f32", "im2col-f16")
CONV_SRC1_CHOICES = ("data", "kernel")
CONVT_CHOICES = ("col2im", "direct")
SNAKE_CHOICES = ("auto", "fused", "folded", "raw")
WTYPE_CHOICES = ("native", "f32", "f16", "bf16", "q8_0")

HELP = {
    "conv": "conv1d lowering: ktap = K shifted mul_mats, no im2col; im2col-f32 = im2col F32 + mul_mat; "
    "im2col-f16 = ggml_conv_1d's im2col F16 + mul_mat",
    "conv_src1": "which operand is src1 of the conv MUL_MAT: data = mul_mat(kernel, columns), src1 rows = T; "
    "kernel = ggml_conv_1d's order mul_mat(columns, kernel), src1 rows = c_out",
    "convt": "conv-transpose lowering: col2im = mul_mat + ggml_col2im_1d; direct = ggml_conv_transpose_1d",
    "mm_chunk": "split every MUL_MAT into chunks of at most N rows of src1 (0 = off)",
    "conv_tile": "im2col-f32: build the im2col columns for at most N output frames at a time (0 = all at once); "
    "bounds the columns' memory (k x c_in x N floats) on long inputs; at most 64 tiles per conv",
    "snake": "SnakeBeta: folded = exp(alpha), 1/(exp(beta)+1e-9) precomputed at load, then MUL, SIN, SQR, MUL, "
    "ADD; raw = the constants computed in the graph too; fused = one kzlab CPU node (numpy SIMD sin), CPU and "
    "BLAS backends only; auto = fused where every backend is the CPU or BLAS, else folded",
    "wtype": "weight type of matrix weights: native = as stored in the file, or requantized at load",
}


@dataclass(frozen=True)
class Lowering:
    """One choice per option; the defaults are the fastest measured on CPU (see benchmarks/)."""

    conv: str = "im2col-f32"
    conv_src1: str = "kernel"
    convt: str = "col2im"
    mm_chunk: int = 0
    conv_tile: int = 8192
    snake: str = "auto"
    wtype: str = "native"

    def __post_init__(self) -> None:
        for name, choices in (
            ("conv", CONV_CHOICES),
            ("conv_src1", CONV_SRC1_CHOICES),
            ("convt", CONVT_CHOICES),
            ("snake", SNAKE_CHOICES),
            ("wtype", WTYPE_CHOICES),
        ):
            v = getattr(self, name)
            if v not in choices:
                raise InvalidOptionError(f"lowering option {name}={v!r}: expected one of {', '.join(choices)}")
        if isinstance(self.mm_chunk, bool) or not isinstance(self.mm_chunk, int) or self.mm_chunk < 0:
            raise InvalidOptionError(f"lowering option mm_chunk={self.mm_chunk!r}: expected an integer >= 0")
        if 0 < self.mm_chunk < 16:
            raise InvalidOptionError(f"lowering option mm_chunk={self.mm_chunk}: chunks below 16 rows are not useful")
        if isinstance(self.conv_tile, bool) or not isinstance(self.conv_tile, int) or self.conv_tile < 0:
            raise InvalidOptionError(f"lowering option conv_tile={self.conv_tile!r}: expected an integer >= 0")
        if 0 < self.conv_tile < 64:
            raise InvalidOptionError(
                f"lowering option conv_tile={self.conv_tile}: tiles below 64 frames are not useful"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Lowering:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise InvalidOptionError(f"unknown lowering option(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    def replace(self, **kw: Any) -> Lowering:
        return dataclasses.replace(self, **kw)

    def resolved(self, cpu_only: bool) -> Lowering:
        """The lowering with `snake="auto"` decided: fused when the graph runs on CPU/BLAS backends only.

        A device backend (RPC, GPU, or a simulated Hexagon) cannot run kzlab's fused node, which calls back
        into this process, so there `auto` means the folded ggml ops a port would use.
        """
        if self.snake == "auto":
            return self.replace(snake="fused" if cpu_only else "folded")
        return self

    def label(self) -> str:
        """Short text for tables and legends."""
        parts = [self.conv, f"src1={self.conv_src1}", self.convt, f"snake={self.snake}", f"w={self.wtype}"]
        if self.mm_chunk:
            parts.append(f"chunk={self.mm_chunk}")
        if self.conv_tile and self.conv.startswith("im2col-f32"):
            parts.append(f"tile={self.conv_tile}")
        return " ".join(parts)


#: the naive graph peers write (ggml_conv_1d, ggml_conv_transpose_1d, F16), kept for comparison
NAIVE = Lowering(conv="im2col-f16", conv_src1="kernel", convt="direct", snake="raw", wtype="f16", conv_tile=0)
