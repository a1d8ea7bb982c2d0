"""The client side of a benchmark's worker process: a peer (PyTorch, llama.cpp) run by another Python, which
answers each request, one JSON line in, one JSON line out (lines not starting with '{' are its own chatter).

kzlab's environment holds neither torch nor llama-cpp-python, and two OpenMP runtimes or two ggml builds in one
process would disturb each other: each peer runs in a process of its own, and the benchmark talks to it through
files in a temporary folder and these lines. Standard library only: the workers import their module with their own
Python.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path


class Worker:
    """A worker process started with `argv`; `info` is its first line (it says it is ready), `request(**payload)`
    one round trip (its peak RSS kept in `peak_rss_mb`), `path(name)` a file in the folder the two share."""

    def __init__(self, argv: list[str], name: str, env: dict | None = None, log: bool = False,
                 prefix: str = "kzlab-worker-", pythonpath: Callable[[str], str] | None = None):
        self.name = name
        self.tmp = tempfile.TemporaryDirectory(prefix=prefix)
        # the worker's Python must not see kzlab's environment
        env = {k: v for k, v in (os.environ if env is None else env).items() if k not in ("PYTHONPATH", "KZLAB_SITE")}
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath(self.tmp.name)
        self.log = Path(self.tmp.name) / "worker.log" if log else None
        self._log = open(self.log, "w") if self.log is not None else None  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     text=True, env=env)
        self.peak_rss_mb = 0.0
        self.info = self._reply()

    def path(self, name: str) -> Path:
        return Path(self.tmp.name) / name

    def _reply(self) -> dict:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                tail = self.log.read_text(errors="replace").strip().splitlines()[-3:] if self.log else []
                raise RuntimeError(f"{self.name} worker exited (rc {self.proc.wait()})"
                                   + (f": {' | '.join(tail)}" if tail else ""))
            if line.startswith("{"):
                msg = json.loads(line)
                if "error" in msg:
                    raise RuntimeError(f"{self.name} worker: {msg['error']}")
                return msg

    def request(self, **payload) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()
        msg = self._reply()
        self.peak_rss_mb = max(self.peak_rss_mb, float(msg.get("peak_rss_mb", 0.0)))
        return msg

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self._log is not None:
            self._log.close()
        self.tmp.cleanup()
