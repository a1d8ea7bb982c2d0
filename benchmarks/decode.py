"""Decode speed of kzlab's ggml graphs against upstream PyTorch, measured in one process.

CPU timings on a shared machine drift by tens of percent within a minute, so every configuration is
loaded once and then timed in turns (A, B, C, A, B, C, ...): the ratios come from runs interleaved in
time, and the table shows medians. Each row also gets its achieved GF/s (the model's multiply-adds x 2,
counted from kzlab's graph, divided by the median time) and the resident memory it reached, and every
kzlab output is checked against the PyTorch output of the same codes (SNR in dB).

kzlab and PyTorch usually live in different virtual environments; run this file with the PyTorch one
and point ``--site`` at the site-packages that holds kzlab and ggml-python (appended to ``sys.path`` with its
``.pth`` files, so the PyTorch environment's own packages win)::

    /work/venv-bench/bin/python benchmarks/decode.py --site /work/venv0/lib/python3.11/site-packages \\
        --hf /work/cache/full/hf --f32 /work/cache/full/full-f32.gguf --f16 /work/cache/full/full-f16.gguf

Without PyTorch (``--no-torch``) the same script compares the kzlab configurations alone.

``--llamacpp MMPROJ`` puts llama.cpp's own decoder beside them (code2wav, through llama-cpp-python 0.3.36 in a
worker process: benchmarks/llamacpp_code2wav.py; ``--llamacpp-python`` names an interpreter that has it), and
adds a kzlab row that decodes that same mmproj file. The peer's time is the one its worker measures around its
own calls.
"""

from __future__ import annotations

import argparse
import gc
import os
import site
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
FRAME_RATE_HZ = 12.5


def rss_mb() -> float:
    """Resident set size of this process now, in MB (from /proc, so no dependency)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


class PeakRss:
    """Samples the RSS every few milliseconds while a block runs: the peak of that block, not the process's."""

    def __init__(self, period_s: float = 0.005):
        self.period_s = period_s
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb())
            self._stop.wait(self.period_s)

    def __enter__(self) -> PeakRss:
        self.peak = rss_mb()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, rss_mb())


@dataclass
class Runner:
    """One configuration: a decode function and what was measured for it."""

    label: str
    decode: Callable[[np.ndarray], np.ndarray]
    close: Callable[[], None] = lambda: None
    #: a decode that times itself (another process): returns (waveform, seconds); its peak RSS is its own
    timed: Callable[[np.ndarray], tuple[np.ndarray, float]] | None = None
    own_peak: Callable[[], float] | None = None
    times: dict[str, list[float]] = field(default_factory=dict)
    peak: dict[str, float] = field(default_factory=dict)
    work: dict[str, float] = field(default_factory=dict)
    out: dict[str, np.ndarray] = field(default_factory=dict)


