"""llama.cpp's own Qwen3-TTS decoder (code2wav in tools/mtmd/models/qwen3tts-gen.cpp), driven from Python.

llama-cpp-python 0.3.36 binds mtmd's generation API: `mtmd_init_from_file` on the mmproj file (a NULL text
model is enough for GEN_WAV, mtmd.cpp:537) and `mtmd_gen_audio_process` with `MTMD_GEN_PROCESS_TYPE_GEN_WAV`.
That runtime decodes in windows of 72 frames (clip.cpp:5333; `wav_tfm_swa`, clip.cpp:1882): a shorter call is
padded with code 0 and its tail trimmed (clip.cpp:5885), and the state it hands back after each call is passed
to the next, as llama.cpp's own helper does (mtmd-helper-gen.cpp:400-418). So a clip of T frames is fed in
ceil(T / 72) calls of 72 frames, the last one short; every call computes a whole window.

llama.cpp's libraries carry their own ggml, which must not meet ggml-python's in one process, so the decoder
runs in a worker process (`python llamacpp_code2wav.py --serve MMPROJ`); it times each decode itself, so the
time it reports holds no inter-process traffic. `Code2Wav` is the client the benchmarks use.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
from workers import Worker

WINDOW_FRAMES = 72  # clip.cpp:1882 (wav_tfm_swa); at most this many frames a call (clip.cpp:5333)


def gen_wav(M, ctx, state: bytes, **fields) -> tuple[np.ndarray | None, bytes, int]:
    """One GEN_WAV call of mtmd's gen-audio API (`M`: llama_cpp.mtmd_cpp) with the state the previous call handed
    back (b"" at the stream's start): `fields` set on its input (codes or feats, and their count). Returns the
    audio, the state this call hands back and the return code (the audio None unless it is 0)."""
    import ctypes

    inp = M.mtmd_gen_inp_default(ctx)
    inp.type = M.MTMD_GEN_PROCESS_TYPE_GEN_WAV
    for name, value in fields.items():
        setattr(inp, name, value)
    keep = ctypes.create_string_buffer(state, len(state)) if state else None  # alive through the call
    inp.state_data = ctypes.cast(keep, ctypes.POINTER(ctypes.c_char)) if keep is not None else None
    inp.state_size = len(state)
    out = M.mtmd_gen_out()
    rc = M.mtmd_gen_audio_process(ctx, ctypes.byref(inp), ctypes.byref(out))
    if rc != 0:
        return None, state, rc
    audio = np.ctypeslib.as_array(out.audio, shape=(out.n_samples,)).copy()
    return audio, ctypes.string_at(out.state_data, out.state_size), 0


def open_context(M, mmproj: str, threads: int):
    """mtmd's context of `mmproj` on the CPU with `threads` threads (`M`: llama_cpp.mtmd_cpp), its timings not
    printed and no warm-up run (the benchmarks time their own first calls); None when the file does not load."""
    import llama_cpp

    llama_cpp.llama_backend_init()
    params = M.mtmd_context_params_default()
    params.use_gpu = False
    params.print_timings = False
    params.n_threads = threads
    params.warmup = False
    return M.mtmd_init_from_file(mmproj.encode(), None, params) or None


def serve(mmproj: str, threads: int) -> None:
    """Worker: load the mmproj file once, then answer one JSON line per decode on stdin."""
    import ctypes

    from llama_cpp import mtmd_cpp as M

    ctx = open_context(M, mmproj, threads)
    if not ctx:
        print(json.dumps({"error": f"mtmd_init_from_file failed for {mmproj}"}), flush=True)
        return
    info = M.mtmd_gen_audio_get_info(ctx)
    print(json.dumps({"ready": True, "sample_rate": int(info.sample_rate)}), flush=True)

    for line in sys.stdin:
        req = json.loads(line)
        codes = np.load(req["codes"])  # [groups, frames], group-major as kzlab and PyTorch take them
        groups, frames = codes.shape
        frame_major = np.ascontiguousarray(codes.T.astype(np.int32))  # frame * groups + group
        t0 = time.perf_counter()
        pieces: list[np.ndarray] = []
        call_seconds: list[float] = []  # each call's own time, from its codes to its audio (a stream's calls)
        state = b""
        for start in range(0, frames, WINDOW_FRAMES):
            t_call = time.perf_counter()
            chunk = np.ascontiguousarray(frame_major[start:start + WINDOW_FRAMES].reshape(-1))
            audio, state, rc = gen_wav(M, ctx, state, codes=chunk.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                       n_codes=chunk.size)
            if rc != 0:
                print(json.dumps({"error": f"mtmd_gen_audio_process returned {rc}"}), flush=True)
                break
            pieces.append(audio)
            call_seconds.append(time.perf_counter() - t_call)
        else:
            dt = time.perf_counter() - t0
            np.save(req["out"], np.concatenate(pieces).astype(np.float32))
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3  # kB -> MB
            print(json.dumps({"seconds": dt, "calls": len(pieces), "peak_rss_mb": peak, "call_seconds": call_seconds,
                              "state_bytes": len(state)}), flush=True)
    M.mtmd_free(ctx)


class Code2Wav(Worker):
    """Client: a worker process holding llama.cpp's decoder; `decode(codes)` returns (waveform, seconds)."""

    def __init__(self, mmproj: str | Path, threads: int, python: str | None = None):
        super().__init__([python or sys.executable, __file__, "--serve", str(mmproj), "--threads", str(threads)],
                         "llama.cpp", prefix="kzlab-code2wav-")
        self.sample_rate = int(self.info["sample_rate"])
        self.calls = 0
        self.call_seconds: list[float] = []  # the last decode's calls, each timed by the worker
        self.state_bytes = 0  # the size of the state the last call handed back

    def decode(self, codes: np.ndarray) -> tuple[np.ndarray, float]:
        src, dst = self.path("codes.npy"), self.path("wav.npy")
        np.save(src, np.asarray(codes, dtype=np.int64))
        msg = self.request(codes=str(src), out=str(dst))
        self.calls = int(msg["calls"])
        self.call_seconds = [float(x) for x in msg.get("call_seconds", [])]
        self.state_bytes = int(msg.get("state_bytes", 0))
        return np.load(dst), float(msg["seconds"])


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--serve", required=True, help="the mmproj file")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    serve(a.serve, a.threads)
