"""What kzlab costs besides the decode itself: load time, profiler overhead, memory of long chunked decodes.

* load: `kzlab.load(file)` (open, memory-map, validate) and the first weight upload, warm (the file already
  in the page cache), median of several loads. Target: a 230 MB F16 GGUF ready in <= 1 s.
* profiler: `kzlab.profile` of one configuration, several times: the overhead each profile reports (profiled
  / plain, the median of its back-to-back pairs) and how far the profiles' medians lie apart (target: the
  overhead <= 5 %, repeated profiles within 5 %).
* long decode: `decode(codes, chunked=True)` of N minutes of random codes; the peak RSS is sampled during
  the decode, and RSS is printed at even times of the decode so that growth (per-chunk graphs or arrays
  kept alive) would show. The session caches one graph per distinct chunk length; their count is printed.
  Target: 10 minutes (7500 frames) within 2 GB.

    /work/venv0/bin/python benchmarks/overheads.py --f16 /work/cache/full/full-f16.gguf --minutes 10
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

import numpy as np
from decode import PeakRss, rss_mb

import kzlab

FRAME_RATE_HZ = 12.5


def bench_load(path: str, runs: int, backend: str) -> None:
    size = Path(path).stat().st_size / 1e6
    Path(path).read_bytes()  # warm: the file is in the page cache, as it is for a workbench reloading it
    opened, ready = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        d = kzlab.load(path, backend=backend)
        t1 = time.perf_counter()
        d.session._ensure_weights()  # the upload a first decode would do
        t2 = time.perf_counter()
        d.close()
        opened.append(t1 - t0)
        ready.append(t2 - t0)
    print(
        f"load {Path(path).name} ({size:.0f} MB, {backend}): open {statistics.median(opened):.3f} s, "
        f"open + weights uploaded {statistics.median(ready):.3f} s (median of {runs}, warm)"
    )


def bench_profiler(path: str, frames: int, runs: int, backend: str, profiles: int = 3) -> None:
    """`profiles` profiles of one configuration, `runs` repeats each: the profiling overhead each reports
    (median of its plain/profiled pairs) and how far the profiles' own medians lie apart."""
    prof = getattr(kzlab, "profile", None)
    if prof is None:
        print("profiler: kzlab.profile is not in this checkout; skipped")
        return
    rng = np.random.default_rng(0)
    with kzlab.load(path, backend=backend) as d:
        codes = rng.integers(0, d.hparams.codebook_size, (d.hparams.num_quantizers, frames))
        walls, profiled = [], []
        for i in range(profiles):
            p = prof(d, codes=codes, backend=backend, repeat=runs, warmup=1, peak=False)
            pairs = ", ".join(f"{r:.3f}" for r in p.config["overhead_pair_ratios"])
            sums = [s / w for s, w in zip(p.config["node_sum_all_ms"], p.config["profiled_all_ms"], strict=True)]
            print(
                f"profile {i + 1} ({frames} frames, {p.config['backend_label']}, {runs} pairs): plain "
                f"{p.wall_ms:.0f} ms, profiled {p.profiled_ms:.0f} ms, overhead x{p.overhead_ratio:.3f} "
                f"(pairs {pairs}); node times sum to {min(sums):.3f}-{max(sums):.3f} of the profiled wall time",
                flush=True,
            )
            walls.append(p.wall_ms)
            profiled.append(p.profiled_ms)
    for name, xs in (("plain", walls), ("profiled", profiled)):
        med = statistics.median(xs)
        print(
            f"  {name} medians of the {profiles} profiles: {[round(x) for x in xs]} ms, "
            f"within {100 * max(abs(x - med) for x in xs) / med:.1f}% of their median"
        )


def bench_long(path: str, minutes: float, backend: str, slices: int) -> None:
    with kzlab.load(path, backend=backend) as d:
        hp = d.hparams
        frames = int(round(minutes * 60 * FRAME_RATE_HZ))
        rng = np.random.default_rng(0)
        limits = [hp.semantic_codebook_size] + [hp.codebook_size] * (hp.num_quantizers - 1)
        codes = np.stack([rng.integers(0, lim, frames) for lim in limits]).astype(np.int32)
        before = rss_mb()
        trace: list[tuple[float, float]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.25):
                trace.append((time.perf_counter() - t0, rss_mb()))

        t0 = time.perf_counter()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with PeakRss() as m:
            wav = d.decode(codes, chunked=True)
        stop.set()
        sampler.join()
        total = wav.size
        for i in range(1, slices + 1):  # RSS over time: flat after the first chunks when nothing accumulates
            at = [r for t, r in trace if t <= trace[-1][0] * i / slices] if trace else []
            if at:
                print(f"  {100 * i // slices:>3}% of the decode: RSS {at[-1]:.0f} MB", flush=True)
        dt = time.perf_counter() - t0
        graphs = sorted(k[1] for k in d.session._graphs)  # keys: (start, frames, stages)
        # the graphs share the scheduler's compute buffer, which is as large as the largest one needs
        buffers = max((bg.compute_bytes for bg in d.session._graphs.values()), default=0) / 1e6
    print(
        f"long decode {minutes:g} min ({frames} frames, {total / hp.sample_rate:.0f} s of audio, {backend}): "
        f"{dt:.0f} s, peak RSS {m.peak:.0f} MB (before {before:.0f} MB), graphs for {graphs} frames, "
        f"compute buffer {buffers:.0f} MB"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--f16", default="/work/cache/full/full-f16.gguf", help="a full-size F16 GGUF (about 230 MB)")
    p.add_argument("--backend", default="auto")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--minutes", type=float, default=10.0, help="length of the long chunked decode")
    p.add_argument("--slices", type=int, default=5, help="RSS reports over the time of the long decode")
    p.add_argument("--profile-frames", type=int, default=31)
    p.add_argument("--skip", default="", help="comma list of parts to skip: load, profiler, long")
    args = p.parse_args(argv)
    skip = set(args.skip.split(","))
    if "load" not in skip:
        bench_load(args.f16, args.runs, args.backend)
    if "profiler" not in skip:
        bench_profiler(args.f16, args.profile_frames, args.runs, args.backend)
    if "long" not in skip:
        bench_long(args.f16, args.minutes, args.backend, args.slices)


if __name__ == "__main__":
    main()
