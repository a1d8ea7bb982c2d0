"""WavTokenizer's decoder, llama.cpp's `wavtokenizer-dec` GGUF: the data half (hyperparameters, roles, checks,
stages).

The model (outetts 0.4.4 `wav_tokenizer`, converted by llama.cpp's convert_hf_to_gguf.py `WavTokenizerDecModel`):
codebook lookup (`token_embd` is the VQ codebook), Conv1d k=7 (`conv1d`), a posnet of ResNet blocks (GroupNorm,
swish, Conv1d k=3, twice, residual), one self-attention block and a final GroupNorm, a LayerNorm, ConvNeXt blocks
(depthwise Conv1d k=7, LayerNorm, Linear, GELU (erf), Linear, gamma, residual), a final LayerNorm and the linear
head to n_fft + 2 (log-magnitude and phase of n_fft/2 + 1 bins), then an inverse STFT (hop n_fft/4, Hann window,
"same" padding) to 24 kHz audio.

Every size is read from the file: widths from tensor shapes, the posnet's block kinds from which tensors each
block has, the ConvNeXt count from `convnext.block_count` (the file's `block_count` is NOT it: the converter
sizes its name map by it), group count and epsilons from metadata. n_fft is the head's width minus 2; the hop
(n_fft / 4) and the sample rate (24 kHz) are not in the GGUF, as in llama.cpp's tts tool.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from kzlab.arch import WINOGRAD_TAPS, Stage
from kzlab.errors import InvalidModelError
from kzlab.model.model import Role

ARCH_NAME = "wavtokenizer-dec"


@dataclass(frozen=True)
class WavTokenizerHParams:
    """The sizes of one WavTokenizer decoder (defaults: the shipped 75 tokens/s decoder of OuteTTS 0.2/0.3)."""

    family: ClassVar[str] = ARCH_NAME

    vocab_size: int = 4096
    features: int = 512  # codebook vector width
    dim: int = 768  # backbone channels (posnet and ConvNeXt)
    intermediate_size: int = 2304  # ConvNeXt pointwise MLP
    num_convnext: int = 12
    #: each posnet block's kind in order: "resnet", "attn" or "norm"
    posnet_kinds: tuple[str, ...] = ("resnet", "resnet", "attn", "resnet", "resnet", "norm")
    group_norm_groups: int = 32
    group_norm_eps: float = 1e-6
    layer_norm_eps: float = 1e-6
    num_heads: int = 1
    n_fft: int = 1280
    hop: int = 320
    sample_rate: int = 24000
    #: the AdaLayerNorm row a file with per-bandwidth tables was read with (0: what OuteTTS decodes with)
    bandwidth_id: int = 0

    # the codes' shape, in the words kzlab.codes reads
    @property
    def num_quantizers(self) -> int:
        return 1

    @property
    def codebook_size(self) -> int:
        return self.vocab_size

    def codebook_count_hint(self, n: int) -> str:
        """Why codes with n codebooks are refused (kzlab.codes): WavTokenizer has one codebook, so there is no
        count to choose."""
        return "a WavTokenizer decoder has a single codebook: codes [1, T] or [T]"

    @property
    def semantic_codebook_size(self) -> int:
        return self.vocab_size

    @property
    def n_bins(self) -> int:
        return self.n_fft // 2 + 1

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["posnet_kinds"] = list(self.posnet_kinds)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WavTokenizerHParams:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "posnet_kinds" in kw:
            kw["posnet_kinds"] = tuple(kw["posnet_kinds"])
        return cls(**kw)


def _meta(meta: dict[str, Any], key: str) -> Any:
    return meta.get(f"{ARCH_NAME}.{key}")


def hparams_from(
    shapes: dict[str, tuple[int, ...]], meta: dict[str, Any], source: str,
    quirks: dict[str, str] | None = None, notes: list[str] | None = None,
) -> WavTokenizerHParams:
    """Sizes from the tensor shapes (torch order) and the `wavtokenizer-dec.*` metadata."""

    def shape(role: str) -> tuple[int, ...]:
        if role not in shapes:
            raise InvalidModelError(f"{source}: required tensor for role '{role}' is missing")
        return shapes[role]

    vocab, features = shape("token_embd.weight")[:2]
    dim = shape("conv1d.weight")[0]
    n_out = shape("output.weight")[0]
    kinds = []
    i = 0
    while any(r.startswith(f"posnet.{i}.") for r in shapes):
        if f"posnet.{i}.conv1.weight" in shapes:
            kinds.append("resnet")
        elif f"posnet.{i}.attn_q.weight" in shapes:
            kinds.append("attn")
        elif f"posnet.{i}.attn_norm.weight" in shapes:
            kinds.append("norm")
        else:
            raise InvalidModelError(f"{source}: posnet block {i} has neither conv1, attn_q nor a norm")
        i += 1
    n_conv = 0
    while f"convnext.{n_conv}.dwconv.weight" in shapes:
        n_conv += 1
    if n_conv == 0:
        raise InvalidModelError(f"{source}: no ConvNeXt block (convnext.0.dw.weight is missing)")
    ff = shape("convnext.0.pw1.weight")[0]
    stated = _meta(meta, "convnext.block_count")
    if stated is not None and int(stated) != n_conv:
        raise InvalidModelError(
            f"{source}: the metadata says {int(stated)} ConvNeXt blocks but the file has {n_conv}: required tensor "
            f"for role 'convnext.{n_conv}.dwconv.weight' is missing" if int(stated) > n_conv
            else f"{source}: the metadata says {int(stated)} ConvNeXt blocks but the file has {n_conv}"
        )
    stated = _meta(meta, "posnet.block_count")
    if stated is not None and int(stated) != len(kinds):
        raise InvalidModelError(
            f"{source}: the metadata says {int(stated)} posnet blocks but the file has {len(kinds)}"
        )
    d = WavTokenizerHParams()
    groups = _meta(meta, "attention.group_norm_groups")
    if groups is None:
        groups = d.group_norm_groups
        if notes is not None:
            notes.append(f"no group_norm_groups in the metadata: using {groups}")
    eps_g = _meta(meta, "attention.group_norm_epsilon")
    eps_l = _meta(meta, "attention.layer_norm_epsilon")
    heads = _meta(meta, "attention.head_count")
    if n_out < 4 or n_out % 2:
        raise InvalidModelError(f"{source}: the head's width {n_out} is not n_fft + 2 for an even n_fft")
    n_fft = int(n_out) - 2
    return WavTokenizerHParams(
        vocab_size=int(vocab), features=int(features), dim=int(dim), intermediate_size=int(ff), num_convnext=n_conv,
        posnet_kinds=tuple(kinds), group_norm_groups=int(groups),
        group_norm_eps=float(np.float32(eps_g if eps_g is not None else d.group_norm_eps)),
        layer_norm_eps=float(np.float32(eps_l if eps_l is not None else d.layer_norm_eps)),
        num_heads=int(heads) if heads is not None else 1, n_fft=n_fft, hop=n_fft // 4,
    )


def decoder_roles(hp: WavTokenizerHParams) -> list[Role]:
    """Every tensor in graph order, in the shapes the graph reads (size-1 axes of the file dropped)."""
    r: list[Role] = []

    def add(name: str, shape: tuple[int, ...], kind: str) -> None:
        r.append(Role(name, tuple(int(s) for s in shape), kind))

    C = hp.dim
    add("token_embd.weight", (hp.vocab_size, hp.features), "codebook")
    add("conv1d.weight", (C, hp.features, 7), "conv")
    add("conv1d.bias", (C,), "vector")
    for i, kind in enumerate(hp.posnet_kinds):
        p = f"posnet.{i}."
        if kind == "resnet":
            for j in (1, 2):
                add(p + f"norm{j}.weight", (C,), "vector")
                add(p + f"norm{j}.bias", (C,), "vector")
                add(p + f"conv{j}.weight", (C, C, 3), "conv")
                add(p + f"conv{j}.bias", (C,), "vector")
        else:
            add(p + "attn_norm.weight", (C,), "vector")
            add(p + "attn_norm.bias", (C,), "vector")
        if kind == "attn":
            for w in ("q", "k", "v", "output"):
                add(p + f"attn_{w}.weight", (C, C), "linear")
                add(p + f"attn_{w}.bias", (C,), "vector")
    add("token_embd_norm.weight", (C,), "vector")
    add("token_embd_norm.bias", (C,), "vector")
    for i in range(hp.num_convnext):
        p = f"convnext.{i}."
        add(p + "dwconv.weight", (C, 1, 7), "dwconv")
        add(p + "dwconv.bias", (C,), "vector")
        add(p + "norm.weight", (C,), "vector")
        add(p + "norm.bias", (C,), "vector")
        add(p + "pw1.weight", (hp.intermediate_size, C), "linear")
        add(p + "pw1.bias", (hp.intermediate_size,), "vector")
        add(p + "pw2.weight", (C, hp.intermediate_size), "linear")
        add(p + "pw2.bias", (C,), "vector")
        add(p + "gamma", (C,), "vector")
    add("output_norm.weight", (C,), "vector")
    add("output_norm.bias", (C,), "vector")
    add("output.weight", (hp.n_fft + 2, C), "linear")
    add("output.bias", (hp.n_fft + 2,), "vector")
    return r


def check_hparams(hp: WavTokenizerHParams, src: str) -> None:
    """Sizes the graph cannot honour are refused here, before ggml sees them."""
    for name in ("vocab_size", "features", "dim", "intermediate_size", "num_convnext", "group_norm_groups", "n_fft"):
        v = getattr(hp, name)
        if not isinstance(v, int) or v < 1:
            raise InvalidModelError(f"{src}: hyperparameter {name} = {v!r}; expected an integer >= 1")
    if hp.dim % hp.group_norm_groups:
        raise InvalidModelError(f"{src}: {hp.dim} channels cannot form {hp.group_norm_groups} GroupNorm groups")
    if hp.num_heads != 1:
        raise InvalidModelError(f"{src}: the posnet attention has {hp.num_heads} heads; WavTokenizer's has one")
    if hp.n_fft % 4:
        raise InvalidModelError(f"{src}: n_fft = {hp.n_fft} is not a multiple of the hop's 4")
    for name in ("group_norm_eps", "layer_norm_eps"):
        v = getattr(hp, name)
        if not math.isfinite(v) or v <= 0:
            raise InvalidModelError(f"{src}: {name} = {v!r}; expected a finite number > 0")


def stage_names(hp: WavTokenizerHParams) -> list[str]:
    """Stages in order, named as the reference fixtures' keys."""
    return (
        ["embd", "backbone.embed"]
        + [f"posnet.{i}" for i in range(len(hp.posnet_kinds))]
        + ["backbone.norm"]
        + [f"convnext.{i}" for i in range(hp.num_convnext)]
        + ["backbone", "head.linear"]
    )


