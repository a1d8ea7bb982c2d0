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
    "kzlab.errors", "kzlab.version", "kzlab.openmp", "kzlab.codes", "kzlab.audio", "kzlab.progress", "kzlab.model",
    "kzlab.formats", "kzlab.loader",
    "kzlab.graph.options", "kzlab.graph.prepared", "kzlab.graph.fused.kernels", "kzlab.graph.fused.threads",
    "kzlab.analysis.emulate.htp", "kzlab.analysis.flops", "kzlab.analysis.evolution", "kzlab.analysis.trace",
    "kzlab.plots", "kzlab.report",
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
        # a family's modules are named after their part of the seam (spec, graph), like the commands
        if p.name != "__init__.py" and not m.startswith(("kzlab.commands.", "kzlab.arch.")):
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


# ---- decoder families stay in kzlab/arch/ ---------------------------------------------------------------------
#: words that name a family's roles or stages (a leading escape counts: regular expressions name them too)
FAMILY_WORDS = re.compile(
    r"(?<![\w])(vq\\?\.|tfm\\?\.|up\\?\.(\\d|\d|\{)|dec\\?\.(\\d|\d|\{|$)|pre_conv|pre_transformer"
    r"|upsample\\?\.|posnet|convnext|quantizer)"
)
#: modules outside kzlab/arch/ that still name a family's roles (none left: the first family's GGUF writer,
#: synthetic and known-answer decoders and layout inference live in kzlab/arch/qwen3_tts_12hz/). The list may
#: only shrink: each must still name a role.
NOT_YET_MOVED: set[str] = set()


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def family_literals(path: Path) -> list[tuple[int, str]]:
    """String literals (docstrings aside) of a module that name a family's roles or stages."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
        and FAMILY_WORDS.search(n.value)
    ]


def family_branches(path: Path, names: set[str]) -> list[int]:
    """Lines of a module that compare something with a family's name."""
    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, (ast.Compare, ast.Match)):
            for c in ast.walk(n):
                if isinstance(c, ast.Constant) and c.value in names:
                    out.append(n.lineno)
    return out


def test_no_family_names_outside_arch():
    """Only kzlab/arch/ names a family's roles or stages; the modules not yet moved are listed, and still do."""
    hits = {m: family_literals(p) for m, p in MODS.items() if not m.startswith("kzlab.arch")}
    bad = {m: h[:3] for m, h in hits.items() if h and m not in NOT_YET_MOVED}
    assert not bad, f"family roles or stages named outside kzlab/arch/: {bad}"
    stale = sorted(m for m in NOT_YET_MOVED if not hits.get(m))
    assert not stale, f"moved already: drop from NOT_YET_MOVED: {stale}"


def test_nothing_outside_arch_branches_on_a_family():
    from kzlab.arch import families

    names = {a.name for a in families()} | {x for a in families() for x in a.architectures}
    bad = {m: family_branches(p, names) for m, p in MODS.items() if not m.startswith("kzlab.arch")}
    bad = {m: v for m, v in bad.items() if v}
    assert not bad, f"modules that branch on a family's name: {bad}"


#: the third family's words: its name, its SEANet decoder, PocketTTS (whose decoder it is)
MIMI_WORDS = re.compile(r"mimi|seanet|pocket", re.IGNORECASE)
#: the one line outside kzlab/arch/mimi/ that may name it: its registry entry
MIMI_REGISTRY = '''"mimi": "kzlab.arch.mimi.spec",'''


def mimi_literals(path: Path) -> list[tuple[int, str]]:
    """String literals (docstrings aside) of a module that name the Mimi family, off its registry line."""
    tree = ast.parse(path.read_text(), str(path))
    lines = path.read_text().splitlines()
    docs = _docstrings(tree)
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
        and MIMI_WORDS.search(n.value) and lines[n.lineno - 1].strip() != MIMI_REGISTRY
    ]


def test_the_third_family_is_one_folder():
    """A family is one folder: no string constant outside kzlab/arch/mimi/ (docstrings aside) names Mimi, SEANet or
    PocketTTS, but the registry line in kzlab/arch/__init__.py; and the registry line is there."""
    bad = {m: h[:3] for m, p in MODS.items() if not m.startswith("kzlab.arch.mimi") and (h := mimi_literals(p))}
    assert not bad, f"the Mimi family named outside kzlab/arch/mimi/: {bad}"
    assert MIMI_REGISTRY in [ln.strip() for ln in MODS["kzlab.arch"].read_text().splitlines()]


