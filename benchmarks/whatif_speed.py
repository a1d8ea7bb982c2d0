"""How long `kzlab whatif` makes the user wait: the seed's three configurations, 1,000 draws, cold (an empty
cache: every graph is profiled on the CPU and every placement's decode emulated) and warm (the cached profiles and
emulated figures reused), each in a fresh process as a user runs it. Targets: at most 60 s cold, at most 5 s warm,
on 2 cores. `--extra "--no-accuracy --no-remedies"` times the answer without its correctness (time alone). Each run
prints where its time went, as the what-if measured it (`WhatIf.timings`): profiling, placing, emulation, drawing;
the wall time also holds the process's start and the model's load.

    python benchmarks/whatif_speed.py [--model full-f16.gguf] [--runs 3] [--extra "ARGS"]

(`--model` defaults to the built-in full-size synthetic decoder, written into the cache on first use.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SEED = ["--frames", "31", "--conv", "im2col-f16", "--conv-src1", "data", "--resunit", "ops", "--convt", "col2im",
        "--snake", "folded", "--cpu-baseline-ms", "3340", "--config", "v0.15.2=hexagon-v0.15.2",
        "--config", "v0.15.3=hexagon-v0.15.3", "--config", "v0.15.2+chunk=hexagon-v0.15.2,mm_chunk=1024",
        "--target-ms", "800", "--draws", "1000", "-q"]


def timed(model: str, cache: str, extra: list[str]) -> tuple[float, dict[str, float]]:
    """One `kzlab whatif` in a fresh process: its wall time, and the split its answer records."""
    env = dict(os.environ, KZLAB_CACHE=cache)
    out = os.path.join(cache, "answer.json")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kzlab.cli", "whatif", model, *SEED, *extra, "--json", out], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out) as f:
        return wall, json.load(f).get("timings", {})


def split(t: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in t.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--extra", default="", help="more `kzlab whatif` arguments, e.g. '--no-accuracy --no-remedies'")
    args = ap.parse_args()
    extra = args.extra.split()
    model = args.model
    if model is None:
        from kzlab.app.builtins import resolve_model

        model = str(resolve_model("synthetic"))
    colds, warms, splits = [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            (c, cs), (w, ws) = timed(model, cache, extra), timed(model, cache, extra)
            colds.append(c)
            warms.append(w)
            splits.append((cs, ws))
            print(f"run {len(colds)}: cold {c:.1f} s ({split(cs)}); warm {w:.1f} s ({split(ws)})", flush=True)
    cold, warm = statistics.median(colds), statistics.median(warms)
    print(f"kzlab whatif {' '.join(extra)}, seed graph (31 frames), 3 configurations + cpu, 1000 draws, "
          f"{os.cpu_count()} cores")
    print(f"cold (empty profile cache): median {cold:.1f} s of {', '.join(f'{x:.1f}' for x in colds)}  "
          f"target <= 60 s: {'met' if cold <= 60 else 'MISSED'}")
    print(f"warm (profiles cached):     median {warm:.1f} s of {', '.join(f'{x:.1f}' for x in warms)}  "
          f"target <= 5 s: {'met' if warm <= 5 else 'MISSED'}")


if __name__ == "__main__":
    main()
