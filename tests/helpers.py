"""Test-only writers: files in third-party layouts that the repository does not ship."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import quantize

from kzlab.formats.reader import read_hf_dir

# HF name -> qwen3-tts.cpp name, following its convert_tokenizer_to_gguf.py (residual units keep the
# ModuleList index 2..4; codebooks and usage written as `{i}.codebook` / `{i}.usage`)
_Q3CPP = [
    (r"decoder\.pre_conv\.conv\.(weight|bias)", r"tok_dec.pre_conv.\1"),
    (r"decoder\.pre_transformer\.(input_proj|output_proj)\.(weight|bias)", r"tok_dec.pre_tfm.\1.\2"),
    (r"decoder\.pre_transformer\.norm\.weight", r"tok_dec.pre_tfm.norm.weight"),
    (r"decoder\.quantizer\.rvq_(first|rest)\.(input_proj|output_proj)\.weight", r"tok_dec.vq_\1.\2.weight"),
    (r"decoder\.decoder\.0\.conv\.(weight|bias)", r"tok_dec.dec.0.conv.\1"),
    (r"decoder\.decoder\.5\.(alpha|beta)", r"tok_dec.dec.5.snake.\1"),
    (r"decoder\.decoder\.6\.conv\.(weight|bias)", r"tok_dec.dec.6.conv.\1"),
    (r"decoder\.decoder\.(\d+)\.block\.0\.(alpha|beta)", r"tok_dec.dec.\1.snake.\2"),
    (r"decoder\.decoder\.(\d+)\.block\.1\.conv\.(weight|bias)", r"tok_dec.dec.\1.conv_t.\2"),
    (r"decoder\.decoder\.(\d+)\.block\.(\d+)\.(act1|act2)\.(alpha|beta)", r"tok_dec.dec.\1.res.\2.\3.\4"),
    (r"decoder\.decoder\.(\d+)\.block\.(\d+)\.(conv1|conv2)\.conv\.(weight|bias)", r"tok_dec.dec.\1.res.\2.\3.\4"),
    (r"decoder\.pre_transformer\.layers\.(\d+)\.input_layernorm\.weight", r"tok_dec.pre_tfm.blk.\1.attn_norm.weight"),
    (
        r"decoder\.pre_transformer\.layers\.(\d+)\.post_attention_layernorm\.weight",
        r"tok_dec.pre_tfm.blk.\1.ffn_norm.weight",
    ),
    (
        r"decoder\.pre_transformer\.layers\.(\d+)\.self_attn\.(q|k|v)_proj\.weight",
        r"tok_dec.pre_tfm.blk.\1.attn_\2.weight",
    ),
    (
        r"decoder\.pre_transformer\.layers\.(\d+)\.self_attn\.o_proj\.weight",
        r"tok_dec.pre_tfm.blk.\1.attn_output.weight",
    ),
    (r"decoder\.pre_transformer\.layers\.(\d+)\.self_attn_layer_scale\.scale", r"tok_dec.pre_tfm.blk.\1.attn_scale"),
    (
        r"decoder\.pre_transformer\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight",
        r"tok_dec.pre_tfm.blk.\1.ffn_\2.weight",
    ),
    (r"decoder\.pre_transformer\.layers\.(\d+)\.mlp_layer_scale\.scale", r"tok_dec.pre_tfm.blk.\1.ffn_scale"),
    (
        r"decoder\.quantizer\.rvq_(first|rest)\.vq\.layers\.(\d+)\._codebook\.embedding_sum",
        r"tok_dec.vq_\1.\2.codebook",
    ),
    (r"decoder\.quantizer\.rvq_(first|rest)\.vq\.layers\.(\d+)\._codebook\.cluster_usage", r"tok_dec.vq_\1.\2.usage"),
    (r"decoder\.upsample\.(\d+)\.0\.conv\.(weight|bias)", r"tok_dec.upsample.\1.conv.\2"),
    (r"decoder\.upsample\.(\d+)\.1\.dwconv\.conv\.(weight|bias)", r"tok_dec.upsample.\1.dwconv.\2"),
    (r"decoder\.upsample\.(\d+)\.1\.(norm|pwconv1|pwconv2)\.(weight|bias)", r"tok_dec.upsample.\1.\2.\3"),
    (r"decoder\.upsample\.(\d+)\.1\.gamma", r"tok_dec.upsample.\1.gamma"),
]
_KEEP_F16 = ("codebook", "_norm", "norm.", "scale", "alpha", "beta")


def _rename(name: str) -> str | None:
    for rx, rep in _Q3CPP:
        if re.fullmatch(rx, name):
            return re.sub(rx, rep, name)
    return None


def write_qwen3tts_cpp(hf_dir: Path, out: Path, outtype: str, usage: bool) -> Path:
    """Write hf/ as qwen3-tts.cpp's converter does: 1-D F32, 2-D+ per outtype (Q8_0 except norms,
    scales, snake and codebooks, which stay F16). usage=True keeps raw codebooks plus `*.usage` tensors
    (the older converter, divided by the loader); usage=False writes divided codebooks."""
    raw = read_hf_dir(Path(hf_dir))
    t = {k: v.data.astype(np.float32) for k, v in raw.tensors.items()}
    w = GGUFWriter(str(out), "qwen3-tts-tokenizer")
    cfg = raw.extra["config"]["decoder_config"]
    w.add_name("Qwen3-TTS-Tokenizer-12Hz")
    w.add_uint32("qwen3-tts-tokenizer.num_codebooks", cfg["num_quantizers"])
    w.add_uint32("qwen3-tts-tokenizer.codebook_size", cfg["codebook_size"])
    w.add_uint32("qwen3-tts-tokenizer.sample_rate", 24000)
    w.add_uint32("qwen3-tts-tokenizer.decoder.hidden_size", cfg["hidden_size"])
    w.add_uint32("qwen3-tts-tokenizer.decoder.num_layers", cfg["num_hidden_layers"])
    w.add_uint32("qwen3-tts-tokenizer.decoder.num_heads", cfg["num_attention_heads"])
    w.add_uint32("qwen3-tts-tokenizer.decoder.latent_dim", cfg["latent_dim"])
    w.add_uint32("qwen3-tts-tokenizer.decoder.codebook_dim", cfg["codebook_dim"])
    for name, a in t.items():
        if not name.startswith("decoder."):
            continue
        gname = _rename(name)
        if gname is None:
            raise KeyError(name)
        if name.endswith("cluster_usage") and not usage:
            continue
        if name.endswith("embedding_sum") and not usage:
            a = a / np.maximum(t[name.replace("embedding_sum", "cluster_usage")], 1e-5)[:, None]
        if a.ndim <= 1:
            w.add_tensor(gname, a.astype(np.float32))
        elif outtype == "f32":
            w.add_tensor(gname, a)
        elif outtype == "q8_0" and not any(k in gname for k in _KEEP_F16) and a.shape[-1] % 32 == 0:
            q = quantize(a.reshape(-1, a.shape[-1]), GGMLQuantizationType.Q8_0)
            w.add_tensor(gname, q.reshape(*a.shape[:-1], -1), raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(gname, a.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def bf16_values_in_f32(f32, bf16):
    """The F32 file's Model with each weight the BF16 file holds as BF16 replaced by the F32 value rounded to BF16
    as the converter rounds (to nearest, ties to even: kzlab.graph.prepared.encode) and widened back to F32: the
    BF16 file's own values, to be decoded in F32 arithmetic (the floor those values set)."""
    import dataclasses

    from kzlab.graph.prepared import encode
    from kzlab.model.model import Weight, to_f32

    weights = dict(f32.weights)
    for role, w in bf16.weights.items():
        if w.type == "BF16":
            v = to_f32("BF16", encode(f32.weights[role].f32(), "BF16"), w.shape)
            weights[role] = Weight(role, w.source, "F32", w.shape, v)
    return dataclasses.replace(f32, weights=weights)


def cpu_perf_at_this_machines_libm() -> dict:
    """The CPU's [perf] table with `libm_skew` fixed at 1: the CPU's libm ops priced as profiled. For tests about
    other parameters, which a libmvec build of ggml would otherwise confound with CPU.libm_skew (the device's scalar
    libm; tested on its own in test_whatif)."""
    from kzlab.analysis.placement import capabilities

    return {**capabilities.load("cpu").perf, "libm_skew": 1.0}
