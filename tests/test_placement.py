"""The scheduler-placement simulator: checked node for node against the real ggml_backend_sched (BLAS, RPC),
then used for the Hexagon what-if on the full-size graph (built only, never computed)."""

from __future__ import annotations

import itertools
import json

import pytest
from conftest import TINY, run_cli
from ggml import ggml as g

from kzlab.analysis.placement import capabilities
from kzlab.analysis.placement.rules import RULES
from kzlab.analysis.placement.simulate import simulate
from kzlab.graph.options import Lowering

TINY_F32 = TINY / "qwentts-tokenizer-f32.gguf"
LOWERINGS = [
    Lowering(conv=c, conv_src1=s, convt=t, snake=n, mm_chunk=k)
    for c, s, t, n, k in itertools.product(
        ["ktap", "ktap-acc", "im2col-f32", "im2col-f16"], ["data", "kernel"], ["col2im", "direct"], ["folded", "raw"],
        [0, 1024],
    )
]
HEX_REFUSING = ["hexagon-v0.15.2", "hexagon-v0.15.3", "hexagon-78c531d"]


@pytest.fixture(scope="module")
def tiny_model():
    from kzlab.loader import load_model

    return load_model(TINY_F32)


@pytest.fixture(scope="module")
def rpc_address():
    from kzlab.runtime.rpc import rpc_server

    with rpc_server(threads=1) as srv:
        yield srv.address


@pytest.fixture(scope="module")
def full_model(full_synth):
    from kzlab.loader import load_model

    return load_model(full_synth)


def conv_rows(p, stage_prefix: str = "dec."):
    """The decoder's conv1d layers (the 26 of the seed case: dec.0 .. dec.6, pre_conv excluded)."""
    return [v for v in p.convs if v.kind == "conv1d" and v.layer.startswith(stage_prefix)]


# ---- validation against the real scheduler ----------------------------------------------------------------------
def check_against_real(model, low: Lowering, spec: list[str]) -> None:
    """Every node's backend, the split count and each split's input copies equal the real scheduler's on a
    fresh graph split once; node backends and split count also through kzlab's Session path (reserve, then
    allocate the same graph again)."""
    from kzlab.analysis.placement.check import compare, session_assignment

    c = compare(model, low, spec, 3)
    assert c.mismatches == [] and c.n_equal == c.n_nodes > 0
    assert c.n_splits_sim == c.n_splits_real
    assert c.split_inputs_sim == c.split_inputs_real  # each split's copied inputs, from GGML_SCHED_DEBUG
    real, n_splits = session_assignment(model, low, spec, 3)
    assert real == c.simulated and n_splits == c.n_splits_sim


@pytest.mark.parametrize("low", LOWERINGS, ids=[lw.label().replace(" ", "|") for lw in LOWERINGS])
def test_matches_real_sched_blas(tiny_model, low):
    check_against_real(tiny_model, low, ["blas", "cpu"])


@pytest.mark.parametrize("low", LOWERINGS, ids=[lw.label().replace(" ", "|") for lw in LOWERINGS])
def test_matches_real_sched_rpc(tiny_model, rpc_address, low):
    check_against_real(tiny_model, low, [rpc_address, "cpu"])


def test_validation_is_not_trivial(tiny_model, rpc_address):
    """The compared placements really mix backends, so agreement says something. With BLAS the graph is cut
    into many splits; with every weight on RPC the whole graph is one RPC split, and only the input views
    stay on the CPU."""
    from kzlab.analysis.placement.check import compare

    low = Lowering(conv="im2col-f32", conv_src1="data")
    blas = compare(tiny_model, low, ["blas", "cpu"], 3)
    assert blas.n_splits_real > 1 and set(blas.real_counts) == {"blas", "cpu"}
    rpc = compare(tiny_model, low, [rpc_address, "cpu"], 3)
    assert rpc.n_splits_real == 1 and set(rpc.real_counts) == {rpc_address, "cpu"}
    assert {"pos", "mask"} <= set(rpc.split_inputs_real[0][1])  # CPU inputs copied into the RPC split


