"""transformers' `MimiModel` (kyutai/mimi's decoder, eager attention, PyTorch on the CPU) holding the weights of a
Mimi GGUF in codec.cpp's layout, driven from Python.

kzlab's virtual environment has no torch, and torch's OpenMP runtime must not share a process with ggml's, so
the PyTorch decoder runs in a worker process (`python torch_mimi.py --serve FILE.gguf`, with a Python that has
torch and transformers) and times each decode itself: the time it reports holds no inter-process traffic.
`TorchMimi` is the client the benchmarks use.

The worker reads the GGUF with gguf-py, not with kzlab, so that the PyTorch side's weights do not depend on
kzlab's reading of the file. It names each tensor the way codec.cpp's converter does
(`scripts/convert-to-gguf.py --model-type mimi` at c5ef02b1: string replacements on transformers' names, then
`.weight` -> `.w`, `.bias` -> `.b`; tests/data/mimi-tiny/UPSTREAM.md, section 2) and undoes its transforms: the
depthwise upsample stored as a dense diagonal kernel [C, C, K] (torch's [in, out, k]) is read back as its
diagonal [C, 1, K]; the squeezed 1x1 projections get their kernel axis back; a codebook is `cb.es` (embed_sum)
with `cb.cu` (cluster_usage) where the file has it, else a usage of 1 (what a file without usages means: the
codebook is used as stored). The model's sizes come from the file's `codec.*` keys; everything the file does not
state is transformers' `MimiConfig` default, i.e. kyutai/mimi's (UPSTREAM.md section 1.6). Only the decode path
is loaded; the encoder side keeps its random init and is never run.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
from workers import Worker

#: codec.cpp's converter's name replacements, in its order (UPSTREAM.md section 2; CV:132-158)
_REPLACE = [
    ("decoder_transformer.layers.", "dtr.l"),
    ("decoder.layers.", "dec.l"),
    ("quantizer.semantic_residual_vector_quantizer.", "q.s."),
    ("quantizer.acoustic_residual_vector_quantizer.", "q.a."),
    ("codebook.embed_sum", "cb.es"),
    ("codebook.cluster_usage", "cb.cu"),
    ("codebook.initialized", "cb.init"),
    ("input_layernorm.", "inln."),
    ("post_attention_layernorm.", "paln."),
    ("self_attn_layer_scale.", "sa_ls."),
    ("mlp_layer_scale.", "mlp_ls."),
    ("self_attn.", "attn."),
    ("output_proj.weight", "op.w"),
    ("input_proj.weight", "ip.w"),
    ("upsample.conv.weight", "up.cv.w"),
]
#: the decode path's parameters and buffers (transformers' names); the rest is the encoder side
_DECODE_PREFIXES = ("quantizer.", "upsample.", "decoder_transformer.", "decoder.")


def codeccpp_name(hf_name: str) -> str:
    """The name codec.cpp's converter gives a transformers MimiModel tensor."""
    n = hf_name
    for a, b in _REPLACE:
        n = n.replace(a, b)
    if n.endswith(".weight"):
        n = n[: -len(".weight")] + ".w"
    elif n.endswith(".bias"):
        n = n[: -len(".bias")] + ".b"
    return n


