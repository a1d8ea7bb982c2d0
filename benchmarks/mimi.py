"""Mimi at full size: kzlab against transformers' MimiModel, kzlab's streams, llama.cpp's PocketTTS stream, in one run.

Mimi is the decoder of kyutai/mimi (codes in) and of PocketTTS (latents in).

1. Offline decode, full-size synthetic kyutai/mimi (`kzlab.formats.synth.synth(preset="mimi", dtype="f32")`, seeded
   random weights in codec.cpp's layout): kzlab's decoder (its default mode and backends unless `--kzlab` says
   otherwise) against transformers 4.57.3's `MimiModel` (eager attention, PyTorch on the CPU) holding the same
   weights, read from the same GGUF by gguf-py (benchmarks/torch_mimi.py, a worker process: kzlab's environment has
   no torch, and the two OpenMP runtimes stay apart). Same random codes [32, T] on both sides; one untimed decode
   each, then `--runs` timed runs taken in turns (kzlab, PyTorch, then PyTorch, kzlab, ...) so that the ratio comes
   from runs interleaved in time; medians. Every timed run starts after `--settle` seconds of idle (0.25 s): a
   side's threads do not stop when its decode returns (PyTorch's libgomp spins before it sleeps, and whichever ran
   last has the caches), and the run after it pays for that. Measured on the 2-core EPYC, 25 frames, 2 threads, no
   pause: kzlab 87-106 ms right after a PyTorch run against 80-82 ms right after its own; 0.1 s between: 80-86 ms.
   The same pause before either side's runs: each is timed from an idle machine. The SNR of kzlab's waveform
   against PyTorch's says the two computed the same decoder. The issue's target: kzlab / PyTorch <= 0.8 at 2 threads.
2. kzlab's stream of the same codes in chunks of K frames (`Decoder.stream()`, graphs prepared before the first push,
   as benchmarks/stream.py does): each call's time, the time to first audio (the first call, "compute"; "live" adds
   the K frames' arrival at 12.5 Hz; a first call is one sample a stream, so the figure is the median first call
   of `--starts` fresh streams, for llama.cpp's streams too), the real-time factor, the carried state's size, and
   the SNR against kzlab's offline decode of the same arithmetic (the issue's bound: >= 100 dB at K = 1) and
   against PyTorch's.
3. PocketTTS's decoder (latents in, preset `pockettts-mimi`'s sizes) streamed by kzlab and by llama.cpp
   (llama-cpp-python 0.3.36, vendored llama.cpp 0c1e5709, mtmd's gen-audio API: benchmarks/llamacpp_pockettts.py),
   both on one full-size random PocketTTS mmproj made by llama.cpp's own converter from a random pocket-tts model
   (its runtime needs the flow net too), the same normalised latents [32, T] pushed K frames a call; both SNRs are
   against kzlab's offline decode of that file. Where llama.cpp cannot run, the output says why instead of a
   number, and kzlab streams its own synthetic `pockettts-mimi` file.

Every timing records the CPU time other processes took meanwhile ("foreign CPU s": the machine's busy CPU from
/proc/stat minus this process's and its workers'); on a shared machine a timing with foreign CPU well above 0 is
disturbed. The machine, the load average, kzlab's commit and every version are recorded.

Run it with kzlab's Python:

    .venv/bin/python benchmarks/mimi.py --torch-python TORCH_VENV/bin/python \\
        --llamacpp-python LLAMA_VENV/bin/python --pocket-python POCKET_VENV/bin/python \\
        --converter LLAMA_CPP_PYTHON_SDIST/vendor/llama.cpp/convert_hf_to_gguf.py [--quick] [--json mimi.json]

The files it makes (the synthetic GGUFs, the random PocketTTS model and its mmproj; ~0.8 GB) are kept in `--work`
and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from stream import first_calls_ms, peak_rss_mb, snr_db, with_starts  # benchmarks/stream.py: the same figures

#: the environment as the caller set it: kzlab sets OMP_WAIT_POLICY when it is imported (for ggml's threads); the
#: PyTorch and llama.cpp workers start with the caller's settings, not kzlab's
ENV0 = dict(os.environ)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
FRAME_RATE_HZ = 12.5
TARGET_RATIO = 0.8  # kzlab / PyTorch, the issue's bound
TARGET_STREAM_DB = 100.0  # the 1-frame stream against the offline decode
QUIET_CPU_S = 0.1  # a run during which other processes took less CPU than this counts as undisturbed
#: transformers 4.57.3 ignores MimiConfig.sliding_window (250 steps) in eager attention (plain causal; UPSTREAM.md
#: 1.3), kzlab and kyutai's Mimi keep the window: beyond 125 frames (250 steps) the two are different decoders
WINDOW_FRAMES = 125


# ---- measuring ---------------------------------------------------------------------------------------------------
HZ = os.sysconf("SC_CLK_TCK")


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (every core, /proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / HZ  # minus idle and iowait


def proc_cpu(pid: int | str = "self") -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read().rsplit(")", 1)[1].split()
        return (int(s[11]) + int(s[12])) / HZ  # utime + stime, all threads
    except OSError:
        return 0.0


class Watch:
    """The CPU seconds other processes than ours (this one and its workers) took while a block ran."""

    def __init__(self, pids: list[int]):
        self.pids = ["self", *pids]

    def __enter__(self) -> Watch:
        self.m0, self.p0 = machine_busy(), sum(proc_cpu(p) for p in self.pids)
        return self

    def __exit__(self, *exc) -> None:
        own = sum(proc_cpu(p) for p in self.pids) - self.p0
        self.foreign = max(0.0, machine_busy() - self.m0 - own)


def load_text() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def kzlab_commit() -> str:
    """kzlab's commit, with the count of files changed since it under kzlab/ (another session's edits count)."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=9", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "kzlab"], capture_output=True,
                               text=True, check=True).stdout.strip().splitlines()
        return head + (f" + {len(dirty)} uncommitted file(s) under kzlab/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def llamacpp_commit(converter: str | None) -> str:
    """The vendored llama.cpp's commit, from the llama-cpp-python sdist's CHANGELOG.md (the sdist has no git data)."""
    if not converter:
        return "unknown"
    log = Path(converter).resolve().parent.parent.parent / "CHANGELOG.md"
    try:
        for line in log.read_text().splitlines():
            if "update llama.cpp to ggml-org/llama.cpp@" in line:
                return line.rsplit("@", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def random_codes(frames: int, seed: int, codebook_size: int = 2048, n_q: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, codebook_size, (n_q, frames)).astype(np.int32)


def stream_row(setup: str, k: int, calls: list[float], audio_s: float, **extra) -> dict:
    """One stream's figures from its call times (seconds)."""
    first = calls[0] * 1e3
    return {
        "setup": setup, "chunk": k, "calls": len(calls),
        "call_ms_median": statistics.median(calls) * 1e3, "call_ms_max": max(calls) * 1e3,
        "first_audio_ms": first, "first_audio_live_ms": k / FRAME_RATE_HZ * 1e3 + first,
        "rtf": sum(calls) / audio_s, **extra,
    }


def say(*a) -> None:
    print(*a, flush=True)


# ---- 1. offline: kzlab against transformers' MimiModel -----------------------------------------------------------
def offline(args, dec, torch_side, cases: dict[str, np.ndarray]) -> tuple[list[dict], dict[str, np.ndarray]]:
    rows, torch_wavs = [], {}
    pids = [torch_side.proc.pid] if torch_side else []
    for name, codes in cases.items():
        ref = dec.decode(codes)  # untimed: graph build and allocation, first touch of the weights
        t_wav = torch_side.decode(codes)[0] if torch_side else None
        k_times, k_foreign, t_times, t_foreign = [], [], [], []
        for i in range(args.runs):
            order = ("kzlab", "torch") if i % 2 == 0 else ("torch", "kzlab")
            for side in order:
                time.sleep(args.settle)  # the other side's threads gone idle first (see --settle)
                if side == "kzlab":
                    with Watch(pids) as w:
                        t0 = time.perf_counter()
                        dec.decode(codes)
                        k_times.append(time.perf_counter() - t0)
                    k_foreign.append(w.foreign)
                elif torch_side:
                    with Watch(pids) as w:
                        _, dt = torch_side.decode(codes)
                    t_times.append(dt)
                    t_foreign.append(w.foreign)
            say(f"  {name} run {i + 1}: kzlab {k_times[-1]:.3f} s (foreign CPU {k_foreign[-1]:.2f} s)"
                + (f", PyTorch {t_times[-1]:.3f} s (foreign {t_foreign[-1]:.2f} s)" if t_times else ""))
        audio_s = codes.shape[1] / FRAME_RATE_HZ
        quiet = [i for i in range(len(t_times)) if k_foreign[i] < QUIET_CPU_S and t_foreign[i] < QUIET_CPU_S]
        row = {
            "case": name, "frames": int(codes.shape[1]), "audio_s": audio_s,
            "kzlab_s": statistics.median(k_times), "kzlab_min_s": min(k_times), "kzlab_runs_s": k_times,
            "kzlab_foreign_cpu_s": k_foreign, "kzlab_rtf": statistics.median(k_times) / audio_s,
        }
        if torch_side:
            torch_wavs[name] = t_wav
            row |= {
                "pytorch_s": statistics.median(t_times), "pytorch_min_s": min(t_times), "pytorch_runs_s": t_times,
                "pytorch_foreign_cpu_s": t_foreign, "pytorch_rtf": statistics.median(t_times) / audio_s,
                "ratio": statistics.median(k_times) / statistics.median(t_times),
                "ratio_min": min(k_times) / min(t_times),
                "ratio_paired_median": statistics.median(a / b for a, b in zip(k_times, t_times, strict=True)),
                "quiet_pairs": len(quiet),
                "ratio_quiet": statistics.median(k_times[i] / t_times[i] for i in quiet) if quiet else None,
                "snr_vs_pytorch_db": snr_db(ref, t_wav),
                "max_abs_diff": float(np.max(np.abs(ref - t_wav[: ref.size]))),
            }
        rows.append(row)
        say(fmt_offline(row))
    return rows, torch_wavs


def fmt_offline(r: dict) -> str:
    s = f"{r['case']:22s}: kzlab {r['kzlab_s']:.3f} s (RTF {r['kzlab_rtf']:.3f})"
    if "pytorch_s" in r:
        s += (f", PyTorch {r['pytorch_s']:.3f} s (RTF {r['pytorch_rtf']:.3f}): kzlab/PyTorch {r['ratio']:.3f} "
              f"(min/min {r['ratio_min']:.3f}"
              + (f"; undisturbed runs ({r['quiet_pairs']}) {r['ratio_quiet']:.3f}" if r["quiet_pairs"] else "")
              + f"), SNR {r['snr_vs_pytorch_db']:.1f} dB")
        if r["frames"] > WINDOW_FRAMES:
            s += (f" (over {WINDOW_FRAMES} frames transformers 4.57.3's eager attention ignores the 250-step window "
                  "that kzlab keeps: not the same decoder)")
    return s


# ---- 2. kzlab's stream of the codes ------------------------------------------------------------------------------
def kzlab_streams(args, dec, x: np.ndarray, sizes: list[int], setup: str, torch_ref=None,
                  pids: list[int] | None = None) -> tuple[list[dict], dict]:
    """kzlab's stream of `x` (codes or latents) per chunk size; the best of `turns` passes by median call."""
    from kzlab.runtime.stream import offline_in_stream_arithmetic

    same, changes = offline_in_stream_arithmetic(dec, x)
    default = dec.decode(x)
    info = {"stream_plan_changes": changes, "max_abs_offline": float(np.max(np.abs(default)))}
    rows = []
    for k in sizes:
        best = None
        for _ in range(args.turns):
            s = dec.stream()
            s.prepare([k])
            with Watch(pids or []) as w:
                wav = s.run(x, k)
            calls = [c.seconds for c in s.calls if c.frames]
            r = stream_row(setup, k, calls, wav.size / dec.sample_rate, snr_db=snr_db(wav, same),
                           snr_default_db=snr_db(wav, default), state_bytes=s.state.nbytes,
                           state_tensors=len(s.state.slots), exact=s.exact,
                           compute_bytes=int(dec.session.graph(k, stream=True).compute_bytes),
                           foreign_cpu_s=w.foreign, peak_rss_mb=peak_rss_mb())
            if torch_ref is not None:
                r["snr_vs_pytorch_db"] = snr_db(wav, torch_ref)
            if not s.exact:
                r["inexact_why"] = s.inexact_why
            if best is None or r["call_ms_median"] < best["call_ms_median"]:
                best = r
        rows.append(with_starts(best, first_calls_ms(dec, x, k, args.starts)))
        say(fmt_stream(best))
    why = {r["inexact_why"] for r in rows if "inexact_why" in r}
    for w in why:
        say(f"  {setup}'s stream is not exact against the offline decode here (kzlab says why): {w}")
    if changes:
        say(f"  {setup}'s streaming calls differ from its offline plan: {changes}")
    return rows, info


def fmt_stream(r: dict) -> str:
    snr = "-" if r.get("snr_db") is None else f"{r['snr_db']:.1f} dB"
    extra = f", vs PyTorch {r['snr_vs_pytorch_db']:.1f} dB" if "snr_vs_pytorch_db" in r else ""
    state = f", state {r['state_bytes'] / 1e6:.2f} MB" if r.get("state_bytes") else ""
    return (f"{r['setup']:28s} K={r['chunk']:3d}: call {r['call_ms_median']:8.1f} ms (max {r['call_ms_max']:.1f}), "
            f"first audio {r['first_audio_ms']:7.1f} ms (live {r['first_audio_live_ms']:7.1f}), "
            f"RTF {r['rtf']:.3f}, SNR {snr}{extra}{state}, foreign CPU {r['foreign_cpu_s']:.2f} s")


# ---- 3. PocketTTS: kzlab and llama.cpp on one mmproj ---------------------------------------------------------------
def pockettts(args, work: Path) -> dict:
    """kzlab's and llama.cpp's PocketTTS streams; where llama.cpp cannot run, the reason."""
    import kzlab
    from kzlab.formats.synth import PRESETS, synth
    from kzlab.runtime.stream import chunk_sizes

    sys.path.insert(0, str(HERE))
    import llamacpp_pockettts as lp

    out: dict = {"llamacpp": {"ran": False}}
    mmproj = None
    if not (args.llamacpp_python and args.pocket_python and args.torch_python and args.converter):
        need = [o for o, v in (("--llamacpp-python", args.llamacpp_python), ("--pocket-python", args.pocket_python),
                               ("--torch-python", args.torch_python), ("--converter", args.converter)) if not v]
        out["llamacpp"]["why_not"] = f"not asked: {', '.join(need)} not given"
    else:
        try:
            mmproj = lp.ensure_mmproj(work, args.pocket_python, args.torch_python, args.converter, args.seed, log=say)
        except Exception as e:  # noqa: BLE001 - the reason goes into the output
            out["llamacpp"]["why_not"] = f"no PocketTTS mmproj: {e}"
    if mmproj is None:
        path = work / f"pockettts-mimi-f32-seed{args.seed}.gguf"
        if not path.exists():
            synth(path, preset="pockettts-mimi", dtype="f32", seed=args.seed)
        out["file"] = str(path)
        out["file_note"] = "kzlab's synthetic preset pockettts-mimi (llama.cpp's mmproj layout, decoder tensors only)"
    else:
        out["file"] = str(mmproj)
        out["file_note"] = ("llama.cpp's converter (--mmproj --outtype f32) on a random pocket-tts 4.0.1 model of "
                            "english.yaml's sizes")
        made = mmproj.parent / f"pockettts-full-seed{args.seed}" / "made.json"
        if made.exists():
            out["model"] = json.loads(made.read_text())
    frames = args.stream_frames
    latents = np.random.default_rng(args.seed + 1).standard_normal((32, frames)).astype(np.float32)
    kw = json.loads(args.kzlab) if args.kzlab else {}
    with kzlab.load(out["file"], threads=args.threads, **kw) as dec:
        hp = dec.hparams
        import dataclasses

        preset = dataclasses.asdict(PRESETS["pockettts-mimi"])
        mine = dataclasses.asdict(hp)
        diff = {k: (mine[k], preset[k]) for k in preset
                if mine[k] != preset[k] and not (isinstance(preset[k], float) and abs(mine[k] - preset[k]) < 1e-9)}
        out["sizes_are_preset"] = not diff
        out["sizes_differ"] = {k: list(v) for k, v in diff.items()}
        out["kzlab"] = {"backend": dec.backend_label, "mode": dec.mode,
                        "lowering": dec.lowering.label(dec.arch.not_applicable), "layout": dec.model.layout}
        say(f"PocketTTS file: {out['file']} ({out['file_note']}); kzlab reads it as layout {dec.model.layout}, sizes "
            + ("= preset pockettts-mimi" if not diff else f"differ from preset pockettts-mimi: {diff}"))
        # offline, both sides: one call of every frame
        dec.decode(latents)
        times = []
        for _ in range(max(1, args.runs // 2)):
            t0 = time.perf_counter()
            k_off = dec.decode(latents)
            times.append(time.perf_counter() - t0)
        out["kzlab_offline_s"] = statistics.median(times)
        out["max_abs_offline"] = float(np.max(np.abs(k_off)))
        say(f"kzlab PocketTTS offline ({frames} frames): {out['kzlab_offline_s']:.3f} s; max |wav| "
            f"{out['max_abs_offline']:.3f}")
        rows, info = kzlab_streams(args, dec, latents, args.pocket_sizes, "kzlab PocketTTS")
        out["kzlab"] |= info
    if mmproj is not None:
        try:
            rows += llamacpp_streams(args, lp, mmproj, latents, k_off, chunk_sizes, out)
            out["llamacpp"]["ran"] = True
        except Exception as e:  # noqa: BLE001
            out["llamacpp"]["why_not"] = f"llama.cpp's worker failed: {e}"
    if not out["llamacpp"]["ran"]:
        say(f"llama.cpp's PocketTTS stream: not measured: {out['llamacpp']['why_not']}")
    out["rows"] = rows
    return out


def llamacpp_streams(args, lp, mmproj: Path, latents: np.ndarray, k_off: np.ndarray, chunk_sizes, out: dict) -> list:
    env = {k: v for k, v in ENV0.items()}
    peer = lp.PocketWav(mmproj, args.threads, args.llamacpp_python, env=env)
    rows = []
    try:
        out["llamacpp"] |= {"worker": peer.info, "commit": llamacpp_commit(args.converter),
                            "llama_cpp_python": peer.info.get("llama_cpp_python", "?"),
                            "notes": [
                                "GEN_WAV takes normalised latents (feats) and carries its state between calls "
                                "(pockettts-gen.cpp:100-135, 180-187); llama.cpp's own pipeline decodes 8 latents a "
                                "call (mtmd-helper-gen.cpp:985)",
                                "a GEN_WAV call on a fresh context aborts (clip.cpp:4475-4476 reserves with the "
                                "GEN_CODE graph, pockettts-gen.cpp:142-143, ggml.c:3739): one GEN_CODE call is made "
                                "first, untimed, as llama.cpp's pipeline makes one before any GEN_WAV",
                                "each call builds and allocates its graph (clip.cpp:4485-4487): a warm pass of the "
                                "same chunk size runs untimed before the timed ones",
                                "its conv kernels are F16 in every outtype (the converter) and ggml's conv im2col is "
                                "F16; its output is clamped to [-1, 1] (pockettts-gen.cpp:283-285)",
                            ]}
        say(f"llama.cpp worker: llama-cpp-python {out['llamacpp']['llama_cpp_python']}, llama.cpp "
            f"{out['llamacpp']['commit']}, {args.threads} threads")
        for n in out["llamacpp"]["notes"]:
            say(f"  - {n}")
        # offline: one call of every frame
        t = []
        for _ in range(max(1, args.runs // 2) + 1):
            wav, calls, _ = peer.stream(latents, [latents.shape[1]])
            t.append(calls[0])
        out["llamacpp"]["offline_s"] = statistics.median(t[1:])
        out["llamacpp"]["offline_snr_vs_kzlab_db"] = snr_db(wav, k_off)
        say(f"llama.cpp PocketTTS offline ({latents.shape[1]} frames, one call): {out['llamacpp']['offline_s']:.3f} s, "
            f"SNR against kzlab's offline {out['llamacpp']['offline_snr_vs_kzlab_db']:.1f} dB")
        for k in args.pocket_sizes:
            sizes = chunk_sizes(k, latents.shape[1])
            peer.stream(latents, sizes)  # warm: its graphs are built per call, buffers grow on first use
            best = None
            for _ in range(args.turns):
                with Watch([peer.proc.pid]) as w:
                    wav, calls, state = peer.stream(latents, sizes)
                r = stream_row("llama.cpp PocketTTS", k, calls, wav.size / peer.sample_rate,
                               snr_db=snr_db(wav, k_off), state_bytes=state, foreign_cpu_s=w.foreign,
                               peak_rss_mb=peer.peak_rss_mb)
                if best is None or r["call_ms_median"] < best["call_ms_median"]:
                    best = r
            starts = [peer.stream(latents[:, :k], [k])[1][0] * 1e3 for _ in range(args.starts)]
            rows.append(with_starts(best, starts))
            say(fmt_stream(best) + " (SNR against kzlab's offline decode of the same file)")
    finally:
        peer.close()
    return rows


# ---- output ------------------------------------------------------------------------------------------------------
def tables(res: dict) -> str:
    lines = ["", f"## Mimi at full size, {res['threads']} threads: {res['machine']['cpu']}, "
             f"kzlab {res['kzlab_commit']}", "", f"load: before {res['load_before']}; after {res['load_after']}", ""]
    lines += ["| case | kzlab s | PyTorch s | kzlab / PyTorch | min / min | undisturbed runs: ratio | "
              "SNR vs PyTorch dB | kzlab foreign CPU s (max) | PyTorch foreign CPU s (max) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["offline"]:
        if "pytorch_s" in r:
            quiet = f"{r['quiet_pairs']}: {r['ratio_quiet']:.3f}" if r["quiet_pairs"] else "0: -"
            lines.append(f"| {r['case']} | {r['kzlab_s']:.3f} | {r['pytorch_s']:.3f} | **{r['ratio']:.3f}** | "
                         f"{r['ratio_min']:.3f} | {quiet} | {r['snr_vs_pytorch_db']:.1f} | "
                         f"{max(r['kzlab_foreign_cpu_s']):.2f} | {max(r['pytorch_foreign_cpu_s']):.2f} |")
        else:
            lines.append(f"| {r['case']} | {r['kzlab_s']:.3f} | - | - | - | - | - | "
                         f"{max(r['kzlab_foreign_cpu_s']):.2f} | - |")
    lines += ["", f"kzlab / PyTorch: the medians' ratio (target <= {TARGET_RATIO}); undisturbed runs: the median of "
              f"the per-run ratios over the runs during which other processes took < {QUIET_CPU_S} CPU s on both "
              "sides."]
    lines += ["", "| stream | K | calls | call ms (median) | call ms (max) | first audio ms | live ms | RTF | "
              "state MB | SNR dB | foreign CPU s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["stream"] + res["pockettts"].get("rows", []):
        snr = f"{r['snr_db']:.1f}" if r.get("snr_db") is not None else "-"
        lines.append(f"| {r['setup']} | {r['chunk']} | {r['calls']} | {r['call_ms_median']:.1f} | "
                     f"{r['call_ms_max']:.1f} | {r['first_audio_ms']:.1f} | {r['first_audio_live_ms']:.1f} | "
                     f"{r['rtf']:.3f} | {r['state_bytes'] / 1e6:.2f} | {snr} | {r['foreign_cpu_s']:.2f} |")
    pt = res["pockettts"]
    ll = pt["llamacpp"]
    lines += ["", "SNR: kzlab's streams against kzlab's offline decode of the same arithmetic; llama.cpp's against "
              "kzlab's offline decode of the same mmproj. 'live' adds the K frames' arrival at 12.5 frames/s.", "",
              f"PocketTTS offline ({res['args']['stream_frames']} frames, one call): "
              f"kzlab {pt['kzlab_offline_s']:.3f} s"
              + (f", llama.cpp {ll['offline_s']:.3f} s (SNR against kzlab {ll['offline_snr_vs_kzlab_db']:.1f} dB)"
                 if ll.get("ran") else f"; llama.cpp: {ll.get('why_not')}")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "kzlab-bench-kyutai"),
                   help="where the generated files are kept and reused (its path must not contain 'mimi': "
                        "llama.cpp's converter refuses such a path)")
    p.add_argument("--frames", default="25,125", help="offline cases, code frames each (125: 10 s)")
    p.add_argument("--runs", type=int, default=7, help="timed runs per side and case (median)")
    p.add_argument("--sizes", default="1,4,16", help="kzlab's Mimi stream: frames per call")
    p.add_argument("--pocket-sizes", default="1,4,8,16",
                   help="the PocketTTS streams: frames per call (8: llama.cpp's own pipeline's)")
    p.add_argument("--stream-frames", type=int, default=125, help="frames streamed (codes and latents)")
    p.add_argument("--settle", type=float, default=0.25,
                   help="seconds of idle before every timed offline run, either side's (0: none); see the docstring")
    p.add_argument("--starts", type=int, default=7,
                   help="fresh streams whose first call is timed per chunk size, kzlab's and llama.cpp's alike; the "
                        "time to first audio is their median (0: each measured stream's own first call)")
    p.add_argument("--turns", type=int, default=2, help="passes per stream and size; the fastest median is kept")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0,
                   help="weights' seed (the codes of T frames use seed + 1 + T, the latents seed + 1)")
    p.add_argument("--kzlab", default="", help="kzlab.load keywords as JSON (default: kzlab's defaults)")
    p.add_argument("--torch-python", help="a Python with torch and transformers 4.57.3 (the PyTorch side)")
    p.add_argument("--llamacpp-python", help="a Python with llama-cpp-python 0.3.36")
    p.add_argument("--pocket-python", help="a Python with pocket-tts 4.0.1 (to make the random PocketTTS model)")
    p.add_argument("--converter", help="llama.cpp's convert_hf_to_gguf.py (the vendored one of the sdist)")
    p.add_argument("--quick", action="store_true",
                   help="defaults for a short run: --runs 3 --turns 1 --stream-frames 50 --pocket-sizes 1,4,16")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--check", action="store_true", help="exit 1 when a target of the issue is missed")
    if "--quick" in (sys.argv[1:] if argv is None else argv):  # its values are defaults: what is given wins
        p.set_defaults(runs=3, turns=1, stream_frames=50, pocket_sizes="1,4,16")
    args = p.parse_args(argv)
    args.frames = [int(x) for x in args.frames.split(",")]
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.pocket_sizes = [int(x) for x in str(args.pocket_sizes).split(",")]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("KZLAB_QUIET", "1")

    import kzlab
    from kzlab.environment import machine, versions
    from kzlab.formats.synth import synth

    res: dict = {"threads": args.threads, "machine": machine(), "versions": versions(), "kzlab_commit": kzlab_commit(),
                 "python": platform.python_version(), "load_before": load_text(), "args": {
                     k: v for k, v in vars(args).items() if k not in ("json",)}}
    say(f"{res['machine']['cpu']} ({res['machine']['cores']} cores), {args.threads} threads; kzlab {kzlab.__version__} "
        f"at {res['kzlab_commit']}; ggml {res['versions']['ggml']}, BLAS {res['versions']['blas']}")
    say(f"load: {res['load_before']}")

    mimi = work / f"mimi-f32-seed{args.seed}.gguf"
    if not mimi.exists():
        say(f"writing the full-size synthetic kyutai/mimi ({mimi}) ...")
        synth(mimi, preset="mimi", dtype="f32", seed=args.seed)
    res["mimi_file"] = str(mimi)
    cases = {f"{t} frames ({t / FRAME_RATE_HZ:g} s)": random_codes(t, args.seed + 1 + t) for t in args.frames}
    stream_codes = random_codes(args.stream_frames, args.seed + 1 + args.stream_frames)

    torch_side = None
    if args.torch_python:
        sys.path.insert(0, str(HERE))
        from torch_mimi import TorchMimi

        t0 = time.perf_counter()
        torch_side = TorchMimi(mimi, args.threads, args.torch_python, env=ENV0)
        res["pytorch"] = torch_side.info
        say(f"PyTorch worker ready in {time.perf_counter() - t0:.1f} s: torch {torch_side.info['torch']}, transformers "
            f"{torch_side.info['transformers']}, {torch_side.info['attn_implementation']} attention, "
            f"{torch_side.info['torch_threads']} threads; {torch_side.info['tensors_read']} tensors read from the GGUF")
    else:
        res["pytorch"] = {"why_not": "--torch-python not given"}
    kw = json.loads(args.kzlab) if args.kzlab else {}
    try:
        with kzlab.load(mimi, threads=args.threads, **kw) as dec:
            res["kzlab"] = {"backend": dec.backend_label, "mode": dec.mode, "layout": dec.model.layout,
                            "lowering": dec.lowering.label(dec.arch.not_applicable)}
            say(f"kzlab: {dec}")
            say("\n# offline decode: kzlab against transformers' MimiModel (eager)")
            res["offline"], torch_wavs = offline(args, dec, torch_side, cases)
            torch_ref = None
            if torch_side is not None:
                if args.stream_frames in args.frames:
                    torch_ref = torch_wavs[next(n for n, c in cases.items() if c.shape[1] == args.stream_frames)]
                    # the same frames, the same seed: the same codes
                else:
                    torch_ref = torch_side.decode(stream_codes)[0]
            say(f"\n# kzlab's stream of {args.stream_frames} frames of codes (graphs prepared first)")
            res["stream"], info = kzlab_streams(args, dec, stream_codes, args.sizes, "kzlab Mimi", torch_ref,
                                                [torch_side.proc.pid] if torch_side else [])
            res["kzlab"] |= info
    finally:
        if torch_side is not None:
            res["pytorch"]["peak_rss_mb"] = torch_side.peak_rss_mb
            torch_side.close()

    say(f"\n# PocketTTS's decoder ({args.stream_frames} latent frames): kzlab and llama.cpp, streamed")
    res["pockettts"] = pockettts(args, work)
    res["load_after"] = load_text()
    res["peak_rss_mb"] = peak_rss_mb()

    # the issue's targets; the speed target is judged on the undisturbed runs only: with a core taken by another
    # process, PyTorch's OpenMP threads wait on each other and its time grows several-fold, kzlab's far less, so a
    # disturbed run's ratio says nothing about the two decoders
    checks = []
    for r in res["offline"]:
        if "ratio" in r:
            if r["quiet_pairs"]:
                checks.append((f"{r['case']}: kzlab / PyTorch {r['ratio_quiet']:.3f} over the {r['quiet_pairs']} "
                               f"undisturbed run(s) (all runs' medians: {r['ratio']:.3f}) <= {TARGET_RATIO}",
                               r["ratio_quiet"] <= TARGET_RATIO))
            else:
                checks.append((f"{r['case']}: kzlab / PyTorch <= {TARGET_RATIO}: not judged, every run was disturbed "
                               f"(other processes took >= {QUIET_CPU_S} CPU s; all runs' medians: {r['ratio']:.3f})",
                               None))
            checks.append((f"{r['case']}: SNR against PyTorch {r['snr_vs_pytorch_db']:.1f} dB >= "
                           f"{TARGET_STREAM_DB:g}", r["snr_vs_pytorch_db"] >= TARGET_STREAM_DB))
    for r in res["stream"]:
        if r["chunk"] == 1:
            checks.append((f"kzlab Mimi 1-frame stream: {r['snr_db']:.1f} dB against the offline decode >= "
                           f"{TARGET_STREAM_DB:g}", r["snr_db"] >= TARGET_STREAM_DB))
    res["checks"] = [{"what": w, "ok": None if ok is None else bool(ok)} for w, ok in checks]
    first = {r["setup"]: r["first_audio_ms"] for r in res["stream"] + res["pockettts"]["rows"] if r["chunk"] == 1}
    if first:
        ll = first.get("llama.cpp PocketTTS")
        parts = [f"{k} {v:.1f} ms" for k, v in first.items()]
        if ll:
            parts += [f"kzlab PocketTTS / llama.cpp PocketTTS {first['kzlab PocketTTS'] / ll:.3f}"]
        else:
            parts += [f"llama.cpp PocketTTS: {res['pockettts']['llamacpp'].get('why_not', 'not measured')}"]
        res["first_audio_1_frame_ms"] = first
        say("\ntime to first audio, 1-frame chunks (compute): " + "; ".join(parts))
    say(tables(res))
    say("\nissue targets:")
    for c in res["checks"]:
        say(f"  [{'not judged' if c['ok'] is None else 'ok' if c['ok'] else 'MISSED'}] {c['what']}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))
        say(f"wrote {args.json}")
    return 1 if args.check and not all(c["ok"] for c in res["checks"]) else 0  # not judged counts as missed


if __name__ == "__main__":
    sys.exit(main())
