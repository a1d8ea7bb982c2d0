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
# # 03 Hexagon what-if: which change to try on the device first, as a probability
#
# The seed case: the full-size decoder at 31 frames (2.48 s of audio; T grows 124 -> 992 -> 4960 -> 19840 ->
# 59520). On the tablet the CPU-only decode took 3340 ms; with ggml-hexagon v0.15.2 under the scheduler it took
# 3950 ms (+18 %), because v0.15.2 refuses a MUL_MAT whose src1 has more than 1024 rows and every large product
# fell back to the CPU, with splits and copies around it.
#
# The question is which change to try first: upgrading to v0.15.3 (no row limit) or to the newest release,
# v0.21.0, staying on v0.15.2 and cutting every MUL_MAT into chunks of 1024 src1 rows (`mm_chunk=1024`, joined
# with CONCAT), or writing the SIN kernel the HTP lacks (`+SIN`, a what-if) - and whether any of them can reach
# the 0.8 s the user needs. `kzlab.whatif` answers it in one call:
# - each configuration's graph is placed as ggml's scheduler would place it, from the backends' published
#   `supports_op` rules; the CPU nodes take their times from a CPU-only profile of that graph (measured here
#   once and cached on disk), scaled so that the CPU-only decode takes the 3340 ms measured on the device;
# - what nobody measured on the HTP (its rates, dispatch and split costs) is a range, not a number: the
#   parameters are drawn over their ranges, the same draws for every configuration, so each draw is one possible
#   device and "A is faster than B" is counted draw by draw. Each product is priced on the kernel the source
#   gives it (HMX, the matrix unit, on by default as GGML_HEXAGON_USE_HMX is; or HVX), each streaming op by its
#   class's bandwidth, and every range holds what has been measured in public (llama.cpp's Hexagon PRs);
# - the answer is a probability, with what it rests on, what reaching the target would take, and the device
#   measurement that would settle it;
# - and beside every time, whether the configuration computes the right audio. ggml-hexagon's HMX product reads
#   its activation operand (src1) as F32 whatever its type, in every release (v0.15.2 `htp/matmul-ops.c` 4776 and
#   4811, v0.15.3 3047 and 3085, v0.21.0 and master 3335 and 3386); the only fix is the head of ggml's PR #1601
#   (78c531d4), unmerged, which sends an F16 src1 to HVX instead. The seed's graph feeds F16 im2col columns as
#   src1, so every conv product that reaches HMX computes garbage. The capability profiles carry that defect; the
#   placement marks the nodes that hit it, and kzlab decodes the placed graph on this machine with the device's
#   arithmetic (each product the device runs computed as its kernel does, the defect included) to hear it. A
#   configuration that computes the wrong audio is never recommended, however fast.

# %% tags=["parameters"]
MODEL = "synthetic"       # the full-size decoder (seeded random weights, F16), built into the cache on first use
FRAMES = 31               # the seed case
CPU_BASELINE_MS = 3340    # the CPU-only decode measured on the device
MEASURED_V0152_MS = 3950  # CPU + HTP with ggml-hexagon v0.15.2, measured on the device
CPU_BIGVGAN_MS = 3190     # the CPU-only decode's BigVGAN part (the stages `decoder.*`), measured on the device
V0152_BIGVGAN_MS = 3760   # its BigVGAN part with v0.15.2, the only part the seed ran under the scheduler
SCHED_STAGES = "decoder"  # the stages the seed put under the device's scheduler (the rest ran on the CPU path)
TARGET_MS = 800           # the decode time the user needs (0.5-0.8 s)
DRAWS = 1000              # paired draws of the uncertain parameters
SEED = 0
CACHE = True              # reuse CPU profiles measured before (False: profile every graph anew)
STREAM_SIZES = [1, 4, 16, 72]  # code frames a streaming call decodes (80 ms of audio a frame)

# %%
# %matplotlib inline

