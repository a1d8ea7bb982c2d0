"""Decoding over ggml RPC in a child worker process, so that a lost server cannot take the caller down.

ggml's RPC client treats a broken connection as fatal: when the server dies mid-decode, the next
`send_rpc_cmd` fails and the client calls GGML_ABORT ("Remote RPC server crashed or returned malformed
response"), which aborts the whole process. That cannot be caught in Python, so a notebook kernel that
owned the RPC backend would die with the server. `RemoteSession` therefore owns the RPC backend in a
worker process: codes go in through a pipe, audio comes back, and a dead server kills only the worker.
The caller gets a BackendError at once, and the next call starts a fresh worker.

It offers the part of `Session` that `Decoder` uses (`run`, `plan`, `resolved`, `cancel`, `close`). Backends
and lowering are resolved here, in the caller, before the worker starts: the worker opens exactly that.

Profiling and bench-ops on an RPC backend go through the same door: `call_isolated` runs one whole call (e.g.
`kzlab.analysis.profile:profile`) in a fresh worker and returns its result, so that a server lost mid-profile
is a BackendError there too. Code that may be called either way asks `in_worker()` to not isolate twice.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from kzlab.errors import BackendError, Cancelled, KzlabError

#: seconds to wait for a worker to load the model and connect to the server(s)
STARTUP_TIMEOUT = 120.0
#: how often the caller checks that the worker is still alive while waiting for a result
POLL_S = 0.05


@dataclass
class _Spec:
    model: Any
    plan: Any  # LoweringPlan
    backends: Any  # ResolvedBackends


@dataclass
class _Call:
    """One call to run in a worker: `target` is 'module:function'; its result is sent back."""

    target: str
    args: tuple
    kwargs: dict


_IN_WORKER = False


def in_worker() -> bool:
    """Whether this process is a kzlab worker (an isolated call or an RPC session): no further isolation."""
    return _IN_WORKER


def _call_main(conn: Any, call: _Call) -> None:
    import importlib

    try:
        mod, fn = call.target.split(":")
        result = getattr(importlib.import_module(mod), fn)(*call.args, **call.kwargs)
        conn.send(("ok", result))
    except BaseException as e:
        conn.send(("error", _portable(e)))


def _worker_main(conn: Any, spec: _Spec) -> None:
    """The worker: open the session, then answer run requests until told to stop or the pipe closes."""
    try:
        from kzlab.runtime.session import Session

        session = Session(spec.model, spec.plan, spec.backends)
        conn.send(("ready",))
    except BaseException as e:
        conn.send(("error", _portable(e)))
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg[0] == "stop":
            break
        try:
            from kzlab.runtime.budget import check_session_budget
            from kzlab.runtime.session import codebooks_of

            hp = session.model.hparams
            if msg[0] == "stream":
                _, frames, inputs, state, position, budget = msg
                check_session_budget(session, frames, None, budget, stream=True, codebooks=codebooks_of(hp, inputs))
                conn.send(("ok", session.run_stream(frames, inputs, state, position)))
            else:
                _, frames, inputs, start, stages, budget, stop = msg
                check_session_budget(session, frames, start, budget, stages, stop,
                                     codebooks=codebooks_of(hp, inputs, start))
                conn.send(("ok", session.run(frames, inputs, start, stages, stop)))
        except BaseException as e:
            conn.send(("error", _portable(e)))
    session.close()


def _portable(e: BaseException) -> BaseException:
    """kzlab errors travel as they are; anything else becomes a BackendError with its text."""
    if isinstance(e, KzlabError):
        return e
    return BackendError(f"{type(e).__name__}: {e}")


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "did not answer"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


class _Describe:
    def __init__(self, text: str):
        self.text = text

    def describe(self) -> str:
        return self.text


class RemoteSession:
    """A Session whose ggml work happens in a worker process (used for every backend list with rpc://)."""

    def __init__(self, model: Any, lowering: Any = None, backends: Any = None, timeout: float | None = None):
        from kzlab.runtime.spec import BackendSpec, resolve_run

        self.resolved, self.plan = resolve_run(lowering, backends or BackendSpec())
        check_servers(self.resolved.names)
        self.model = model
        self.timeout = timeout
        self._spec: Any = _Spec(model, self.plan, self.resolved)
        self._proc: Any = None
        self._log: Any = None
        self._cancel = False
        self._conn: Any = None
        self.backends = _Describe(self.resolved.label)
        self._start()

    @property
    def lowering(self) -> Any:
        return self.plan

    # ---- worker lifecycle ---------------------------------------------------------------------------------
    #: how long the first answer may take, and what the worker is doing meanwhile (for the error message)
    _first_wait: tuple[float | None, str] = (STARTUP_TIMEOUT, "starting")

    def _start_call(self, doing: str) -> None:
        self._first_wait = (self.timeout, doing)
        self._start()

    def _start(self) -> None:
        # a fresh interpreter (not fork: ggml's threads; not multiprocessing's spawn: it re-runs the caller's
        # __main__), in its own session so that the terminal's or Jupyter's SIGINT reaches only the caller
        mine, theirs = socket.socketpair()
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        log = tempfile.TemporaryFile()  # ggml's abort message, quoted when the worker dies
        env = dict(
            os.environ,
            GGML_NO_BACKTRACE="1",
            PYTHONPATH=os.pathsep.join([pkg_root, *filter(None, [os.environ.get("PYTHONPATH")])]),
        )
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        except OSError as e:
            mine.close()
            raise BackendError(f"could not start the RPC worker process: {e}") from None
        finally:
            theirs.close()
        self._proc, self._conn, self._log = proc, Connection(mine.detach()), log
        try:
            self._conn.send(self._spec)
            msg = self._wait(*self._first_wait)
        except BaseException:
            self._kill()
            raise
        if msg[0] == "error":
            self._kill()
            raise msg[1]
        self._first = msg

    def _last_words(self) -> str:
        """The last line the worker wrote to stderr (ggml's abort reason), as ': ...' or ''."""
        try:
            self._log.seek(0)
            lines = [ln.strip() for ln in self._log.read().decode(errors="replace").splitlines() if ln.strip()]
        except (OSError, ValueError, AttributeError):
            return ""
        return f": {lines[-1][-300:]}" if lines else ""

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self._conn is not None:
            self._conn.close()
        if getattr(self, "_log", None) is not None:
            self._log.close()
        self._proc, self._conn, self._log = None, None, None

    def _wait(self, timeout: float | None, doing: str) -> tuple:
        """The worker's next message, or BackendError when it dies or stays silent past `timeout`."""
        t0 = time.monotonic()
        while True:
            if self._cancel:
                self._kill()
                raise Cancelled("decode cancelled; the RPC worker was stopped and the next call reconnects")
            try:
                if self._conn.poll(POLL_S):
                    return self._conn.recv()
            except (EOFError, OSError):
                pass  # the pipe closed: the worker is gone, reported below
            if self._proc.poll() is not None or self._conn.closed:
                code = self._proc.returncode
                said = self._last_words()
                self._kill()
                raise BackendError(
                    f"the RPC backend ({self.backends.describe()}) failed while {doing}: its worker process "
                    f"{_exit_reason(code)}{said} (did the RPC server stop or the connection drop?); "
                    "the next call reconnects"
                )
            if timeout is not None and time.monotonic() - t0 > timeout:
                self._kill()
                raise BackendError(
                    f"the RPC backend ({self.backends.describe()}) gave no answer within {timeout:.0f} s while "
                    f"{doing}; the worker was stopped and the next call reconnects"
                )

    # ---- the Session interface Decoder uses ---------------------------------------------------------------
    def run(
        self,
        frames: int,
        inputs: dict[str, np.ndarray],
        start: str | None = None,
        stages: bool = False,
        memory_budget: Any = None,
        stop: str | None = None,
    ) -> dict[str, np.ndarray]:
        return self._request(("run", frames, inputs, start, stages, memory_budget, stop))

    def run_stream(
        self, frames: int, inputs: dict[str, np.ndarray], state: dict[str, np.ndarray], position: int,
        memory_budget: Any = None,
    ) -> tuple:
        """Session.run_stream in the worker (the state travels both ways with each call)."""
        return self._request(("stream", frames, inputs, state, position, memory_budget))

    def _request(self, request: tuple) -> Any:
        self._cancel = False
        if self._proc is None:
            self._start()
        try:
            self._conn.send(request)
            msg = self._wait(self.timeout, "decoding")
        except KeyboardInterrupt:
            # ggml cannot abort an RPC graph from here; stopping the worker is the only prompt way out
            self._kill()
            raise Cancelled("decode interrupted (KeyboardInterrupt); the RPC worker was stopped") from None
        except (BrokenPipeError, OSError) as e:
            self._kill()
            raise BackendError(f"the RPC worker for {self.backends.describe()} is gone: {e}") from None
        if msg[0] == "error":
            raise msg[1]
        return msg[1]

    def cancel(self) -> None:
        """Stop a running decode from another thread (the UI's Cancel button): the worker is ended, since
        ggml cannot abort a graph on an RPC backend; the next call starts a new one."""
        self._cancel = True

    def close(self) -> None:
        if self._conn is not None and self._proc is not None and self._proc.poll() is None:
            try:
                self._conn.send(("stop",))
                self._proc.wait(5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> RemoteSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._kill()
        except Exception:
            pass


def check_servers(names: Any) -> None:
    """Bad addresses and absent RPC servers fail here, fast, before a worker starts."""
    from kzlab.runtime.backends import check_reachable
    from kzlab.runtime.spec import is_rpc, parse_rpc

    for n in names:
        if is_rpc(n):
            check_reachable(*parse_rpc(n))


class _CallWorker(RemoteSession):
    """The worker machinery of RemoteSession for one call: start, send the call, wait for its one answer."""

    def __init__(self, call: _Call, label: str, timeout: float | None):
        self.timeout = timeout
        self._spec = call
        self._proc = self._conn = self._log = None
        self._cancel = False
        self.backends = _Describe(label)


def call_isolated(target: str, *args: Any, label: str = "rpc", doing: str = "working",
                  timeout: float | None = None, **kwargs: Any) -> Any:
    """`target(*args, **kwargs)` ('module:function') run in a fresh worker process; its result, or its kzlab
    error, comes back. ggml aborts a process whose RPC server goes away: this keeps that abort in the worker,
    and turns it into a BackendError here. Arguments and result travel pickled (no callbacks)."""
    w = _CallWorker(_Call(target, args, kwargs), label, timeout)
    try:
        w._start_call(doing)
        msg = w._first
    except KeyboardInterrupt:
        w._kill()
        raise Cancelled(f"{doing} interrupted (KeyboardInterrupt); the RPC worker was stopped") from None
    finally:
        w._kill()
    if msg[0] == "error":
        raise msg[1]
    return msg[1]


def _main(argv: list[str]) -> None:
    """Worker entry point: `python -m kzlab.runtime.remote FD` with FD one end of a socket pair."""
    global _IN_WORKER
    _IN_WORKER = True
    conn = Connection(int(argv[0]))
    try:
        spec = conn.recv()
    except (EOFError, OSError):
        return
    if isinstance(spec, _Call):
        _call_main(conn, spec)
        return
    _worker_main(conn, spec)


#: the worker's program (not `-m kzlab.runtime.remote`: `import kzlab` already imports this module)
_WORKER = "import sys; from kzlab.runtime.remote import _main; _main(sys.argv[1:])"
