"""WavTokenizer decode speed: kzlab against the PyTorch reference and llama.cpp's own graph, side by side in one run.

What is timed, per configuration, is codes -> waveform for one sequence (default: the 750 frames, 10 s of 24 kHz
audio, of the reference that comes with the file), F32, on the same number of threads:

- kzlab's default (``kzlab.load(path, threads=N)`` and nothing else) and its alternatives: the llama.cpp-like lowering
  (``conv="im2col-f16", gelu="tanh"``), the in-graph iSTFT, F16 weights (the converter's F16 file);
- the PyTorch reference, eager: outetts 0.4.4's ``WavDecoder`` (VocosBackbone + ISTFTHead) with the GGUF's weights,
  ``torch.set_num_threads(N)``, under ``torch.inference_mode()``;
- llama.cpp's ``wavtokenizer-dec`` graph through llama-cpp-python (its low-level API: ``llama_encode`` of the codes,
  then the 1282-wide head output per frame from ``llama_get_embeddings``), plus the iSTFT on the host in numpy (the
  same function kzlab's host iSTFT uses, so the iSTFT costs both the same); its graph-only time is shown too;
- the floor: the matrix products kzlab's default decode does, alone, back to back, with numpy's sgemm, the one
  ggml's BLAS backend calls and torch's (``ProductsRun``): what no decode that does those products with that sgemm
  can go below.

Every configuration lives in its own worker process (two ggml libraries, two OpenMP runtimes and llama.cpp's logs
do not share a process well, and a worker's peak RSS, VmHWM, is then its own). The workers load once and are run in
turns (A, B, C, A, B, C, ...), one at a time, so that the ratios come from runs interleaved in time: a shared machine
drifts by tens of percent within a minute. The table shows median times and, as ratios, the median over turns of
each row's time over the reference row's time in the same turn; every output is checked against the reference's
waveform (SNR in dB) when the reference's codes are the ones decoded.

Needs the ``bench-wavtokenizer`` extra (torch, outetts, llama-cpp-python built from its sdist) and, for the PyTorch
model, the fixture generator of the shared tools (``--tool``), whose outetts importer and GGUF-to-PyTorch name map
this reuses. Example::

    python benchmarks/wavtokenizer.py --f32 /tmp/wt-full/wavtokenizer-full-f32.gguf \\
        --f16 /tmp/wt-full/wavtokenizer-full-f16.gguf --reference /tmp/wt-full/reference.npz --runs 5
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
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ISTFT_PY = ""  # kzlab/arch/wavtokenizer/istft.py, found by the parent (the llama.cpp worker must not import kzlab)
DEFAULT_TOOL = HERE.parent.parent / "shared" / "tools" / "wavtokenizer" / "make_wavtokenizer_fixture.py"


# ---- worker side ----------------------------------------------------------------------------------------------
def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class KzlabRun:
    def __init__(self, cfg: dict[str, Any]):
        from ggml import ggml as g

        import kzlab

        self.dec = kzlab.load(cfg["path"], threads=cfg["threads"], **cfg.get("kw", {}))
        from kzlab.environment import blas_label, ggml_cpu_libm

        self.label = (f"{self.dec!r}, BLAS backend {blas_label()}, ggml-cpu libm {ggml_cpu_libm()}, "
                      f"ggml llamafile={g.ggml_cpu_has_llamafile()}, "
                      f"kzlab {Path(kzlab.__file__).parent}")

    def __call__(self, codes: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        t0 = time.perf_counter()
        wav = self.dec.decode(codes)
        return wav, {"total": time.perf_counter() - t0}


class TorchRun:
    """outetts' WavDecoder with the GGUF's weights (the shared generator's importer and name map)."""

    def __init__(self, cfg: dict[str, Any]):
        import importlib.util

        import gguf
        import torch

        torch.set_num_threads(cfg["threads"])
        spec = importlib.util.spec_from_file_location("wt_fixture_tool", cfg["tool"])
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        hp = cfg["hp"]
        outetts = importlib.util.find_spec("outetts")
        if outetts is None:
            raise SystemExit("outetts is not installed (pip install 'kzlab[bench-wavtokenizer]')")
        mods = tool.import_outetts(Path(outetts.submodule_search_locations[0]) / "wav_tokenizer", hp["groups"])
        backbone, head, quantizer, _ = tool.load_gguf_into(mods, hp, cfg["path"], gguf)
        codebook = quantizer.vq.layers[0].codebook.detach().clone()
        self.dec = mods[3].WavDecoder(backbone, head, codebook).eval()
        self.torch = torch
        self.bw = torch.tensor([0])
        self.label = f"outetts 0.4.4 WavDecoder, torch {torch.__version__}, {torch.get_num_threads()} threads, eager"

    def __call__(self, codes: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        torch = self.torch
        t0 = time.perf_counter()
        with torch.inference_mode():
            feats = self.dec.codes_to_features(torch.from_numpy(codes.astype(np.int64)).unsqueeze(0))
            wav = self.dec(feats, bandwidth_id=self.bw)
        return wav[0].numpy(), {"total": time.perf_counter() - t0}


class LlamaRun:
    """llama.cpp's wavtokenizer-dec graph (llama_encode, embeddings = the head output), then the host iSTFT."""

    def __init__(self, cfg: dict[str, Any]):
        import ctypes
        import importlib.util

        import llama_cpp as L

        # kzlab's numpy iSTFT, loaded from its file: importing the kzlab package would load ggml-python's libggml,
        # whose soname is llama.cpp's own, and the process would then run one library's ops with the other's
        spec = importlib.util.spec_from_file_location("kzlab_istft", cfg["istft_py"])
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        istft = mod.istft

        self.L, self.ctypes, self.istft = L, ctypes, istft
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = L.llama_model_load_from_file(cfg["path"].encode(), mp)
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {cfg['path']}")
        n = cfg["frames"]
        cp = L.llama_context_default_params()
        cp.n_ctx = max(n, 512)
        cp.n_batch = cp.n_ubatch = max(n, 512)
        cp.embeddings = True
        cp.n_threads = cp.n_threads_batch = cfg["threads"]
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit("llama.cpp could not make a context")
        n_out = getattr(L, "llama_model_n_embd_out", None)
        self.n_embd = int(n_out(self.model) if n_out else L.llama_model_n_embd(self.model))
        self.batch = L.llama_batch_init(n, 0, 1)
        self.hop, self.n_fft = cfg["hp"]["hop"], cfg["hp"]["n_fft"]
        self.label = (f"llama-cpp-python {L.__version__} (llama.cpp wavtokenizer-dec, CPU), {cfg['threads']} threads,"
                      f" head {self.n_embd} wide + numpy iSTFT")

    def __call__(self, codes: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        L, b = self.L, self.batch
        c = codes.reshape(-1)
        n = int(c.size)
        t0 = time.perf_counter()
        for i in range(n):
            b.token[i] = int(c[i])
            b.pos[i] = i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1
        b.n_tokens = n
        if L.llama_encode(self.ctx, b) != 0:
            raise RuntimeError("llama_encode failed")
        L.llama_synchronize(self.ctx)
        ptr = L.llama_get_embeddings(self.ctx)
        head = np.ctypeslib.as_array(ptr, shape=(n * self.n_embd,)).reshape(n, self.n_embd).T.copy()
        t1 = time.perf_counter()
        wav = self.istft(head, self.n_fft, self.hop)
        t2 = time.perf_counter()
        self.head = head
        return wav, {"total": t2 - t0, "graph": t1 - t0, "istft": t2 - t1}


class ProductsRun:
    """The decode's matrix products alone, back to back, with nothing between them: no conv transform, norm, GELU,
    bias, residual or iSTFT, each product one sgemm call on whole operands (the shapes a library runs fastest).

    The list (`products` in the parent) is what kzlab's default decode multiplies, with the fewest multiply-adds
    kzlab knows for each: the ConvNeXt blocks' two pointwise products (no cheaper algorithm), the posnet's and the
    first conv's convs by Winograd's F(m, K) as kzlab's fused nodes take them (m + K - 1 products of the frames / m),
    the attention's six and the head's one. Its time is the floor under any decode that does those products on
    this machine with this sgemm: a decode's time can go below it only by multiplying less."""

    def __init__(self, cfg: dict[str, Any]):
        self.lib = cfg["lib"]
        rng = np.random.default_rng(0)
        # one set of operands per distinct shape (the values do not change an sgemm's speed; no denormals)
        shapes = {(m, k, n) for _, m, k, n, _ in cfg["products"]}
        ops = {s: (rng.standard_normal(s[:2], dtype=np.float32), rng.standard_normal(s[1:], dtype=np.float32) * 0.03,
                   np.empty((s[0], s[2]), np.float32)) for s in shapes}
        if self.lib == "ggml-blas":
            # the library ggml's BLAS backend calls in a kzlab process, called as that backend calls it
            # (cblas_sgemm, row-major, the weight [n, k] transposed) from the threads its setting gives
            import ctypes

            from kzlab.environment import ggml_blas_library

            info = ggml_blas_library()
            if info is None:
                raise SystemExit("this ggml-python build has no BLAS backend")
            lib = ctypes.CDLL(info.library)
            for name in ("MKL_Set_Num_Threads", "openblas_set_num_threads", "scipy_openblas_set_num_threads"):
                if hasattr(lib, name):
                    getattr(lib, name)(ctypes.c_int(cfg["threads"]))
                    break
            sgemm = lib.cblas_sgemm
            sgemm.restype = None
            sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                   ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_int]
            ops = {s: (a, np.ascontiguousarray(b.T), c) for s, (a, b, c) in ops.items()}

            def mm(a: np.ndarray, bt: np.ndarray, c: np.ndarray) -> None:
                m, k = a.shape
                sgemm(101, 111, 112, m, bt.shape[0], k, 1.0, a.ctypes.data, k, bt.ctypes.data, k, 0.0,
                      c.ctypes.data, bt.shape[0])

            self.mm = mm
            self.label = f"cblas_sgemm of ggml's BLAS backend ({info.label}), {cfg['threads']} threads"
        elif self.lib == "torch":
            import torch

            torch.set_num_threads(cfg["threads"])
            ops = {s: tuple(torch.from_numpy(x) for x in v) for s, v in ops.items()}
            self.mm = lambda a, b, c: torch.matmul(a, b, out=c)
            self.label = f"torch {torch.__version__} matmul (its own sgemm), {torch.get_num_threads()} threads"
        else:
            self.mm = lambda a, b, c: np.matmul(a, b, out=c)
            blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
            self.label = (f"numpy {np.__version__} matmul ({blas.get('name')} {blas.get('version')}), "
                          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")
        self.calls = [(group, ops[(m, k, n)], count) for group, m, k, n, count in cfg["products"]]
        gflop = sum(2 * m * k * n * c for _, m, k, n, c in cfg["products"]) / 1e9
        self.label += f"; {sum(c for *_, c in cfg['products'])} products, {gflop:.1f} GFLOP"

    def __call__(self, codes: np.ndarray) -> tuple[np.ndarray, dict[str, float]]:
        times: dict[str, float] = {}
        t0 = time.perf_counter()
        for group, (a, b, c), count in self.calls:
            t = time.perf_counter()
            for _ in range(count):
                self.mm(a, b, c)
            times[group] = times.get(group, 0.0) + time.perf_counter() - t
        total = time.perf_counter() - t0
        return np.zeros(0, np.float32), {"total": total, **times}


KINDS = {"kzlab": KzlabRun, "torch": TorchRun, "llama": LlamaRun, "products": ProductsRun}


def worker(cfg: dict[str, Any]) -> None:
    """Reads commands from stdin (run / save PATH / rss / quit), answers one JSON line each on stdout."""
    out = sys.stdout
    sys.stdout = sys.stderr  # anything a library prints goes to the log, not into the protocol
    base = _status_mb("VmRSS")
    runner = KINDS[cfg["kind"]](cfg)
    codes = np.load(cfg["codes"])
    loaded = _status_mb("VmRSS")
    out.write(json.dumps({"ready": True, "label": runner.label, "rss_base_mb": base, "rss_loaded_mb": loaded}) + "\n")
    out.flush()
    wav = None
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "run":
            wav, times = runner(codes)
            ans: dict[str, Any] = {"times": times}
        elif cmd[0] == "save":
            extra = {"head": runner.head} if hasattr(runner, "head") else {}
            np.savez(cmd[1], wav=np.asarray(wav, dtype=np.float32).reshape(-1), **extra)
            ans = {"saved": cmd[1]}
        else:  # rss
            ans = {"hwm_mb": _status_mb("VmHWM"), "rss_mb": _status_mb("VmRSS")}
        out.write(json.dumps(ans) + "\n")
        out.flush()


# ---- parent side ----------------------------------------------------------------------------------------------
class Worker:
    def __init__(self, name: str, cfg: dict[str, Any], logdir: Path):
        self.name, self.cfg = name, cfg
        self.log = open(logdir / f"{name.replace(' ', '_').replace('/', '_')}.log", "w")
        env = {**os.environ, **cfg.get("env", {})}  # a row may set the environment its libraries read at load
        self.p = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(cfg)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        self.info = self.ask(None)
        self.times: list[dict[str, float]] = []

    def ask(self, cmd: str | None) -> dict[str, Any]:
        if cmd is not None:
            self.p.stdin.write(cmd + "\n")
            self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name!r} died: see {self.log.name}")
        return json.loads(line)

    def close(self) -> None:
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass
        self.p.wait(timeout=60)
        self.log.close()


def snr_db(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64).reshape(-1)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    err = float(np.sum((out - ref) ** 2))
    return float("inf") if err == 0 else float(10 * np.log10(np.sum(ref**2) / err))


def _istft_py() -> str:
    import kzlab.arch.wavtokenizer.istft as m

    return m.__file__


def hparams(path: str) -> dict[str, Any]:
    from kzlab.loader import load_model

    hp = load_model(path).hparams
    return {"features": hp.features, "vocab": hp.vocab_size, "dim": hp.dim, "ff": hp.intermediate_size,
            "layers": hp.num_convnext, "groups": hp.group_norm_groups, "n_fft": hp.n_fft, "hop": hp.hop,
            "sample_rate": hp.sample_rate, "posnet_kinds": list(hp.posnet_kinds)}


def products(hp: dict[str, Any], frames: int) -> list[tuple[str, int, int, int, int]]:
    """(group, m, k, n, count): the [m, k] x [k, n] products kzlab's default decode of `frames` frames does, with
    its Winograd forms for the convs (`ProductsRun`)."""
    from kzlab.graph.fused.winograd import outputs

    T, C, F = frames, hp["dim"], hp["ff"]
    m3, m7 = outputs(3), outputs(7)
    resnets = sum(k == "resnet" for k in hp["posnet_kinds"])
    attns = sum(k == "attn" for k in hp["posnet_kinds"])
    return [
        ("first conv", -(-T // m7), hp["features"], C, m7 + 7 - 1),
        ("posnet convs", -(-T // m3), C, C, 2 * resnets * (m3 + 3 - 1)),
        ("attention", T, C, C, 4 * attns),  # q, k, v and the output projection
        ("attention", T, C, T, attns),  # the scores
        ("attention", T, T, C, attns),  # the weighted sum
        ("convnext", T, C, F, hp["layers"]),
        ("convnext", T, F, C, hp["layers"]),
        ("head", T, C, hp["n_fft"] + 2, 1),
    ]


def configs(args: argparse.Namespace, hp: dict[str, Any], codes_path: str, frames: int) -> list[tuple[str, dict]]:
    base = {"threads": args.threads, "codes": codes_path, "hp": hp, "frames": frames}
    rows: list[tuple[str, dict]] = []
    if not args.no_torch:
        rows.append(("PyTorch eager", {**base, "kind": "torch", "path": args.f32, "tool": args.tool}))
    if not args.no_llama:
        rows.append(("llama.cpp + iSTFT", {**base, "kind": "llama", "path": args.f32, "istft_py": ISTFT_PY}))
    rows.append(("kzlab default", {**base, "kind": "kzlab", "path": args.f32}))
    if not args.no_floor:
        prods = products(hp, frames)
        rows.append(("products alone, numpy's sgemm (floor)",
                     {**base, "kind": "products", "lib": "numpy", "products": prods,
                      "env": {"OPENBLAS_NUM_THREADS": str(args.threads)}}))
        rows.append(("products alone, ggml's BLAS backend's sgemm (floor)",
                     {**base, "kind": "products", "lib": "ggml-blas", "products": prods}))
        if not args.no_torch:
            rows.append(("products alone, torch's sgemm (floor)",
                         {**base, "kind": "products", "lib": "torch", "products": prods}))
    rows.append(("kzlab portable (ggml ops only)", {**base, "kind": "kzlab", "path": args.f32,
                                                     "kw": {"mode": "portable"}}))
    rows.append(("kzlab posnet and first conv as ggml ops (normconv=ops)",
                 {**base, "kind": "kzlab", "path": args.f32, "kw": {"normconv": "ops"}}))
    rows.append(("kzlab fused ConvNeXt blocks (dwmlp=fused)", {**base, "kind": "kzlab", "path": args.f32,
                                                                "kw": {"dwmlp": "fused"}}))
    if args.alternatives:
        rows += [
            ("kzlab llama.cpp-like (im2col-f16, gelu tanh)",
             {**base, "kind": "kzlab", "path": args.f32, "kw": {"conv": "im2col-f16", "gelu": "tanh"}}),
            ("kzlab cpu backend (no BLAS)", {**base, "kind": "kzlab", "path": args.f32, "kw": {"backend": "cpu"}}),
            ("kzlab conv ktap", {**base, "kind": "kzlab", "path": args.f32, "kw": {"conv": "ktap"}}),
            ("kzlab istft in graph", {**base, "kind": "kzlab", "path": args.f32, "kw": {"istft": "graph"}}),
        ]
        # OpenBLAS (the blas backend's products) picks its kernels and keeps its idle threads spinning on its own;
        # these two rows show what the environment alone changes (OpenBLAS reads both when it loads)
        rows += [
            ("kzlab default, OPENBLAS_THREAD_TIMEOUT=4",
             {**base, "kind": "kzlab", "path": args.f32, "env": {"OPENBLAS_THREAD_TIMEOUT": "4"}}),
            ("kzlab default, OPENBLAS_CORETYPE=SKYLAKEX",
             {**base, "kind": "kzlab", "path": args.f32, "env": {"OPENBLAS_CORETYPE": "SKYLAKEX"}}),
        ]
        if args.site:
            # a folder put first on the worker's path: another build of ggml-python (e.g. with
            # CMAKE_ARGS="-DGGML_LLAMAFILE=ON", the tiled products llama.cpp's CPU backend uses) or another kzlab
            env = {"PYTHONPATH": os.pathsep.join([args.site, os.environ.get("PYTHONPATH", "")])}
            rows += [
                ("kzlab default, --site first",
                 {**base, "kind": "kzlab", "path": args.f32, "env": env}),
                ("kzlab cpu backend, --site first",
                 {**base, "kind": "kzlab", "path": args.f32, "env": env, "kw": {"backend": "cpu"}}),
            ]
        if args.f16:
            rows.append(("kzlab F16 file", {**base, "kind": "kzlab", "path": args.f16}))
            if not args.no_llama:
                rows.append(("llama.cpp F16 file + iSTFT",
                             {**base, "kind": "llama", "path": args.f16, "istft_py": ISTFT_PY}))
    if args.only:
        keep = [s.strip() for s in args.only.split(",")]
        rows = [r for r in rows if any(k in r[0] for k in keep)]
    return rows


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--f32", help="a WavTokenizer GGUF, F32 (llama.cpp's converter)")
    p.add_argument("--f16", default="", help="the same model converted --outtype f16 (alternatives)")
    p.add_argument("--reference", default="", help="reference.npz made with the file: its codes and waveform")
    p.add_argument("--frames", type=int, default=750, help="frames to decode (750 = 10 s at 75 Hz)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=5, help="timed runs per configuration, in turns (median)")
    p.add_argument("--tool", default=str(DEFAULT_TOOL), help="shared tools' make_wavtokenizer_fixture.py")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-llama", action="store_true")
    p.add_argument("--no-floor", action="store_true", help="leave out the rows that time the decode's products alone")
    p.add_argument("--alternatives", action="store_true", help="also the llama.cpp-like lowering, ktap, F16, ...")
    p.add_argument("--site", default="", help="a folder first on the path of two more kzlab rows: another ggml-python "
                   "build or another kzlab checkout (alternatives)")
    p.add_argument("--gap", type=float, default=0.5,
                   help="seconds of rest before each timed run: the run before leaves BLAS and OpenMP threads spinning "
                   "(MKL's OpenMP 200 ms by default), which would take the cores from the next one")
    p.add_argument("--only", default="", help="comma list of substrings: keep only matching rows")
    p.add_argument("--json", default="", help="write the results here")
    args = p.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    if not args.f32:
        p.error("--f32 is required")

    hp = hparams(args.f32)
    global ISTFT_PY
    ISTFT_PY = _istft_py()
    tmp = Path(tempfile.mkdtemp(prefix="kzlab-wtbench-"))
    ref = dict(np.load(args.reference)) if args.reference else {}
    if "codes" in ref and ref["codes"].shape[-1] >= args.frames:
        codes = ref["codes"].reshape(-1)[: args.frames]
        ref_wav = ref["wav"][: args.frames * hp["hop"]] if ref["codes"].shape[-1] == args.frames else None
    else:
        codes = np.random.default_rng(0).integers(0, hp["vocab"], args.frames)
        ref_wav = None
    np.save(tmp / "codes.npy", codes.astype(np.int32).reshape(1, -1))
    frames = int(codes.size)
    rows = configs(args, hp, str(tmp / "codes.npy"), frames)

    print(f"cpu: {cpu_model()}, {os.cpu_count()} logical CPUs; {args.threads} threads; {frames} frames "
          f"({frames * hp['hop'] / hp['sample_rate']:.1f} s); {args.runs} runs in turns; logs in {tmp}", flush=True)
    workers = []
    for name, cfg in rows:
        w = Worker(name, cfg, tmp)
        print(f"  {name}: {w.info['label']}", flush=True)
        workers.append(w)
    try:
        for w in workers:  # one untimed run each: graph build, allocation, first touch of the weights
            w.ask("run")
        for _ in range(args.runs):
            for w in workers:
                time.sleep(args.gap)
                w.times.append(w.ask("run")["times"])
        results = []
        for w in workers:
            saved = w.ask(f"save {tmp / (str(len(results)) + '.npz')}")["saved"]
            got = np.load(saved)
            mem = w.ask("rss")
            med = {k: statistics.median(t[k] for t in w.times) for k in w.times[0]}
            results.append({"name": w.name, "label": w.info["label"], "median_s": med,
                            "all_s": [t["total"] for t in w.times], "hwm_mb": mem["hwm_mb"],
                            "rss_base_mb": w.info["rss_base_mb"], "rss_loaded_mb": w.info["rss_loaded_mb"],
                            "wav_snr_db": (snr_db(got["wav"], ref_wav)
                                           if ref_wav is not None and got["wav"].size else None),
                            "head_snr_db": (snr_db(got["head"], ref["head.linear"])
                                            if "head" in got and ref_wav is not None else None)})
    finally:
        for w in workers:
            w.close()

    runs = {r["name"]: r["all_s"] for r in results}

    def ratio(r: dict, ref: str) -> str:
        """Median over turns of this row's time / the reference row's time in the same turn: the turns are
        seconds apart, so a drift of the machine's load cancels in each ratio."""
        if ref not in runs:
            return "-"
        q = statistics.median(a / b for a, b in zip(r["all_s"], runs[ref], strict=True))
        r.setdefault("ratios", {})[ref] = q
        return f"{q:.2f}"

    print()
    print("| configuration | median s | x PyTorch | x llama.cpp+iSTFT | peak RSS MB | wav SNR dB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        t = r["median_s"]["total"]
        parts = "".join(f" ({k} {v:.3f})" for k, v in r["median_s"].items() if k != "total")
        xt, xl = ratio(r, "PyTorch eager"), ratio(r, "llama.cpp + iSTFT")
        s = "-" if r["wav_snr_db"] is None else f"{r['wav_snr_db']:.1f}"
        print(f"| {r['name']} | {t:.3f}{parts} | {xt} | {xl} | {r['hwm_mb']:.0f} | {s} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_model(), "threads": args.threads, "frames": frames,
                                               "runs": args.runs, "results": results}, indent=1))


if __name__ == "__main__":
    main()