from IPython.display import display

import kzlab
from kzlab import plots, resolve_model

path = resolve_model(MODEL)
model = kzlab.load_model(path)
print(path, f"{model.n_params / 1e6:.0f} M parameters", model.dtype_histogram())

# %% [markdown]
# ## The seed's graph and the configurations
#
# The seed lowered the convs as ggml's `conv_1d` does (`im2col-f16`, the data as src1), the residual units as
# plain ops, the transposed convs as `col2im` and Snake folded. A configuration is `NAME=PROFILE[,item...]`: a
# lowering option changes the graph (a chunked graph is another graph, profiled on its own); `+OP` / `-OP` add
# an op to the device's supports_op or take one away (priced at its op class's ranges, and said so); `hmx=0`
# turns the matrix unit off; `stages=decoder` puts only those stages under the device's scheduler, as the seed
# ran it. The CPU-only decode is always compared too (`cpu`).

# %%
seed_graph = kzlab.Lowering(mode="portable", conv="im2col-f16", conv_src1="data", resunit="ops", convt="col2im",
                            snake="folded")
CONFIGS = [f"v0.15.2=hexagon-v0.15.2,stages={SCHED_STAGES}", f"v0.15.3=hexagon-v0.15.3,stages={SCHED_STAGES}",
           f"v0.15.2+chunk=hexagon-v0.15.2,mm_chunk=1024,stages={SCHED_STAGES}",
           f"v0.15.3+SIN=hexagon-v0.15.3,+SIN,stages={SCHED_STAGES}",
           f"v0.15.3-f32cols=hexagon-v0.15.3,conv=im2col-f32,stages={SCHED_STAGES}",
           f"v0.21.0=hexagon-v0.21.0,stages={SCHED_STAGES}"]
question = {"frames": FRAMES, "lowering": seed_graph, "cpu_baseline_ms": CPU_BASELINE_MS, "target_ms": TARGET_MS,
            "draws": DRAWS, "seed": SEED, "cache": CACHE}

# %% [markdown]
# `v0.15.3-f32cols` is the same device with the convs' columns in F32 (`conv=im2col-f32`): HMX then reads src1 as
# what it is. Every configuration puts the same stages under the scheduler (`stages=decoder`, as the seed ran it),
# so each pair compares one scope.
#
# ## Which configurations compute the right audio
#
# First the placements alone: the nodes each release puts on a kernel path with a known defect, per stage (the
# placement plot marks them with a red x).

# %%
placed = {}
for text in CONFIGS:
    spec = kzlab.ConfigSpec.parse(text)
    low = seed_graph.replace(**spec.options)
    placed[spec.name] = kzlab.simulate(model, spec.capabilities(), frames=FRAMES, lowering=low, stages=spec.stages)
for name, pl in placed.items():
    per = "; ".join(f"{d['n_nodes']} nodes ({d['gflop']:.0f} GFLOP): " + ", ".join(f"{k} {v}" for k, v in
                    d["by_stage"].items()) for d in pl.defects)
    print(f"{name:16s} {pl.defect_nodes:3d} node(s) on a defective path" + (f": {per}" if per else ""))
pr1601 = kzlab.simulate(model, "hexagon-78c531d", frames=FRAMES, lowering=seed_graph, stages=SCHED_STAGES)
print(f"{'PR #1601 head':16s} {pr1601.defect_nodes:3d} node(s) on a defective path (78c531d: F16 src1 takes HVX)")
display(plots.placement(placed["v0.15.3"]))
for d in placed["v0.15.3"].defects:
    print(f"{d['title']}\n  source: {d['source']}\n  holds for: {d['versions']}\n  fix: {d['fix']}")

