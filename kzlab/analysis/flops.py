"""The one op table: FLOPs and bytes moved by a ggml node, from its op, shapes and types.

Conventions (one multiply-add = 2 FLOPs):
- MUL_MAT: 2 * M * N * K over all batch dims (ne0 of src0 = K, M = rows of src0, N = rows of src1).
- IM2COL, COL2IM_1D, PAD, CONT, CPY, DUP, CONCAT, GET_ROWS, views: data movement, bytes only (0 FLOPs).
- CONV_TRANSPOSE_1D (the direct lowering): 2 * Cin * Cout * K * T_in, the algorithmic count.
- elementwise ops: one FLOP per output element (SIN, EXP, ... counted as 1: a count of ops, not of cycles).
- norms / softmax: a few FLOPs per element, stated below.
- FLASH_ATTN_EXT: the two products (2 * D * Tq * Tk per head each, as MUL_MAT counts them) and the softmax
  (SOFT_MAX's 5 per score), over the masked scores too, as the unfused graph computes them.
- CUSTOM: a decoder family's fused nodes. Only the family knows what its custom nodes compute, so it counts
  them (`kzlab.arch.Arch.custom_flops`, passed here as `custom`); a CUSTOM node no family claims counts
  5 FLOPs per output element (a pointwise chain).
Bytes moved = bytes of every source read once + bytes of the output written once (a lower bound: no
re-reads through cache misses), the usual roofline convention.
The layer-level conv convention ("algorithmic" vs "seed" for transposed convs) lives in LayerRecord.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

MOVE_OPS = {
    "IM2COL",
    "COL2IM_1D",
    "PAD",
    "CONT",
    "CPY",
    "DUP",
    "CONCAT",
    "GET_ROWS",
    "TRANSPOSE",
    "PERMUTE",
    "RESHAPE",
    "VIEW",
    "NONE",
}
VIEW_OPS = {"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE", "NONE"}
#: FLOPs per output element of pointwise ops
ELEMENTWISE = {
    "ADD": 1,
    "SUB": 1,
    "MUL": 1,
    "DIV": 1,
    "SQR": 1,
    "SQRT": 1,
    "SIN": 1,
    "COS": 1,
    "EXP": 1,
    "ELU": 1,  # x > 0 ? x : expm1(x) (ggml-cpu/vec.h 8599e0ea line 915): one exp-class call, counted as EXP
    "LOG": 1,
    "SCALE": 2,  # scale and bias
    "CLAMP": 1,
    "SILU": 4,
    "GELU": 8,
    "GELU_ERF": 8,
    "TANH": 1,
    "ADD1": 1,
    "ACC": 1,
    "CUSTOM": 5,
}
#: FLOPs per element of reductions / normalisations
PER_ELEMENT = {"RMS_NORM": 3, "NORM": 5, "SOFT_MAX": 5, "ROPE": 6, "SUM_ROWS": 1, "MEAN": 1}

TYPE_BYTES = {"F32": 4.0, "F16": 2.0, "BF16": 2.0, "I32": 4.0, "Q8_0": 34 / 32, "I8": 1.0, "I16": 2.0}


@dataclass(frozen=True)
class TensorInfo:
    """What the table needs of a tensor: shape (ggml ne), type name and byte size."""

    ne: tuple[int, ...]
    type: str
    nbytes: int

    @property
    def n(self) -> int:
        return math.prod(self.ne)


#: a family's count of its custom nodes: (node name, output, sources) -> FLOPs, or None for a node not its own
CustomFlops = Callable[[str, TensorInfo, "list[TensorInfo | None]"], "int | None"]


def op_flops(
    op: str,
    out: TensorInfo,
    srcs: list[TensorInfo | None],
    op_params: tuple[int, ...] = (),
    custom: CustomFlops | None = None,
    name: str = "",
) -> int:
    """FLOPs of one node (0 for data movement); `custom` is the model's family's count of its CUSTOM nodes
    (`kzlab.arch.arch_of(hp).custom_flops`), `name` the node's name it may read."""
    base = op.split("(")[0]
    if base == "CUSTOM" and custom is not None:
        n = custom(name, out, srcs)
        if n is not None:
            return int(n)
    if base == "MUL_MAT" and len(srcs) >= 2 and srcs[0] is not None and srcs[1] is not None:
        k = srcs[0].ne[0]
        m, n = out.ne[0], out.ne[1]
        batch = out.ne[2] * out.ne[3]
        return 2 * m * n * k * batch
    if base == "FLASH_ATTN_EXT" and len(srcs) >= 3 and None not in srcs[:3]:
        q, k, v = srcs[:3]  # q ne [D, Tq, H], k [D, Tk, KV], v [Dv, Tk, KV]
        scores = q.ne[1] * k.ne[1] * q.ne[2] * q.ne[3]
        return 2 * scores * (q.ne[0] + v.ne[0]) + PER_ELEMENT["SOFT_MAX"] * scores
    if base == "CONV_TRANSPOSE_1D" and srcs[0] is not None and srcs[1] is not None:
        k, cout, cin = srcs[0].ne[0], srcs[0].ne[1], srcs[0].ne[2]
        t_in = srcs[1].ne[0]
        return 2 * cin * cout * k * t_in
    if base in ("CONV_2D_DW", "SSM_CONV") and srcs and srcs[0] is not None and srcs[1] is not None:
        # depthwise: one multiply-add per tap per output element; the taps are the kernel's spatial size
        # (CONV_2D_DW: kernel ne [KW, KH, 1, C]; SSM_CONV: kernel ne [K, C], the data first)
        kern = srcs[0] if base == "CONV_2D_DW" else srcs[1]
        taps = kern.ne[0] * (kern.ne[1] if base == "CONV_2D_DW" else 1)
        return 2 * taps * out.n
    if base in MOVE_OPS:
        return 0
    if base in ELEMENTWISE:
        return ELEMENTWISE[base] * out.n
    if base == "UNARY" or base.startswith("UNARY"):
        return out.n
    for name, per in ELEMENTWISE.items():  # ggml_op_desc gives the unary op's own name (SIN, GELU_ERF...)
        if base == name:
            return per * out.n
    if base in PER_ELEMENT:
        return PER_ELEMENT[base] * out.n
    return out.n


def op_bytes(op: str, out: TensorInfo, srcs: list[TensorInfo | None]) -> int:
    """Bytes read and written by one node (views move nothing)."""
    base = op.split("(")[0]
    if base in VIEW_OPS:
        return 0
    read = 0
    for s in srcs:
        if s is None:
            continue
        read += s.nbytes
    if base == "GET_ROWS" and srcs and srcs[0] is not None:
        read -= srcs[0].nbytes  # only the gathered rows are read
        read += out.nbytes
    if base == "IM2COL" and srcs and srcs[0] is not None:
        read -= srcs[0].nbytes  # the kernel operand only gives the shape
    return int(read + out.nbytes)
