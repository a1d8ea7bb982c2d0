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
# # 03 Hexagon what-if: where the nodes go, how long it takes, whether it fits
#
# The seed case: the full-size decoder at 31 frames (2.48 s of audio; T grows 124 -> 992 -> 4960 -> 19840 ->
# 59520). On the tablet the CPU-only decode took 3340 ms; with ggml-hexagon v0.15.2 under the scheduler it took
# 3950 ms (+18 %), because v0.15.2 refuses a MUL_MAT whose src1 has more than 1024 rows and every large product
# fell back to the CPU, with splits and copies around it.
#
# `kzlab.simulate` places every node as ggml's scheduler would, from the backends' published `supports_op`
# rules, and with `predict=` puts milliseconds and bytes on the placement:
# - CPU nodes take their times from a CPU-only profile of the same graph, measured here and scaled so that the
#   CPU-only decode takes the 3340 ms measured on the device;
# - HTP nodes take a roofline from the profile's `[perf]` values (assumed until measured: see the parameter
#   list), splits their copies and a dispatch cost; memory is measured with ggml's own allocator on the graph.
#
# Compared: v0.15.2, v0.15.2 with every MUL_MAT cut into chunks of 1024 src1 rows (`mm_chunk=1024`, the
# chunks joined with CONCAT, the op a port would write, which the HTP accepts), and v0.15.3 (no row limit);
# each with the conv lowered as `im2col-f16` (ggml_conv_1d's graph) and as `ktap` (K shifted products), each
# with both operand orders (`conv_src1`). The simulator always builds the portable graph (ggml ops only).

# %% tags=["parameters"]
MODEL = "synthetic"      # the full-size decoder (seeded random weights, F16), built into the cache on first use
FRAMES = 31              # the seed case
CPU_BASELINE_MS = 3340   # the CPU-only decode measured on the device
MEASURED_V0152_MS = 3950  # CPU + HTP with ggml-hexagon v0.15.2, measured on the device
REPEAT = 1               # profile runs per graph (each a plain and a profiled decode)

# %%
# %matplotlib inline

import itertools
import tomllib

from IPython.display import display

import kzlab
from kzlab import plots
from kzlab.analysis.predict.calibrate import calibrate
from kzlab.app.builtins import resolve_model

path = resolve_model(MODEL)
model = kzlab.load_model(path)
print(path, f"{model.n_params / 1e6:.0f} M parameters", model.dtype_histogram())

# %% [markdown]
# ## CPU-only profiles of every graph (what the CPU nodes of each placement take)

# %%
graphs = {}
for conv, src1, chunk in itertools.product(["im2col-f16", "ktap"], ["data", "kernel"], [0, 1024]):
    low = kzlab.Lowering(mode="portable", conv=conv, conv_src1=src1, mm_chunk=chunk)
    prof = kzlab.profile(model, frames=FRAMES, backend="cpu", sched=False, lowering=low, repeat=REPEAT, warmup=0,
                         peak=False, progress=False)
    graphs[(conv, src1, chunk)] = (low, prof)
    print(f"{conv:10s} src1={src1:6s} chunk={chunk:4d}: CPU-only {prof.wall_ms:7.0f} ms here, "
          f"{prof.config['n_nodes']} nodes ({prof.config['lowering_label']})")

# %% [markdown]
# ## Predicted time and memory of every configuration

# %%
configs = {"v0.15.2": ("hexagon-v0.15.2", 0), "v0.15.2 + chunk 1024": ("hexagon-v0.15.2", 1024),
           "v0.15.3": ("hexagon-v0.15.3", 0)}
rows, placements = [], {}
for (name, (profile, chunk)), conv, src1 in itertools.product(configs.items(), ["im2col-f16", "ktap"],
                                                              ["data", "kernel"]):
    low, prof = graphs[(conv, src1, chunk)]
    pl = kzlab.simulate(model, profile, frames=FRAMES, lowering=low,
                        predict={"cpu_profile": prof, "cpu_baseline_ms": CPU_BASELINE_MS})
    placements[(name, conv, src1)] = pl
    p, htp = pl.predicted, pl.memory["HTP"]
    rows.append({"config": name, "conv": conv, "src1": src1, "predicted ms": round(p.total_ms),
                 "vs CPU-only": f"{p.total_ms / CPU_BASELINE_MS:.2f}x",
                 "HTP ms": round(p.by_backend_ms.get("HTP", 0)), "CPU ms": round(p.by_backend_ms.get("CPU", 0)),
                 "copies ms": round(p.copy_ms, 1), "splits": pl.n_splits, "sync ms": round(p.sync_ms),
                 "copied MB": round(pl.copied_bytes / 1e6, 1), "HTP MB": round(htp.total_bytes / 1e6),
                 "fits 2 GB": htp.fits})
