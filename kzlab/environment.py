"""What a result depends on besides its inputs: this machine, its thread settings, and the versions that ran.

Every record (profile, run, report) carries these, so that two results taken on different machines or builds
are never compared unknowingly. Nothing here imports ggml at module level.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import re
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from kzlab.version import __version__

#: environment variables that change the timings (thread pools and their wait policies)
THREAD_ENV = ("KZLAB_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
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
    """kzlab, ggml-python, the ggml it was built from and whether its CPU products use llamafile's sgemm, the BLAS
    library ggml's BLAS backend calls (`none` when the build has no BLAS backend; see `ggml_blas_library`), how
    ggml-cpu calls libm (`ggml_cpu_libm`), numpy."""
    out = {"kzlab": __version__, "ggml_python": _dist_version("ggml-python"), "numpy": _dist_version("numpy")}
    try:
        from ggml import ggml as g

        out["ggml"] = g.ggml_version().decode()
        out["ggml_llamafile"] = "on" if g.ggml_cpu_has_llamafile() else "off"
    except (ImportError, AttributeError):
        out["ggml"] = "unknown"
    out["blas"] = blas_label()
    out["ggml_cpu_libm"] = ggml_cpu_libm()
    return out


def machine_info() -> dict[str, str]:
    """machine() and versions() flattened into text, for tables and reports."""
    m = machine()
    out = {k: str(v) for k, v in m.items() if k != "thread_env"}
    out.update({k.replace("_", "-"): v for k, v in versions().items()})  # ggml-python: the distribution's name
    if m["thread_env"]:
        out["thread_env"] = " ".join(f"{k}={v}" for k, v in m["thread_env"].items())
    return out


# ---- the BLAS behind ggml's BLAS backend ------------------------------------------------------------------
# Which BLAS library ggml's BLAS backend calls in this process, asked of the loader, not assumed.
#
# ggml-python is built from source against whatever BLAS the build found (see the Makefile: a current OpenBLAS
# from PyPI, `scipy-openblas32`, when it installs; Debian's OpenBLAS when only that is there; none, and ggml's own
# CPU products, otherwise). Two builds of kzlab can therefore time the same product differently, and a result
# that does not say which library ran cannot be compared with another. This module finds the library by
# resolving the BLAS entry point through ggml's BLAS backend library itself (so numpy's own OpenBLAS, loaded in
# the same process under other symbol names, is never mistaken for it) and asks that library for its version
# and the kernel it picked for this CPU.
#
# Nothing here raises: a build without the BLAS backend gives `None`, an unknown library gives its file name
# with vendor "unknown".

#: the CBLAS product ggml-blas calls, as each kind of build exports it (the PyPI OpenBLAS prefixes its symbols)
_SGEMM_SYMBOLS = ("cblas_sgemm", "scipy_cblas_sgemm")


@dataclass(frozen=True)
class BlasLibrary:
    """The BLAS behind ggml's BLAS backend: vendor, version, the kernel it chose, and its file."""

    vendor: str  # OpenBLAS, MKL, BLIS, unknown
    version: str
    core: str  # the kernel family the library picked for this CPU (OpenBLAS: its corename), "" when not told
    library: str  # the shared object the product resolves to
    config: str = ""  # the library's own build description

    @property
    def label(self) -> str:
        """Short text for tables and result labels, e.g. `OpenBLAS 0.3.34 (SkylakeX)`."""
        core = f" ({self.core})" if self.core else ""
        return f"{self.vendor} {self.version}{core}".strip()

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.label}


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _loaded_paths(pattern: str) -> list[str]:
    """Files mapped into this process whose name matches `pattern` (Linux /proc; [] elsewhere)."""
    try:
        text = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    out: list[str] = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and re.search(pattern, Path(parts[5]).name) and parts[5] not in out:
            out.append(parts[5])
    return out


