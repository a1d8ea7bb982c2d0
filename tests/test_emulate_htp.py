"""The Hexagon kernels' arithmetic (kzlab.analysis.emulate.htp): the F16-read-as-F32 defects on hand-made
bytes, and every emulated path against float64 products within the bound its arithmetic implies.

Bounds, with u = 2^-24 (F32's unit roundoff) and gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability of
Numerical Algorithms, Thm 3.1: a dot product of n terms summed in any order, each product and sum rounded, is within
gamma_n sum|a||w| of the exact value):
- RNE to F16 of a finite x below 65504 moves it by at most 2^-11 |x| (normal range) or 2^-25 (half the subnormal
  spacing 2^-24); so |x16 - x| <= 2^-11 |x| + 2^-25 covers both.
- A product of two F16 values is exact in F32 (11 + 11 significant bits <= 24, exponents within F32's range), so
  a float32 sum of K of them is within gamma_K S16 of the exact sum, S16 = sum |a16||w16| (K - 1 additions).
- HMX then rounds that sum to F16: |out - s| <= 2^-11 |s| + 2^-25 with |s| <= |P16| + gamma_K S16.
- Against the operands before their F16 conversion: |a16 w16 - a w| <= |a16 - a||w16| + |a||w16 - w|, summed.
- The float64 references carry their own error, at most K 2^-53 sum|a||w|, added to every bound.
The tests hold on any x86 CPU and any BLAS thread count: where they compare exactly, every sum is of small
integers (exact in any order); elsewhere they compare within a bound that holds for any summation order.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from kzlab.analysis.emulate import htp as K
from kzlab.errors import BackendError, InvalidInputError

U = 2.0**-24
RELEASES = K.RELEASES
DEFECTIVE = ("v0.15.2", "v0.15.3", "v0.21.0")  # the releases whose HMX reads an F16 src1 as F32


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def f64_ref_err(k: int, s: np.ndarray) -> np.ndarray:
    """The float64 reference's own rounding: at most k 2^-53 sum|a||w|."""
    return k * 2.0**-53 * s


