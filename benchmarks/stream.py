"""Streaming decodes side by side: kzlab's stateful stream per chunk size, llama.cpp's code2wav (72-frame windows
with its carried state) and upstream PyTorch's chunked re-decode, in one run.

For each setup and chunk size K: the time of each call (codes in, audio out), the time to first audio, the real-time
factor (the calls' time over the audio's duration), the carried state's size, the memory, and the waveform's SNR
against the offline decode. Two times to first audio are given: the first call's compute alone ("compute"), and
with the codes arriving in real time at the codec's frame rate ("live": the K frames' arrival, K / 12.5 s, plus the
call; for llama.cpp, 72 frames). A first call is one sample per stream: kzlab's figure is the median first call of
`--starts` fresh streams (each prepared, then its first K frames pushed), the measured stream's own first call and
every start kept in the JSON; llama.cpp's is its stream's first 72-frame window.

- kzlab: `Decoder.stream()` with its graphs prepared before timing (`Stream.prepare`), default mode unless
  `--kzlab` says otherwise; exactness against the offline decode of the same arithmetic (`LoweringPlan.for_stream`)
  and against the default offline decode.
- kzlab's products' floor per chunk size (`--floor-reps`): the call's products alone, back to back, on this CPU's
  BLAS (`benchmarks/products_floor.py`: the graph's own product nodes on the backends the scheduler gave them, and
  the products each fused node's numpy kernel ran in a real call, replayed on the same threads), run between each
  turn's calls; the row's `products_floor_ms` is the fastest turn's median run and `floor_ratio` the median over
  turns of the turn's median call over its median floor run: what the call costs beyond its products.
- llama.cpp: `benchmarks/llamacpp_code2wav.py`'s worker (llama-cpp-python 0.3.36, its vendored llama.cpp
  0c1e5709) on its mmproj file; every call is one 72-frame window (clip.cpp:5333), its state handed to the next
  (mtmd-helper-gen.cpp:400-418). Its per-call times are its worker's own.
- upstream PyTorch (qwen-tts 0.1.1): a stream as upstream's chunked_decode makes one: each call decodes the K new
  frames with 25 frames of left context before them (chunked_decode's left_context) and keeps the new frames'
  audio. It has no state: every call re-decodes its context.

Run it from a Python that has torch (`--hf HF_DIR`), with kzlab's site-packages appended (`--site`), as
benchmarks/decode.py is; or from kzlab's own venv with `--no-torch`:

    TORCH_VENV/bin/python benchmarks/stream.py --site KZLAB_VENV/lib/python3.11/site-packages \\
        --model full-f32.gguf --hf HF_DIR --llamacpp mmproj-qwen3tts-full-f32.gguf \\
        --llamacpp-python LLAMA_VENV/bin/python --json stream.json --figure stream.png
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import site
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
FRAME_RATE_HZ = 12.5
LLAMACPP_WINDOW = 72


def snr_db(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, np.float64).reshape(-1)
    ref = np.asarray(ref, np.float64).reshape(-1)
    n = min(out.size, ref.size)
    err = float(np.sum((out[:n] - ref[:n]) ** 2))
    return float("inf") if err == 0 else float(10 * np.log10(np.sum(ref[:n] ** 2) / err))


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def random_codes(hp, frames: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, hp.semantic_codebook_size, frames)]
    rows += [rng.integers(0, hp.codebook_size, frames) for _ in range(hp.num_quantizers - 1)]
    return np.stack(rows).astype(np.int32)


def row(setup: str, k: int, calls: list[float], audio_s: float, wav, ref, **extra) -> dict:
    """One table row from a stream's call times (seconds)."""
    frame_s = 1.0 / FRAME_RATE_HZ
    first = calls[0] * 1e3
    return {
        "setup": setup,
        "chunk": k,
        "calls": len(calls),
        "call_ms_median": statistics.median(calls) * 1e3,
        "call_ms_max": max(calls) * 1e3,
        "first_audio_ms": first,
        "first_audio_live_ms": k * frame_s * 1e3 + first,
        "rtf": sum(calls) / audio_s,
        "snr_db": snr_db(wav, ref) if ref is not None else None,
        **extra,
    }


def with_starts(r: dict, starts_ms: list[float]) -> dict:
    """Row `r` with its time to first audio taken as the median first call of fresh streams (a first call is one
    sample a stream); the measured stream's own first call and every start kept."""
    if starts_ms:
        r["first_audio_ms_in_stream"] = r["first_audio_ms"]
        r["first_audio_ms_starts"] = starts_ms
        r["first_audio_ms"] = statistics.median(starts_ms)
        r["first_audio_live_ms"] = r["chunk"] / FRAME_RATE_HZ * 1e3 + r["first_audio_ms"]
    return r