def read_gguf(path: str) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Every tensor of a GGUF as float32 in torch's axis order (gguf-py gives the reversed ggml shape), and the
    scalar metadata."""
    import gguf
    from gguf.quants import dequantize

    r = gguf.GGUFReader(path)
    meta: dict[str, object] = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or not f.data:
            continue
        v = f.parts[f.data[0]]
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            meta[k] = bytes(v).decode("utf-8", "replace")
        elif len(f.data) == 1 and getattr(v, "size", 0) == 1:
            meta[k] = v.item()
    tensors: dict[str, np.ndarray] = {}
    for t in r.tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            a = np.asarray(t.data, dtype=np.float32)
        else:
            a = dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        tensors[t.name] = a.reshape(shape)
    return tensors, meta


def build_model(path: str, threads: int):
    """transformers' MimiModel (eager attention) with the GGUF's decode-path weights; returns (model, info)."""
    import torch
    import transformers
    from transformers import MimiConfig, MimiModel

    torch.set_num_threads(threads)
    tensors, meta = read_gguf(path)
    if meta.get("general.architecture") != "mimi":
        raise ValueError(f"{path}: general.architecture is {meta.get('general.architecture')!r}, "
                         "not codec.cpp's 'mimi'")
    # the sizes the file states (codec.cpp's codec.* keys); the rest stays MimiConfig's default (kyutai/mimi)
    kw = {}
    for key, field in (("codec.latent_dim", "hidden_size"), ("codec.num_hidden_layers", "num_hidden_layers"),
                       ("codec.num_attention_heads", "num_attention_heads"), ("codec.head_dim", "head_dim"),
                       ("codec.intermediate_size", "intermediate_size"), ("codec.codebook_size", "codebook_size"),
                       ("codec.codebook_dim", "codebook_dim"), ("codec.sample_rate", "sampling_rate"),
                       ("codec.num_semantic_quantizers", "num_semantic_quantizers")):
        if key in meta:
            kw[field] = int(meta[key])
    n_sem = kw.get("num_semantic_quantizers", 1)
    n_ac = sum(1 for n in tensors if n.startswith("q.a.layers.") and n.endswith(".cb.es"))
    kw["num_quantizers"] = n_sem + n_ac
    if "num_attention_heads" in kw:
        kw["num_key_value_heads"] = kw["num_attention_heads"]
    if "codebook_dim" in kw:
        kw["vector_quantization_hidden_dimension"] = kw["codebook_dim"]
    if "hidden_size" in kw:
        kw["upsample_groups"] = kw["hidden_size"]
    cfg = MimiConfig(attn_implementation="eager", **kw)
    with torch.device("cpu"):
        model = MimiModel(cfg)
    model.eval()

    sd = model.state_dict()
    new: dict[str, torch.Tensor] = {}
    used, usage_missing = set(), 0
    for name, ref in sd.items():
        if not name.startswith(_DECODE_PREFIXES) or name.endswith("input_proj.weight"):
            continue  # the encoder side (the RVQ's input projections only encode)
        src = codeccpp_name(name)
        if name.endswith("codebook.initialized"):
            new[name] = torch.ones_like(ref)
            continue
        if name.endswith("codebook.cluster_usage") and src not in tensors:
            usage_missing += 1
            new[name] = torch.ones_like(ref)
            continue
        if src not in tensors:
            raise KeyError(f"{path}: no tensor {src!r} (for transformers' {name})")
        a = tensors[src]
        used.add(src)
        if name == "upsample.conv.weight" and a.ndim == 3 and a.shape[0] == a.shape[1] and ref.shape[1] == 1:
            idx = np.arange(a.shape[0])
            diag = a[idx, idx, :]
            off = float(np.abs(a).sum() - np.abs(diag).sum())
            if off != 0.0:
                raise ValueError(f"{path}: {src} is not diagonal (off-diagonal |sum| {off}): not a depthwise upsample")
            a = diag[:, None, :]
        a = a.reshape(tuple(ref.shape))
        new[name] = torch.from_numpy(np.array(a, dtype=np.float32, copy=True))
    missing = [k for k in new if new[k].shape != sd[k].shape]
    if missing:
        raise ValueError(f"shape mismatch: {missing[:5]}")
    model.load_state_dict(new, strict=False)
    info = {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "attn_implementation": model.config._attn_implementation, "torch_threads": torch.get_num_threads(),
        "tensors_read": len(used), "tensors_unread": sorted(set(tensors) - used), "decode_tensors": len(new),
        "usage_in_file": usage_missing == 0,
        "config": {k: getattr(cfg, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "head_dim",
                                                 "intermediate_size", "num_quantizers", "codebook_size",
                                                 "codebook_dim", "upsampling_ratios", "num_filters",
                                                 "sliding_window", "rope_theta", "hidden_act")},
    }
    return model, info


def serve(path: str, threads: int) -> None:
    """Worker: load the model once, then answer one JSON line per decode on stdin."""
    import torch

    model, info = build_model(path, threads)
    print(json.dumps({"ready": True, **info}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        codes = torch.from_numpy(np.load(req["codes"]).astype(np.int64))[None]  # [1, n_q, T]
        t0 = time.perf_counter()
        with torch.inference_mode():
            wav = model.decode(codes, return_dict=False)[0]
        dt = time.perf_counter() - t0
        np.save(req["out"], wav[0, 0].numpy().astype(np.float32))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
        print(json.dumps({"seconds": dt, "peak_rss_mb": peak}), flush=True)


class TorchMimi(Worker):
    """Client: a worker process holding transformers' MimiModel; `decode(codes)` returns (waveform, seconds)."""

    def __init__(self, gguf_path: str | Path, threads: int, python: str, env: dict | None = None):
        super().__init__([python, __file__, "--serve", str(gguf_path), "--threads", str(threads)], "PyTorch", env,
                         prefix="kzlab-torch-mimi-", pythonpath=_gguf_path_dir)
        self.info.pop("ready", None)

    def decode(self, codes: np.ndarray) -> tuple[np.ndarray, float]:
        src, dst = self.path("codes.npy"), self.path("wav.npy")
        np.save(src, np.asarray(codes, dtype=np.int64))
        msg = self.request(codes=str(src), out=str(dst))
        return np.load(dst), float(msg["seconds"])


def _gguf_path_dir(tmp: str) -> str:
    """A folder holding only gguf-py (a link to the one this Python imports), for the worker's PYTHONPATH: the
    torch environment need not have gguf installed, and nothing else of this environment leaks into it."""
    import gguf

    d = Path(tmp) / "gguf-py"
    d.mkdir(exist_ok=True)
    link = d / "gguf"
    if not link.exists():
        link.symlink_to(Path(gguf.__file__).resolve().parent)
    return str(d)


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--serve", required=True, help="the Mimi GGUF (codec.cpp's layout)")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    serve(a.serve, a.threads)
