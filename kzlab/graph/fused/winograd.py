"""Convs by Winograd's minimal filtering F(m, K): the residual unit's dilated 7-tap conv by F(4, 7) (10 products where
the direct form takes 28, for every group of four output frames), and the normalised conv's 3- and 7-tap convs by
F(6, 3) and F(4, 7). The text below takes F(4, 7); any F(m, K) reads the same with K for 7.

A causal conv of K = 7 taps with dilation d gives output frame t from the inputs at t, t - d, ..., t - 6d. Four
outputs d frames apart (t, t + d, t + 2d, t + 3d) read 10 inputs between them, z_0 ... z_9, d apart:
y_r = sum_k z_{r+k} w_k, r = 0..3. Winograd's F(m, 7) computes the m outputs as

    y = A^T [ (G w) * (B^T z) ]

with m + 6 products per channel pair instead of 7m (Lavin & Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016, eq. 5-8). Over C channels the products become m + 6 matrix products of [groups, C] x [C, C] where
the direct form has 7 over m times the rows: 10/28 of the conv's multiply-adds for m = 4. The input transform
B^T and the output transform A^T are products with (m + 6)-square and m x (m + 6) matrices over the tile (memory
passes in cache), and the weights' G w is done once, when the weights are prepared (`transform_weights`).

The matrices are those of the Toom-Cook construction on the points 0, 1, -1, 2, -2, 1/2, -1/2, 3/2, -3/2 and
infinity, built exactly in rationals (`matrices`): for a correlation, A^T = V_m^T, G = V_r and B^T = V_n^-T, V_k
the n x k Vandermonde matrix of the points (the point at infinity's row picking the leading coefficient). Each row
of B^T is scaled to a largest entry of 1 and the matching row of G by the inverse. Measured on the unit (one
core, tiles as the node takes them): F(4, 7) took 0.55-0.68 of the direct form's time, F(3, 7) 0.60-0.88,
F(2, 7) 0.73-1.06 (its products are smaller, the transforms a larger share); the conv's SNR against float64 on
random data (C = 256), 105 dB with these points (with +-3 instead of +-3/2: 101 dB; F(2, 7): 117 dB; the direct
float32 sum: 131 dB).
"""

from __future__ import annotations

from fractions import Fraction
from functools import cache

import numpy as np

#: taps of the convs computed this way by default (the BigVGAN residual unit's dilated conv)
TAPS = 7
#: the finite interpolation points, in the order they are taken: F(m, r) takes the first m + r - 2 of them and
#: the point at infinity (the classic choice: small integers first, then halves, whose powers stay small)
POINT_SEQUENCE = (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2),
                  Fraction(-1, 2), Fraction(3, 2), Fraction(-3, 2))
#: outputs per transform for each tap count kzlab computes this way, the fastest measured: F(4, 7) for the
#: residual unit (see above), F(6, 3) for WavTokenizer's 3-tap convs (one core, C = 768, 376 frames: 0.62 of the
#: direct form's time, F(4, 3) 0.67, F(2, 3) 0.77; float32 SNR against float64 116, 119 and 127 dB, the direct
#: sum 129 dB)
OUTPUTS_BY_TAPS = {7: 4, 3: 6}
#: outputs per transform of the residual unit's conv (F(4, 7))
OUTPUTS = OUTPUTS_BY_TAPS[TAPS]
#: inputs per transform of F(4, 7) (and products per transform)
N = TAPS + OUTPUTS - 1


def points(m: int, taps: int = TAPS) -> tuple[Fraction, ...]:
    """The finite points of F(m, taps): m + taps - 2 of POINT_SEQUENCE (with infinity, m + taps - 1)."""
    n = m + taps - 1
    if m < 1 or taps < 2 or n - 1 > len(POINT_SEQUENCE):
        raise ValueError(f"Winograd F({m}, {taps}) needs {n - 1} finite points; kzlab has {len(POINT_SEQUENCE)}")
    return POINT_SEQUENCE[: n - 1]


def outputs(taps: int) -> int:
    """Outputs per transform kzlab uses for a conv of `taps` taps (OUTPUTS_BY_TAPS)."""
    try:
        return OUTPUTS_BY_TAPS[taps]
    except KeyError:
        raise ValueError(f"no Winograd transform for convs of {taps} taps (kzlab has them for "
                         f"{', '.join(map(str, sorted(OUTPUTS_BY_TAPS)))})") from None


def _vandermonde(cols: int, points: tuple[Fraction, ...]) -> list[list[Fraction]]:
    rows = [[a**j for j in range(cols)] for a in points]
    rows.append([Fraction(0)] * (cols - 1) + [Fraction(1)])  # the point at infinity: the leading coefficient
    return rows


def _inverse(m: list[list[Fraction]]) -> list[list[Fraction]]:
    """The exact inverse of a square rational matrix (Gauss-Jordan)."""
    n = len(m)
    a = [row[:] + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(m)]
    for c in range(n):
        p = next(i for i in range(c, n) if a[i][c] != 0)
        a[c], a[p] = a[p], a[c]
        a[c] = [x / a[c][c] for x in a[c]]
        for i in range(n):
            if i != c and a[i][c] != 0:
                f = a[i][c]
                a[i] = [x - f * y for x, y in zip(a[i], a[c], strict=True)]
    return [row[n:] for row in a]