def test_what_if_path_matches_real_blas(tiny_model):
    """simulate() never allocates (weights only declared to be in a buffer type); for BLAS + CPU its answer
    must still be the real scheduler's."""
    from kzlab.analysis.placement.check import compare

    # the portable mode: simulate() places the device's graph, so the real session must build the same one (the
    # choices `auto` makes by backend given: a real BLAS + CPU session would take the CPU's, simulate() a device's)
    for low in (
        Lowering(mode="portable", conv="im2col-f32", conv_src1="data", convt="col2im", attn="mulmat"),
        Lowering(mode="portable", conv="ktap", conv_src1="kernel", convt="direct", mm_chunk=1024, attn="mulmat"),
    ):
        real = compare(tiny_model, low, ["blas", "cpu"], 3)
        p = simulate(
            tiny_model,
            frames=3,
            lowering=low,
            backends=[("BLAS", "blas", "CPU"), ("CPU", "cpu", "CPU")],
            weights_on="BLAS",
        )
        assert [n.backend.lower() for n in p.nodes] == real.simulated
        assert p.n_splits == real.n_splits_real > 1


# ---- rules and profiles ---------------------------------------------------------------------------------------
class NoBuffers:
    def buffer_kind(self, t):
        return None


def _mul_mat(rows: int, wtype=g.GGML_TYPE_F16):
    ctx = g.ggml_init(g.ggml_init_params(mem_size=16 * 1024 * 1024, mem_buffer=None, no_alloc=True))
    w = g.ggml_new_tensor_2d(ctx, wtype, 64, 48)
    x = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 64, rows)
    return ctx, g.ggml_mul_mat(ctx, w, x)


@pytest.mark.parametrize("rows,refused", [(1024, False), (1025, True), (31, False)])
def test_row_limit_rule(rows, refused):
    ctx, t = _mul_mat(rows)
    try:
        old = capabilities.load("hexagon-v0.15.2").refusal(t, NoBuffers())
        new = capabilities.load("hexagon-v0.15.3").refusal(t, NoBuffers())
        assert (old is not None) == refused
        if refused:
            assert old[0] == "hex_mul_mat_rowlimit" and f"{rows} > 1024" in old[1]
        assert new is None
    finally:
        g.ggml_free(ctx)


def test_f32_weights_in_0152_within_the_row_limit():
    """ggml 707321c4 ggml-hexagon.cpp lines 2706-2721: F32 x F32 is accepted, with the 1024-row limit."""
    v152 = capabilities.load("hexagon-v0.15.2")
    for rows, refused in ((8, False), (1025, True)):
        ctx, t = _mul_mat(rows, g.GGML_TYPE_F32)
        try:
            why = v152.refusal(t, NoBuffers())
            assert (why is not None) == refused
            assert capabilities.load("hexagon-v0.15.3").refusal(t, NoBuffers()) is None
        finally:
            g.ggml_free(ctx)
    ctx = g.ggml_init(g.ggml_init_params(mem_size=16 * 1024 * 1024, mem_buffer=None, no_alloc=True))
    try:
        w = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 64, 48)
        x = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F16, 64, 8)
        assert "F32 src0 needs F32 src1" in v152.refusal(g.ggml_mul_mat(ctx, w, x), NoBuffers())[1]
    finally:
        g.ggml_free(ctx)


