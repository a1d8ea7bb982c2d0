# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 Quickstart: load, decode, listen, T-evolution, GFLOPs
#
# Load a decoder, decode codes to 24 kHz audio with ggml, listen, and see how the sequence length grows
# block by block. The defaults use the tiny test decoder (fast on any CPU); set `MODEL = "synthetic"` for the
# full-size synthetic decoder (built into the cache on first use).

# %% tags=["parameters"]
MODEL = ""          # a .gguf path, "synthetic" or "known-answer"; empty: the tiny test decoder
FRAMES = 8          # code frames to decode (12.5 frames per second)
THREADS = None      # CPU threads (None: all)
SPEECH_SECONDS = 1.0  # seconds of speech for the known-answer round trip (full size: ~10 s of CPU per second)

# %%
# %matplotlib inline

from IPython.display import Audio, display

import kzlab

# %%
from kzlab import SPEECH, TINY_DECODER, plots, random_codes, resolve_model  # shipped in the package: no checkout needed

path = resolve_model(MODEL or str(TINY_DECODER))
dec = kzlab.load(path, threads=THREADS)
display(dec)

# %% [markdown]
# Decode random codes and keep every stage's output (`intermediates=True`).

# %%
codes = random_codes(dec.hparams, FRAMES)
out = dec.decode(codes, intermediates=True)
print(codes.shape, "->", out.wav.shape, "samples at", out.sample_rate, "Hz")
display(Audio(out.wav, rate=out.sample_rate, normalize=False))

# %%
plots.t_evolution(out)

# %%
plots.waveform(out.wav)

# %%
plots.spectrogram(out.wav)

# %% [markdown]
# ## GFLOPs per block
#
# `kzlab.profile` times every node (several repeats) and counts FLOPs per layer with both MAC conventions.

# %%
try:
    prof = kzlab.profile(str(path), codes=codes, threads=THREADS, repeat=2, warmup=1)
except ModuleNotFoundError as e:
    prof = None
    print("the profiler is not installed here:", e)
if prof is not None:
    print(f"wall {prof.wall_ms:.1f} ms, profiled {prof.profiled_ms:.1f} ms, peak {prof.peak_gflops:.1f} GF/s")
    display(plots.gflop_breakdown(prof))

# %% [markdown]
# ## Listen to speech through the full-size vocoder
#
# The known-answer decoder's vocoder path is exactly invertible: `kzlab.audio_to_latent` turns a recording
# into the 1024-channel latent that decodes back to it through the real full-size graph.

# %%
from kzlab import read_wav, snr_db, snr_text

ka = kzlab.load(resolve_model("known-answer"), threads=THREADS)
speech, sr = read_wav(SPEECH)
speech = speech[: int(SPEECH_SECONDS * sr)]
back = ka.decode_from("latent", kzlab.audio_to_latent(speech, ka.hparams))[: speech.size]
print(f"SNR against the recording: {snr_text(snr_db(back, speech))}")  # "exact" when nothing is lost
display(Audio(back, rate=sr, normalize=False))
ka.close()

# %%
dec.close()
