"""kzlab's import graph against ARCHITECTURE.md: no cycle, no import up the layer order, the invariants.

The graph is read with `ast` from the source files (every import, at module level or inside a function,
counts: a lazy import is still a dependency). The layer table is read from ARCHITECTURE.md itself, so the
document and the check cannot drift apart.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "kzlab"


def modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        if p.parent.name == "notebooks":  # the notebooks' jupytext sources: package data, not modules
            continue
        parts = list(p.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def imports(path: Path, known: set[str]) -> set[str]:
    """kzlab modules (and `ggml`, `ipywidgets` as such) that `path` imports; `from kzlab import x` counts as
    an import of the module kzlab.x when there is one, else of the package root."""
    out: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    pkg = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:  # relative: resolve against this file's package
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([mod] if mod else []))
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
            out.update(subs)
            if len(subs) < len(node.names):
                out.add(mod)
    return out


def layer_table() -> list[tuple[int, list[str]]]:
    text = (REPO / "ARCHITECTURE.md").read_text()
    block = text.split("<!-- layers: read by tests/test_architecture.py -->", 1)[1]
    rows = []
    for line in block.splitlines():
        m = re.match(r"^\|\s*(\d+)\s*\|\s*\w+\s*\|(.*?)\|", line)
        if m:
            rows.append((int(m.group(1)), re.findall(r"`(kzlab[\w.]*)`", m.group(2))))
        elif rows and not line.startswith("|"):
            break
    return rows


def rank_of(module: str, table: list[tuple[int, list[str]]]) -> int | None:
    best = None
    for rank, prefixes in table:
        for p in prefixes:
            if module == p or module.startswith(p + "."):
                if best is None or len(p) > best[1]:
                    best = (rank, len(p))
    return best[0] if best else None


MODS = modules()
GRAPH = {m: {i for i in imports(p, set(MODS)) if i in MODS} for m, p in MODS.items()}
RAW = {m: imports(p, set(MODS)) for m, p in MODS.items()}
TABLE = layer_table()
#: package __init__ files that only re-export their own submodules (they sit in their package's layer)
ROOT = "kzlab"


def test_the_layer_table_is_read():
    assert [r for r, _ in TABLE] == list(range(len(TABLE))) and len(TABLE) >= 10, TABLE


def test_every_module_has_a_layer():
    missing = sorted(m for m in MODS if m != ROOT and rank_of(m, TABLE) is None)
    assert not missing, f"modules in no layer of ARCHITECTURE.md: {missing}"


def test_no_import_points_up_the_layers():
    bad = []
    for m, deps in GRAPH.items():
        if m == ROOT:
            continue
        r = rank_of(m, TABLE)
        for d in deps:
            if d == ROOT:
                bad.append(f"{m} imports the package root (the facade)")
                continue
            rd = rank_of(d, TABLE)
            if rd is not None and rd > r:
                bad.append(f"{m} (layer {r}) imports {d} (layer {rd})")
    assert not bad, "\n".join(sorted(bad))


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring a package's import of its own
    submodules (a package __init__ re-exporting them is not a cycle of logic)."""
    edges = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert not _cycles(), f"import cycles: {_cycles()}"


def test_the_checker_finds_what_it_looks_for():
    """The checks above can fail: a made-up upward import and a made-up cycle are both caught."""
    global GRAPH
    saved = GRAPH
    try:
        GRAPH = {**saved, "kzlab.model.model": saved["kzlab.model.model"] | {"kzlab.runtime.session"}}
        with pytest.raises(AssertionError, match="layer 1"):
            test_no_import_points_up_the_layers()
        GRAPH = {**saved, "kzlab.errors": saved["kzlab.errors"] | {"kzlab.codes"}}
        assert _cycles()
    finally:
        GRAPH = saved


NO_GGML = [
    "kzlab.errors", "kzlab.version", "kzlab.codes", "kzlab.audio", "kzlab.progress", "kzlab.model", "kzlab.formats",
    "kzlab.loader",
    "kzlab.graph.options", "kzlab.graph.prepared", "kzlab.graph.fused.kernels", "kzlab.graph.fused.threads",
    "kzlab.analysis.flops", "kzlab.analysis.evolution", "kzlab.analysis.trace", "kzlab.plots", "kzlab.report",
    "kzlab.app", "kzlab.cli", "kzlab.commands",
]


def test_invariant_files_never_import_ggml():
    text = (REPO / "ARCHITECTURE.md").read_text()
    bad = []
    for prefix in NO_GGML:
        assert f"`{prefix}`" in text.split("**Never import ggml:**", 1)[1].split("\n- ", 1)[0], prefix
        for m, deps in RAW.items():
            if (m == prefix or m.startswith(prefix + ".")) and any(d == "ggml" or d.startswith("ggml.") for d in deps):
                bad.append(m)
    assert not bad, f"modules that must not import ggml do: {sorted(set(bad))}"


def test_only_the_ui_imports_ipywidgets():
    users = sorted(m for m, deps in RAW.items() if any(d.split(".")[0] in ("ipywidgets", "IPython") for d in deps))
    assert users and all(m.startswith("kzlab.ui.") for m in users), users


def test_module_names_do_not_collide():
    """No two modules with the same file name (two `api.py`, two `weights.py`...) and one class per name. A
    command module is named after its subcommand (`kzlab demo` is `commands/demo.py`), so those are exempt."""
    stems: dict[str, list[str]] = {}
    for m, p in MODS.items():
        if p.name != "__init__.py" and not m.startswith("kzlab.commands."):
            stems.setdefault(p.stem, []).append(m)
    dup = {k: v for k, v in stems.items() if len(v) > 1}
    assert not dup, dup
    classes: dict[str, list[str]] = {}
    for m, p in MODS.items():
        for node in ast.parse(p.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                classes.setdefault(node.name, []).append(m)
    dup = {k: v for k, v in classes.items() if len(v) > 1}
    assert not dup, dup


def test_old_module_paths_still_import_with_a_warning():
    """Modules moved by the one-way structure keep working from their old paths, saying where they went."""
    import importlib
    import sys
    import warnings

    import kzlab

    for old, targets in kzlab._MOVED.items():
        assert old not in MODS, f"{old} is both a real module and a moved one"
        sys.modules.pop(old, None)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            m = importlib.import_module(old)
        assert any(issubclass(w.category, DeprecationWarning) and targets[0][0] in str(w.message) for w in seen), old
        for mod, renames in targets:
            new = importlib.import_module(mod)
            public = [n for n in getattr(new, "__all__", dir(new)) if not n.startswith("_")]
            for name in public[:5]:
                assert getattr(m, name) is getattr(new, name), (old, name)
            for was, now in renames.items():
                assert getattr(m, was) is getattr(new, now)
    from kzlab.ui.models import random_codes  # the 0.1 notebooks' import

    assert random_codes is kzlab.codes.random_codes