def test_0152_refuses_src1_broadcast_and_has_gelu_quick():
    """707321c4 lines 2697 and 2714: `src1->ne[2] < src0->ne[2] || ...` refused for F16 and F32 weights. ggml_mul_mat
    itself asserts that src1's batch is a multiple of src0's, so the shape is forged after the node is built."""
    ctx = g.ggml_init(g.ggml_init_params(mem_size=16 * 1024 * 1024, mem_buffer=None, no_alloc=True))
    try:
        w = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_F16, 64, 48, 4)
        x = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_F32, 64, 8, 4)
        t = g.ggml_mul_mat(ctx, w, x)
        for name in ("hexagon-v0.15.2", "hexagon-v0.15.3", "hexagon-78c531d"):
            assert capabilities.load(name).refusal(t, NoBuffers()) is None, name
        x.contents.ne[2] = 1
        for name in ("hexagon-v0.15.2", "hexagon-v0.15.3", "hexagon-78c531d"):
            assert "broadcasting" in capabilities.load(name).refusal(t, NoBuffers())[1], name
        assert "GELU_QUICK" in capabilities.load("hexagon-v0.15.2").ops
    finally:
        g.ggml_free(ctx)


@pytest.mark.parametrize(
    "src1_type,k,refused",
    [
        # the DDR-streaming HVX kernel, per thread 16 src0 rows (F16) + 16 src1 rows, 8 threads, 8 MiB
        (g.GGML_TYPE_F32, 10912, False),  # 8 * (16*2K + 16*4K) = 8380416 B
        (g.GGML_TYPE_F32, 10944, True),  # 8404992 B
        (g.GGML_TYPE_F16, 16384, False),  # 8 * (16*2K + 16*2K) = 8388608 B, exactly the budget
        (g.GGML_TYPE_F16, 16416, True),
    ],
)
def test_vtcm_gate(src1_type, k, refused):
    """0.15.3 / 78c531d: K up to ~10.9k with F32 src1 and 16384 with F16 src1 when src1 does not fit VTCM."""
    ctx = g.ggml_init(g.ggml_init_params(mem_size=16 * 1024 * 1024, mem_buffer=None, no_alloc=True))
    try:
        w = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F16, k, 48)
        big = g.ggml_mul_mat(ctx, w, g.ggml_new_tensor_2d(ctx, src1_type, k, 512))  # src1 > 8 MiB: DDR kernel
        small = g.ggml_mul_mat(ctx, w, g.ggml_new_tensor_2d(ctx, src1_type, k, 4))  # all of src1 in VTCM
        for name in ("hexagon-v0.15.3", "hexagon-78c531d"):
            p = capabilities.load(name)
            why = p.refusal(big, NoBuffers())
            assert (why is not None) == refused, (name, why)
            if refused:
                assert "hvx-ddr VTCM need" in why[1] and "8388608" in why[1]
            assert p.refusal(small, NoBuffers()) is None
    finally:
        g.ggml_free(ctx)


def test_profiles_load():
    for name in capabilities.names():
        p = capabilities.load(name)
        for items in p.ops.values():
            for item in items:
                assert (item if isinstance(item, str) else item[0]) in RULES


# ---- the seed case: full size, 31 frames, weights on HTP --------------------------------------------------------
@pytest.mark.parametrize("conv", ["im2col-f16", "im2col-f32"])
def test_seed_row_limit(full_model, conv):
    p = simulate(full_model, "hexagon-v0.15.2", frames=31, conv=conv, conv_src1="data")
    rows = conv_rows(p)
    assert len(rows) == 26
    refused = [v for v in rows if v.verdict == "refused"]
    accepted = [v for v in rows if v.verdict == "accepted"]
    assert len(refused) == 19 and all(v.src1_rows >= 4960 and v.rule == "hex_mul_mat_rowlimit" for v in refused)
    assert {v.layer.split(".")[1] for v in refused} == {"2", "3", "4", "6"}
    assert len(accepted) == 7 and all(v.src1_rows <= 992 and v.backends == "HTP" for v in accepted)
    assert all(v.backends == "CPU" for v in refused)
    assert p.n_splits > 1 and p.copied_bytes > 0


