"""Chrome trace JSON (opened by Perfetto and chrome://tracing) from a profile's nodes.

The profile holds one median time per node, so the trace lays the nodes end to end in graph order on a
common clock (microseconds) and puts each node on the track (tid) of its backend. On each track, runs of
consecutive nodes of one stage become a stage slice, runs of one layer inside it a layer slice, and each
op a slice inside that: parents are built from the children's extent, so slices nest by construction.
View nodes (0 time, nothing computed) are left out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _close(events: list[dict], opened: dict[str, Any] | None, end: float) -> None:
    if opened is not None:
        opened["dur"] = (end - opened.pop("_t")) / 1000
        events.append(opened)


def build_trace(nodes: list[dict], stage_of: dict[str, str], title: str = "kzlab profile") -> dict:
    """Trace events for `nodes` (profile node rows, in graph order)."""
    tracks: dict[str, int] = {}
    events: list[dict] = []
    t = 0  # integer nanoseconds, so that parents end exactly where their last child ends
    state: dict[int, dict[str, Any]] = {}  # per tid: open stage/layer slices and the end of its last op
    for n in nodes:
        dur = round(float(n["time_ms"]) * 1e6)
        if n.get("is_view"):
            continue
        backend = n.get("backend") or "?"
        tid = tracks.setdefault(backend, len(tracks) + 1)
        st = state.setdefault(tid, {"stage": None, "layer": None, "end": None})
        stage = stage_of.get(n["layer"], "") or "(graph)"
        gap = st["end"] is not None and st["end"] != t
        if st["stage"] is not None and (gap or st["stage"]["name"] != stage):
            _close(events, st["layer"], st["end"])
            _close(events, st["stage"], st["end"])
            st["stage"] = st["layer"] = None
        if st["layer"] is not None and st["layer"]["name"] != n["layer"]:
            _close(events, st["layer"], st["end"])
            st["layer"] = None
        if st["stage"] is None:
            st["stage"] = {"name": stage, "cat": "stage", "ph": "X", "ts": t / 1000, "_t": t, "pid": 1, "tid": tid}
        if st["layer"] is None:
            st["layer"] = {"name": n["layer"], "cat": "layer", "ph": "X", "ts": t / 1000, "_t": t, "pid": 1}
            st["layer"]["tid"] = tid
        args = {
            "node": n["name"],
            "flops": n["flops"],
            "bytes": n["bytes"],
            "ne": list(n["ne"]),
            "type": n["type"],
            "src_ne": [list(x) for x in n["src_ne"]],
            "src_types": list(n["src_types"]),
            "spread_ms": n.get("spread_ms", 0.0),
        }
        events.append(
            {
                "name": n["op"],
                "cat": "op",
                "ph": "X",
                "ts": t / 1000,
                "dur": dur / 1000,
                "pid": 1,
                "tid": tid,
                "args": args,
            }
        )
        t += dur
        st["end"] = t
    for st in state.values():
        _close(events, st["layer"], st["end"])
        _close(events, st["stage"], st["end"])
    meta = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": title}}]
    for name, tid in tracks.items():
        meta.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": tid, "args": {"name": name}})
    events.sort(key=lambda e: (e["tid"], e["ts"], -e["dur"]))
    return {"traceEvents": meta + events, "displayTimeUnit": "ms", "otherData": {"time_unit": "us"}}


def write_trace(path, nodes: list[dict], stage_of: dict[str, str], title: str = "kzlab profile") -> Path:
    p = Path(path)
    p.write_text(json.dumps(build_trace(nodes, stage_of, title)))
    return p
