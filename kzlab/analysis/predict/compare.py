"""A/B of two placements of the same decoder: the nodes that moved, splits and copies, predicted ms per stage.

Typical use: the same graph on hexagon-v0.15.2 and v0.15.3 (which MUL_MATs came back to the NPU), or two
lowerings on one profile (what `mm_chunk=1024` or `conv_src1` changes). Nodes are paired by name and
occurrence; a node only one side has (another lowering) is counted, not paired.
"""

from __future__ import annotations

from typing import Any


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def _keyed(nodes: list[Any]) -> dict[tuple[str, int], Any]:
    out, seen = {}, {}
    for n in nodes:
        name = _get(n, "name")
        k = seen.get(name, 0)
        seen[name] = k + 1
        out[(name, k)] = n
    return out


def placement_diff(a: Any, b: Any) -> dict[str, Any]:
    """What differs between placements `a` and `b` (Placement objects or their to_dict())."""
    na, nb = _keyed(list(_get(a, "nodes"))), _keyed(list(_get(b, "nodes")))
    moved = []
    for key in na.keys() & nb.keys():
        ba, bb = _get(na[key], "backend"), _get(nb[key], "backend")
        if ba != bb:
            moved.append({"name": key[0], "op": _get(na[key], "op"), "stage": _get(na[key], "stage"), "a": ba, "b": bb})
    moved.sort(key=lambda r: r["name"])
    pa, pb = _get(a, "predicted"), _get(b, "predicted")

    def pdict(p: Any) -> dict[str, Any] | None:
        if p is None:
            return None
        return p if isinstance(p, dict) else p.to_dict()

    pa, pb = pdict(pa), pdict(pb)
    stages = []
    if pa is not None and pb is not None:
        for st in dict.fromkeys([*pa["by_stage_ms"], *pb["by_stage_ms"]]):
            x, y = pa["by_stage_ms"].get(st, 0.0), pb["by_stage_ms"].get(st, 0.0)
            stages.append({"stage": st, "a_ms": x, "b_ms": y, "b_minus_a_ms": y - x})
    splits = [len(_get(a, "splits")), len(_get(b, "splits"))]
    copied = [int(_get(a, "copied_bytes")), int(_get(b, "copied_bytes"))]
    totals = [pa["total_ms"] if pa else None, pb["total_ms"] if pb else None]
    return {
        "moved": moved,
        "only_a": len(na.keys() - nb.keys()),
        "only_b": len(nb.keys() - na.keys()),
        "splits": splits,
        "copied_bytes": copied,
        "predicted_ms": totals,
        "copy_ms": [pa["copy_ms"] if pa else None, pb["copy_ms"] if pb else None],
        "sync_ms": [pa["sync_ms"] if pa else None, pb["sync_ms"] if pb else None],
        "stages": stages,
    }
