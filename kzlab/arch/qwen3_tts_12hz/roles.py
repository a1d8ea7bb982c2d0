"""Canonical tensor roles of the decoder and the shape each one must have.

Every file dialect is mapped onto these names; graph builders only ever see them. Shapes are in PyTorch
order (numpy order of the GGUF data: the reverse of ggml's ne): conv [c_out, c_in, k], conv-transpose
[c_in, c_out, k], linear [out, in], codebook [size, dim].
"""

from __future__ import annotations

import numpy as np

from kzlab.arch.qwen3_tts_12hz.hparams import HParams
from kzlab.model.model import Role, Weight


def decoder_roles(hp: HParams) -> list[Role]:
    """All roles of a decoder with these hyperparameters, in graph order."""
    r: list[Role] = []
    add = lambda name, shape, kind, optional=False: r.append(Role(name, tuple(shape), kind, optional))  # noqa: E731
    add("vq.first.codebook", (hp.semantic_codebook_size, hp.vq_dim), "codebook")
    add("vq.first.usage", (hp.semantic_codebook_size,), "usage", True)
    add("vq.first.output_proj.weight", (hp.codebook_dim, hp.vq_dim), "linear")
    for i in range(hp.num_quantizers - 1):
        add(f"vq.rest.{i}.codebook", (hp.codebook_size, hp.vq_dim), "codebook")
        add(f"vq.rest.{i}.usage", (hp.codebook_size,), "usage", True)
    add("vq.rest.output_proj.weight", (hp.codebook_dim, hp.vq_dim), "linear")
    add("pre_conv.weight", (hp.latent_dim, hp.codebook_dim, 3), "conv")
    add("pre_conv.bias", (hp.latent_dim,), "vector")
    H, L, Dq, Dkv = hp.hidden_size, hp.latent_dim, hp.num_heads * hp.head_dim, hp.num_kv_heads * hp.head_dim
    add("tfm.input_proj.weight", (H, L), "linear")
    add("tfm.input_proj.bias", (H,), "vector")
    for i in range(hp.num_layers):
        p = f"tfm.blk.{i}."
        add(p + "attn_norm.weight", (H,), "vector")
        add(p + "attn_q.weight", (Dq, H), "linear")
        add(p + "attn_k.weight", (Dkv, H), "linear")
        add(p + "attn_v.weight", (Dkv, H), "linear")
        add(p + "attn_o.weight", (H, Dq), "linear")
        add(p + "attn_scale", (H,), "vector")
        add(p + "ffn_norm.weight", (H,), "vector")
        add(p + "ffn_gate.weight", (hp.intermediate_size, H), "linear")
        add(p + "ffn_up.weight", (hp.intermediate_size, H), "linear")
        add(p + "ffn_down.weight", (H, hp.intermediate_size), "linear")
        add(p + "ffn_scale", (H,), "vector")
    add("tfm.norm.weight", (H,), "vector")
    add("tfm.output_proj.weight", (L, H), "linear")
    add("tfm.output_proj.bias", (L,), "vector")
    for i, f in enumerate(hp.upsampling_ratios):
        p = f"up.{i}."
        add(p + "convt.weight", (L, L, f), "convt")
        add(p + "convt.bias", (L,), "vector")
        add(p + "dwconv.weight", (L, 1, 7), "dwconv")
        add(p + "dwconv.bias", (L,), "vector")
        add(p + "norm.weight", (L,), "vector")
        add(p + "norm.bias", (L,), "vector")
        add(p + "pw1.weight", (4 * L, L), "linear")
        add(p + "pw1.bias", (4 * L,), "vector")
        add(p + "pw2.weight", (L, 4 * L), "linear")
        add(p + "pw2.bias", (L,), "vector")
        add(p + "gamma", (L,), "vector")
    add("dec.0.conv.weight", (hp.decoder_dim, L, 7), "conv")
    add("dec.0.conv.bias", (hp.decoder_dim,), "vector")
    for b in range(1, hp.n_blocks + 1):
        cin, cout = hp.block_channels(b)
        rate = hp.upsample_rates[b - 1]
        p = f"dec.{b}."
        add(p + "snake.alpha", (cin,), "vector")
        add(p + "snake.beta", (cin,), "vector")
        add(p + "convt.weight", (cin, cout, 2 * rate), "convt")
        add(p + "convt.bias", (cout,), "vector")
        for j in range(3):
            q = f"{p}res.{j}."
            add(q + "act1.alpha", (cout,), "vector")
            add(q + "act1.beta", (cout,), "vector")
            add(q + "conv1.weight", (cout, cout, 7), "conv")
            add(q + "conv1.bias", (cout,), "vector")
            add(q + "act2.alpha", (cout,), "vector")
            add(q + "act2.beta", (cout,), "vector")
            add(q + "conv2.weight", (cout, cout, 1), "conv")
            add(q + "conv2.bias", (cout,), "vector")
    last = hp.n_blocks + 1
    add(f"dec.{last}.snake.alpha", (hp.out_channels,), "vector")
    add(f"dec.{last}.snake.beta", (hp.out_channels,), "vector")
    add(f"dec.{last + 1}.conv.weight", (1, hp.out_channels, 7), "conv")
    add(f"dec.{last + 1}.conv.bias", (1,), "vector")
    return r


RESIDUAL_DILATIONS = (1, 3, 9)


#: matrices kept F16 when a decoder is quantized to Q8_0 (in a written file or requantized at load): the
#: projections into and out of the transformer carry the whole latent, and the transposed convs' weights
#: (which a qwentts.cpp file stores with the kernel axis last, never in whole Q8_0 blocks). Measured on the
#: tiny fixture, requantizing them too costs 18 dB of output SNR (45 -> 27 dB).
Q8_0_KEEP_F16 = ("tfm.input_proj.weight", "tfm.output_proj.weight")


def keeps_f16_in_q8_0(role: str) -> bool:
    return role in Q8_0_KEEP_F16 or role.endswith("convt.weight")


def divide_codebooks(weights: dict[str, Weight], hp: HParams) -> None:
    """Codebooks stored as (embedding_sum, cluster_usage) become embedding_sum / max(usage, 1e-5)."""
    for prefix in ["vq.first"] + [f"vq.rest.{i}" for i in range(hp.num_quantizers - 1)]:
        usage = weights.pop(f"{prefix}.usage", None)
        if usage is None:
            continue
        cb = weights[f"{prefix}.codebook"]
        divided = cb.f32() / np.maximum(usage.f32(), 1e-5)[:, None]
        weights[f"{prefix}.codebook"] = Weight(cb.role, cb.source, "F32", cb.shape, divided.astype(np.float32))
