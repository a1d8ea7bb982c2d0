"""Write the notebooks of this folder from the cell lists below (run: python notebooks/_build.py).

Keeping the notebooks as code here keeps them in step with the API; each has a cell tagged "parameters"
(papermill style) and runs top to bottom on CPU in a few minutes from a fresh checkout.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = """\
%matplotlib inline
from pathlib import Path
import numpy as np
from IPython.display import Audio, display
import kzlab
from kzlab import plots

REPO = Path(kzlab.__file__).resolve().parents[1]  # the checkout (test data and the speech sample)
TINY = REPO / "tests" / "data" / "qwen3-tts-12hz-tiny"
"""


def md(text: str):
    return new_markdown_cell(text.strip())


def code(text: str):
    return new_code_cell(text.strip())


def params(text: str):
    c = new_code_cell(text.strip())
    c.metadata["tags"] = ["parameters"]
    return c


QUICKSTART = [
    md("""
# 01 Quickstart: load, decode, listen, T-evolution, GFLOPs

Load a decoder, decode codes to 24 kHz audio with ggml, listen, and see how the sequence length grows
block by block. The defaults use the tiny test decoder (fast on any CPU); set `MODEL = "synthetic"` for the
full-size synthetic decoder (built into the cache on first use).
"""),
    params("""
MODEL = ""          # a .gguf path, "synthetic" or "known-answer"; empty: the tiny test decoder
FRAMES = 8          # code frames to decode (12.5 frames per second)
THREADS = None      # CPU threads (None: all)
SPEECH_SECONDS = 1.0  # seconds of speech for the known-answer round trip (full size: ~10 s of CPU per second)
"""),
    code(SETUP),
    code("""
from kzlab.ui.models import resolve_model, random_codes
path = resolve_model(MODEL or str(TINY / "qwentts-tokenizer-f32.gguf"))
dec = kzlab.load(path, threads=THREADS)
dec
"""),
    md("Decode random codes and keep every stage's output (`intermediates=True`)."),
    code("""
codes = random_codes(dec.hparams, FRAMES)
out = dec.decode(codes, intermediates=True)
print(codes.shape, "->", out.wav.shape, "samples at", out.sample_rate, "Hz")
display(Audio(out.wav, rate=out.sample_rate, normalize=False))
"""),
    code("plots.t_evolution(out)"),
    code("plots.waveform(out.wav)"),
    code("plots.spectrogram(out.wav)"),
    md("""
## GFLOPs per block

`kzlab.profile` times every node (several repeats) and counts FLOPs per layer with both MAC conventions.
"""),
    code("""
try:
    prof = kzlab.profile(str(path), codes=codes, threads=THREADS, repeat=2, warmup=1)
except ModuleNotFoundError as e:
    prof = None
    print("the profiler is not installed here:", e)
if prof is not None:
    print(f"wall {prof.wall_ms:.1f} ms, profiled {prof.profiled_ms:.1f} ms, peak {prof.peak_gflops:.1f} GF/s")
    display(plots.gflop_breakdown(prof))
"""),
    md("""
## Listen to speech through the full-size vocoder

The known-answer decoder's vocoder path is exactly invertible: `kzlab.audio_to_latent` turns a recording
into the 1024-channel latent that decodes back to it through the real full-size graph.
"""),
    code("""
from kzlab.audio import read_wav
ka = kzlab.load(resolve_model("known-answer"), threads=THREADS)
speech, sr = read_wav(REPO / "data" / "speech-24k.wav")
speech = speech[: int(SPEECH_SECONDS * sr)]
back = ka.decode_from("latent", kzlab.audio_to_latent(speech, ka.hparams))[: speech.size]
snr = 10 * np.log10(np.sum(speech**2) / np.sum((back - speech) ** 2))
print(f"SNR against the recording: {snr:.1f} dB")
display(Audio(back, rate=sr, normalize=False))
ka.close()
"""),
    code("dec.close()"),
]

BACKENDS = [
    md("""
# 02 Backends and lowerings

The same decoder written as different ggml graphs (lowerings) and run with or without
`ggml_backend_sched`: wall time per configuration, and a roofline of every node.
"""),
    params("""
MODEL = ""        # empty: the tiny test decoder
FRAMES = 4
THREADS = None
REPEAT = 2
CONVS = ["im2col-f32", "ktap"]  # add "im2col-f16" for ggml_conv_1d's own form
"""),
    code(SETUP),
    code("""
import time
from kzlab.runtime.backends import available_backends
from kzlab.ui.models import resolve_model, random_codes
path = resolve_model(MODEL or str(TINY / "qwentts-tokenizer-f32.gguf"))
print("backends here:", available_backends())
codes = random_codes(kzlab.load_model(path).hparams, FRAMES)

def best_ms(dec, n=REPEAT):
    dec.decode(codes)  # builds and allocates the graph once
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); dec.decode(codes); ts.append((time.perf_counter() - t0) * 1e3)
    return min(ts)
"""),
    md("## Scheduler on and off, for each conv lowering"),
    code("""
rows, ref = [], None
for conv in CONVS:
    for sched in (False, True):
        with kzlab.load(path, threads=THREADS, sched=sched or None, conv=conv) as dec:
            wav = dec.decode(codes)
            ref = wav if ref is None else ref
            snr = 10 * np.log10(np.sum(ref**2) / max(np.sum((wav - ref) ** 2), 1e-30))
            rows.append({"conv": conv, "sched": sched, "best ms": round(best_ms(dec), 2),
                         "SNR vs first dB": round(snr, 1)})
