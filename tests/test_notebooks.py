"""Every notebook runs top to bottom on CPU (nbclient, the python3 kernel of this environment)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

NB = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB.glob("[0-9][0-9]_*.ipynb"))


def test_notebooks_are_in_sync_with_the_generator():
    """notebooks/_build.py writes exactly the notebooks that are checked in."""
    import importlib.util

    import nbformat

    spec = importlib.util.spec_from_file_location("nb_build", NB / "_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert sorted(mod.NOTEBOOKS) == NOTEBOOKS
    for name, cells in mod.NOTEBOOKS.items():
        on_disk = nbformat.read(NB / name, as_version=4)
        assert [c.source for c in on_disk.cells] == [c.source for c in cells], f"{name}: run notebooks/_build.py"
        tags = [c.metadata.get("tags", []) for c in on_disk.cells]
        assert sum("parameters" in t for t in tags) == 1, name


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NB / name, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    t0 = time.perf_counter()
    client.execute()  # raises CellExecutionError on the first failing cell
    print(f"{name}: {time.perf_counter() - t0:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    images = sum(1 for o in outputs if "image/png" in o.get("data", {}))
    assert images >= 1, "the notebook should show figures"
