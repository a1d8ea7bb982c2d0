"""Synthetic decoders: the shipped shapes with seeded random weights, for speed work and demos.

The weights follow the reference fixtures' recipe (fan-in scaled convolutions, small residual branches,
layer scales of 0.05-0.25, snake parameters around 0) so that activations stay in range through all
blocks and the output is bounded noise, like a real decoder's numerics, not speech.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from kzlab.arch.qwen3_tts_12hz.hparams import HParams
from kzlab.arch.qwen3_tts_12hz.roles import decoder_roles
from kzlab.errors import InvalidOptionError
from kzlab.formats.writer import write_gguf
from kzlab.model.model import Role

PRESETS = {
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


def random_weight(role: Role, rng: np.random.Generator) -> np.ndarray:
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


def synth(
    out: str | Path,
    preset: str = "qwen3-tts-12hz",
    dtype: str = "f16",
    seed: int = 0,
    hparams: HParams | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write a random-weight decoder of the preset's shapes as a GGUF (qwentts.cpp layout)."""
    if hparams is None:
        if preset not in PRESETS:
            raise InvalidOptionError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        hparams = PRESETS[preset]
    rng = np.random.default_rng(seed)
    roles = [r for r in decoder_roles(hparams) if not r.optional]
    tensors = [(r.name, (lambda r=r: random_weight(r, rng))) for r in roles]
    return write_gguf(
        out,
        hparams,
        tensors,
        outtype=dtype,
        name=f"kzlab synthetic {preset} (seed {seed})",
        extra_metadata={"kzlab.synthetic": True, "kzlab.seed": seed},
        progress=progress,
    )