# %% [markdown]
# Then the arithmetic. `kzlab.emulate` decodes the placed graph here with each product the HTP runs computed as
# its kernel computes it (HMX: weights and activations converted to F16 tiles; the defect: an F16 src1's bytes read
# as F32 with the F32 row stride), every other node as the host computes it, and compares each stage with the
# host's F32 decode of the same codes (`kzlab compare MODEL --device hexagon-v0.15.3 ...` on the command line).
# Listen to what the tablet would play with the seed's graph on v0.15.3, beside the same device with F32 columns.

# %%
from IPython.display import Audio  # noqa: E402

wrong = kzlab.emulate(model, "hexagon-v0.15.3", frames=FRAMES, lowering=seed_graph, stages=SCHED_STAGES)
right = kzlab.emulate(model, "hexagon-v0.15.3", frames=FRAMES, lowering=seed_graph.replace(conv="im2col-f32"),
                      stages=SCHED_STAGES)
print(wrong.summary())
print(right.summary())
display(plots.stage_snr([wrong, right], labels=["v0.15.3, F16 columns", "v0.15.3, F32 columns"],
                        title="emulated device decode against the host's F32 decode"))
print("what the tablet would play, seed's graph on v0.15.3 (HMX reads the F16 columns as F32):")
display(Audio(wrong.playable(), rate=wrong.sample_rate, normalize=False))
print("the same device with F32 columns (conv=im2col-f32):")
display(Audio(right.playable(), rate=right.sample_rate, normalize=False))
print("the host's F32 decode:")
display(Audio(right.playable(host=True), rate=right.sample_rate, normalize=False))

# %% [markdown]
# What of the seed's own v0.15.2 run? The placement above puts dec.0's and dec.1's products (src1 rows 124 and
# 992, under v0.15.2's 1024-row limit) on HMX with F16 src1, when the weights live in the HTP's buffer; the seed's
# scheduler log (`GGML_SCHED_DEBUG=2`) shows every BigVGAN MUL_MAT on the CPU. Both cannot hold: with the weights in
# a CPU buffer the scheduler keeps every product on the CPU (`own_buffers`), and then the run computed them
# right; with the weights on the HTP, a log line `dec.0.conv:MUL_MAT` on CPU would mean kzlab's v0.15.2 rule is
# wrong. The log settles it: each node's backend and each weight's buffer (`dec.0.conv.weight [HTP0]` or
# `[CPU]`) are in it. If those products did run on HMX, this is what the seed's 3.95 s decode played:

# %%
seed_run = kzlab.emulate(model, "hexagon-v0.15.2", frames=FRAMES, lowering=seed_graph, stages=SCHED_STAGES)
print(seed_run.summary())
display(Audio(seed_run.playable(), rate=seed_run.sample_rate, normalize=False))
cpu_weights = kzlab.simulate(model, "hexagon-v0.15.2", frames=FRAMES, lowering=seed_graph, stages=SCHED_STAGES,
                             weights_on="cpu")
print(f"with the weights in a CPU buffer: {sum(n.op == 'MUL_MAT' and n.backend == 'HTP' for n in cpu_weights.nodes)} "
      f"products on the HTP, {cpu_weights.defect_nodes} on a defective path, {cpu_weights.n_splits} split(s)")

# %% [markdown]
# ## The answer from the stated ranges alone
#
# Every HTP parameter is drawn over the range its capability profile states (with the source of each range).
# The boxes are p10-p90 of each total, the ticks the p50, the lines min-max; the right panels give, for each
# pair, the ratio A/B and P(A faster than B), and how much of the decision's spread each parameter explains.

# %%
prior = kzlab.whatif(model, CONFIGS, **question)
print(prior.summary())
display(plots.decision(prior))

# %% [markdown]
# Per stage (bars p50, dark whiskers p10-p90, faint min-max), the CPU-only decode as black ticks: where the
# configurations differ, and how little of it the stated ranges pin down.

