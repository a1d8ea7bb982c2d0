"""Every capability profile against the ops kzlab's decoder families build, and the CUDA profile against its source.

The graphs of the three families' tiny files (Qwen3-TTS 12 Hz, WavTokenizer, and Mimi in both of its forms: kyutai's
codes-in decoder and PocketTTS's latents-in one, the synthetic presets) over the main lowering variants (both modes,
one frame and several) give the set of ops kzlab ever hands a scheduler, each with its types and layouts: its
signature. Every profile must answer each (accepted, or refused by a named rule: a rule of rules.RULES, or
`not-listed` for an op its backend's supports_op switch does not name), and the CUDA profile's answers must be the
ones read off ggml-cuda's supports_op by hand (CUDA_SOURCE below, with the lines of ggml-org/ggml eced84c8, v0.15.3,
the ggml ggml-python 0.0.45 vendors, src/ggml-cuda/ggml-cuda.cu). The Hexagon profiles' answers for the Mimi
graphs' ops (ELU, the two GELUs, NORM, ROPE in both modes, the masked SOFT_MAX, REPEAT, GET_ROWS, PAD, and the
binary ops, the transposed convs' strided slices among them) are held the same way against ggml-hexagon's
supports_op at each commit a profile names (HEXAGON_SOURCE). A signature the families start to build that a table
lacks fails the test until someone reads the source for it: the profile cannot drift from the source unnoticed.
Past supports_op, ggml-cuda's kernels assert what it does not check (a contiguous source, a type, a kernel size):
CUDA_KERNELS holds, for every op the CUDA profile accepts, those asserts read off each kernel with their lines, and
every node the profile accepts must meet them, since the scheduler would place it on the GPU and the kernel abort.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from ggml import ggml as g

from kzlab.analysis.placement import capabilities
from kzlab.analysis.placement.graph import build
from kzlab.analysis.placement.rules import RULES, addr, cuda_conv2d_dw_kernel_layout
from kzlab.app.builtins import resolve_model
from kzlab.arch import arch_of, not_applicable
from kzlab.formats.synth import synth
from kzlab.graph.options import Lowering
from kzlab.loader import load_model

#: Qwen3-TTS 12 Hz and WavTokenizer (the tiny files shipped in the package), Mimi's codes-in and latents-in
#: decoders (synthetic presets, written as F32 like the shipped files: the weight types come from `wtype`)
FAMILIES = ("tiny", "wavtokenizer-tiny", "mimi-tiny", "pockettts-mimi-tiny")
SYNTHETIC = ("mimi-tiny", "pockettts-mimi-tiny")
#: several frames, and one (WavTokenizer's one-frame depthwise conv is an SSM_CONV)
FRAMES = (4, 1)
#: portable graphs (what a device is handed): every conv lowering and operand order, every weight type, each other
#: option's ggml-op alternatives; fast graphs (the CPU's): kzlab's fused nodes and CPU-side joins (SET)
PORTABLE = (
    [{"conv": c, "conv_src1": s} for c in ("ktap", "ktap-acc", "im2col-f32", "im2col-f16") for s in ("data", "kernel")]
    + [{"wtype": w} for w in ("f32", "f16", "bf16", "q8_0")]
    + [{"conv": "ktap", "conv_src1": "data", "wtype": w} for w in ("bf16", "q8_0")]
    + [{"convt": "direct"}, {"convt": "direct", "wtype": "f16"}, {"convt": "shift"}, {"convt": "shift", "wtype": "f16"}]
    + [{"snake": "raw"}, {"mm_chunk": 16}]
    + [{"conv_tile": 64}, {"gelu": "tanh"}, {"istft": "graph"}, {"dwconv": "taps"}]
)
FAST = [{}, {"conv": "im2col-f32", "conv_tile": 64}]


def layout(t) -> str:
    """A tensor's layout as the supports_op conditions tell layouts apart: contiguous, channels-contiguous
    (ggml_is_contiguous_channels), packed rows contiguous past dim 2 or 1 (rows+c2, rows+c1), packed rows only
    (rows), or strided elements."""
    if g.ggml_is_contiguous(t):
        return "contiguous"
    if g.ggml_is_contiguous_channels(t):
        return "channels"
    if int(t.contents.nb[0]) == g.ggml_type_size(t.contents.type):
        return "rows+c2" if g.ggml_is_contiguous_2(t) else "rows+c1" if g.ggml_is_contiguous_1(t) else "rows"
    return "strided"


def type_name(ty: int) -> str:
    return g.ggml_type_name(ty).decode().upper()


#: facts a supports_op condition reads besides types and layouts, per op: SSM_CONV's channel count (CUDA), ROPE's
#: mode (ggml-hexagon refuses the modes with bit 0 set; Mimi builds NORMAL, 0, for PocketTTS and NEOX, 2, for kyutai)
FACTS = {
    # and its kernel size (ssm-conv.cu has kernels for 3, 4, 5, 9 and 15 taps)
    "SSM_CONV": lambda t: f"ne1%128={int(t.contents.src[0].contents.ne[1]) % 128 == 0} "
                          f"k={int(t.contents.src[1].contents.ne[0])}",
    "ROPE": lambda t: f"mode={int(t.contents.op_params[2])}",
    # ggml-cuda's kernels by the K and V head sizes (fattn.cu 375-422)
    "FLASH_ATTN_EXT": lambda t: f"dk={int(t.contents.src[1].contents.ne[0])} "
                                f"dv={int(t.contents.src[2].contents.ne[0])}",
}


def signature(t) -> tuple[str, str, str, str, str]:
    """(op, result type, sources as TYPE:layout, result layout, shape facts) of a node."""
    op = g.ggml_op_desc(t).decode()
    srcs = [t.contents.src[i] for i in range(g.GGML_MAX_SRC) if t.contents.src[i]]
    src_text = " ".join(f"{type_name(s.contents.type)}:{layout(s)}" for s in srcs)
    facts = FACTS[op](t) if op in FACTS else ""
    return op, type_name(t.contents.type), src_text, layout(t), facts


class _Env:
    """Weights in the profile's own buffer (as `simulate` puts them by default), everything else unallocated."""

    def __init__(self, kinds: dict[int, str]):
        self.kinds = kinds

    def buffer_kind(self, t) -> str | None:
        return self.kinds.get(addr(t))