def q_operand(kind: str, q: np.ndarray, d: np.ndarray) -> K.Operand:
    """A contiguous [N, K] q8_0 / q4_0 operand from its quants (int, [N, K]) and its F16 scales ([N, K/32])."""
    n, k = q.shape
    nblk = k // 32
    dd = np.asarray(d, dtype="<f2").reshape(n, nblk, 1).view(np.uint8)
    if kind == "q8_0":
        qs = q.astype(np.int8).reshape(n, nblk, 32).view(np.uint8)
    else:  # q4_0: element j < 16 in the low nibble of byte j, element j + 16 in its high nibble
        u = (q.reshape(n, nblk, 32) + 8).astype(np.uint8)
        qs = (u[..., :16] | (u[..., 16:] << 4)).astype(np.uint8)
    raw = np.concatenate([dd, qs], axis=-1).reshape(-1)
    row = raw.size // n
    return K.Operand(raw=raw, type=kind, ne=(k, n, 1, 1), nb=(row // nblk, row, row * n, row * n))


def f16_bits(bits: np.ndarray, after: np.ndarray | None = None) -> K.Operand:
    """An [M, K] F16 operand holding these 16-bit patterns."""
    b = np.ascontiguousarray(bits, dtype="<u2")
    m, k = b.shape
    return K.Operand(raw=b.reshape(-1).view(np.uint8), type="f16", ne=(k, m, 1, 1), nb=(2, 2 * k, 2 * k * m, 2 * k * m),
                     after=np.zeros(0, np.uint8) if after is None else after)


def upper(x: float) -> int:
    """The upper 16 bits of a float32 whose lower 16 bits are zero: as an F16 pattern it is the 'hi' half."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    assert b & 0xFFFF == 0, x
    return b >> 16


# ---- (a) the defect, on hand-made bytes ----------------------------------------------------------------------------
def misread_rows(mem: bytes, starts: list[int], k: int) -> np.ndarray:
    """K little-endian float32 from each start, decoded with struct from the bytes themselves."""
    return np.array([struct.unpack(f"<{k}f", mem[s:s + 4 * k]) for s in starts], dtype=np.float64)


SMALL = [1.0, 2.0, -0.5, 3.0, 0.25, -4.0, 2.0**-30]   # exact in F16 but the last (-> 0)


def pairs(values: np.ndarray) -> np.ndarray:
    """F16 bits whose pairs (lo = 0, hi = upper(v)) read back as the float32 values v."""
    m, h = values.shape
    bits = np.zeros((m, 2 * h), np.uint16)
    bits[:, 1::2] = np.vectorize(upper, otypes=[np.uint16])(values)
    return bits


def defect_case(k: int, rng: np.random.Generator):
    """8 F16 rows; read row r (F16 rows r and r + 1) is: 0 finite; 1 +inf (65536.0, finite in F32, beyond F16);
    2 NaN (+inf and -inf); 3 -inf; 4 +inf (4096.0s: finite inputs, a sum beyond F16); 5, 6 NaN (a NaN input);
    7 finite, its second half from `after` (pairs of 1.0)."""
    v = np.array(SMALL)[rng.integers(0, len(SMALL), size=(8, k // 2))]
    v[2, 1] = 65536.0
    v[3, 3] = -np.inf
    v[4, :] = 4096.0
    v[6, 5] = np.nan
    after = np.tile(np.array([0, upper(1.0)], "<u2"), k).view(np.uint8)   # 2K bytes
    return pairs(v), after


def expected_hmx(bits, after, w16: np.ndarray, starts: list[int]) -> np.ndarray:
    k = bits.shape[1]
    mem = np.ascontiguousarray(bits, "<u2").tobytes() + after.tobytes()
    a = misread_rows(mem, starts, k)                                   # the float32 values HMX reads
    with np.errstate(invalid="ignore", over="ignore"):
        a16 = a.astype(np.float32).astype(np.float16).astype(np.float64)   # F32 -> F16, RNE: inf beyond 65504
        s = np.array([[np.sum(a16[i] * w16[j].astype(np.float64)) for j in range(w16.shape[0])]
                      for i in range(a16.shape[0])])
        return s.astype(np.float16).astype(np.float32)                 # the hf store, widened


@pytest.mark.parametrize("release", DEFECTIVE)
def test_hmx_reads_f16_src1_as_f32(release):
    """K = 64 (rows of 128 bytes: aligned, so every defective release reads the same): row r is F16 rows r and
    r + 1 reinterpreted, the last row runs into `after`; exact small-number sums, inf and NaN where IEEE puts them."""
    k, n = 64, 32
    rng = np.random.default_rng(1)
    bits, after = defect_case(k, rng)
    w16 = rng.integers(2, 4, size=(n, k)).astype(np.float16)          # positive: an inf stays an inf in a sum
    w16[1] = 0                                                         # 0 x inf = NaN
    out = K.matmul(K.Operand.from_array(w16, "f16"), f16_bits(bits, after), "hmx", release)[0, 0]
    np.testing.assert_array_equal(out, expected_hmx(bits, after, w16, [2 * k * r for r in range(8)]))
    assert np.isfinite(out[0]).all() and np.isfinite(out[7]).all()
    assert np.isposinf(out[1, 0]) and np.isnan(out[1, 1]) and np.isnan(out[2, 0]) and np.isneginf(out[3, 0])
    assert np.isposinf(out[4, 0]) and np.isnan(out[5, 0]) and np.isnan(out[6, 0])
    assert (out[0, 1] == 0) and (out[7, 1] == 0)
    assert K.defect_of("hmx", "f16", "f16", release) == K.DEFECT_HMX_F16_SRC1


def test_hmx_misread_alignment_v0152_vs_later():
    """K = 32: F16 rows of 64 bytes. v0.15.3+ DMA row r from byte 64 r; v0.15.2's aligned loads drop the low 7
    address bits, so rows 2j and 2j + 1 both read from byte 128 j."""
    k, m, n = 32, 5, 32
    rng = np.random.default_rng(2)
    bits = pairs(np.array(SMALL)[rng.integers(0, len(SMALL), size=(m, k // 2))])
    after = np.tile(np.array([0, upper(1.0)], "<u2"), k).view(np.uint8)
    w16 = rng.integers(-2, 3, size=(n, k)).astype(np.float16)
    src0, src1 = K.Operand.from_array(w16, "f16"), f16_bits(bits, after)
    late = K.matmul(src0, src1, "hmx", "v0.15.3")[0, 0]
    early = K.matmul(src0, src1, "hmx", "v0.15.2")[0, 0]
    np.testing.assert_array_equal(late, expected_hmx(bits, after, w16, [64 * r for r in range(m)]))
    np.testing.assert_array_equal(early, expected_hmx(bits, after, w16, [128 * (r // 2) for r in range(m)]))
    np.testing.assert_array_equal(early[1], early[0])
    assert (late[1] != late[0]).any()


def test_hmx_f16_src1_batched_fails_on_the_device():
    w = K.Operand.from_array(np.ones((2, 32, 32), np.float16), "f16")
    x = K.Operand.from_array(np.ones((2, 8, 32), np.float16), "f16")
    for release in DEFECTIVE:
        with pytest.raises(BackendError):
            K.matmul(w, x, "hmx", release)


def test_78c531d_never_puts_f16_src1_on_hmx_and_its_hmx_is_v0210s():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 96)).astype(np.float16)
    a = rng.standard_normal((40, 96)).astype(np.float32)
    with pytest.raises(InvalidInputError, match="78c531d"):
        K.matmul(K.Operand.from_array(w, "f16"), K.Operand.from_array(a.astype(np.float16), "f16"), "hmx", "78c531d")
    assert K.defect_of("hmx", "f16", "f16", "78c531d") is None
    assert K.defect_of("hmx", "q8_0", "f16", "78c531d") is None
    src0, src1 = K.Operand.from_array(w, "f16"), K.Operand.from_array(a, "f32")
    out = K.matmul(src0, src1, "hmx", "78c531d")
    np.testing.assert_array_equal(out, K.matmul(src0, src1, "hmx", "v0.21.0"))
    check_hmx_bound(out[0, 0], a, w.astype(np.float32), weights_f16=True)


def test_defect_table():
    for r in RELEASES:
        for path in K.PATHS:
            assert K.defect_of(path, "f16", "f32", r) is None
            assert K.defect_of(path, "f32", "f32", r) is None
            assert K.defect_of(path, "q8_0", "f32", r) is None
        assert K.defect_of("hvx", "f16", "f16", r) is None          # the F16 x F16 vector kernel is right
        assert K.defect_of("hvx", "Q8_0", "F16", r) == K.DEFECT_HVX_QUANT_F16_SRC1   # 78c531d included
        assert K.defect_of("hvx", "q4_0", "f16", r) == K.DEFECT_HVX_QUANT_F16_SRC1
    with pytest.raises(InvalidInputError):
        K.defect_of("npu", "f16", "f16", "v0.15.3")
    with pytest.raises(InvalidInputError):
        K.defect_of("hmx", "f16", "f16", "v0.16")


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("k", [64, 32])
def test_hvx_quantizer_reads_f16_src1_as_f32(release, k):
    """Quantized weights with an F16 src1 on HVX: the same result as the F32 operand holding the float32 values
    read from the 128-byte-aligned row starts (floor(64 r / 128) * 128 for K = 32)."""
    m, n = 5, 40
    rng = np.random.default_rng(4)
    vals = [1.0, 2.0, -0.5, 3.0, 0.25, -4.0, 0.75, -1.5]
    bits = np.zeros((m, k), np.uint16)
    bits[:, 1::2] = np.array([upper(v) for v in vals], np.uint16)[rng.integers(0, len(vals), size=(m, k // 2))]
    after = np.tile(np.array([0, upper(1.0)], "<u2"), k).view(np.uint8)
    q = rng.integers(-127, 128, size=(n, k))
    d = (rng.random((n, k // 32)) * 0.01 + 0.001).astype(np.float16)
    w = q_operand("q8_0", q, d)
    got = K.matmul(w, f16_bits(bits, after), "hvx", release)
    mem = bits.astype("<u2").tobytes() + after.tobytes()
    starts = [(2 * k * r) // 128 * 128 for r in range(m)]
    as_f32 = K.Operand.from_array(misread_rows(mem, starts, k).astype(np.float32), "f32")
    np.testing.assert_array_equal(got, K.matmul(w, as_f32, "hvx", release))
    with pytest.raises(InvalidInputError, match="past"):
        K.matmul(w, f16_bits(bits), "hvx", release)                   # no `after`: the last row cannot be read


# ---- conversions --------------------------------------------------------------------------------------------------
def test_f32_to_f16_is_ieee_round_to_nearest_even():
    rng = np.random.default_rng(5)
    special = np.array([65504.0, 65519.99, 65520.0, -65520.0, 2.0**-25, 3 * 2.0**-26, 2.0**-26, 1 + 2.0**-11,
                        1 + 3 * 2.0**-11, np.inf, -np.inf, np.nan], dtype=np.float32)
    x = np.concatenate([(rng.standard_normal(20000) * 10.0 ** rng.integers(-9, 6, 20000)).astype(np.float32),
                        special])
    h = K.f32_to_f16(x)
    assert h.dtype == np.float16
    xs = x.astype(np.float64)
    big = np.abs(xs) >= 65520.0                           # half an ulp above 65504: beyond it, inf
    assert np.isinf(h[big]).all() and (np.sign(h[big]) == np.sign(xs[big])).all()
    fin = np.isfinite(xs) & ~big
    assert np.isfinite(h[fin]).all()
    # nearest: no F16 neighbour of h is closer to x; ties go to an even significand
    with np.errstate(over="ignore"):
        nbs = (np.nextafter(h[fin], np.float16(np.inf)), np.nextafter(h[fin], np.float16(-np.inf)))
    for nb in nbs:
        dh = np.abs(h[fin].astype(np.float64) - xs[fin])
        dn = np.abs(nb.astype(np.float64) - xs[fin])
        assert (dh <= dn).all()
        tie = dh == dn
        assert (h[fin][tie].view(np.uint16) & 1 == 0).all()
    hs = h[-len(special):]
    assert hs[0] == 65504 and hs[1] == 65504 and np.isposinf(hs[2]) and np.isneginf(hs[3])
    assert hs[4] == 0 and hs[5] == np.float16(2.0**-24) and hs[6] == 0          # ties to even at the bottom
    assert hs[7] == 1 and hs[8] == np.float16(1 + 4 * 2.0**-11)                 # ties to even at 1
    assert np.isposinf(hs[9]) and np.isneginf(hs[10]) and np.isnan(hs[11])


def test_f16_recip_truncates_and_clamps():
    d = np.arange(0x0101, 0x7C00, 7, dtype=np.uint16).view(np.float16)
    r = K.f16_recip(d).astype(np.float64)
    exact = 1.0 / d.astype(np.float64)
    assert (r <= exact).all()                                              # toward zero
    assert (np.nextafter(r.astype(np.float16), np.float16(np.inf)).astype(np.float64) > exact).all()
    assert (K.f16_recip(np.array([0.0, 1e-6, 2.0**-24], np.float16)) == np.float16(65504)).all()
    assert K.f16_recip(np.array([-2.0], np.float16))[0] == np.float16(-0.5)


def test_quantizer_rounding_is_half_up_after_a_1_64_step():
    """One group of 128 whose amax is 127: d = F16(127 * 0x2008) = 1.0, dinv = 1, q = round of x in F16 with
    halves upward (not ggml-cpu's roundf), after a round-to-even step to a multiple of 1/64."""
    x = np.zeros(128, np.float32)
    x[0] = 127.0
    x[1:9] = [2.5, -2.5, 0.5, -0.5, 1.5, -1.5, 2 + 63 / 128, -(2 + 63 / 128)]
    q, d = K.quantize_q8_activations(x[None, :])
    assert d.shape == (1, 4) and (d == 1.0).all()
    assert q[0, :9].tolist() == [127, 3, -2, 1, 0, 2, -1, 3, -2]


@pytest.mark.parametrize("group", [32, 64, 128])
def test_quantizer_scales_and_quants(group):
    """One scale per `group` values, F16(amax(|F16(x)|) * F16(1/127)), repeated for each 32-block of the group; the
    quants from y = F16(F16(x) * dinv) by the 1/64 then half-up rounding."""
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((7, 320)) * rng.uniform(0.01, 30, size=(7, 1))).astype(np.float32)
    q, d = K.quantize_q8_activations(x, group)
    assert q.dtype == np.int8 and q.shape == x.shape and d.dtype == np.float16 and d.shape == (7, 10)
    x16 = x.astype(np.float16)
    for r in range(7):
        for b in range(10):
            g0 = (32 * b) // group * group
            amax = np.float32(np.abs(x16[r, g0:g0 + group]).max())
            dd = np.float16(amax * np.float32(np.float16(1 / 127)))
            assert d[r, b] == dd
            y = (x16[r, 32 * b:32 * b + 32].astype(np.float32) * np.float32(K.f16_recip(dd))).astype(np.float16)
            t = np.round(y.astype(np.float64) * 64) / 64
            np.testing.assert_array_equal(q[r, 32 * b:32 * b + 32], np.clip(np.floor(t + 0.5), -128, 127))


def test_decoders():
    q = np.arange(-16, 16).reshape(1, 32)
    d = np.array([[0.5]], np.float16)
    op = q_operand("q8_0", q, d)
    np.testing.assert_array_equal(K.read(op)[0, 0], (q * 0.5).astype(np.float32))
    q4 = np.array([list(range(-8, 8)) * 2])
    op4 = q_operand("q4_0", q4, np.array([[2.0]], np.float16))
    np.testing.assert_array_equal(K.read(op4)[0, 0], (q4 * 2.0).astype(np.float32))
    np.testing.assert_array_equal(K.decode_f16(np.array([0, 0x3C, 0, 0xC0], np.uint8)), [1.0, -2.0])
    with pytest.raises(InvalidInputError):
        K.Operand(raw=np.zeros(10, np.uint8), type="f32", ne=(4, 1, 1, 1), nb=(4, 16, 16, 16))
    with pytest.raises(InvalidInputError):
        K.Operand(raw=np.zeros(16, np.uint8), type="q2_k", ne=(4, 1, 1, 1), nb=(4, 16, 16, 16))


# ---- (b) every path against float64 -------------------------------------------------------------------------------
def conv_err(x: np.ndarray, xc: np.ndarray) -> np.ndarray:
    """|xc - x| <= 2^-11 |x| + 2^-25 for xc = RNE_f16(x); zero where no conversion happens (xc is x)."""
    return np.where(xc == x, 0.0, 2.0**-11 * np.abs(x) + 2.0**-25)


def check_hmx_bound(out: np.ndarray, a: np.ndarray, w: np.ndarray, weights_f16: bool, w16: np.ndarray | None = None):
    """out = HMX's [M, N] for activations a [M, K] (F32) and weights w [N, K] (their values before HMX's F16
    tiles; w16: the tiles' values when w is not F16 already)."""
    k = a.shape[1]
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    a16 = a.astype(np.float16).astype(np.float64)
    w16 = w64 if weights_f16 else (w.astype(np.float16) if w16 is None else w16).astype(np.float64)
    p16 = a16 @ w16.T
    s16 = np.abs(a16) @ np.abs(w16).T
    o = out.astype(np.float64)
    assert np.isfinite(o).all()
    # F32 sum of exact products, then RNE to F16
    b16 = 2.0**-11 * (np.abs(p16) + gamma(k) * s16) + gamma(k) * s16 + 2.0**-25 + f64_ref_err(k, s16)
    assert (np.abs(o - p16) <= b16).all(), np.max(np.abs(o - p16) / b16)
    # against the unconverted operands: |a16 w16 - a w| <= |a16 - a||w16| + |a||w16 - w|
    ea, ew = conv_err(a64, a16), conv_err(w64, w16)
    p = a64 @ w64.T
    b = b16 + ea @ np.abs(w16).T + np.abs(a64) @ ew.T + f64_ref_err(k, np.abs(a64) @ np.abs(w64).T)
    assert (np.abs(o - p) <= b).all(), np.max(np.abs(o - p) / b)
    # the hf store: every output is an F16 value, and the F16 rounding shows against the F32 operands
    np.testing.assert_array_equal(out.astype(np.float16).astype(np.float32), out)
    assert (np.abs(o - p) > gamma(k) * np.abs(a64) @ np.abs(w64).T).any()


@pytest.mark.parametrize("release", RELEASES)
def test_hmx_f16_weights(release):
    rng = np.random.default_rng(10)
    k, m, n = 96, 37, 64
    a = rng.standard_normal((m, k)).astype(np.float32)
    w = (rng.standard_normal((n, k)) * 0.3).astype(np.float16)
    out = K.matmul(K.Operand.from_array(w, "f16"), K.Operand.from_array(a, "f32"), "hmx", release)
    assert out.shape == (1, 1, m, n) and out.dtype == np.float32
    check_hmx_bound(out[0, 0], a, w.astype(np.float32), weights_f16=True)


@pytest.mark.parametrize("release", RELEASES)
def test_hmx_f32_weights(release):
    rng = np.random.default_rng(11)
    k, m, n = 64, 33, 32
    a = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    w = (rng.standard_normal((n, k)) * 0.2).astype(np.float32)
    out = K.matmul(K.Operand.from_array(w, "f32"), K.Operand.from_array(a, "f32"), "hmx", release)
    check_hmx_bound(out[0, 0], a, w, weights_f16=False)


@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
@pytest.mark.parametrize("release", RELEASES)
def test_hmx_quantized_weights(kind, release):
    """The tiles hold RNE_f16(q d): q d rounds for Q8_0 (up to 19 bits), and for Q4_0 when d has more than 7."""
    rng = np.random.default_rng(12)
    k, m, n = 256, 40, 32
    lo, hi = (-128, 128) if kind == "q8_0" else (-8, 8)
    q = rng.integers(lo, hi, size=(n, k))
    d = (rng.random((n, k // 32)) * 0.02 + 0.001).astype(np.float16)
    w = (q.reshape(n, -1, 32) * d.astype(np.float32)[..., None]).reshape(n, k).astype(np.float32)   # ggml-cpu
    a = rng.standard_normal((m, k)).astype(np.float32)
    out = K.matmul(q_operand(kind, q, d), K.Operand.from_array(a, "f32"), "hmx", release)
    check_hmx_bound(out[0, 0], a, w, weights_f16=False)
    if kind == "q8_0":
        assert (w.astype(np.float16).astype(np.float32) != w).any()   # the weights' own rounding is exercised


def test_hmx_quantized_k_rules():
    q, d = np.zeros((32, 64), int), np.ones((32, 2), np.float16)
    a = K.Operand.from_array(np.zeros((40, 64), np.float32), "f32")
    with pytest.raises(InvalidInputError, match="256"):
        K.matmul(q_operand("q8_0", q, d), a, "hmx", "v0.15.2")        # v0.15.2's x4x2 tiles: K % 256
    K.matmul(q_operand("q8_0", q, d), a, "hmx", "v0.15.3")
    with pytest.raises(InvalidInputError, match="N % 32"):
        K.matmul(K.Operand.from_array(np.zeros((45, 64), np.float16), "f16"), a, "hmx", "v0.21.0")
    with pytest.raises(InvalidInputError, match="2-D"):
        K.matmul(K.Operand.from_array(np.zeros((2, 32, 64), np.float32), "f32"),
                 K.Operand.from_array(np.zeros((2, 40, 64), np.float32), "f32"), "hmx", "v0.21.0")
    with pytest.raises(InvalidInputError, match="F16 src1"):
        K.matmul(K.Operand.from_array(np.zeros((32, 64), np.float32), "f32"),
                 K.Operand.from_array(np.zeros((40, 64), np.float16), "f16"), "hvx", "v0.21.0")


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("src1_type", ["f32", "f16"])
def test_hvx_f16_weights(release, src1_type):
    """F16 weights on HVX: src1 rounded to F16 (when F32), exact products, F32 sums: within gamma_K of the
    product of the F16 values, no output rounding."""
    rng = np.random.default_rng(13)
    k, m, n = 96, 37, 45
    a = rng.standard_normal((m, k)).astype(np.float32)
    if src1_type == "f16":
        a = a.astype(np.float16).astype(np.float32)
    w = (rng.standard_normal((n, k)) * 0.3).astype(np.float16)
    out = K.matmul(K.Operand.from_array(w, "f16"), K.Operand.from_array(a, src1_type), "hvx", release)[0, 0]
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    a16 = a.astype(np.float16).astype(np.float64)
    s16 = np.abs(a16) @ np.abs(w64).T
    b16 = gamma(k) * s16 + f64_ref_err(k, s16)
    o = out.astype(np.float64)
    assert (np.abs(o - a16 @ w64.T) <= b16).all()
    b = b16 + conv_err(a64, a16) @ np.abs(w64).T + f64_ref_err(k, np.abs(a64) @ np.abs(w64).T)
    assert (np.abs(o - a64 @ w64.T) <= b).all()
    if src1_type == "f32":   # the rounding of src1 shows beyond the F32 summation's share
        assert (np.abs(o - a64 @ w64.T) > b16).any()


@pytest.mark.parametrize("release", RELEASES)
def test_hvx_f32_weights(release):
    rng = np.random.default_rng(14)
    k, m, n = 160, 19, 33
    a = (rng.standard_normal((m, k)) * 5).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    out = K.matmul(K.Operand.from_array(w, "f32"), K.Operand.from_array(a, "f32"), "hvx", release)[0, 0]
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    s = np.abs(a64) @ np.abs(w64).T
    assert (np.abs(out - a64 @ w64.T) <= gamma(k) * s + f64_ref_err(k, s)).all()


@pytest.mark.parametrize("path", K.PATHS)
@pytest.mark.parametrize("release", RELEASES)
def test_broadcast_over_dim2(path, release):
    """src0 [2, N, K] over src1 [4, M, K]: dst[i12] = src1[i12] @ src0[i12 // 2].T (F16 weights: batched HMX)."""
    rng = np.random.default_rng(15)
    k, m, n = 64, 9, 32
    a = rng.standard_normal((4, m, k)).astype(np.float32)
    w = (rng.standard_normal((2, n, k)) * 0.5).astype(np.float16)
    out = K.matmul(K.Operand.from_array(w, "f16"), K.Operand.from_array(a, "f32"), path, release)
    assert out.shape == (1, 4, m, n)
    for i in range(4):
        o = out[0, i]
        if path == "hmx":
            check_hmx_bound(o, a[i], w[i // 2].astype(np.float32), weights_f16=True)
        else:
            a16 = a[i].astype(np.float16).astype(np.float64)
            w64 = w[i // 2].astype(np.float64)
            s16 = np.abs(a16) @ np.abs(w64).T
            assert (np.abs(o - a16 @ w64.T) <= gamma(k) * s16 + f64_ref_err(k, s16)).all()
        wrong = a[i].astype(np.float64) @ w[1 - i // 2].astype(np.float64).T
        assert np.abs(o - wrong).max() > 1.0                               # the other matrix would be far off


def quant_err_bound(x: np.ndarray, group: int) -> np.ndarray:
    """|q d - x| per element of HVX's dynamic quantization, derived in its steps (the group's d normal):
    |x16 - x| <= 2^-11 |x| + 2^-25; y = RNE_f16(x16 dinv): rel. 2^-11; the 1/64 step and the half-up rounding
    move y by <= 2^-7 + 1/2; dinv = (1 - delta) / d, 0 <= delta <= 2^-10 (11-bit truncation); no saturation since
    amax / d <= 127.008 (1 + 2^-11). Together: <= d (1/2 + 2^-7) + (2^-11 + 2^-11 + 2^-10) |x| (1 + 2^-11) + 2^-24,
    with d <= amax 0x2008 (1 + 2^-11)."""
    m, k = x.shape
    xa = np.abs(x.astype(np.float64))
    pad = -k % group
    g = np.concatenate([xa, np.zeros((m, pad))], axis=1).reshape(m, -1, group)
    d = g.max(axis=-1) * (1 + 2.0**-11) * float(np.float16(1 / 127)) * (1 + 2.0**-11)
    dk = np.repeat(d, group, axis=1)[:, :k]
    assert (dk >= 2.0**-14).all()
    return dk * (0.5 + 2.0**-7) + 2.0**-9 * xa * (1 + 2.0**-11) + 2.0**-24


@pytest.mark.parametrize("kind", ["q8_0", "q4_0"])
@pytest.mark.parametrize("release,group", [(r, 128) for r in RELEASES] + [("v0.21.0", 32), ("v0.15.2", 64)])
def test_hvx_quantized_weights(kind, release, group):
    """Against float64 of ggml's dequantized weights and the original F32 activations: sum |w| |q d - x| plus the
    F32 accumulation of K/32 rounded block terms (gamma_{K/32 + 1} of their magnitudes); and, exactly as a dot
    product, against the quantized activations the quantizer returns."""
    rng = np.random.default_rng(16)
    k, m, n = 160, 21, 40
    lo, hi = (-127, 128) if kind == "q8_0" else (-8, 8)
    q = rng.integers(lo, hi, size=(n, k))
    d = (rng.random((n, k // 32)) * 0.02 + 0.001).astype(np.float16)
    w = (q.reshape(n, -1, 32) * d.astype(np.float64)[..., None]).reshape(n, k)
    x = rng.standard_normal((m, k)).astype(np.float32)
    out = K.matmul(q_operand(kind, q, d), K.Operand.from_array(x, "f32"), "hvx", release, hvx_q8_group=group)[0, 0]
    o = out.astype(np.float64)
    e = quant_err_bound(x, group)
    nt = k // 32
    mag = (np.abs(x.astype(np.float64)) + e) @ np.abs(w).T
    b = e @ np.abs(w).T + gamma(nt + 1) * mag + f64_ref_err(k, mag)
    assert (np.abs(o - x.astype(np.float64) @ w.T) <= b).all()
    aq, da = K.quantize_q8_activations(x, group)
    v = (aq.reshape(m, -1, 32) * da.astype(np.float64)[..., None]).reshape(m, k)
    assert (np.abs(v - x) <= e).all()                                   # the quantizer alone, same bound
    sv = np.abs(v) @ np.abs(w).T
    assert (np.abs(o - v @ w.T) <= gamma(nt + 1) * sv + f64_ref_err(k, sv)).all()
    assert np.abs(o - x.astype(np.float64) @ w.T).max() > gamma(nt + 1) * mag.max()   # quantization shows


def test_hvx_quantizer_refuses_non_finite():
    q, d = np.zeros((32, 64), int), np.ones((32, 2), np.float16)
    x = np.zeros((3, 64), np.float32)
    x[1, 5] = 1e5
    with pytest.raises(InvalidInputError, match="non-finite"):
        K.matmul(q_operand("q8_0", q, d), K.Operand.from_array(x, "f32"), "hvx", "v0.21.0")
    with pytest.raises(InvalidInputError, match="groups"):
        K.matmul(q_operand("q8_0", q, d), K.Operand.from_array(np.zeros((3, 64), np.float32), "f32"), "hvx",
                 "v0.21.0", hvx_q8_group=64)


def test_hmx_quantized_n_is_padded_from_v0153():
    """From v0.15.3 the host pads a quantized weight's N to 32 (ggml-hexagon.cpp @ eced84c8 2394-2395): each real row
    is computed as without the padding; v0.15.2 decides on the DSP and needs N % 32."""
    rng = np.random.default_rng(5)
    k, m, n = 64, 40, 45
    q = rng.integers(-128, 128, size=(64, k))
    d = (rng.random((64, k // 32)) * 0.02 + 0.001).astype(np.float16)
    a = K.Operand.from_array(rng.standard_normal((m, k)).astype(np.float32), "f32")
    full = K.matmul(q_operand("q8_0", q, d), a, "hmx", "v0.15.3")           # N = 64: what the padded tile computes
    for release in ("v0.15.3", "v0.21.0", "78c531d"):
        part = K.matmul(q_operand("q8_0", q[:n], d[:n]), a, "hmx", release)
        np.testing.assert_array_equal(part, full[..., :n])
    q256, d256 = rng.integers(-128, 128, size=(n, 256)), np.ones((n, 8), np.float16)
    with pytest.raises(InvalidInputError, match="N = 45"):
        K.matmul(q_operand("q8_0", q256, d256), K.Operand.from_array(np.zeros((m, 256), np.float32)), "hmx",
                 "v0.15.2")


def test_f32_to_f16_of_any_shape_with_special_values():
    """The bit path (many overflows, F16 subnormals, values rounding to zero) on arrays of any shape and size."""
    rng = np.random.default_rng(6)
    for shape in [(4, 64), (3, 5, 7), (1 << 19,)]:
        x = rng.standard_normal(shape).astype(np.float32) * np.float32(1e-5)
        x.reshape(-1)[::3] = 1e6
        x.reshape(-1)[1::7] = -3e-8
        with np.errstate(over="ignore"):
            want = x.astype(np.float16)
        got = K.f32_to_f16(x)
        assert got.shape == x.shape
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_what_ggml_cpu_computes_alike():
    """ggml-cpu's own F16 product (src1 to F16, exact products, F32 sums) is HVX's with F16 weights, and HMX's but
    for its F16 store; the defect, F32 weights on HMX and quantized weights are not."""
    assert K.host_computes("hvx", "F16", "F32") == K.host_computes("hvx", "f16", "f16") == K.SAME
    assert K.host_computes("hvx", "f32", "f32") == K.SAME
    assert K.host_computes("hmx", "f16", "f32") == K.F16_RESULT
    for args in (("hmx", "f16", "f16"), ("hmx", "f32", "f32"), ("hvx", "q8_0", "f32"), ("hmx", "q4_0", "f32")):
        assert K.host_computes(*args) is None
    assert K.node_arithmetic("matmul", "hvx", "F16", "F32", "v0.15.2") == K.HOST_ARITHMETIC
    assert K.node_arithmetic("matmul", "hmx", "F16", "F32", "v0.15.3") == \
        K.node_arithmetic("matmul", "hmx", "F16", "F32", "v0.21.0") != \
        K.node_arithmetic("matmul", "hmx", "F16", "F32", "v0.15.2")
