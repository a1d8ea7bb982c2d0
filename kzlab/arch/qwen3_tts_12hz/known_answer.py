"""A known-answer decoder: full-size shapes whose vocoder path is exactly invertible.

A random-weight decoder proves that the graph runs, not that it computes the right thing on real audio.
This decoder's vocoder (everything after the 1024-channel latent) is built so that its answer is known in
advance: `audio_to_latent(wav)` turns a 24 kHz recording into a latent that the full-size graph decodes
back to the same recording, through every real op (convolutions, transposed convolutions, SnakeBeta,
residual units, the final conv and clamp), so a listener can hear whether a backend or lowering is right.

How the path is made exact (hp = the shipped shapes, block rates 8, 5, 4, 3, product U = 480):

* `dec.0.conv` (k = 7, causal: output t reads inputs t-6..t) copies latent channels 0..U-1 to its first U
  output channels with a 1 on the last tap, so there is no delay.
* each block's ConvTranspose (kernel 2s, stride s, trimmed to T*s on the right) is a depth-to-space:
  only taps j < s are used, so out[c, t*s + j] = x[c*s + j, t]; U/s channels go in, U/(s*...) come out,
  down to one channel after the last block.
* the residual units add exactly zero: conv2 weights and bias are 0 (conv1 stays random and is computed).
* every SnakeBeta is the identity to float precision: alpha = -30 (exp(alpha) ~ 1e-13, so the sin^2 term
  is ~1e-26 |x|^2) and beta = 10 (it is divided by exp(beta) ~ 2e4 as well). alpha and beta are stored F32.
* the last conv picks channel 0 on its last tap.

All weights of the path are 0 or 1, exact in F16 and Q8_0; the only rounding is the one of the activations
when a backend multiplies in F16. The codebooks, transformer and upsampler are seeded random: codes still
decode (to noise), and `decode_from("latent", ...)` is the known-answer entry point.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from kzlab.arch.qwen3_tts_12hz.files import DEFAULT_PRESET, PRESETS, random_weight
from kzlab.arch.qwen3_tts_12hz.hparams import HParams
from kzlab.arch.qwen3_tts_12hz.roles import decoder_roles
from kzlab.errors import InvalidInputError, InvalidOptionError
from kzlab.formats.writer import write_gguf
from kzlab.model.model import Role

SNAKE_ALPHA = -30.0
SNAKE_BETA = 10.0


def vocoder_upsample(hp: HParams) -> int:
    """Samples per latent frame at the vocoder's input (480 for the shipped shapes)."""
    return math.prod(hp.upsample_rates)


def _check(hp: HParams) -> None:
    u = vocoder_upsample(hp)
    if u > hp.latent_dim or u > hp.decoder_dim:
        raise InvalidOptionError(
            f"a known-answer decoder needs latent_dim and decoder_dim >= {u} (the vocoder's upsampling); "
            f"this preset has latent_dim={hp.latent_dim}, decoder_dim={hp.decoder_dim}"
        )
    c = u
    for b, s in enumerate(hp.upsample_rates, start=1):
        cin, cout = hp.block_channels(b)
        if c > cin or c // s > cout:
            raise InvalidOptionError(f"block {b} is too narrow for a known-answer path ({c} channels needed)")
        c //= s


def _path_weight(role: Role, hp: HParams) -> np.ndarray | None:
    """The exact weight of a role on the vocoder path, or None for roles left random."""
    name, shape = role.name, role.shape
    f32 = np.float32
    nb = hp.n_blocks
    u = vocoder_upsample(hp)
    if name == "dec.0.conv.weight":
        w = np.zeros(shape, f32)
        w[np.arange(u), np.arange(u), shape[2] - 1] = 1.0  # last tap: output t reads input t
        return w
    if name.endswith(".alpha") and name.startswith("dec."):
        return np.full(shape, SNAKE_ALPHA, f32)
    if name.endswith(".beta") and name.startswith("dec."):
        return np.full(shape, SNAKE_BETA, f32)
    if name.startswith("dec.") and name.endswith(".convt.weight"):
        b = int(name.split(".")[1])
        s = hp.upsample_rates[b - 1]
        c_out_used = u // math.prod(hp.upsample_rates[:b])
        w = np.zeros(shape, f32)  # [c_in, c_out, 2s]
        c = np.repeat(np.arange(c_out_used), s)
        j = np.tile(np.arange(s), c_out_used)
        w[c * s + j, c, j] = 1.0
        return w
    if name.startswith("dec.") and (".conv2." in name or name.endswith(".bias")):
        return np.zeros(shape, f32)
    if name.startswith("dec.") and ".conv1.weight" in name:
        return None  # random, computed, multiplied by a zero conv2
    if name == f"dec.{nb + 2}.conv.weight":
        w = np.zeros(shape, f32)
        w[0, 0, shape[2] - 1] = 1.0
        return w
    return None


