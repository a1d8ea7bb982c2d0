#!/usr/bin/env python
"""Make the tiny random-weight Mimi fixture (tests/data/mimi-tiny/).

Builds a transformers ``MimiModel`` (transformers 4.57.3, the bench extra's pin) with kyutai/mimi's structure
and narrow widths, gives it seeded random weights of moderate scale (activations of order 1 through every
block), saves the HF directory (``hf/config.json`` + ``hf/model.safetensors``), reloads it from disk and writes
``reference.npz``: seeded codes [32, T] and the upstream output of every stage of the decode path.

Offline, CPU, fp32, eager attention, deterministic (run it twice: byte-identical safetensors, identical arrays).

    /work/peers/torch-venv/bin/python tests/data/mimi-tiny/make_mimi_tiny.py [--out tests/data/mimi-tiny]

The config keeps every structural value of kyutai/mimi (MimiConfig's defaults, which are kyutai/mimi's
config.json values) and changes only widths; see CHANGED below and README.md.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch
import transformers
from torch import nn
from transformers import MimiConfig, MimiModel
from transformers.models.mimi import modeling_mimi as mm

SEED = 20240917
CODES_SEED = 7
N_FRAMES = 20
LAST_GAIN = 0.25
RES_OUT_GAIN = 0.5

# kyutai/mimi values kept as they are (transformers' MimiConfig defaults; kyutai/mimi's config.json).
KEPT = dict(
    sampling_rate=24000,
    frame_rate=12.5,  # kyutai/mimi's config.json stores it; codec.cpp's converter reads it for codec.hop_size
    audio_channels=1,
    num_residual_layers=1,
    upsampling_ratios=[8, 6, 5, 4],  # real ratios: strides 8, 6, 5, 4 (codec.cpp hard-codes them too)
    kernel_size=7,
    last_kernel_size=3,
    residual_kernel_size=3,
    dilation_growth_rate=2,
    use_causal_conv=True,
    pad_mode="constant",
    compress=2,
    trim_right_ratio=1.0,
    num_quantizers=32,  # 1 semantic + 31 acoustic
    num_semantic_quantizers=1,
    use_conv_shortcut=False,
    num_key_value_heads=None,  # filled below = num_attention_heads (MHA, as kyutai/mimi: 8 and 8)
    hidden_act="gelu",  # exact (erf) GELU
    max_position_embeddings=8000,
    norm_eps=1e-5,
    rope_theta=10000.0,
    sliding_window=250,  # kept; 2 * N_FRAMES = 40 < 250, so a windowed and a plain causal decode agree here
    attention_bias=False,
    use_cache=False,
    use_streaming=False,
)

# Changed from kyutai/mimi, only to make the checkpoint tiny (value here <- kyutai/mimi's).
CHANGED = dict(
    hidden_size=64,  # <- 512: transformer width and latent; a multiple of 32 so codec.cpp's Q8_0 applies
    num_filters=4,  # <- 64: SEANet widths 64 -> 32 -> 16 -> 8 -> 4 (kyutai: 1024 -> ... -> 64)
    codebook_size=64,  # <- 2048 (must stay a power of two)
    codebook_dim=16,  # <- 256
    vector_quantization_hidden_dimension=16,  # <- 256 (equals codebook_dim, as in kyutai/mimi)
    upsample_groups=64,  # <- 512: = hidden_size, so the 12.5 -> 25 Hz upsample stays depthwise
    num_hidden_layers=2,  # <- 8
    num_attention_heads=4,  # <- 8
    head_dim=16,  # <- 64
    intermediate_size=128,  # <- 2048
    layer_scale_initial_scale=0.01,  # unchanged value; the generator overwrites the scales with random ones
)


def make_config() -> MimiConfig:
    kw = dict(KEPT)
    kw.update(CHANGED)
    kw["num_key_value_heads"] = kw["num_attention_heads"]
    cfg = MimiConfig(**kw)
    cfg.architectures = ["MimiModel"]
    assert cfg.frame_rate == 12.5 and cfg.encodec_frame_rate == 25
    return cfg


def _normal(gen: torch.Generator, shape, std: float) -> torch.Tensor:
    return torch.randn(shape, generator=gen, dtype=torch.float32) * std


def _uniform(gen: torch.Generator, shape, lo: float, hi: float) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float32)


@torch.no_grad()
def randomize(model: MimiModel, cfg: MimiConfig, seed: int) -> None:
    """Seeded weights of moderate scale, module by module in named_modules() order.

    Convs: N(0, gain / sqrt(fan_in)) with fan_in the taps an output sample sees (in/groups * k, divided by the
    stride for a transposed conv), gain sqrt(2) after an ELU (1 for the transposed convs, RES_OUT_GAIN for a
    residual branch's last conv); biases U(-0.1, 0.1). The last conv (to the waveform) has gain LAST_GAIN so that
    the wav stays inside [-1, 1]. Linears N(0, 1/sqrt(fan_in)). LayerNorms weight 1 + N(0, 0.1), bias
    N(0, 0.1). Layer scales U(0.2, 0.6) per channel (the config's 0.01 would all but hide the transformer).
    Codebooks: embed_sum = e * usage with e ~ N(0, s), usage ~ U(0.5, 2.0) (so dividing by the usage matters),
    s = 1 for the semantic codebook and 1/sqrt(31) for each acoustic one, so both branches give latents of RMS ~1.
    """
    gen = torch.Generator().manual_seed(seed)
    last_conv = model.decoder.layers[-1].conv
    for name, mod in model.named_modules():
        if isinstance(mod, nn.ConvTranspose1d):
            cin, cout_g, k = mod.weight.shape
            fan_in = (cin // mod.groups) * k / mod.stride[0]
            gain = 1.0  # depthwise 12.5 -> 25 Hz upsample and the SEANet transposed convs (after an ELU)
            mod.weight.copy_(_normal(gen, mod.weight.shape, gain / math.sqrt(fan_in)))
            if mod.bias is not None:
                mod.bias.copy_(_uniform(gen, mod.bias.shape, -0.1, 0.1))
        elif isinstance(mod, nn.Conv1d):
            cout, cin_g, k = mod.weight.shape
            fan_in = cin_g * k
            if mod is last_conv:
                gain = LAST_GAIN  # to the waveform
            elif name.endswith("block.3.conv"):
                gain = RES_OUT_GAIN  # a residual branch's output (kernel 1): keeps x + f(x) near x's scale
            elif name.startswith("decoder.") or name.startswith("encoder.layers.") and name != "encoder.layers.0.conv":
                gain = 1.0 if name == "decoder.layers.0.conv" else math.sqrt(2.0)  # after an ELU
            else:
                gain = 1.0  # encoder's first conv, RVQ projections, downsample
            mod.weight.copy_(_normal(gen, mod.weight.shape, gain / math.sqrt(fan_in)))
            if mod.bias is not None:
                mod.bias.copy_(_uniform(gen, mod.bias.shape, -0.1, 0.1))
        elif isinstance(mod, nn.Linear):
            mod.weight.copy_(_normal(gen, mod.weight.shape, 1.0 / math.sqrt(mod.in_features)))
            if mod.bias is not None:
                mod.bias.copy_(_uniform(gen, mod.bias.shape, -0.1, 0.1))
        elif isinstance(mod, nn.LayerNorm):
            mod.weight.copy_(1.0 + _normal(gen, mod.weight.shape, 0.1))
            mod.bias.copy_(_normal(gen, mod.bias.shape, 0.1))
        elif isinstance(mod, mm.MimiLayerScale):
            mod.scale.copy_(_uniform(gen, mod.scale.shape, 0.2, 0.6))
        elif isinstance(mod, mm.MimiEuclideanCodebook):
            semantic = ".semantic_residual_vector_quantizer." in f".{name}."
            s = 1.0 if semantic else 1.0 / math.sqrt(cfg.num_quantizers - cfg.num_semantic_quantizers)
            usage = _uniform(gen, mod.cluster_usage.shape, 0.5, 2.0)
            e = _normal(gen, mod.embed_sum.shape, s)
            mod.cluster_usage.copy_(usage)
            mod.embed_sum.copy_(e * usage[:, None])
            mod.initialized.fill_(1.0)
            mod._embed = None  # the cached embed_sum / usage is recomputed on first use


def chw(t: torch.Tensor) -> np.ndarray:
    """[1, C, T] -> float32 [C, T] (batch dropped)."""
    assert t.shape[0] == 1
    return np.ascontiguousarray(t[0].detach().to(torch.float32).numpy())


@torch.no_grad()
def reference(model: MimiModel, codes: np.ndarray) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {"codes": codes}
    c = torch.from_numpy(codes.astype(np.int64))[None]  # [1, 32, T]

    # quantizer: not a forward() call in decode (model.quantizer.decode), so call it (and its halves) directly
    q = model.quantizer
    n_sem = q.num_semantic_quantizers
    out["quantizer.semantic"] = chw(q.semantic_residual_vector_quantizer.decode(c[:, :n_sem]))
    out["quantizer.acoustic"] = chw(q.acoustic_residual_vector_quantizer.decode(c[:, n_sem:]))
    out["quantizer"] = chw(q.decode(c))
    out["quantizer_first8"] = chw(q.decode(c[:, :8]))

    captured: dict[str, torch.Tensor] = {}
    hooks = []

    def grab(key, transpose=False):
        def hook(_mod, _inp, output):
            t = output[0] if isinstance(output, (tuple, list)) else output
            if hasattr(t, "last_hidden_state"):
                t = t.last_hidden_state
            captured[key] = (t.transpose(1, 2) if transpose else t).detach().clone()

        return hook

    hooks.append(model.upsample.register_forward_hook(grab("upsample")))
    for i, layer in enumerate(model.decoder_transformer.layers):
        hooks.append(layer.register_forward_hook(grab(f"decoder_transformer.{i}", transpose=True)))
    hooks.append(model.decoder_transformer.register_forward_hook(grab("decoder_transformer", transpose=True)))
    for i, layer in enumerate(model.decoder.layers):
        if isinstance(layer, nn.ELU):
            continue  # ELU outputs are elu() of the previous key; not stored (size)
        hooks.append(layer.register_forward_hook(grab(f"decoder.{i}")))

    wav = model.decode(c, return_dict=True).audio_values
    for h in hooks:
        h.remove()
    for key in sorted(captured, key=_stage_order):
        out[key] = chw(captured[key])
    out["wav"] = chw(wav)[0]

    # the quantizer stage must be what the decode path consumed
    assert np.array_equal(out["quantizer"], chw(q.decode(c)))
    assert np.array_equal(out[f"decoder.{len(model.decoder.layers) - 1}"][0], out["wav"])

    out["wav_first8"] = chw(model.decode(c[:, :8], return_dict=True).audio_values)[0]
    return out


def _stage_order(key: str):
    order = ["upsample", "decoder_transformer.", "decoder_transformer", "decoder."]
    for i, p in enumerate(order):
        if key == p or (p.endswith(".") and key.startswith(p)):
            tail = key[len(p):]
            return (i, int(tail) if tail.isdigit() else -1)
    return (99, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent))
    ap.add_argument("--frames", type=int, default=N_FRAMES)
    args = ap.parse_args()
    out = Path(args.out)
    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    cfg = make_config()
    model = MimiModel(cfg).eval()
    randomize(model, cfg, SEED)
    model.save_pretrained(hf, safe_serialization=True)

    # reload from disk: the reference is of exactly the saved files
    model = MimiModel.from_pretrained(hf, attn_implementation="eager", torch_dtype=torch.float32).eval()

    rng = np.random.default_rng(CODES_SEED)
    codes = rng.integers(0, cfg.codebook_size, size=(cfg.num_quantizers, args.frames), dtype=np.int64).astype(np.int32)
    ref = reference(model, codes)
    again = reference(model, codes)
    assert all(np.array_equal(ref[k], again[k]) for k in ref), "decode is not deterministic"

    np.savez_compressed(out / "reference.npz", **ref)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print(json.dumps({k: v for k, v in CHANGED.items()}))
    for k, v in ref.items():
        rms = float(np.sqrt(np.mean(np.square(v.astype(np.float64))))) if v.dtype.kind == "f" else float("nan")
        amax = float(np.max(np.abs(v)))
        print(f"{k:28s} {str(v.dtype):8s} {str(list(v.shape)):14s} rms {rms:.4f} max|x| {amax:.4f}")


if __name__ == "__main__":
    main()