# %%
# the configurations asked (the correct variants the what-if added for the wrong ones are in the summary above)
changes = [name for name in prior.placements if name != "cpu" and not prior.decision.configs[name].get("variant_of")]
display(plots.predicted_stages([prior.placements[n] for n in changes], changes, baseline=prior.placements["cpu"]))
v0152 = prior.decision.configs["v0.15.2"]["range"]
inside = v0152["min"] <= MEASURED_V0152_MS <= v0152["max"]
print(f"v0.15.2 from the stated ranges: p10 {v0152['p10']:.0f}, p50 {v0152['p50']:.0f}, p90 {v0152['p90']:.0f} ms "
      f"(min {v0152['min']:.0f}, max {v0152['max']:.0f}); the device measured {MEASURED_V0152_MS} ms: "
      + ("inside the range" if inside else "OUTSIDE the range: the model lacks a cost or a range is too narrow"))
for name, pl in prior.placements.items():
    print(f"{name:16s}", "; ".join(m.verdict() for m in pl.memory.values()))
for name in ["cpu", *changes]:  # right or wrong audio, and what reaching the target would take
    info = prior.decision.configs[name]
    acc = info["accuracy"]
    verdict = "RIGHT audio" if info["correct"] else f"WRONG OUTPUT ({info['why']})"
    print(f"{name:16s} {verdict}; emulated wav SNR {acc['snr_db']} dB; P(<= {TARGET_MS} ms) = "
          f"{prior.decision.target[name]:.2f}; {info['needs']['text']}")
    for v in info.get("correct_variants", []):
        r = v["range"]
        print(f"{'':16s}   correct variant [{v['remedy']}]: p50 {r['p50']:.0f} ms (p10 {r['p10']:.0f}, "
              f"p90 {r['p90']:.0f}), P(faster than {name}) = {v['p_faster_than_it']:.2f}, right audio: {v['correct']}")

# %% [markdown]
# ## Calibrated on the device's four numbers
#
# The tablet measured two decodes and, in each, the BigVGAN part: `cpu`, `cpu:decoder`, `v0.15.2` and
# `v0.15.2:decoder` (a `:STAGE` suffix is the time of those stages alone). They constrain the parameters
# jointly: draws that do not reproduce them (within their run-to-run spread) are dropped, the rest are the
# posterior. The calibration says which parameters the numbers narrowed (identified) and which they left at
# their prior, flags any pushed against a bound of its plausible range, and checks every parameter against
# what has been measured in public: a posterior that contradicts the public figures is reported as a cost the
# model lacks (with the candidates and the device command that tells them apart), never as a finding.

# %%
measured = {"cpu": CPU_BASELINE_MS, "cpu:decoder": CPU_BIGVGAN_MS, "v0.15.2": MEASURED_V0152_MS,
            "v0.15.2:decoder": V0152_BIGVGAN_MS}
post = kzlab.whatif(model, CONFIGS, measured=measured, **question)
print(post.summary())
display(plots.decision(post))

# %%
cal = post.posterior
print("identified by the four numbers:", ", ".join(cal.identified) or "none")
print("left at their prior:", ", ".join(cal.prior_only) or "none")
for f in cal.flags:
    print(f"FLAG ({f['kind']}):", f["message"])
if not cal.flags:
    print("no parameter was pushed outside its plausible range, none contradicts a public measurement")
display(plots.predicted_stages([post.placements[n] for n in changes], changes, baseline=post.placements["cpu"]))

# %% [markdown]
# The conv lowering variants (`ktap`, `conv_src1=kernel`) are left out of this question: the CPU-only baseline
# was measured on the device for the seed's graph only, and another graph's CPU-only time there is not known.
#
# ## Which change to try first
#
# Printed from the calibrated answer: the configuration kzlab recommends (the fastest that computes the right
# audio), the decision between the two contenders with the lowest medians among those that compute it, the wrong
# configurations that would have been faster (never recommended), the chance of reaching the target, and the one
# device measurement that would move the decision most.