for r in rows:
    print(r)

# %% [markdown]
# The seed's own graph (`im2col-f16`, `src1=data`) per stage, against the CPU-only decode:

# %%
cpu_only = kzlab.simulate(model, "cpu", frames=FRAMES, lowering=graphs[("im2col-f16", "data", 0)][0],
                          weights_on="cpu", predict={"cpu_profile": graphs[("im2col-f16", "data", 0)][1],
                                                     "cpu_baseline_ms": CPU_BASELINE_MS})
seed = [placements[(name, "im2col-f16", "data")] for name in configs]
display(plots.predicted_stages(seed, list(configs), baseline=cpu_only))
print(placements[("v0.15.2", "im2col-f16", "data")].predicted.summary())
for m in placements[("v0.15.2", "im2col-f16", "data")].memory.values():
    print(m.verdict())

# %% [markdown]
# ## Calibrated from the device's two totals
#
# The HTP's `[perf]` values above are assumed. The two totals measured on the tablet fix two of them: the
# CPU-only decode fixes the CPU's scale, the v0.15.2 decode the cost of each HTP split (`sync_us`, the term that
# grows with the splits). The fitted model reproduces both; v0.15.2 + chunk and v0.15.3 are then predicted
# with the fitted value.

# %%
seed_low, seed_prof = graphs[("im2col-f16", "data", 0)]
cal = calibrate(model, {"cpu": CPU_BASELINE_MS, "hexagon-v0.15.2": MEASURED_V0152_MS}, seed_prof, FRAMES, seed_low)
print(cal.summary())
fitted = tomllib.loads(cal.profile_text)["perf"]  # the fitted [perf] table, as `kzlab calibrate -o` writes it
calibrated = {}
for name, (profile, chunk) in configs.items():
    low, prof = graphs[("im2col-f16", "data", chunk)]
    pl = kzlab.simulate(model, profile, frames=FRAMES, lowering=low,
                        predict={"cpu_profile": prof, "cpu_scale": cal.cpu_scale.value, "perf": {"HTP": fitted}})
    calibrated[name] = pl
    print(f"{name:22s} calibrated prediction {pl.predicted.total_ms:7.0f} ms ({pl.n_splits} splits, "
          f"{pl.copied_bytes / 1e6:.0f} MB copied)")
display(plots.predicted_stages(list(calibrated.values()), list(calibrated), baseline=cpu_only))

# %% [markdown]
# ## Which configuration to try first on the device

# %%
fits = [r for r in rows if r["fits 2 GB"] is not False]
best = min(fits, key=lambda r: r["predicted ms"])
first_v0152 = min((r for r in fits if r["config"] != "v0.15.3"), key=lambda r: r["predicted ms"])
print(f"fastest predicted that fits the 2 GB HTP session: {best['config']}, conv {best['conv']}, "
      f"src1={best['src1']}: {best['predicted ms']} ms ({best['vs CPU-only']} of the CPU-only decode)")
print(f"  why: {best['HTP ms']} ms of its work on the HTP against {best['CPU ms']} ms left on the CPU, "
      f"{best['splits']} splits ({best['sync ms']} ms of dispatch), {best['copied MB']} MB copied, "
      f"{best['HTP MB']} MB of HTP memory")
print(f"without upgrading ggml-hexagon: {first_v0152['config']}, conv {first_v0152['conv']}, "
      f"src1={first_v0152['src1']}: {first_v0152['predicted ms']} ms")
calib = {k: round(v.predicted.total_ms) for k, v in calibrated.items()}
print(f"with the HTP split cost calibrated from the device's totals: {calib}")
print("assumed in every row above:", sorted(set(placements[("v0.15.3", "ktap", "data")].predicted.assumed)))
