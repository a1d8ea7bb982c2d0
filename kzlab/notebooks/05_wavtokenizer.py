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
# # 05 WavTokenizer: a second decoder family, stage by stage against PyTorch
#
# The WavTokenizer decoder of OuteTTS 0.2/0.3, in the GGUF layout llama.cpp's converter writes
# (`general.architecture = wavtokenizer-dec`): codebook lookup, an embedding conv, a posnet (ResNet blocks,
# one attention block, a final GroupNorm), ConvNeXt blocks, a final LayerNorm and a linear head to magnitude and
# phase, then an inverse STFT (n_fft 1280, hop 320) to 24 kHz.
#
# The file here is the tiny random-weight fixture (`tests/data/wavtokenizer-tiny`: real n_fft and hop, tiny
# widths) with the PyTorch reference of every stage. This notebook:
# 1. decodes it and compares every stage with the reference (`kzlab.compare`);
# 2. prices llama.cpp's choices, an F16 im2col in its convs and the tanh form of GELU, in dB and in ms;
# 3. puts the inverse STFT on the host (as llama.cpp) and in the graph (ggml ops), and compares the two;
# 4. places the whole decoder, iSTFT included, on a Hexagon profile with its predicted time as a range.
#
# Stage names come from the file's family; nothing below names them. Another WavTokenizer file (the full-size
# synthetic of `kzlab synth`, say) works the same: set MODEL, and REF to its reference if it has one; without a
# reference each toggle is compared with the default lowering on the same codes.

# %% tags=["parameters"]
MODEL = ""       # empty: the built-in tiny fixture (`wavtokenizer-tiny`, shipped in the package); or a path / built-in
REF = ""         # a reference .npz of stage activations; empty: the tiny fixture's (none for another MODEL)
BOUND = 70.0     # dB: the F32 bound of the reference tests
REPEAT = 3       # timed decodes per run
HEXAGON = "hexagon-v0.15.2"
FRAMES = 100     # frames decoded without a reference, and placed on the device

# %%
# %matplotlib inline
from pathlib import Path

import numpy as np
from IPython.display import Audio, display

import kzlab
from kzlab import plots

model = str(kzlab.resolve_model(MODEL or "wavtokenizer-tiny"))
# the tiny fixture's PyTorch reference ships next to it (package data)
ref = REF or ("" if MODEL else str(Path(model).with_name("wavtokenizer-tiny-reference.npz")))

# %% [markdown]
# ## 1. Decode, and every stage against the reference

# %%
dec = kzlab.load(model, threads=2)
print(dec)
m = dec.model
codes = np.load(ref)["codes"] if ref else kzlab.random_codes(m.hparams, FRAMES)
out = dec.decode(codes, intermediates=True)
print(f"{codes.shape[1]} frames -> {len(out.wav)} samples at {out.sample_rate} Hz")
display(plots.t_evolution(out, "T-evolution"))
display(Audio(out.wav, rate=out.sample_rate, normalize=True))
dec.close()

# %%
DEFAULTS = kzlab.Lowering().to_dict()


def accuracy(**options):
    """Every stage of a run with these lowering options against the reference, or without one against the
    default lowering on the same codes."""
    if ref:
        return kzlab.compare(m, ref=ref, bound=BOUND, repeat=REPEAT, threads=2, **options)
    return kzlab.compare(m, against={k: DEFAULTS[k] for k in options}, codes=codes, bound=BOUND, repeat=REPEAT,
                         threads=2, **options)


base = accuracy()
print(base.summary())
for r in base.rows():
    print(f"  {r['stage']:<16} {r['snr_db']!s:>8} dB")
against = "PyTorch" if ref else "the default lowering"
display(plots.stage_snr(base, ["kzlab default"], title=f"default lowering against {against}"))

