"""Mimi's file half (kzlab.formats.family_files): the GGUFs kzlab writes for it, its synthetic presets and random
weights, its built-in decoders and its layout inference.

A Mimi decoder of codes is written in codec.cpp's layout (`scripts/convert-to-gguf.py --model-type mimi` at
c5ef02b1: `general.architecture = mimi`, `dec.l*`, `dtr.l*`, `q.s.*`/`q.a.*`, the 15 `codec.*` keys, the upsample
stored as a dense diagonal kernel; tests/data/mimi-tiny/UPSTREAM.md, section 2); a PocketTTS decoder (latents in)
in llama.cpp's mmproj layout (conversion/pockettts.py at 0c1e5709: `a.gen.wav.*`, `a.gen.emb_*`, the
`clip.gen.audio.*` keys; its decoder tensors only, no flow LM). Both are read back by the built-in maps
(`layouts/codeccpp_mimi.toml`, `layouts/llamacpp_pockettts.toml`), and their storage types are those converters'.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import numpy as np

from kzlab.arch.mimi.spec import MimiHParams
from kzlab.model.model import Role

#: the architecture of a file of codes (codec.cpp's); a PocketTTS file is a clip (mmproj) file (`architecture`)
ARCHITECTURE = "mimi"
DEFAULT_NAME = "Mimi"
#: 1x1 projections some converters store with their kernel axis (read as matrices)
LINEAR_ROLE_ENDINGS = ("output_proj.weight",)
#: llama.cpp's general.file_type per outtype (ALL_F32, MOSTLY_F16, MOSTLY_Q8_0)
_FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7}


# ---- codec.cpp's names (codes) and llama.cpp's mmproj names (latents) -------------------------------------------
_TO_CODECCPP: list[tuple[str, str]] = [
    (r"vq\.semantic\.(\d+)\.codebook", r"q.s.layers.\1.cb.es"),
    (r"vq\.acoustic\.(\d+)\.codebook", r"q.a.layers.\1.cb.es"),
    (r"vq\.semantic\.(\d+)\.usage", r"q.s.layers.\1.cb.cu"),
    (r"vq\.acoustic\.(\d+)\.usage", r"q.a.layers.\1.cb.cu"),
    (r"vq\.semantic\.output_proj\.weight", "q.s.op.w"),
    (r"vq\.acoustic\.output_proj\.weight", "q.a.op.w"),
    (r"upsample\.dwconv\.weight", "up.cv.w"),
    (r"tfm\.blk\.(\d+)\.attn_norm\.(w)eight", r"dtr.l\1.inln.\2"),
    (r"tfm\.blk\.(\d+)\.attn_norm\.(b)ias", r"dtr.l\1.inln.\2"),
    (r"tfm\.blk\.(\d+)\.ffn_norm\.(w)eight", r"dtr.l\1.paln.\2"),
    (r"tfm\.blk\.(\d+)\.ffn_norm\.(b)ias", r"dtr.l\1.paln.\2"),
    (r"tfm\.blk\.(\d+)\.attn_(q|k|v|o)\.weight", r"dtr.l\1.attn.\2_proj.w"),
    (r"tfm\.blk\.(\d+)\.attn_scale", r"dtr.l\1.sa_ls.scale"),
    (r"tfm\.blk\.(\d+)\.ffn_scale", r"dtr.l\1.mlp_ls.scale"),
    (r"tfm\.blk\.(\d+)\.ffn_up\.weight", r"dtr.l\1.mlp.fc1.w"),
    (r"tfm\.blk\.(\d+)\.ffn_down\.weight", r"dtr.l\1.mlp.fc2.w"),
    # upstream's flat decoder.layers list: conv, then per ratio ELU, transposed conv, residual unit
]
_TO_MMPROJ: list[tuple[str, str]] = [
    (r"latent\.emb_(mean|std)", r"a.gen.emb_\1"),
    (r"latent\.output_proj\.weight", "a.gen.wav.quant_out.weight"),
    (r"upsample\.dwconv\.weight", "a.gen.wav.upsample.weight"),
    (r"tfm\.blk\.(\d+)\.attn_norm\.(weight|bias)", r"a.gen.wav.tfm.blk.\1.ln1.\2"),
    (r"tfm\.blk\.(\d+)\.ffn_norm\.(weight|bias)", r"a.gen.wav.tfm.blk.\1.ln2.\2"),
    (r"tfm\.blk\.(\d+)\.attn_(q|k|v)\.weight", r"a.gen.wav.tfm.blk.\1.attn_\2.weight"),
    (r"tfm\.blk\.(\d+)\.attn_o\.weight", r"a.gen.wav.tfm.blk.\1.attn_out.weight"),
    (r"tfm\.blk\.(\d+)\.attn_scale", r"a.gen.wav.tfm.blk.\1.ls1.weight"),
    (r"tfm\.blk\.(\d+)\.ffn_scale", r"a.gen.wav.tfm.blk.\1.ls2.weight"),
    (r"tfm\.blk\.(\d+)\.ffn_(up|down)\.weight", r"a.gen.wav.tfm.blk.\1.ffn_\2.weight"),
]


class FileLayout:
    """How kzlab writes one Mimi decoder: codec.cpp's file for codes, llama.cpp's mmproj (decoder tensors only)
    for latents (kzlab.formats.writer asks `layout_for(hp)`)."""

    def __init__(self, hp: MimiHParams):
        self.hp = hp
        self.latent = hp.input == "latent"
        self.architecture = "clip" if self.latent else ARCHITECTURE

    def tensor_name(self, role: str) -> str:
        nb = self.hp.n_blocks
        m = re.fullmatch(r"dec\.(\d+)\.(conv|convt)\.(weight|bias)", role)
        r = re.fullmatch(r"dec\.(\d+)\.res\.0\.conv(1|2)\.(weight|bias)", role)
        if self.latent:
            if m and m.group(2) == "conv":
                return f"a.gen.wav.seanet.conv_{'in' if m.group(1) == '0' else 'out'}.{m.group(3)}"
            if m:
                return f"a.gen.wav.seanet.blk.{int(m.group(1)) - 1}.scale_conv.{m.group(3)}"
            if r:
                return f"a.gen.wav.seanet.blk.{int(r.group(1)) - 1}.res_conv{r.group(2)}.{r.group(3)}"
            table = _TO_MMPROJ
        else:
            if m:
                j = int(m.group(1))
                idx = 0 if j == 0 else (3 * nb + 2 if j == nb + 1 else 3 * j - 1)
                return f"dec.l{idx}.conv.{m.group(3)[0]}"
            if r:
                return f"dec.l{3 * int(r.group(1))}.block.{1 if r.group(2) == '1' else 3}.conv.{r.group(3)[0]}"
            table = _TO_CODECCPP
        for rx, template in table:
            if re.fullmatch(rx, role):
                return re.sub(rx, template, role)
        raise KeyError(f"no file name for Mimi role {role!r}")

    def file_array(self, role: str, a: np.ndarray) -> np.ndarray:
        """codec.cpp stores the depthwise upsample as a dense diagonal kernel [C, C, K]."""
        if role == "upsample.dwconv.weight" and not self.latent:
            C, _, K = a.shape
            dense = np.zeros((C, C, K), np.float32)
            dense[np.arange(C), np.arange(C), :] = a[:, 0, :]
            return dense
        return a

    def storage_type(self, role: str, shape: tuple[int, ...], outtype: str) -> str:
        """codec.cpp: all F32, all F16, or Q8_0 for its `.w` matrices whose rows are whole blocks (F16 the rest).
        llama.cpp's mmproj: every conv kernel and the upsample F16 at every outtype, 1-D tensors F32, the matrices
        in the outtype."""
        if self.latent:
            if len(shape) == 3:
                return "F16"
            if len(shape) <= 1 or outtype == "f32":
                return "F32"
            return "Q8_0" if outtype == "q8_0" and shape[-1] % 32 == 0 else "F16"
        if outtype == "f32":
            return "F32"
        name = self.tensor_name(role)
        if outtype == "q8_0" and name.endswith(".w") and len(shape) >= 2 and shape[-1] % 32 == 0:
            return "Q8_0"
        return "F16"


def layout_for(hp: MimiHParams) -> FileLayout:
    return FileLayout(hp)


def tensor_name(role: str) -> str:
    """A codes decoder's codec.cpp name (kyutai/mimi's four ratios); `layout_for(hp)` names any decoder's."""
    return FileLayout(MimiHParams()).tensor_name(role)


