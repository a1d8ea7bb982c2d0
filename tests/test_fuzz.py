"""Fuzz the GGUF header, metadata and tensor infos: no mutation may crash the process or escape as anything
but a KzlabError. Every mutated file is loaded (and, when it loads, decoded) in child processes, so a crash
is seen as a signal exit. KZLAB_FUZZ_CASES sets the number of cases (`make fuzz` runs 10,000)."""

from __future__ import annotations

import os
import struct
from collections import Counter

import pytest
from conftest import TINY
from fuzz_driver import run_cases
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kzlab.errors import InvalidModelError
from kzlab.formats.prescan import prescan_gguf
from kzlab.progress import Progress

BASES = [TINY / "qwentts-tokenizer-f32.gguf", TINY / "crispasr-tokenizer-f16.gguf"]
N_CASES = int(os.environ.get("KZLAB_FUZZ_CASES", "300"))
BATCH = 250

#: values that tend to break parsers: boundaries of every integer width, alignment neighbours
INTERESTING = [0, 1, 2, 3, 4, 5, 7, 8, 12, 13, 31, 32, 33, 63, 64, 255, 256, 4096, 65535, 65536, 2**31 - 1, 2**31]
INTERESTING += [2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _fields(path) -> list[tuple[str, int, int]]:
    """(what, offset, width) of every integer field of the header: the places a mutation is aimed at."""
    h = prescan_gguf(path)
    out = [("version", 4, 4), ("n_tensors", 8, 8), ("n_kv", 16, 8)]
    for kv in h.kvs:
        out += [(f"kv:{kv.key}:keylen", kv.offset, 8), (f"kv:{kv.key}:type", kv.type_offset, 4)]
        if kv.value_type in (8, 9):  # string length / array element type + count
            out.append((f"kv:{kv.key}:len", kv.value_offset, 8 if kv.value_type == 8 else 4))
            if kv.value_type == 9:
                out.append((f"kv:{kv.key}:count", kv.value_offset + 4, 8))
        else:
            out.append((f"kv:{kv.key}:value", kv.value_offset, kv.end - kv.value_offset))
    for t in h.tensors:
        nd = t.offset + 8 + len(t.name.encode())
        out += [(f"t:{t.name}:namelen", t.offset, 8), (f"t:{t.name}:ndims", nd, 4)]
        out += [(f"t:{t.name}:dim{i}", nd + 4 + 8 * i, 8) for i in range(len(t.dims))]
        out += [(f"t:{t.name}:type", t.end - 12, 4), (f"t:{t.name}:offset", t.end - 8, 8)]
    return out


FIELDS = {str(p): _fields(p) for p in BASES}
HEADER_END = {str(p): prescan_gguf(p).data_start for p in BASES}
SIZES = {str(p): p.stat().st_size for p in BASES}


@st.composite
def mutation(draw, base: str) -> list:
    kind = draw(st.sampled_from(["field", "field", "field", "flip", "splice", "trunc"]))
    end = HEADER_END[base]
    if kind == "field":
        what, off, width = draw(st.sampled_from(FIELDS[base]))
        v = draw(st.one_of(st.sampled_from(INTERESTING), st.integers(0, 2 ** (8 * width) - 1)))
        v %= 2 ** (8 * width)
        return ["set", off, v.to_bytes(width, "little").hex(), what]
    if kind == "flip":
        off = draw(st.integers(0, end - 1))
        return ["set", off, bytes([draw(st.integers(0, 255))]).hex(), "byte"]
    if kind == "splice":
        off = draw(st.integers(0, end - 1))
        ins = draw(st.binary(max_size=16))
        return ["splice", off, draw(st.integers(0, 16)), ins.hex(), "splice"]
    return ["trunc", draw(st.integers(0, SIZES[base] - 1)), "truncate"]


def _collect(n: int, tmp) -> list[dict]:
    """n cases drawn by hypothesis (each: a base file and 1-3 mutations); run later, in batches."""
    cases: list[dict] = []

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck), derandomize=False)
    @given(st.data())
    def draw(data):
        base = data.draw(st.sampled_from([str(p) for p in BASES]))
        ops = data.draw(st.lists(mutation(base), min_size=1, max_size=3))
        i = len(cases)
        cases.append(
            {
                "id": f"fuzz{i}",
                "path": str(tmp / f"fuzz{i % BATCH}.gguf"),
                "mutate": {"base": base, "ops": [op[:-1] for op in ops]},
                "what": [op[-1] for op in ops],
                "decode": 2,
            }
        )

    draw()
    return cases


def test_fuzz_gguf_headers(tmp_path):
    cases = _collect(N_CASES, tmp_path)
    assert len(cases) >= N_CASES * 0.9  # hypothesis may stop a little early once it has seen enough
    results: dict[str, dict] = {}
    with Progress(len(cases), "fuzz cases", unit="case") as bar:  # `make fuzz` runs 10,000
        for i in range(0, len(cases), BATCH):
            batch = [{k: v for k, v in c.items() if k != "what"} for c in cases[i : i + BATCH]]
            results.update(run_cases(batch, timeout=60 + 2 * len(batch), workdir=tmp_path))
            bar.step(len(batch))
    by_id = {c["id"]: c for c in cases}
    outcome = Counter()
    bad = []
    for cid, r in results.items():
        if r["status"] == "ok":
            outcome["loaded and decoded"] += 1
        elif r["status"] == "error" and r["kz"]:
            outcome[r["etype"]] += 1
        else:
            bad.append(f"{cid} {by_id[cid]['what']} {by_id[cid]['mutate']['ops']}: {r}")
    print(f"\nfuzz: {len(results)} cases: {dict(outcome)}; {len(bad)} crashes/hangs/foreign exceptions")
    assert len(results) == len(cases)
    assert not bad, "\n".join(b[:600] for b in bad[:20])


def test_fuzz_values_reach_the_checks(tmp_path):
    """The aimed mutations hit real fields: changing the first tensor's type to an unknown id is refused."""
    h = prescan_gguf(BASES[0])
    t = h.tensors[0]
    assert ("t:" + t.name + ":type", t.end - 12, 4) in FIELDS[str(BASES[0])]
    data = bytearray(BASES[0].read_bytes())
    data[t.end - 12 : t.end - 8] = struct.pack("<I", 999)
    (tmp_path / "t.gguf").write_bytes(bytes(data))
    with pytest.raises(InvalidModelError, match="unknown ggml type id 999"):
        prescan_gguf(tmp_path / "t.gguf")
