"""The engine an emulated decode sums its products with, and what a what-if shares between configurations.

The device's order of summation is not public, so no emulation reproduces it: an engine is held to the contract
`kzlab.analysis.emulate.htp.Products` states (exact F16 products, sums within gamma_K sum|a||w| of the exact one),
and the fast one (F16C rounding through ggml-cpu's converter, numpy's BLAS float32 sums) is tested against the
reference (float64 sums) within twice that. A decode's figures then move by what the order of sums moves them: the
tiny decoders' verdicts are pinned here, and their SNRs within the spread that order alone gives them.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ask_whatif

import kzlab
from kzlab.analysis.emulate import device
from kzlab.analysis.emulate import htp as K
from kzlab.analysis.emulate.device import BlasProducts, emulate, to_f16

U = 2.0**-24

pytestmark = pytest.mark.usefixtures("isolated_cache")


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


def test_this_ggml_cpu_meets_the_contract():
    ok, why = device.products_probe()
    assert ok, why
    assert isinstance(device.product_engine(), BlasProducts)


def test_f16c_rounding_is_numpys_cast_bit_for_bit():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, size=1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([bits, rng.standard_normal(4096).astype(np.float32) * np.float32(1e-6),
                        np.array([65519.0, 65520.0, 2.0**-25, -(2.0**-25), 2.0**-24 * 1.5, 0.0, -0.0], np.float32)])
    with np.errstate(over="ignore", invalid="ignore"):
        want = K.f32_to_f16(x)
    got = to_f16(x)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.parametrize("k", [32, 672, 2688])
def test_the_fast_engine_is_within_the_bound_of_the_reference(k):
    rng = np.random.default_rng(k)
    a = (rng.standard_normal((64, k)) * rng.uniform(0.01, 10, size=(64, 1))).astype(np.float32)
    w = (rng.standard_normal((48, k)) * 0.1).astype(np.float16)
    ref, fast = K.EXACT.f16(a, w), BlasProducts().f16(a, w)
    a16 = K.f32_to_f16(a).astype(np.float64)
    mag = np.abs(a16) @ np.abs(w.astype(np.float64)).T
    assert (np.abs(fast.astype(np.float64) - ref) <= 2 * gamma(k) * mag + 2 * U * np.abs(ref)).all()
    a32 = rng.standard_normal((16, k)).astype(np.float32)
    w32 = rng.standard_normal((8, k)).astype(np.float32)
    mag32 = np.abs(a32.astype(np.float64)) @ np.abs(w32.astype(np.float64)).T
    assert (np.abs(BlasProducts().f32(a32, w32) - K.EXACT.f32(a32, w32)) <= 2 * gamma(k + 1) * mag32).all()


def test_a_nan_row_gives_nan_without_a_product():
    a = np.ones((3, 64), np.float32)
    a[1, 5] = np.nan
    w = np.ones((4, 64), np.float16)
    for engine in (K.EXACT, BlasProducts()):
        out = engine.f16(a, w)
        assert np.isnan(out[1]).all() and (out[[0, 2]] == 64).all()


#: the tiny decoders' emulated figures with the reference engine (float64 sums for the products the emulator
#: computes; ggml-cpu's own for the rest), 8 frames, seed 1, one thread, measured on a 2-core AMD EPYC (AVX-512):
#: (built-in, profile, lowering) -> (correct, waveform SNR in dB)
PINNED = {
    ("tiny", "hexagon-v0.15.3", "im2col-f16"): (False, None),
    ("tiny", "hexagon-v0.15.3,hmx=0", "im2col-f16"): (True, 55.5),
    ("tiny", "hexagon-78c531d", "im2col-f16"): (True, 50.8),
    ("tiny", "hexagon-v0.21.0", ""): (True, 51.7),
    ("wavtokenizer-tiny", "hexagon-v0.15.3", ""): (True, 52.1),
}
#: how far a waveform SNR of these decoders may move with the order of F32 sums alone, which no emulation has (the
#: device's is not public) and which ggml-cpu's SIMD width sets on each CPU: measured 0.67 dB between float64 sums
#: and BLAS's float32 ones on the tiny WavTokenizer decoder on v0.15.3 (a 52 dB figure), 0.54 dB between float64
#: sums and ggml-cpu's on the tiny Qwen3-TTS decoder on v0.21.0 (53.2 -> 52.6 dB). The verdicts do not move.
ORDER_SPREAD_DB = 1.0


def _figures(name, profile, conv):
    kw = {"conv": conv, "conv_src1": "data"} if conv else {}
    return emulate(kzlab.resolve_model(name), profile, frames=8, seed=1, threads=1, **kw)


@pytest.mark.parametrize("case", list(PINNED), ids=lambda c: f"{c[0]}-{c[1]}-{c[2] or 'default'}")
def test_verdicts_and_snrs_pinned(case, monkeypatch):
    correct, snr = PINNED[case]
    fast = _figures(*case)
    monkeypatch.setattr(device, "product_engine", lambda: K.EXACT)
    ref = _figures(*case)
    assert ref.correct is correct and fast.correct is correct
    if snr is None:
        assert ref.first_stage_below is not None and fast.first_stage_below == ref.first_stage_below
    else:
        assert abs(ref.snr_db - snr) <= ORDER_SPREAD_DB and abs(fast.snr_db - ref.snr_db) <= ORDER_SPREAD_DB


def test_hmx_off_decodes_as_the_cpu_and_releases_that_compute_alike_share_a_decode(tmp_path):
    """v0.15.3 and v0.21.0 compute alike (`kernels.arithmetic_class`), and HVX's F16 products are the host's: the
    what-if decodes each distinct computation once, and says what it found for each configuration."""
    from kzlab.analysis.predict.correctness import emulation_key

    m = kzlab.resolve_model("tiny")
    low = {"conv": "im2col-f16", "conv_src1": "data"}
    p153 = kzlab.simulate(m, "hexagon-v0.15.3", frames=4, **low)
    p210 = kzlab.simulate(m, "hexagon-v0.21.0", frames=4, **low)
    p152 = kzlab.simulate(m, "hexagon-v0.15.2", frames=4, **low)
    off = kzlab.simulate(m, kzlab.analysis.placement.capabilities.load_changed("hexagon-v0.15.3", "hmx=0"), frames=4,
                         **low)
    cpu = kzlab.simulate(m, "cpu", frames=4, weights_on="cpu", **low)
    assert emulation_key(p153) == emulation_key(p210) != emulation_key(p152)
    assert emulation_key(off) == emulation_key(cpu)
    d = ask_whatif(m, ["v153=hexagon-v0.15.3", "v210=hexagon-v0.21.0", "off=hexagon-v0.15.3,hmx=0"],
                   remedies=False, lowering=low).to_dict()
    c = d["configs"]
    assert c["v153"]["accuracy"] == c["v210"]["accuracy"] and c["v153"]["correct"] is False
    assert c["off"]["accuracy"]["snr_db"] == c["cpu"]["accuracy"]["snr_db"] and c["off"]["correct"] is True
    # a wrong configuration's decode stops at its first stage below the bound, and says so
    assert c["v153"]["accuracy"]["stopped_at"] == c["v153"]["accuracy"]["first_stage_below"]
    assert "the decode stopped there" in c["v153"]["why"] or "defective path" in c["v153"]["why"]
    assert set(d["timings"]) == {"profiling", "placing", "emulation", "drawing"}


def test_a_device_whose_arithmetic_is_not_emulated_is_not_known():
    res = emulate(kzlab.resolve_model("tiny"), "cuda", frames=4, seed=1)
    assert res.correct is None and not res.arith_emulated
    assert "NOT EMULATED" in res.summary() and "RIGHT" not in res.summary()
    d = ask_whatif(kzlab.resolve_model("tiny"), ["gpu=cuda"], remedies=False).to_dict()
    assert d["configs"]["gpu"]["correct"] is None and "not emulated" in d["configs"]["gpu"]["why"]
    assert d["configs"]["cpu"]["correct"] is True
