"""A/B of two placements of the same decoder: the nodes that moved, splits and copies, predicted ms per stage.

Typical use: the same graph on hexagon-v0.15.2 and v0.15.3 (which MUL_MATs came back to the NPU), or two
lowerings on one profile (what `mm_chunk=1024` or `conv_src1` changes). Nodes are paired by name and
occurrence; a node only one side has (another lowering) is counted, not paired.
"""

from __future__ import annotations

from typing import Any

from kzlab.analysis.predict.timing import field_of


def _keyed(nodes: list[Any]) -> dict[tuple[str, int], Any]:
    out, seen = {}, {}
    for n in nodes:
        name = field_of(n, "name")
        k = seen.get(name, 0)
        seen[name] = k + 1
        out[(name, k)] = n
    return out


def placement_diff(a: Any, b: Any) -> dict[str, Any]:
    """What differs between placements `a` and `b` (Placement objects or their to_dict())."""
    na, nb = _keyed(list(field_of(a, "nodes"))), _keyed(list(field_of(b, "nodes")))
    moved = []
    for key in na.keys() & nb.keys():
        ba, bb = field_of(na[key], "backend"), field_of(nb[key], "backend")
        if ba != bb:
            n = na[key]
            moved.append({"name": key[0], "op": field_of(n, "op"), "stage": field_of(n, "stage"), "a": ba, "b": bb})
    moved.sort(key=lambda r: r["name"])
    pa, pb = field_of(a, "predicted"), field_of(b, "predicted")

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
    splits = [len(field_of(a, "splits")), len(field_of(b, "splits"))]
    copied = [int(field_of(a, "copied_bytes")), int(field_of(b, "copied_bytes"))]
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
