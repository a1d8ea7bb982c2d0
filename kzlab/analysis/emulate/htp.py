"""The Hexagon NPU's matrix products (ggml-hexagon's MUL_MAT kernels) and its GELU, emulated in numpy.

Where a product runs decides the numbers it gives: the HTP's matrix unit (HMX) rounds both operands and its result
to F16, its vector units (HVX) round or quantize the activations first, and some releases read an F16 activation
as if it were F32. `matmul` computes, from the bytes of the two operands, what a given kernel path of a given
ggml release computes, so that the placement can be judged by its values and not only by where it puts nodes.

Every fact below is read from ggml's source: `file @ commit lines`, files under src/ggml-hexagon/ of ggml-org/ggml.
Releases: v0.15.2 = 707321c4, v0.15.3 = eced84c8, v0.21.0 = 8599e0ea, "78c531d" = 78c531d4 (the head of ggml's
unmerged PR #1601: v0.21.0 plus a host-side HMX restriction; its DSP code is v0.21.0's, byte for byte).

The device assumed: Hexagon v79 or newer (v79, v81). From v79 the results of HVX floating point, once converted to
IEEE sf/hf, are identical to IEEE-754 round-to-nearest-even (Qualcomm's HVX Programmer's Reference 80-N2040-61,
"HVX floating point"), so every qf32/qf16 -> sf/hf conversion here is an IEEE RNE cast: F32 -> F16 overflows to
+-inf and keeps NaN (`f32_to_f16`). v73/v75 are not emulated: there hvx_vec_f32_to_f16 rewrites every NaN as -inf
(htp/hvx-base.h @ 707321c4 lines 136-147, @ eced84c8 136-147; dropped @ 8599e0ea 136-138) and their qfloat
rounding is not documented.

HMX, the matrix unit (all releases; F16, F32, Q8_0, Q4_0 weights)
- Weights become F16 tiles. F16: copied (convert_f16_weight_to_fp16_tiles_task, htp/hmx-matmul-ops.c @ 707321c4
  737-782; htp/hmx-mm-kernels-tiled.h @ eced84c8 509-554, @ 8599e0ea 509-550). F32: hvx_vec_f32_to_f16, RNE
  (quantize_f32_weight_to_fp16_tiles_task, hmx-matmul-ops.c @ 707321c4 796-845; hmx-mm-kernels-tiled.h @ eced84c8
  556-605, @ 8599e0ea 556-597). Q8_0: the int8 quant to hf (exact), times the block's F16 scale in qf16, back to
  hf: w = RNE_f16(q * d) (dequantize_x4x2_q8_0_group_hvx, hmx-matmul-ops.c @ 707321c4 335-341;
  dequantize_tiled_weight_to_fp16_task_q8_0, hmx-mm-kernels-tiled.h @ eced84c8 434-507, @ 8599e0ea 434-507).
  Q4_0: the same with (nibble - 8) (hmx-matmul-ops.c @ 707321c4 194-209; hmx-mm-kernels-tiled.h @ eced84c8 /
  8599e0ea 37-134). The repack of Q8_0/Q4_0 for the HTP only moves quants and scales (ggml-hexagon.cpp @ eced84c8
  654-698), so the standard ggml blocks are read here.
- Activations (src1) become F16 with hvx_vec_f32_to_f16_shuff, RNE (htp/hvx-base.h @ all three 124-134), read as
  F32 whatever src1's type: `act_stride = src1->nb[1] / sizeof(float)` and `(float *) src1->data`
  (htp/matmul-ops.c @ 707321c4 4776, 4787, 4811; @ eced84c8 3047, 3059, 3085; @ 8599e0ea 3335, 3355, 3386).
  v0.15.2 loads them with aligned HVX loads straight from DDR (transfer_activation_chunk_fp32_to_fp16,
  hmx-matmul-ops.c @ 707321c4 1050-1101; an aligned vmem ignores the address's low 7 bits, 80-N2040-61 "Memory");
  v0.15.3 and v0.21.0 DMA each row (k_valid floats from `src + r * k_stride`) into VTCM first, at the exact byte
  address (transfer_activation_chunk_fp32_to_fp16_dma_pipelined, hmx-mm-kernels-tiled.h @ eced84c8 883-972;
  matmul-ops.c @ 8599e0ea 2133-2197 and its column-chunked twin 1986-2054; the 2-D kernel always allocates the
  F32 staging buffer: matmul-ops.c @ eced84c8 2385-2614, matmul-ops.h @ 8599e0ea 397-445).
- The product: 32x32 F16 tiles into the HMX accumulator, cleared once per output tile and fed all of K
  (core_dot_chunk_fp16, hmx-matmul-ops.c @ 707321c4 901-928; hmx-mm-kernels-tiled.h @ eced84c8 610-637,
  @ 8599e0ea 603-677), then stored as hf through column scales 1.0 and bias 0 (`hmx_init_column_scales(...,
  0x3c00)`, hmx-matmul-ops.c @ 707321c4 1270; matmul-ops.c @ eced84c8 2476, @ 8599e0ea 2687). The result is
  therefore F16: about 3 decimal digits, and +-inf beyond 65504. The hf tiles become F32 by a multiply by 1.0
  (exact) (transfer_output_chunk_fp16_to_fp32, hmx-matmul-ops.c @ 707321c4 967-995; hmx-mm-kernels-tiled.h
  @ eced84c8 715-761, @ 8599e0ea 770-851).
- Emulated as: the exact F16 x F16 products summed by a `Products` engine (`Products.f16`: the reference sums them
  in float64, the fast engine in float32 in its BLAS's order), rounded to float32, then once to F16 (RNE, +-inf
  on overflow), widened to F32. The HMX accumulator's width and its hf store's overflow behaviour are not
  documented publicly; if the accumulator is at least F32-wide, its sum differs from the exact one by at most
  gamma_K * sum|a||w| (gamma_K = K u / (1 - K u), u = 2^-24), and any engine's by as much, before the final F16
  rounding, which dominates unless the sum cancels.
- Batched (src0 or src1 with ne2 * ne3 > 1) only for F16 weights (op_matmul, matmul-ops.c @ 707321c4 4747-4750;
  ggml_hexagon_matmul_is_hmx_eligible, ggml-hexagon.cpp @ eced84c8 1972-2017, @ 8599e0ea 2194-2241), src0
  broadcast over dims 2, 3 (hmx_matmul_weight_batch_ptr / hmx_mm_weight_batch_ptr); same arithmetic per batch.
- Which products take HMX (not this module's business: kzlab.analysis.placement's path rule): v0.15.2 decides on
  the DSP, N % 32 == 0, K % 32 (F16, F32) or K % 256 (quantized), src1 rows >= 32 (matmul-ops.c @ 707321c4
  4710-4822); v0.15.3 and later decide on the host, N % 32, K % 32, src1 rows > HTP_MM_HMX_MIN_NROWS = 4
  (ggml-hexagon.cpp @ eced84c8 1972-2017, matmul-ops.h @ eced84c8 19); 78c531d adds `src1->type != F32 -> no HMX`
  (ggml-hexagon.cpp @ 78c531d4 2217-2222).

The defect (HMX, v0.15.2, v0.15.3, v0.21.0): an F16 src1 is read as F32. Row r is read as K float32 values from
byte r * 4 * floor(nb[1] / 4) (v0.15.2: that address rounded down to 128 bytes), i.e. for a contiguous F16 src1
(nb[1] = 2K) from byte 2K r: the F16 rows r and r+1, each pair of F16 values (lo, hi) taken as the float32 with
bits hi << 16 | lo; the last row reads 2K bytes past the tensor's end (`Operand.after`). Those float32 values then
go through the F16 conversion above: exponents land far from 1, so many become 0, +-inf or NaN. Batched F16 src1
fails outright: hmx_*_f16_f32_batched returns -1 when act_stride < k (hmx-matmul-ops.c @ 707321c4 1465,
matmul-ops.c @ eced84c8 2668, @ 8599e0ea 2925); v0.15.2 then calls op_matmul again, with the same operands, without
end (its "falling back to HVX" calls itself: matmul-ops.c @ 707321c4 4815-4818); v0.15.3 and v0.21.0 return
HTP_STATUS_INTERNAL_ERR (matmul-ops.c @ eced84c8 3094-3097, @ 8599e0ea 3397-3400). `matmul` raises BackendError
there. 78c531d never puts an F16 src1 on HMX.

HVX, the vector units
- F16 weights, F32 src1: src1 rounded to F16 (RNE) first, either while copied to VTCM (quantize_f32_f16 /
  quantize_f32_f16_flat -> hvx_copy_f16_f32_au, matmul-ops.c @ 707321c4 4346-4388, 4550;
  hvx-mm-kernels-flat.h @ eced84c8 / 8599e0ea 217-235; matmul-ops.c @ eced84c8 1662-1663, @ 8599e0ea 1415-1416) or
  in the DDR kernel (vec_dot_f16_f32_uu_1x1, matmul-ops.c @ 707321c4 3245-3296, @ eced84c8 460-511;
  hvx-mm-kernels-flat.h @ 8599e0ea 1405-1456); then exact F16 x F16 products accumulated in F32
  (Q6_Wsf_vmpyacc_WsfVhfVhf from v79: hvx-base.h @ 707321c4 229, @ eced84c8 211, @ 8599e0ea 200) or qf32 (DDR
  kernel), per lane, then a tree over the lanes (vec_dot_f16_f16_aa_1x1, matmul-ops.c @ 707321c4 3091-3116,
  @ eced84c8 306-331; hvx-mm-kernels-flat.h @ 8599e0ea 1251-1276).
- F16 weights, F16 src1: the same products, no conversion (quantize_f16_f16 copies; vec_dot_f16_f16_uu_1x1,
  matmul-ops.c @ eced84c8 430-458; hvx-mm-kernels-flat.h @ 8599e0ea 1375-1403). Correct in every release.
- F32 weights, F32 src1 (the host refuses F32 weights with F16 src1: ggml-hexagon.cpp @ 707321c4 2706-2708,
  @ eced84c8 2652-2654, @ 8599e0ea 2829-2831): IEEE F32 multiply and add from v79 (HVX_OP_MUL_F32 /
  HVX_OP_ADD_F32, matmul-ops.c @ 707321c4 2921-2927, @ eced84c8 136-142; hvx-arith.h @ 8599e0ea 40-52), lane-wise
  then a tree (vec_dot_f32_f32_aa_1x1, matmul-ops.c @ 707321c4 2929-2955, @ eced84c8 144-170;
  hvx-mm-kernels-flat.h @ 8599e0ea 1094-1120).
- Emulated as: the (converted) operands' products summed by a `Products` engine (`f16` for F16 weights, exact
  products; `f32` for F32 ones). The summation order differs from the device's lanes-then-tree order, so the two
  differ by at most 2 gamma_K sum|a||w| (gamma_{K+1} for F32 products).
- Q8_0 / Q4_0 weights: src1 is quantized on the fly, not as ggml-cpu does (Q8_0 per 32-block, d = amax / 127 in
  F32, roundf). Per group of 128 values (the default: FP32_QUANTIZE_GROUP_SIZE = 128 in v0.15.2,
  CMakeLists.txt @ 707321c4 28 and htp/CMakeLists.txt 24-27; quantize_block_f32_q8_0_tiled, 128 per block, in
  v0.15.3 and v0.21.0, hvx-mm-kernels-tiled.h @ eced84c8 / 8599e0ea 124-190) or of 32 (the flat fallback kernel,
  taken when the tiled one does not fit VTCM: quantize_block_f32_q8_0_flat, hvx-mm-kernels-flat.h @ eced84c8 /
  8599e0ea 3-53): x -> F16 (RNE); amax = max |x_f16| over the group; d = RNE_f16(amax * 0x2008), 0x2008 being the
  F16 nearest 1/127; dinv = hvx_vec_inverse_f16(d) (an order-3 polynomial for the mantissa, truncated to 11
  bits; |d| below 0x0101 gives 65504: hvx-inverse.h @ all three 14-87); y = RNE_f16(x_f16 * dinv); y rounded to
  a multiple of 1/64 (RNE, by adding 196608.0 in F32) and then to an integer, halves upward, saturated to int16
  (hvx_vec_i16_from_hf_rnd_sat, hvx-base.h @ 707321c4 193-215, @ eced84c8 175-197, @ 8599e0ea 164-186); packed
  to int8 with saturation to [-128, 127] (quantize_block_f32_q8x4, matmul-ops.c @ 707321c4 4103-4140). The dot
  product: per 32-value block an exact int32 sum of int8 x int8 (weights' q, or nibble - 8), converted to F32
  (exact), times d_w * d_x (hf x hf -> F32, exact), rounded; the blocks summed in F32 in K order
  (tiled_vec_dot_q8_0_32x1, hvx-mm-kernels-tiled.h @ eced84c8 644-667, @ 8599e0ea 668-695; q4_0 381-405 /
  381-409; flat_vec_dot_q8_0_32x1, hvx-mm-kernels-flat.h @ eced84c8 568-624, @ 8599e0ea 592-652).
  v0.15.2 sums the block terms lane-wise in qf32 and the 32 lanes at the end (vec_dot_q8x4x2_q8x4x2_1x1,
  matmul-ops.c @ 707321c4 1504-1577).
- Emulated as: that quantizer and that dot product, bit for bit (float32 elementwise ops in K order) except
  (1) hvx_vec_inverse_f16's polynomial, modelled as the exact reciprocal truncated to F16 (the polynomial's peak
  error is 1.13e-4 on [0.5, 1], a quarter of the truncation step, so a value of x / d lying within that of a
  rounding boundary may land one quant step away), and (2) v0.15.2's lane order and qf32 sums (it and the
  emulation are each within gamma_{K/32 + 1} of the exact sum of the block terms). The quantizer's behaviour
  for non-finite F16 activations (inf scales) is bit-level (hvx_vec_inverse_f16 of inf, a wrapping int
  conversion) and is refused, not guessed.
- The second defect (HVX, every release, 78c531d included): quantized weights with an F16 src1. The host accepts
  any F32 or F16 src1 with quantized weights (ggml-hexagon.cpp @ 707321c4 2664-2690, @ eced84c8 2613-2641,
  @ 8599e0ea 2791-2818) and the quantizer reads src1 as F32 rows of nb[1] bytes with aligned copies
  (hvx_copy_f32_aa: quantize_f32_q8x4x2, matmul-ops.c @ 707321c4 4178-4226, 4659; QUANTIZE_IMPL /
  quantize_f32_q8_0_tiled_kernel, matmul-ops.c @ eced84c8 1092-1124 and hvx-mm-kernels-tiled.h 1020-1040,
  @ 8599e0ea 811-843 and 1080-1100): row r is K float32 values from byte floor(r nb[1] / 128) * 128, 2K bytes past
  the end for the last row. 78c531d's fix covers HMX only ("the existing HVX path handles F16 correctly" holds for
  F16 weights, not quantized ones).

Pointwise ops (HVX): GELU is GELU_QUICK on the HTP, in every release
- The host maps ggml's GELU (the tanh form, ggml_gelu) and GELU_QUICK to one DSP op, HTP_OP_UNARY_GELU
  (ggml-hexagon.cpp @ 707321c4 3259-3260, @ eced84c8 3214-3215, @ 8599e0ea 3472-3473, @ 78c531d4 3478-3479), and
  supports_op accepts both with F32 src0 and dst (@ 707321c4 3746-3748 and @ eced84c8 3826-3828 through
  ggml_hexagon_supported_activations, 2865-2895 / 2820-2850, every operand contiguous; @ 8599e0ea 4134-4136 and
  @ 78c531d4 4140-4142 through ggml_hexagon_supported_unary, 2963-2988 / 2969-2994: src0 not permuted). GELU_ERF
  falls to the switch's default in every release (@ 707321c4 3750-3751, @ eced84c8 3830-3831, @ 8599e0ea
  4138-4139, @ 78c531d4 4144-4145): refused, it stays on the CPU.
- The DSP computes x * sigmoid(1.702 x) for it, as it has since ggml-hexagon's GELU was written (llama.cpp #17921,
  ggml 1c73b80a): three HVX passes, y = x * 1.702f, s = sigmoid(y), x * s (unary_gelu_f32_per_thread, act-ops.c
  @ 707321c4 and @ eced84c8 380-383, reached through main.c 579-583 / 611-615, op_activations 768-773 and
  execute_op_activations_f32 652-655; gelu_f32 and tile_gelu_f32, unary-ops.c @ 8599e0ea and @ 78c531d4 295-310
  and 761-766, reached through main.c 727-732, op_unary 1012-1015 and execute_op_unary_f32 973, 992; 78c531d4's
  htp/ is 8599e0ea's, byte for byte). That is ggml's GELU_QUICK (ggml-cpu/vec.h @ all three 964, 1018), not its
  GELU, 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) (vec.h 963, 968-969): the two differ by up to about
  0.02 near |x| = 2.3, a known defect of the profiles (`[[defects]]` id `gelu-as-gelu-quick`, kind "approximation").
- The sigmoid is hvx_vec_fast_sigmoid_f32_guard (hvx-sigmoid.h, its F32 part the same in all four: @ 707321c4
  and eced84c8 7-10 and 12-52, @ 8599e0ea and 78c531d4 8-11 and 13-53, one include line apart): e^y as
  4^n N(f) / D(f) with v = y log2(e) / 2, n = trunc(v) (hvx_vec_truncate_f32, hvx-floor.h 16-43), f = v - n,
  N, D = (f + C1 f^3) +- (log2(e) + C2 f^2), 4^n put into N's exponent bits (`vaslacc(v3, n, 24)`), then
  4^n N / (4^n N + D) with hvx_vec_inverse_f32 (the seed 0x7EEEEBB3 - bits and three Newton steps, hvx-inverse.h
  89-107 in all four); y >= 87 gives 1, y <= -87 (and NaN) 0. Its relative error is about 6e-6 at most for |y| < 87. The
  multiplies are IEEE F32 from v79 (HVX_OP_MUL_F32 = Q6_Vsf_vmpy_VsfVsf, hvx-arith.h @ 707321c4 and 8599e0ea
  46-52).
- Emulated as: those steps in float32, each qf32 operation rounded to F32 (RNE) as it is computed (the device keeps
  some intermediate results in qf32 unconverted, whose rounding is not documented: a few F32 ulps). The output is
  F32, as supports_op requires of the node. `UNARY` holds, per release, the ggml ops whose HTP kernel is emulated
  (GELU and GELU_QUICK); the HTP's other pointwise ops are taken as the host computes them.

Refused (InvalidInputError, never a silent fallback): types other than f32/f16/q8_0/q4_0, type pairs the host
refuses, rows whose elements are not contiguous (nb[0] != the type's size), K not a multiple of 32 for quantized
weights or HMX (256 for v0.15.2's quantized HMX), N not a multiple of 32 on HMX (but for quantized weights from
v0.15.3, whose N the host pads to 32: ggml-hexagon.cpp @ eced84c8 2394-2395), batched non-F16 weights on HMX,
quantized weights with src1 broadcast (ne2 or ne3 > 1), F32 src1 rows not 128-byte aligned on v0.15.2's HMX or
into HVX's quantizer (their aligned loads would shift them; not emulated), an F16 src1 on 78c531d's HMX (it never
runs there), non-finite F16 activations on the HVX quantizer, an `after` shorter than what a defective read needs.
Where the device fails instead of computing (batched F16 src1 on HMX): BackendError. The fused MUL_MAT + ADD
(src2) of v0.21.0 is not a MUL_MAT and is not emulated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kzlab.errors import BackendError, InvalidInputError

#: the releases whose kernels are emulated (78c531d: ggml PR #1601's head)
RELEASES = ("v0.15.2", "v0.15.3", "v0.21.0", "78c531d")
#: the kernel paths of a MUL_MAT on the HTP
PATHS = ("hmx", "hvx")
#: ggml type name -> (elements per block, bytes per block), for the types emulated here
TYPES = {"f32": (1, 4), "f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}
#: weight types ggml-hexagon repacks and multiplies through a dynamic Q8 quantization of src1 on HVX
#: (ggml-hexagon.cpp @ 8599e0ea 2796-2800); only q8_0 and q4_0 are emulated
QUANTIZED = ("q4_0", "q4_1", "q8_0", "iq4_nl", "mxfp4")

#: defect ids `defect_of` returns, with what each is
DEFECT_HMX_F16_SRC1 = "hmx_f16_src1_read_as_f32"
DEFECT_HVX_QUANT_F16_SRC1 = "hvx_quant_f16_src1_read_as_f32"
DEFECTS = {
    DEFECT_HMX_F16_SRC1: "HMX reads an F16 src1 as F32 (stride nb[1] / 4 floats): pairs of F16 values taken as one "
                         "F32, the last row read past the tensor's end; batched products fail on the device",
    DEFECT_HVX_QUANT_F16_SRC1: "HVX's dynamic Q8 quantization reads an F16 src1 of quantized weights as F32 rows of "
                               "nb[1] bytes from 128-byte-aligned addresses, the last row past the tensor's end",
}

_VMEM = 128                               # bytes an aligned HVX load is aligned to (its low 7 address bits ignored)
_INV127_F16 = np.array([0x2008], dtype=np.uint16).view(np.float16)[0]   # the quantizer's 1/127
_F16_MAX = np.float16(65504.0)


# ---- operands -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class Operand:
    """One ggml tensor's memory as the device finds it.

    raw: the ggml_nbytes bytes from the tensor's data pointer (np.uint8, the buffer assumed 128-byte aligned as
    ggml-hexagon's buffers are); type: the ggml type name in lower case ("f32", "f16", "q8_0", "q4_0"); ne, nb: its
    4 sizes and byte strides in ggml order; after: the bytes that follow the tensor in device memory, read only by
    a defective kernel that runs past the end (a stated stand-in, e.g. zeros: on the device they are whatever the
    buffer holds next).
    """

    raw: np.ndarray
    type: str
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    after: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))

    def __post_init__(self) -> None:
        t = str(self.type).lower()
        if t not in TYPES:
            raise InvalidInputError(f"operand type {self.type!r} is not emulated (emulated: {', '.join(TYPES)})")
        ne, nb = _four(self.ne, "ne", 1), _four(self.nb, "nb", 1)
        raw, after = _bytes(self.raw, "raw"), _bytes(self.after, "after")
        blk, size = TYPES[t]
        if ne[0] % blk:
            raise InvalidInputError(f"{t} operand: ne[0] = {ne[0]} is not a multiple of its block ({blk})")
        if nb[0] != size:
            raise InvalidInputError(f"{t} operand: nb[0] = {nb[0]}, not {size}: rows whose elements are not "
                                    f"contiguous are not emulated")
        need = ne[0] // blk * size + sum((ne[i] - 1) * nb[i] for i in (1, 2, 3))
        if raw.size != need:
            raise InvalidInputError(f"{t} operand {ne} / {nb}: {raw.size} bytes given, ggml_nbytes is {need}")
        for k, v in (("type", t), ("ne", ne), ("nb", nb), ("raw", raw), ("after", after)):
            object.__setattr__(self, k, v)

    @classmethod
    def from_array(cls, x: np.ndarray, type: str = "f32", after: np.ndarray | None = None) -> Operand:
        """A contiguous f32 or f16 operand holding `x` (numpy order: x[i3, i2, i1, i0], up to 4 dims)."""
        if type not in ("f32", "f16"):
            raise InvalidInputError(f"from_array builds f32 or f16 operands, not {type!r}")
        a = np.ascontiguousarray(x, dtype="<f4" if type == "f32" else "<f2")
        if not 1 <= a.ndim <= 4:
            raise InvalidInputError(f"from_array: {a.ndim} dims, expected 1 to 4")
        ne = tuple(reversed(a.shape)) + (1,) * (4 - a.ndim)
        size = TYPES[type][1]
        nb = (size, size * ne[0], size * ne[0] * ne[1], size * ne[0] * ne[1] * ne[2])
        return cls(raw=a.reshape(-1).view(np.uint8), type=type, ne=ne, nb=nb,
                   after=np.zeros(0, np.uint8) if after is None else after)

    @property
    def row_bytes(self) -> int:
        blk, size = TYPES[self.type]
        return self.ne[0] // blk * size


def _four(v, name: str, lo: int) -> tuple[int, int, int, int]:
    try:
        t = tuple(int(x) for x in v)
    except (TypeError, ValueError):
        raise InvalidInputError(f"operand {name}: expected 4 integers, got {v!r}") from None
    if len(t) != 4 or any(x < lo for x in t):
        raise InvalidInputError(f"operand {name}: expected 4 integers >= {lo}, got {v!r}")
    return t  # type: ignore[return-value]


def _bytes(a, name: str) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype != np.uint8 or a.ndim != 1:
        raise InvalidInputError(f"operand {name}: expected a 1-D np.uint8 array, got {a.dtype} {a.shape}")
    return np.ascontiguousarray(a)


def _row_view(op: Operand) -> np.ndarray:
    """The operand's rows as (ne3, ne2, ne1, row bytes) uint8, gathered by their strides (a copy)."""
    ne, nb = op.ne, op.nb
    v = np.lib.stride_tricks.as_strided(op.raw, shape=(ne[3], ne[2], ne[1], op.row_bytes),
                                        strides=(nb[3], nb[2], nb[1], 1), writeable=False)
    return np.ascontiguousarray(v)


