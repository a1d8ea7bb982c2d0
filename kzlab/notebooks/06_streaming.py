# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 Streaming on the CPU: chunk size, time to first audio, real-time factor, the carried state
#
# A TTS model hands its decoder codes a few frames at a time; a player wants audio as soon as the first frames
# arrive. `dec.stream()` decodes as the codes come: `push(codes[:, a:b])` returns the audio of those frames.
#
# A causal family (the Qwen3-TTS 12 Hz decoder: causal convs, causal transposed convs, a causal sliding-window
# transformer) streams **with its state carried**: each call is one graph of the call's frames whose state (each
# causal conv's left context, each transposed conv's overlapping input frames, each attention layer's keys and
# values over the window, the position) is graph inputs and outputs. The streamed audio is the offline decode's,
# up to float32 rounding, whatever the chunk sizes. A family whose layers also read the future (WavTokenizer)
# streams in overlapping windows instead, an approximation it states.
#
# This notebook:
# 1. streams the tiny decoder in 1, 4 and 16 frame chunks and checks each against the offline decode (SNR);
# 2. measures each chunk size on a prepared stream (graphs built before timing) and draws chunk size against
#    time to first audio and real-time factor;
# 3. shows the carried state, tensor by tensor, and profiles one streaming call node by node;
# 4. streams WavTokenizer in windows and states its SNR against its offline decode;
# 5. streams the third family, Mimi: kyutai/mimi's codes and PocketTTS's latents.
#
# The defaults use the tiny test decoders (fast on any CPU); set `MODEL = "synthetic"` for the full-size
# synthetic decoder (built into the cache on first use; slower). The times are of this machine's CPU, as it is.

# %% tags=["parameters"]
MODEL = ""              # a .gguf path or a built-in name ("synthetic"); empty: the tiny test decoder
WT_MODEL = ""           # a non-causal decoder; empty: the built-in tiny WavTokenizer fixture
FRAMES = 48             # code frames streamed (12.5 frames per second: 3.84 s of audio)
SIZES = [1, 4, 16]      # chunk sizes: code frames per call
REPEAT = 1              # timed passes per chunk size (the times are their medians)
THREADS = 2             # CPU threads

# %%
# %matplotlib inline
from pathlib import Path

import numpy as np
from IPython.display import Audio, display

import kzlab
from kzlab import BUILTINS, GENERATED, TINY_DECODER, plots, resolve_model

path = resolve_model(MODEL or str(TINY_DECODER))
dec = kzlab.load(path, threads=THREADS)
print(dec)
codes = kzlab.random_codes(dec.hparams, FRAMES, seed=0)
offline = dec.decode(codes)
print(f"{FRAMES} frames -> {offline.size} samples ({offline.size / dec.sample_rate:.2f} s) offline")

# %% [markdown]
# ## 1. Push the codes as they arrive, and compare with the offline decode
#
# Each `push` returns its frames' audio at once (a stateful stream has no lookahead). `describe()` says what the
# stream does, and `plan_changes` which lowering choices a streaming call makes otherwise than the decoder (in the
# fast mode the residual units' conv is computed directly: Winograd's groups of output frames cannot fall where
# the offline decode's fall). So the SNR is given twice: against this decoder's offline decode, and against the
# offline decode in the streaming call's arithmetic (what measures the streaming itself).

# %%
s = dec.stream()
print(s.describe())
pieces = [s.push(codes[:, a : a + 4]) for a in range(0, FRAMES, 4)]
print(f"{len(pieces)} pushes of 4 frames, each {pieces[0].size} samples; flush: {s.flush().size} samples left")
wav = np.concatenate(pieces)
print(f"SNR against the offline decode: {kzlab.snr_text(kzlab.snr_db(wav, offline))}")
display(Audio(wav, rate=dec.sample_rate, normalize=True))

# %% [markdown]
# ## 2. Chunk size against time to first audio and real-time factor
#
# `kzlab.stream_sweep` streams the same codes at each chunk size on a fresh stream whose graphs were built before
# timing (`Stream.prepare`, as a player warms up), so the first audio is the first call's compute, not graph
# building. A bigger chunk amortises each call's fixed cost (a lower real-time factor) but makes the listener wait
# for more codes: the dashed curve adds the chunk's own duration, the wait when the codes arrive in real time.

# %%
sweep = kzlab.stream_sweep(dec, codes, SIZES, repeat=REPEAT)
print(f"{sweep.kind} stream on {sweep.backend_label}, {sweep.mode} mode; {sweep.prepared}")
print(f"SNR against {sweep.reference}")
print(f"{'frames/call':>11} {'calls':>6} {'first audio ms':>15} {'call median ms':>15} {'RTF':>7} {'SNR dB':>8} "
      f"{'vs own offline':>15}")
for r in sweep.rows:
    print(f"{r['size']:>11} {r['calls']:>6} {r['first_audio_ms']:>15.2f} {r['call_ms_median']:>15.2f} "
          f"{r['rtf']:>7.3f} {r['snr_db']:>8.1f} {r['snr_offline_db']:>15.1f}")
display(plots.stream_figure(sweep, f"{path.name}: {FRAMES} frames streamed on the CPU"))

# %% [markdown]
# ## 3. The carried state, and one streaming call profiled
#
# The state is a handful of tensors: a few frames of each causal conv's input, and each attention layer's keys and
# values over the window. Its size does not grow with the stream: it is what the decoder must keep per listener.