def file_array(role: str, a: np.ndarray) -> np.ndarray:
    return FileLayout(MimiHParams()).file_array(role, a)


def storage_type(role: str, shape: tuple[int, ...], outtype: str) -> str:
    return FileLayout(MimiHParams()).storage_type(role, shape, outtype)


def metadata(hp: MimiHParams, outtype: str = "f32", n_params: int = 0) -> dict[str, object]:
    if hp.input == "codes":
        return {
            "codec.sample_rate": hp.sample_rate, "codec.hop_size": hp.samples_per_frame,
            "codec.n_q": hp.file_quantizers, "codec.num_semantic_quantizers": hp.num_semantic,
            "codec.codebook_size": hp.codebook_size, "codec.codebook_dim": hp.codebook_dim,
            "codec.latent_dim": hp.hidden, "codec.num_hidden_layers": hp.num_layers,
            "codec.num_attention_heads": hp.num_heads, "codec.head_dim": hp.head_dim,
            "codec.intermediate_size": hp.intermediate_size, "codec.has_encoder": False, "codec.has_decoder": True,
        }
    p = "clip.gen.audio."
    return {
        "general.type": "mmproj", "general.file_type": _FILE_TYPE[outtype], "clip.has_gen_audio_encoder": True,
        p + "projector_type": "pockettts_gen", p + "embedding_length": hp.hidden,
        p + "feed_forward_length": hp.intermediate_size, p + "block_count": hp.num_layers,
        p + "attention.head_count": hp.num_heads, p + "attention.layer_norm_epsilon": float(hp.norm_eps),
    }


