"""What a result depends on besides its inputs: this machine, its thread settings, and the versions that ran.

Every record (profile, run, report) carries these, so that two results taken on different machines or builds
are never compared unknowingly. Nothing here imports ggml at module level.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from kzlab.version import __version__

#: environment variables that change the timings (thread pools and their wait policies)
THREAD_ENV = ("KZLAB_THREADS", "OMP_WAIT_POLICY", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_CORETYPE")


def default_threads() -> int:
    """ggml's thread count when none is given: $KZLAB_THREADS when set (to pin a whole session or test run),
    else the cores this process may run on (its affinity mask where the OS has one)."""
    env = os.environ.get("KZLAB_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            from kzlab.errors import InvalidOptionError

            raise InvalidOptionError(f"KZLAB_THREADS={env!r}: expected an integer >= 1")
        return n
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def cpu_name(default: str = "") -> str:
    """The CPU model from /proc/cpuinfo, else platform.processor(), else `default`."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or default


def machine() -> dict[str, Any]:
    """A short description of this machine (CPU model, cores, OS, Python, thread settings)."""
    return {
        "cpu": cpu_name(platform.machine()),
        "cores": default_threads(),
        "system": platform.platform(),
        "python": platform.python_version(),
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }


def _dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def versions() -> dict[str, str]:
    """kzlab, ggml-python, the ggml it was built from, numpy."""
    out = {"kzlab": __version__, "ggml_python": _dist_version("ggml-python"), "numpy": _dist_version("numpy")}
    try:
        from ggml import ggml as g

        out["ggml"] = g.ggml_version().decode()
    except (ImportError, AttributeError):
        out["ggml"] = "unknown"
    return out


def machine_info() -> dict[str, str]:
    """machine() and versions() flattened into text, for tables and reports."""
    m = machine()
    out = {k: str(v) for k, v in m.items() if k != "thread_env"}
    out.update({k.replace("_", "-"): v for k, v in versions().items()})  # ggml-python: the distribution's name
    if m["thread_env"]:
        out["thread_env"] = " ".join(f"{k}={v}" for k, v in m["thread_env"].items())
    return out
