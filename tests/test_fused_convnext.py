"""The fused ConvNeXt node (kzlab.graph.fused): its numpy arithmetic against float64, the node against the ggml ops
and the PyTorch reference stage by stage, and the refusals where it cannot run.

Tolerances: the vectorised erf (Abramowitz & Stegun 7.1.26) is within 1.5e-7 of erf, so the exact GELU it gives
is within 0.5 |u| 1.5e-7 plus a few float32 roundings of u (2^-24 each, relative): 1e-6 * max(1, |u|) bounds both.
The block's float32 sums over C and F terms carry about sqrt(F) * 2^-24 relative error per output; against float64
a relative RMS error of 1e-5 leaves two orders of magnitude for any BLAS and CPU.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import kzlab
from kzlab.audio import snr_db
from kzlab.errors import InvalidOptionError
from kzlab.graph.fused.kernels import dwmlp_rows, gelu_erf

DATA = Path(__file__).parent / "data" / "wavtokenizer-tiny"
GGUF = DATA / "wavtokenizer-tiny-f32.gguf"


def test_vectorised_exact_gelu_is_within_float32_of_the_erf_form():
    u = np.concatenate([np.linspace(-12, 12, 48001), [0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0]]).astype(np.float32)
    out, s, e = np.empty_like(u), np.empty_like(u), np.empty_like(u)
    gelu_erf(u, out, s, e)
    want = np.array([0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in u.astype(np.float64)])
    err = np.abs(out.astype(np.float64) - want)
    assert np.all(np.isfinite(out))
    assert np.all(err <= 1e-6 * np.maximum(1.0, np.abs(want))), float(err.max())


def _block(rng, C: int, F: int, K: int) -> dict[str, np.ndarray]:
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {"dw.weight": 0.3 * r(K, C), "dw.bias": 0.1 * r(C), "norm.weight": 1 + 0.1 * r(C), "norm.bias": 0.1 * r(C),
            "pw1.weight": r(F, C) / np.float32(math.sqrt(C)), "pw1.bias": 0.1 * r(F),
            "pw2.weight": r(C, F) / np.float32(math.sqrt(F)), "pw2.bias": 0.1 * r(C), "gamma": 0.5 * r(C)}


def _reference(x: np.ndarray, p: dict[str, np.ndarray], left: int, eps: float) -> np.ndarray:
    """The block in float64, term by term as PyTorch's ConvNeXtBlock writes it."""
    d = {k: v.astype(np.float64) for k, v in p.items()}
    K, T = d["dw.weight"].shape[0], x.shape[0]
    xp = np.pad(x.astype(np.float64), ((left, K - 1 - left), (0, 0)))
    h = sum(xp[j : j + T] * d["dw.weight"][j] for j in range(K)) + d["dw.bias"]
    h = (h - h.mean(1, keepdims=True)) / np.sqrt(h.var(1, keepdims=True) + eps) * d["norm.weight"] + d["norm.bias"]
    u = h @ d["pw1.weight"].T + d["pw1.bias"]
    gelu = 0.5 * u * (1.0 + np.vectorize(math.erf)(u / math.sqrt(2.0)))
    return x + d["gamma"] * (gelu @ d["pw2.weight"].T + d["pw2.bias"])


