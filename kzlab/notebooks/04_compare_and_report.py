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

# %%
from kzlab import (
    TINY_DECODER,  # shipped in the package: no checkout needed
    RunSpec,
    execute,
    plots,
    snr_db,
    snr_text,
)

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

# %% [markdown]
# ## Two placements side by side: the Hexagon what-if of v0.15.2 and v0.15.3
#
# The same portable graph placed on two versions of ggml-hexagon, each with its predicted time (CPU nodes from
# a CPU-only profile of that graph; HTP nodes from the profile's assumed `[perf]` values, listed with their
# sources) and its memory: the nodes that moved, splits, copies and milliseconds per stage.

# %%
from kzlab import placement_diff

low = kzlab.Lowering(mode="portable", conv="im2col-f32", conv_src1="data").portable()  # the graph a device runs
cpu_prof = kzlab.profile(model, frames=FRAMES, backend="cpu", sched=False, lowering=low, repeat=1, warmup=1,
                         peak=False, progress=False)
pa, pb = (kzlab.simulate(model, prof, frames=FRAMES, lowering=low, predict={"cpu_profile": cpu_prof})
          for prof in ("hexagon-v0.15.2", "hexagon-v0.15.3"))
d = placement_diff(pa, pb)
print(f"{len(d['moved'])} nodes move; splits {d['splits']}; predicted ms {[round(x, 2) for x in d['predicted_ms']]}")
for m in (pa.memory["HTP"], pb.memory["HTP"]):
    print(m.verdict())
display(plots.predicted_stages([pa, pb], ["v0.15.2", "v0.15.3"]))

# %%
from kzlab import write_report

out = write_report(runs, REPORT, "A/B comparison")
print("wrote", out.resolve())

# %% [markdown]
# The same, interactively: pick decoders and options, Run, and look through the tabs.

# %%
wb = kzlab.Workbench(folder=TINY_DECODER.parent, model=model)
display(wb)
