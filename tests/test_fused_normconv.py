"""The normalised conv (kzlab.graph.fused: WavTokenizer's posnet ResnetBlocks and first conv): Winograd's F(m, K)
for 3 and 7 taps, the GroupNorm statistics node and the conv node's arithmetic against float64, the fast graph
against the portable graph and PyTorch stage by stage, the records and the refusals.

Tolerances: a float32 sum of n terms against float64 is within n x eps32 x (the size of its terms); Winograd's
terms are up to `winograd_growth` larger than the direct sum's, with 2 n more roundings (the input and output
transforms), and a factor 4 of room, as tests/test_fused.py takes it for the residual unit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import stages_below

import kzlab
from kzlab.errors import InvalidOptionError
from kzlab.graph.fused import kernels, winograd
from kzlab.graph.options import Lowering

DATA = Path(__file__).parent / "data" / "wavtokenizer-tiny"
GGUF = DATA / "wavtokenizer-tiny-f32.gguf"
EPS32 = float(np.finfo(np.float32).eps)


@pytest.mark.parametrize(("m", "taps"), [(2, 3), (4, 3), (6, 3), (4, 7)])
def test_winograd_matrices_compute_a_k_tap_correlation_exactly(m, taps):
    at, g, bt = winograd.matrices(m, taps)
    n = m + taps - 1
    assert at.shape == (m, n) and g.shape == (n, taps) and bt.shape == (n, n)
    rng = np.random.default_rng(m * 10 + taps)
    for _ in range(20):
        z, w = rng.standard_normal(n), rng.standard_normal(taps)
        want = [z[r : r + taps] @ w for r in range(m)]
        assert at @ ((g @ w) * (bt @ z)) == pytest.approx(want, abs=1e-12 * np.abs(z).sum() * np.abs(w).sum())


def test_the_transforms_kzlab_uses_and_the_ones_it_refuses():
    assert winograd.outputs(3) == 6 and winograd.outputs(7) == 4
    assert winograd.transform_weights(np.zeros((3, 4, 5), np.float32)).shape == (8, 4, 5)
    with pytest.raises(ValueError, match="5 taps"):
        winograd.transform_weights(np.zeros((5, 4, 4), np.float32))
    with pytest.raises(ValueError, match="finite points"):
        winograd.matrices(8, 7)  # 13 finite points: more than kzlab has
    with pytest.raises(ValueError, match="K >= 2 taps"):
        winograd.transform_weights(np.zeros((4, 4), np.float32))


def test_the_families_name_the_transforms_matrices_as_winograd_builds_them():
    """The specs may not import kzlab.graph.fused: their matrix-count -> taps tables must agree with it."""
    from kzlab.arch import WINOGRAD_TAPS
    from kzlab.arch.wavtokenizer.spec import GN_AFFINE_NODE_SOURCES

    built = {winograd.outputs(k) + k - 1: k for k in winograd.OUTPUTS_BY_TAPS}
    assert WINOGRAD_TAPS == built
    assert WINOGRAD_TAPS[winograd.N] == winograd.TAPS  # the residual unit's F(4, 7)
    assert GN_AFFINE_NODE_SOURCES == 2


def winograd_growth(m: int, taps: int) -> float:
    at, g, bt = winograd.matrices(m, taps)
    return float(np.einsum("mp,pk,pi->mki", np.abs(at), np.abs(g), np.abs(bt)).sum(axis=(1, 2)).max() / taps)


def _reference(x, p, taps, residual=None):
    a = x.astype(np.float64)
    if "affine" in p:
        a = a * p["affine"][0] + p["affine"][1]
        a = a / (1.0 + np.exp(-a))
    h = (taps - 1) // 2
    ap = np.pad(a, ((h, h), (0, 0)))
    w = p["w"].astype(np.float64)
    y = sum(ap[j : j + len(x)] @ w[j] for j in range(taps)) + p["bias"]
    return y + residual if residual is not None else y


@pytest.mark.parametrize(("taps", "c_in", "c_out"), [(3, 16, 16), (7, 12, 20), (3, 8, 40)])
@pytest.mark.parametrize("norm", [False, True], ids=["plain", "norm-swish"])
@pytest.mark.parametrize("T", [1, 7, 101])
def test_normconv_phases_match_float64_whatever_the_tiles_and_thread_shares(taps, c_in, c_out, norm, T):
    """The two phases as the node's threads run them (each its groups' inputs, then each its output channels for
    every frame), with tiles of one group to all of them, against the direct conv in float64."""
    rng = np.random.default_rng(taps * 1000 + T + norm + c_out)
    x = rng.standard_normal((T, c_in)).astype(np.float32)
    w = (rng.standard_normal((taps, c_in, c_out)) / np.sqrt(taps * c_in)).astype(np.float32)
    p = {"w": w, "bias": (0.1 * rng.standard_normal(c_out)).astype(np.float32)}
    if norm:
        p["affine"] = np.stack([rng.uniform(0.5, 2.0, c_in), rng.standard_normal(c_in)]).astype(np.float32)
    res = rng.standard_normal((T, c_out)).astype(np.float32) if norm else None
    want = _reference(x, p, taps, res)
    m = winograd.outputs(taps)
    n = m + taps - 1
    G = -(-T // m)
    node_p = {"weight": winograd.transform_weights(w), "bias": p["bias"], **({"affine": p["affine"]} if norm else {})}
    # the conv's terms up to the growth larger, 2 n transform roundings, the swish's few roundings per input
    tol = 4 * (winograd_growth(m, taps) * (taps * c_in + 2 * n) + 8) * EPS32 * float(np.abs(want).max())
    for tile, groups, channels in ((256, [0, G], [0, c_out]), (1, [0, G], [0, c_out]),
                                   (2, [0, G // 3, G], [0, c_out // 3, c_out]), (3, [0, G, G], [0, 0, c_out])):
        for xv in (x, np.ascontiguousarray(x.T).T):  # channels-last and channels-first memory
            V = np.full((n, G, c_in), np.nan, np.float32)
            for a, b in zip(groups[:-1], groups[1:], strict=True):
                kernels.normconv_inputs(xv, V, node_p, taps, a, b, tile)
            assert np.all(np.isfinite(V))
            y = np.full((T, c_out), np.nan, np.float32)
            for a, b in zip(channels[:-1], channels[1:], strict=True):
                if a < b:
                    kernels.normconv_outputs(V, y, node_p, taps, a, b, tile, res)
            assert np.all(np.isfinite(y)) and np.abs(y - want).max() < tol, (tile, groups, channels)


@pytest.mark.parametrize("offset", [0.0, 30.0])
def test_group_norm_affine_matches_float64_per_thread_share(offset):
    """The statistics over every frame of whole groups, split between threads by groups, against float64; an offset
    30x the spread checks that the variance is taken of centred values (no E[x^2] - E[x]^2 cancellation)."""
    rng = np.random.default_rng(5)
    T, C, G, eps = 53, 24, 6, 1e-6
    x = (offset + rng.standard_normal((T, C)) * rng.uniform(0.5, 2, C)).astype(np.float32)
    wgt, bias = rng.standard_normal(C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    out = np.full((2, C), np.nan, np.float32)
    kernels.group_norm_affine(x, wgt, bias, G, eps, 0, 8, out)  # as two threads take whole groups
    kernels.group_norm_affine(np.ascontiguousarray(x.T).T, wgt, bias, G, eps, 8, C, out)
    xg = x.astype(np.float64).reshape(T, G, C // G)
    mean, var = xg.mean(axis=(0, 2)), xg.var(axis=(0, 2))
    want = ((xg - mean[None, :, None]) / np.sqrt(var[None, :, None] + eps)).reshape(T, C) * wgt + bias
    got = x.astype(np.float64) * out[0] + out[1]
    # |x| scale rounding (a few eps of |x| x |scale|), the shift's (a few eps of |mean| x |scale| + |bias|)
    tol = 16 * EPS32 * (np.abs(x).max() * np.abs(out[0]).max() + np.abs(bias).max())
    assert np.abs(got - want).max() < tol


@pytest.mark.parametrize("setup", [("cpu", False), ("blas", True)], ids=["cpu", "sched-blas+cpu"])
def test_fast_posnet_matches_pytorch_and_the_portable_graph_stage_by_stage(setup):
    """Every stage with the normalised conv (the ConvNeXt blocks left to ggml) within 70 dB of PyTorch and of the
    portable graph, at 2 threads and at 1."""
    backend, sched = setup
    if backend == "blas" and "blas" not in kzlab.available_backends():
        pytest.skip("this ggml build has no BLAS backend")
    ref = {k: v for k, v in np.load(DATA / "reference.npz").items() if k != "posnet"}  # "posnet": an alias
    with kzlab.load(GGUF, backend="cpu", sched=False, threads=2, mode="portable") as d:
        assert d.session.plan.normconv == "ops"
        out = d.decode(ref["codes"], intermediates=True)
        portable = {"codes": ref["codes"], **{k: v for k, v in out.stages.items() if k in ref}, "wav": out.wav}
    for threads in (2, 1):
        with kzlab.load(GGUF, backend=backend, sched=sched, threads=threads, normconv="fused", dwmlp="ops") as d:
            plan = d.session.plan
            assert plan.normconv == "fused" and plan.dwmlp == "ops" and d.mode == "fast"
            assert "normconv=fused" in plan.label()
            low = stages_below(d, ref, 70.0, must=("backbone.embed", "posnet.0", "posnet.4", "wav"))
            assert not low, f"{threads} threads: stages under 70 dB against PyTorch: {low}"
            apart = stages_below(d, portable, 70.0, must=("backbone.embed", "posnet.0", "posnet.4", "wav"))
            assert not apart, f"{threads} threads: stages under 70 dB against the portable graph: {apart}"


def test_the_nodes_are_labelled_counted_and_recorded_in_a_profile():
    frames = 20
    prof = kzlab.profile(GGUF, frames=frames, backend="cpu", sched=False, threads=1, repeat=1, warmup=0, peak=False,
                         normconv="fused", dwmlp="ops")
    hp = kzlab.load_model(GGUF).hparams
    custom = [n for n in prof.nodes if n["op"].startswith("CUSTOM")]
    labels = [n["fused"] for n in custom]
    resnets = hp.posnet_kinds.count("resnet")
    norms = len(hp.posnet_kinds) - resnets  # the attention block's norm and the last one
    assert labels.count("normalised conv") == 1 + 2 * resnets
    assert labels.count("group norm statistics") == 2 * resnets + norms
    first = next(n for n in custom if n["fused"] == "normalised conv")
    # the algorithmic count: the direct conv's products (k = 7 for the first conv)
    assert first["flops"] >= 2 * frames * hp.features * hp.dim * 7
    layers = {r["path"]: r for r in prof.layers}
    conv1 = layers["posnet.0.conv1"]
    assert conv1["extra"]["algorithm"] == "winograd F(6, 3)" and conv1["macs"] == hp.dim * hp.dim * 3 * frames
    assert conv1["extra"]["product_macs"] == hp.dim * hp.dim * 8 * -(-frames // 6)
    assert layers["posnet.0.norm1"]["extra"]["fused_into"] == "posnet.0.conv1"


def test_auto_fuses_the_posnet_on_the_cpu_only_with_the_options_it_replaces_left_alone():
    assert Lowering().resolve(cpu_only=True).normconv == "fused"
    assert Lowering().resolve(cpu_only=False).normconv == "ops"
    for changed in (Lowering(conv="ktap"), Lowering(conv_src1="data"), Lowering(mm_chunk=64),
                    Lowering(wtype="f16"), Lowering(mode="portable")):
        assert changed.resolve(cpu_only=True).normconv == "ops", changed
    # the graph a device port of a fast run runs: the posnet back to ggml ops
    assert Lowering(normconv="fused", mode="fast").portable().resolve(cpu_only=False).normconv == "ops"


def test_fused_normconv_is_refused_where_it_cannot_run():
    m = kzlab.load_model(GGUF)
    with pytest.raises(InvalidOptionError, match="normconv='fused'.*not a ggml op"):
        Lowering(normconv="fused").resolve(cpu_only=False, where="rpc://127.0.0.1:1")
    with pytest.raises(InvalidOptionError, match="mode='portable' builds ggml ops only"):
        Lowering(normconv="fused", mode="portable").resolve(cpu_only=True)
    with pytest.raises(InvalidOptionError, match="no GroupNorm"):
        kzlab.Decoder(kzlab.load_model("tiny"), Lowering(normconv="fused"), backend="cpu", sched=False)
    with pytest.raises(InvalidOptionError, match="expected one of auto, fused, ops"):
        Lowering(normconv="winograd")
    with pytest.raises(InvalidOptionError):  # the simulator places the portable graph: refused, never replaced
        kzlab.simulate(m, frames=8, lowering=Lowering(normconv="fused"), profile="hexagon-v0.15.3")
    with pytest.raises(ValueError, match="groups must divide"):
        from ggml import ggml as g

        from kzlab.graph.fused import group_norm_affine_node

        params = g.ggml_init_params(mem_size=1 << 20, mem_buffer=None, no_alloc=True)
        ctx = g.ggml_init(params)
        try:
            x = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 10, 4)
            v = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, 10, 2)
            group_norm_affine_node(ctx, x, True, v, 3, 1e-6)
        finally:
            g.ggml_free(ctx)


def test_relaid_weights_are_made_at_upload_and_not_held_twice():
    """A weight laid out anew (here Winograd's matrices, 8/3 of the conv's bytes) is made when it is uploaded and
    kzlab's copy dropped after; a view of the mapped file is kept as it is."""
    from kzlab.graph.prepared import prepare_weights

    m = kzlab.load_model(GGUF)
    prepared = prepare_weights(m, Lowering(normconv="fused").resolve(cpu_only=True))
    q = prepared["posnet.0.conv1.weight"]
    C = m.hparams.dim
    assert q.layout == "winograd" and q.make is not None and q.ne == (C, C, 8) and q.nbytes == 4 * 8 * C * C
    want = winograd.transform_weights(m["posnet.0.conv1.weight"].f32().transpose(2, 1, 0))
    assert np.array_equal(q.values().reshape(want.shape), want)
    with kzlab.load(GGUF, backend="cpu", sched=False, threads=1, normconv="fused") as d:
        wt = d.session.ensure_weights()
        p = wt.prepared["posnet.0.conv1.weight"]
        assert p.released and p.make is None and p.nbytes == q.nbytes
        with pytest.raises(RuntimeError, match="released after the upload"):
            p.values()
        kept = [p for p in wt.prepared.values() if p.zero_copy]
        assert kept and not any(p.released for p in kept)


def test_a_failing_thread_fails_the_decode_without_stranding_the_others(monkeypatch):
    """The normalised conv's threads meet between its two phases: one whose first phase raises still meets the
    others, nobody computes from the unwritten inputs, the decode raises what went wrong (not a hang, not a broken
    barrier), and the next decode runs whole."""
    from kzlab.errors import BackendError
    from kzlab.graph.fused import nodes

    dec = kzlab.load(GGUF, backend="cpu", sched=False, threads=2, normconv="fused")
    codes = np.zeros((1, 13), np.int32)
    good = dec.decode(codes)
    real = nodes.normconv_inputs

    def second_thread_fails(x, V, p, taps, g0, g1, tile):
        if g0 > 0:
            raise RuntimeError("input transform failed")
        real(x, V, p, taps, g0, g1, tile)

    monkeypatch.setattr(nodes, "normconv_inputs", second_thread_fails)
    with pytest.raises(BackendError, match="input transform failed"):
        dec.decode(codes)
    assert not nodes._meetings
    monkeypatch.setattr(nodes, "normconv_inputs", real)
    assert np.array_equal(dec.decode(codes), good)
    assert not nodes._meetings
