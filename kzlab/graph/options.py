"""Lowering options: the ways one decoder computation can be written as a ggml graph, and their resolution.

Each option changes which ggml ops run (and so what a device backend is asked to accept), never the result
beyond rounding. The names are the same in the API, the CLI (`--conv`, `--conv-src1`, ...) and the widgets.

Two modes name the two kinds of graph kzlab builds:
- `portable`: ggml ops only, what a device port runs and what the placement simulator places;
- `fast`: kzlab's fused CPU nodes (numpy kernels in `ggml_custom_4d` nodes) where they apply, which only the
  CPU and BLAS backends can run.

A `Lowering` is a request and may say `auto`; `Lowering.resolve` makes every choice once, for a known set of
backends, and returns a `LoweringPlan` with no `auto` left in it. Only a plan reaches the graph builders, and
results record the plan next to the request, so a label always says what ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from kzlab.errors import InvalidOptionError

CONV_CHOICES = ("auto", "ktap", "ktap-acc", "im2col-f32", "im2col-f16")
CONV_SRC1_CHOICES = ("auto", "data", "kernel")
#: what `conv` and `conv_src1` = auto become: on the CPU and BLAS backends (measured fastest there, see HELP), and
#: where a device backend takes part (the form a device port runs: src1 rows = c_out, which ggml-hexagon up to
#: v0.15.2 takes up to 1024 of)
CONV_AUTO_CPU = {"conv": "ktap-acc", "conv_src1": "data"}
CONV_AUTO_DEVICE = {"conv": "im2col-f32", "conv_src1": "kernel"}
#: every choice `auto` makes by backend: the convs' (above) and the attention's (`attn`: one FLASH_ATTN_EXT node on
#: the CPU and BLAS; where a device takes part, the two products around SOFT_MAX a device port writes)
AUTO_CPU = {**CONV_AUTO_CPU, "attn": "flash"}
AUTO_DEVICE = {**CONV_AUTO_DEVICE, "attn": "mulmat"}
#: the conv lowerings of K shifted products
KTAP = ("ktap", "ktap-acc")
#: weight types that quantize: with the kernel as src1 a conv's weights stay F32 (src1 is never quantized)
QUANTIZED_WTYPES = ("q8_0",)
CONVT_CHOICES = ("auto", "col2im", "shift", "direct", "fused")
SNAKE_CHOICES = ("auto", "fused", "folded", "raw")
RESUNIT_CHOICES = ("auto", "fused", "ops")
WTYPE_CHOICES = ("native", "f32", "f16", "bf16", "q8_0")
MODE_CHOICES = ("auto", "portable", "fast")
GELU_CHOICES = ("erf", "tanh")
ISTFT_CHOICES = ("host", "graph")
DWCONV_CHOICES = ("direct", "taps")
DWMLP_CHOICES = ("auto", "fused", "ops")
UNITCONV_CHOICES = ("auto", "direct", "winograd")
NORMCONV_CHOICES = ("auto", "fused", "ops")
ATTN_CHOICES = ("auto", "flash", "mulmat")
#: what a plan's mode can be
MODES = ("portable", "fast")
#: options with a fused (kzlab CPU node) choice, and the ggml-op choice `portable` resolves `auto` to
FUSABLE = {"snake": "folded", "resunit": "ops", "convt": "col2im", "dwmlp": "ops", "normconv": "ops"}

HELP = {
    "mode": "portable = ggml ops only (what a device port runs and the Hexagon simulator places); fast = kzlab's "
    "fused CPU nodes where they apply (CPU and BLAS backends only); auto = fast where every backend is the CPU or "
    "BLAS, else portable. Results record the resolved mode",
    "conv": "conv1d lowering: ktap = K shifted mul_mats over a padded copy of the input (PAD), summed by ADD, no "
    "im2col; ktap-acc = the same products over the frames each tap reads, each added in place into the frames it "
    "reaches (ACC: no padded copy; a conv whose output is over 1 GiB sums on a padded copy, as its layer record "
    "says, ACC's offsets being 32-bit); im2col-f32 = im2col F32 + mul_mat; im2col-f16 = ggml_conv_1d's im2col F16 "
    "+ mul_mat; auto = ktap-acc where every backend is the CPU or BLAS (the portable graph's fastest there: the "
    "first family's 31-frame decode 1.15 s, against 1.27 s with ktap and 1.95 s with im2col-f32, src1=kernel), "
    "im2col-f32 where a device backend takes part (and in `Lowering.portable()`, the graph the placement "
    "simulator places)",
    "conv_src1": "which operand is src1 of the conv MUL_MAT: data = mul_mat(kernel, columns), src1 rows = T; "
    "kernel = ggml_conv_1d's order mul_mat(columns, kernel), src1 rows = c_out (with im2col-f32, a conv with "
    "one output channel is then mul_mat(input, taps) and K shifted adds, no im2col); auto = data where every "
    "backend is the CPU or BLAS, kernel where a device backend takes part (ggml-hexagon up to v0.15.2 refuses a "
    "MUL_MAT with more than 1024 src1 rows) or wtype quantizes (with the data as src1 the conv weights would be "
    "quantized too and ggml-cpu's product then quantizes the activations as well: the WavTokenizer tiny file's "
    "Q8_0 waveform 25 -> 23 dB from PyTorch)",
    "convt": "conv-transpose lowering: col2im = mul_mat + ggml_col2im_1d; shift = one mul_mat per slice of stride "
    "taps (K / stride of them), each over the input frames it reads, added in place (ACC) shifted by its frames "
    "(channels-last in and out, no padded copy; a kernel that is a multiple of the stride, col2im otherwise); "
    "direct = ggml_conv_transpose_1d; "
    "fused = in the BigVGAN blocks, the SnakeBeta before it and the transposed conv as one kzlab CPU node (numpy "
    "BLAS products on tiles and the overlap-add in cache; ggml's threads split the frames, or the output channels "
    "of a weight above 32 MB; CPU and BLAS backends only), col2im elsewhere; auto = fused where every backend is "
    "the CPU or BLAS and mm_chunk, snake and wtype are left at their defaults, else col2im (shift for a family "
    "without fused nodes on the CPU and BLAS)",
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
    "gelu": "GELU of families that have one: erf = the exact form (PyTorch's); tanh = ggml_gelu's tanh approximation "
    "(llama.cpp's graph)",
    "istft": "inverse STFT of families whose head gives a spectrum: host = numpy after the graph (as llama.cpp); "
    "graph = in ggml ops (inverse-DFT product, COL2IM_1D overlap-add), so it is profiled and placed too",
    "dwmlp": "depthwise-conv + MLP blocks (ConvNeXt blocks) of families that have a fused node for them "
    "(depthwise conv, LayerNorm, pointwise MLP with the exact GELU, gamma, residual): fused = one kzlab CPU "
    "node per block (numpy BLAS products and a vectorised exact GELU on tiles of frames; F32), CPU and BLAS "
    "backends only; ops = ggml ops; auto = fused where every backend is the CPU or BLAS and the options it "
    "replaces (gelu, dwconv, mm_chunk, wtype) are left at their defaults and ggml's own GELU_ERF is a scalar erff "
    "(a build whose libm calls are vectorised runs the ops faster)",
    "unitconv": "the dilated k=7 conv inside the fused residual unit (resunit='fused'): direct = 7 shifted products "
    "accumulated; winograd = Winograd's F(4, 7), 10 products per group of four output frames instead of 28 (the "
    "transformed weights are prepared at load; the conv's float32 rounding about 25 dB above the direct form's, "
    "105 against 131 dB on random data); auto = winograd where the residual units are fused, else direct (a "
    "ggml-op graph computes the conv with ggml's ops)",
    "normconv": "GroupNorm + swish + conv blocks of families that have a fused node for them (WavTokenizer's "
    "ResnetBlocks, and its first conv, which has no norm): fused = per conv one kzlab CPU node (the norm's affine and "
    "swish on tiles of frames, the conv by Winograd's F(6, 3), or F(4, 7) for 7 taps, bias and residual; F32) after "
    "a node for the GroupNorm's statistics, CPU and BLAS backends only; ops = ggml ops; auto = fused where every "
    "backend is the CPU or BLAS and the options it replaces (conv, conv_src1, mm_chunk, wtype) are left at their "
    "defaults",
    "attn": "the transformers' attention: mulmat = scores by a product, SOFT_MAX with the mask, a product with the "
    "transposed values; flash = one FLASH_ATTN_EXT node (F32 keys and values, the mask F16; no scores tensor, and "
    "the CPU computes it in one pass); auto = flash where every backend is the CPU or BLAS, mulmat where a device "
    "takes part (the graph a device port writes, and what the Hexagon profiles hold)",
    "dwconv": "depthwise convs of families that have them: direct = one CONV_2D_DW node (fastest on the CPU); taps = "
    "K shifted MUL + ADD nodes (ops every device backend takes, e.g. the Hexagon NPU, which refuses CONV_2D_DW)",
}


def _dwmlp_node_pays() -> bool:
    """Whether the fused ConvNeXt node beats ggml's ops in this build. Its gain is the vectorised exact GELU: where
    ggml-cpu's libm calls are vectorised too (glibc libmvec, `kzlab.environment.ggml_cpu_libm`), ggml's GELU_ERF is
    no longer a scalar erff and the ops graph was faster (WavTokenizer, 750 frames, 2 threads, in turns: 0.94x the
    fused node's time; with scalar libm 1.07x)."""
    from kzlab.environment import ggml_cpu_libm

    return ggml_cpu_libm() != "libmvec"


@dataclass(frozen=True)
class Lowering:
    """One choice per option; the defaults are the fastest measured on CPU (see benchmarks/)."""

    conv: str = "auto"
    conv_src1: str = "auto"
    convt: str = "auto"
    mm_chunk: int = 0
    conv_tile: int = 8192
    snake: str = "auto"
    wtype: str = "native"
    resunit: str = "auto"
    mode: str = "auto"
    gelu: str = "erf"
    istft: str = "host"
    dwconv: str = "direct"
    dwmlp: str = "auto"
    unitconv: str = "auto"
    normconv: str = "auto"
    attn: str = "auto"

    def __post_init__(self) -> None:
        for name, choices in (
            ("mode", MODE_CHOICES),
            ("conv", CONV_CHOICES),
            ("conv_src1", CONV_SRC1_CHOICES),
            ("convt", CONVT_CHOICES),
            ("snake", SNAKE_CHOICES),
            ("wtype", WTYPE_CHOICES),
            ("resunit", RESUNIT_CHOICES),
            ("gelu", GELU_CHOICES),
            ("istft", ISTFT_CHOICES),
            ("dwconv", DWCONV_CHOICES),
            ("dwmlp", DWMLP_CHOICES),
            ("unitconv", UNITCONV_CHOICES),
            ("normconv", NORMCONV_CHOICES),
            ("attn", ATTN_CHOICES),
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
        """The options as plain values (a plan's `requested` is not one of them)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(Lowering)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Lowering:
        names = {f.name for f in dataclasses.fields(Lowering)}
        unknown = set(d) - names
        if unknown:
            raise InvalidOptionError(f"unknown lowering option(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    def replace(self, **kw: Any) -> Lowering:
        return dataclasses.replace(self, **kw)

    def resolve(
        self, cpu_only: bool, where: str = "a device backend", absent: dict[str, str] | None = None,
        fused_nodes: bool = True,
    ) -> LoweringPlan:
        """Every choice made for a graph on CPU/BLAS backends only (`cpu_only`) or not; `where` names the
        backends in refusals; `absent` maps the options the decoder at hand has nothing for (its family's
        `not_applicable`) to why: those resolve to their ggml-op choice, and asking one of them for `fused` is
        refused with that reason (the plan never says a fused node ran where none exists).

        `mode="auto"` is `fast` on the CPU and BLAS, else `portable`. A device backend (RPC, GPU, or a simulated
        Hexagon) cannot run kzlab's fused nodes, which call back into this process: `fast` or an explicit
        `fused` there is refused, never replaced. In `fast` mode `resunit="auto"` fuses the residual units
        unless an option the fused node would override was changed (a comparison of conv lowerings, operand
        orders, snake lowerings or weight types then measures what it says), and `convt="auto"` likewise. The
        plan's mode is what the graph really is: `fast` when it holds a fused node, else `portable`. `conv` and
        `conv_src1` = auto take the CPU's fastest form on the CPU and BLAS (CONV_AUTO_CPU), a device port's where a
        device backend takes part (CONV_AUTO_DEVICE), in either mode.
        """
        absent_all = dict(absent or {})
        absent = {n: why for n, why in absent_all.items() if n in FUSABLE}
        for n in absent:
            if getattr(self, n) == "fused":
                raise InvalidOptionError(f"{n}='fused': {absent[n]}; use {n}='auto'")
        if self.unitconv == "winograd" and "unitconv" in absent_all:
            raise InvalidOptionError(f"unitconv='winograd': {absent_all['unitconv']}; use unitconv='auto'")
        mode = self.mode if self.mode != "auto" else ("fast" if cpu_only and fused_nodes else "portable")
        asked = [n for n in FUSABLE if getattr(self, n) == "fused"]
        if mode == "fast" and not (cpu_only and fused_nodes):
            why = f"which {where} cannot run" if not cpu_only else "and this decoder family has no fused nodes"
            raise InvalidOptionError(f"mode='fast' runs kzlab's fused CPU nodes, {why}: use mode='portable'")
        if mode == "portable" and asked:
            n = asked[0]
            why = (f"{where} cannot run it" if not cpu_only else "mode='portable' builds ggml ops only"
                   if fused_nodes else "this decoder family has no fused nodes")
            raise InvalidOptionError(
                f"{n}='fused' is a kzlab CPU node (it calls back into Python), not a ggml op: {why}; use "
                f"{n}='{FUSABLE[n]}' or 'auto'" + (", or mode='fast'" if cpu_only else "")
            )
        d = Lowering()

        def at_defaults(*names: str) -> bool:
            return all(getattr(self, f) == getattr(d, f) for f in names)

        def untouched(*names: str) -> bool:
            return self.snake in ("auto", "fused") and at_defaults(*names)

        fast = mode == "fast"
        choice = {
            "snake": "fused" if fast else "folded",
            "resunit": "fused" if fast and untouched("conv", "conv_src1", "mm_chunk", "wtype") else "ops",
            # a family without fused nodes on the CPU: the transposed convs' slices added in place of COL2IM_1D and
            # the transposes around it (Mimi's full-size SEANet, 125 frames: 738 -> see README)
            "convt": "fused" if fast and untouched("mm_chunk", "wtype") else (
                "shift" if cpu_only and not fused_nodes else "col2im"),
            "dwmlp": "fused" if fast and _dwmlp_node_pays() and at_defaults("gelu", "dwconv", "mm_chunk", "wtype")
            else "ops",
            "normconv": "fused" if fast and at_defaults("conv", "conv_src1", "mm_chunk", "wtype") else "ops",
        }
        choice.update({n: FUSABLE[n] for n in absent})
        made = {n: choice[n] if getattr(self, n) == "auto" else getattr(self, n) for n in FUSABLE}
        by_backend = dict(AUTO_CPU if cpu_only else AUTO_DEVICE)
        if self.wtype in QUANTIZED_WTYPES:  # the convs' weights stay F32 (see HELP["conv_src1"])
            by_backend["conv_src1"] = "kernel"
        made.update({n: v for n, v in by_backend.items() if getattr(self, n) == "auto"})
        plan_mode = "fast" if "fused" in made.values() else "portable"
        if self.unitconv == "winograd" and made["resunit"] != "fused":
            raise InvalidOptionError(
                "unitconv='winograd' computes the dilated conv inside the fused residual unit, and this plan's units "
                f"are ggml ops (resunit={made['resunit']!r}): use resunit='fused' (mode='fast') or unitconv='auto'"
            )
        unitconv = self.unitconv if self.unitconv != "auto" else (
            "winograd" if made["resunit"] == "fused" else "direct")
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(Lowering)}
        return LoweringPlan(**{**fields, **made, "mode": plan_mode, "unitconv": unitconv}, requested=self)

    @staticmethod
    def preset(name: str) -> Lowering:
        """A named lowering: `default`, `device` (the graph a device port runs, as the simulator places it),
        `naive` (the F16 graph ports of the decoder usually write), `llamacpp`
        (llama.cpp's own graph of it; see LLAMACPP for where kzlab's still differs)."""
        return preset(name)

    def portable(self) -> Lowering:
        """This request in portable mode, its fused choices back to `auto` and the choices `auto` makes by backend
        (`conv`, `conv_src1`, `attn`) made as for a device: the graph a device port of it runs, on any backend. What the
        placement simulator places for this request, so a CPU profile of it prices the simulated graph's nodes."""
        fused = {n: "auto" for n in FUSABLE if getattr(self, n) == "fused"}
        if self.unitconv == "winograd":  # computed inside the fused unit only
            fused["unitconv"] = "auto"
        device = {n: v for n, v in AUTO_DEVICE.items() if getattr(self, n) == "auto"}
        if self.convt in ("auto", "fused"):  # as a device resolves it (a family without fused nodes: shift on the CPU)
            device["convt"] = "col2im"
        return Lowering(**{**self.to_dict(), **fused, **device, "mode": "portable"})

    def resolved(self, cpu_only: bool) -> LoweringPlan:
        """Deprecated name of `resolve` (kept for scripts written against kzlab 0.1)."""
        import warnings

        warnings.warn("Lowering.resolved() is now Lowering.resolve()", DeprecationWarning, stacklevel=2)
        return self.resolve(cpu_only)

    def label(self, skip: Collection[str] = ()) -> str:
        """Short text for tables and legends. `skip`: options left out because they change nothing in the
        decoder at hand (its family's `not_applicable`, see kzlab.arch)."""
        show = {f.name: f.name not in skip for f in dataclasses.fields(Lowering)}
        parts = [p for n, p in (("conv", self.conv), ("conv_src1", f"src1={self.conv_src1}"), ("convt", self.convt),
                                ("snake", f"snake={self.snake}"), ("wtype", f"w={self.wtype}")) if show[n]]
        if self.resunit != "ops" and show["resunit"]:
            parts.insert(0, f"resunit={self.resunit}")
        parts.insert(0, f"{self.mode}:")
        if self.mm_chunk and show["mm_chunk"]:
            parts.append(f"chunk={self.mm_chunk}")
        if self.conv_tile and self.conv.startswith("im2col-f32") and show["conv_tile"]:
            parts.append(f"tile={self.conv_tile}")
        if self.gelu != "erf" and show["gelu"]:
            parts.append(f"gelu={self.gelu}")
        if self.istft != "host" and show["istft"]:
            parts.append(f"istft={self.istft}")
        if self.attn == "flash" and show["attn"]:
            parts.append("attn=flash")
        if self.dwconv != "direct" and show["dwconv"]:
            parts.append(f"dwconv={self.dwconv}")
        if self.dwmlp != "ops" and show["dwmlp"]:
            parts.insert(1, f"dwmlp={self.dwmlp}")
        if self.normconv != "ops" and show["normconv"]:
            parts.insert(1, f"normconv={self.normconv}")
        if self.unitconv == "winograd" and show["unitconv"]:
            parts.insert(2 if self.resunit != "ops" and show["resunit"] else 1, "unitconv=winograd")
        return " ".join(parts)


@dataclass(frozen=True)
class LoweringPlan(Lowering):
    """A lowering with every choice made (no `auto`): what the graph builders, the weights and the blocks read,
    and what a result records as `lowering_resolved`. `requested` is the Lowering it was resolved from."""

    requested: Lowering | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        left = [f.name for f in dataclasses.fields(Lowering) if getattr(self, f.name) == "auto"]
        if left:
            raise InvalidOptionError(f"a lowering plan has every choice made; {', '.join(left)} still say 'auto'")

    @property
    def fused_snake(self) -> bool:
        return self.snake == "fused"

    @property
    def fused_resunit(self) -> bool:
        return self.resunit == "fused"

    @property
    def fused_convt(self) -> bool:
        return self.convt == "fused"

    @property
    def fused_dwmlp(self) -> bool:
        return self.dwmlp == "fused"

    @property
    def fused_normconv(self) -> bool:
        return self.normconv == "fused"

    @property
    def winograd_unit(self) -> bool:
        """Whether the fused residual units compute their dilated conv by Winograd's F(4, 7)."""
        return self.resunit == "fused" and self.unitconv == "winograd"

    @property
    def folded_snake(self) -> bool:
        """Whether the SnakeBeta constants are folded at load (exp(alpha), 1/(exp(beta)+1e-9))."""
        return self.snake in ("folded", "fused")

    def for_stream(self) -> tuple[LoweringPlan, dict[str, str]]:
        """The plan one call of a stateful stream is built from, and each choice it changes with why (empty: the
        same plan). Winograd's F(4, 7) rounds per group of output frames, and a call's groups cannot fall where the
        offline decode's fall: the streamed audio would differ from the offline decode's by that rounding, amplified
        through the later blocks (87.7 dB at full size, F32, 80 frames), so a streaming call computes the fused
        units' conv directly (its weights prepared beside the Winograd ones on the first call), unless Winograd was
        asked for by name (`unitconv="winograd"`): then streams run it too, at that rounding (`Stream.exact` says)."""
        asked = (self.requested or self).unitconv
        if self.winograd_unit and asked != "winograd":
            why = ("direct in streaming calls: Winograd's groups of output frames cannot fall where the offline "
                   "decode's fall, and would round differently from it")
            return dataclasses.replace(self, unitconv="direct"), {"unitconv": why}
        return self, {}

    def replace(self, **kw: Any) -> Lowering:
        """A new request (a plain Lowering) from this plan's choices with `kw` changed; resolve it again."""
        return Lowering(**{**self.to_dict(), **kw})

    def request_dict(self) -> dict[str, Any]:
        """What was asked for (the plan itself when it was made directly)."""
        return (self.requested or self).to_dict()


#: the naive graph peers write (ggml_conv_1d, ggml_conv_transpose_1d, F16), kept for comparison
NAIVE = Lowering(
    conv="im2col-f16", conv_src1="kernel", convt="direct", snake="raw", wtype="f16", conv_tile=0, resunit="ops",
    mode="portable",
)

#: llama.cpp's own graph of the first family's decoder (tools/mtmd/models/qwen3tts-gen.cpp at 0c1e5709, `code2wav`):
#: ggml_conv_1d (an F16 im2col, the columns as src0 and the kernel as src1, no tiling), the transposed convs as a
#: product and ggml_col2im_1d, SnakeBeta folded at conversion (MUL, SIN, SQR, MUL, ADD), ggml_gelu's tanh form in
#: the ConvNeXt blocks; ggml ops only. Where kzlab's graph still differs from it: the depthwise convs are K
#: shifted multiply-adds (llama.cpp: ggml_conv_1d_dw, an F16 im2col and a product), and the decode is one graph
#: over every frame (llama.cpp: windows of 72 frames with carried state). For WavTokenizer the same choices make
#: llama.cpp's `wavtokenizer-dec` convs and GELU (its depthwise convs stay kzlab's `dwconv`).
LLAMACPP = Lowering(
    conv="im2col-f16", conv_src1="kernel", convt="col2im", snake="folded", resunit="ops", conv_tile=0,
    gelu="tanh", mode="portable", dwmlp="ops",
)

#: the graph a device port runs, on any backend (`Lowering().portable()`): what the placement simulator places for the
#: default request, so `kzlab profile MODEL --backend cpu --lowering device` is the CPU profile a prediction reads
DEVICE = Lowering().portable()

#: lowerings by name: `kzlab.Lowering.preset(name)`, `--lowering NAME` on the commands
PRESETS: dict[str, Lowering] = {"default": Lowering(), "device": DEVICE, "naive": NAIVE, "llamacpp": LLAMACPP}


def preset(name: str) -> Lowering:
    """A named lowering (PRESETS); an unknown name is refused with the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise InvalidOptionError(f"unknown lowering preset {name!r}: {', '.join(PRESETS)}") from None