# %%
print(f"{len(sweep.state)} tensors, {sweep.state_bytes} bytes ({sweep.state_bytes / 1e6:.3f} MB)")
print(f"{'key':<28} {'kind':<8} {'channels':>8} {'frames':>6} {'order':<20} {'bytes':>8}")
for rec in sweep.state:
    print(f"{rec['key']:<28} {rec['kind']:<8} {rec['channels']:>8} {rec['frames']:>6} {rec['order']:<20} "
          f"{rec['nbytes']:>8}")

# %% [markdown]
# `kzlab.profile(..., stream=K)` (the command line: `kzlab profile MODEL --stream K`) times one call of K frames
# node by node: the streaming graph at the position the calls before it reached, with the state they left (by
# default enough calls to fill the attention window).

# %%
call = kzlab.profile(dec, stream=SIZES[1], threads=THREADS, repeat=3, peak=False, progress=False)
st = call.config["stream"]
print(f"{call.config['graph']}: {call.wall_ms:.2f} ms, state of {st['state_tensors']} tensors "
      f"left by {len(st['warmed_by'])} calls; {call.config['lowering_label']}")
display(plots.gflop_breakdown(call, f"one streaming call of {SIZES[1]} frames"))

# %% [markdown]
# ## 4. A family that is not causal: WavTokenizer streams in windows
#
# WavTokenizer's convs are 'same' convs and its attention and GroupNorms see every frame, so no state makes a call
# exact. Its stream decodes each call's frames with `left` frames before them and `lookahead` frames after (the
# audio comes `lookahead` frames late) and keeps the middle. How far that is from the offline decode depends on the
# weights: the tiny fixture's random weights are about as unkind to it as weights can be.

# %%
wt = kzlab.load(resolve_model(WT_MODEL or "wavtokenizer-tiny"), threads=THREADS)
wt_codes = kzlab.random_codes(wt.hparams, FRAMES, seed=0)
wt_offline = wt.decode(wt_codes)
print(wt.stream().describe())
wt_sweep = kzlab.stream_sweep(wt, wt_codes, SIZES, repeat=REPEAT)
for r in wt_sweep.rows:
    print(f"{r['size']:>3} frames per call: first audio {r['first_audio_ms']:.2f} ms (after {wt_sweep.lookahead} "
          f"frames of lookahead), RTF {r['rtf']:.3f}, SNR against the offline decode {r['snr_db']:.1f} dB")
for ahead in (8, 16):  # more context helps, and costs latency: the audio comes `ahead` frames late
    w, _ = wt.decode_stream(wt_codes, SIZES[-1], left=FRAMES, lookahead=ahead)
    print(f"every frame before, lookahead {ahead} ({ahead * wt_sweep.frame_ms:.0f} ms late): "
          f"{kzlab.snr_db(w, wt_offline):.1f} dB against the offline decode")
display(plots.stream_figure(wt_sweep, "WavTokenizer tiny: windowed stream"))

# %% [markdown]
# ## 5. A third family: Mimi (Moshi, Sesame CSM, PocketTTS), codes and latents
#
# Mimi's decoder is causal too (causal convs and transposed convs, a causal transformer over a window of 250
# steps), so it streams with its state carried, exactly. kyutai/mimi takes codes (32 codebooks; Moshi decodes the
# first 8); PocketTTS's decoder takes continuous latents [32, T] instead, pushed the same way. The built-in tiny
# decoders are the test fixtures (codec.cpp's file of a tiny transformers `MimiModel`; CrispASR's file of a tiny
# pocket-tts model, whose F16 products run in ggml-cpu on small calls and in BLAS on long ones: on the CPU backend
# alone its stream is exact, under BLAS it says why it is not).

# %%
# every built-in decoder shipped in the package (not generated at full size) that sections 1-4 did not stream
streamed = {Path(path).resolve(), Path(wt.model.path).resolve()}
others = [n for n in BUILTINS if n not in GENERATED and resolve_model(n).resolve() not in streamed]
for name in others:
    mm = kzlab.load(resolve_model(name), threads=THREADS, backend="cpu")
    x = kzlab.random_codes(mm.hparams, FRAMES, seed=0)  # codes, or latents for a decoder that takes them
    x_offline = mm.decode(x)
    print(f"{name}: {mm.arch.label}, input {list(x.shape)} {x.dtype}")
    print("  " + mm.stream().describe())
    m_sweep = kzlab.stream_sweep(mm, x, SIZES, repeat=REPEAT)
    for r in m_sweep.rows:
        print(f"  {r['size']:>3} frames per call: first audio {r['first_audio_ms']:.2f} ms, RTF {r['rtf']:.3f}, "
              f"SNR against the offline decode {r['snr_db']:.1f} dB")
    print(f"  state: {len(m_sweep.state)} tensors, {m_sweep.state_bytes / 1e6:.3f} MB")
    mm.close()

# %% [markdown]
# The same, interactively: the Workbench's Stream tab streams the decoder, backend, lowering and input chosen above
# at the chunk sizes typed next to its Stream button, and shows this figure, a row per size and the state.

# %%
dec.close()
wt.close()
wb = kzlab.Workbench(model=str(path))
wb.frames.value = FRAMES
display(wb)