def _misread_f32(op: Operand, starts: np.ndarray, k: int) -> np.ndarray:
    """K float32 values from each byte offset in `starts` of the device's memory: the tensor, then `after`."""
    mem = np.concatenate([op.raw, op.after])
    end = int(starts.max()) + 4 * k if starts.size else 0
    if end > mem.size:
        raise InvalidInputError(f"the kernel reads {end - op.raw.size} bytes past the {op.type} operand's end; "
                                f"Operand.after holds {op.after.size}")
    win = np.lib.stride_tricks.sliding_window_view(mem, 4 * k)
    return np.ascontiguousarray(win[starts]).view("<f4").astype(np.float32)


# ---- decoding and conversions -------------------------------------------------------------------------------------
def _last_axis(b, size: int, what: str) -> np.ndarray:
    b = np.ascontiguousarray(np.asarray(b, dtype=np.uint8))
    if b.ndim == 0 or b.shape[-1] % size:
        raise InvalidInputError(f"{what}: the last axis ({b.shape}) is not a whole number of {size}-byte units")
    return b


def decode_f32(b) -> np.ndarray:
    """Little-endian F32 bytes (last axis) -> float32 values."""
    return _last_axis(b, 4, "f32 bytes").view("<f4").astype(np.float32)


def decode_f16(b) -> np.ndarray:
    """Little-endian F16 bytes (last axis) -> float32 values (exact)."""
    return _last_axis(b, 2, "f16 bytes").view("<f2").astype(np.float32)