def snr_db(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    err = float(np.sum((out - ref) ** 2))
    return float("inf") if err == 0 else float(10 * np.log10(np.sum(ref**2) / err))


def kzlab_configs(args: argparse.Namespace) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, file, load kwargs) of the kzlab rows: the default, the naive graph, and the alternatives."""
    from kzlab.environment import blas_label, ggml_cpu_libm
    from kzlab.graph.options import DEVICE, NAIVE, Lowering
    from kzlab.runtime.backends import available_backends

    def convs(low: Lowering) -> str:  # what the conv options resolve to on these (CPU and BLAS) backends
        plan = low.resolve(cpu_only=True)
        return f"{plan.conv}, src1={plan.conv_src1}"

    auto = f"auto: blas+cpu, BLAS {blas_label()}" if "blas" in available_backends() else "auto: cpu"
    auto += f", libm {ggml_cpu_libm()}"
    rows: list[tuple[str, str, dict[str, Any]]] = [
        (f"kzlab default ({auto})", args.f32, {"lowering": Lowering(), "backend": "auto"}),
        (f"kzlab portable ({auto}, ggml ops only: {convs(Lowering(mode='portable'))})", args.f32,
         {"lowering": Lowering(mode="portable"), "backend": "auto"}),
        (f"kzlab portable as a device port's conv ({auto}, ggml ops only: {convs(DEVICE)})", args.f32,
         {"lowering": DEVICE, "backend": "auto"}),
        ("kzlab default lowering (cpu)", args.f32, {"lowering": Lowering(), "backend": "cpu"}),
        ("kzlab naive (NAIVE, cpu)", args.f16, {"lowering": NAIVE, "backend": "cpu"}),
    ]
    if args.alternatives:
        rows += [
            ("kzlab resunit=ops (auto)", args.f32, {"lowering": Lowering(resunit="ops"), "backend": "auto"}),
            ("kzlab snake=folded (auto)", args.f32, {"lowering": Lowering(snake="folded"), "backend": "auto"}),
            ("kzlab f16 file (auto)", args.f16, {"lowering": Lowering(), "backend": "auto"}),
            ("kzlab conv=im2col-f32 src1=kernel (auto)", args.f32,
             {"lowering": Lowering(conv="im2col-f32", conv_src1="kernel", resunit="fused"), "backend": "auto"}),
            ("kzlab unitconv=direct (auto)", args.f32, {"lowering": Lowering(unitconv="direct"), "backend": "auto"}),
        ]
    if args.llamacpp:
        rows.append((f"kzlab default ({auto}), llama.cpp's mmproj file", args.llamacpp,
                     {"lowering": Lowering(), "backend": "auto"}))
    if args.only:
        keep = [s.strip() for s in args.only.split(",")]
        rows = [r for r in rows if any(k in r[0] for k in keep)]
    return rows


def model_flops(path: str, frames: int) -> float:
    """2 x the multiply-adds of the decoder for `frames` frames, counted from kzlab's layer records."""
    import kzlab

    with kzlab.load(path) as d:
        bg = d.session.graph(frames)
        return 2.0 * sum(rec.macs for rec in bg.layers)


def build_runners(args: argparse.Namespace) -> list[Runner]:
    import kzlab

    runners: list[Runner] = []
    if not args.no_torch:
        sys.path.insert(0, str(HERE))
        import torch_reference as tr

        dec = tr.load_upstream_decoder(Path(args.hf), args.threads)
        runners.append(Runner("upstream PyTorch", lambda c, dec=dec: tr.decode(dec, c)))
    if args.llamacpp:
        sys.path.insert(0, str(HERE))
        from llamacpp_code2wav import Code2Wav

        peer = Code2Wav(args.llamacpp, args.threads, python=args.llamacpp_python or None)
        runners.append(Runner(
            "llama.cpp code2wav (0c1e5709, mmproj file; 72-frame windows)", lambda c, p=peer: p.decode(c)[0],
            peer.close, timed=peer.decode, own_peak=lambda p=peer: p.peak_rss_mb,
        ))
    for label, path, kw in kzlab_configs(args):
        d = kzlab.load(path, threads=args.threads, **kw)
        runners.append(Runner(label, lambda c, d=d: d.decode(c), d.close))
    return runners


