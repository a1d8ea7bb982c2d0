"""The notebooks: each `.ipynb` is generated from its jupytext source `.py`, and runs top to bottom on CPU
(nbclient, the python3 kernel of this environment)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

NB = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(p.name for p in NB.glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted(p.name for p in NB.glob("[0-9][0-9]_*.py"))
REGENERATE = "edit the .py, then regenerate the .ipynb: python -m jupytext --sync notebooks/*.py"


def _parameter_cells(nb) -> int:
    return sum("parameters" in c.metadata.get("tags", []) for c in nb.cells)


def test_notebooks_and_sources_are_in_sync_one_to_one():
    """Every notebook has a jupytext source and every source a notebook."""
    ipynb = {Path(n).stem for n in NOTEBOOKS}
    py = {Path(n).stem for n in SOURCES}
    assert py, f"no notebook sources in {NB}"
    assert not ipynb - py, f"notebooks without a .py source: {sorted(ipynb - py)} (write it in jupytext percent format)"
    assert not py - ipynb, f"sources without a notebook: {sorted(py - ipynb)}; {REGENERATE}"


@pytest.mark.parametrize("name", SOURCES)
def test_notebook_is_in_sync_with_its_source(name):
    """The checked-in .ipynb holds exactly the cells of its .py source, with one cell tagged `parameters`."""
    import jupytext
    import nbformat

    source = jupytext.read(NB / name)
    ipynb = NB / Path(name).with_suffix(".ipynb").name
    assert ipynb.is_file(), f"{ipynb.name} is missing; {REGENERATE}"
    on_disk = nbformat.read(ipynb, as_version=4)
    want = [(c.cell_type, c.source) for c in source.cells]
    have = [(c.cell_type, c.source) for c in on_disk.cells]
    assert have == want, f"{ipynb.name} differs from {name}; {REGENERATE}"
    assert _parameter_cells(source) == 1, f"{name}: exactly one cell must be tagged 'parameters'"
    assert _parameter_cells(on_disk) == 1, f"{ipynb.name}: exactly one cell must be tagged 'parameters'; {REGENERATE}"


@pytest.mark.notebooks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, tmp_path, isolated_cache):
    """Each notebook top to bottom in a kernel of its own, with a cache of this test run's (the kernel inherits
    KZLAB_CACHE): a built-in, CPU profile or emulated decode left by another run is never what a notebook shows."""
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