def test_the_one_folder_rule_can_fail(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""Mimi in a docstring is fine."""\nx = "mimi-synthetic"\nd = {\n    ' + MIMI_REGISTRY + "\n}\n")
    assert [ln for ln, _ in mimi_literals(f)] == [2]


def test_family_rules_can_fail(tmp_path):
    """The two checks above find what they look for."""
    f = tmp_path / "m.py"
    f.write_text(
        '"""dec.1 in a docstring is fine."""\nx = "dec.1.res.0.conv1.weight"\nif a == "qwen3-tts-12hz":\n    pass\n'
    )
    assert [ln for ln, _ in family_literals(f)] == [2]
    assert family_branches(f, {"qwen3-tts-12hz"}) == [3]


def test_every_family_is_complete_and_its_graph_half_ranks_with_graph():
    from kzlab.arch import Arch, families

    for a in families():
        assert isinstance(a, Arch), a
        assert rank_of(a.graph_module, TABLE) == rank_of("kzlab.graph", TABLE), a.graph_module
        assert rank_of(type(a).__module__, TABLE) == rank_of("kzlab.model", TABLE), type(a).__module__
        assert getattr(a.hparams_type, "family", None) == a.name


def test_every_family_has_a_file_half_that_ranks_with_formats():
    """`Arch.files_module` names the family's file half (its GGUF, synthetic and built-in decoders, layout
    inference); it ranks with kzlab.formats and holds what kzlab.formats.family_files says it must."""
    import importlib

    from kzlab.arch import families

    need = ("ARCHITECTURE", "DEFAULT_NAME", "tensor_name", "file_array", "storage_type", "metadata", "PRESETS",
            "DEFAULT_PRESET", "random_weight", "BUILTINS", "make_builtin", "infer_layout")
    for a in families():
        assert rank_of(a.files_module, TABLE) == rank_of("kzlab.formats", TABLE), a.files_module
        fh = importlib.import_module(a.files_module)
        assert not [n for n in need if not hasattr(fh, n)], a.files_module
        assert fh.ARCHITECTURE in a.architectures and fh.PRESETS[fh.DEFAULT_PRESET].family == a.name


def runtime_privates() -> set[str]:
    """Private names (`_x`, dunders aside) that kzlab.runtime's classes define: methods and attributes."""
    out = set()
    for m, p in MODS.items():
        if not m.startswith("kzlab.runtime"):
            continue
        for n in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(n, ast.ClassDef):
                for c in ast.walk(n):
                    name = c.name if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef)) else (
                        c.attr if isinstance(c, ast.Attribute) and isinstance(c.value, ast.Name)
                        and c.value.id == "self" else None
                    )
                    if name and name.startswith("_") and not name.startswith("__"):
                        out.add(name)
                for c in n.body:  # class-level names (aliases kept for old callers)
                    if isinstance(c, ast.Assign):
                        out |= {t.id for t in c.targets if isinstance(t, ast.Name) and t.id.startswith("_")}
    return out


def private_uses(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, name) where a module reaches into another object's private name from `names` (not self's)."""
    return [
        (n.lineno, n.attr)
        for n in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(n, ast.Attribute) and n.attr in names
        and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))
    ]


def test_analysis_uses_no_runtime_private(tmp_path):
    """The runtime offers public methods for what analysis needs (weights, a fresh scheduler, the session lock)."""
    names = runtime_privates()
    assert {"_ensure_weights", "_new_sched", "_lock"} <= names
    bad = {m: private_uses(p, names) for m, p in MODS.items() if m.startswith("kzlab.analysis")}
    bad = {m: v for m, v in bad.items() if v}
    assert not bad, f"analysis modules reaching into the runtime's privates: {bad}"
    f = tmp_path / "m.py"
    f.write_text("def f(s):\n    self._lock\n    return s._ensure_weights()\n")
    assert private_uses(f, names) == [(3, "_ensure_weights")]


# ---- the facade and the notebooks ------------------------------------------------------------------------------
def test_the_facade_lists_what_it_exports_and_every_name_resolves():
    import kzlab

    assert set(kzlab._LAZY) <= set(kzlab.__all__), "a lazy name missing from kzlab.__all__"
    assert len(set(kzlab.__all__)) == len(kzlab.__all__)
    for name in ("profile", "simulate", "whatif", "Workbench", "load", "Lowering", "BackendSpec", "report"):
        assert name in kzlab.__all__, name
    unresolved = [n for n in kzlab.__all__ if getattr(kzlab, n, None) is None]
    assert not unresolved, f"names in kzlab.__all__ that do not resolve: {unresolved}"
    assert set(kzlab.__all__) <= set(dir(kzlab))
    assert callable(kzlab.profile) and callable(kzlab.simulate) and isinstance(kzlab.Workbench, type)


def notebook_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module or name) of every kzlab import in a notebook source that is not the public API: `import kzlab`,
    `from kzlab import <a name in kzlab.__all__>` and `kzlab.plots` are public; any other kzlab module is not."""
    import kzlab

    out = []
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Import):
            out += [(n.lineno, a.name) for a in n.names if a.name.startswith("kzlab") and a.name != "kzlab"]
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("kzlab"):
            if n.module != "kzlab":
                out.append((n.lineno, n.module))
            else:
                out += [(n.lineno, a.name) for a in n.names if a.name not in kzlab.__all__]
    return out


def test_notebooks_import_only_the_public_api(tmp_path):
    nbs = sorted((PKG / "notebooks").glob("[0-9][0-9]_*.py"))
    assert nbs
    bad = {p.name: notebook_imports(p) for p in nbs}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"notebooks importing kzlab internals (make them public through the facade): {bad}"
    f = tmp_path / "nb.py"
    f.write_text("import kzlab\nfrom kzlab import plots, load\nfrom kzlab.audio import snr_db\n"
                 "from kzlab import _LAZY\n")
    assert notebook_imports(f) == [(3, "kzlab.audio"), (4, "_LAZY")]