def _file_of(address: int) -> str:
    """The shared object that holds `address` (dladdr), or ""."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        info = _DlInfo()
        if libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode(errors="replace"))  # as /proc/self/maps names it
    except (OSError, AttributeError):
        pass
    return ""


def _call_str(lib: ctypes.CDLL, names: tuple[str, ...]) -> str:
    for name in names:
        fn = getattr(lib, name, None)
        if fn is None:
            continue
        fn.restype = ctypes.c_char_p
        fn.argtypes = []
        try:
            out = fn()
        except OSError:
            continue
        if out:
            return out.decode(errors="replace").strip()
    return ""


def _describe(lib: ctypes.CDLL, path: str) -> BlasLibrary:
    """Vendor and version of the library at `path`, asked through `lib` (a handle whose dependencies hold it)."""
    name = Path(path).name
    if "mkl" in name:
        buf = ctypes.create_string_buffer(256)
        version = ""
        fn = getattr(lib, "MKL_Get_Version_String", None) or getattr(lib, "mkl_get_version_string", None)
        if fn is not None:
            try:
                fn(buf, ctypes.c_int(len(buf)))
                version = buf.value.decode(errors="replace").strip()
            except OSError:
                version = ""
        m = re.search(r"(\d{4}\.\d+(?:\.\d+)?)", version)
        core = re.search(r"for (.+?) (?:based|processors)", version)
        return BlasLibrary("MKL", m.group(1) if m else "unknown", core.group(1) if core else "", path, version)
    config = _call_str(lib, ("openblas_get_config", "scipy_openblas_get_config", "openblas_get_config64_"))
    if config or "openblas" in name:
        core = _call_str(lib, ("openblas_get_corename", "scipy_openblas_get_corename", "openblas_get_corename64_"))
        m = re.search(r"OpenBLAS\s+(\S+)", config)
        return BlasLibrary("OpenBLAS", m.group(1) if m else "unknown", core, path, config)
    if "blis" in name:
        return BlasLibrary("BLIS", "unknown", "", path)
    return BlasLibrary("unknown", "unknown", "", path)


@functools.lru_cache(maxsize=1)
def ggml_blas_library() -> BlasLibrary | None:
    """The BLAS that ggml's BLAS backend calls in this process; None when the build has no BLAS backend.

    Imports ggml (which loads its backends); found once per process."""
    try:
        from ggml import ggml as g  # noqa: F401  (loads libggml and the backends it links)
    except ImportError:
        return None
    backends = _loaded_paths(r"^libggml-blas\.so")
    if not backends:
        return None
    try:
        blas = ctypes.CDLL(backends[0])
    except OSError:
        return None
    for sym in _SGEMM_SYMBOLS:
        fn = getattr(blas, sym, None)  # dlsym on ggml-blas's handle searches its own dependencies
        if fn is None:
            continue
        path = _file_of(ctypes.cast(fn, ctypes.c_void_p).value or 0)
        if not path:
            continue
        return _describe(blas, path)  # its version functions, looked up through the same handle
    return BlasLibrary("unknown", "unknown", "", backends[0])


def blas_label() -> str:
    """`OpenBLAS 0.3.34 (Zen)`, or `none` when ggml was built without its BLAS backend."""
    lib = ggml_blas_library()
    return lib.label if lib is not None else "none"


# ---- ggml-cpu's per-element libm calls -----------------------------------------------------------------------
#: glibc libmvec's sinf, one per vector width (SSE4, AVX2, AVX-512): what GCC calls where it vectorised ggml-cpu's
#: SIN loop (.ci/build-ggml builds it so where GCC and glibc can)
_MVEC_SINF = ("_ZGVeN16v_sinf", "_ZGVdN8v_sinf", "_ZGVcN8v_sinf", "_ZGVbN4v_sinf")


@functools.lru_cache(maxsize=1)
def ggml_cpu_libm() -> str:
    """How ggml's CPU backend computes SIN, COS, GELU_ERF, EXP, LOG and TANH: `libmvec` (glibc's vector math
    library, 4-16 elements a call), `scalar` (one libm call per element: ggml-python built without
    .ci/build-ggml's flags, e.g. from PyPI), or `unknown` (no ggml CPU library found in this process).

    Asked of the loader: a vector sinf resolves through libggml-cpu's own handle only if it links libmvec. The
    two builds differ in speed by 18x on SIN here (README) and in the last bits of those ops, so a result says
    which one it ran."""
    try:
        from ggml import ggml as g  # noqa: F401  (loads libggml and the backends it links)
    except ImportError:
        return "unknown"
    paths = _loaded_paths(r"^libggml-cpu.*\.so")
    if not paths:
        return "unknown"
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if any(getattr(lib, sym, None) is not None for sym in _MVEC_SINF):
            return "libmvec"
    return "scalar"
