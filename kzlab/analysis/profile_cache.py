"""CPU profiles kept on disk, so that a what-if asked again (from the CLI, a notebook or the Workbench) waits once.

A cached profile is valid only for exactly what made it: the model file's content (its SHA-256), the
hyperparameters it was decoded with (a file's own, or given: `--hparam`, or those of a decode of its first n
codebooks, each a graph of its own), the resolved lowering, the frame count, the backend setup (the plain CPU,
no scheduler), the repeat count, kzlab's and ggml's versions, the CPU model and the thread count. All of these
form the key; change one and the profile is taken again. A result made from a cached profile says so
(`cached: true` and the file), and `cache=False` refuses the cache (the profile is taken anew and stored).

Files live in `$KZLAB_CACHE/profiles/` (else `~/.cache/kzlab/profiles/`). A model's hash is remembered by path,
size and modification time, so a large file is read once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from kzlab.environment import cpu_name, default_threads, versions
from kzlab.formats.named import cache_dir


def cache_root() -> Path:
    """The profiles' folder inside kzlab's cache (the one the built-in decoders are written into)."""
    d = cache_dir() / "profiles"
    d.mkdir(exist_ok=True)
    return d


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's content, remembered by (path, size, mtime) in the cache folder."""
    p = Path(path).resolve()
    st = p.stat()
    index = cache_root() / "digests.json"
    try:
        known = json.loads(index.read_text())
    except (OSError, ValueError):
        known = {}
    key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
    if key in known:
        return known[key]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    known[key] = h.hexdigest()
    tmp = index.with_suffix(".tmp")
    tmp.write_text(json.dumps(known))
    tmp.replace(index)
    return known[key]


@functools.lru_cache(maxsize=1)
def graph_code_digest() -> str:
    """A digest of the code that builds the graphs (kzlab.graph and kzlab.arch): a profile is of one graph, and
    that graph can change without kzlab's version changing."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for sub in ("graph", "arch"):
        for f in sorted((root / sub).rglob("*.py")):
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def profile_key(model_digest: str, lowering: dict[str, Any], frames: int, threads: int, repeat: int) -> dict[str, Any]:
    """Everything a CPU profile's validity rests on: the file, the graph (its lowering and the code that builds
    it), the machine and the ggml build (its version and how its CPU backend calls libm)."""
    v = versions()
    return {"model_sha256": model_digest, "lowering_resolved": lowering, "frames": int(frames),
            "backend": "cpu", "sched": False, "threads": int(threads), "repeat": int(repeat),
            "kzlab": v.get("kzlab"), "ggml": v.get("ggml"), "ggml_python": v.get("ggml_python"),
            "ggml_cpu_libm": v.get("ggml_cpu_libm"), "ggml_llamafile": v.get("ggml_llamafile"),
            "graph_code": graph_code_digest(), "cpu": cpu_name("unknown")}


def _path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_root() / f"cpu-profile-{digest}.json"


def cached_cpu_profile(model: Any, frames: int, lowering: Any, threads: int | None = None, repeat: int = 1,
                       cache: bool = True, progress: Any = False,
                       stream: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a CPU-only profile of `model`'s portable graph as a dict, where it came from). Taken with
    `kzlab.profile(backend="cpu", sched=False)` unless a valid cached one exists and `cache` is true. The graph is
    the one the placement simulator places for `lowering` (`Lowering.portable()`: the choices `auto` makes by
    backend made as for the device), run on the CPU. `stream`: the graph of one streaming call of `frames` frames
    (`kzlab.profile(stream=frames)`), cached under a key of its own."""
    from kzlab.analysis.profile import profile

    threads = int(threads or default_threads())
    if hasattr(lowering, "portable"):
        lowering = lowering.portable()
    plan = lowering.resolve(cpu_only=True, where="the CPU profile") if hasattr(lowering, "resolve") else lowering
    key = profile_key(file_digest(model.path), plan.to_dict(), frames, threads, repeat)
    key["hparams"] = model.hparams.to_dict()  # one file, other graphs: given hyperparameters, fewer codebooks
    if stream:
        key["stream"] = True
    path = _path(key)
    if cache and path.is_file():
        try:
            d = json.loads(path.read_text())
            if d.get("cache_key") == key:
                return d["profile"], {"cached": True, "file": str(path)}
        except (OSError, ValueError, KeyError):
            pass
    # a streaming call: its graph at the stream's start (the state at zeros: the same shapes and work as any call)
    extra = {"stream": frames, "warm": 0} if stream else {"frames": frames}
    prof = profile(model, backend="cpu", sched=False, lowering=lowering, repeat=repeat, warmup=0, peak=False,
                   progress=progress, threads=threads, **extra)
    d = prof.to_dict()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"cache_key": key, "profile": d}))
    tmp.replace(path)
    return d, {"cached": False, "file": str(path), "refused_cache": not cache}