def cases(args: argparse.Namespace, seed_codes: np.ndarray) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    if "seed" in args.cases:
        out[f"seed ({seed_codes.shape[1]} frames)"] = seed_codes
    limits = None
    if "10s" in args.cases or "30s" in args.cases:
        from kzlab.loader import load_model

        hp = load_model(args.f32).hparams
        limits = [hp.semantic_codebook_size] + [hp.codebook_size] * (hp.num_quantizers - 1)
    if "10s" in args.cases:
        rng = np.random.default_rng(10)
        frames = int(10 * FRAME_RATE_HZ)
        out[f"10 s ({frames} frames)"] = np.stack([rng.integers(0, lim, frames) for lim in limits]).astype(np.int64)
    if "30s" in args.cases:
        assert limits is not None
        rng = np.random.default_rng(0)
        frames = int(30 * FRAME_RATE_HZ)
        out[f"30 s ({frames} frames)"] = np.stack([rng.integers(0, lim, frames) for lim in limits]).astype(np.int64)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--site", action="append", default=[], help="extra site-packages (kzlab, ggml) to append")
    p.add_argument("--hf", default="/work/cache/full/hf", help="upstream checkpoint dir (config + safetensors)")
    p.add_argument("--f32", default="/work/cache/full/full-f32.gguf", help="the checkpoint converted --outtype f32")
    p.add_argument("--f16", default="/work/cache/full/full-f16.gguf", help="the checkpoint converted --outtype f16")
    p.add_argument("--reference", default=str(HERE.parent / "tests/data/qwen3-tts-12hz-full/reference.npz"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=5, help="timed runs per configuration and case (median)")
    p.add_argument("--cases", default="seed,30s", help="comma list: seed, 10s, 30s")
    p.add_argument("--llamacpp", default="", help="an mmproj file: time llama.cpp's code2wav on it too")
    p.add_argument("--llamacpp-python", default="", help="interpreter with llama-cpp-python (default: this one)")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--alternatives", action="store_true", help="also time the main alternative lowerings")
    p.add_argument("--only", default="", help="comma list of substrings: keep only matching kzlab rows")
    args = p.parse_args(argv)
    for s in args.site:
        site.addsitedir(s)  # appended, and its .pth files (an editable kzlab install) are honoured

    if not args.no_torch:
        # PyTorch first, so that its own OpenMP runtime starts with its default settings: kzlab sets
        # OMP_WAIT_POLICY (for ggml's CPU threads) when it is imported, and each OpenMP runtime reads it once
        sys.path.insert(0, str(HERE))
        import torch_reference  # noqa: F401

    ref = np.load(args.reference)
    all_cases = cases(args, ref["codes"])
    flops = {name: model_flops(args.f32, c.shape[1]) for name, c in all_cases.items()}
    runners = build_runners(args)
    print(f"{len(runners)} configurations, {args.threads} threads, {args.runs} interleaved runs per case", flush=True)

    for name, codes in all_cases.items():
        for r in runners:  # one untimed run each: graph build and allocation, first-touch of the weights
            r.out[name] = r.timed(codes)[0] if r.timed else r.decode(codes)
            r.times[name] = []
        gc.collect()
        for i in range(args.runs):
            for r in runners:
                if r.timed is not None:
                    _, dt = r.timed(codes)
                    r.times[name].append(dt)
                    r.peak[name] = r.own_peak() if r.own_peak else float("nan")
                    r.work[name] = float("nan")
                    continue
                base = rss_mb()
                with PeakRss() as m:
                    t0 = time.perf_counter()
                    r.decode(codes)
                    dt = time.perf_counter() - t0
                r.times[name].append(dt)
                r.peak[name] = max(r.peak.get(name, 0.0), m.peak)
                r.work[name] = max(r.work.get(name, 0.0), m.peak - base)
            print(
                f"  {name} run {i + 1}: " + ", ".join(f"{r.label} {r.times[name][-1]:.2f}" for r in runners), flush=True
            )

    torch_row = runners[0] if not args.no_torch else None
    naive = next((r for r in runners if "naive" in r.label), None)
    peer = next((r for r in runners if r.timed is not None), None)
    print()
    print("| case | configuration | median s | min s | vs PyTorch | vs llama.cpp | vs naive | GF/s | peak RSS MB | "
          "+run MB | SNR dB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in all_cases:
        for r in runners:
            med = statistics.median(r.times[name])
            vs_t = f"{med / statistics.median(torch_row.times[name]):.2f}x" if torch_row else "-"
            vs_n = f"{statistics.median(naive.times[name]) / med:.2f}x faster" if naive and r is not naive else "-"
            vs_p = f"{med / statistics.median(peer.times[name]):.2f}x" if peer else "-"
            if torch_row and r is not torch_row:
                snr = f"{snr_db(r.out[name], torch_row.out[name]):.1f}"
            elif torch_row and name.startswith("seed"):
                snr = f"{snr_db(r.out[name], ref['wav']):.1f} (vs file)"
            else:
                snr = "-"
            print(
                f"| {name} | {r.label} | {med:.2f} | {min(r.times[name]):.2f} | {vs_t} | {vs_p} | {vs_n} | "
                f"{flops[name] / med / 1e9:.1f} | {r.peak[name]:.0f} | {r.work[name]:.0f} | {snr} |"
            )
    print("\n'vs PyTorch' and 'vs llama.cpp' = time / their time (< 1 is faster); 'vs naive' = naive time / time;")
    print("peak RSS is the whole process (every configuration's weights are loaded); +run = growth during a run.")
    if args.llamacpp:
        print("llama.cpp's peak RSS is its worker process's own (nan +run: not sampled).")
    for r in runners:
        r.close()


if __name__ == "__main__":
    main()