# %%
dec = post.decision
rec = post.recommended
print(f"recommended: {rec['name']} (p50 {rec['p50_ms']:.0f} ms): {rec['why']}")
for w in rec["faster_but_wrong"]:
    print(f"  not recommended though faster: {w['name']} (p50 {w['p50_ms']:.0f} ms, P(faster) = {w['p_faster']:.2f}): "
          f"WRONG OUTPUT, {w['why']}")
dd = dec.decision
state = "settled" if dd["settled"] else "not settled: measure before choosing"
print(f"{dd['a']} before {dd['b']}: P({dd['a']} faster than {dd['b']}) = {dd['p_a_faster']:.2f} on {dec.draws} "
      f"paired draws calibrated on the device's totals ({state}).")
was = prior.decision.decision
print(f"  from the stated ranges alone: P({was['a']} faster than {was['b']}) = {was['p_a_faster']:.2f}")


def p_faster(d, a, b):
    """P(a faster than b) from the decision's pairs (either order)."""
    for pair in d.pairs:
        if (pair["a"], pair["b"]) == (a, b):
            return pair["p_a_faster"]
        if (pair["a"], pair["b"]) == (b, a):
            return 1.0 - pair["p_a_faster"]
    raise KeyError((a, b))


right = sorted((n for n in dec.configs if dec.configs[n]["correct"] and n != "cpu"),
               key=lambda n: dec.configs[n]["range"]["p50"])
print("the configurations that compute the right audio, fastest first:")
for n in right:
    r = dec.configs[n]["range"]
    print(f"  {n:44s} p50 {r['p50']:6.0f} ms (p10 {r['p10']:.0f}, p90 {r['p90']:.0f}); P(faster than the CPU-only "
          f"decode) = {p_faster(dec, n, 'cpu'):.2f}; P(within {TARGET_MS} ms) = {dec.target[n]:.2f}")
for n in right[:2]:
    print(f"  {n} would need: {dec.configs[n]['needs']['text']}")
if dec.next_measurements:
    m = dec.next_measurements[0]
    share = next(s["share"] for s in dec.sensitivity if s["parameter"] == m["parameter"])
    print(f"Next measurement: {m['parameter']} (explains {share:.0%} of the decision's spread alone; knowing it "
          f"takes the log-ratio spread from {m['spread_before']:.2f} to {m['spread_after']:.2f}, settled afterwards "
          f"in {m['p_settled_after']:.0%} of cases)")
    print(f"  on the device: {m['command']}")
    print(f"  then: {m['then']}")

# %% [markdown]
# ## Streaming: which chunk keeps real time
#
# A TTS front end hands the decoder codes as it makes them, and the decoder streams: each call decodes K new
# frames with its causal layers' context carried from the call before (`Decoder.stream()`). A small call is another
# graph for the device, not a slice of the 31-frame one: its products have few src1 rows (HMX needs more than 4 on
# v0.15.3 and later, 32 on v0.15.2; below that they run on HVX), and every call pays its splits' round trips and
# copies again. `stream=` places and prices one call of each size on every configuration, on the draws above:
# the call's range, P(real time) = P(call < K x 80 ms), the time to first audio (the first call, with the buffers
# the device maps on first use), and the smallest chunk that keeps real time with P >= 0.9 among the configurations
# that compute the right audio (a configuration wrong as a whole decode is wrong at every size).

# %%
streamed = kzlab.whatif(model, CONFIGS, stream=STREAM_SIZES, **question)
print("\n".join(streamed.stream_lines()))
rc = streamed.stream["recommended_chunk"]
if rc["config"]:
    print(f"\nstream {rc['frames']} frame(s) a call on {rc['config']}: P(real time) = {rc['p_realtime']:.2f}, first "
          f"audio p50 {rc['first_audio_ms']['p50']:.0f} ms (p10-p90 {rc['first_audio_ms']['p10']:.0f}-"
          f"{rc['first_audio_ms']['p90']:.0f})")
