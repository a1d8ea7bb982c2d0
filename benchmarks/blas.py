"""Which BLAS for ggml's BLAS backend, and which libm for ggml's CPU backend: the same decodes through ggml-python
builds that differ only in their BLAS, or only in how ggml-cpu calls libm (`.ci/build-ggml` vectorises those calls
through glibc's libmvec where it can), side by side in one run.

Each build is a venv into which `.ci/build-ggml VENV mkl|openblas|none` installed ggml-python (the Makefile's own
build script), e.g.::

    for b in mkl openblas none; do python3.11 -m venv /tmp/v-$b && bash .ci/build-ggml /tmp/v-$b $b; done
    python benchmarks/blas.py --build mkl=/tmp/v-mkl --build openblas=/tmp/v-openblas --build none=/tmp/v-none \\
        --qwen full-f32.gguf --wavtokenizer wavtokenizer-f32.gguf --turns 8 --markdown blas.md

Every build runs in its own worker process (this interpreter, with the build's site-packages first on the path, so
that only ggml differs); the workers load once and decode in turns (A, B, C, A, B, C, ...), one at a time with a
pause between runs (an idle BLAS pool spins for a while after a call and would take the next worker's cores), so
that ratios come from runs interleaved in time. A build without a BLAS backend runs ggml's own CPU products
(llamafile sgemm where the build has it). Each worker reports the BLAS library its ggml really calls and how its
ggml-cpu calls libm (kzlab.environment), which is what the table names. The table shows the median time per case and
build and, as a ratio, the median over turns of each build's time over the first build's in the same turn.

Cases: the Qwen3-TTS seed case (31 frames) in the default (fast) and portable modes, and WavTokenizer at 750
frames in both modes; `--case` picks some.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

WORKER = r"""
import json, sys, time
import numpy as np
import kzlab
from kzlab.environment import blas_label, ggml_cpu_libm
cases = json.loads(sys.argv[1])
decs, codes = {}, {}
for name, c in cases.items():
    decs[name] = kzlab.load(c["path"], threads=c["threads"], **c["kw"])
    codes[name] = kzlab.random_codes(decs[name].hparams, c["frames"], seed=0)
    decs[name].decode(codes[name])  # warm-up: graphs built, buffers allocated
said = {"blas": blas_label(), "libm": ggml_cpu_libm(), "decoders": {n: repr(d) for n, d in decs.items()}}
print(json.dumps(said), flush=True)
for line in sys.stdin:
    name = line.strip()
    if not name:
        break
    t0 = time.perf_counter()
    decs[name].decode(codes[name])
    print(json.dumps({"s": time.perf_counter() - t0}), flush=True)
"""


def site_of(venv: Path) -> Path:
    """The site-packages of a venv (the layout this interpreter uses)."""
    rel = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    return venv / rel


def cases(args) -> dict[str, dict]:
    out = {}
    if args.qwen:
        out["qwen3 seed default"] = {"path": args.qwen, "frames": 31, "kw": {}}
        out["qwen3 seed portable"] = {"path": args.qwen, "frames": 31, "kw": {"mode": "portable"}}
    if args.wavtokenizer:
        out["wavtokenizer default"] = {"path": args.wavtokenizer, "frames": 750, "kw": {}}
        out["wavtokenizer portable"] = {"path": args.wavtokenizer, "frames": 750, "kw": {"mode": "portable"}}
    if args.case:
        out = {k: v for k, v in out.items() if any(c in k for c in args.case)}
    for c in out.values():
        c["threads"] = args.threads
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", required=True, metavar="NAME=VENV",
                    help="a venv holding a ggml-python build (.ci/build-ggml); the first is the reference")
    ap.add_argument("--qwen", help="a full-size Qwen3-TTS 12 Hz decoder (F32)")
    ap.add_argument("--wavtokenizer", help="a full-size WavTokenizer decoder (F32)")
    ap.add_argument("--case", action="append", help="only the cases whose name holds this text")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--pause", type=float, default=0.3, help="seconds between runs")
    ap.add_argument("--markdown", help="write the table here too")
    args = ap.parse_args(argv)
    todo = cases(args)
    if not todo:
        ap.error("no case: give --qwen and/or --wavtokenizer")
    builds = {}
    for b in args.build:
        name, _, venv = b.partition("=")
        site = site_of(Path(venv).resolve())
        if not (site / "ggml").is_dir():
            ap.error(f"--build {b}: no ggml-python in {site}")
        builds[name] = site
    repo = HERE.parent
    workers, blas = {}, {}
    for name, site in builds.items():
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(repo)]))
        p = subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(todo)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"build {name}: its worker failed to start")
        said = json.loads(line)
        blas[name] = f"{said['blas']}, libm {said['libm']}"
        workers[name] = p
        print(f"{name}: BLAS backend {said['blas']}; ggml-cpu libm: {said['libm']}", flush=True)
    times: dict[tuple[str, str], list[float]] = {(b, c): [] for b in builds for c in todo}
    for turn in range(args.turns):
        for c in todo:
            for b, p in workers.items():
                time.sleep(args.pause)
                p.stdin.write(c + "\n")
                p.stdin.flush()
                times[(b, c)].append(json.loads(p.stdout.readline())["s"])
        print(f"turn {turn + 1}/{args.turns} done", flush=True)
    for p in workers.values():
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(timeout=60)
    first = next(iter(builds))
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines = [f"machine: {cpu}, {args.threads} threads, {args.turns} turns; python {platform.python_version()}", "",
             "| case | " + " | ".join(f"{b}: {blas[b]}" for b in builds) + " |",
             "| --- | " + " | ".join("---:" for _ in builds) + " |"]
    for c in todo:
        cells = []
        for b in builds:
            med = statistics.median(times[(b, c)])
            ratio = statistics.median(x / y for x, y in zip(times[(b, c)], times[(first, c)], strict=True))
            cells.append(f"{med:.3f} s ({ratio:.2f}x)")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