PRESETS: dict[str, MimiHParams] = {
    # kyutai/mimi (transformers' MimiConfig defaults): 32 codebooks of 2048 x 256, 8 layers of 512, SEANet 1024 -> 64
    "mimi": MimiHParams(),
    # the tiny fixture's sizes (tests/data/mimi-tiny)
    "mimi-tiny": MimiHParams(codebook_size=64, codebook_dim=16, hidden=64, num_layers=2, num_heads=4, head_dim=16,
                             intermediate_size=128, seanet_channels=64),
    # PocketTTS's decoder (pocket_tts/config/english.yaml): latents of 32, width 512, 2 layers of 8 heads, ratios
    # 6, 5, 4 from 200 Hz, interleaved RoPE, GELU tanh
    "pockettts-mimi": MimiHParams(input="latent", num_quantizers=0, file_quantizers=0, num_semantic=0,
                                  codebook_size=0, codebook_dim=0, latent_dim=32, hidden=512, num_layers=2,
                                  num_heads=8, head_dim=64, intermediate_size=2048, rope_interleaved=1, gelu_tanh=1,
                                  upsample_stride=16, upsample_kernel=32, seanet_channels=512, ratios=(6, 5, 4)),
}
PRESETS["pockettts-mimi-tiny"] = dataclasses.replace(
    PRESETS["pockettts-mimi"], hidden=128, num_heads=2, intermediate_size=256, seanet_channels=64
)
DEFAULT_PRESET = "mimi"


