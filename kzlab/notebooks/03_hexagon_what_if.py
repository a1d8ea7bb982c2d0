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
# # 03 Hexagon what-if: the 1024-row refusal
#
# ggml's Hexagon backend (v0.15.2) refuses a MUL_MAT whose src1 has more than 1024 rows. A convolution
# written `mul_mat(kernel, im2col)` (`conv_src1="data"`) has one src1 row per time step, so every conv of the
# decoder blocks (thousands of samples) lands on the CPU. Splitting the MUL_MAT into chunks of 1024 rows
# (`mm_chunk=1024`), or the v0.15.3 profile, moves them back. `kzlab.simulate` predicts the scheduler's
# placement from the backend's published `supports_op` rules; nothing runs on a device.
# The simulator always builds the portable graph (`mode="portable"`: ggml ops only, what a device port runs),
# never kzlab's fused CPU nodes.

# %% tags=["parameters"]
MODEL = ""        # empty: the tiny reference decoder shipped with kzlab (same graph structure as the full-size one)
FRAMES = 31

# %%
# %matplotlib inline

from IPython.display import display

import kzlab
from kzlab import plots

# %%
from kzlab.app.builtins import (
    TINY_DECODER,  # shipped in the package: no checkout needed
    resolve_model,
)

path = resolve_model(MODEL or str(TINY_DECODER))
model = kzlab.load_model(path)
data = kzlab.Lowering(conv="im2col-f32", conv_src1="data", wtype="f16")  # mul_mat(kernel, im2col), F16 weights
cases = {
    "v0.15.2, src1=data": dict(profile="hexagon-v0.15.2", lowering=data),
    "v0.15.2, src1=data, chunk 1024": dict(profile="hexagon-v0.15.2", lowering=data.replace(mm_chunk=1024)),
    "v0.15.3, src1=data": dict(profile="hexagon-v0.15.3", lowering=data),
}
results = {}
for name, kw in cases.items():
    results[name] = kzlab.simulate(model, frames=FRAMES, **kw)


# %%
def conv_counts(pl):
    c = {}
    for v in pl.convs:
        c[v.verdict] = c.get(v.verdict, 0) + 1
    return c


for name, pl in results.items():
    print(f"{name:34s} convs {conv_counts(pl)}  splits {pl.n_splits}  copied {pl.copied_bytes / 1e6:.2f} MB")

# %% [markdown]
# The per-conv verdicts of the first case: which rule refused which conv, and why.

# %%
print(results["v0.15.2, src1=data"].summary())

# %%
for name, pl in results.items():
    for fig in plots.placement_figures(pl):
        fig.suptitle(name)
        display(fig)
