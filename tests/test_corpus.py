"""A corpus of bad files, bad codes and bad options, built from the fixtures: every case must end in a clean
kzlab error (an exception in the child process, never a signal), with a message that says what is wrong."""

from __future__ import annotations

import math
import os
import re
import struct

import numpy as np
import pytest
from conftest import TINY
from fuzz_driver import GGUF, run_cases

import kzlab
from kzlab.formats.layout import get_layout
from kzlab.formats.prescan import prescan_gguf

F32 = TINY / "qwentts-tokenizer-f32.gguf"
F16 = TINY / "crispasr-tokenizer-f16.gguf"
GGML_I32, GGML_Q4_0 = 26, 2


def _case(cases: list, cid: str, path, expect: str | None, match: str, **kw) -> None:
    """expect: a kzlab error class name, or None for a clean success (then `match` must be in a warning)."""
    cases.append({"id": cid, "path": str(path), "expect": expect, "match": match, **kw})


def build_corpus(tmp) -> list[dict]:
    cases: list[dict] = []
    data = F32.read_bytes()
    hdr = prescan_gguf(F32)

    def raw(name: str, b: bytes):
        p = tmp / name
        p.write_bytes(b)
        return p

    # truncation at several offsets: inside the fixed header, a key, a tensor info, the data
    last_info = hdr.tensors[-1]
    for off in (
        0,
        3,
        8,
        17,
        23,
        40,
        hdr.kvs[3].offset + 5,
        last_info.offset + 10,
        hdr.data_start - 1,
        hdr.data_start + 100,
        len(data) // 2,
        len(data) - 1,
    ):
        _case(
            cases,
            f"truncated@{off}",
            raw(f"trunc{off}.gguf", data[:off]),
            "InvalidModelError",
            r"truncat|not a GGUF|file ends|ends at|cannot hold",
        )
    _case(cases, "magic", raw("magic.gguf", b"GGML" + data[4:]), "InvalidModelError", "not a GGUF")
    _case(cases, "zeros", raw("zeros.gguf", bytes(4096)), "InvalidModelError", "not a GGUF")
    for v in (0, 1, 4, 0xFFFFFFFF):
        _case(
            cases,
            f"version{v}",
            raw(f"v{v}.gguf", data[:4] + struct.pack("<I", v) + data[8:]),
            "InvalidModelError",
            f"version {v}",
        )
    # counts and lengths far beyond the file
    _case(
        cases,
        "n_tensors_huge",
        raw("nt.gguf", data[:8] + struct.pack("<Q", 2**62) + data[16:]),
        "InvalidModelError",
        "tensors",
    )
    _case(
        cases,
        "n_kv_huge",
        raw("nkv.gguf", data[:16] + struct.pack("<Q", 2**40) + data[24:]),
        "InvalidModelError",
        "metadata entries",
    )
    k0 = hdr.kvs[0]
    _case(
        cases,
        "key_len_huge",
        raw("klen.gguf", data[: k0.offset] + struct.pack("<Q", 2**63) + data[k0.offset + 8 :]),
        "InvalidModelError",
        "needs",
    )
    arr = next(kv for kv in hdr.kvs if kv.value_type == 9)  # an array value: its count at value_offset + 4
    o = arr.value_offset + 4
    _case(
        cases,
        "array_len_huge",
        raw("alen.gguf", data[:o] + struct.pack("<Q", 2**60) + data[o + 8 :]),
        "InvalidModelError",
        "elements",
    )
    to = k0.type_offset
    _case(
        cases,
        "value_type_bad",
        raw("vt.gguf", data[:to] + struct.pack("<I", 99) + data[to + 4 :]),
        "InvalidModelError",
        "unknown value type",
    )
    t0 = hdr.tensors[0]
    nlen = len(t0.name.encode())
    nd_off = t0.offset + 8 + nlen
    _case(
        cases,
        "n_dims_5",
        raw("nd.gguf", data[:nd_off] + struct.pack("<I", 5) + data[nd_off + 4 :]),
        "InvalidModelError",
        "dimensions",
    )
    _case(
        cases,
        "dim_zero",
        raw("d0.gguf", data[: nd_off + 4] + struct.pack("<Q", 0) + data[nd_off + 12 :]),
        "InvalidModelError",
        "zero dimension",
    )
    _case(
        cases,
        "dim_huge",
        raw("dh.gguf", data[: nd_off + 4] + struct.pack("<Q", 2**62) + data[nd_off + 12 :]),
        "InvalidModelError",
        "needs",
    )
    type_off = t0.end - 12
    _case(
        cases,
        "type_unknown",
        raw("tu.gguf", data[:type_off] + struct.pack("<I", 1000) + data[type_off + 4 :]),
        "InvalidModelError",
        "unknown ggml type",
    )
    _case(
        cases,
        "offset_misaligned",
        raw("om.gguf", data[: t0.end - 8] + struct.pack("<Q", 3) + data[t0.end :]),
        "InvalidModelError",
        "alignment",
    )
    _case(
        cases,
        "offset_outside",
        raw("oo.gguf", data[: t0.end - 8] + struct.pack("<Q", 2**40) + data[t0.end :]),
        "InvalidModelError",
        "ends at byte",
    )
    name_off = t0.offset + 8
    _case(
        cases,
        "name_not_utf8",
        raw("nu.gguf", data[:name_off] + b"\xff" + data[name_off + 1 :]),
        "InvalidModelError",
        "UTF-8",
    )

    g = GGUF.read(F32)
    for a in (0, 3):
        _case(
            cases,
            f"alignment{a}",
            GGUF.read(F32).set_u32("general.alignment", a).write(tmp / f"al{a}.gguf"),
            "InvalidModelError",
            "alignment",
        )
    dup = GGUF.read(F32)
    dup.tensors.append(list(dup.tensors[0]))
    _case(cases, "tensor_twice", dup.write(tmp / "dup.gguf"), "InvalidModelError", "appears twice")
    # another architecture: with the decoder's names the dialect is still recognised by them; with unknown
    # names the layout is refused (infer=False) or inferred from structure with a warning (the default)
    arch = GGUF.read(F32).set_string("general.architecture", "llama").write(tmp / "arch.gguf")
    _case(cases, "arch_llama", arch, "LayoutError", "no known layout", load={"infer": False})
    renamed = _renamed(GGUF.read(F32), "llama").write(tmp / "arch-renamed.gguf")
    _case(cases, "arch_llama_unknown_names", renamed, "LayoutError", "no known layout", load={"infer": False})
    _case(cases, "arch_llama_inferred", renamed, None, "unknown tensor names", decode=2)

    # every tensor of the file missing in turn: each is required by the decoder
    layout = get_layout("qwentts")
    required = [t[0] for t in g.tensors if layout.role_of(t[0]) is not None]  # the encoder's are not
    assert len(required) > 150
    for name in required:
        gg = GGUF.read(F32).drop(name)
        role = layout.role_of(name)
        _case(
            cases,
            f"missing:{name}",
            gg.write(tmp / f"miss-{name}.gguf"),
            "InvalidModelError",
            "missing|no transformer|no decoder",
            role=role,
        )

    # wrong shapes and wrong dtypes
    for name in (
        "tok_dec.dec.2.res.0.conv2.weight",
        "tok_dec.pre_tfm.blk.1.attn_q.weight",
        "tok_dec.vq_first.0.codebook",
    ):
        gg = GGUF.read(F32)
        t = gg.tensor(name)
        t[1] = [t[1][0] + 1, *t[1][1:]]
        t[3] = bytes(4 * math.prod(t[1]))
        _case(
            cases,
            f"shape:{name}",
            gg.write(tmp / f"shape-{name}.gguf"),
            "InvalidModelError",
            re.escape(name) + ".*shape|shape",
        )
    for name in ("tok_dec.dec.1.conv_t.weight", "tok_dec.pre_tfm.blk.0.ffn_up.weight"):
        gg = GGUF.read(F32)
        gg.tensor(name)[2] = GGML_I32  # same byte count as F32
        _case(cases, f"dtype_i32:{name}", gg.write(tmp / f"i32-{name}.gguf"), "InvalidModelError", "type I32")
        gg = GGUF.read(F32)
        t = gg.tensor(name)
        t[2], t[3] = GGML_Q4_0, bytes(math.prod(t[1]) // 32 * 18)
        _case(cases, f"dtype_q4_0:{name}", gg.write(tmp / f"q4-{name}.gguf"), "InvalidModelError", "Q4_0")

    # hyperparameters in metadata that the graph could not honour
    for key, setter, value, match in (
        ("qwen3-tts-tokenizer.decoder.sliding_window", "set_u32", 0, "sliding_window"),
        ("qwen3-tts-tokenizer.decoder.rms_norm_eps", "set_f32", float("nan"), "rms_norm_eps"),
        ("qwen3-tts-tokenizer.decoder.rope_theta", "set_f32", -1.0, "rope_theta"),
        ("qwen3-tts-tokenizer.decoder.head_dim", "set_string", "sixteen", "metadata"),
        ("qwen3-tts-tokenizer.decoder.num_quantizers", "set_u32", 17, "num_quantizers"),
        ("qwen3-tts-tokenizer.output_sample_rate", "set_u32", 0, "sample_rate"),
    ):
        gg = getattr(GGUF.read(F32), setter)(key, value)
        _case(cases, f"meta:{key.split('.')[-1]}", gg.write(tmp / f"meta-{key}.gguf"), "InvalidModelError", match)

    # NaN weights load with a warning naming the tensor (and decode without a crash)
    for path, name in ((F32, "tok_dec.dec.2.res.1.conv1.weight"), (F16, None)):
        gg = GGUF.read(path)
        t = gg.tensors[5] if name is None else gg.tensor(name)
        if t[2] == 0:
            t[3] = struct.pack("<f", float("nan")) + t[3][4:]
        else:
            t[3] = np.array([np.inf], np.float16).tobytes() + t[3][2:]
        _case(cases, f"nan:{t[0]}", gg.write(tmp / f"nan-{t[0]}.gguf"), None, re.escape(t[0]) + ".*NaN/Inf", decode=2)

    # paths that are not files
    _case(cases, "directory", tmp, "InvalidModelError", "directory")
    _case(cases, "missing_path", tmp / "nope.gguf", "InvalidModelError", "no such file")
    _case(cases, "empty_file", raw("empty.gguf", b""), "InvalidModelError", "not a GGUF|truncated")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp / "fifo.gguf")
        _case(cases, "fifo", tmp / "fifo.gguf", "InvalidModelError", "not a regular file")

    # codes
    codes = [
        ("negative", {"shape": [16, 4], "set": [[[3, 2], -1]]}, r">= 0.*codebook 3, frame 2"),
        ("too_large", {"shape": [16, 4], "set": [[[5, 1], 64]]}, "codebook 5, frame 1 is out of range.*64 entries"),
        ("huge_int64", {"shape": [16, 4], "dtype": "int64", "set": [[[0, 0], 2**40]]}, "out of range"),
        ("float", {"shape": [16, 4], "dtype": "float32"}, "integer"),
        ("float_nan", {"shape": [16, 4], "dtype": "float32", "set": [[[0, 0], float("nan")]]}, "integer"),
        ("wrong_rows", {"shape": [15, 4]}, r"shape \[16, T\]"),
        ("transposed", {"shape": [4, 16]}, r"shape \[16, T\]"),
        ("one_dim", {"shape": [16]}, r"shape \[16, T\]"),
        ("empty", {"shape": [16, 0]}, "no frames"),
        ("string", "abc", "integer"),
        ("ragged", [[1, 2], [3]], "integer|shape"),
    ]
    for cid, spec, match in codes:
        _case(cases, f"codes:{cid}", F32, "InvalidInputError", match, decode=spec)
    # the semantic codebook has its own size: 32 entries here while the others keep 64
    gg = GGUF.read(F32)
    t = gg.tensor("tok_dec.vq_first.0.codebook")
    t[1], t[3] = [t[1][0], 32], t[3][: 32 * t[1][0] * 4]
    sem = gg.set_u32("qwen3-tts-tokenizer.decoder.semantic_codebook_size", 32).write(tmp / "sem32.gguf")
    _case(
        cases,
        "codes:semantic_over",
        sem,
        "InvalidInputError",
        "codebook 0, frame 0.*32 entries",
        decode={"shape": [16, 3], "set": [[[0, 0], 40]]},
    )
    _case(cases, "codes:semantic_ok_rest", sem, None, "", decode={"shape": [16, 3], "set": [[[1, 0], 40]]})

    # memory budget and options
    _case(
        cases,
        "budget:T",
        F32,
        "ResourceError",
        r"1000 frames needs an estimated .* MB.*budget of 20.0 MB.*chunk_size=\d+",
        decode=1000,
        decoder={"memory_budget": "20MB"},
    )
    _case(
        cases,
        "budget:chunked_fits",
        F32,
        None,
        "",
        decode=200,
        decoder={"memory_budget": "20MB"},
        decode_kw={"chunked": True, "chunk_size": 8},
    )
    _case(cases, "budget:default", F32, "ResourceError", r"1000000 frames.*over the memory budget", decode=10**6)
    _case(cases, "budget:bad", F32, "InvalidOptionError", "memory_budget", decoder={"memory_budget": "lots"})
    _case(cases, "opt:backend", F32, "InvalidOptionError", "unknown backend 'tpu9'", decoder={"backend": "tpu9"})
    _case(cases, "opt:rpc_addr", F32, "InvalidOptionError", "bad RPC address", decoder={"backend": "rpc://no port"})
    _case(cases, "opt:rpc_port", F32, "InvalidOptionError", "port", decoder={"backend": "rpc://127.0.0.1:70000"})
    _case(cases, "opt:threads0", F32, "InvalidOptionError", "threads", decoder={"threads": 0})
    _case(cases, "opt:threads_huge", F32, "InvalidOptionError", "threads", decoder={"threads": 10**6})
    _case(
        cases,
        "opt:chunk0",
        F32,
        "InvalidInputError",
        "chunk_size",
        decode=4,
        decode_kw={"chunked": True, "chunk_size": 0},
    )
    _case(
        cases,
        "opt:left_ctx",
        F32,
        "InvalidInputError",
        "left_context",
        decode=4,
        decode_kw={"chunked": True, "left_context": -1},
    )
    _case(cases, "opt:layout", F32, "LayoutError", "unknown layout", load={"layout": "nonesuch"})
    return cases


