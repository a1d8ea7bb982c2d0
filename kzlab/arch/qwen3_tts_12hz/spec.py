"""The Qwen3-TTS 12 Hz codec decoder's data half: stages, their input shapes, chunking, and the `Arch` record.

Stage names match the reference fixtures: quantizer, pre_conv, pre_transformer, upsample.{i}, decoder.{i}.
Hyperparameters, roles and checks live beside this file (hparams.py, roles.py, checks.py); the graph half is
graph.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kzlab.arch import WINOGRAD_TAPS, Stage
from kzlab.arch.qwen3_tts_12hz import checks, roles
from kzlab.arch.qwen3_tts_12hz.hparams import HParams, hparams_from


def stage_names(hp: HParams) -> list[str]:
    """All stages in order; `decoder.{n_blocks+2}` is the last conv (its output is before the clamp)."""
    names = ["quantizer", "pre_conv", "pre_transformer"]
    names += [f"upsample.{i}" for i in range(len(hp.upsampling_ratios))]
    names += [f"decoder.{i}" for i in range(hp.n_blocks + 3)]
    return names


def stage_input_shape(hp: HParams, stage: str, frames: int) -> tuple[int, int]:
    """(channels, T) of the input a stage takes, for `frames` code frames (torch order [C, T])."""
    t = frames
    if stage in ("quantizer",):
        return hp.num_quantizers, t
    if stage == "pre_conv":
        return hp.codebook_dim, t
    if stage == "pre_transformer":
        return hp.latent_dim, t
    ups = hp.upsampling_ratios
    if stage.startswith("upsample."):
        i = int(stage.split(".")[1])
        return hp.latent_dim, t * math.prod(ups[:i])
    t *= math.prod(ups)
    i = int(stage.split(".")[1])
    if i == 0:
        return hp.latent_dim, t
    nb = hp.n_blocks
    if i <= nb:
        return hp.block_channels(i)[0], t * math.prod(hp.upsample_rates[: i - 1])
    return hp.out_channels, t * math.prod(hp.upsample_rates)



#: roles the fused CPU nodes read in their own layout (kzlab.graph.prepared): the two convs of a BigVGAN
#: residual unit, and the transposed conv of a BigVGAN block
FUSED_ROLES = {
    "resunit_conv": re.compile(r"^dec\.\d+\.res\.\d+\.conv[12]\.weight$"),
    "block_convt": re.compile(r"^dec\.\d+\.convt\.weight$"),
}



@dataclass(frozen=True)
class Qwen3Tts12Hz:
    """The family record (see kzlab.arch.Arch). Files are recognised by their layout maps (formats/layouts),
    so `detect` only says whether a file's label is one of this family's."""

    name: str = "qwen3-tts-12hz"
    label: str = "Qwen3-TTS 12 Hz codec decoder"
    architectures: tuple[str, ...] = ("qwen3-tts-tokenizer", "qwen3tts_tokenizer")
    graph_module: str = "kzlab.arch.qwen3_tts_12hz.graph"
    files_module: str = "kzlab.arch.qwen3_tts_12hz.files"
    hparams_type: type = HParams
    #: upstream chunked_decode's defaults (no lookahead)
    chunk_size: int = 300
    left_context: int = 25
    right_context: int = 0
    #: every layer reads only the past (causal convs and transposed convs, a causal sliding-window transformer):
    #: it streams with its state carried, exactly (`Decoder.stream`)
    causal: bool = True
    stage_aliases: dict[str, str] = field(default_factory=lambda: {"latent": "decoder.0", "codes": "quantizer"})
    #: the fused residual-unit and SnakeBeta+transposed-conv CPU nodes (kzlab.graph.fused) apply
    fused_nodes: bool = True
    #: other parts of this family's models that people open: general.architecture -> where the decoder is
    other_files: dict[str, str] = field(default_factory=lambda: {
        "qwen3tts": "the talker (language model) of llama.cpp's Qwen3-TTS; the decoder is in the mmproj-*.gguf file "
        "beside it (its a.gen.wav.* tensors), which kzlab decodes",
        "clip": "a clip (mmproj) file with no decoder kzlab knows in it: kzlab decodes the a.gen.wav.* tensors of "
        "llama.cpp's mmproj files of the families it has a layout map for, and this file has none",
    })
    not_applicable: dict[str, str] = field(default_factory=lambda: {
        "istft": "this decoder's last conv gives the waveform itself: there is no inverse STFT",
        "dwconv": "this decoder's depthwise convs (in its ConvNeXt upsampling blocks) are lowered by `conv`",
        "dwmlp": "this family's ConvNeXt upsampling blocks have no fused node: they are built from ggml ops",
        "normconv": "this decoder has no GroupNorm + conv blocks",
    })
    fused_roles: dict[str, re.Pattern] = field(default_factory=lambda: dict(FUSED_ROLES))

    def detect(self, architecture: str | None, tensor_names: Sequence[str]) -> bool:
        return architecture in self.architectures

    def hparams_from(self, shapes, meta, source, quirks=None, notes=None) -> HParams:
        return hparams_from(shapes, meta, source, quirks=quirks, notes=notes)

    def check(self, hp: HParams, meta: dict[str, Any], roles_present: set[str], source: str) -> None:
        checks.check_hparams(hp, source)
        checks.check_counts(hp, meta, roles_present, source)

    def roles(self, hp: HParams) -> list[roles.Role]:
        return roles.decoder_roles(hp)

    def finish_weights(self, weights: dict[str, Any], hp: HParams) -> None:
        roles.divide_codebooks(weights, hp)

    def stages(self, hp: HParams) -> list[Stage]:
        return [Stage(n, n.split(".")[0], i) for i, n in enumerate(stage_names(hp))]

    def stage_input_shape(self, hp: HParams, stage: str, frames: int) -> tuple[int, int]:
        return stage_input_shape(hp, stage, frames)

    def describe(self, hp: HParams) -> list[tuple[str, str]]:
        """(label, text) lines for `kzlab info`."""
        return [
            ("quantizer", f"{hp.num_quantizers} codebooks of {hp.codebook_size} x {hp.vq_dim} -> {hp.codebook_dim}"),
            ("transformer", f"{hp.num_layers} layers, hidden {hp.hidden_size}, {hp.num_heads} heads of "
             f"{hp.head_dim}, ffn {hp.intermediate_size}, window {hp.sliding_window}"),
            ("upsampling", f"{list(hp.upsampling_ratios)} then {list(hp.upsample_rates)}, latent {hp.latent_dim}, "
             f"decoder_dim {hp.decoder_dim}"),
        ]

    def summary_stages(self, hp: HParams) -> list[str]:
        """The stages a one-line T-evolution shows: the decoder's input and each upsampling block's output."""
        return ["decoder.0"] + [f"decoder.{i}" for i in range(1, hp.n_blocks + 1)]

    def samples_per_frame(self, hp: HParams) -> int:
        return hp.total_upsample

    def keeps_f16_in_q8_0(self, role: str) -> bool:
        return roles.keeps_f16_in_q8_0(role)


    def chunk_split(self, hp: HParams) -> None:
        """Chunks run the whole decoder with left context, as upstream's chunked_decode does."""
        return None

    def custom_flops(self, name: str, out: Any, srcs: Sequence[Any]) -> int | None:
        """The fused CPU nodes (kzlab.graph.fused), told apart by their sources. The SnakeBeta node (x, alpha,
        beta) counts as the five pointwise ops it replaces (MUL, SIN, SQR, MUL, ADD), so that fused and folded
        graphs compare. The residual unit (nine sources, conv1's weight fourth, ne [C_out, C_in, K]) counts its
        two products, 2 * T * C_in * C_out * (K + 1), two snakes (5 per element each) and its bias and residual
        adds (3 per element). The SnakeBeta + transposed conv (five sources, the weight ne [C_out, K, C_in]
        fourth) counts its product on the input frames, 2 * T_in * C_in * K * C_out (the algorithmic count), the
        snake (5 per input element) and the overlap and bias adds (2 per output element). A streaming call's
        context join (two sources, `fused.join_frames`) moves bytes and computes nothing, as a CONCAT."""
        kind = self.custom_label(name, srcs)
        if kind == "context join":
            return 0
        if kind == "residual unit" and srcs[3] is not None:
            c_out, c_in, k = srcs[3].ne[0], srcs[3].ne[1], srcs[3].ne[2]
            k = WINOGRAD_TAPS.get(k, k)  # the direct conv's count for a conv by Winograd (its matrices in ne[2])
            t = out.n // max(c_out, 1)
            return 2 * t * c_in * c_out * (k + 1) + (2 * 5 + 3) * out.n
        if kind == "snake + transposed conv" and srcs[3] is not None and srcs[0] is not None:
            c_out, k, c_in = srcs[3].ne[0], srcs[3].ne[1], srcs[3].ne[2]
            t_in = srcs[0].n // max(c_in, 1)
            return 2 * t_in * c_in * k * c_out + 5 * srcs[0].n + 2 * out.n
        if kind == "snake":
            return 5 * out.n
        return None

    def custom_label(self, name: str, srcs: Sequence[Any]) -> str | None:
        return {len(_UNIT_SOURCES): "residual unit", _CONVT_SOURCES: "snake + transposed conv", 3: "snake",
                _JOIN_SOURCES: "context join"}.get(len(srcs))


#: sources of the fused residual-unit node (kzlab.graph.fused.UNIT_SOURCES: x, then two snakes and two convs)
_UNIT_SOURCES = ("x", "act1.alpha", "act1.beta", "conv1.weight", "conv1.bias",
                 "act2.alpha", "act2.beta", "conv2.weight", "conv2.bias")
#: sources of the fused SnakeBeta + transposed-conv node (x, alpha, beta, weight, bias)
_CONVT_SOURCES = 5
#: sources of a streaming call's context join (kzlab.graph.fused.join_frames: the carried past, the call's frames)
_JOIN_SOURCES = 2

ARCH = Qwen3Tts12Hz()
