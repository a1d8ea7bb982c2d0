"""kzlab's fused residual-unit node: the tile kernel against a plain numpy unit, the option's resolution, and
decodes through ggml on the CPU backends with one and two threads."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import FRAMES, SAMPLES, TINY, snr_db

from kzlab.errors import BackendError, InvalidOptionError
from kzlab.graph import fused
from kzlab.graph.options import NAIVE, Lowering
from kzlab.runtime.rpc import rpc_server
from kzlab.runtime.session import Session


def reference_unit(x: np.ndarray, p: dict[str, np.ndarray], dilation: int) -> np.ndarray:
    """The residual unit written the obvious way: [T, C] in and out, float64, whole tensors."""
    x = x.astype(np.float64)

    def snake(h, a, inv_b):
        return h + inv_b * np.sin(h * a) ** 2

    W1, W2 = p["conv1.weight"].astype(np.float64), p["conv2.weight"].astype(np.float64)
    K = W1.shape[0]
    s = snake(x, p["act1.alpha"], p["act1.beta"])
    pad = (K - 1) * dilation
    sp = np.concatenate([np.zeros((pad, s.shape[1])), s])
    h = sum(sp[k * dilation : k * dilation + len(x)] @ W1[k] for k in range(K)) + p["conv1.bias"]
    h = snake(h, p["act2.alpha"], p["act2.beta"])
    return x + h @ W2 + p["conv2.bias"]


def unit_params(C: int, K: int, rng) -> dict[str, np.ndarray]:
    f = np.float32
    return {
        "act1.alpha": rng.uniform(0.5, 2, C).astype(f),
        "act1.beta": rng.uniform(0.5, 2, C).astype(f),
        "conv1.weight": (rng.standard_normal((K, C, C)) / np.sqrt(K * C)).astype(f),
        "conv1.bias": rng.standard_normal(C).astype(f) * 0.1,
        "act2.alpha": rng.uniform(0.5, 2, C).astype(f),
        "act2.beta": rng.uniform(0.5, 2, C).astype(f),
        "conv2.weight": (rng.standard_normal((C, C)) / np.sqrt(C)).astype(f),
        "conv2.bias": rng.standard_normal(C).astype(f) * 0.1,
    }


@pytest.mark.parametrize("dilation", [1, 3, 9])
@pytest.mark.parametrize("tile", [5, 64, 1000])
def test_unit_tiles_match_the_plain_unit(dilation, tile):
    """Tiles shorter than the receptive field, ranges that start mid-signal (a second thread's share), and a
    channels-first input (a strided view) all give the whole-tensor result."""
    rng = np.random.default_rng(dilation * 100 + tile)
    T, C, K = 157, 12, 7
    p = unit_params(C, K, rng)
    x = rng.standard_normal((T, C)).astype(np.float32)
    want = reference_unit(x, p, dilation)
    y = np.full((T, C), np.nan, np.float32)
    fused.unit_rows(x, y, p, dilation, 0, 70, tile)
    fused.unit_rows(x, y, p, dilation, 70, T, tile)
    # float32 sums of K x C (conv1) then C (conv2) terms against float64: each product term carries at most a
    # few roundings, so |error| <= n_terms x eps32 x (the size of the terms), with a factor 4 of room
    tol = 4 * (K * C + C) * np.finfo(np.float32).eps * float(np.abs(want).max())
    assert np.abs(y - want).max() < tol
    x_cf = np.ascontiguousarray(x.T)  # channels-first memory seen as [T, C]
    y2 = np.empty_like(y)
    fused.unit_rows(x_cf.T, y2, p, dilation, 0, T, tile)
    # the other memory order takes other BLAS kernels (another summation order): equal within the same bound
    assert np.abs(y2 - want).max() < tol


@pytest.mark.parametrize("m", [2, 3, 4])
def test_winograd_matrices_compute_the_correlation_exactly(m):
    """F(m, 7) from the Toom-Cook construction: m outputs of a 7-tap correlation from m + 6 products, exact up to
    float64 rounding; a transform needing more points than kzlab has is refused."""
    at, g, bt = fused.winograd.matrices(m)
    n = m + 6
    assert at.shape == (m, n) and g.shape == (n, 7) and bt.shape == (n, n)
    assert np.abs(bt).max(axis=1) == pytest.approx(np.ones(n))  # rows scaled to a largest entry of 1
    rng = np.random.default_rng(7)
    for _ in range(20):
        z, w = rng.standard_normal(n), rng.standard_normal(7)
        want = [z[r : r + 7] @ w for r in range(m)]
        assert at @ ((g @ w) * (bt @ z)) == pytest.approx(want, abs=1e-12 * np.abs(z).sum() * np.abs(w).sum())
    with pytest.raises(ValueError, match="finite points"):  # more points than kzlab has
        fused.winograd.transform_weights(np.zeros((7, 4, 4), np.float32), m + 4)


def winograd_growth(m: int) -> float:
    """How much larger than the direct sum's terms Winograd's F(m, 7) terms can be: the largest sum over taps and
    inputs of |A^T| |G| |B^T| for one output, over the direct sum's 7 terms (what a float32 error bound scales by)."""
    at, g, bt = fused.winograd.matrices(m)
    return float(np.einsum("mp,pk,pi->mki", np.abs(at), np.abs(g), np.abs(bt)).sum(axis=(1, 2)).max() / 7)


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("dilation", [1, 3, 9])
@pytest.mark.parametrize("tile", [5, 64, 1000])
def test_winograd_unit_tiles_match_the_plain_unit(m, dilation, tile):
    """The unit with its conv by Winograd's F(m, 7): tiles rounded to whole blocks of m x dilation frames, a padded
    last block, ranges that start mid-signal and a channels-first input, against the float64 unit."""
    rng = np.random.default_rng(dilation * 100 + tile + m)
    T, C, K = 157, 12, 7
    p = unit_params(C, K, rng)
    pw = {**p, "conv1.weight": fused.winograd.transform_weights(p["conv1.weight"], m)}
    x = rng.standard_normal((T, C)).astype(np.float32)
    want = reference_unit(x, p, dilation)
    # the direct form's bound (test_unit_tiles_match_the_plain_unit), its conv terms up to winograd_growth() larger,
    # with 2 (m + 6) more roundings a term (the input and output transforms)
    eps = np.finfo(np.float32).eps
    tol = 4 * (winograd_growth(m) * (K * C + 2 * (m + 6)) + C) * eps * float(np.abs(want).max())
    for split in (70, 71):  # a share starting on and off a block boundary
        y = np.full((T, C), np.nan, np.float32)
        fused.unit_rows(x, y, pw, dilation, 0, split, tile, winograd=True)
        fused.unit_rows(np.ascontiguousarray(x.T).T, y, pw, dilation, split, T, tile, winograd=True)
        assert np.abs(y - want).max() < tol


def test_unit_tile_rows_bounds():
    assert fused.unit_tile_rows(96) == fused.UNIT_TILE_BYTES // (4 * 96)
    assert fused.unit_tile_rows(1) == fused.UNIT_MAX_ROWS
    assert fused.unit_tile_rows(100000) == fused.UNIT_MIN_ROWS


def test_auto_fuses_only_what_the_other_options_leave_alone():
    assert Lowering().resolved(cpu_only=True).resunit == "fused"
    assert Lowering().resolved(cpu_only=False).resunit == "ops"
    for changed in (
        Lowering(conv="ktap"),
        Lowering(conv_src1="data"),
        Lowering(mm_chunk=64),
        Lowering(snake="folded"),
        Lowering(wtype="f16"),
        NAIVE,
    ):
        assert changed.resolved(cpu_only=True).resunit == "ops", changed
    assert Lowering().resolved(cpu_only=True).convt == "fused"
    assert Lowering().resolved(cpu_only=False).convt == "col2im"
    assert Lowering(mm_chunk=64).resolved(cpu_only=True).convt == "col2im"
    assert NAIVE.resolved(cpu_only=True).convt == "direct"
    with pytest.raises(InvalidOptionError, match="folded"):
        Lowering(convt="fused", snake="raw")
    # asked for explicitly, it overrides the conv and snake options inside the units
    assert Lowering(resunit="fused", conv="ktap").resolved(cpu_only=True).resunit == "fused"
    # the units' conv: Winograd's where they are fused, the ggml ops' own elsewhere; asked for without a fused
    # unit, refused
    assert Lowering().resolve(cpu_only=True).unitconv == "winograd"
    assert Lowering(unitconv="direct").resolve(cpu_only=True).unitconv == "direct"
    assert Lowering().resolve(cpu_only=False).unitconv == "direct"
    assert Lowering(conv="ktap").resolve(cpu_only=True).unitconv == "direct"
    assert "unitconv=winograd" in Lowering().resolve(cpu_only=True).label()
    with pytest.raises(InvalidOptionError, match="unitconv='winograd'.*resunit='ops'"):
        Lowering(unitconv="winograd", conv="ktap").resolve(cpu_only=True)
    with pytest.raises(InvalidOptionError, match="unitconv='winograd'"):
        Lowering(unitconv="winograd").resolve(cpu_only=False)
    assert Lowering(unitconv="winograd", resunit="fused", mode="fast").portable().resolve(False).unitconv == "direct"
    with pytest.raises(InvalidOptionError, match="unitconv"):
        Lowering(unitconv="fft")
    with pytest.raises(InvalidOptionError, match="resunit"):
        Lowering(resunit="yes")


@pytest.mark.parametrize("stride", [2, 3])
@pytest.mark.parametrize("tile", [1, 4, 100])
def test_snake_convt_tiles_match_the_plain_transposed_conv(stride, tile):
    """SnakeBeta then a causal ConvTranspose1d (kernel 2 x stride, output trimmed to T x stride), written as a
    scatter of every input frame's contribution, against the tiles (a second range starting mid-signal)."""
    rng = np.random.default_rng(stride * 10 + tile)
    T, c_in, c_out, k = 23, 6, 5, 2 * stride
    p = {
        "alpha": rng.uniform(0.5, 2, c_in).astype(np.float32),
        "beta": rng.uniform(0.5, 2, c_in).astype(np.float32),
        "weight": rng.standard_normal((c_in, k, c_out)).astype(np.float32),
        "bias": rng.standard_normal(c_out).astype(np.float32),
    }
    x = rng.standard_normal((T, c_in)).astype(np.float32)
    s = x.astype(np.float64) + p["beta"] * np.sin(x.astype(np.float64) * p["alpha"]) ** 2
    full = np.zeros(((T - 1) * stride + k, c_out))
    for t in range(T):
        full[t * stride : t * stride + k] += np.einsum("c,cko->ko", s[t], p["weight"])
    want = full[: T * stride] + p["bias"]
    y = np.full((T * stride, c_out), np.nan, np.float32)
    fused.convt_rows(x, y, p, stride, 0, 9, tile)
    fused.convt_rows(np.ascontiguousarray(x.T).T, y, p, stride, 9, T, tile)
    assert np.abs(y - want).max() < 1e-4
    # split by output channels instead (a large weight): each range of channels over every frame
    y = np.full((T * stride, c_out), np.nan, np.float32)
    fused.convt_channel_rows(x, y, p, stride, 0, 2, tile)
    fused.convt_channel_rows(np.ascontiguousarray(x.T).T, y, p, stride, 2, c_out, tile)
    assert np.abs(y - want).max() < 1e-4
    # split by output phases (a large weight, few frames): each range of phases, every channel, every frame
    y = np.full((T * stride, c_out), np.nan, np.float32)
    for j0, j1 in ((0, 1), (1, stride)):
        fused.convt_channel_rows(x, y, p, stride, 0, c_out, tile, phases=(j0, j1))
    assert np.abs(y - want).max() < 1e-4


@pytest.mark.parametrize("T,tile", [(4960, 341), (992, 256), (7, 256), (59520, 1365), (3, 1)])
@pytest.mark.parametrize("nth", [1, 2, 3, 16])
def test_threads_share_the_frames_evenly_in_tiles_of_at_most_tile(T, tile, nth):
    """Every frame once, each thread's count within one of the others', tiles never taller than asked."""
    got: list[tuple[int, int, int]] = []
    for ith in range(nth):
        fused.nodes._share(ith, nth, T, tile, lambda a, b, n: got.append((a, b, n)))
    assert [a for a, _, _ in got] == sorted(a for a, _, _ in got)
    assert got[0][0] == 0 and got[-1][1] == T
    assert all(got[i][1] == got[i + 1][0] for i in range(len(got) - 1))
    counts = [b - a for a, b, _ in got]
    assert max(counts) - min(counts) <= 1 and len(got) == min(nth, T)
    assert all(1 <= n <= tile and -(-(b - a) // n) == -(-(b - a) // tile) for a, b, n in got)


@pytest.mark.parametrize("backend", ["cpu", "blas", ["blas", "cpu"]], ids=["cpu", "blas", "sched-blas-cpu"])
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_units_decode_like_upstream(tiny, codes, ref, backend, threads):
    lowerings = [Lowering(), Lowering(resunit="fused", snake="raw", conv="ktap", convt="direct"),
                 Lowering(unitconv="direct")]
    wavs = []
    for low in lowerings:
        with Session(tiny, low, backend=backend, threads=threads) as s:
            assert s.lowering.resunit == "fused" and s.lowering.convt == ("fused" if low.convt == "auto" else "direct")
            assert s.lowering.unitconv == ("direct" if low.unitconv == "direct" else "winograd")
            wav = s.run(FRAMES, {"codes": codes})["wav"][0]
        assert snr_db(wav, ref["wav"][:SAMPLES]) >= 70, low.label()
        wavs.append(wav)
    # Winograd's conv against the direct one in the same graph: float32 rounding apart
    assert snr_db(wavs[0], wavs[2]) >= 90


@pytest.mark.parametrize("split", ["channels", "phases"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_channel_split_transposed_conv_decodes_like_the_frame_split(tiny, codes, ref, threads, split,
                                                                         monkeypatch):
    """The tiny file's block weights are small, so the channel split (taken above 32 MB) is forced here; so is the
    phase split (taken at few frames, where the thread count divides the stride)."""
    with Session(tiny, Lowering(), backend="cpu", threads=threads) as s:
        assert s.lowering.convt == "fused"
        frames_split = s.run(FRAMES, {"codes": codes})["wav"][0]
        monkeypatch.setattr(fused.nodes, "CONVT_SPLIT_CHANNELS_BYTES", 0)
        monkeypatch.setattr(fused.nodes, "CONVT_SPLIT_PHASES_FRAMES", 10**9 if split == "phases" else 0)
        calls = []

        def recorded(*a):
            calls.append((a[4:6], a[8] if len(a) > 8 else None))
            fused.convt_channel_rows(*a)

        monkeypatch.setattr(fused.nodes, "convt_channel_rows", recorded)
        channels_split = s.run(FRAMES, {"codes": codes})["wav"][0]
    assert calls and all(c0 < c1 for (c0, c1), _ in calls)
    strides = s.model.hparams.upsample_rates  # the blocks' transposed convs
    phased = [ph for _, ph in calls if ph is not None]
    if split == "phases":  # every block whose stride the threads divide, and only those
        assert len(phased) == threads * sum(r % threads == 0 for r in strides) > 0
        assert all(0 <= j0 < j1 <= max(strides) for j0, j1 in phased)
    else:
        assert not phased
    assert snr_db(channels_split, ref["wav"][:SAMPLES]) >= 70
    # the same products, summed in the same order: only sgemm's blocking of other row counts may differ
    assert snr_db(channels_split, frames_split) >= 100


def test_fused_units_refused_on_rpc_and_auto_uses_ops(tiny):
    with rpc_server(threads=1) as srv:
        with pytest.raises(InvalidOptionError, match="resunit='fused'"):
            Session(tiny, Lowering(resunit="fused"), backend=[srv.address, "cpu"], threads=1)
        with pytest.raises(InvalidOptionError, match="convt='fused'"):
            Session(tiny, Lowering(convt="fused"), backend=srv.address, threads=1)
        with Session(tiny, Lowering(), backend=srv.address, threads=1) as s:
            assert s.lowering.resunit == "ops"


def test_an_error_in_the_unit_kernel_is_raised_and_the_session_survives(tiny, codes, monkeypatch):
    def broken(*_a, **_k):
        raise ValueError("unit boom")

    with Session(tiny, Lowering(), backend="cpu", threads=2) as s:
        good = s.run(FRAMES, {"codes": codes})["wav"][0]
        monkeypatch.setattr(fused.nodes, "unit_rows", broken)  # the name the node's callback calls
        with pytest.raises(BackendError, match="unit boom"):
            s.run(FRAMES, {"codes": codes})
        monkeypatch.undo()
        assert np.array_equal(s.run(FRAMES, {"codes": codes})["wav"][0], good)


def test_numpy_blas_threads_of_the_caller_are_left_as_they_were(tiny, codes):
    """The kernels hold numpy's BLAS to one thread in ggml's threads only; the user's thread keeps its setting,
    whether the decode runs on the session's compute thread or a profile does."""
    libs = fused.threads._numpy_blas_libs()
    if not libs:
        pytest.skip("threadpoolctl does not see numpy's BLAS here")
    import kzlab

    before = [c.get_num_threads() for c in libs]
    with kzlab.load(TINY / "qwentts-tokenizer-f32.gguf", backend="cpu", threads=2) as d:
        d.decode(codes)
        kzlab.profile(d, codes=codes, repeat=1, warmup=0, peak=False)
    assert [c.get_num_threads() for c in libs] == before


@pytest.mark.parametrize("cl", [True, False])
@pytest.mark.parametrize("C, L, T", [(8, 3, 5), (96, 54, 12000)])  # one thread copies it; the threads share it
@pytest.mark.parametrize("threads", [1, 2])
def test_the_context_join_is_the_concat(cl, C, L, T, threads):
    """`fused.join_frames` (a streaming call's context in front of its frames) writes the bytes ggml's CONCAT writes,
    in either memory order, whether one thread copies it all or the threads share its rows."""
    import ctypes

    from ggml import ggml as g

    rng = np.random.default_rng(0)
    past = rng.standard_normal((L, C) if cl else (C, L)).astype(np.float32)  # numpy order: ne reversed
    x = rng.standard_normal((T, C) if cl else (C, T)).astype(np.float32)
    cpu = g.ggml_backend_dev_init(g.ggml_backend_dev_by_name(b"CPU"), None)
    g.ggml_backend_cpu_set_n_threads(cpu, threads)
    ctx = g.ggml_init(g.ggml_init_params(mem_size=16 * g.ggml_tensor_overhead() + g.ggml_graph_overhead(),
                                         mem_buffer=None, no_alloc=True))
    try:
        tp = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, past.shape[1], past.shape[0])
        tx = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F32, x.shape[1], x.shape[0])
        outs = [fused.join_frames(ctx, tp, tx, cl), g.ggml_concat(ctx, tp, tx, 1 if cl else 0)]
        gf = g.ggml_new_graph(ctx)
        for t in outs:
            g.ggml_build_forward_expand(gf, t)
        buf = g.ggml_backend_alloc_ctx_tensors(ctx, cpu)
        for t, a in ((tp, past), (tx, x)):
            g.ggml_backend_tensor_set(t, a.ctypes.data_as(ctypes.c_void_p), 0, a.nbytes)
        assert g.ggml_backend_graph_compute(cpu, gf) == g.GGML_STATUS_SUCCESS
        fused.raise_pending()
        got = []
        for t in outs:
            a = np.empty((int(t.contents.ne[1]), int(t.contents.ne[0])), np.float32)
            g.ggml_backend_tensor_get(t, a.ctypes.data_as(ctypes.c_void_p), 0, a.nbytes)
            got.append(a)
        assert np.array_equal(got[0], got[1])
        assert np.array_equal(got[0], np.concatenate([past, x], axis=0 if cl else 1))
        g.ggml_backend_buffer_free(buf)
    finally:
        g.ggml_free(ctx)
        g.ggml_backend_free(cpu)