# %% [markdown]
# ## 2. llama.cpp's choices: what each costs in dB and in ms
#
# llama.cpp builds its convs with `ggml_conv_1d` (an F16 im2col) and its GELU is the tanh approximation;
# PyTorch's is the exact erf form. kzlab follows PyTorch by default and offers both as lowering toggles.

# %%
TOGGLES = {
    "default": {},
    "conv=im2col-f16": {"conv": "im2col-f16"},
    "gelu=tanh": {"gelu": "tanh"},
    "llama.cpp-like (both)": {"conv": "im2col-f16", "gelu": "tanh"},
}
runs = {name: accuracy(**kw) for name, kw in TOGGLES.items()}
last = list(runs.values())[0].stages[-1].stage
head = list(runs.values())[0].stages[-2].stage
print(f"{'lowering':<24} {head + ' dB':>16} {last + ' dB':>10} {'first below':>16} {'decode ms':>10}")
for name, r in runs.items():
    print(f"{name:<24} {r.snr[head]:>16.1f} {r.snr[last]:>10.1f} {r.first_below or '-':>16} "
          f"{r.b['decode_ms']:>10.2f}")
display(plots.stage_snr(list(runs.values()), list(runs), bound=BOUND, title=f"each toggle against {against}"))

# %% [markdown]
# ## 3. The inverse STFT on the host and in the graph
#
# On the host it is numpy's inverse real FFT after the graph (as llama.cpp does it, but with the Hermitian
# scaling PyTorch uses). In the graph it is an inverse-DFT matrix product and a COL2IM_1D overlap-add, so the
# profiler and the placement simulator see it too. Every stage before the waveform is the same graph.

# %%
ist = kzlab.compare(m, against="istft=host", istft="graph", codes=codes, bound=BOUND, repeat=REPEAT, threads=2)
print(ist.summary())
if ref:
    graph_vs_ref = kzlab.compare(m, ref=ref, istft="graph", repeat=0, threads=2)
    print(f"in-graph iSTFT against the reference: {graph_vs_ref.snr[last]:.1f} dB")
prof = kzlab.profile(m, codes=codes, istft="graph", mode="portable", backend="cpu", sched=False, threads=2,
                     repeat=REPEAT, peak=False, progress=False)
display(plots.gflop_breakdown(prof))
display(plots.timeline(prof, "one decode, iSTFT in the graph"))

# %% [markdown]
# ## 4. The whole decoder on a Hexagon profile, with its predicted range
#
# The device runs the portable graph (ggml ops only). With the iSTFT in the graph, it is placed too. The CPU
# nodes take their times from a CPU-only profile of that graph measured here; what nobody measured on the HTP is
# drawn over its sourced range, so the prediction is a range, and the assumed inputs are listed. `low.portable()` is
# the graph the simulator places (the conv lowering `auto` picks for a device), profiled here on the CPU.

# %%
low = kzlab.Lowering(mode="portable", istft="graph")
cpu_prof = kzlab.profile(m, frames=FRAMES, backend="cpu", sched=False, threads=2, lowering=low.portable(), repeat=1,
                         warmup=1, peak=False, progress=False)
pl = kzlab.simulate(m, HEXAGON, frames=FRAMES, lowering=low, predict={"cpu_profile": cpu_prof})
pred = pl.predicted.to_dict()
print(f"{HEXAGON}: predicted {plots.range_text(plots.total_span(pred))} over the draws; "
      f"assumed: {', '.join(pred.get('assumed', [])) or 'none'}")
for mem in pl.memory.values():
    print(mem.verdict())
for f in plots.placement_figures(pl):
    display(f)
display(plots.predicted_stages([pl], [HEXAGON]))

# %% [markdown]
# The same, interactively: the Workbench shows the family, disables the toggles that do not apply to it (with
# the reason), and its Compare tab gives the per-stage SNR of two runs, or of a run against a reference .npz.

# %%
wb = kzlab.Workbench(folder=Path(model).parent, model=model)
wb.ref_path.value = ref
display(wb)
