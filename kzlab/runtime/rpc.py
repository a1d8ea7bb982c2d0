"""A ggml RPC server from kzlab's own ggml build (`kzlab rpc-server`), and a way to run one in a child
process for loopback tests and notebooks.

`ggml_backend_rpc_start_server` never returns, so the server always lives in its own process: stopping
it is terminating that process, and a crash there cannot take the caller down.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass

from kzlab.errors import BackendError, InvalidOptionError


def serve(host: str = "127.0.0.1", port: int = 50052, threads: int | None = None) -> None:
    """Serve this machine's CPU backend over ggml RPC (blocks until the process is killed)."""
    from ggml import ggml as g

    if not 0 < port < 65536:
        raise InvalidOptionError(f"port {port}: expected 1..65535")
    if threads is not None and threads < 1:
        raise InvalidOptionError(f"threads={threads}: expected >= 1")
    n = threads or max(1, os.cpu_count() or 1)
    dev = g.ggml_backend_dev_by_name(b"CPU")
    devs = (g.ggml_backend_dev_t_ctypes * 1)(dev)
    print(f"kzlab rpc-server listening on {host}:{port} ({n} threads)", flush=True)
    g.ggml_backend_rpc_start_server(f"{host}:{port}".encode(), None, n, 1, devs)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_listening(host: str, port: int, timeout: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            raise BackendError(f"rpc server exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise BackendError(f"rpc server on {host}:{port} did not start listening within {timeout:.0f} s")


@dataclass
class ServerProcess:
    host: str
    port: int
    proc: subprocess.Popen

    @property
    def address(self) -> str:
        return f"rpc://{self.host}:{self.port}"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def start_server_process(host: str = "127.0.0.1", port: int | None = None, threads: int | None = None) -> ServerProcess:
    """Start `kzlab rpc-server` in a child process and wait until it listens."""
    port = port or free_port(host)
    cmd = [sys.executable, "-m", "kzlab.cli", "rpc-server", "--host", host, "--port", str(port)]
    if threads:
        cmd += ["--threads", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    srv = ServerProcess(host, port, proc)
    try:
        wait_listening(host, port, proc=proc)
    except BaseException:
        srv.stop(signal.SIGKILL)
        raise
    return srv


@contextmanager
def rpc_server(host: str = "127.0.0.1", port: int | None = None, threads: int | None = None):
    """`with rpc_server() as srv: kzlab.load(..., backend=srv.address)`; the server stops on exit."""
    srv = start_server_process(host, port, threads)
    try:
        yield srv
    finally:
        srv.stop()