@cache
def matrices(m: int = OUTPUTS, taps: int = TAPS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T [m, n], G [n, taps], B^T [n, n]) of F(m, taps), n = m + taps - 1, in float64, B^T's rows scaled to a
    largest |entry| of 1 and G's rows by the inverse (the product G w * B^T z is unchanged)."""
    pts, n = points(m, taps), m + taps - 1
    vn_inv = _inverse(_vandermonde(n, pts))
    vm, vr = _vandermonde(m, pts), _vandermonde(taps, pts)
    at = np.array([[float(vm[i][j]) for i in range(n)] for j in range(m)])
    g = np.array([[float(x) for x in row] for row in vr])
    bt = np.array([[float(vn_inv[j][i]) for j in range(n)] for i in range(n)])
    scale = np.abs(bt).max(axis=1)
    return at, g * scale[:, None], bt / scale[:, None]


def transform_weights(w: np.ndarray, m: int | None = None) -> np.ndarray:
    """The conv's weight as numpy [K, C_in, C_out] -> the m + K - 1 transformed matrices G w,
    [m + K - 1, C_in, C_out] F32, computed in float64; m defaults to `outputs(K)`."""
    if w.ndim != 3 or w.shape[0] < 2:
        raise ValueError(f"Winograd F(m, K) takes a weight of K >= 2 taps, [K, C_in, C_out]; got {w.shape}")
    taps, c_in, c_out = w.shape
    _, g, _ = matrices(outputs(taps) if m is None else m, taps)
    out = np.empty((g.shape[0], c_in, c_out), np.float32)
    step = max(1, (1 << 18) // max(c_in, 1))  # output channels at a time: the float64 copies stay a few MB
    for c0 in range(0, c_out, step):
        blk = w[:, :, c0 : c0 + step].astype(np.float64)
        out[:, :, c0 : c0 + step] = np.tensordot(g, blk, axes=(1, 0))
    return out


def record(c_in: int, c_out: int, frames: int, taps: int = TAPS, m: int | None = None) -> dict[str, object]:
    """What a conv's layer record says of a conv computed this way: the algorithm, and the multiply-adds its products
    do (m + K - 1 products [frames / m, C_in] x [C_in, C_out]), beside the direct conv's own MACs the record keeps,
    so that an effective GF/s above the machine's peak reads as what it is."""
    m = outputs(taps) if m is None else m
    return {"algorithm": f"winograd F({m}, {taps})", "product_macs": c_in * c_out * (m + taps - 1) * -(-frames // m)}


def extra_rows(dilation: int, m: int = OUTPUTS, taps: int = TAPS) -> int:
    """Rows an input buffer needs past the outputs' frames and their (taps - 1) d-frame halo: the inputs are read
    as whole blocks of m x dilation frames (0 where taps - 1 is a multiple of m)."""
    return (-(-(taps - 1) // m) * m - (taps - 1)) * dilation


class Workspace:
    """The buffers of one thread's tiles (at most `groups` groups of m output frames, C channels in and out):
    allocated once per node call, reused by every tile."""

    def __init__(self, groups: int, C: int, m: int = OUTPUTS, taps: int = TAPS):
        n = m + taps - 1
        self.m, self.taps = m, taps
        self.z = np.empty((n, groups * C), np.float32)  # the n inputs of every group, then their products
        self.zt = np.empty((n, groups * C), np.float32)  # B^T z, then the m outputs
        at, _, bt = matrices(m, taps)
        self.at, self.bt = at.astype(np.float32), bt.astype(np.float32)


def conv_groups(S: np.ndarray, Wt: np.ndarray, h: np.ndarray, dilation: int, ws: Workspace) -> None:
    """h[u] = sum_k S[u + k d] . W[k] for the h.shape[0] output frames, a whole number of blocks of m d frames
    (each block groups frames j, j + d, ..., j + (m-1) d), `Wt` the transformed weight (`transform_weights`,
    [n, C_in, C_out]). S ([rows, C_in]) starts at the first input the first output reads (it holds the
    (taps - 1) d inputs before the outputs' own), and has `extra_rows` rows more, which only complete the last
    block (never read)."""
    d, m = dilation, ws.m
    n_in = m + ws.taps - 1
    rows, c_out = h.shape
    c_in = S.shape[1]
    q = rows // (m * d)
    blocks = q + (n_in - 1) // m  # the blocks the inputs of q blocks of outputs span
    if q * m * d != rows or S.shape[0] < blocks * m * d:
        raise ValueError(f"conv_groups: {rows} frames is not whole blocks of {m * d}, or S has too few rows")
    groups = q * d
    z, zt = ws.z[:, : groups * c_in], ws.zt[:, : groups * c_in]
    s4 = S[: blocks * m * d].reshape(blocks, m, d, c_in)  # s4[b, r, j] = S[m d b + r d + j]
    for i in range(n_in):  # z_i of group (block b, offset j) = S[m d b + j + i d]
        z[i].reshape(q, d, c_in)[...] = s4[i // m : i // m + q, i % m]
    np.matmul(ws.bt, z, out=zt)  # B^T z for every group and channel
    prods = ws.z[:, : groups * c_out]
    # n products [groups, C_in] x [C_in, C_out]
    np.matmul(zt.reshape(n_in, groups, c_in), Wt, out=prods.reshape(n_in, groups, c_out))
    y = ws.zt[:m, : groups * c_out]
    np.matmul(ws.at, prods, out=y)  # A^T: the m outputs of every group
    h4 = h.reshape(q, m, d, c_out)
    for r in range(m):
        h4[:, r] = y[r].reshape(q, d, c_out)