def q8_0_parts(b) -> tuple[np.ndarray, np.ndarray]:
    """Q8_0 blocks (last axis: 34-byte blocks, an F16 scale then 32 int8) -> (q int8 [..., K], d f16 [..., K/32])."""
    blocks = _last_axis(b, 34, "q8_0 bytes").reshape(*np.shape(b)[:-1], -1, 34)
    d = np.ascontiguousarray(blocks[..., :2]).view("<f2")[..., 0].astype(np.float16)
    q = np.ascontiguousarray(blocks[..., 2:]).view(np.int8)
    return q.reshape(*q.shape[:-2], -1), d


def q4_0_parts(b) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks (18 bytes: an F16 scale, 16 bytes of nibbles) -> (nibble - 8 as int8 [..., K], d [..., K/32]).
    Element j < 16 of a block is the low nibble of byte j, element j + 16 its high nibble (ggml's layout)."""
    blocks = _last_axis(b, 18, "q4_0 bytes").reshape(*np.shape(b)[:-1], -1, 18)
    d = np.ascontiguousarray(blocks[..., :2]).view("<f2")[..., 0].astype(np.float16)
    qs = blocks[..., 2:]
    q = np.concatenate([(qs & 0x0F).astype(np.int8) - 8, (qs >> 4).astype(np.int8) - 8], axis=-1)
    return q.reshape(*q.shape[:-2], -1), d


def _dequant(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """q * d per 32-block in float32: exact (an 8-bit integer times an 11-bit significand), as ggml's to_float."""
    s = q.shape
    return (q.reshape(*s[:-1], -1, 32).astype(np.float32) * d.astype(np.float32)[..., None]).reshape(s)


def decode_q8_0(b) -> np.ndarray:
    """Q8_0 bytes -> float32 values q * d (what ggml-cpu's dequantize_row_q8_0 gives)."""
    return _dequant(*q8_0_parts(b))


def decode_q4_0(b) -> np.ndarray:
    """Q4_0 bytes -> float32 values (nibble - 8) * d (ggml-cpu's dequantize_row_q4_0)."""
    return _dequant(*q4_0_parts(b))


_DECODE = {"f32": decode_f32, "f16": decode_f16, "q8_0": decode_q8_0, "q4_0": decode_q4_0}


def read(op: Operand) -> np.ndarray:
    """The operand's values as ggml's to_float gives them, float32 (ne3, ne2, ne1, ne0)."""
    return _DECODE[op.type](_row_view(op))


def read_values(op: Operand) -> np.ndarray:
    """`read`, but an F16 operand's values as float16 (the same values, without numpy's scalar F16 -> F32 cast: a
    product's engine widens them)."""
    if op.type == "f16":
        return _last_axis(_row_view(op), 2, "f16 bytes").view("<f2")
    return read(op)


#: elements converted at a time by f32_to_f16
_CHUNK = 1 << 18
#: numpy's cast of an F32 that overflows F16 or is an F16 subnormal costs about this many times a normal one's (its
#: per-element path): below one such value in this many, f32_to_f16 leaves them to numpy's cast
_SLOW_CAST = 64


def f32_to_f16(x) -> np.ndarray:
    """F32 -> F16 as the HTP converts (qf32 -> hf, v79+: IEEE round to nearest even): beyond 65504 (after
    rounding) +-inf, NaN stays NaN, F16 subnormals kept: what numpy's cast gives, bit for bit.

    numpy's cast takes a slow per-element path (about ten times its vector path) for results that overflow, are F16
    subnormals or round to zero from a non-zero value, and the defect's misread activations are mostly such values;
    those are rounded here from their bits instead, the rest left to the cast: |x| >= 65520 (65504 + half an F16
    step, the tie going to the even inf) is +-inf, 2^-25 < |x| < 2^-14 is round-half-even(|x| 2^24) F16 subnormal
    steps (exact: a product by a power of two), and 0 < |x| <= 2^-25 is a signed zero (2^-25 is the tie between 0
    and the smallest subnormal, and 0 is even). Zeros, infinities and NaNs take the cast's vector path."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim != 1:
        return f32_to_f16(x.reshape(-1)).reshape(x.shape)
    if x.size > _CHUNK:  # in pieces that stay in cache: a temporary the size of a whole operand costs its page faults
        out = np.empty(x.size, np.float16)
        for i in range(0, x.size, _CHUNK):
            out[i:i + _CHUNK] = f32_to_f16(x[i:i + _CHUNK])
        return out
    u = x.view(np.uint32)
    mag = u & np.uint32(0x7FFFFFFF)
    over = (mag >= np.uint32(0x477FF000)) & (mag < np.uint32(0x7F800000))    # 65520 <= |x| < inf
    small = (mag < np.uint32(0x38800000)) & (mag != 0)                        # 0 < |x| < 2^-14
    special = over | small
    n = int(np.count_nonzero(special))
    if n * _SLOW_CAST < x.size:  # few: numpy's own cast is cheaper than the selections below
        return x.astype(np.float16)
    y = np.where(over, np.float32(np.inf), np.where(small, np.float32(0), x))
    np.copysign(y, x, out=y)
    h = y.astype(np.float16)
    # F16 subnormal steps from |x| > 2^-25 only (a selection, no arithmetic on a float32 subnormal)
    mid = np.flatnonzero(small & (mag > np.uint32(0x33000000)))
    if mid.size:
        steps = np.rint(mag[mid].view(np.float32) * np.float32(2.0**24)).astype(np.uint16)
        h.view(np.uint16)[mid] = ((u[mid] >> np.uint32(16)) & np.uint32(0x8000)).astype(np.uint16) | steps
    return h


def f16_recip(d) -> np.ndarray:
    """The device's F16 reciprocal (hvx_vec_inverse_f16), modelled: 1 / |d| truncated to F16 (toward zero), the
    sign put back; |d| below 0x0101 (about 1.53e-5, zero included) gives 65504. The device evaluates 1/(1 + m)
    with an order-3 polynomial (peak error 1.13e-4) before the truncation; that error is not modelled."""
    d = np.asarray(d, dtype=np.float16)
    bits = d.view(np.uint16) & 0x7FFF
    small = bits < 0x0101
    a = np.where(small, 1.0, np.abs(d.astype(np.float64)))
    r = 1.0 / a
    with np.errstate(over="ignore"):
        h = r.astype(np.float16)
    h = np.where(h.astype(np.float64) > r, np.nextafter(h, np.float16(0)), h).astype(np.float16)
    h = np.where(small, _F16_MAX, h).astype(np.float16)
    return np.where(np.signbit(d), -h, h).astype(np.float16)


def quantize_q8_activations(x, group: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """HVX's dynamic quantization of F32 activations (last axis K, a multiple of 32) before a product with
    quantized weights: (q int8 [..., K], d f16 [..., K/32], each 32-block's scale; one scale per `group` values).

    Steps (see the module's docstring for the source): x -> F16; per group amax = max|x|; d = F16(amax * 0x2008);
    dinv = f16_recip(d); y = F16(x * dinv); y rounded to 1/64 (RNE), then to an integer, halves upward; clipped
    to [-128, 127]. Non-finite F16 activations are refused: the device's result for them is a matter of bit-level
    wrap-around that is not emulated.
    """
    xh = f32_to_f16(x)
    k = xh.shape[-1]
    if k % 32 or group not in (32, 64, 128):
        raise InvalidInputError(f"quantize_q8_activations: K = {k} (a multiple of 32 expected), group {group}")
    if not np.isfinite(xh).all():
        raise InvalidInputError("HVX's Q8 quantization of non-finite F16 activations (|x| > 65504, inf or NaN) is not "
                                "emulated")
    pad = -k % group
    xp = np.concatenate([xh, np.zeros(xh.shape[:-1] + (pad,), np.float16)], axis=-1) if pad else xh
    g = xp.reshape(*xp.shape[:-1], -1, group)
    amax = np.abs(g).max(axis=-1)
    d = f32_to_f16(amax.astype(np.float32) * np.float32(_INV127_F16))       # exact product, one rounding
    dinv = f16_recip(d)
    y = g.astype(np.float32)
    y *= dinv.astype(np.float32)[..., None]                                 # exact: two 11-bit significands
    y = f32_to_f16(y).astype(np.float32)                                    # qf16 -> hf: one rounding
    y *= 64.0
    np.round(y, out=y)                                                      # 196608 + y in F32: RNE to 1/64
    y += 32.0
    y *= 1.0 / 64.0
    np.floor(y, out=y)                                                      # vround: + 0.5 then >> 16
    q = np.clip(y, -128, 127).astype(np.int8)                               # vpack :sat
    q = q.reshape(*xp.shape[:-1], -1)[..., :k]
    d32 = np.repeat(d, group // 32, axis=-1)[..., : k // 32]
    return q, d32


# ---- which combinations hit a defect ------------------------------------------------------------------------------
def _names(path: str, release: str) -> None:
    if path not in PATHS:
        raise InvalidInputError(f"path {path!r}: expected one of {', '.join(PATHS)}")
    if release not in RELEASES:
        raise InvalidInputError(f"release {release!r}: expected one of {', '.join(RELEASES)}")


def defect_of(path: str, src0_type: str, src1_type: str, release: str) -> str | None:
    """The id of the known defect a MUL_MAT with these types hits on kernel path `path` of `release` (a key of
    DEFECTS), or None. Types are ggml type names (any case); combinations the device never runs on that path
    (an F16 src1 on 78c531d's HMX, F32 weights with an F16 src1) have none."""
    _names(path, release)
    s0, s1 = str(src0_type).lower(), str(src1_type).lower()
    if s1 != "f16" or s0 == "f32":
        return None
    if path == "hmx":
        return None if release == "78c531d" else DEFECT_HMX_F16_SRC1
    return DEFECT_HVX_QUANT_F16_SRC1 if s0 in QUANTIZED else None


# ---- the product --------------------------------------------------------------------------------------------------
def _bmm(a: np.ndarray, w: np.ndarray, product=None) -> np.ndarray:
    """dst[i3, i2] = a[i3, i2] @ w[i3 // r3, i2 // r2].T (ggml's broadcasting of src0), each 2-D product by
    `product(a2, w2)` (default `exact_product`: summed in float64 and rounded once to float32; a `Products`
    engine's `f16` or `f32`).

    Why float64 by default: the device's order of summation is not emulated, and a float32 sum takes the host BLAS's,
    which changes with its kernel and its thread count (the tiny PocketTTS decoder's emulated SNR on hexagon-v0.21.0
    moved by 0.002 dB between OpenBLAS's SkylakeX and Haswell kernels). A float64 sum of these products (F16 x F16,
    exact in float32; or F32 x F32) is within K 2^-53 of the exact sum in any order, so its float32 rounding is the
    exact sum's but for values within that of a rounding boundary: the emulated product is the same on every host."""
    product = product or exact_product
    n3, n2 = a.shape[:2]
    r3, r2 = n3 // w.shape[0], n2 // w.shape[1]
    if w.shape[0] == 1 and w.shape[1] == 1:
        m = a.shape[2]
        return product(a.reshape(-1, a.shape[-1]), w[0, 0]).reshape(n3, n2, m, w.shape[2])
    out = np.empty((n3, n2, a.shape[2], w.shape[2]), np.float32)
    for i3 in range(n3):
        for i2 in range(n2):
            out[i3, i2] = product(a[i3, i2], w[i3 // r3, i2 // r2])
    return out


def exact_product(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """a @ w.T (2-D) summed in float64 and rounded once to float32 (see `_bmm`)."""
    return nan_rows_matmul(a.astype(np.float64), w.astype(np.float64))


def exact_f16_product(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The F16 product engine's reference (`Products`): `a` rounded to F16 (RNE, `f32_to_f16`; float16 values
    are F16 already), times `w` (F16 values), the exact products summed in float64 and rounded once to float32."""
    return exact_product(a if a.dtype == np.float16 else f32_to_f16(a), w)


class Products:
    """What computes the products a decode emulates, two kinds of them (2-D: a [M, K], w [N, K] -> float32 [M, N]):

    - `f16(a, w)`: a rounded to F16 (RNE) first (float16 values pass unchanged), times w (F16 values), the exact
      products summed with an error of at most gamma_K sum|a||w| (gamma_K = K u / (1 - K u), u = 2^-24: F32 sums in
      any order, or better). That is all any HMX or HVX F16 kernel's arithmetic is known to be (the device's order
      and width of accumulation are not public: the module's docstring), and what ggml-cpu computes for F16
      weights (`host_computes`), so any engine meeting it is as true to either as the reference, and two such
      engines differ by at most 2 gamma_K sum|a||w| before any F16 rounding of the result;
    - `f32(a, w)`: F32 values, their products summed within gamma_{K+1} sum|a||w| of the exact sum (F32 products
      and sums in any order: HVX's IEEE multiplies and adds, ggml-cpu's FMA).
    This class is the reference: float64 sums of exact products, rounded once (`exact_product`). `name` says which
    engine computed a decode."""

    name = "numpy float64 sums"

    def f16(self, a: np.ndarray, w: np.ndarray) -> np.ndarray:
        return exact_f16_product(a, w)

    def f32(self, a: np.ndarray, w: np.ndarray) -> np.ndarray:
        return exact_product(a, w)


#: the reference engine (numpy, float64 sums)
EXACT = Products()


def nan_rows_matmul(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """a @ w.T in a's and w's precision, rounded to float32, a row of `a` holding a NaN giving NaN in every column
    without a product: a NaN term makes an IEEE sum NaN whatever the other terms (what the product computes for it
    too). A decode the device's arithmetic broke is mostly such rows from one stage on; its products then cost
    nothing."""
    nan = np.isnan(a).any(axis=1)
    n_nan = int(np.count_nonzero(nan))
    if not n_nan:
        return np.matmul(a, w.T).astype(np.float32, copy=False)
    out = np.full((a.shape[0], w.shape[0]), np.nan, np.float32)
    if n_nan < a.shape[0]:
        out[~nan] = np.matmul(a[~nan], w.T)
    return out


def _check(src0: Operand, src1: Operand, path: str, release: str) -> None:
    """Refuse what the host does not accept or what is not emulated (see the module's docstring)."""
    if not isinstance(src0, Operand) or not isinstance(src1, Operand):
        raise InvalidInputError("matmul takes two Operand")
    check_operands(src0, src1, path, release)


def check_operands(src0: Any, src1: Any, path: str, release: str) -> None:
    """`matmul`'s refusals from the operands' types, sizes and strides alone (objects with `type`, `ne`, `nb`, as
    `Operand` has): what the host does not accept on `path` of `release`, or what is not emulated."""
    _names(path, release)
    k = src0.ne[0]
    if src1.ne[0] != k:
        raise InvalidInputError(f"src0 ne[0] = {k} but src1 ne[0] = {src1.ne[0]}")
    if src1.ne[2] % src0.ne[2] or src1.ne[3] % src0.ne[3]:
        raise InvalidInputError(f"src0 {src0.ne} cannot be broadcast over src1 {src1.ne}")
    if src1.type not in ("f32", "f16"):
        raise InvalidInputError(f"src1 {src1.type}: ggml-hexagon takes F32 or F16 src1 only")
    if src0.type == "f32" and src1.type != "f32":
        raise InvalidInputError("F32 weights with an F16 src1: ggml-hexagon refuses them")
    quant = src0.type in QUANTIZED
    if quant and (k % 32 or src1.ne[2] != 1 or src1.ne[3] != 1):
        raise InvalidInputError(f"{src0.type} weights: K % 32 == 0 and no src1 broadcast (ne2 = ne3 = 1) are "
                                f"required, got K = {k}, src1 ne {src1.ne}")
    if path == "hvx":
        if quant and src1.type == "f32" and src1.nb[1] % _VMEM:
            raise InvalidInputError(f"HVX's Q8 quantization copies F32 rows with aligned loads: rows not 128-byte "
                                    f"aligned (nb {src1.nb}) are not emulated")
        return
    if release == "78c531d" and src1.type != "f32":
        raise InvalidInputError("78c531d never runs a product with an F16 src1 on HMX (ggml-hexagon.cpp @ 78c531d4 "
                                "2217-2222): it runs on HVX")
    kmod = 256 if quant and release == "v0.15.2" else 32
    # from v0.15.3 the host pads a repacked (quantized) weight's N to a multiple of 32 (ne01_padded,
    # ggml-hexagon.cpp @ eced84c8 2394-2395): the padding rows' results are not stored, and each real row's result
    # is computed as without them
    padded = quant and release != "v0.15.2"
    if k % kmod or (src0.ne[1] % 32 and not padded):
        raise InvalidInputError(f"HMX needs K % {kmod} == 0 and N % 32 == 0, got K = {k}, N = {src0.ne[1]}")
    batched = src0.ne[2] * src0.ne[3] > 1 or src1.ne[2] * src1.ne[3] > 1
    if batched and src0.type != "f16":
        raise InvalidInputError(f"{src0.type} weights batched: HMX's kernels for them are 2-D; the device runs HVX")
    if batched and src1.type == "f16":
        raise BackendError(f"{arithmetic_class(release)}: HMX with an F16 src1, batched: act_stride < k makes the HMX "
                           "kernel fail "
                           + ("and op_matmul retry itself without end" if release == "v0.15.2"
                              else "(HTP_STATUS_INTERNAL_ERR)"))
    if release == "v0.15.2" and src1.type == "f32" and any(src1.nb[i] % _VMEM for i in (1, 2, 3)):
        raise InvalidInputError(f"v0.15.2 HMX loads F32 rows with aligned HVX loads: rows not 128-byte aligned "
                                f"(nb {src1.nb}) are not emulated")


def _activation_hmx(src1: Operand, release: str) -> np.ndarray:
    """src1 as HMX reads it, float32 (ne13, ne12, M, K), before its F16 conversion."""
    if src1.type == "f32":
        return read(src1)
    # the defect: 2-D only (batched was refused), row r from byte r * 4 * (nb1 // 4), v0.15.2 aligned down
    m, k = src1.ne[1], src1.ne[0]
    starts = np.arange(m, dtype=np.int64) * (4 * (src1.nb[1] // 4))
    if release == "v0.15.2":
        starts -= starts % _VMEM
    return _misread_f32(src1, starts, k).reshape(1, 1, m, k)


def _weights_hmx(src0: Operand) -> np.ndarray:
    """src0 as HMX's F16 tiles hold it, float16 (ne03, ne02, N, K)."""
    rows = _row_view(src0)
    if src0.type == "f16":
        return _last_axis(rows, 2, "f16 bytes").view("<f2")
    if src0.type == "f32":
        return f32_to_f16(decode_f32(rows))
    q, d = (q8_0_parts if src0.type == "q8_0" else q4_0_parts)(rows)
    return f32_to_f16(_dequant(q, d))                                    # RNE_f16(q * d): qf16 -> hf


def _hvx_quant(src0: Operand, src1: Operand, group: int) -> np.ndarray:
    """Quantized weights on HVX: the dynamic Q8 quantization of src1 and the blockwise int8 dot product."""
    m, k = src1.ne[1], src1.ne[0]
    if src1.type == "f32":
        x = read(src1).reshape(m, k)
    else:  # the defect: F32 rows of nb[1] bytes from 128-byte-aligned addresses (hvx_copy_f32_aa)
        starts = np.arange(m, dtype=np.int64) * src1.nb[1]
        x = _misread_f32(src1, starts - starts % _VMEM, k)
    aq, da = quantize_q8_activations(x, group)
    wq, dw = (q8_0_parts if src0.type == "q8_0" else q4_0_parts)(_row_view(src0).reshape(src0.ne[1], -1))
    nt = k // 32
    a_t = np.ascontiguousarray(aq.astype(np.float32).reshape(m, nt, 32).transpose(1, 0, 2))
    w_t = np.ascontiguousarray(wq.astype(np.float32).reshape(-1, nt, 32).transpose(1, 2, 0))
    da32, dw32 = da.astype(np.float32), dw.astype(np.float32)
    acc = np.zeros((m, src0.ne[1]), np.float32)
    for t in range(nt):
        s = np.matmul(a_t[t], w_t[t])             # exact: |sum| <= 32 * 128 * 128 = 2^19 < 2^24
        s *= np.multiply.outer(da32[:, t], dw32[:, t])  # scale: hf x hf exact in F32; the product rounded
        acc += s                                  # F32 sum over the blocks in K order
    return acc.reshape(1, 1, m, -1)


def matmul(src0: Operand, src1: Operand, path: str, release: str, *, hvx_q8_group: int = 128,
           products: Products = EXACT) -> np.ndarray:
    """ggml's MUL_MAT (dst[i13, i12, i11, i01] = sum_k src0[i13 // r3, i12 // r2, i01, k] * src1[i13, i12, i11, k])
    as kernel path `path` ("hmx" or "hvx") of ggml-hexagon `release` computes it, its defects included: float32
    (ne13, ne12, ne11, ne01), dst's memory order.

    What each path computes, the sources and what is approximated are in the module's docstring. Whether the
    device takes `path` for this product is the placement's question, not this function's: it computes what that
    kernel gives for these operands. `hvx_q8_group`: the dynamic quantizer's group on HVX with quantized weights,
    128 (the default kernels) or 32 (v0.15.3+'s flat fallback kernel; v0.15.2 built with a group of 32), 64 (v0.15.2
    built so). `products`: what computes the products of F16 values (HMX, and HVX with F16 weights; `Products`:
    the reference by default). Raises InvalidInputError for what is not emulated or not accepted by the host,
    BackendError where the device fails instead of computing.
    """
    _check(src0, src1, path, release)
    with np.errstate(over="ignore", invalid="ignore"):   # the device gives inf and NaN without a word
        return _matmul(src0, src1, path, release, hvx_q8_group, products)


def _matmul(src0: Operand, src1: Operand, path: str, release: str, hvx_q8_group: int,
            products: Products = EXACT) -> np.ndarray:
    allowed = (32, 64, 128) if release == "v0.15.2" else (32, 128)
    if hvx_q8_group not in allowed:
        raise InvalidInputError(f"hvx_q8_group={hvx_q8_group!r}: {release} quantizes src1 in groups of "
                                f"{' or '.join(map(str, allowed))}")
    if src0.type in QUANTIZED and path == "hvx":
        return _hvx_quant(src0, src1, hvx_q8_group)
    if path == "hmx":  # src1 as read rounded to F16, exact products summed
        acc = _bmm(_activation_hmx(src1, release), _weights_hmx(src0), products.f16)
        return f32_to_f16(acc).astype(np.float32)                  # stored as hf, widened exactly
    # HVX, F16 or F32 weights
    if src0.type == "f16":                                         # src1 rounded to F16 first (an F16 one is)
        return _bmm(read_values(src1), read_values(src0), products.f16)
    return _bmm(read(src1), read(src0), products.f32)


# ---- what ggml-cpu computes alike, and which releases compute alike -------------------------------------------
#: `host_computes`: ggml-cpu's own MUL_MAT of the node computes what the device's kernel computes
SAME = "same"
#: `host_computes`: ... and the device then stores its result as F16 (HMX's hf store): round it to F16
F16_RESULT = "f16_result"


def host_computes(path: str, src0_type: str, src1_type: str) -> str | None:
    """Where ggml-cpu's own MUL_MAT of these types computes what the device's kernel `path` computes from the same
    operands (up to the order of their sums, which no emulation here has: `Products`): SAME, F16_RESULT (the
    same, then the result rounded to F16), or None (the kernel is emulated from the operands' bytes).

    ggml-cpu (ggml-org/ggml @ eced84c8, as ggml-python 0.0.45 vendors it) multiplies F16 weights by converting
    src1 to F16 first (type_traits_cpu[GGML_TYPE_F16]: vec_dot_type F16, from_float ggml_cpu_fp32_to_fp16,
    ggml-cpu/ggml-cpu.c 218-223) with F16C's round to nearest even (_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT),
    _cvtss_sh(x, 0): ggml-cpu.c 3397-3427, simd-mappings.h 62), and ggml_vec_dot_f16 sums the exact F16 x F16
    products in F32 lanes (GGML_F32Cx8_FMA / GGML_F32Cx16_FMA: simd-mappings.h 536, 561, 657-667), the lanes and
    the leftovers in double (vec.cpp 264-377): `Products.f16`'s contract. F32 weights by F32 src1: F32 products
    and sums (vec_dot_f32, FMA): `Products.f32`'s. So:
    - HVX with F16 weights and an F32 or F16 src1, or F32 weights and src1 (the module's docstring): SAME;
    - HMX with F16 weights and an F32 src1 (the same, then stored as hf): F16_RESULT;
    - every other case (HMX rounding F32 weights to F16; quantized weights; an F16 src1 on HMX, the defect: its
      bytes read as F32): None.
    Not where ggml-cpu was built with AVX512-FP16 (its F16 vectors accumulate in F16: simd-mappings.h 482-521) or
    llamafile's sgemm: `kzlab.analysis.emulate.device` asks the build it runs before it takes this answer."""
    if path not in PATHS:
        raise InvalidInputError(f"path {path!r}: expected one of {', '.join(PATHS)}")
    s0, s1 = str(src0_type).lower(), str(src1_type).lower()
    if path == "hvx" and ((s0 == "f16" and s1 in ("f32", "f16")) or s0 == s1 == "f32"):
        return SAME
    if path == "hmx" and s0 == "f16" and s1 == "f32":
        return F16_RESULT
    return None


#: `node_arithmetic` of a product ggml-cpu computes as the host does (`host_computes` SAME)
HOST_ARITHMETIC = "ggml-cpu"


def node_arithmetic(kind: str, path: str, src0_type: str, src1_type: str, release: str) -> str:
    """A name for what a node's emulation computes from its operands: two nodes of one graph with one name compute
    the same values from the same operands. A product ggml-cpu computes as the device does (`host_computes` SAME:
    HVX's with F16 weights, or F32 ones) is HOST_ARITHMETIC, as a product left on the host (ggml-cpu's own kernel
    computes both); the rest by kind, kernel path and `arithmetic_class` (the refusals a release makes included)."""
    s0, s1 = str(src0_type).lower(), str(src1_type).lower()
    if kind == "matmul" and path in PATHS and host_computes(path, s0, s1) == SAME:
        return HOST_ARITHMETIC
    return f"{kind}:{path}:{s0}x{s1}@{arithmetic_class(release)}"


def arithmetic_class(release: str) -> str:
    """The releases whose kernels compute the same values for every operand each accepts, as one name: v0.15.3 and
    v0.21.0 differ in no emulated product or pointwise op (the module's docstring: the same conversions, accumulation,
    defects and refusals; their GELU the same DSP op), v0.15.2 reads HMX's and the quantizer's rows from aligned
    addresses and needs K % 256 for quantized HMX, and 78c531d never puts an F16 src1 on HMX."""
    if release not in RELEASES:
        raise InvalidInputError(f"release {release!r}: expected one of {', '.join(RELEASES)}")
    return "v0.15.3+" if release in ("v0.15.3", "v0.21.0") else release


# ---- pointwise ops (HVX) ------------------------------------------------------------------------------------------
_LOG2E_BITS = 0x3FB8AA3B                  # FAST_SIGMOID_LOG2F, 1.442695022 (hvx-sigmoid.h @ 8599e0ea 8-11)
_SIG_C1_BITS = 0x3D009076                 # FAST_SIGMOID_C1, 0.03138777
_SIG_C2_BITS = 0x3E8D74BD                 # FAST_SIGMOID_C2, 0.276281267
_INV_SEED = 0x7EEEEBB3                    # hvx_vec_inverse_f32's first approximation (hvx-inverse.h 90)
_SIG_GUARD = np.float32(87.0)             # hvx_sigmoid_loop_body's max_exp / min_exp
_GELU_COEF = np.float32(1.702)            # unary-ops.c @ 8599e0ea 306 (1.702f); act-ops.c @ 707321c4 381


def _f32(bits: int) -> np.float32:
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


def _inverse_f32(v: np.ndarray) -> np.ndarray:
    """hvx_vec_inverse_f32: the seed 0x7EEEEBB3 - bits(v) (integer), then three Newton steps r (2 - r v)."""
    two = np.float32(2.0)
    i = (np.uint32(_INV_SEED) - v.view(np.uint32)).view(np.float32)
    r = i * (two - i * v)
    r = r * (two - r * v)
    r = r * (two - r * v)
    return r


def fast_sigmoid_f32(y) -> np.ndarray:
    """hvx_vec_fast_sigmoid_f32_guard, float32 step by step (see the module's docstring): 1 for y >= 87, 0 for
    y <= -87 and NaN, else e^y / (e^y + 1) with e^y as 4^n N(f) / D(f)."""
    y = np.ascontiguousarray(y, dtype=np.float32)
    log2e, c1, c2 = _f32(_LOG2E_BITS), _f32(_SIG_C1_BITS), _f32(_SIG_C2_BITS)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        v = (y * log2e) * np.float32(0.5)
        n = np.trunc(np.where(np.abs(v) < 2.0**23, v, np.float32(0))).astype(np.int32)   # hvx_vec_truncate_f32
        f = v - n.astype(np.float32)
        ff = f * f
        v1 = ff * c2 + log2e
        v2 = (f * c1) * ff + f
        v3 = (v2 + v1).view(np.int32) + (n << 24)        # 4^n into the exponent bits (vaslacc by 24)
        v3 = v3.view(np.float32)
        v4 = v2 - v1
        v5 = v3 - v4
        res = v3 * _inverse_f32(v5)
    res = np.where(_SIG_GUARD > y, res, np.float32(1.0))
    return np.where(y > -_SIG_GUARD, res, np.float32(0.0)).astype(np.float32)


def gelu_sigmoid_f32(x) -> np.ndarray:
    """HTP_OP_UNARY_GELU: x * sigmoid(1.702 x), with the HTP's fast sigmoid and IEEE F32 multiplies (v79+)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return (x * fast_sigmoid_f32(x * _GELU_COEF)).astype(np.float32)


#: the functions the HTP's pointwise kernels compute, by name
POINTWISE = {"gelu_sigmoid_1702": gelu_sigmoid_f32}
#: per release, the ggml unary ops whose HTP kernel is emulated and the function it computes: GELU and GELU_QUICK
#: are one DSP op, x * sigmoid(1.702 x), in every release (see the module's docstring for the lines)
UNARY: dict[str, dict[str, str]] = {
    "v0.15.2": {"GELU": "gelu_sigmoid_1702", "GELU_QUICK": "gelu_sigmoid_1702"},   # act-ops.c @ 707321c4 380-383
    "v0.15.3": {"GELU": "gelu_sigmoid_1702", "GELU_QUICK": "gelu_sigmoid_1702"},   # act-ops.c @ eced84c8 380-383
    "v0.21.0": {"GELU": "gelu_sigmoid_1702", "GELU_QUICK": "gelu_sigmoid_1702"},   # unary-ops.c @ 8599e0ea 295-310
    "78c531d": {"GELU": "gelu_sigmoid_1702", "GELU_QUICK": "gelu_sigmoid_1702"},   # unary-ops.c @ 78c531d4 295-310
}
#: the kernel path a pointwise op runs on (the vector units)
POINTWISE_PATH = "hvx"


def emulated_kind(op: str, path: str, release: str) -> str | None:
    """What of a node the device runs (ggml op name `op`, kernel path `path`) is emulated at `release`: "matmul"
    (a MUL_MAT on a named path), "unary" (an op of `UNARY[release]`), or None (computed as the host computes it)."""
    if op == "MUL_MAT" and path in PATHS:
        return "matmul"
    if op in UNARY.get(release, {}):
        return "unary"
    return None


def unary(op: str, src0: Operand, release: str) -> np.ndarray:
    """ggml's unary op `op` (a key of `UNARY[release]`) as ggml-hexagon `release`'s HVX kernel computes it from src0:
    float32 (ne3, ne2, ne1, ne0), dst's memory order (dst is contiguous F32: supports_op requires it). src0 may
    be strided (v0.21.0 accepts a non-contiguous, unpermuted src0); its rows are read by their strides."""
    if release not in RELEASES:
        raise InvalidInputError(f"release {release!r}: expected one of {', '.join(RELEASES)}")
    kernel = UNARY[release].get(op)
    if kernel is None:
        raise InvalidInputError(f"{op} is not a pointwise op emulated for {release} (emulated: "
                                f"{', '.join(UNARY[release]) or 'none'})")
    if not isinstance(src0, Operand) or src0.type != "f32":
        raise InvalidInputError(f"{op} on the HTP takes an F32 src0 (supports_op refuses others)")
    return POINTWISE[kernel](read(src0))