def stage_input_shape(hp: WavTokenizerHParams, stage: str, frames: int) -> tuple[int, int]:
    if stage == "embd":
        return 1, frames
    if stage == "backbone.embed":
        return hp.features, frames
    return hp.dim, frames


@dataclass(frozen=True)
class WavTokenizerDec:
    """The family record (kzlab.arch.Arch). Chunked decodes split after the posnet and join exactly (measured:
    identical samples to the whole decode on the tiny fixture, 100 to 5000 frames); see `chunk_split` and the
    note on the chunking fields."""

    name: str = ARCH_NAME
    label: str = "WavTokenizer decoder (OuteTTS 0.2/0.3), llama.cpp layout"
    architectures: tuple[str, ...] = (ARCH_NAME,)
    graph_module: str = "kzlab.arch.wavtokenizer.graph"
    files_module: str = "kzlab.arch.wavtokenizer.files"
    hparams_type: type = WavTokenizerHParams
    #: Chunked decode splits the decoder (`chunk_split`): the posnet (attention and GroupNorms over every frame)
    #: runs once on the whole sequence, then the local rest (from `backbone.norm`: LayerNorms per frame, depthwise
    #: convs of 7 taps, the head, the iSTFT) in chunks of 300 frames with at least 3 * num_convnext + 2 frames of
    #: context either side (38 at the shipped sizes), as far as that part reaches, so chunks join exactly.
    #: Measured on the tiny fixture, chunked at these defaults against the whole decode: identical samples (inf dB,
    #: largest difference 0.0) on its 100 frames and on random codes of 1000, 1000, 2000 and 5000 frames, also in
    #: chunks of 37 frames. Memory: only the local part is bounded by the chunk; the posnet's activations and its
    #: T x T attention scale with the whole sequence. Running every chunk through the whole decoder instead
    #: (`split=False`, upstream's chunked_decode) approximates badly here, whatever the overlap, because the
    #: posnet of a chunk sees only that chunk: 2.8-3.3 dB at 300/50/0 on those sequences, 3.7-4.1 dB with 50
    #: frames of lookahead, 4.3-4.9 dB at 300/100/100, 5.7-7.6 dB at 500/100/100.
    chunk_size: int = 300
    left_context: int = 50
    right_context: int = 0
    #: not causal: its convs are centred ('same' padding) and the posnet's attention and GroupNorms see every frame,
    #: so a stream decodes overlapping windows (`kzlab.runtime.stream`), `stream_context` = (frames before, frames
    #: after) each call's frames; `stream_note` says what that gives against the offline decode
    causal: bool = False
    stream_context: tuple[int, int] = (50, 8)
    #: measured on the full-size synthetic decoder, 300 random frames, against the offline decode: 1.3 dB in
    #: 1-frame calls and 1.7 dB in 8-frame calls at (50, 8); 5.0-5.3 dB at (200, 32); -3.3 dB with no lookahead
    stream_note: str = ("an approximation: the posnet's attention and GroupNorms see only the window (1-2 dB against "
                        "the offline decode at full size with this context, 5 dB with 200 frames before and 32 after)")
    stage_aliases: dict[str, str] = field(default_factory=lambda: {"codes": "embd", "posnet": "posnet.0"})
    #: the fused CPU nodes (kzlab.graph.fused) in the fast mode: the ConvNeXt block (`dwmlp="fused"`), the
    #: GroupNorm statistics and the normalised conv (`normconv="fused"`)
    fused_nodes: bool = True
    #: the roles the fused nodes read in their own layout (kzlab.graph.prepared): the ConvNeXt blocks' products, the
    #: convs computed by Winograd (the first conv and the posnet's)
    fused_roles: dict[str, re.Pattern] = field(default_factory=lambda: {
        "resunit_conv": re.compile(r"(?!)"),
        "block_convt": re.compile(r"(?!)"),
        "mlp_linear": re.compile(r"^convnext\.\d+\.pw[12]\.weight$"),
        "normconv_conv": re.compile(r"^(conv1d|posnet\.\d+\.conv[12])\.weight$"),
    })
    not_applicable: dict[str, str] = field(default_factory=lambda: {
        "convt": "this decoder has no transposed conv (the inverse STFT makes the samples)",
        "snake": "this decoder has no SnakeBeta activation (its activations are swish and GELU)",
        "resunit": "this decoder has no BigVGAN residual units",
        "unitconv": "this decoder has no BigVGAN residual units",
        "attn": "this decoder's one attention (in its mid blocks) has one head over every frame and no mask: two "
                "products around SOFT_MAX",
    })

    def detect(self, architecture: str | None, tensor_names: Sequence[str]) -> bool:
        return architecture in self.architectures

    def hparams_from(self, shapes, meta, source, quirks=None, notes=None) -> WavTokenizerHParams:
        try:
            return hparams_from(shapes, meta, source, quirks, notes)
        except (IndexError, ValueError, TypeError) as e:
            raise InvalidModelError(f"{source}: tensor shapes or metadata do not describe a decoder: {e}") from None

    def check(self, hp: WavTokenizerHParams, meta: dict[str, Any], roles_present: set[str], source: str) -> None:
        check_hparams(hp, source)

    def roles(self, hp: WavTokenizerHParams) -> list[Role]:
        return decoder_roles(hp)

    def finish_weights(self, weights: dict[str, Any], hp: WavTokenizerHParams) -> None:
        pass

    def stages(self, hp: WavTokenizerHParams) -> list[Stage]:
        return [Stage(n, n.split(".")[0], i) for i, n in enumerate(stage_names(hp))]

    def stage_input_shape(self, hp: WavTokenizerHParams, stage: str, frames: int) -> tuple[int, int]:
        return stage_input_shape(hp, stage, frames)

    def describe(self, hp: WavTokenizerHParams) -> list[tuple[str, str]]:
        return [
            ("codebook", f"1 codebook of {hp.vocab_size} x {hp.features}"),
            ("posnet", f"{len(hp.posnet_kinds)} blocks ({', '.join(hp.posnet_kinds)}), {hp.dim} channels, "
             f"GroupNorm of {hp.group_norm_groups} groups"),
            ("convnext", f"{hp.num_convnext} blocks, {hp.dim} -> {hp.intermediate_size} -> {hp.dim}"),
            ("istft", f"n_fft {hp.n_fft}, hop {hp.hop}, Hann window, {hp.sample_rate} Hz"),
        ]

    def summary_stages(self, hp: WavTokenizerHParams) -> list[str]:
        return ["embd", "backbone.embed", "backbone", "head.linear"]

    def samples_per_frame(self, hp: WavTokenizerHParams) -> int:
        return hp.hop

    def keeps_f16_in_q8_0(self, role: str) -> bool:
        return False

    def chunk_split(self, hp: WavTokenizerHParams) -> tuple[str, str, int]:
        """The posnet runs on the whole sequence; from `backbone.norm` on every block is local: LayerNorms per
        frame, depthwise convs of 7 taps (3 frames either side each), the head per frame, and the iSTFT, whose
        output hop overlaps the windows of n_fft / 2 / hop frames either side."""
        reach = 3 * hp.num_convnext + -(-(hp.n_fft // 2) // hp.hop)
        return f"posnet.{len(hp.posnet_kinds) - 1}", "backbone.norm", reach

    def custom_flops(self, name: str, out: Any, srcs: Sequence[Any]) -> int | None:
        """The fused ConvNeXt node (six sources, pw1's weight fourth, ne [C, F]; the depthwise kernel second, ne
        [C, K]) counts its two products, 4 * T * C * F, the depthwise conv (2 * K per element of the block's
        [T, C]), the LayerNorm (about 8 per element), the exact GELU (about 20 per hidden element) and gamma,
        biases and residual (4 per element). The normalised conv (three to five sources, Winograd's matrices
        second, ne [C_out, C_in, n]) counts the direct conv's products, 2 * T * C_in * C_out * K (the algorithmic
        count; its layer record says how many its products did), the affine and swish (6 per input element
        where it has them) and the bias and residual (2 per output element); the GroupNorm statistics (two
        sources) about 5 per input element."""
        kind = self.custom_label(name, srcs)
        if kind == "convnext" and srcs[3] is not None and srcs[1] is not None:
            c, f = srcs[3].ne[0], srcs[3].ne[1]
            k = srcs[1].ne[1]
            t = out.n // max(c, 1)
            return 4 * t * c * f + (2 * k + 8 + 4) * out.n + 20 * t * f
        if kind == "normalised conv" and srcs[1] is not None and srcs[0] is not None:
            c_out, c_in, n = srcs[1].ne[0], srcs[1].ne[1], srcs[1].ne[2]
            t = out.n // max(c_out, 1)
            k = WINOGRAD_TAPS.get(n, n)
            return 2 * t * c_in * c_out * k + (6 * srcs[0].n if len(srcs) > 3 else 0) + 2 * out.n
        if kind == "group norm statistics" and srcs[0] is not None:
            return 5 * srcs[0].n
        return None

    def custom_label(self, name: str, srcs: Sequence[Any]) -> str | None:
        """The fused node a CUSTOM node is, told apart by its source count (kzlab.graph.fused)."""
        if len(srcs) == DWMLP_NODE_SOURCES:
            return "convnext"
        if len(srcs) == GN_AFFINE_NODE_SOURCES:
            return "group norm statistics"
        return "normalised conv" if 3 <= len(srcs) <= 5 else None

    def packed_weights(self, weights: dict[str, Any], hp: WavTokenizerHParams, plan: Any) -> dict[str, np.ndarray]:
        """Tensors the fused nodes read that the file holds apart (numpy order, F32): each ConvNeXt block's five
        per-channel vectors stacked as one [5, C] tensor, `convnext.{i}.vectors` (kzlab.graph.fused.VECTOR_ROWS),
        so that the fused node takes six sources (ggml allows nine); each posnet GroupNorm's weight and bias as
        one [2, C] tensor, `posnet.{i}.{norm1,norm2,attn_norm}.vectors`, the statistics node's second source."""
        out: dict[str, np.ndarray] = {}
        if getattr(plan, "fused_dwmlp", False):
            rows = ("dwconv.bias", "norm.weight", "norm.bias", "pw2.bias", "gamma")
            out |= {
                f"convnext.{i}.vectors": np.stack([weights[f"convnext.{i}.{r}"].f32().reshape(-1) for r in rows])
                for i in range(hp.num_convnext)
            }
        if getattr(plan, "fused_normconv", False):
            for i, kind in enumerate(hp.posnet_kinds):
                for norm in ("norm1", "norm2") if kind == "resnet" else ("attn_norm",):
                    p = f"posnet.{i}.{norm}"
                    out[f"{p}.vectors"] = np.stack([weights[f"{p}.{r}"].f32().reshape(-1) for r in ("weight", "bias")])
        return out

    def derived_weights(self, hp: WavTokenizerHParams, plan: Any) -> dict[str, np.ndarray]:
        """Constants the graph needs that the file does not hold (numpy order, F32): the in-graph iSTFT's
        windowed inverse real DFT basis and squared window."""
        if getattr(plan, "istft", "host") != "graph":
            return {}
        from kzlab.arch.wavtokenizer.istft import basis, hann

        return {"istft.basis": basis(hp.n_fft), "istft.window_sq": (hann(hp.n_fft) ** 2).astype(np.float32)[None, :]}


#: sources of the fused ConvNeXt node (len(kzlab.graph.fused.DWMLP_SOURCES), which this layer may not import)
DWMLP_NODE_SOURCES = 6
#: sources of the GroupNorm statistics node (x and the norm's weight and bias stacked)
GN_AFFINE_NODE_SOURCES = 2

ARCH = WavTokenizerDec()
