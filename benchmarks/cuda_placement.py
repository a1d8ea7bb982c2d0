"""The CUDA profile against a real GPU: where ggml's scheduler really puts every node, and how long the decode
really takes, beside `kzlab simulate --profile cuda` and its prediction.

Needs ggml-python 0.0.45 built with CUDA (README, "Right before fast"; on a lent GPU machine:
`CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA=OFF -DGGML_RPC=ON -DGGML_NATIVE=ON" pip
install --no-binary ggml-python ggml-python==0.0.45`). For each model and lowering it prints:
- the placement check (`kzlab.analysis.placement.check.compare`: the same fresh graph handed to the simulator and
  to the real scheduler, node by node; the mismatches and both split counts), and the real scheduler's own split
  log (GGML_SCHED_DEBUG) through the same path;
- the measured wall time of `cuda0 + cpu` under the scheduler (median of --runs decodes after a warm-up) against
  the predicted p10 / p50 / p90 from the profile's `[perf]` (devices/perf/cuda.toml), the CPU nodes from a
  CPU-only profile of the same graph taken on the same machine.

    python benchmarks/cuda_placement.py --model full-f16.gguf --model wavtokenizer.gguf [--frames 31,750]
        [--lowering default,device] [--runs 5] [--json OUT]

A prediction whose measured time falls outside its p10-p90 band says which range is wrong; a placement mismatch
says which rule of devices/cuda.toml does not transcribe ggml-cuda's supports_op.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def run(model_path: str, frames: int, preset: str, runs: int, device: str, profile: str) -> dict:
    import kzlab
    from kzlab.analysis.placement.check import compare
    from kzlab.analysis.profile_cache import cached_cpu_profile

    model = kzlab.load_model(model_path)
    low = kzlab.Lowering.preset(preset).replace(mode="portable")
    chk = compare(model, low, [device, "cpu"], frames)
    codes = kzlab.random_codes(model.hparams, frames, 0)
    with kzlab.Decoder(model, low, backend=[device, "cpu"], sched=True) as d:
        d.decode(codes)  # graphs built, weights uploaded, kernels loaded
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            d.decode(codes)
            walls.append((time.perf_counter() - t0) * 1e3)
    prof, _ = cached_cpu_profile(model, frames, low)
    pl = kzlab.simulate(model, profile, frames=frames, lowering=low, weights_on="device",
                        predict={"cpu_profile": prof, "draws": 1000})
    r = pl.predicted.to_dict()
    rng = r["range"]
    measured = statistics.median(walls)
    return {"model": model_path, "frames": frames, "lowering": preset, "nodes": chk.n_nodes, "equal": chk.n_equal,
            "mismatches": chk.mismatches[:20], "splits_simulated": chk.n_splits_sim, "splits_real": chk.n_splits_real,
            "measured_ms": measured, "runs_ms": walls, "predicted": rng,
            "inside_p10_p90": bool(rng) and rng["p10"] <= measured <= rng["p90"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--frames", default="31", help="comma list, one per model or one for all")
    ap.add_argument("--lowering", default="default,device", help="presets (kzlab.Lowering.preset), comma list")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--device", default="cuda0", help="the ggml device to run on (default cuda0)")
    ap.add_argument("--profile", default="cuda", help="its capability profile (default cuda; blas checks the script "
                    "itself on a machine without a GPU)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    frames = [int(x) for x in a.frames.split(",")]
    frames = frames * len(a.model) if len(frames) == 1 else frames
    rows = []
    for path, n in zip(a.model, frames, strict=True):
        for preset in a.lowering.split(","):
            row = run(path, n, preset, a.runs, a.device, a.profile)
            rows.append(row)
            p = row["predicted"]
            print(f"{path} {n} frames, {preset}: placement {row['equal']}/{row['nodes']} nodes as simulated, splits "
                  f"simulated {row['splits_simulated']} real {row['splits_real']}; measured {row['measured_ms']:.1f} "
                  f"ms, predicted p10 {p.get('p10', float('nan')):.1f} p50 {p.get('p50', float('nan')):.1f} p90 "
                  f"{p.get('p90', float('nan')):.1f} ms ({'inside' if row['inside_p10_p90'] else 'OUTSIDE'} p10-p90)")
            for m in row["mismatches"]:
                print(f"   {m[0]}: simulated {m[1]}, real {m[2]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
