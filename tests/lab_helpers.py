"""A throwaway JupyterLab server for the browser tests: loopback only, no token, its own config, data, runtime,
settings and workspace folders under a temporary directory, and always stopped with its kernels."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

#: Debian's chromium (the browser the tests drive); None where there is none
CHROMIUM = "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else shutil.which("chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
#: s, the server's answer to one API request: a hang guard (it answers in milliseconds, a busy machine in seconds)
API_HANG_S = 120

#: user settings: no news/update checks (a toast over the page, and a request to the internet), every cell in the
#: DOM (windowing would detach cells out of view), no autosave, start the notebook's kernel without asking
SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                          "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none",
                                                                    "autoStartDefaultKernel": True},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc; empty elsewhere): the server's kernels."""
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class LabServer:
    """`python -m jupyter lab` of this interpreter (so its python3 kernel is this interpreter too)."""

    def __init__(self, base: Path, root: Path):
        self.base, self.root = base, root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / "jupyter-lab.log"
        self.proc: subprocess.Popen | None = None
        self._log = None

    def start(self, timeout: float = 120.0) -> LabServer:
        dirs = {k: self.base / k for k in ("config", "data", "runtime", "settings", "workspaces", "ipython")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        for rel, value in SETTINGS.items():
            f = dirs["settings"] / rel
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps(value))
        env = dict(os.environ, JUPYTER_CONFIG_DIR=str(dirs["config"]), JUPYTER_DATA_DIR=str(dirs["data"]),
                   JUPYTER_RUNTIME_DIR=str(dirs["runtime"]), IPYTHONDIR=str(dirs["ipython"]),
                   JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
        env.pop("JUPYTER_TOKEN", None)
        cmd = [
            sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root",
            "--ip=127.0.0.1", f"--port={self.port}", "--ServerApp.port_retries=0",
            "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.open_browser=False",
            "--ServerApp.disable_check_xsrf=True", "--ServerApp.terminals_enabled=False",
            f"--ServerApp.root_dir={self.root}", f"--LabApp.workspaces_dir={dirs['workspaces']}",
            f"--LabApp.user_settings_dir={dirs['settings']}", "--LabApp.extension_manager=readonly",
            "--LabApp.expose_app_in_browser=True", "--KernelSpecManager.ensure_native_kernel=True",
        ]
        self._log = open(self.log_path, "wb")  # closed in stop()
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/lab", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"jupyter lab did not answer on {self.url}/lab in {timeout:.0f} s:\n"
                                   f"{self.log_tail()}")
            time.sleep(0.5)

    def api(self, path: str):
        with urllib.request.urlopen(f"{self.url}{path}", timeout=API_HANG_S) as r:
            return json.loads(r.read())

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM (the server shuts its kernels down), then SIGKILL what is left: the server and the kernels
        it had started (each kernel runs in its own session, so they are killed one by one, by pid)."""
        p = self.proc
        if p is None:
            return
        kernels = _children(p.pid) if p.poll() is None else []
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)
        deadline = time.monotonic() + 10
        for pid in kernels:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._log is not None:
            self._log.close()
        self.proc = None
