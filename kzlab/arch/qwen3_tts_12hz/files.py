"""The Qwen3-TTS 12 Hz decoder's file half: its GGUF in qwentts.cpp's layout (names, shapes, stored types,
metadata), its synthetic presets and random weights, and its built-in decoders (kzlab.formats.family_files).

The synthetic weights follow the reference fixtures' recipe (fan-in scaled convolutions, small residual
branches, layer scales of 0.05-0.25, snake parameters around 0) so that activations stay in range through all
blocks and the output is bounded noise, like a real decoder's numerics, not speech.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.arch.qwen3_tts_12hz.hparams import OVERRIDABLE as OVERRIDABLE
from kzlab.arch.qwen3_tts_12hz.hparams import HParams
from kzlab.arch.qwen3_tts_12hz.roles import keeps_f16_in_q8_0
from kzlab.model.model import Role

ARCHITECTURE = "qwen3-tts-tokenizer"
DEFAULT_NAME = "Qwen3-TTS-Tokenizer-12Hz"

#: canonical role -> qwentts.cpp tensor name (the inverse of layouts/qwentts.toml)
_TO_QWENTTS: list[tuple[str, str]] = [
    (r"vq\.first\.codebook", "tok_dec.vq_first.0.codebook"),
    (r"vq\.rest\.(\d+)\.codebook", r"tok_dec.vq_rest.\1.codebook"),
    (r"vq\.(first|rest)\.output_proj\.weight", r"tok_dec.vq_\1.output_proj.weight"),
    (r"pre_conv\.(weight|bias)", r"tok_dec.pre_conv.\1"),
    (r"tfm\.(input_proj|output_proj)\.(weight|bias)", r"tok_dec.pre_tfm.\1.\2"),
    (r"tfm\.norm\.weight", "tok_dec.pre_tfm.norm.weight"),
    (r"tfm\.blk\.(\d+)\.attn_o\.weight", r"tok_dec.pre_tfm.blk.\1.attn_output.weight"),
    (r"tfm\.blk\.(\d+)\.(\w+)\.weight", r"tok_dec.pre_tfm.blk.\1.\2.weight"),
    (r"tfm\.blk\.(\d+)\.(attn_scale|ffn_scale)", r"tok_dec.pre_tfm.blk.\1.\2"),
    (r"up\.(\d+)\.convt\.(weight|bias)", r"tok_dec.upsample.\1.conv.\2"),
    (r"up\.(\d+)\.pw(1|2)\.(weight|bias)", r"tok_dec.upsample.\1.pwconv\2.\3"),
    (r"up\.(\d+)\.(dwconv|norm)\.(weight|bias)", r"tok_dec.upsample.\1.\2.\3"),
    (r"up\.(\d+)\.gamma", r"tok_dec.upsample.\1.gamma"),
    (r"dec\.(\d+)\.conv\.(weight|bias)", r"tok_dec.dec.\1.conv.\2"),
    (r"dec\.(\d+)\.snake\.(alpha|beta)", r"tok_dec.dec.\1.snake.\2"),
    (r"dec\.(\d+)\.convt\.(weight|bias)", r"tok_dec.dec.\1.conv_t.\2"),
    (r"dec\.(\d+)\.res\.(\d+)\.(\w+)\.(\w+)", r"tok_dec.dec.\1.res.\2.\3.\4"),
]


def tensor_name(role: str) -> str:
    for rx, template in _TO_QWENTTS:
        if re.fullmatch(rx, role):
            return re.sub(rx, template, role)
    raise KeyError(f"no qwentts.cpp name for role {role!r}")


#: the name the 0.2 writer exported
qwentts_name = tensor_name


#: 1x1 projections some converters store with their kernel axis (the loader reads them as matrices)
LINEAR_ROLE_ENDINGS = ("output_proj.weight", "input_proj.weight")


def file_array(role: str, a: np.ndarray) -> np.ndarray:
    """qwentts.cpp keeps the 1x1 conv's kernel axis on the codebooks' output projections."""
    if role.endswith("output_proj.weight") and role.startswith("vq.") and a.ndim == 2:
        return a[:, :, None]
    return a


def storage_type(role: str, shape: tuple[int, ...], outtype: str) -> str:
    """1-D tensors and codebooks F32; matrices per outtype (Q8_0 only on whole blocks)."""
    if len(shape) == 1 or role.endswith(".codebook") or outtype == "f32":
        return "F32"
    if outtype == "q8_0" and shape[-1] % 32 == 0 and not keeps_f16_in_q8_0(role):
        return "Q8_0"
    return "F16"


def metadata(hp: HParams, outtype: str = "f32", n_params: int = 0) -> dict[str, object]:
    p = f"{ARCHITECTURE}.decoder."
    return {
        f"{ARCHITECTURE}.output_sample_rate": hp.sample_rate,
        f"{ARCHITECTURE}.decode_upsample_rate": hp.total_upsample,
        p + "latent_dim": hp.latent_dim,
        p + "codebook_dim": hp.codebook_dim,
        p + "codebook_size": hp.codebook_size,
        p + "semantic_codebook_size": hp.semantic_codebook_size,
        p + "decoder_dim": hp.decoder_dim,
        p + "hidden_size": hp.hidden_size,
        p + "intermediate_size": hp.intermediate_size,
        p + "head_dim": hp.head_dim,
        p + "num_attention_heads": hp.num_heads,
        p + "num_key_value_heads": hp.num_kv_heads,
        p + "num_hidden_layers": hp.num_layers,
        p + "num_quantizers": hp.num_quantizers,
        p + "num_semantic_quantizers": hp.num_semantic_quantizers,
        p + "rms_norm_eps": float(hp.rms_norm_eps),
        p + "rope_theta": float(hp.rope_theta),
        p + "sliding_window": hp.sliding_window,
        p + "upsample_rates": list(hp.upsample_rates),
        p + "upsampling_ratios": list(hp.upsampling_ratios),
        p + "vector_quantization_hidden_dim": hp.codebook_dim,
        p + "codebook_dim_internal": hp.vq_dim,
    }


#: the 0.2 writer's name for the metadata
def hparam_metadata(hp: HParams) -> dict[str, object]:
    return metadata(hp)


PRESETS: dict[str, HParams] = {
    # the shipped Qwen3-TTS-Tokenizer-12Hz decoder (about 114 M parameters)
    "qwen3-tts-12hz": HParams(),
    # narrow widths with the same structure (the reference fixtures' tiny checkpoint)
    "qwen3-tts-12hz-tiny": HParams(
        codebook_size=64,
        semantic_codebook_size=64,
        vq_dim=16,
        codebook_dim=32,
        latent_dim=64,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=4,
        head_dim=16,
        decoder_dim=96,
    ),
}
#: the preset a family-wide synthetic uses (`kzlab synth --family`)
DEFAULT_PRESET = "qwen3-tts-12hz"


def hparams_from_config(path: str | Path) -> HParams:
    """HParams of a Hugging Face config.json (its decoder_config)."""
    cfg = json.loads(Path(path).read_text())
    d = cfg.get("decoder_config", cfg)
    return HParams(
        codebook_size=d["codebook_size"],
        semantic_codebook_size=d["codebook_size"],
        vq_dim=d["codebook_dim"] // 2,
        codebook_dim=d["codebook_dim"],
        num_quantizers=d["num_quantizers"],
        latent_dim=d["latent_dim"],
        hidden_size=d["hidden_size"],
        intermediate_size=d["intermediate_size"],
        num_layers=d["num_hidden_layers"],
        num_heads=d["num_attention_heads"],
        num_kv_heads=d["num_key_value_heads"],
        head_dim=d["head_dim"],
        sliding_window=d["sliding_window"],
        rope_theta=float(d["rope_theta"]),
        rms_norm_eps=float(d["rms_norm_eps"]),
        upsampling_ratios=tuple(d["upsampling_ratios"]),
        upsample_rates=tuple(d["upsample_rates"]),
        decoder_dim=d["decoder_dim"],
    )


def random_weight(role: Role, rng: np.random.Generator, hp: Any = None) -> np.ndarray:
    name, shape = role.name, role.shape
    f32 = np.float32
    if name.endswith(".codebook"):
        return rng.standard_normal(shape, dtype=f32)
    if name.endswith(".alpha") or name.endswith(".beta"):
        return rng.standard_normal(shape, dtype=f32) * f32(0.3)
    if name.endswith("_scale") or name.endswith(".gamma"):
        return rng.random(shape, dtype=f32) * f32(0.2) + f32(0.05)
    if "norm" in name and name.endswith("weight"):
        return f32(1.0) + f32(0.1) * rng.standard_normal(shape, dtype=f32)
    if name.endswith("bias"):
        return f32(0.05) * rng.standard_normal(shape, dtype=f32)
    if role.kind == "convt":
        fan_in = shape[0]
    else:
        fan_in = int(np.prod(shape[1:]))
    w = rng.standard_normal(shape, dtype=f32) / f32(np.sqrt(max(fan_in, 1)))
    if ".conv2." in name:
        w *= f32(0.3)
    if name.endswith(f"dec.{len(PRESETS['qwen3-tts-12hz'].upsample_rates) + 2}.conv.weight"):
        w *= f32(0.05)  # keeps the waveform well inside the clamp
    return w


#: built-in decoders: the tiny reference decoder shipped in kzlab/data, and two full-size ones written into the
#: cache on first use (seeded random weights; the same shapes with an exactly invertible vocoder path)
BUILTINS: dict[str, tuple[str, str]] = {
    "synthetic": ("synthetic", "qwen3-tts-12hz"),
    "known-answer": ("known-answer", "qwen3-tts-12hz"),
    "tiny": ("package", "qwen3-tts-12hz-tiny-f32.gguf"),
}


#: the module of this family's known-answer decoder (kzlab.formats.known_answer)
KNOWN_ANSWER = "kzlab.arch.qwen3_tts_12hz.known_answer"


def make_builtin(kind: str, preset: str, path: Path, dtype: str) -> Path:
    """Write a generated built-in decoder at `path`."""
    if kind == "known-answer":
        from kzlab.formats.known_answer import synth_known_answer

        return synth_known_answer(path, preset=preset, dtype=dtype, seed=0)
    from kzlab.formats.synth import synth

    return synth(path, preset=preset, dtype=dtype, seed=0)


def infer_layout(raw: Any, name: str | None = None) -> Any:
    """A layout map proposed from the file's structure (kzlab.arch.qwen3_tts_12hz.infer)."""
    from kzlab.arch.qwen3_tts_12hz.infer import infer_layout as infer

    return infer(raw, name)


def apply_overrides(hp: HParams, values: dict[str, Any], source: str = "") -> HParams:
    """Head count, window, rope theta, eps or sample rate given by the user or a layout map's [hparams]."""
    from kzlab.arch.qwen3_tts_12hz.infer import apply_overrides as apply

    return apply(hp, values, source)
