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
# # 02 Backends and lowerings
#
# The same decoder written as different ggml graphs (lowerings) and run with or without
# `ggml_backend_sched`: wall time per configuration, and a roofline of every node.
#
# The lowering and scheduler comparisons all run in `mode="portable"` (ggml ops only, the graph a device port
# runs), so im2col-f32 against ktap compares two conv lowerings of ggml ops, not kzlab's fused numpy CPU nodes
# against ggml ops. Each row is labelled with what the decoder reports really ran (`dec.backend_label`,
# `dec.mode`), not with what was asked for. A separate comparison at the end, clearly a different question,
# runs the default lowering in `mode="fast"` (kzlab's fused CPU nodes where they apply) against
# `mode="portable"`.

# %% tags=["parameters"]
MODEL = ""        # empty: the tiny reference decoder shipped with kzlab
FRAMES = 4
THREADS = None
REPEAT = 2
CONVS = ["im2col-f32", "ktap"]  # add "im2col-f16" for ggml_conv_1d's own form

# %%
# %matplotlib inline

# %%
import time

from IPython.display import display

import kzlab
from kzlab import (
    TINY_DECODER,  # shipped in the package: no checkout needed
    available_backends,
    plots,
    random_codes,
    resolve_model,
    snr_db,
    snr_text,
)

path = resolve_model(MODEL or str(TINY_DECODER))
print("backends here:", available_backends())
codes = random_codes(kzlab.load_model(path).hparams, FRAMES)


def best_ms(dec, n=REPEAT):
    dec.decode(codes)  # builds and allocates the graph once
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        dec.decode(codes)
        ts.append((time.perf_counter() - t0) * 1e3)
    return min(ts)


# %% [markdown]
# ## Scheduler off and on, for each conv lowering (`mode="portable"`)
#
# `sched=False` runs without a scheduler (the plain CPU backend), `sched=True` under `ggml_backend_sched`.
# Both use ggml ops only, so each pair of rows differs by the scheduler alone and each conv by its lowering alone.

# %%
rows, ref = [], None
for conv in CONVS:
    for sched in (False, True):
        with kzlab.load(path, threads=THREADS, sched=sched, conv=conv, mode="portable") as dec:
            # what ran, resolved once when the decoder opened, is what the row says
            assert dec.resolved_backends.sched == sched and dec.mode == "portable", dec
            wav = dec.decode(codes)
            ref = wav if ref is None else ref
            snr = snr_db(wav, ref)
            rows.append({"conv": dec.lowering.conv, "backend": dec.backend_label, "mode": dec.mode,
                         "best ms": round(best_ms(dec), 2), "SNR vs first": snr_text(snr),
                         "lowering": dec.lowering.label()})
for r in rows:
    print(r)

# %%
from matplotlib.figure import Figure

fig = Figure(figsize=(7, 3), layout="constrained")
ax = fig.add_subplot()
ax.barh([f"{r['conv']} on {r['backend']} ({r['mode']})" for r in rows], [r["best ms"] for r in rows])
ax.set_xlabel(f"best of {REPEAT} decodes (ms)")
display(fig)

# %% [markdown]
# ## Roofline: achieved GF/s of every node against its arithmetic intensity
#
# The first two conv lowerings, profiled in `mode="portable"`; the labels come from each profile's `config`.

# %%
profs = []
try:
    for conv in CONVS[:2]:
        profs.append(kzlab.profile(str(path), codes=codes, threads=THREADS, lowering=kzlab.Lowering(conv=conv),
                                   mode="portable", repeat=REPEAT, warmup=1))
except ModuleNotFoundError as e:
    print("the profiler is not installed here:", e)
if profs:
    labels = [f"{p.config['lowering_resolved']['conv']} on {p.config['backend_label']} ({p.config['mode']})"
              for p in profs]
    display(plots.roofline(profs, labels=labels))
    display(plots.compare(profs[0], profs[1], tuple(labels)))

# %% [markdown]
# ## A different comparison: `mode="fast"` against `mode="portable"`, at the default lowering
#
# Not two lowerings of ggml ops this time: the same default lowering run once with kzlab's fused numpy CPU
# nodes where they apply (`"fast"`, CPU and BLAS backends only) and once as ggml ops only (`"portable"`, what
# a device port runs and what the Hexagon simulator places). It measures what the fused nodes buy on this CPU.

# %%
modes, ref_portable = [], None
for mode in ("portable", "fast"):
    with kzlab.load(path, threads=THREADS, mode=mode) as dec:
        wav = dec.decode(codes)
        ref_portable = wav if ref_portable is None else ref_portable
        snr = snr_db(wav, ref_portable)
        modes.append({"mode": dec.mode, "backend": dec.backend_label, "best ms": round(best_ms(dec), 2),
                      "SNR vs portable": snr_text(snr), "lowering": dec.lowering.label()})
for r in modes:
    print(r)
