"""WavTokenizer's file half: the GGUF llama.cpp's own converter writes (`convert_hf_to_gguf.py`, class
`WavTokenizerDecModel`, read at llama.cpp cb295bf5 and 0c1e5709), its synthetic presets and random weights,
its built-in decoders and its layout inference (kzlab.formats.family_files).

What llama.cpp's files look like (the tiny fixture's README in tests/data/wavtokenizer-tiny has the table):
`convnext.<i>.dw` and `convnext.<i>.gamma.weight` are the roles `dwconv` and `gamma`; every posnet vector,
`conv1d.bias` and `convnext.<i>.dw.bias` is stored 2-D, numpy (C, 1), and the posnet attention's 1x1 convs
keep their kernel axis, numpy (C, C, 1). The converter stores biases, 1-D tensors, `*_norm.weight` and the
posnet's norm1/norm2 in F32; every other weight in the file type, falling back to F16 where Q8_0's blocks of
32 do not divide a row (the k=3 and k=7 convolutions, the 1x1 attention convs). `block_count` is not the
ConvNeXt count: llama.cpp sizes its per-layer array by it, so it is written as the larger of the posnet and
ConvNeXt counts, as its converter's config does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.arch.wavtokenizer.spec import ARCH_NAME, WavTokenizerHParams
from kzlab.model.model import Role

ARCHITECTURE = ARCH_NAME
DEFAULT_NAME = "WavTokenizer Dec"
#: llama.cpp's general.file_type per outtype (LlamaFileType ALL_F32, MOSTLY_F16, MOSTLY_Q8_0)
_FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7}
#: llama.cpp's converter writes max_position_embeddings of convert_pt_to_hf.py's config
_CONTEXT_LENGTH = 8192


def tensor_name(role: str) -> str:
    m = re.fullmatch(r"convnext\.(\d+)\.dwconv\.(weight|bias)", role)
    if m:
        return f"convnext.{m.group(1)}.dw.{m.group(2)}"
    m = re.fullmatch(r"convnext\.(\d+)\.gamma", role)
    if m:
        return f"convnext.{m.group(1)}.gamma.weight"
    return role


def _column(role: str) -> bool:
    """Vectors llama.cpp stores as (C, 1) so that ggml_add broadcasts them over time."""
    dw_bias = re.fullmatch(r"convnext\.\d+\.dwconv\.bias", role)
    return role.startswith("posnet.") or role == "conv1d.bias" or bool(dw_bias)


def file_array(role: str, a: np.ndarray) -> np.ndarray:
    if a.ndim == 1 and _column(role):
        return a[:, None]
    if a.ndim == 2 and re.fullmatch(r"posnet\.\d+\.attn_(q|k|v|output)\.weight", role):
        return a[:, :, None]
    return a


def storage_type(role: str, shape: tuple[int, ...], outtype: str) -> str:
    name = tensor_name(role)
    f32 = (
        outtype == "f32"
        or len(shape) <= 1
        or not name.endswith(".weight")
        or name.endswith("_norm.weight")
        or bool(re.fullmatch(r"posnet\.\d+\.norm[12]\.weight", name))
    )
    if f32:
        return "F32"
    if outtype == "q8_0" and shape[-1] % 32 == 0:
        return "Q8_0"
    return "F16"


def metadata(hp: WavTokenizerHParams, outtype: str = "f32", n_params: int = 0) -> dict[str, object]:
    from gguf import size_label

    p = f"{ARCHITECTURE}."
    return {
        "general.type": "model",
        "general.size_label": size_label(int(n_params), 0, 0, 0),
        p + "block_count": max(len(hp.posnet_kinds), hp.num_convnext),
        p + "context_length": _CONTEXT_LENGTH,
        p + "embedding_length": hp.n_fft + 2,
        p + "attention.head_count": hp.num_heads,
        p + "attention.layer_norm_epsilon": float(hp.layer_norm_eps),
        "general.file_type": _FILE_TYPE[outtype],
        p + "vocab_size": hp.vocab_size,
        p + "features_length": hp.features,
        p + "feed_forward_length": hp.intermediate_size,
        p + "attention.group_norm_epsilon": float(hp.group_norm_eps),
        p + "attention.group_norm_groups": hp.group_norm_groups,
        p + "posnet.embedding_length": hp.dim,
        p + "posnet.block_count": len(hp.posnet_kinds),
        p + "convnext.embedding_length": hp.dim,
        p + "convnext.block_count": hp.num_convnext,
        p + "attention.causal": False,
        "general.quantization_version": 2,
        "tokenizer.ggml.model": "none",
    }


PRESETS: dict[str, WavTokenizerHParams] = {
    # the shipped decoder of OuteTTS 0.2/0.3 (WavTokenizer-large-speech-75token): about 65 M parameters
    "wavtokenizer-dec": WavTokenizerHParams(),
    # the tiny fixture's sizes (tests/data/wavtokenizer-tiny)
    "wavtokenizer-dec-tiny": WavTokenizerHParams(
        vocab_size=512, features=32, dim=64, intermediate_size=192, num_convnext=3
    ),
}
DEFAULT_PRESET = "wavtokenizer-dec"


def random_weight(role: Role, rng: np.random.Generator, hp: Any = None) -> np.ndarray:
    """The fixture generator's recipe (shared/tools/wavtokenizer): fan-in scaled Gaussians for convolutions
    and linears (q and k x1.5, the ResNet's second conv x0.8, pw2 x sqrt 2), norm weights ~1+0.15N, biases
    ~0.1N, ConvNeXt gamma ~U(0.25, 1), and a head whose log-magnitude rows have std ~1.5 (a few reach the
    exp clip) and phase rows std ~2.5 rad. Activations stay of order 1 through every block."""
    name, shape = role.name, role.shape
    f32 = np.float32

    def n(std: float, mean: float = 0.0, size: Any = shape) -> np.ndarray:
        return (rng.standard_normal(size, dtype=f32) * f32(std) + f32(mean)).astype(f32)

    if name == "token_embd.weight":
        return n(1.0)
    if name.endswith(".gamma"):
        return (rng.random(shape, dtype=f32) * f32(0.75) + f32(0.25)).astype(f32)
    if "norm" in name.split(".")[-2] or name.split(".")[0].endswith("norm"):
        return n(0.15, 1.0) if name.endswith(".weight") else n(0.1)
    if name.startswith("output."):
        half = shape[0] // 2
        if name.endswith(".bias"):
            return np.concatenate([n(0.3, -0.5, half), n(1.0, 0.0, shape[0] - half)])
        c = shape[1]
        return np.concatenate([n(1.5 / np.sqrt(c), 0.0, (half, c)), n(2.5 / np.sqrt(c), 0.0, (shape[0] - half, c))])
    if name.endswith(".bias"):
        return n(0.1)
    fan_in = int(np.prod(shape[1:]))
    gain = 1.0
    if re.search(r"\.attn_(q|k)\.", name):
        gain = 1.5
    elif ".conv2." in name:
        gain = 0.8
    elif name.endswith("pw2.weight"):
        gain = float(np.sqrt(2.0))
    return n(gain / np.sqrt(max(fan_in, 1)))


#: built-in decoders: the tiny fixture (llama.cpp's converter, F32) shipped in kzlab/data, and the full-size
#: synthetic written into the cache on first use
BUILTINS: dict[str, tuple[str, str]] = {
    "wavtokenizer-tiny": ("package", "wavtokenizer-tiny-f32.gguf"),
    "wavtokenizer-synthetic": ("synthetic", "wavtokenizer-dec"),
}


def make_builtin(kind: str, preset: str, path: Path, dtype: str) -> Path:
    from kzlab.formats.synth import synth

    return synth(path, preset=preset, dtype=dtype, seed=0)


def infer_layout(raw: Any, name: str | None = None) -> Any:
    from kzlab.arch.wavtokenizer.infer import infer_layout as infer

    return infer(raw, name)


#: hyperparameters a file may not carry (codec.cpp's writes no key at all), given by the user: name -> type.
#: The widths, block counts, the posnet's kinds and n_fft come from the tensor shapes and cannot be given.
OVERRIDABLE: dict[str, type] = {
    "group_norm_groups": int,
    "group_norm_eps": float,
    "layer_norm_eps": float,
    "sample_rate": int,
    "bandwidth_id": int,  # the row of AdaLayerNorm tables a map's `row:bandwidth_id` transform takes
}


def apply_overrides(hp: WavTokenizerHParams, values: dict[str, Any], source: str = "") -> WavTokenizerHParams:
    """`values` (checked by kzlab.formats.given.coerce against OVERRIDABLE) applied to `hp`; a group count that
    does not divide the channels, or a non-positive epsilon or rate, is refused naming the value."""
    import dataclasses
    import math

    from kzlab.errors import InvalidOptionError
    from kzlab.formats.given import coerce

    v = coerce(values, OVERRIDABLE, "a WavTokenizer decoder", source)
    where = f"{source}: " if source else ""
    g = v.get("group_norm_groups")
    if g is not None and (g < 1 or hp.dim % g):
        raise InvalidOptionError(f"{where}group_norm_groups={g} does not divide the {hp.dim} channels into groups")
    for k in ("group_norm_eps", "layer_norm_eps"):
        if k in v and not (math.isfinite(v[k]) and 0 < v[k] <= float(np.finfo(np.float32).max)):
            raise InvalidOptionError(f"{where}{k}={v[k]}: expected a number > 0 that a float32 holds")
    if "bandwidth_id" in v and v["bandwidth_id"] < 0:
        raise InvalidOptionError(f"{where}bandwidth_id={v['bandwidth_id']}: expected an integer >= 0")
    if "sample_rate" in v and v["sample_rate"] < 1:
        raise InvalidOptionError(f"{where}sample_rate={v['sample_rate']}: expected an integer >= 1")
    for k in ("group_norm_eps", "layer_norm_eps"):
        if k in v:
            v[k] = float(np.float32(v[k]))  # as the metadata's float32 would hold it
    return dataclasses.replace(hp, **v)