for r in rows:
    print(r)
"""),
    code("""
from matplotlib.figure import Figure
fig = Figure(figsize=(7, 3), layout="constrained")
ax = fig.add_subplot()
ax.barh([f"{r['conv']} sched={r['sched']}" for r in rows], [r["best ms"] for r in rows])
ax.set_xlabel("best of %d decodes (ms)" % REPEAT)
fig
"""),
    md("## Roofline: achieved GF/s of every node against its arithmetic intensity"),
    code("""
profs = []
try:
    for conv in CONVS[:2]:
        profs.append(kzlab.profile(str(path), codes=codes, threads=THREADS, lowering=kzlab.Lowering(conv=conv),
                                   repeat=REPEAT, warmup=1))
except ModuleNotFoundError as e:
    print("the profiler is not installed here:", e)
if profs:
    display(plots.roofline(profs, labels=CONVS[:2]))
    display(plots.compare(profs[0], profs[1], tuple(CONVS[:2])))
"""),
]

HEXAGON = [
    md("""
# 03 Hexagon what-if: the 1024-row refusal

ggml's Hexagon backend (v0.15.2) refuses a MUL_MAT whose src1 has more than 1024 rows. A convolution
written `mul_mat(kernel, im2col)` (`conv_src1="data"`) has one src1 row per time step, so every conv of the
decoder blocks (thousands of samples) lands on the CPU. Splitting the MUL_MAT into chunks of 1024 rows
(`mm_chunk=1024`), or the v0.15.3 profile, moves them back. `kzlab.simulate` predicts the scheduler's
placement from the backend's published `supports_op` rules; nothing runs on a device.
"""),
    params("""
MODEL = ""        # empty: the tiny test decoder (same graph structure as the full-size one)
FRAMES = 31
"""),
    code(SETUP),
    code("""
from kzlab.ui.models import resolve_model
path = resolve_model(MODEL or str(TINY / "qwentts-tokenizer-f32.gguf"))
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
"""),
    code("""
def conv_counts(pl):
    c = {}
    for v in pl.convs:
        c[v.verdict] = c.get(v.verdict, 0) + 1
    return c

for name, pl in results.items():
    print(f"{name:34s} convs {conv_counts(pl)}  splits {pl.n_splits}  copied {pl.copied_bytes / 1e6:.2f} MB")
"""),
    md("The per-conv verdicts of the first case: which rule refused which conv, and why."),
    code("print(results['v0.15.2, src1=data'].summary())"),
    code("""
for name, pl in results.items():
    for fig in plots.placement_figures(pl):
        fig.suptitle(name)
        display(fig)
"""),
]

COMPARE = [
    md("""
# 04 Compare two runs and write a report

Two runs of the same decoder with different lowerings, compared per block and per op, with both audios;
then one self-contained HTML report, and the interactive workbench.
"""),
    params("""
MODEL = ""         # empty: the tiny test decoder
FRAMES = 4
REPEAT = 1
A = {"conv": "im2col-f32"}
B = {"conv": "ktap"}
REPORT = "compare-report.html"
"""),
    code(SETUP),
    code("""
from kzlab.ui.runner import RunSpec, execute
model = MODEL or str(TINY / "qwentts-tokenizer-f32.gguf")
runs = [execute(RunSpec(model=model, input="random", frames=FRAMES, lowering=low, repeat=REPEAT, label=label))
        for label, low in (("A " + str(A), A), ("B " + str(B), B))]
for r in runs:
    print(r.label, "error:" if r.error else "ok", r.error or f"{len(r.wav)} samples, decode {r.decode_s:.2f} s")
    for n in r.notes:
        print("   note:", n.splitlines()[0])
"""),
    code("""
a, b = runs
snr = 10 * np.log10(np.sum(a.wav**2) / max(np.sum((b.wav - a.wav) ** 2), 1e-30))
print(f"B against A: {snr:.1f} dB (both lowerings compute the same decoder)")
display(Audio(a.wav, rate=24000, normalize=False), Audio(b.wav, rate=24000, normalize=False))
display(plots.waveform(b.wav - a.wav, title="B - A (rounding differences of the two lowerings)"))
if a.profile is not None and b.profile is not None:
    display(plots.compare(a.profile, b.profile, ("A", "B")))
    print(plots.ratios(a.profile, b.profile)["stage"])
"""),
    code("""
from kzlab.report import write_report
out = write_report(runs, REPORT, "A/B comparison")
print("wrote", out.resolve())
"""),
    md("The same, interactively: pick decoders and options, Run, and look through the tabs."),
    code("""
wb = kzlab.Workbench(folder=TINY, model=model)
wb
"""),
]


def write(name: str, cells: list) -> Path:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    p = HERE / name
    nbformat.write(nb, p)
    return p


NOTEBOOKS = {
    "01_quickstart.ipynb": QUICKSTART,
    "02_backends_and_lowerings.ipynb": BACKENDS,
    "03_hexagon_what_if.ipynb": HEXAGON,
    "04_compare_and_report.ipynb": COMPARE,
}

if __name__ == "__main__":
    for name, cells in NOTEBOOKS.items():
        print("wrote", write(name, cells))