@pytest.mark.parametrize("left", [3, 6, 0], ids=["same", "causal", "anticausal"])
@pytest.mark.parametrize("T", [1, 5, 37])
def test_block_matches_float64_whatever_the_tiles_and_thread_ranges(left, T):
    rng = np.random.default_rng(T + 10 * left)
    C, F, K, eps = 16, 48, 7, 1e-6
    p = _block(rng, C, F, K)
    x = rng.standard_normal((T, C)).astype(np.float32)
    want = _reference(x, p, left, eps)
    scale = np.sqrt(np.mean((want - x) ** 2))
    for tile, cuts in ((512, [0, T]), (4, [0, T]), (3, [0, T // 3, T])):
        y = np.full_like(x, np.nan)
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):  # as ggml's threads split the frames
            dwmlp_rows(x, y, p, left, eps, a, b, tile)
        rel = np.sqrt(np.mean((y - want) ** 2)) / scale
        assert np.all(np.isfinite(y)) and rel < 1e-5, (tile, cuts, rel)


@pytest.fixture(scope="module")
def ref():
    return dict(np.load(DATA / "reference.npz"))


def _stages(dec, codes) -> dict[str, np.ndarray]:
    out = dec.decode(codes, intermediates=True)
    return {**out.stages, "wav": out.wav}


@pytest.mark.parametrize("setup", [("cpu", False), ("blas", True)], ids=["cpu", "sched-blas+cpu"])
def test_fast_mode_matches_pytorch_and_the_portable_graph_stage_by_stage(ref, setup):
    """Every stage of the fast graph within 70 dB of PyTorch (the F32 bound) and of the portable graph, at 2 threads
    and at 1 (one thread runs all tiles: another split of the frames)."""
    backend, sched = setup
    if backend == "blas" and "blas" not in kzlab.available_backends():
        pytest.skip("this ggml build has no BLAS backend")
    with kzlab.load(GGUF, backend="cpu", sched=False, threads=2, mode="portable") as d:
        portable = _stages(d, ref["codes"])
    for threads in (2, 1):
        with kzlab.load(GGUF, backend=backend, sched=sched, threads=threads, dwmlp="fused") as d:
            assert d.session.plan.dwmlp == "fused" and d.mode == "fast"
            fast = _stages(d, ref["codes"])
        names = [k for k in ref if k not in ("codes", "posnet")]
        low = {k: round(snr_db(fast[k], ref[k]), 1) for k in names if snr_db(fast[k], ref[k]) < 70.0}
        assert not low, f"fast, {threads} threads: stages under 70 dB against PyTorch: {low}"
        apart = {k: round(snr_db(fast[k], portable[k]), 1) for k in names if snr_db(fast[k], portable[k]) < 70.0}
        assert not apart, f"fast, {threads} threads: stages under 70 dB against the portable graph: {apart}"


def test_fused_nodes_are_labelled_and_counted_in_a_profile():
    frames = 20
    prof = kzlab.profile(GGUF, frames=frames, backend="cpu", sched=False, threads=1, repeat=1, warmup=0, peak=False,
                         dwmlp="fused", normconv="ops")
    fused = [n for n in prof.nodes if n["op"].startswith("CUSTOM")]
    hp = kzlab.load_model(GGUF).hparams
    assert len(fused) == hp.num_convnext and {n["fused"] for n in fused} == {"convnext"}
    products = 4 * frames * hp.dim * hp.intermediate_size
    assert all(n["flops"] > products for n in fused), [n["flops"] for n in fused]


def test_auto_fuses_the_convnext_blocks_only_where_ggmls_gelu_is_scalar(monkeypatch):
    """The node's gain is its vectorised GELU: `auto` takes it where ggml-cpu calls a scalar erff, and leaves the
    blocks to ggml's ops where this build's libm calls are vectorised (kzlab.environment.ggml_cpu_libm)."""
    from kzlab.environment import ggml_cpu_libm
    from kzlab.graph import options

    assert options._dwmlp_node_pays() == (ggml_cpu_libm() != "libmvec")
    for pays, want in ((True, "fused"), (False, "ops")):
        monkeypatch.setattr(options, "_dwmlp_node_pays", lambda pays=pays: pays)
        plan = kzlab.Lowering().resolve(cpu_only=True)
        assert plan.dwmlp == want
        assert kzlab.Lowering(dwmlp="fused").resolve(cpu_only=True).dwmlp == "fused"  # asked for: always
        with kzlab.load(GGUF, backend="cpu", sched=False, threads=1, normconv="ops") as d:
            assert d.session.plan.dwmlp == want and d.mode == ("fast" if pays else "portable")


def test_fused_dwmlp_is_refused_where_it_cannot_run():
    m = kzlab.load_model(GGUF)
    with pytest.raises(InvalidOptionError, match="not a ggml op"):
        kzlab.Lowering(dwmlp="fused").resolve(cpu_only=False, where="rpc://127.0.0.1:1")
    with pytest.raises(InvalidOptionError, match="no fused node"):
        kzlab.Decoder(kzlab.load_model("tiny"), kzlab.Lowering(dwmlp="fused"), backend="cpu", sched=False)
    with pytest.raises(InvalidOptionError, match="expected one of auto, fused, ops"):
        kzlab.Lowering(dwmlp="yes")
    # the simulator places the portable graph: a fast-mode request is refused there, never replaced
    with pytest.raises(InvalidOptionError):
        kzlab.simulate(m, frames=8, lowering=kzlab.Lowering(dwmlp="fused"), profile="hexagon-v0.15.3")


def test_the_family_counts_the_nodes_sources_as_the_node_has_them():
    from kzlab.arch.wavtokenizer.spec import DWMLP_NODE_SOURCES
    from kzlab.graph.fused import DWMLP_SOURCES

    assert DWMLP_NODE_SOURCES == len(DWMLP_SOURCES)