def test_seed_chunked(full_model):
    base = simulate(full_model, "hexagon-v0.15.2", frames=31, conv="im2col-f16", conv_src1="data")
    p = simulate(full_model, "hexagon-v0.15.2", frames=31, conv="im2col-f16", conv_src1="data", mm_chunk=1024)
    rows = conv_rows(p)
    assert len(rows) == 26 and all(v.verdict == "accepted" for v in rows)
    assert all(v.src1_rows <= 1024 for v in rows) and any(v.mul_mats > 1 for v in rows)
    mm = [n for n in p.nodes if n.op == "MUL_MAT" and n.stage.startswith("decoder")]
    assert mm and all(n.backend == "HTP" for n in mm)
    assert sum(s.input_bytes for s in p.splits) == p.copied_bytes > 0
    assert (p.n_splits, p.copied_bytes) != (base.n_splits, base.copied_bytes)


def test_seed_0153_without_chunking(full_model):
    p = simulate(full_model, "hexagon-v0.15.3", frames=31, conv="im2col-f16", conv_src1="data")
    rows = conv_rows(p)
    assert len(rows) == 26 and all(v.verdict == "accepted" for v in rows)


def test_seed_kernel_order_differs(full_model):
    data = simulate(full_model, "hexagon-v0.15.2", frames=31, conv="im2col-f16", conv_src1="data")
    kern = simulate(full_model, "hexagon-v0.15.2", frames=31, conv="im2col-f16", conv_src1="kernel")
    vk = {v.layer: v for v in conv_rows(kern)}
    assert all(v.src1_rows == v.c_out for v in vk.values())
    d0 = vk["dec.0.conv"]
    assert d0.verdict == "refused" and "1536 > 1024" in d0.reason
    assert [v.verdict for v in conv_rows(data)] != [v.verdict for v in conv_rows(kern)]
    assert vk["dec.6.conv"].verdict == "accepted"  # c_out = 1


@pytest.mark.parametrize("profile", HEX_REFUSING)
@pytest.mark.parametrize("convt", ["col2im", "direct"])
def test_unsupported_ops_fall_back(full_model, profile, convt):
    p = simulate(full_model, profile, frames=31, conv="im2col-f16", conv_src1="data", convt=convt, mm_chunk=1024)
    odd = [n for n in p.nodes if n.op in ("IM2COL", "SIN", "CONV_TRANSPOSE_1D", "COL2IM_1D")]
    assert {n.op for n in odd} >= {"IM2COL", "SIN"}
    assert all(n.backend == "CPU" and "HTP" in n.refused for n in odd)
    copied = {name for s in p.splits for name in s.input_sources}
    im2col_outs = {n.name for n in p.nodes if n.op == "IM2COL"}
    assert copied & im2col_outs  # their outputs cross back to HTP as counted copies
    assert p.copied_bytes == sum(s.input_bytes for s in p.splits) > 0


def test_weights_on_cpu_keeps_everything_on_cpu(tiny_model):
    """Without offload_op, HTP never takes an op whose weights live in a CPU buffer."""
    p = simulate(tiny_model, "hexagon-v0.15.3", frames=3, weights_on="cpu")
    assert {n.backend for n in p.nodes} == {"CPU"} and p.n_splits == 1 and p.copied_bytes == 0


# ---- outputs --------------------------------------------------------------------------------------------------
def test_cli_json(tmp_path):
    out = tmp_path / "p.json"
    r = run_cli("simulate", str(TINY_F32), "--frames", "3", "--conv", "im2col-f16", "--json", str(out))
    assert "conv verdicts" in r.stdout and "splits:" in r.stdout
    d = json.loads(out.read_text())
    assert {"nodes", "splits", "copied_bytes"} <= set(d)
    assert set(d["nodes"][0]) >= {"name", "op", "layer", "backend", "reason"}
    assert d["copied_bytes"] == sum(s["input_bytes"] for s in d["splits"])


def test_api_and_figure(tiny_model):
    import kzlab
    from kzlab.plots import split_timeline as timeline

    p = kzlab.simulate(tiny_model, frames=3, lowering={"conv": "ktap"})
    assert isinstance(p, kzlab.Placement) and p.config["lowering"]["conv"] == "ktap"
    fig = timeline(p)
    assert len(fig.axes) == 2
    assert json.loads(json.dumps(p.to_dict()))["config"]["profile"] == "hexagon-v0.15.2"
