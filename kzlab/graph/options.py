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
CONVT_CHOICES = ("auto", "col2im", "direct", "fused")
SNAKE_CHOICES = ("auto", "fused", "folded", "raw")
RESUNIT_CHOICES = ("auto", "fused", "ops")
WTYPE_CHOICES = ("native", "f32", "f16", "bf16", "q8_0")

HELP = {
    "conv": "conv1d lowering: ktap = K shifted mul_mats, no im2col; im2col-f32 = im2col F32 + mul_mat; "
    "im2col-f16 = ggml_conv_1d's im2col F16 + mul_mat",
    "conv_src1": "which operand is src1 of the conv MUL_MAT: data = mul_mat(kernel, columns), src1 rows = T; "
    "kernel = ggml_conv_1d's order mul_mat(columns, kernel), src1 rows = c_out (with im2col-f32, a conv with "
    "one output channel is then mul_mat(input, taps) and K shifted adds, no im2col)",
    "convt": "conv-transpose lowering: col2im = mul_mat + ggml_col2im_1d; direct = ggml_conv_transpose_1d; "
    "fused = in the BigVGAN blocks whose weight is at most 32 MB in F32, the SnakeBeta before it and the "
    "transposed conv as one kzlab CPU node (one numpy BLAS product per tile and the overlap-add in cache; CPU "
    "and BLAS backends only), col2im elsewhere; auto = fused where every backend is the CPU or BLAS and "
    "mm_chunk, snake and wtype are left at their defaults, else col2im",
    "mm_chunk": "split every MUL_MAT into chunks of at most N rows of src1 (0 = off)",
    "conv_tile": "im2col-f32: build the im2col columns for at most N output frames at a time (0 = all at once); "
    "bounds the columns' memory (k x c_in x N floats) on long inputs; at most 64 tiles per conv",
    "snake": "SnakeBeta: folded = exp(alpha), 1/(exp(beta)+1e-9) precomputed at load, then MUL, SIN, SQR, MUL, "
    "ADD; raw = the constants computed in the graph too; fused = one kzlab CPU node (numpy SIMD sin), CPU and "
    "BLAS backends only; auto = fused where every backend is the CPU or BLAS, else folded",
    "resunit": "BigVGAN residual unit (SnakeBeta, dilated conv, SnakeBeta, 1x1 conv, residual add): fused = one "
    "kzlab CPU node per unit (numpy BLAS products on tiles that stay in cache, no im2col; F32), CPU and BLAS "
    "backends only; ops = the ggml ops the other options choose; auto = fused where every backend is the CPU or "
    "BLAS and the options it replaces (conv, conv_src1, mm_chunk, snake, wtype) are left at their defaults",
    "wtype": "weight type of matrix weights: native = as stored in the file, or requantized at load",
}


@dataclass(frozen=True)
class Lowering:
    """One choice per option; the defaults are the fastest measured on CPU (see benchmarks/)."""

    conv: str = "im2col-f32"
    conv_src1: str = "kernel"
    convt: str = "auto"
    mm_chunk: int = 0
    conv_tile: int = 8192
    snake: str = "auto"
    wtype: str = "native"
    resunit: str = "auto"

    def __post_init__(self) -> None:
        for name, choices in (
            ("conv", CONV_CHOICES),
            ("conv_src1", CONV_SRC1_CHOICES),
            ("convt", CONVT_CHOICES),
            ("snake", SNAKE_CHOICES),
            ("wtype", WTYPE_CHOICES),
            ("resunit", RESUNIT_CHOICES),
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
        if self.convt == "fused" and self.snake == "raw":
            raise InvalidOptionError(
                "lowering option convt='fused' reads the folded SnakeBeta constants: use snake='auto', 'fused' "
                "or 'folded' with it"
            )
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
        """The lowering with its automatic choices made for a graph on CPU/BLAS backends only or not.

        A device backend (RPC, GPU, or a simulated Hexagon) cannot run kzlab's fused nodes, which call back
        into this process, so there `auto` means the ggml ops a port would use. On the CPU, `resunit="auto"`
        fuses the residual units unless an option the fused node would override was changed (a comparison
        of conv lowerings, operand orders, snake lowerings or weight types then measures what it says).
        """
        d = Lowering()

        def untouched(*names: str) -> bool:
            return self.snake in ("auto", "fused") and all(getattr(self, f) == getattr(d, f) for f in names)

        low = self
        if low.snake == "auto":
            low = low.replace(snake="fused" if cpu_only else "folded")
        if low.resunit == "auto":
            fuse = cpu_only and untouched("conv", "conv_src1", "mm_chunk", "wtype")
            low = low.replace(resunit="fused" if fuse else "ops")
        if low.convt == "auto":
            low = low.replace(convt="fused" if cpu_only and untouched("mm_chunk", "wtype") else "col2im")
        return low

    def label(self) -> str:
        """Short text for tables and legends."""
        parts = [self.conv, f"src1={self.conv_src1}", self.convt, f"snake={self.snake}", f"w={self.wtype}"]
        if self.resunit != "ops":
            parts.insert(0, f"resunit={self.resunit}")
        if self.mm_chunk:
            parts.append(f"chunk={self.mm_chunk}")
        if self.conv_tile and self.conv.startswith("im2col-f32"):
            parts.append(f"tile={self.conv_tile}")
        return " ".join(parts)


#: the naive graph peers write (ggml_conv_1d, ggml_conv_transpose_1d, F16), kept for comparison
NAIVE = Lowering(
    conv="im2col-f16", conv_src1="kernel", convt="direct", snake="raw", wtype="f16", conv_tile=0, resunit="ops"
)