# ---- kzlab -----------------------------------------------------------------------------------------------------
def first_calls_ms(dec, x: np.ndarray, k: int, n: int) -> list[float]:
    """The first call of `n` fresh streams of `dec` (each prepared, then `x`'s first `k` frames pushed), in ms."""
    out = []
    for _ in range(n):
        s = dec.stream()
        s.prepare([k])
        s.push(x[:, :k])
        out.append(s.calls[0].seconds * 1e3)
    return out


def run_with_floor(s, codes: np.ndarray, k: int, floor, reps: int) -> tuple[np.ndarray, list[float]]:
    """`s.run(codes, k)` with, where `floor` is given, `reps` runs of the products' floor spread evenly between the
    stream's calls (ms each): the calls and the floor they are compared with then sample the same stretch of the
    machine's time. On a shared machine both drift by tens of percent within seconds, and a floor timed only after
    the stream saw another load than most of its calls. The calls are timed as `push` times them, the floor runs
    between them are not part of any call."""
    from kzlab.runtime.stream import chunk_sizes

    seq = chunk_sizes(k, codes.shape[1])
    marks = {len(seq) * (2 * j + 1) // (2 * reps) for j in range(reps)} if floor is not None and reps else set()
    out, floor_ms, at = [], [], 0
    for i, n in enumerate(seq):
        out.append(s.push(codes[:, at : at + n]))
        at += n
        if i in marks:
            floor_ms += floor.time_ms(1)
    if floor is not None and len(floor_ms) < reps:  # fewer calls than runs asked: the rest after the last call
        floor_ms += floor.time_ms(reps - len(floor_ms))
    out.append(s.flush())
    return np.concatenate(out), floor_ms


def kzlab_rows(args, codes: np.ndarray) -> tuple[list[dict], np.ndarray, dict, dict]:
    import kzlab
    from kzlab.runtime.stream import offline_in_stream_arithmetic

    sys.path.insert(0, str(HERE))
    from products_floor import ProductsFloor

    rows, wavs = [], {}
    kw = json.loads(args.kzlab) if args.kzlab else {}
    with kzlab.load(args.model, threads=args.threads, **kw) as dec:
        ref = dec.decode(codes)  # warm
        t0 = time.perf_counter()
        ref = dec.decode(codes)
        offline_s = time.perf_counter() - t0
        same, changes = offline_in_stream_arithmetic(dec, codes)
        sr = dec.sample_rate
        info = {"backend": dec.backend_label, "mode": dec.mode, "lowering": dec.lowering.label(dec.arch.not_applicable),
                "stream_plan_changes": changes, "offline_s": offline_s,
                "offline_rtf": offline_s / (codes.shape[1] / FRAME_RATE_HZ)}
        # the floor replays products in this process's ggml: a decoder in a worker process (RPC) has none here
        in_process = hasattr(dec.session, "on_compute_thread")
        if args.floor_reps and not in_process:
            print("no products' floor: the decoder runs in a worker process", flush=True)
        for k in args.sizes:
            best = None
            floor = None
            turns: list[tuple[float, list[float]]] = []  # per turn: its call median, its floor runs (ms)
            for _ in range(args.turns):
                s = dec.stream()
                s.prepare([k])
                if floor is None and args.floor_reps and in_process:
                    floor = ProductsFloor(dec, k, codes)
                rss0 = peak_rss_mb()
                wav, floor_ms = run_with_floor(s, codes, k, floor, args.floor_reps)
                calls = [c.seconds for c in s.calls if c.frames]
                r = row("kzlab", k, calls, wav.size / sr, wav, same,
                        snr_default_db=snr_db(wav, ref), state_bytes=s.state.nbytes, state_tensors=len(s.state.slots),
                        compute_bytes=int(dec.session.graph(k, stream=True).compute_bytes),
                        peak_rss_mb=max(rss0, peak_rss_mb()))
                if floor is not None:
                    turns.append((r["call_ms_median"], floor_ms))
                if best is None or r["call_ms_median"] < best["call_ms_median"]:
                    best = r
                    wavs[k] = wav
            if floor is not None:
                best.update(floor_fields(turns, floor.describe()))
                floor.close()
            rows.append(with_starts(best, first_calls_ms(dec, codes, k, args.starts)))
            print(fmt(best), flush=True)
            if floor is not None:
                print(fmt_floor(best), flush=True)
    return rows, ref, info, wavs


def floor_fields(turns: list[tuple[float, list[float]]], what: dict) -> dict:
    """A row's products' floor from each turn's call median and floor runs (ms): `products_floor_ms` the fastest
    turn's median run (as the call's figure is the fastest turn's median call), `floor_ratio` the median over turns
    of the call median over the floor median within the turn (`run_with_floor`: the runs fall between the calls)."""
    floors = [statistics.median(runs) for _, runs in turns]
    return {
        "products_floor_ms": min(floors),
        "floor_ratio": statistics.median(call / f for (call, _), f in zip(turns, floors, strict=True)),
        "products_floor": {**what, "turns": [{"call_ms_median": c, "floor_ms": runs} for c, runs in turns]},
    }


def fmt_floor(r: dict) -> str:
    w = r["products_floor"]
    return (f"{'':28s}        products' floor {r['products_floor_ms']:8.1f} ms ({w['product_nodes']} product "
            f"nodes, {w['fused_products']} products of {w['fused_nodes']} fused nodes, {w['gflop']:.2f} GFLOP), "
            f"call / floor {r['floor_ratio']:.3f} (the median over turns)")


# ---- llama.cpp --------------------------------------------------------------------------------------------------
def llamacpp_rows(args, codes: np.ndarray, ref) -> list[dict]:
    sys.path.insert(0, str(HERE))
    from llamacpp_code2wav import Code2Wav

    c2w = Code2Wav(args.llamacpp, args.threads, python=args.llamacpp_python)
    try:
        c2w.decode(codes[:, :LLAMACPP_WINDOW])  # warm
        best = None
        for _ in range(args.turns):
            wav, _ = c2w.decode(codes)
            r = row("llama.cpp code2wav", LLAMACPP_WINDOW, c2w.call_seconds, wav.size / c2w.sample_rate, wav, ref,
                    state_bytes=c2w.state_bytes, peak_rss_mb=c2w.peak_rss_mb)
            if best is None or r["call_ms_median"] < best["call_ms_median"]:
                best = r
        print(fmt(best), flush=True)
        return [best]
    finally:
        c2w.close()


# ---- upstream PyTorch -------------------------------------------------------------------------------------------
def torch_rows(args, codes: np.ndarray) -> tuple[list[dict], np.ndarray]:
    sys.path.insert(0, str(HERE))
    import torch
    import torch_reference as tr

    decoder = tr.load_upstream_decoder(Path(args.hf), args.threads)
    offline = tr.decode(decoder, codes)
    up = 1920
    left = 25  # upstream chunked_decode's left_context
    rows = []
    for k in args.sizes:
        best = None
        for _ in range(args.turns):
            pieces, calls = [], []
            for s in range(0, codes.shape[1], k):
                e = min(codes.shape[1], s + k)
                ctx = min(left, s)
                batch = torch.from_numpy(np.ascontiguousarray(codes[:, s - ctx : e], dtype=np.int64))[None]
                t0 = time.perf_counter()
                with torch.inference_mode():
                    w = decoder(batch)[0, 0].numpy()
                calls.append(time.perf_counter() - t0)
                pieces.append(w[ctx * up :])
            wav = np.concatenate(pieces)
            r = row("PyTorch chunked re-decode", k, calls, wav.size / 24000, wav, offline, peak_rss_mb=peak_rss_mb())
            if best is None or r["call_ms_median"] < best["call_ms_median"]:
                best = r
        rows.append(best)
        print(fmt(best), flush=True)
    return rows, offline


def fmt(r: dict) -> str:
    snr = "-" if r["snr_db"] is None else f"{r['snr_db']:.1f} dB"
    extra = f", default offline {r['snr_default_db']:.1f} dB" if "snr_default_db" in r else ""
    state = f", state {r['state_bytes'] / 1e6:.2f} MB" if r.get("state_bytes") else ""
    return (f"{r['setup']:28s} K={r['chunk']:3d}: call {r['call_ms_median']:8.1f} ms "
            f"(max {r['call_ms_max']:.1f}), first audio {r['first_audio_ms']:8.1f} ms "
            f"(live {r['first_audio_live_ms']:8.1f}), RTF {r['rtf']:.3f}, SNR {snr}{extra}{state}")


def figure(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for setup in dict.fromkeys(r["setup"] for r in rows):
        rs = [r for r in rows if r["setup"] == setup]
        ks = [r["chunk"] for r in rs]
        a.plot(ks, [r["first_audio_ms"] for r in rs], "o-", label=setup)
        b.plot(ks, [r["rtf"] for r in rs], "o-", label=setup)
    for ax, title in ((a, "time to first audio (compute), ms"), (b, "real-time factor")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("chunk (frames per call)")
        ax.set_title(title)
    a.set_yscale("log")
    b.axhline(1.0, color="grey", lw=0.8, ls="--")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--site", action="append", default=[], help="extra site-packages (kzlab, ggml) to append")
    p.add_argument("--model", required=True, help="a kzlab-readable decoder file (full-size F32)")
    p.add_argument("--sizes", default="1,2,4,8,16,72", help="chunk sizes (frames per call)")
    p.add_argument("--frames", type=int, default=144, help="code frames streamed (144: 11.52 s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--turns", type=int, default=2, help="runs per setup and size; the fastest median is kept")
    p.add_argument("--starts", type=int, default=7,
                   help="kzlab: fresh streams whose first call is timed per chunk size; the time to first audio is "
                        "their median (0: the measured stream's own first call)")
    p.add_argument("--floor-reps", type=int, default=9,
                   help="kzlab: runs of the products' floor per turn and size (the call's products back to back, "
                        "benchmarks/products_floor.py), spread between the stream's calls; their median is the "
                        "turn's floor (0: no floor)")
    p.add_argument("--kzlab", default="", help="kzlab.load keywords as JSON (default: kzlab's defaults)")
    p.add_argument("--hf", help="the HF checkpoint directory for upstream PyTorch (needs torch)")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--llamacpp", help="llama.cpp's mmproj file of the same checkpoint")
    p.add_argument("--llamacpp-python", help="the Python that has llama-cpp-python 0.3.36")
    p.add_argument("--json", help="write every row here")
    p.add_argument("--figure", help="write the figure (chunk size against first audio and RTF) here")
    args = p.parse_args(argv)
    for s in args.site:
        site.addsitedir(s)
    args.sizes = [int(x) for x in args.sizes.split(",")]
    os.environ.setdefault("KZLAB_QUIET", "1")

    import kzlab

    hp = kzlab.load(args.model, backend="cpu").hparams
    codes = random_codes(hp, args.frames, args.seed)
    print(f"{cpu_name()}, {args.threads} threads, {args.frames} frames ({args.frames / FRAME_RATE_HZ:.2f} s), "
          f"kzlab {kzlab.__version__}", flush=True)
    rows, ref, info, wavs = kzlab_rows(args, codes)
    print(f"kzlab offline decode: {info['offline_s']:.3f} s (RTF {info['offline_rtf']:.3f}) on {info['backend']}, "
          f"{info['mode']} mode; streaming calls: {info['stream_plan_changes'] or 'the same plan'}", flush=True)
    if any("floor_ratio" in r for r in rows):
        print("kzlab's call over its products' floor (a turn's median call over its median floor run, the median "
              "over turns; the fastest turn's call and floor in ms): "
              + ", ".join(f"K={r['chunk']} {r['floor_ratio']:.3f} ({r['call_ms_median']:.1f}, "
                          f"{r['products_floor_ms']:.1f})" for r in rows if "floor_ratio" in r), flush=True)
    torch_ref = None
    if args.hf and not args.no_torch:
        t_rows, torch_ref = torch_rows(args, codes)
        rows += t_rows
        for r in rows:
            if r["setup"] == "kzlab":
                r["snr_vs_pytorch_db"] = snr_db(wavs[r["chunk"]], torch_ref)
        print(f"kzlab offline against PyTorch's offline: {snr_db(ref, torch_ref):.1f} dB; streamed: "
              + ", ".join(f"K={r['chunk']} {r['snr_vs_pytorch_db']:.1f}" for r in rows if r["setup"] == "kzlab"),
              flush=True)
    if args.llamacpp:
        # its SNR: against PyTorch's offline decode where torch ran, else against kzlab's offline decode
        rows += llamacpp_rows(args, codes, torch_ref if torch_ref is not None else ref)
        ll = rows[-1]
        for r in rows:
            if r["setup"] == "kzlab":
                r["first_audio_x_llamacpp"] = r["first_audio_ms"] / ll["first_audio_ms"]
                r["first_audio_live_x_llamacpp"] = r["first_audio_live_ms"] / ll["first_audio_live_ms"]
        ratios = [f"K={r['chunk']}: {r['first_audio_x_llamacpp']:.3f} (live {r['first_audio_live_x_llamacpp']:.3f})"
                  for r in rows if r["setup"] == "kzlab"]
        print("kzlab's time to first audio over llama.cpp's: " + ", ".join(ratios), flush=True)
    out = {"cpu": cpu_name(), "threads": args.threads, "frames": args.frames, "kzlab": info, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.figure:
        figure(rows, args.figure)


if __name__ == "__main__":
    main()
