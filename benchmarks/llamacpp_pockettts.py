"""llama.cpp's own PocketTTS decoder (the Mimi decoder in tools/mtmd/models/pockettts-gen.cpp), driven from Python as
a stream, and the full-size random PocketTTS model its runtime needs.

llama-cpp-python 0.3.36 binds mtmd's generation API (vendored llama.cpp 0c1e5709). For a PocketTTS mmproj,
`mtmd_gen_audio_process` with `MTMD_GEN_PROCESS_TYPE_GEN_WAV` is the Mimi decoder (mtmd.h:389): it takes normalised
latents through `feats` (mtmd.h:407; frame-major, 32 per frame), any number of frames a call, denormalises them in
the graph (pockettts-gen.cpp:180-187), and hands back an opaque state (the RoPE position, each layer's keys and
values over the 249 steps before, each conv's left context and each transposed conv's tail:
pockettts-gen.cpp:100-135) that the next call takes, as llama.cpp's own pipeline does (mtmd-helper-gen.cpp:938-957,
which decodes 8 latents a call: mtmd-helper-gen.cpp:985). So a stream of K frames a call is driven exactly as
llama.cpp drives its own; each call's time is measured in the worker around `mtmd_gen_audio_process`.

Two things about that runtime shape what is measured:
- The gen-audio context is not warmed up at load (clip.cpp:4039, "TODO: fix warmup"); its first `clip_encode`
  reserves the compute buffers with a graph built from the caller's batch and no process parameters
  (clip.cpp:4475-4476 -> 3806), i.e. the GEN_CODE graph (clip.cpp:1113), which reshapes the batch entry to the flow
  LM's width (pockettts-gen.cpp:142-143). A GEN_WAV call's batch entry is a 1x1 placeholder (mtmd.cpp:2009), so a
  GEN_WAV call on a fresh context aborts the process (GGML_ASSERT(ggml_nelements(a) == ne0*ne1), ggml.c:3739).
  llama.cpp's pipeline always runs GEN_CODE (the flow net) before its first GEN_WAV; the worker does the same: one
  GEN_CODE call with a zero hidden state when it starts, untimed.
- Every call builds and allocates its graph anew (clip.cpp:4485-4487); there is no way to prepare it ahead. A warm
  stream (one untimed pass of the same chunk size first) is what is timed.

`mtmd_init_from_file` needs the whole generator in the mmproj: the flow net, the end-of-speech head and the
latent statistics are required tensors (clip.cpp:3001-3046), and the converter (`convert_hf_to_gguf.py DIR
--mmproj`, conversion/pockettts.py) reads a pocket-tts `TTSModel.state_dict()`. `--make-model DIR` (run with a
Python that has pocket-tts 4.0.1) builds one offline: pocket-tts's own classes at the released English model's
sizes (pocket_tts/config/english.yaml, without its weights and with a local word-level tokenizer of its 4000
bins), every weight drawn as the tiny fixture's generator draws them (tests/data/pockettts-tiny/
make_pockettts_tiny.py `randomize`), written as `DIR/model.safetensors`. The transformers' sizes the converter
writes come from the encoder transformer (conversion/pockettts.py:54-75), equal to the decoder's here.

llama.cpp's libraries carry their own ggml, so the decoder runs in a worker process (`--serve MMPROJ`);
`PocketWav` is the client.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from llamacpp_code2wav import gen_wav, open_context
from workers import Worker

HERE = Path(__file__).resolve().parent
FIXTURE_GENERATOR = HERE.parent / "tests/data/pockettts-tiny/make_pockettts_tiny.py"


# ---- the worker (llama-cpp-python's Python) ------------------------------------------------------------------------
def serve(mmproj: str, threads: int, flow_width: int) -> None:
    """Worker: load the mmproj once, then answer one JSON line per stream on stdin."""
    import ctypes

    import llama_cpp
    from llama_cpp import mtmd_cpp as M

    def reply(**kw) -> None:
        print(json.dumps(kw), flush=True)

    missing = [n for n in ("mtmd_gen_audio_process", "mtmd_gen_audio_get_info", "MTMD_GEN_PROCESS_TYPE_GEN_WAV")
               if not hasattr(M, n)]
    if missing or "feats" not in dict(M.mtmd_gen_inp._fields_):
        reply(error=f"llama-cpp-python {llama_cpp.__version__} lacks {missing or 'mtmd_gen_inp.feats'}")
        return
    ctx = open_context(M, mmproj, threads)
    if not ctx:
        reply(error=f"mtmd_init_from_file failed for {mmproj}")
        return
    info = M.mtmd_gen_audio_get_info(ctx)
    if info.type != getattr(M, "MTMD_GEN_AUDIO_TYPE_POCKETTTS", 2):
        reply(error=f"{mmproj}: mtmd_gen_audio_get_info says type {info.type}, not POCKETTTS (mtmd.cpp:1892-1893)")
        return

    # one GEN_CODE call first, as llama.cpp's pipeline makes: it reserves the context's buffers (see the docstring);
    # its hidden state has the flow LM's width, clip_n_mmproj_embd = the input linear's rows (clip.cpp:6065)
    h = np.zeros(flow_width, np.float32)
    probe = M.mtmd_gen_inp_default(ctx)
    probe.type = M.MTMD_GEN_PROCESS_TYPE_GEN_CODE
    probe.embd = h.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    probe.seed = 0
    out = M.mtmd_gen_out()
    t0 = time.perf_counter()
    if M.mtmd_gen_audio_process(ctx, ctypes.byref(probe), ctypes.byref(out)) != 0:
        reply(error="the first GEN_CODE call failed")
        return
    reply(ready=True, llama_cpp_python=llama_cpp.__version__, sample_rate=int(info.sample_rate),
          flow_width=flow_width, n_latent=int(out.n_feats), gen_code_s=time.perf_counter() - t0)

    for line in sys.stdin:
        req = json.loads(line)
        lat = np.load(req["latents"]).astype(np.float32)  # [32, frames], channels first as kzlab takes them
        frame_major = np.ascontiguousarray(lat.T)  # frame * 32 + channel
        sizes = [int(k) for k in req["sizes"]]
        pieces: list[np.ndarray] = []
        call_seconds: list[float] = []
        state = b""
        ok = True
        for start, k in zip(np.cumsum([0] + sizes[:-1]).tolist(), sizes, strict=True):
            chunk = np.ascontiguousarray(frame_major[start:start + k].reshape(-1))
            t_call = time.perf_counter()
            audio, state, rc = gen_wav(M, ctx, state, feats=chunk.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                       n_feats=chunk.size)
            if rc != 0:
                reply(error=f"mtmd_gen_audio_process returned {rc}")
                ok = False
                break
            pieces.append(audio)
            call_seconds.append(time.perf_counter() - t_call)
        if ok:
            np.save(req["out"], np.concatenate(pieces).astype(np.float32))
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
            reply(call_seconds=call_seconds, state_bytes=len(state), peak_rss_mb=peak)
    M.mtmd_free(ctx)


def flow_width(mmproj: str | Path) -> int:
    """The flow LM's width, the GEN_CODE hidden state's size: clip_n_mmproj_embd, the input linear's rows
    (clip.cpp:6065; `a.gen.input_linear.weight`, ggml shape [32, width]), read from the GGUF header with gguf-py."""
    import gguf

    for t in gguf.GGUFReader(str(mmproj)).tensors:
        if t.name == "a.gen.input_linear.weight":
            return int(t.shape[1])
    raise ValueError(f"{mmproj}: no a.gen.input_linear.weight: not a PocketTTS mmproj with its flow net")


class PocketWav(Worker):
    """Client: a worker process holding llama.cpp's PocketTTS decoder; `stream(latents, k)` returns (waveform, each
    call's seconds, the state's bytes)."""

    def __init__(self, mmproj: str | Path, threads: int, python: str, env: dict | None = None):
        super().__init__([python, __file__, "--serve", str(mmproj), "--threads", str(threads), "--flow-width",
                          str(flow_width(mmproj))], "llama.cpp", env, log=True, prefix="kzlab-pockettts-")
        self.sample_rate = int(self.info["sample_rate"])

    def stream(self, latents: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, list[float], int]:
        src, dst = self.path("latents.npy"), self.path("wav.npy")
        np.save(src, np.asarray(latents, dtype=np.float32))
        msg = self.request(latents=str(src), sizes=list(sizes), out=str(dst))
        return np.load(dst), [float(x) for x in msg["call_seconds"]], int(msg["state_bytes"])


# ---- the model (pocket-tts's Python) and its mmproj (llama.cpp's converter) ---------------------------------------
def make_model(out: Path, seed: int) -> None:
    """A full-size random PocketTTS model (english.yaml's sizes) as `out/model.safetensors`, offline."""
    import importlib.util

    import pocket_tts
    import safetensors.torch
    import torch
    import yaml
    from pocket_tts.models.tts_model import TTSModel
    from pocket_tts.utils.config import load_config

    spec = importlib.util.spec_from_file_location("make_pockettts_tiny", FIXTURE_GENERATOR)
    gen = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(gen)

    out.mkdir(parents=True, exist_ok=True)
    cfg = yaml.safe_load((Path(pocket_tts.__file__).parent / "config/english.yaml").read_text())
    for k in ("weights_path", "weights_path_without_voice_cloning"):
        cfg.pop(k, None)
    n_bins = int(cfg["flow_lm"]["lookup_table"]["n_bins"])
    cfg["flow_lm"]["lookup_table"]["tokenizer_path"] = "tokenizer.json"
    (out / "model.yaml").write_text("# pocket_tts/config/english.yaml's sizes, no weights (random), local tokenizer\n"
                                    + yaml.safe_dump(cfg, sort_keys=False))
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, **{f"t{i}": i for i in range(1, n_bins)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    (out / "tokenizer.json").write_text(tok.to_str())

    torch.manual_seed(seed)
    cwd = os.getcwd()
    os.chdir(out)  # the tokenizer path is relative
    try:
        model = TTSModel._from_pydantic_config_with_weights(
            load_config(out / "model.yaml"), temp=0.3, sampler_decode_steps=1, noise_clamp=None,
            eos_threshold=-4.0, origin=out / "model.yaml")
    finally:
        os.chdir(cwd)
    model.eval()
    gen.randomize(model, np.random.default_rng(seed))
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    safetensors.torch.save_file(sd, str(out / "model.safetensors"))
    from importlib import metadata

    made = {"tensors": len(sd), "parameters": sum(v.numel() for v in sd.values()), "seed": seed,
            "pocket_tts": metadata.version("pocket-tts"), "torch": torch.__version__,
            "config": "pocket_tts/config/english.yaml (sizes), no weights, word-level tokenizer",
            "weights": "tests/data/pockettts-tiny/make_pockettts_tiny.py randomize()"}
    (out / "made.json").write_text(json.dumps(made, indent=1))
    print(json.dumps(made))


def ensure_mmproj(work: Path, pocket_python: str, torch_python: str, converter: str, seed: int,
                  log=print) -> Path:
    """The full-size random PocketTTS mmproj (F32) in `work`, made once: the model, then llama.cpp's converter."""
    model_dir = work / f"pockettts-full-seed{seed}"
    out = work / f"mmproj-pockettts-full-seed{seed}-f32.gguf"
    if out.exists():
        return out
    if "mimi" in str(model_dir.resolve()).lower():
        # the converter first asks transformers' AutoConfig, which takes a model type named in the path for the
        # config (MimiConfig here), so the pocket-tts shape guess is never tried (conversion/base.py:1276-1285)
        raise ValueError(f"{model_dir}: llama.cpp's converter cannot convert a model whose path contains 'mimi' "
                         "(conversion/base.py:1276-1285): choose another --work folder")
    if not (model_dir / "model.safetensors").exists():
        log(f"building a full-size random PocketTTS model in {model_dir} (pocket-tts, english.yaml's sizes) ...")
        r = subprocess.run([pocket_python, __file__, "--make-model", str(model_dir), "--seed", str(seed)],
                           capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if r.returncode != 0:
            raise RuntimeError(f"--make-model failed (rc {r.returncode}): {r.stderr.strip()[-800:]}")
    log(f"converting it with llama.cpp's converter ({converter} --mmproj --outtype f32) ...")
    tmp = out.with_suffix(".part")
    r = subprocess.run([torch_python, converter, str(model_dir), "--mmproj", "--outtype", "f32", "--outfile", str(tmp)],
                       capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if r.returncode != 0 or not tmp.exists():
        raise RuntimeError(f"the converter failed (rc {r.returncode}): {r.stderr.strip()[-800:]}")
    tmp.rename(out)
    return out


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--serve", help="the PocketTTS mmproj file")
    g.add_argument("--make-model", help="write a full-size random PocketTTS model (model.safetensors) here")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--flow-width", type=int, default=1024, help="the flow LM's width (--serve)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if a.serve:
        serve(a.serve, a.threads, a.flow_width)
    else:
        make_model(Path(a.make_model).resolve(), a.seed)