def random_weight(role: Role, rng: np.random.Generator, hp: Any = None) -> np.ndarray:
    """The fixtures' recipe (tests/data/mimi-tiny/make_mimi_tiny.py `randomize`): conv kernels N(0, gain/sqrt(fan
    in)) (gain sqrt 2 after an ELU, 1 for transposed convs, 0.5 for a residual branch's last conv, 0.25 for the
    waveform conv), biases U(-0.1, 0.1), linears N(0, 1/sqrt(fan in)), LayerNorms 1 + N(0, 0.1) and N(0, 0.1),
    layer scales U(0.2, 0.6), codebooks of RMS ~1 per branch (acoustic rows / sqrt(n)), latents' std U(0.5, 1.5)
    and mean N(0, 0.3). Activations stay of order 1 through every block."""
    name, shape = role.name, role.shape
    f32 = np.float32

    def n(std: float, mean: float = 0.0) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=f32) * f32(std) + f32(mean)).astype(f32)

    def u(lo: float, hi: float) -> np.ndarray:
        return (rng.random(shape, dtype=f32) * f32(hi - lo) + f32(lo)).astype(f32)

    if name.endswith(".codebook"):
        n_ac = max(1, (hp.file_quantizers - hp.num_semantic) if hp is not None else 31)
        return n(1.0 if ".semantic." in name else 1.0 / np.sqrt(n_ac))
    if name.endswith(".usage"):
        return u(0.5, 2.0)
    if name == "latent.emb_std":
        return u(0.5, 1.5)
    if name == "latent.emb_mean":
        return n(0.3)
    if name.endswith("_scale"):
        return u(0.2, 0.6)
    if "_norm." in name:
        return n(0.1, 1.0) if name.endswith(".weight") else n(0.1)
    if name.endswith(".bias"):
        return u(-0.1, 0.1)
    if role.kind == "linear":
        return n(1.0 / np.sqrt(shape[1]))
    if role.kind == "dwconv":
        return n(1.0 / np.sqrt(max(shape[2] / max(hp.upsample_stride if hp else 2, 1), 1.0)))
    if role.kind == "convt":
        return n(1.0 / np.sqrt(shape[0] * shape[2] / max(shape[2] // 2, 1)))
    fan_in = shape[1] * shape[2]
    gain = np.sqrt(2.0)
    if name.endswith("conv2.weight"):
        gain = 0.5
    elif shape[0] == 1:
        gain = 0.25
    return n(gain / np.sqrt(fan_in))


#: built-in decoders: the tiny fixtures shipped in kzlab/data (codec.cpp's F32 file of tests/data/mimi-tiny, CrispASR's
#: file of tests/data/pockettts-tiny) and the full-size synthetics, written into the cache on first use
BUILTINS: dict[str, tuple[str, str]] = {
    "mimi-tiny": ("package", "mimi-tiny-f32.gguf"),
    "pockettts-tiny": ("package", "pockettts-tiny-f16.gguf"),
    "mimi-synthetic": ("synthetic", "mimi"),
    "pockettts-synthetic": ("synthetic", "pockettts-mimi"),
}


def make_builtin(kind: str, preset: str, path: Path, dtype: str) -> Path:
    from kzlab.formats.synth import synth

    return synth(path, preset=preset, dtype=dtype, seed=0)


def infer_layout(raw: Any, name: str | None = None) -> Any:
    from kzlab.arch.mimi.infer import infer_layout as infer

    return infer(raw, name)


#: hyperparameters a file may not carry, given by the user or a layout map: name -> type. Widths, counts,
#: kernels and ratios come from the tensor shapes and cannot be given. `num_quantizers`: the codebooks a decode
#: uses (Moshi decodes 8 of kyutai/mimi's 32), at most the file's.
OVERRIDABLE: dict[str, type] = {
    "num_quantizers": int, "num_heads": int, "context": int, "rope_theta": float, "rope_interleaved": int,
    "gelu_tanh": int, "norm_eps": float, "sample_rate": int, "dilation_base": int,
}


def apply_overrides(hp: MimiHParams, values: dict[str, Any], source: str = "") -> MimiHParams:
    """`values` (checked against OVERRIDABLE) applied to `hp`; what the graph cannot honour is refused naming it."""
    import math

    from kzlab.errors import InvalidOptionError
    from kzlab.formats.given import coerce

    v = coerce(values, OVERRIDABLE, "a Mimi decoder", source)
    where = f"{source}: " if source else ""
    if "num_quantizers" in v:
        if hp.input != "codes":
            raise InvalidOptionError(f"{where}num_quantizers: this decoder takes latents, not codes")
        if not 1 <= v["num_quantizers"] <= hp.file_quantizers:
            raise InvalidOptionError(f"{where}num_quantizers={v['num_quantizers']}: the file has "
                                     f"{hp.file_quantizers} codebooks (1 to {hp.file_quantizers})")
    if "num_heads" in v:
        width = hp.num_heads * hp.head_dim
        if v["num_heads"] < 1 or width % v["num_heads"] or (width // v["num_heads"]) % 2:
            raise InvalidOptionError(f"{where}num_heads={v['num_heads']} does not split the width {width} into "
                                     "heads of an even size")
        v["head_dim"] = width // v["num_heads"]
    for k in ("context", "sample_rate", "dilation_base"):
        if k in v and v[k] < 1:
            raise InvalidOptionError(f"{where}{k}={v[k]}: expected an integer >= 1")
    for k in ("rope_interleaved", "gelu_tanh"):
        if k in v and v[k] not in (0, 1):
            raise InvalidOptionError(f"{where}{k}={v[k]}: expected 0 or 1")
    for k in ("rope_theta", "norm_eps"):
        if k in v:
            if not (math.isfinite(v[k]) and 0 < v[k] <= float(np.finfo(np.float32).max)):
                raise InvalidOptionError(f"{where}{k}={v[k]}: expected a number > 0 that a float32 holds")
            v[k] = float(np.float32(v[k]))
    return dataclasses.replace(hp, **v)
