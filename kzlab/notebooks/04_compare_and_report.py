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
# # 04 Compare two runs and write a report
#
# Two runs of the same decoder with different lowerings, compared per block and per op, with both audios;
# then one self-contained HTML report, and the interactive workbench.
#
# Both runs use the same mode, `mode="portable"` (ggml ops only), so A and B differ by their conv lowering
# alone, not by kzlab's fused numpy CPU nodes on one side and ggml ops on the other. Each side's
# `prof.config["mode"]`, `["backend_label"]` and `["lowering_resolved"]` are printed to show what really ran.

# %% tags=["parameters"]
MODEL = ""         # empty: the tiny reference decoder shipped with kzlab
FRAMES = 4
REPEAT = 1
A = {"conv": "im2col-f32"}
B = {"conv": "ktap"}
REPORT = "compare-report.html"

# %%
# %matplotlib inline

from IPython.display import Audio, display

import kzlab
from kzlab import plots
from kzlab.app.builtins import TINY_DECODER  # shipped in the package: no checkout needed

# %%
from kzlab.app.runner import RunSpec, execute
from kzlab.audio import snr_db, snr_text

MODE = "portable"  # the same on both sides: a comparison of two lowerings of ggml ops
model = MODEL or str(TINY_DECODER)
runs = [
    execute(RunSpec(model=model, input="random", frames=FRAMES, lowering={**low, "mode": MODE}, repeat=REPEAT,
                    label=label))
    for label, low in (("A " + str(A), A), ("B " + str(B), B))
]
assert all(r.mode == MODE for r in runs if r.ok), [r.mode for r in runs]  # like with like, as it ran
for r in runs:
    print(r.label, "error:" if r.error else "ok", r.error or f"{len(r.wav)} samples, decode {r.decode_s:.2f} s")
    if r.profile is not None:
        cfg = r.profile.config
        print(f"   mode {cfg['mode']}, backend {cfg['backend_label']}, lowering {cfg['lowering_resolved']}")
    for n in r.notes:
        print("   note:", n.splitlines()[0])

# %%
a, b = runs
print(f"B against A: {snr_text(snr_db(b.wav, a.wav))} (both lowerings compute the same decoder)")
display(Audio(a.wav, rate=24000, normalize=False), Audio(b.wav, rate=24000, normalize=False))
display(plots.waveform(b.wav - a.wav, title="B - A (rounding differences of the two lowerings)"))
if a.profile is not None and b.profile is not None:
    display(plots.compare(a.profile, b.profile, ("A", "B")))
    print(plots.ratios(a.profile, b.profile)["stage"])

# %%
from kzlab.report import write_report

out = write_report(runs, REPORT, "A/B comparison")
print("wrote", out.resolve())

# %% [markdown]
# The same, interactively: pick decoders and options, Run, and look through the tabs.

# %%
wb = kzlab.Workbench(folder=TINY_DECODER.parent, model=model)
display(wb)