def _renamed(g: GGUF, arch: str) -> GGUF:
    """A different architecture whose tensor names no layout knows."""
    g.set_string("general.architecture", arch)
    for t in g.tensors:
        t[0] = "blk_" + t[0].replace(".", "_")
    return g


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corpus")
    cases = build_corpus(tmp)
    for c in cases:  # the driver only needs these; the rest stays here
        c["_expect"] = (c.pop("expect"), c.pop("match"), c.pop("role", None))
    spec = {c["id"]: c.pop("_expect") for c in cases}
    fixed = [{k: v for k, v in c.items()} for c in cases]
    # the decoder option cases need a decode to reach Decoder(): an option-only case still builds one
    for c in fixed:
        if "decoder" in c and "decode" not in c:
            c["decode"] = 2
            c["check_next"] = False
    return spec, run_cases(fixed, timeout=900, workdir=tmp)


def test_corpus_every_case_is_a_clean_error(corpus):
    spec, results = corpus
    print(f"\ncorpus: {len(spec)} cases")
    problems = []
    for cid, (expect, match, role) in spec.items():
        r = results.get(cid, {"status": "missing"})
        if r["status"] in ("crash", "hang", "missing"):
            problems.append(f"{cid}: {r}")
        elif expect is None:
            if r["status"] != "ok":
                problems.append(f"{cid}: expected success, got {r.get('etype')}: {r.get('msg')}")
            elif match and not any(re.search(match, w) for w in r["warnings"]):
                problems.append(f"{cid}: no warning matching {match!r}: {r['warnings']}")
        elif r["status"] != "error" or not r["kz"] or not re.fullmatch(expect, r["etype"]):
            problems.append(f"{cid}: expected {expect}, got {r}")
        elif not re.search(match, r["msg"]):
            problems.append(f"{cid}: message {r['msg']!r} does not match {match!r}")
        elif role and role not in r["msg"]:  # a missing tensor is named by its role
            problems.append(f"{cid}: message does not name the missing role {role!r}: {r['msg']!r}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(p[:400] for p in problems)
    assert len(spec) >= 250


def test_reading_never_modifies_files(tmp_path):
    """Loading opens files read-only: bytes and modification time stay as they were."""
    import shutil

    from kzlab.loader import load_model

    p = shutil.copy(F32, tmp_path / "ro.gguf")
    os.utime(p, (1_000_000_000, 1_000_000_000))
    before = (p.read_bytes(), os.stat(p).st_mtime_ns)
    os.chmod(p, 0o444)  # a write would also fail loudly (except as root, hence the comparison below)
    m = load_model(p)
    with kzlab.Decoder(m, threads=1) as d:
        d.decode(np.zeros((16, 2), np.int32))
    del m
    assert (p.read_bytes(), os.stat(p).st_mtime_ns) == before
    hf = shutil.copytree(TINY / "hf", tmp_path / "hf")
    files = sorted(hf.iterdir())
    for f in files:
        os.utime(f, (1_000_000_000, 1_000_000_000))
        os.chmod(f, 0o444)
    snap = [(f.read_bytes(), os.stat(f).st_mtime_ns) for f in files]
    load_model(hf)
    assert [(f.read_bytes(), os.stat(f).st_mtime_ns) for f in files] == snap


def test_budget_estimate_is_the_allocation():
    """The estimate that guards allocation is the size ggml's allocator then really allocates."""
    from kzlab.runtime.budget import estimate_compute_bytes, memory_budget, parse_budget

    with kzlab.load(F32, backend="cpu", threads=1) as d:  # the plain allocator (the scheduler splits it)
        for frames in (1, 7, 40):
            est = estimate_compute_bytes(d.session, frames)
            assert est == d.session.graph(frames).compute_bytes > 0
    assert parse_budget("1.5GB") == 1_500_000_000 and parse_budget("2GiB") == 2 << 30
    assert memory_budget("10MB") == 10**7 and 0 < memory_budget() < 2**50


def test_stage_outputs_are_kept_only_when_read():
    """A plain decode lets the allocator reuse every stage's memory; intermediates=True keeps them all."""
    from kzlab.runtime.budget import estimate_compute_bytes

    with kzlab.load(F32, backend="cpu", threads=1) as d:
        lean = estimate_compute_bytes(d.session, 40)
        keep = estimate_compute_bytes(d.session, 40, stages=True)
        assert lean < keep
        codes = np.zeros((d.hparams.num_quantizers, 40), dtype=np.int32)
        out = d.decode(codes, intermediates=True)
        # the same ops on one thread; only the memory layout of the two graphs differs
        plain = d.decode(codes)
        assert np.abs(out.wav - plain).max() <= 1e-6 * max(1e-3, float(np.abs(plain).max()))
        assert {"decoder.1", "pre_transformer"} <= set(out.stages)
        assert {k for k in d.session._graphs} == {("quantizer", 40, True), ("quantizer", 40, False)}