@dataclass
class Table:
    """Per signature, the families that build it and each profile's answers ("accept" or the refusing rule)."""

    families: dict[tuple, set[str]] = field(default_factory=lambda: defaultdict(set))
    answers: dict[tuple, dict[str, set[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(set)))
    #: CONV_2D_DW nodes whose layout ggml-cuda's kernel would abort on
    dw_kernel: list[str] = field(default_factory=list)
    #: ops the CUDA profile accepts somewhere
    cuda_ops: set[str] = field(default_factory=set)
    #: nodes the CUDA profile accepts that fail an assert of CUDA_KERNELS (its kernel would abort or misread them)
    kernel_fails: list[str] = field(default_factory=list)
    #: (signature, assert's lines, the CUDA profile's refusing rule) of the nodes failing an assert of CUDA_KERNELS
    kernel_refused: set[tuple[tuple, str, str]] = field(default_factory=set)
    graphs: int = 0

    def text(self) -> str:
        """The table as text: one line per signature, one column per profile."""
        names = sorted({p for a in self.answers.values() for p in a})
        lines = ["op | type | sources | layout | facts | " + " | ".join(names)]
        for sig in sorted(self.answers):
            cells = ["/".join(sorted(self.answers[sig][n])) for n in names]
            lines.append(" | ".join([*sig, *cells]))
        return "\n".join(lines)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Table:
    profiles = [capabilities.load(n) for n in capabilities.names()]
    out = Table()
    folder = tmp_path_factory.mktemp("families")
    for family in FAMILIES:
        path = synth(folder / f"{family}.gguf", preset=family, dtype="f32") if family in SYNTHETIC else None
        model = load_model(path or resolve_model(family))
        absent = not_applicable(model.hparams)
        # as a session resolves them: a family without fused nodes gets ggml ops on the CPU too (convt=shift there)
        fused = arch_of(model.hparams).fused_nodes
        plans = [Lowering(**v).resolve(cpu_only=False, absent=absent, fused_nodes=fused) for v in PORTABLE]
        plans += [Lowering(**v).resolve(cpu_only=True, absent=absent, fused_nodes=fused) for v in FAST]
        for frames in FRAMES:
            for plan in plans:
                gr = build(model, plan, frames)
                out.graphs += 1
                try:
                    nodes = [gr.gf.contents.nodes[i] for i in range(gr.gf.contents.n_nodes)]
                    sigs = [signature(t) for t in nodes]
                    for sig in sigs:
                        out.families[sig].add(family)
                    for p in profiles:
                        env = _Env({addr(t): p.buffer.kind for t in gr.weights.tensors.values()})
                        for t, sig in zip(nodes, sigs, strict=True):
                            why = p.refusal(t, env)
                            out.answers[sig][p.name].add("accept" if why is None else why[0])
                            if p.name == "cuda":
                                kernel_check(out, t, sig, why, f"{family} {plan.label()} frames={frames}")
                    for t, sig in zip(nodes, sigs, strict=True):
                        if sig[0] == "CONV_2D_DW" and (why := cuda_conv2d_dw_kernel_layout(t)):
                            out.dw_kernel.append(f"{family} {plan.label()}: {why}")
                finally:
                    gr.free()
    return out


def kernel_check(out: Table, t, sig: tuple, why: tuple[str, str] | None, where: str) -> None:
    """Hold one node against its op's CUDA_KERNELS asserts: a failure the CUDA profile accepts is a kernel abort (or
    misread) its placement hides; a failure it refuses is recorded with the rule that refuses it."""
    op = sig[0]
    if why is None:
        out.cuda_ops.add(op)
    for a in CUDA_KERNELS.get(op, ()):
        if a.holds(t):
            continue
        if why is None:
            out.kernel_fails.append(f"{where}: {t.contents.name.decode()} {sig}: {a.where}: {a.what}")
        else:
            out.kernel_refused.add((sig, a.where, why[0]))


# ---- ggml-cuda's supports_op, read by hand ------------------------------------------------------------------
# (op, result type, sources, result layout, facts) -> (answer, ggml-cuda.cu eced84c8 lines). The answer is
# "accept" or the profile's rule that refuses, as the source's condition says for these operands.
C = "contiguous"
CUDA_SOURCE: dict[tuple[str, str, str, str, str], tuple[str, str]] = {
    # views and no-ops: true (5341-5345)
    ("NONE", "F32", "", C, ""): ("accept", "5341"),
    ("RESHAPE", "F32", f"F32:{C}", C, ""): ("accept", "5342"),
    ("RESHAPE", "F16", f"F16:{C}", C, ""): ("accept", "5342"),
    ("VIEW", "F32", f"F32:{C}", C, ""): ("accept", "5343"),
    ("VIEW", "F32", f"F32:{C}", "rows+c2", ""): ("accept", "5343"),
    ("VIEW", "F32", "F32:channels", C, ""): ("accept", "5343"),
    ("VIEW", "F16", f"F16:{C}", C, ""): ("accept", "5343"),
    ("VIEW", "BF16", f"BF16:{C}", C, ""): ("accept", "5343"),
    ("VIEW", "Q8_0", f"Q8_0:{C}", C, ""): ("accept", "5343"),
    ("VIEW", "I32", f"I32:{C}", C, ""): ("accept", "5343"),
    ("PERMUTE", "F32", f"F32:{C}", C, ""): ("accept", "5344"),
    ("PERMUTE", "F32", f"F32:{C}", "channels", ""): ("accept", "5344"),
    ("PERMUTE", "F32", f"F32:{C}", "rows+c2", ""): ("accept", "5344"),
    ("PERMUTE", "F32", f"F32:{C}", "strided", ""): ("accept", "5344"),
    ("TRANSPOSE", "F32", f"F32:{C}", C, ""): ("accept", "5345"),
    ("TRANSPOSE", "F32", f"F32:{C}", "strided", ""): ("accept", "5345"),
    # SCALE, SQR, SIN, COS, CLAMP: true whatever the layout (5348-5355)
    ("SCALE", "F32", f"F32:{C}", C, ""): ("accept", "5348"),
    ("CLAMP", "F32", f"F32:{C}", C, ""): ("accept", "5353"),
    # ... but SQR, SIN and COS run ggml_cuda_op_unary (unary.cu 213-215, 221-227), which asserts a contiguous src0
    # (unary.cu 144): the in-graph iSTFT's SIN and COS of the phase, a view of every row's second half, would abort
    ("SQR", "F32", f"F32:{C}", C, ""): ("accept", "5349; unary.cu 144"),
    ("SIN", "F32", f"F32:{C}", C, ""): ("accept", "5351; unary.cu 144"),
    ("SIN", "F32", "F32:rows+c2", C, ""): ("cuda_unary_kernel", "5351; unary.cu 221-223, 144"),
    ("COS", "F32", f"F32:{C}", C, ""): ("accept", "5352; unary.cu 144"),
    ("COS", "F32", "F32:rows+c2", C, ""): ("cuda_unary_kernel", "5352; unary.cu 225-227, 144"),
    # ADD, SUB, MUL, DIV: F32/F16 operands and result, no layout condition (5356-5362)
    ("ADD", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5356-5362"),
    ("ADD", "F32", f"F32:rows+c2 F32:{C}", C, ""): ("accept", "5356-5362"),
    ("MUL", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5358-5362"),
    ("DIV", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5359-5362"),
    # unary ops: ggml_is_contiguous(src0) (5077-5103)
    ("ELU", "F32", f"F32:{C}", C, ""): ("accept", "5095, 5103"),
    ("EXP", "F32", f"F32:{C}", C, ""): ("accept", "5092, 5103"),
    ("EXP", "F32", "F32:rows+c2", C, ""): ("contiguous_src0", "5092, 5103"),  # the in-graph iSTFT's exp of a view
    ("GELU", "F32", f"F32:{C}", C, ""): ("accept", "5083, 5103"),
    ("GELU_ERF", "F32", f"F32:{C}", C, ""): ("accept", "5089, 5103"),
    ("SILU", "F32", f"F32:{C}", C, ""): ("accept", "5084, 5103"),
    # MUL_MAT: an F16 src1 needs an F16 src0 (5140-5142); src0's type in the list (5156-5186)
    ("MUL_MAT", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5157"),
    ("MUL_MAT", "F32", "F32:rows+c2 F32:rows+c2", C, ""): ("accept", "5157"),
    ("MUL_MAT", "F32", f"F16:{C} F32:{C}", C, ""): ("accept", "5158"),
    ("MUL_MAT", "F32", f"F16:{C} F16:{C}", C, ""): ("accept", "5140, 5158"),
    ("MUL_MAT", "F32", f"BF16:{C} F32:{C}", C, ""): ("accept", "5182"),
    ("MUL_MAT", "F32", f"Q8_0:{C} F32:{C}", C, ""): ("accept", "5164"),
    # GET_ROWS: the table's type in the list (5192-5206)
    ("GET_ROWS", "F32", f"F32:{C} I32:{C}", C, ""): ("accept", "5194"),
    ("GET_ROWS", "F32", f"F16:{C} I32:{C}", C, ""): ("accept", "5193"),
    ("GET_ROWS", "F32", f"BF16:{C} I32:{C}", C, ""): ("accept", "5195"),
    ("GET_ROWS", "F32", f"Q8_0:{C} I32:{C}", C, ""): ("accept", "5202"),
    # SET: F32 or I32, one type (5220-5225)
    ("SET", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5220-5225"),
    # REPEAT: F32/F16 (5293-5298)
    ("REPEAT", "F32", f"F32:{C}", C, ""): ("accept", "5293-5298"),
    # CONCAT: one plain type of 4 bytes, no layout condition (5301-5313)
    ("CONCAT", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5301-5313"),
    ("CONCAT", "F32", f"F32:{C} F32:rows+c2", C, ""): ("accept", "5301-5313"),
    ("CONCAT", "F32", "F32:rows+c2 F32:rows+c2", C, ""): ("accept", "5301-5313"),
    # CONV_TRANSPOSE_1D: F32 kernel and input (5314-5322)
    ("CONV_TRANSPOSE_1D", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5318"),
    ("CONV_TRANSPOSE_1D", "F32", f"F16:{C} F32:{C}", C, ""): ("cuda_conv_transpose_1d", "5318, 5321"),
    # COL2IM_1D: contiguous F32 in and out (5323-5330)
    ("COL2IM_1D", "F32", f"F32:{C}", C, ""): ("accept", "5326-5329"),
    # NORM, RMS_NORM: contiguous rows (5334-5337)
    ("NORM", "F32", f"F32:{C}", C, ""): ("accept", "5334, 5337"),
    ("RMS_NORM", "F32", f"F32:{C}", C, ""): ("accept", "5335, 5337"),
    # SSM_CONV: src0's ne[1] a multiple of 128 (5374-5377): 64 channels in the tiny WavTokenizer, 768 at full size;
    # then its kernel aborts on WavTokenizer's 7 taps (ssm-conv.cu 150-157: kernels for 3, 4, 5, 9, 15 only)
    ("SSM_CONV", "F32", f"F32:{C} F32:{C}", C, "ne1%128=False k=7"): ("cuda_ssm_conv", "5376"),
    ("SSM_CONV", "F32", f"F32:{C} F32:{C}", C, "ne1%128=True k=7"): ("cuda_ssm_conv_kernel", "5376; ssm-conv.cu 156"),
    # CONT, SOFT_MAX: true (5378-5379, 5382-5383)
    ("CONT", "F32", f"F32:{C}", C, ""): ("accept", "5378-5379"),
    ("CONT", "F32", "F32:rows+c2", C, ""): ("accept", "5378-5379"),
    ("CONT", "F32", "F32:strided", C, ""): ("accept", "5378-5379"),
    ("SOFT_MAX", "F32", f"F32:{C}", C, ""): ("accept", "5382-5383"),
    ("SOFT_MAX", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5382-5383"),
    # FLASH_ATTN_EXT (the CPU's attn='flash' graphs: float32 keys and values, an F16 mask; 5440-5441): a kernel for
    # a K head of 64 with a V head of 64, F32 K and V of one type, a 2-D mask (fattn.cu 375-387, 425-450; the tile
    # kernel at the end, 537); the tiny files' heads of 16 have none (420-421)
    ("FLASH_ATTN_EXT", "F32", f"F32:rows+c2 F32:rows+c2 F32:rows+c2 F16:{C}", C, "dk=64 dv=64"): (
        "accept", "5440-5441; fattn.cu 375-387, 425-450, 537"),
    ("FLASH_ATTN_EXT", "F32", f"F32:rows+c2 F32:rows+c2 F32:rows+c2 F16:{C}", C, "dk=16 dv=16"): (
        "cuda_flash_attn_ext", "5440-5441; fattn.cu 420-421"),
    ("FLASH_ATTN_EXT", "F32", f"F32:{C} F32:{C} F32:{C} F16:{C}", C, "dk=16 dv=16"): (
        "cuda_flash_attn_ext", "5440-5441; fattn.cu 420-421"),
    # ROPE: packed elements, contiguous past dim 2, whatever the mode (5394-5397): NEOX (Qwen3-TTS, kyutai's Mimi)
    # and NORMAL (PocketTTS's interleaved pairs)
    ("ROPE", "F32", f"F32:{C} I32:{C}", C, "mode=0"): ("accept", "5396"),
    ("ROPE", "F32", f"F32:{C} I32:{C}", C, "mode=2"): ("accept", "5396"),
    # IM2COL, CONV_2D_DW: true (5398-5404; the depthwise kernel's own layout condition is checked apart)
    ("IM2COL", "F32", f"F16:{C} F32:{C}", C, ""): ("accept", "5398, 5404"),
    ("IM2COL", "F32", f"F16:{C} F32:rows+c2", C, ""): ("accept", "5398, 5404"),
    ("IM2COL", "F16", f"F16:{C} F32:{C}", C, ""): ("accept", "5398, 5404"),
    ("CONV_2D_DW", "F32", "F32:strided F32:channels", "channels", ""): ("accept", "5401, 5404"),
    # ACC: both operands contiguous (5405-5408)
    ("ACC", "F32", f"F32:{C} F32:{C}", C, ""): ("accept", "5408"),
    # GROUP_NORM: a contiguous src0 (5418-5421)
    ("GROUP_NORM", "F32", f"F32:{C}", C, ""): ("accept", "5420-5421"),
    # PAD: true (5422-5423)
    ("PAD", "F32", f"F32:{C}", C, ""): ("accept", "5422-5423"),
    # kzlab's fused CPU nodes: not in the switch (default, 5453-5454)
    ("CUSTOM", "F32", " ".join([f"F32:{C}"] * 2), C, ""): ("not-listed", "5453-5454"),
    ("CUSTOM", "F32", " ".join([f"F32:{C}"] * 3), C, ""): ("not-listed", "5453-5454"),
    ("CUSTOM", "F32", " ".join([f"F32:{C}"] * 4), C, ""): ("not-listed", "5453-5454"),
    ("CUSTOM", "F32", " ".join([f"F32:{C}"] * 5), C, ""): ("not-listed", "5453-5454"),
    ("CUSTOM", "F32", " ".join([f"F32:{C}"] * 9), C, ""): ("not-listed", "5453-5454"),
}


# ---- ggml-cuda's kernels, read by hand: what they assert past supports_op --------------------------------------
# ggml_cuda_compute_forward (ggml-cuda.cu eced84c8 lines 2791-3132) hands each node to its op's kernel; the files
# and lines below are src/ggml-cuda/ at eced84c8. For every op the CUDA profile accepts in the families' graphs, the
# kernel's asserts that supports_op does not check, each as a test of a node. `aborts` False marks a precondition
# the kernel does not assert but reads its operands as if it held (a flat read of a strided source: wrong values,
# no abort). Conditions supports_op already checks are left out (their lines are CUDA_SOURCE's). Every node the
# profile accepts must meet its op's list (test_cuda_accepts_only_what_its_kernels_run).
UINT32_MAX = 2**32 - 1
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class KernelAssert:
    """One precondition of a ggml-cuda kernel: its file and lines, what it asks, and whether a node meets it."""

    where: str
    what: str
    holds: Callable[[Any], bool]
    aborts: bool = True


def _src(t, i: int):
    p = t.contents.src[i]
    return p if p else None


def _ty(t) -> str:
    return type_name(t.contents.type)


def _packed(t) -> bool:
    """Elements packed: nb[0] is the type's size (what a kernel indexing elements by one stride assumes)."""
    return int(t.contents.nb[0]) == g.ggml_type_size(t.contents.type)


def _fits_u32(*ts) -> bool:
    """Every dimension and every stride in elements fits in 32 bits (binbcast.cu's fastdiv indices)."""
    for t in ts:
        size = g.ggml_type_size(t.contents.type)
        if any(int(t.contents.ne[i]) > UINT32_MAX or int(t.contents.nb[i]) // size > UINT32_MAX for i in range(4)):
            return False
    return True


def _unary(entry: str, contiguity: bool) -> tuple[KernelAssert, ...]:
    """ggml_cuda_op_unary's asserts (unary.cu 137-155), reached from the op's entry point (`entry`); `contiguity`: the
    contiguous src0 of line 144 is not supports_op's (SQR, SQRT, SIN, COS, LOG; the UNARY ops check it, line 5103)."""
    types = KernelAssert(f"unary.cu {entry}, 146-148", "F32 or F16, the result of src0's type",
                         lambda t: _ty(_src(t, 0)) in ("F32", "F16") and _ty(t) == _ty(_src(t, 0)))
    count = KernelAssert("unary.cu 117-135", "at most INT_MAX elements (the kernel's element count is an int)",
                         lambda t: g.ggml_nelements(t) <= INT_MAX, aborts=False)
    if not contiguity:
        return types, count
    contiguous = KernelAssert(f"unary.cu {entry}, 144", "src0 contiguous", lambda t: g.ggml_is_contiguous(_src(t, 0)))
    return contiguous, types, count


#: binbcast.cu ggml_cuda_op_bin_bcast (411-431): the (src0, src1, dst) types each branch reads right. Any other triple
#: supports_op accepts (5356-5362) aborts (426-429), or is read wrong: an F16 src1 with an F32 dst is read as F32
#: (418-419, 424-425).
BINARY_TYPES = {("F32", "F32", "F32"), ("F16", "F16", "F16"), ("F16", "F32", "F16"), ("F16", "F32", "F32")}


def _binary(a, b, d) -> tuple[KernelAssert, ...]:
    """ggml_cuda_op_bin_bcast and launch_bin_bcast_pack (binbcast.cu 167-356, 411-431) for the operands `a`, `b` and
    result `d` that the op's entry point passes (ADD, SUB, MUL, DIV: src0, src1, dst, lines 437-451; REPEAT: dst,
    src0, dst, lines 433-435)."""
    return (
        KernelAssert("binbcast.cu 416-429", "src0, src1, dst types one of the branches (else abort, line 429)",
                     lambda t: (_ty(a(t)), _ty(b(t)), _ty(d(t))) in BINARY_TYPES),
        KernelAssert("binbcast.cu 258-281, 298", "dimensions and strides in elements within 32 bits",
                     lambda t: _fits_u32(a(t), b(t), d(t))
                     and int(d(t).contents.ne[2]) * int(d(t).contents.ne[3]) <= UINT32_MAX),
        KernelAssert("binbcast.cu 283-296", "every stride a multiple of its element size",
                     lambda t: all(int(x.contents.nb[i]) % g.ggml_type_size(x.contents.type) == 0
                                   for x in (a(t), b(t), d(t)) for i in range(4))),
    )


def _dst(t):
    return t


def _s0(t):
    return _src(t, 0)


def _s1(t):
    return _src(t, 1)


def _f32(*parts: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """All of these operands (functions of the node) F32."""
    return lambda t: all(_ty(p(t)) == "F32" for p in parts)


NO_KERNEL = ()  # VIEW, RESHAPE, PERMUTE, TRANSPOSE (and NONE, never a node): no kernel (ggml-cuda.cu 3010-3015)
CUDA_KERNELS: dict[str, tuple[KernelAssert, ...]] = {
    **dict.fromkeys(("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"), NO_KERNEL),
    # ggml_cuda_op_unary: SQR, SIN, COS (supports_op asks nothing, 5349-5352) and the UNARY ops (contiguous, 5103)
    "SQR": _unary("213-215", contiguity=True),
    "SIN": _unary("221-223", contiguity=True),
    "COS": _unary("225-227", contiguity=True),
    "EXP": _unary("209-211", contiguity=False),
    "ELU": _unary("233-235", contiguity=False),
    "GELU": _unary("173-175", contiguity=False),
    "GELU_ERF": _unary("177-179", contiguity=False),
    "SILU": _unary("185-187", contiguity=False),
    # scale.cu ggml_cuda_op_scale (22-37): F32 only; src0 read as one flat run of ggml_nelements values (11-13, 36)
    "SCALE": (
        KernelAssert("scale.cu 28-29", "F32 src0 and result", _f32(_s0, _dst)),
        KernelAssert("scale.cu 11-13, 36", "src0 contiguous (read flat)", lambda t: g.ggml_is_contiguous(_s0(t)),
                     aborts=False),
    ),
    # clamp.cu ggml_cuda_op_clamp (25-45): F32 or F16 of one type; src0 read flat, an int count (8-22, 41-43)
    "CLAMP": (
        KernelAssert("clamp.cu 31-33", "F32 or F16, the result of src0's type",
                     lambda t: _ty(_s0(t)) in ("F32", "F16") and _ty(t) == _ty(_s0(t))),
        KernelAssert("clamp.cu 8-22, 41-43", "src0 contiguous, at most INT_MAX elements (read flat by an int index)",
                     lambda t: g.ggml_is_contiguous(_s0(t)) and g.ggml_nelements(t) <= INT_MAX, aborts=False),
    ),
    # binbcast.cu: ADD, SUB, MUL, DIV (437-451) and REPEAT (433-435, dst as src0 and src0 as src1)
    **dict.fromkeys(("ADD", "SUB", "MUL", "DIV"), _binary(_s0, _s1, _dst)),
    "REPEAT": _binary(_dst, _s0, _dst),
    # concat.cu ggml_cuda_op_concat (197-227): its asserts (205-208, 224) are supports_op's (5301-5313)
    "CONCAT": (),
    # cpy.cu ggml_cuda_dup -> ggml_cuda_cpy (569-572, 389-567): one type between contiguous tensors is a memcpy
    # (424-433); otherwise the pair needs a kernel (434-562; for CONT's one type: F32, F16, BF16, I32), else abort
    # (564); supports_op takes every CONT (5378)
    "CONT": (
        KernelAssert("cpy.cu 424-433, 564", "a contiguous source, or a type with a strided copy kernel",
                     lambda t: (g.ggml_is_contiguous(_s0(t)) and g.ggml_is_contiguous(t))
                     or _ty(_s0(t)) in ("F32", "F16", "BF16", "I32")),
        KernelAssert("cpy.cu 212-213", "at most INT_MAX blocks of CUDA_CPY_BLOCK_SIZE (64, cpy.cuh 3)",
                     lambda t: (g.ggml_nelements(t) + 63) // 64 <= INT_MAX),
    ),
    # norm.cu: F32, eps >= 0 (the rows' packing is supports_op's contiguous rows, 5334-5337)
    "NORM": (KernelAssert("norm.cu 441-442", "F32 src0 and result", _f32(_s0, _dst)),),
    "RMS_NORM": (KernelAssert("norm.cu 484-485", "F32 src0 and result", _f32(_s0, _dst)),),
    "GROUP_NORM": (
        KernelAssert("norm.cu 465-466", "F32 src0 and result", _f32(_s0, _dst)),
        KernelAssert("norm.cu 42-46, 294, 475", "at most INT_MAX elements (int indices)",
                     lambda t: g.ggml_nelements(t) <= INT_MAX, aborts=False),
    ),
    # softmax.cu ggml_cuda_op_soft_max (375-444): F32, an F16 or F32 mask; rows read at ncols apart (72, 74)
    "SOFT_MAX": (
        KernelAssert("softmax.cu 387-388", "F32 src0 and result", _f32(_s0, _dst)),
        KernelAssert("softmax.cu 390", "mask F16 or F32", lambda t: _s1(t) is None or _ty(_s1(t)) in ("F16", "F32")),
        KernelAssert("softmax.cu 66-74", "src0 contiguous (row i read at i * ncols)",
                     lambda t: g.ggml_is_contiguous(_s0(t)), aborts=False),
    ),
    # getrows.cu ggml_cuda_op_get_rows (260-277): I32 indices, no 4th index dimension, packed elements; the result's
    # type one of the switch (233-256)
    "GET_ROWS": (
        KernelAssert("getrows.cu 268", "I32 indices", lambda t: _ty(_s1(t)) == "I32"),
        KernelAssert("getrows.cu 269", "indices ne[3] == 1", lambda t: int(_s1(t).contents.ne[3]) == 1),
        KernelAssert("getrows.cu 271-273", "packed elements in table, indices and result",
                     lambda t: _packed(_s0(t)) and _packed(_s1(t)) and _packed(t)),
        KernelAssert("getrows.cu 233-256", "result F32, I32, F16 or BF16",
                     lambda t: _ty(t) in ("F32", "I32", "F16", "BF16")),
    ),
    # rope.cu ggml_cuda_op_rope_impl (507-660): F32 or F16 of one type, an even head size
    "ROPE": (
        KernelAssert("rope.cu 531-535", "F32 or F16 src0, the result of its type",
                     lambda t: _ty(_s0(t)) in ("F32", "F16") and _ty(t) == _ty(_s0(t))),
        KernelAssert("rope.cu 358, 400, 443, 486", "ne[0] even", lambda t: int(_s0(t).contents.ne[0]) % 2 == 0),
    ),
    # pad.cu ggml_cuda_op_pad (76-106): F32 only (supports_op: true, 5422-5423); strided sources are read right
    "PAD": (KernelAssert("pad.cu 84-85", "F32 src0 and result", _f32(_s0, _dst)),),
    # im2col.cu ggml_cuda_op_im2col (78-116): F32 input, F16/F32 result; the input's elements read packed (37)
    "IM2COL": (
        KernelAssert("im2col.cu 85-86", "F32 input, F16 or F32 result",
                     lambda t: _ty(_s1(t)) == "F32" and _ty(t) in ("F16", "F32")),
        KernelAssert("im2col.cu 37, 107-109", "input elements packed (and its rows, for a 2-D im2col)",
                     lambda t: _packed(_s1(t)) and (int(t.contents.op_params[6]) != 1
                                                    or int(_s1(t).contents.nb[1]) == int(_s1(t).contents.ne[0]) * 4),
                     aborts=False),
    ),
    # acc.cu ggml_cuda_op_acc (37-61): F32 operands, a packed, contiguously allocated result
    "ACC": (
        KernelAssert("acc.cu 47-49", "F32 operands and result", _f32(_s0, _s1, _dst)),
        KernelAssert("acc.cu 52-53", "result packed and contiguously allocated",
                     lambda t: _packed(t) and g.ggml_is_contiguously_allocated(t)),
    ),
    # set.cu ggml_cuda_op_set (4-39): all three contiguous (supports_op checks the types only, 5220-5225)
    "SET": (KernelAssert("set.cu 12-14", "result, src0 and src1 contiguous",
                         lambda t: all(g.ggml_is_contiguous(x) for x in (t, _s0(t), _s1(t)))),),
    # col2im-1d.cu ggml_cuda_op_col2im_1d (41-81): its asserts (45, 79) are supports_op's (5323-5330)
    "COL2IM_1D": (),
    # conv-transpose-1d.cu ggml_cuda_op_conv_transpose_1d (57-86): F32 result, both operands contiguous
    "CONV_TRANSPOSE_1D": (
        KernelAssert("conv-transpose-1d.cu 68", "F32 result", _f32(_dst)),
        KernelAssert("conv-transpose-1d.cu 70-71", "kernel and input contiguous",
                     lambda t: g.ggml_is_contiguous(_s0(t)) and g.ggml_is_contiguous(_s1(t))),
    ),
    # ssm-conv.cu ggml_cuda_op_ssm_conv (160-206; 132 is supports_op's 128 channels, 5376)
    "SSM_CONV": (
        KernelAssert("ssm-conv.cu 150-157", "kernel size 3, 4, 5, 9 or 15",
                     lambda t: int(_s1(t).contents.ne[0]) in (3, 4, 5, 9, 15)),
        KernelAssert("ssm-conv.cu 181-183", "packed elements, src0's rows contiguous",
                     lambda t: _packed(_s0(t)) and _packed(_s1(t))
                     and int(_s0(t).contents.nb[1]) == int(_s0(t).contents.ne[0]) * 4),
        KernelAssert("ssm-conv.cu 191-192", "F32 src0 and result", _f32(_s0, _dst)),
    ),
    # conv2d-dw.cu ggml_cuda_op_conv2d_dw (119-161): rules.cuda_conv2d_dw_kernel_layout
    "CONV_2D_DW": (KernelAssert("conv2d-dw.cu 123, 150-159", "F32; a contiguous or channels-contiguous input",
                                lambda t: cuda_conv2d_dw_kernel_layout(t) is None),),
    # ggml_cuda_mul_mat (ggml-cuda.cu 2541-2631) picks a path by the GPU's compute capability; each asserts packed
    # elements (mmvf.cu 644-647, mmf.cu 27-30, ggml-cuda.cu 2214) and the batched cuBLAS one a contiguous result
    # (2201); a batched non-F32 src1 that cannot take that path (a transposed operand) aborts (1835, 2618-2621)
    "MUL_MAT": (
        KernelAssert("mmvf.cu 644-647, mmf.cu 27-30, ggml-cuda.cu 2214", "packed elements in src0, src1, result",
                     lambda t: _packed(_s0(t)) and _packed(_s1(t)) and _packed(t)),
        KernelAssert("ggml-cuda.cu 2201, 2088, 2094", "result contiguous", lambda t: g.ggml_is_contiguous(t)),
        KernelAssert("ggml-cuda.cu 1835, 2618-2621", "a batched non-F32 src1 with neither operand transposed",
                     lambda t: _ty(_s1(t)) == "F32"
                     or int(_s1(t).contents.ne[2]) * int(_s1(t).contents.ne[3]) == 1
                     or not (g.ggml_is_transposed(_s0(t)) or g.ggml_is_transposed(_s1(t)))),
    ),
    # launch_fattn (fattn-common.cuh 970-1270), every kernel's launcher: F32 Q and result, packed elements, F16 mask
    "FLASH_ATTN_EXT": (
        KernelAssert("fattn-common.cuh 987-988", "F32 Q and result", _f32(_s0, _dst)),
        KernelAssert("fattn-common.cuh 990-992", "Q, K, V elements packed",
                     lambda t: all(_packed(_src(t, i)) for i in range(3))),
        KernelAssert("fattn-common.cuh 994", "mask F16", lambda t: _src(t, 3) is None or _ty(_src(t, 3)) == "F16"),
    ),
}
#: ops read with a kernel of the table that the families do not build on CUDA: SUB (binbcast.cu with ADD, MUL,
#: DIV); SSM_CONV (a one-frame WavTokenizer of 128 channels or more, tests/test_cuda_profile.py)
KERNELS_NOT_BUILT = {"SUB", "SSM_CONV"}

# ---- ggml-hexagon's supports_op, read by hand, for the ops the Mimi graphs bring ----------------------------------
# ggml-org/ggml src/ggml-hexagon/ggml-hexagon.cpp at each commit a Hexagon profile names: its switch case, then the
# ggml_hexagon_supported_* function it calls. The answers do not change between these commits; the conditions do
# (v0.21.0 adds the permuted-operand refusals to the binary and unary checks, takes GELU from the activations check
# to the unary one, and lets ROPE read strided rows), none of which these operands meet.
HEX_PROFILES = ("hexagon-v0.15.2", "hexagon-v0.15.3", "hexagon-v0.21.0", "hexagon-78c531d")
#: signature -> (answer in every Hexagon profile, lines at 707321c4 (v0.15.2), eced84c8 (v0.15.3), 8599e0ea (v0.21.0),
#: 78c531d4 (PR #1601's head))
HEXAGON_SOURCE: dict[tuple[str, str, str, str, str], tuple[str, tuple[str, str, str, str]]] = {
    # SEANet's activation: the UNARY switch's default, in every release
    ("ELU", "F32", f"F32:{C}", C, ""): ("not-listed", ("3750-3751", "3830-3831", "4138-4139", "4144-4145")),
    # kyutai's exact GELU: the same default
    ("GELU_ERF", "F32", f"F32:{C}", C, ""): ("not-listed", ("3750-3751", "3830-3831", "4138-4139", "4144-4145")),
    # PocketTTS's GELU (tanh form): F32 and contiguous (activations), F32 and src0 unpermuted (unary) from v0.21.0
    ("GELU", "F32", f"F32:{C}", C, ""): (
        "accept", ("3746-3748, 2865-2895", "3826-3828, 2820-2850", "4134-4136, 2963-2988", "4140-4142, 2969-2994")),
    # LayerNorm: F32, one shape, contiguous dst (unary)
    ("NORM", "F32", f"F32:{C}", C, ""): (
        "accept", ("3716-3720, 2824-2844", "3796-3800, 2779-2799", "4105-4110, 2963-2988", "4111-4116, 2969-2994")),
    # ROPE: `mode & 1` refused, NORMAL (0) and NEOX (2) pass it; F32 rows, I32 positions, no freq factors
    ("ROPE", "F32", f"F32:{C} I32:{C}", C, "mode=0"): (
        "accept", ("3767-3768, 3030, 3022-3070", "3847-3848, 2985, 2977-3025", "4155-4156, 3197, 3180-3246",
                   "4161-4162, 3203, 3186-3252")),
    ("ROPE", "F32", f"F32:{C} I32:{C}", C, "mode=2"): (
        "accept", ("3767-3768, 3030, 3022-3070", "3847-3848, 2985, 2977-3025", "4155-4156, 3197, 3180-3246",
                   "4161-4162, 3203, 3186-3252")),
    # attention: an F32 mask as wide as the scores, all contiguous, rows of at most 32 or a multiple of 32 (the
    # tiny graphs' 1 to 64 keys)
    ("SOFT_MAX", "F32", f"F32:{C} F32:{C}", C, ""): (
        "accept", ("3732-3733, 2897-2960", "3812-3813, 2852-2915", "4122-4123, 3047-3112", "4128-4129, 3053-3118")),
    # the layer scales and biases broadcast: F32, dst a whole repeat, neither transposed
    ("REPEAT", "F32", f"F32:{C}", C, ""): (
        "accept", ("3791-3792, 3620-3641", "3871-3872, 3700-3721", "4179-4180, 4008-4029", "4185-4186, 4014-4035")),
    # the codebooks (F32 tables, I32 codes)
    ("GET_ROWS", "F32", f"F32:{C} I32:{C}", C, ""): (
        "accept", ("3779-3780, 2982-3000", "3859-3860, 2937-2955", "4167-4168, 3136-3156", "4173-4174, 3142-3162")),
    # the causal convs' left padding: F32
    ("PAD", "F32", f"F32:{C}", C, ""): (
        "accept", ("3831-3832, 3111-3121", "3911-3912, 3066-3076", "4223-4224, 3318-3329", "4229-4230, 3324-3335")),
    # the residuals and biases, a transposed conv's trimmed output (a strided slice) plus its bias, and the layer
    # scales' products: F32, src1 repeatable into src0, nothing permuted (binary)
    ("ADD", "F32", f"F32:{C} F32:{C}", C, ""): (
        "accept", ("3697-3701, 2763-2796", "3777-3781, 2718-2751", "4086-4090, 2895-2933", "4092-4096, 2901-2939")),
    ("ADD", "F32", f"F32:rows+c2 F32:{C}", C, ""): (
        "accept", ("3697-3701, 2763-2796", "3777-3781, 2718-2751", "4086-4090, 2895-2933", "4092-4096, 2901-2939")),
    # the CPU's flash attention (attn='flash'): float32 keys and values, where every release takes F16 only
    **{("FLASH_ATTN_EXT", "F32", f"F32:rows+c2 F32:rows+c2 F32:rows+c2 F16:{C}", C, f"dk={d} dv={d}"): (
        "hex_flash_attn_ext", ("3771-3772, 2576-2578", "3851-3852, 1892-1894", "4159-4160, 2102-2104",
                               "4165-4166, 2102-2104")) for d in (64, 16)},
    ("MUL", "F32", f"F32:{C} F32:{C}", C, ""): (
        "accept", ("3697-3701, 2763-2796", "3777-3781, 2718-2751", "4086-4090, 2895-2933", "4092-4096, 2901-2939")),
}


def test_every_profile_answers_every_op(table):
    """Each profile answers each signature the families build: accepted, or refused by a rule it names."""
    assert table.graphs == len(FAMILIES) * len(FRAMES) * (len(PORTABLE) + len(FAST))
    ops = {sig[0] for sig in table.answers}
    # the ops the families' lowerings reach (a family or lowering that stops building one is a change to look at)
    for op in (
        "ELU",
        "NORM",
        "SOFT_MAX",
        "REPEAT",
        "GET_ROWS",
        "PAD",
        "MUL_MAT",
        "IM2COL",
        "COL2IM_1D",
        "ACC",
        "CONCAT",
        "GROUP_NORM",
        "CONV_2D_DW",
        "SSM_CONV",
        "CONV_TRANSPOSE_1D",
        "ROPE",
        "SET",
        "CUSTOM",
        "GELU_ERF",
        "SIN",
    ):
        assert op in ops, op
    names = set(capabilities.names())
    known = set(RULES) | {"accept", "not-listed"}
    for sig, per in table.answers.items():
        assert set(per) == names, sig
        for name, answers in per.items():
            assert answers and answers <= known, (name, sig, answers)


def test_cuda_answers_are_the_sources(table):
    """The CUDA profile's answer for every signature is the one read off ggml-cuda's supports_op (CUDA_SOURCE)."""
    missing = [sig for sig in table.answers if sig not in CUDA_SOURCE]
    assert not missing, "signatures the families build that CUDA_SOURCE lacks (read ggml-cuda.cu for them):\n" + (
        "\n".join(map(str, missing))
    )
    wrong = {
        sig: (table.answers[sig]["cuda"], CUDA_SOURCE[sig])
        for sig in table.answers
        if table.answers[sig]["cuda"] != {CUDA_SOURCE[sig][0]}
    }
    assert not wrong, wrong


def test_cuda_table_has_no_stale_rows(table):
    """Every row of CUDA_SOURCE is a signature the families still build (but NONE, kept as the switch's first
    case, and the one-frame SSM_CONV of a full-size WavTokenizer, which tests/test_cuda_profile.py builds)."""
    kept = {("NONE", "F32", "", C, ""), ("SSM_CONV", "F32", f"F32:{C} F32:{C}", C, "ne1%128=True k=7")}
    stale = [sig for sig in CUDA_SOURCE if sig not in table.answers and sig not in kept]
    assert not stale, stale


def test_cuda_kernels_read_for_every_op(table):
    """Every op the CUDA profile accepts in the families' graphs has its kernel's asserts in CUDA_KERNELS (an op the
    families start to hand the GPU fails here until someone reads its kernel), and every op of CUDA_KERNELS is one
    they hand it, but those read with another (KERNELS_NOT_BUILT)."""
    unread = sorted(table.cuda_ops - set(CUDA_KERNELS))
    assert not unread, f"ops the CUDA profile accepts whose kernels CUDA_KERNELS lacks: {unread}"
    assert set(CUDA_KERNELS) - table.cuda_ops == KERNELS_NOT_BUILT


def test_cuda_accepts_only_what_its_kernels_run(table):
    """No node the CUDA profile accepts fails an assert of its kernel: the scheduler would place it on the GPU and
    the kernel would abort (or, where `aborts` is False, read it wrong)."""
    assert not table.kernel_fails, "\n".join(table.kernel_fails)


def test_strided_sin_cos_fail_the_unary_kernel(table):
    """The in-graph iSTFT's SIN and COS of the phase (a strided view) fail ggml_cuda_op_unary's contiguity assert
    (unary.cu 144), which supports_op does not ask (ggml-cuda.cu 5351-5352): the profile refuses them by the kernel's
    rule, as it refuses the EXP of the magnitude (also a view) by supports_op's (5103)."""
    strided = "F32:rows+c2"
    for op, entry in (("SIN", "221-223"), ("COS", "225-227")):
        sig = (op, "F32", strided, C, "")
        assert (sig, f"unary.cu {entry}, 144", "cuda_unary_kernel") in table.kernel_refused
        assert table.answers[sig]["cuda"] == {"cuda_unary_kernel"}
    assert table.answers[("EXP", "F32", strided, C, "")]["cuda"] == {"contiguous_src0"}


def test_hexagon_answers_are_the_sources(table):
    """Every Hexagon profile answers each signature of HEXAGON_SOURCE as ggml-hexagon's supports_op does at its
    commit, each of those signatures is one the Mimi graphs build, and every signature of those ops the Mimi graphs
    build is in the table (a new one fails until someone reads ggml-hexagon.cpp for it)."""
    assert set(HEX_PROFILES) == {n for n in capabilities.names() if n.startswith("hexagon-")}
    mimi = {sig for sig, fams in table.families.items() if fams & set(SYNTHETIC)}
    ops = {sig[0] for sig in HEXAGON_SOURCE}
    missing = [sig for sig in mimi if sig[0] in ops and sig not in HEXAGON_SOURCE]
    assert not missing, "Mimi signatures HEXAGON_SOURCE lacks (read ggml-hexagon.cpp for them):\n" + (
        "\n".join(map(str, missing))
    )
    assert not [sig for sig in HEXAGON_SOURCE if sig not in mimi]
    wrong = {
        (sig, name): (table.answers[sig][name], answer, lines[i])
        for sig, (answer, lines) in HEXAGON_SOURCE.items()
        for i, name in enumerate(HEX_PROFILES)
        if table.answers[sig][name] != {answer}
    }
    assert not wrong, wrong


def test_mimi_builds_both_rope_modes_and_shifted_sums(table):
    """kyutai's decoder rotates NEOX halves, PocketTTS's NORMAL pairs (the signatures the Hexagon and CUDA tables
    must tell apart), and convt=shift adds each slice's product in place (ACC of two contiguous tensors)."""
    assert table.families[("ROPE", "F32", f"F32:{C} I32:{C}", C, "mode=2")] >= {"mimi-tiny"}
    assert "pockettts-mimi-tiny" in table.families[("ROPE", "F32", f"F32:{C} I32:{C}", C, "mode=0")]
    assert set(SYNTHETIC) <= table.families[("ACC", "F32", f"F32:{C} F32:{C}", C, "")]
    assert set(SYNTHETIC) <= table.families[("ELU", "F32", f"F32:{C}", C, "")]


def test_cuda_depthwise_kernel_runs(table):
    """ggml-cuda accepts every CONV_2D_DW (line 5401) but its kernel aborts on an input neither contiguous nor
    channels-contiguous (conv2d-dw.cu eced84c8 line 159): kzlab's depthwise convs never reach that abort."""
    assert any(sig[0] == "CONV_2D_DW" for sig in table.answers)
    assert not table.dw_kernel, table.dw_kernel


def test_table_text(table):
    """The table reads as one line per signature with every profile's answer."""
    text = table.text()
    lines = text.splitlines()
    assert len(lines) == len(table.answers) + 1
    assert "cuda" in lines[0] and "hexagon-v0.15.2" in lines[0]
    acc = next(line for line in lines if line.startswith("ACC |"))
    assert "accept" in acc and "not-listed" in acc  # CUDA takes ktap-acc's sums, ggml-hexagon does not
