"""Which BLAS library ggml's BLAS backend calls, as kzlab reports it (kzlab.environment): asked of the loader, so
the answer holds for any build (oneMKL, OpenBLAS, none) and is never numpy's own OpenBLAS."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import kzlab
from kzlab.environment import ggml_blas_library, ggml_cpu_libm, versions


def _mapped() -> set[str]:
    out = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            out.add(parts[5])
    return out


def test_the_library_is_the_one_ggml_links_and_says_its_version():
    lib = ggml_blas_library()
    has_blas = "blas" in kzlab.available_backends()
    assert (lib is not None) == has_blas
    if lib is None:
        assert versions()["blas"] == "none"
        return
    assert lib.vendor in ("MKL", "OpenBLAS", "BLIS"), lib
    assert lib.version not in ("", "unknown"), lib
    assert lib.library in _mapped(), lib.library  # loaded in this process, by that path
    numpy_libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    assert not Path(lib.library).resolve().is_relative_to(numpy_libs), "numpy's own BLAS, not ggml's"
    assert versions()["blas"] == lib.label and lib.vendor in lib.label


def test_info_names_the_runtime(capsys):
    from kzlab.cli import main

    assert main(["info", "tiny", "--json"]) == 0
    rt = json.loads(capsys.readouterr().out)["runtime"]
    assert rt["ggml"] == versions()["ggml"] and "cpu" in rt["backends"]
    lib = ggml_blas_library()
    assert rt["blas"] == (lib.as_dict() if lib is not None else None)
    assert rt["libm"] == ggml_cpu_libm() == versions()["ggml_cpu_libm"]
    assert main(["info", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "BLAS backend: " + (lib.label if lib is not None else "none") in out
    assert "ggml-cpu libm: " + ggml_cpu_libm() in out


def test_the_libm_ggml_cpu_calls_is_the_one_it_links():
    """`libmvec` exactly when glibc's vector math library is mapped into this process and ggml-cpu resolves a
    vector sinf through it (.ci/build-ggml builds so where GCC can), `scalar` otherwise."""
    import ctypes

    said = ggml_cpu_libm()
    assert said in ("libmvec", "scalar")
    cpu = [p for p in _mapped() if Path(p).name.startswith("libggml-cpu")]
    assert cpu, "ggml's CPU backend is not loaded"
    mvec = [p for p in _mapped() if Path(p).name.startswith("libmvec")]
    if said == "libmvec":
        assert mvec  # the vector sinf lives there, loaded for ggml-cpu
        lib = ctypes.CDLL(cpu[0])
        fn = getattr(lib, "_ZGVdN8v_sinf", None) or getattr(lib, "_ZGVeN16v_sinf", None)
        assert fn is not None
        libc = ctypes.CDLL("libc.so.6")

        class Info(ctypes.Structure):
            _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                        ("saddr", ctypes.c_void_p)]

        info = Info()
        assert libc.dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info))
        assert Path(info.fname.decode()).name.startswith("libmvec")
    else:
        for p in cpu:
            lib = ctypes.CDLL(p)
            assert getattr(lib, "_ZGVdN8v_sinf", None) is None and getattr(lib, "_ZGVeN16v_sinf", None) is None
