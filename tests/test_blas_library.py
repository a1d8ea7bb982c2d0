"""Which BLAS library ggml's BLAS backend calls, as kzlab reports it (kzlab.environment): asked of the loader, so
the answer holds for any build (oneMKL, OpenBLAS, none) and is never numpy's own OpenBLAS."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import kzlab
from kzlab.environment import ggml_blas_library, versions


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
    assert main(["info", "tiny"]) == 0
    assert "BLAS backend: " + (lib.label if lib is not None else "none") in capsys.readouterr().out
