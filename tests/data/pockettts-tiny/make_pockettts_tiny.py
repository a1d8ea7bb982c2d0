#!/usr/bin/env python3
"""Tiny random-weight PocketTTS model and its Mimi-decoder reference (pocket-tts 4.0.1).

Builds a ``pocket_tts.TTSModel`` from a pocket-tts config (``tiny.yaml``, written here) with the
structure of the released English model's Mimi decoder (SEANet ratios 6,5,4, one residual unit per
stage, kernels 7/3/3, compress 2, causal zero padding; the depthwise transposed-conv upsample x16
from 12.5 Hz to 200 Hz; a 2-layer decoder transformer with heads of 64, a 250-step window,
interleaved RoPE (max_period 10000), tanh GELU and layer scale) but narrow widths, draws every
weight from a seeded numpy generator (no download, no network), and writes into OUT (default: this
script's folder):

  tiny.yaml          the pocket-tts config the model was built from (CrispASR's converter reads it)
  tokenizer.json     a 64-token WordLevel tokenizer the config points at (pocket-tts needs one to
                     build the text conditioner; nothing here tokenizes text)
  model.safetensors  ``TTSModel.state_dict()``, F32 (what llama.cpp's converter reads)
  latents.npy        float32 [32, T]: normalised latents, as the flow LM emits them
  reference.npz      pocket-tts's own decode of them, stage by stage (see README.md)

Run with the pocket-tts venv:  /work/peers/pocket-venv/bin/python make_pockettts_tiny.py [OUT]
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch

SEED = 20251206
N_FRAMES = 20          # 20 latent frames = 320 transformer steps at 200 Hz > the 250-step window
CHUNKS = (1, 4, 7, 8)  # frames per call of the chunked (streaming) reference, sums to N_FRAMES
N_BINS = 64

D = 128    # mimi transformer width = SEANet dimension = outer_dim (real: 512); heads = D // 64
FF = 256   # mimi transformer feed-forward (real: 2048)
NF = 8     # SEANet n_filters (real: 64): decoder channels 64, 32, 16, 8
FLOW_D = 64      # flow LM backbone width (real: 1024); not part of the decoder
FLOW_NET = 64    # flow net width (real: 512)

CONFIG = {
    "flow_lm": {
        "insert_bos_before_voice": True,
        "dtype": "float32",
        "flow": {"depth": 1, "dim": FLOW_NET},
        "transformer": {"d_model": FLOW_D, "hidden_scale": 2, "max_period": 10000,
                        "num_heads": FLOW_D // 64, "num_layers": 1},
        "lookup_table": {"dim": FLOW_D, "n_bins": N_BINS, "tokenizer": "tokenizers",
                         "tokenizer_path": "tokenizer.json"},
    },
    "mimi": {
        "dtype": "float32",
        "sample_rate": 24000,
        "inner_dim": 32,
        "outer_dim": D,
        "channels": 1,
        "frame_rate": 12.5,
        "seanet": {"dimension": D, "channels": 1, "n_filters": NF, "n_residual_layers": 1,
                   "ratios": [6, 5, 4], "kernel_size": 7, "residual_kernel_size": 3,
                   "last_kernel_size": 3, "dilation_base": 2, "pad_mode": "constant",
                   "compress": 2},
        "transformer": {"d_model": D, "num_heads": D // 64, "num_layers": 2, "layer_scale": 0.01,
                        "context": 250, "dim_feedforward": FF, "input_dimension": D,
                        "output_dimensions": [D]},
        "quantizer": {"dimension": 32, "output_dimension": D},
    },
}


def write_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, **{f"t{i}": i for i in range(1, N_BINS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path.write_text(json.dumps(json.loads(tok.to_str()), indent=1, sort_keys=True) + "\n")


def write_yaml(path: Path) -> None:
    import yaml

    head = ("# Tiny random-weight PocketTTS (tests/data/pockettts-tiny/make_pockettts_tiny.py).\n"
            "# No weights_path: the weights are model.safetensors beside this file.\n")
    path.write_text(head + yaml.safe_dump(CONFIG, sort_keys=False))


def fan_in(name: str, shape: tuple[int, ...], module: torch.nn.Module) -> float:
    if isinstance(module, torch.nn.ConvTranspose1d):
        # weight [IC, OC / groups, K]: each output sample sums IC/groups inputs x K/stride taps
        return shape[0] / module.groups * shape[2] / module.stride[0]
    if isinstance(module, torch.nn.Conv1d):
        return shape[1] * shape[2]
    if len(shape) >= 2:
        return shape[1]
    return 1.0


def randomize(model: torch.nn.Module, rng: np.random.Generator) -> None:
    """Draws every parameter (and emb_std / emb_mean) from rng in state_dict order.

    Order-1 activations through every block: weights N(0, gain^2 / fan_in); LayerNorm weights
    1 + N(0, 0.1^2), biases N(0, 0.1^2); layer scales U(0.2, 0.6) (the released model's are small
    trained values; larger ones make the transformer matter in a test); latent statistics
    emb_std U(0.5, 1.5), emb_mean N(0, 0.3^2). Buffers other than emb_std / emb_mean (the time
    embedders' freqs) keep pocket-tts's values. The Mimi transformers' in_proj (q, k, v) gets gain 2
    (logits x4): with diffuse attention, dropping the 250-step window would cost only ~46 dB on the
    wav of 20 frames; with it, ~27 dB. The decoder's last conv gets gain 0.15 so that the waveform
    stays inside [-1, 1] (llama.cpp's runtime clamps its output there).
    """
    modules = dict(model.named_modules())
    params = dict(model.named_parameters())
    sd = model.state_dict()
    with torch.no_grad():
        for name in sd:
            shape = tuple(sd[name].shape)
            owner, _, leaf = name.rpartition(".")
            module = modules.get(owner)
            if name.endswith("emb_std"):
                value = rng.uniform(0.5, 1.5, shape)
            elif name.endswith("emb_mean"):
                value = rng.normal(0.0, 0.3, shape)
            elif name not in params:
                continue  # buffers (freqs)
            elif leaf == "scale" and "layer_scale" in owner:
                value = rng.uniform(0.2, 0.6, shape)
            elif isinstance(module, torch.nn.LayerNorm) or "norm" in owner or leaf == "alpha":
                value = (1.0 if leaf in ("weight", "alpha") else 0.0) + rng.normal(0.0, 0.1, shape)
            elif leaf == "bias":
                value = rng.normal(0.0, 0.1, shape)
            else:
                gain = 1.0
                if name == last_conv_name(model):
                    gain = 0.15
                elif name.startswith("mimi.") and name.endswith("self_attn.in_proj.weight"):
                    gain = 2.0  # sharper attention: the 250-step window changes the output
                value = rng.normal(0.0, gain / math.sqrt(fan_in(name, shape, module)), shape)
            target = params[name] if name in params else dict(model.named_buffers())[name]
            target.copy_(torch.from_numpy(np.asarray(value, dtype=np.float32)).reshape(shape))


def last_conv_name(model: torch.nn.Module) -> str:
    return f"mimi.decoder.model.{len(model.mimi.decoder.model) - 1}.conv.weight"


def build(out: Path):
    from pocket_tts.models.tts_model import TTSModel
    from pocket_tts.utils.config import load_config

    cwd = os.getcwd()
    os.chdir(out)  # tokenizer_path is relative to the config's folder
    try:
        config = load_config(out / "tiny.yaml")
        model = TTSModel._from_pydantic_config_with_weights(
            config, temp=0.3, sampler_decode_steps=1, noise_clamp=None, eos_threshold=-4.0,
            origin=out / "tiny.yaml")
    finally:
        os.chdir(cwd)
    model.eval()
    return model


def stage_hooks(mimi, store: dict):
    """Forward hooks that copy each decoder stage's output as (C, T) float32."""

    def grab(key):
        def hook(_module, _inputs, output):
            if isinstance(output, (list, tuple)):
                output = output[0]
            store.setdefault(key, []).append(output[0].detach().float().numpy().copy())
        return hook

    handles = [
        mimi.quantizer.register_forward_hook(grab("quant_out")),
        mimi.upsample.register_forward_hook(grab("upsample")),
        mimi.decoder_transformer.register_forward_hook(grab("transformer")),
    ]
    stage = -1
    for i, layer in enumerate(mimi.decoder.model):
        kind = type(layer).__name__
        if i == 0:
            key = "decoder.conv_in"
        elif kind == "StreamingConvTranspose1d":
            stage += 1
            key = f"decoder.up.{stage}"
        elif kind == "SEANetResnetBlock":
            key = f"decoder.res.{stage}"
        elif i == len(mimi.decoder.model) - 1:
            key = "decoder.conv_out"
        else:
            continue  # ELU
        handles.append(layer.register_forward_hook(grab(key)))
    return handles


def decode(model, latents: np.ndarray, chunks: tuple[int, ...], store: dict | None = None):
    """pocket-tts's own streaming decode (TTSModel._decode_audio_worker without its fade-in)."""
    from pocket_tts.modules.stateful_module import increment_steps, init_states

    mimi = model.mimi
    steps_per_latent = int(mimi.encoder_frame_rate / mimi.frame_rate)
    state = init_states(mimi, batch_size=1, sequence_length=latents.shape[1] * steps_per_latent)
    handles = stage_hooks(mimi, store) if store is not None else []
    pieces, denorm, start = [], [], 0
    try:
        with torch.no_grad():
            for n in chunks:
                x = torch.from_numpy(latents[:, start:start + n].T.copy())[None]  # [1, n, 32]
                x = x * model.flow_lm.emb_std + model.flow_lm.emb_mean
                denorm.append(x[0].T.numpy().copy())
                audio = mimi.decode_from_latent(x, state)  # [1, 1, n * 1920]
                increment_steps(mimi, state, increment=steps_per_latent * n)
                pieces.append(audio[0, 0].numpy().copy())
                start += n
    finally:
        for h in handles:
            h.remove()
    if store is not None:
        store["denorm"] = denorm
    return np.concatenate(pieces).astype(np.float32)


def main(out: Path) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    out.mkdir(parents=True, exist_ok=True)
    write_tokenizer(out / "tokenizer.json")
    write_yaml(out / "tiny.yaml")

    model = build(out)
    rng = np.random.default_rng(SEED)
    randomize(model, rng)
    latents = np.random.default_rng(SEED + 1).standard_normal((32, N_FRAMES)).astype(np.float32)

    import safetensors.torch
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    safetensors.torch.save_file(sd, str(out / "model.safetensors"))

    # reload from the file as pocket-tts does (strict) so the reference is of the saved weights
    model = build(out)
    model.load_state_dict(safetensors.torch.load_file(str(out / "model.safetensors")), strict=True)
    from pocket_tts.models.tts_model import stamp_state_names
    stamp_state_names(model)

    store: dict = {}
    wav = decode(model, latents, (N_FRAMES,), store)
    wav_chunked = decode(model, latents, CHUNKS)
    ref = {"latents": latents, "emb_std": sd["flow_lm.emb_std"].numpy(),
           "emb_mean": sd["flow_lm.emb_mean"].numpy()}
    for key in ["denorm"] + [k for k in store if k != "denorm"]:
        ref[key] = np.concatenate(store[key], axis=-1).astype(np.float32)
    ref["wav"] = wav
    ref["wav_chunked"] = wav_chunked
    ref["chunks"] = np.asarray(CHUNKS, dtype=np.int32)
    np.save(out / "latents.npy", latents)
    np.savez_compressed(out / "reference.npz", **ref)

    for key, value in ref.items():
        rms = float(np.sqrt(np.mean(np.square(value.astype(np.float64)))))
        print(f"{key:18s} {str(value.shape):14s} {value.dtype}  rms {rms:.4f}  "
              f"max|x| {float(np.max(np.abs(value))):.4f}")
    d = wav - wav_chunked
    snr = 10 * np.log10(np.sum(wav.astype(np.float64) ** 2) / max(np.sum(d.astype(np.float64) ** 2), 1e-30))
    print(f"chunked vs one call: max |diff| {float(np.max(np.abs(d))):.3g}, SNR {snr:.1f} dB")
    decoder_side = ("mimi.decoder", "mimi.upsample", "mimi.quantizer")
    n_dec = sum(v.numel() for k, v in sd.items() if k.startswith(decoder_side))
    print(f"parameters: {sum(v.numel() for v in sd.values()):,} in {len(sd)} tensors; mimi decoder side: {n_dec:,}")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent)
