"""The Chrome trace: valid JSON, microseconds, one track per backend, stages > layers > ops nested."""

from __future__ import annotations

import json

import pytest
from conftest import TINY

import kzlab
from kzlab.analysis.trace import build_trace

RANK = {"stage": 0, "layer": 1, "op": 2}


def check_nesting(events: list[dict]) -> dict[int, list[str]]:
    """Assert that on every track each slice lies inside the slice open around it; returns cats per depth."""
    depth_cats: dict[int, list[str]] = {}
    by_tid: dict[int, list[dict]] = {}
    for e in events:
        if e["ph"] == "X":
            by_tid.setdefault(e["tid"], []).append(e)
    eps = 1e-6
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"], RANK[e["cat"]]))
        stack: list[dict] = []
        for e in evs:
            assert e["dur"] >= 0
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - eps and stack[-1]["dur"] > 0:
                stack.pop()  # the open slice ended before this one starts
            if stack:
                top = stack[-1]
                assert e["ts"] + e["dur"] <= top["ts"] + top["dur"] + eps, (e, top)
            depth_cats.setdefault(len(stack), []).append(e["cat"])
            stack.append(e)
    return depth_cats


def node(name: str, backend: str, ms: float, op: str = "MUL_MAT") -> dict:
    return {
        "name": name,
        "op": op,
        "layer": name.split(":")[0],
        "backend": backend,
        "time_ms": ms,
        "flops": 10,
        "bytes": 20,
        "ne": [1, 2, 1, 1],
        "type": "F32",
        "src_ne": [[1, 1, 1, 1]],
        "src_types": ["F32"],
        "is_view": op == "VIEW",
    }


def test_synthetic_nodes_nest_on_their_tracks():
    nodes = [
        node("a.conv:MUL_MAT", "cpu", 1.5),
        node("a.conv:ADD", "cpu", 0.25, "ADD"),
        node("a.conv:VIEW", "cpu", 0.0, "VIEW"),
        node("a.act:MUL_MAT", "blas", 2.0),
        node("a.act:SIN", "cpu", 0.5, "SIN"),
        node("b.conv:MUL_MAT", "blas", 1.0),
        node("b.conv:MUL_MAT.1", "blas", 1.0),
    ]
    stage_of = {"a.conv": "s0", "a.act": "s0", "b.conv": "s1"}
    tr = build_trace(nodes, stage_of)
    events = tr["traceEvents"]
    json.loads(json.dumps(tr))
    names = {e["args"]["name"]: e["tid"] for e in events if e.get("name") == "thread_name"}
    assert set(names) == {"cpu", "blas"} and len(set(names.values())) == 2
    ops = [e for e in events if e.get("cat") == "op"]
    assert len(ops) == 6  # the view is left out
    assert sum(e["dur"] for e in ops) == pytest.approx(6250.0)  # microseconds
    assert ops[0]["ts"] == 0 and ops[0]["dur"] == pytest.approx(1500.0)
    cats = check_nesting(events)
    assert set(cats[0]) == {"stage"} and set(cats[1]) == {"layer"} and set(cats[2]) == {"op"}
    # the blas MUL_MAT of b.conv: one layer slice around two ops, inside the s1 stage slice
    blas = sorted((e for e in events if e.get("tid") == names["blas"] and e["ph"] == "X"), key=lambda e: e["ts"])
    s1 = [e for e in blas if e["cat"] == "stage" and e["name"] == "s1"][0]
    assert s1["ts"] == pytest.approx(4250.0) and s1["dur"] == pytest.approx(2000.0)


@pytest.fixture(scope="module")
def prof(ref):
    return kzlab.profile(
        TINY / "qwentts-tokenizer-f32.gguf", codes=ref["codes"][:, :4], backend="blas", threads=1, repeat=1,
        peak=False, convt="col2im",  # the tiny model's only products big enough for the BLAS backend
    )  # fmt: skip


def test_profile_trace_file(prof, tmp_path):
    path = prof.write_trace(tmp_path / "trace.json")
    tr = json.loads(path.read_text())
    events = tr["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert tracks == {"blas", "cpu"}
    ops = [e for e in events if e.get("cat") == "op"]
    compute = [n for n in prof.nodes if not n["is_view"]]
    assert len(ops) == len(compute)
    # microseconds: the ops add up to the node time in ms * 1000, each duration rounded to a whole nanosecond
    # (build_trace), so the sum is off by at most half a nanosecond per op
    assert sum(e["dur"] for e in ops) == pytest.approx(prof.node_time_ms * 1000, rel=0, abs=0.0005 * len(ops) + 1e-9)
    mm = [e for e in ops if e["name"] == "MUL_MAT"]
    assert mm and all(e["args"]["flops"] > 0 and len(e["args"]["ne"]) == 4 for e in mm)
    cats = check_nesting(events)
    assert set(cats[0]) == {"stage"} and set(cats[1]) == {"layer"} and set(cats[2]) == {"op"}
    stages = {e["name"] for e in events if e.get("cat") == "stage"}
    assert {"quantizer", "pre_transformer", "decoder.4"} <= stages
