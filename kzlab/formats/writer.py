"""Write a decoder as a GGUF file in qwentts.cpp's layout (so the file also runs there).

Used by `kzlab convert` (Hugging Face checkpoint -> GGUF) and `kzlab synth` (synthetic decoders). The file
is written to a temporary name beside the target and renamed at the end: an interrupted write never leaves
a truncated GGUF under the requested name.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from kzlab.arch.qwen3_tts_12hz.hparams import HParams
from kzlab.arch.qwen3_tts_12hz.roles import keeps_f16_in_q8_0
from kzlab.errors import InvalidOptionError

ARCH = "qwen3-tts-tokenizer"
OUTTYPES = ("f32", "f16", "q8_0")

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


def qwentts_name(role: str) -> str:
    for rx, template in _TO_QWENTTS:
        if re.fullmatch(rx, role):
            return re.sub(rx, template, role)
    raise KeyError(f"no qwentts.cpp name for role {role!r}")


def storage_type(role: str, shape: tuple[int, ...], outtype: str) -> str:
    """The stored type for one tensor: 1-D and codebooks F32; matrices per outtype (Q8_0 only on whole blocks)."""
    if outtype not in OUTTYPES:
        raise InvalidOptionError(f"outtype {outtype!r}: expected one of {', '.join(OUTTYPES)}")
    if len(shape) == 1 or role.endswith(".codebook") or outtype == "f32":
        return "F32"
    if outtype == "q8_0" and shape[-1] % 32 == 0 and not keeps_f16_in_q8_0(role):
        return "Q8_0"
    return "F16"


def hparam_metadata(hp: HParams) -> dict[str, object]:
    p = f"{ARCH}.decoder."
    return {
        f"{ARCH}.output_sample_rate": hp.sample_rate,
        f"{ARCH}.decode_upsample_rate": hp.total_upsample,
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


def write_gguf(
    path: str | Path,
    hp: HParams,
    tensors: Iterable[tuple[str, Callable[[], np.ndarray]]],
    outtype: str = "f32",
    name: str = "Qwen3-TTS-Tokenizer-12Hz",
    extra_metadata: dict[str, object] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write canonical tensors (role, float32 producer in PyTorch order) as a qwentts-layout GGUF, atomically."""
    from gguf import GGMLQuantizationType, GGUFWriter
    from gguf.quants import quantize

    if outtype not in OUTTYPES:
        raise InvalidOptionError(f"outtype {outtype!r}: expected one of {', '.join(OUTTYPES)}")
    out = Path(path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".part", dir=out.parent)
    os.close(fd)
    try:
        w = GGUFWriter(tmp, ARCH)
        w.add_name(name)
        for k, v in {**hparam_metadata(hp), **(extra_metadata or {})}.items():
            if isinstance(v, bool):
                w.add_bool(k, v)
            elif isinstance(v, int):
                w.add_uint32(k, v)
            elif isinstance(v, float):
                w.add_float32(k, v)
            elif isinstance(v, str):
                w.add_string(k, v)
            elif isinstance(v, list):
                w.add_array(k, v)
        for role, produce in tensors:
            a = np.ascontiguousarray(produce(), dtype=np.float32)
            if role.endswith("output_proj.weight") and role.startswith("vq."):
                a = a[:, :, None]  # qwentts.cpp keeps the 1x1 conv's kernel axis
            t = storage_type(role, a.shape, outtype)
            gname = qwentts_name(role)
            if t == "F32":
                w.add_tensor(gname, a)
            elif t == "F16":
                w.add_tensor(gname, a.astype(np.float16))
            else:
                q = quantize(a.reshape(-1, a.shape[-1]), GGMLQuantizationType.Q8_0)
                w.add_tensor(gname, q.reshape(*a.shape[:-1], -1), raw_dtype=GGMLQuantizationType.Q8_0)
            if progress:
                progress(role)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