def synth_known_answer(
    out: str | Path,
    preset: str = "qwen3-tts-12hz",
    dtype: str = "f16",
    seed: int = 0,
    hparams: HParams | None = None,
) -> Path:
    """Write a known-answer decoder (qwentts.cpp layout GGUF) of the preset's shapes."""
    if hparams is None:
        if preset not in PRESETS:
            raise InvalidOptionError(f"unknown preset {preset!r}: one of {', '.join(PRESETS)}")
        hparams = PRESETS[preset]
    _check(hparams)
    rng = np.random.default_rng(seed)
    roles = [r for r in decoder_roles(hparams) if not r.optional]

    def producer(r: Role):
        def make() -> np.ndarray:
            w = _path_weight(r, hparams)
            if w is not None:
                return w
            w = random_weight(r, rng)
            return w * np.float32(0.1) if ".conv1." in r.name else w

        return make

    return write_gguf(
        out,
        hparams,
        [(r.name, producer(r)) for r in roles],
        outtype=dtype,
        name=f"kzlab known-answer {preset} (seed {seed})",
        extra_metadata={"kzlab.synthetic": True, "kzlab.known_answer": True, "kzlab.seed": seed},
    )


def _sample_channel_map(hp: HParams) -> np.ndarray:
    """perm[k] = the latent channel that carries sample k (0 <= k < U) of each latent frame."""
    rates = list(hp.upsample_rates)
    u = math.prod(rates)
    perm = np.empty(u, dtype=np.int64)
    for k in range(u):
        # k = (((j1*5 + j2)*4 + j3)*3 + j4) for rates (8, 5, 4, 3): digits of k in the mixed radix
        digits = []
        rem = k
        for s in reversed(rates):
            digits.append(rem % s)
            rem //= s
        digits.reverse()  # j1 .. jn
        # channel after the last block is 0; going back up, channel = channel*s + j
        c = 0
        for s, j in zip(reversed(rates), reversed(digits), strict=True):
            c = c * s + j
        perm[k] = c
    return perm


def audio_to_latent(wav, hparams: HParams | None = None) -> np.ndarray:
    """A 24 kHz recording as the latent [latent_dim, T] that a known-answer decoder turns back into it.

    The recording is zero-padded to whole code frames (total_upsample samples, 1920 for the shipped shapes),
    because `decode_from("latent", x)` takes whole frames; the decode is `len(padded)` samples long and its
    first `len(wav)` samples are the recording. Samples must lie in [-1, 1] (the decoder ends in a clamp).
    """
    hp = hparams or PRESETS[DEFAULT_PRESET]
    _check(hp)
    a = np.asarray(wav, dtype=np.float32)
    if a.ndim != 1 or a.size == 0:
        raise InvalidInputError(f"audio_to_latent wants mono samples [N]; got shape {list(a.shape)}")
    if not np.all(np.isfinite(a)):
        raise InvalidInputError("the recording contains NaN or Inf")
    if np.abs(a).max() > 1.0:
        raise InvalidInputError(f"samples must lie in [-1, 1] (the decoder clamps); peak is {np.abs(a).max():.3f}")
    frame = hp.total_upsample
    n = -(-a.size // frame) * frame
    a = np.pad(a, (0, n - a.size))
    u = vocoder_upsample(hp)
    t = n // u
    latent = np.zeros((hp.latent_dim, t), dtype=np.float32)
    latent[_sample_channel_map(hp)] = a.reshape(t, u).T
    return latent


__all__ = ["audio_to_latent", "sample_channel_map", "synth_known_answer", "vocoder_upsample"]

sample_channel_map = _sample_channel_map
