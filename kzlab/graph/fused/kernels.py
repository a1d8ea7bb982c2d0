"""The fused nodes' arithmetic in plain numpy, on [frames, channels] arrays: no ggml, no threads.

Kept apart from the ggml glue (`nodes.py`) so that each kernel can be checked against float64 numpy on its
own, and reused wherever the same tile arithmetic is needed. See `kzlab.graph.fused` for why these exist.
"""

from __future__ import annotations

import numpy as np

from kzlab.graph.fused import winograd as wg

#: elements per block: small enough to stay in L2 across the five steps
BLOCK = 1 << 15


def snake_block(x: np.ndarray, y: np.ndarray, a: np.ndarray, inv_b: np.ndarray, bias: np.ndarray | None) -> None:
    """y = h + inv_b * sin(a * h)^2 with h = x (+ bias); a, inv_b, bias broadcast against x (numpy rules).

    `y` may be a transposed view of the output (the fused node also changes the memory order)."""
    h = x + bias if bias is not None else x
    tmp = np.multiply(h, a)
    np.sin(tmp, out=tmp)
    np.square(tmp, out=tmp)
    tmp *= inv_b
    np.add(tmp, h, out=y)


#: bytes of one tile's activation rows (frames x channels x 4): a tile, its snake and its products stay in L2
UNIT_TILE_BYTES = 1 << 19
UNIT_MIN_ROWS, UNIT_MAX_ROWS = 256, 4096


def tile_rows(budget_bytes: int, row_values: int, lo: int, hi: int | None = None) -> int:
    """Rows per tile of a fused kernel: as many F32 rows of `row_values` values as `budget_bytes` holds, within
    [lo, hi] (no upper bound when `hi` is None)."""
    n = max(lo, budget_bytes // (4 * row_values))
    return int(n if hi is None else min(hi, n))


def unit_tile_rows(C: int) -> int:
    """Frames per tile of the fused residual unit for C channels, its conv direct or by Winograd's F(4, 7) (for
    which the same tiles measured fastest: twice as tall, 0.95-1.45x their time)."""
    return tile_rows(UNIT_TILE_BYTES, C, UNIT_MIN_ROWS, UNIT_MAX_ROWS)


def snake_rows(
    x: np.ndarray, y: np.ndarray, a: np.ndarray, inv_b: np.ndarray, tmp: np.ndarray, bias: np.ndarray | None = None
) -> None:
    """SnakeBeta on [rows, C] blocks without allocating: y = h + inv_b * sin(a * h)^2, h = x (+ bias).

    `y` may be `x` (in place); `tmp` is scratch of the same shape."""
    h = x
    if bias is not None:
        np.add(x, bias, out=y)
        h = y
    np.multiply(h, a, out=tmp)
    np.sin(tmp, out=tmp)
    np.square(tmp, out=tmp)
    tmp *= inv_b
    np.add(h, tmp, out=y)


def unit_rows(
    x: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray], dilation: int, t0: int, t1: int, tile: int,
    winograd: bool = False, lead: int = 0,
) -> None:
    """Output frames [t0, t1) of one residual unit, a tile at a time; x and y are [T, C] (any strides). `lead`: x
    starts with that many frames of context (a stream's past) that have no output row: input frame t is y's
    frame t - lead.

    y = x + conv2(snake2(conv1(snake1(x)) + b1)) + b2, conv1 causal with kernel K and `dilation`: output frame t
    reads snake1(x) at t - (K-1)*dilation ... t, zeros before frame 0 (the conv's left padding). With `winograd`,
    conv1.weight holds the m + 6 transformed matrices of Winograd's F(m, 7) (`winograd.transform_weights`) and
    the conv takes m + 6 products per group of m output frames instead of 7m (`winograd.conv_groups`); the tiles
    are then whole blocks of m x dilation frames, the last one padded."""
    W1, W2 = p["conv1.weight"], p["conv2.weight"]  # [K, C, C] (or [m + 6, C, C]) and [C, C], numpy order: h @ W
    C = W1.shape[1]
    K = wg.TAPS if winograd else W1.shape[0]
    halo = (K - 1) * dilation
    extra = 0
    if winograd:
        m = W1.shape[0] - (wg.TAPS - 1)  # outputs a transform: F(m, 7) has m + 6 matrices
        block = m * dilation
        tile = max(block, tile - tile % block)
        ws = wg.Workspace(tile // m, C, m)
        extra = wg.extra_rows(dilation, m)
    S = np.empty((tile + halo + extra, C), np.float32)  # snake1 of the tile and the frames its outputs read
    S_tmp = np.empty_like(S)
    H = np.empty((tile, C), np.float32)
    tmp = np.empty((tile, C), np.float32)
    for s in range(t0, t1, tile):
        n = min(tile, t1 - s)
        lo = s - halo
        if lo < 0:
            S[:-lo] = 0.0
            snake_rows(x[: s + n], S[-lo : halo + n], p["act1.alpha"], p["act1.beta"], S_tmp[-lo : halo + n])
        else:
            snake_rows(x[lo : s + n], S[: halo + n], p["act1.alpha"], p["act1.beta"], S_tmp[: halo + n])
        h, tm = H[:n], tmp[:n]
        if winograd:  # whole blocks: the last tile's padding frames are computed and dropped
            nb = -(-n // block) * block
            S[halo + n : halo + nb] = 0.0
            wg.conv_groups(S, W1, H[:nb], dilation, ws)
        else:
            np.matmul(S[:n], W1[0], out=h)
            for k in range(1, K):
                np.matmul(S[k * dilation : k * dilation + n], W1[k], out=tm)
                h += tm
        snake_rows(h, h, p["act2.alpha"], p["act2.beta"], tm, bias=p["conv1.bias"])
        out = y[s - lead : s - lead + n]
        np.matmul(h, W2, out=tm)
        tm += p["conv2.bias"]
        np.add(tm, x[s : s + n], out=out)


def unit_conv1_channels(
    x: np.ndarray, H: np.ndarray, p: dict[str, np.ndarray], dilation: int, c0: int, c1: int, lead: int
) -> None:
    """The first half of a residual unit split by output channels: H[:, c0:c1] = conv1(snake1(x)) (no bias) for
    every output frame, x [T_in, C] (any strides) whose first `lead` frames are a stream's past, H [T_in - lead, C].
    The input frames before frame 0 are zeros (the conv's causal padding) where `lead` is less than the halo."""
    W1 = p["conv1.weight"]  # [K, C, C], direct taps
    K = W1.shape[0]
    halo = (K - 1) * dilation
    T_out, C = H.shape
    S = np.zeros((T_out + halo, C), np.float32)  # snake1 of the frames the outputs read, zeros before the input
    have = min(T_out + halo, x.shape[0])  # frames of S that come from x (the rest: zeros before the input)
    lo = x.shape[0] - have
    tmp = np.empty((have, C), np.float32)
    snake_rows(x[lo:], S[T_out + halo - have :], p["act1.alpha"], p["act1.beta"], tmp)
    h = H[:, c0:c1]
    tm = np.empty((T_out, c1 - c0), np.float32)
    np.matmul(S[:T_out], W1[0][:, c0:c1], out=tm)
    h[...] = tm
    for k in range(1, K):
        np.matmul(S[k * dilation : k * dilation + T_out], W1[k][:, c0:c1], out=tm)
        h += tm


def unit_conv2_channels(
    x: np.ndarray, H: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray], c0: int, c1: int, lead: int
) -> None:
    """The second half of a residual unit split by output channels, once every channel of H is in (a barrier):
    y[:, c0:c1] = x + conv2(snake2(H + b1)) + b2 for this thread's channels; snake2 of every channel is computed by
    each thread (conv2 reads them all)."""
    T_out, C = H.shape
    h2 = np.empty((T_out, C), np.float32)
    tmp = np.empty_like(h2)
    snake_rows(H, h2, p["act2.alpha"], p["act2.beta"], tmp, bias=p["conv1.bias"])
    out = np.matmul(h2, p["conv2.weight"][:, c0:c1])
    out += p["conv2.bias"][c0:c1]
    np.add(out, x[lead:, c0:c1], out=y[:, c0:c1])


#: bytes of one tile's products (input frames x K x C_out x 4)
CONVT_TILE_BYTES = 1 << 21
#: at least this many frames per tile: each tile streams the whole weight through the cache once
CONVT_MIN_ROWS = 256


def convt_tile_rows(k: int, c_out: int) -> int:
    """Input frames per tile of the fused transposed conv."""
    return tile_rows(CONVT_TILE_BYTES, k * c_out, CONVT_MIN_ROWS)


def convt_rows(
    x: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray], stride: int, a: int, b: int, tile: int, lead: int = 0
) -> None:
    """Input frames [a, b) of SnakeBeta + causal ConvTranspose1d (kernel 2 x stride, trimmed on the right).

    x is [T, C_in] (any strides), y is [(T - lead) x stride, C_out] channels-last: the first `lead` input frames
    are a stream's past, read for their overlap and given no output. Output frame t*stride + j is
    snake(x)[t] . W[:, j] + snake(x)[t-1] . W[:, j + stride] + bias, so a tile reads one input frame before
    its start: one product per tile, P [frames, K, C_out], and the overlap-add is one add of two halves of P."""
    W = p["weight"]  # [C_in, K, C_out]
    c_in, k, c_out = W.shape
    W2 = W.reshape(c_in, k * c_out)
    r = stride
    S = np.empty((tile + 1, c_in), np.float32)
    S_tmp = np.empty_like(S)
    P = np.empty((tile + 1, k * c_out), np.float32)
    for s in range(a, b, tile):
        e = min(b, s + tile)
        s0 = max(0, s - 1)
        n = e - s0
        snake_rows(x[s0:e], S[:n], p["alpha"], p["beta"], S_tmp[:n])
        P3 = np.matmul(S[:n], W2, out=P[:n]).reshape(n, k, c_out)
        y3 = y[(s - lead) * r : (e - lead) * r].reshape(e - s, r, c_out)
        if s0 == s:  # the first frame of the signal: nothing before it
            np.copyto(y3[0], P3[0, :r])
            np.add(P3[1:, :r], P3[:-1, r:], out=y3[1:])
        else:
            np.add(P3[1:, :r], P3[:-1, r:], out=y3)
        y3 += p["bias"]


#: above this many bytes of F32 weight the fused transposed conv splits its output channels between the threads
#: instead of its frames: split by frames, every thread streams the whole weight through its cache, and the first
#: block's (75 MB at full size, 124 frames) then took longer than one BLAS product over both cores
CONVT_SPLIT_CHANNELS_BYTES = 32 << 20
#: at most this many input frames, such a weight is split by output phases instead (`convt_channel_rows`'s
#: `phases`): each thread takes whole phases, both taps of each, over every output channel, so it reads whole rows
#: of W ([C_in, K, C_out]: C_out floats each) where the channel split reads half rows. The first block's 75 MB
#: at 4 input frames (a 1-frame stream call), two threads, caches flushed: 5.6 ms against 9.5 ms; at 16 frames the
#: two took 9.5 ms each, at 64 the phase split was the slower (19.8 against 17.5 ms)
CONVT_SPLIT_PHASES_FRAMES = 8


def convt_channel_rows(x: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray], stride: int, c0: int, c1: int,
                       tile: int, lead: int = 0, phases: tuple[int, int] | None = None) -> None:
    """Output channels [c0, c1) of SnakeBeta + causal ConvTranspose1d over every frame (`convt_rows`'s arithmetic
    split the other way): per tap pair j, j + stride one product each over this thread's columns of W, so each
    thread streams only its share of the weight; the SnakeBeta of the input is computed by every thread. `lead`
    as in `convt_rows`. `phases` (j0, j1): only the output samples t * stride + j, j0 <= j < j1 (default: all)."""
    W = p["weight"]  # [C_in, K, C_out]
    c_in, k, c_out = W.shape
    r, T = stride, x.shape[0]
    j0, j1 = (0, r) if phases is None else phases
    S = np.empty((tile + 1, c_in), np.float32)
    S_tmp = np.empty_like(S)
    A = np.empty((tile, c1 - c0), np.float32)
    B = np.empty_like(A)
    y4 = y.reshape(T - lead, r, c_out)
    bias = p["bias"][c0:c1]
    for s in range(lead, T, tile):
        e = min(T, s + tile)
        s0 = max(0, s - 1)
        n, m = e - s0, e - s
        snake_rows(x[s0:e], S[:n], p["alpha"], p["beta"], S_tmp[:n])
        for j in range(j0, j1):
            a = A[:m]
            np.matmul(S[n - m : n], W[:, j, c0:c1], out=a)  # frame t's own contribution
            if s0 < s:  # frame t - 1's, the one before the tile included
                np.matmul(S[:m], W[:, j + r, c0:c1], out=B[:m])
                a += B[:m]
            elif m > 1:  # the first frame of the signal: nothing before it
                np.matmul(S[: m - 1], W[:, j + r, c0:c1], out=B[1:m])
                a[1:] += B[1:m]
            a += bias
            y4[s - lead : e - lead, j, c0:c1] = a


# ---- the ConvNeXt block ------------------------------------------------------------------------------------
#: erf by Abramowitz & Stegun 7.1.26: erf(z) = 1 - (a1 s + ... + a5 s^5) exp(-z^2), s = 1 / (1 + p z), z >= 0,
#: absolute error at most 1.5e-7 (about one float32 ulp of 1), so the exact GELU stays exact to float32. Here z =
#: |u| / sqrt(2), so p is taken over sqrt(2) and the a_i are halved: the polynomial gives q/2, q = 1 - erf(z)
_ERF_P = np.float32(0.3275911 / np.sqrt(2.0))
_ERF_A = tuple(np.float32(v / 2) for v in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429))


def gelu_erf(u: np.ndarray, out: np.ndarray, s: np.ndarray, e: np.ndarray) -> None:
    """out = u * Phi(u) = 0.5 u (1 + erf(u / sqrt 2)), the exact GELU, vectorised (ggml 0.15.3's GELU_ERF calls
    scalar erff per element); `s` and `e` are scratch of u's shape, `out` must not be `u`.

    With q = 1 - erf(|u| / sqrt 2) (no cancellation for either sign), gelu = max(u, 0) - |u| q / 2. Only
    whole-array passes numpy vectorises (a masked copy costs 40 times an add)."""
    np.abs(u, out=e)
    np.multiply(e, _ERF_P, out=s)
    s += 1
    np.reciprocal(s, out=s)  # s = 1 / (1 + p |z|)
    a1, a2, a3, a4, a5 = _ERF_A
    np.multiply(s, a5, out=out)
    for a in (a4, a3, a2, a1):
        out += a
        out *= s
    np.square(u, out=s)
    s *= np.float32(-0.5)
    np.exp(s, out=s)  # exp(-z^2)
    out *= s  # q / 2
    out *= e  # |u| q / 2
    np.add(u, e, out=s)
    s *= np.float32(0.5)  # max(u, 0)
    np.subtract(s, out, out=out)


#: bytes of one tile's hidden rows ([tile, F] F32). The products dominate and sgemm is most efficient on tall
#: tiles: at the shipped sizes (C 768, F 2304) a thread's block took 77, 74, 71 and 69 ms (one core, 750 frames)
#: at 128, 192, 256 and 375 frames per tile, so a tile is as tall as 4 MB of hidden rows allows
DWMLP_TILE_BYTES = 1 << 22
DWMLP_MIN_ROWS, DWMLP_MAX_ROWS = 16, 512


def dwmlp_tile_rows(hidden: int) -> int:
    """Frames per tile of the fused ConvNeXt block for a hidden width of `hidden` channels."""
    return tile_rows(DWMLP_TILE_BYTES, hidden, DWMLP_MIN_ROWS, DWMLP_MAX_ROWS)


def dwmlp_rows(
    x: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray], left: int, eps: float, t0: int, t1: int, tile: int
) -> None:
    """Output frames [t0, t1) of one ConvNeXt block, a tile at a time; x and y are [T, C] channels-last.

    y = x + gamma * (pw2(gelu(pw1(LN(dwconv(x))))) with the depthwise conv of K taps reading frames t - left ...
    t - left + K - 1 (zeros outside [0, T): 'same' padding is left = (K-1)/2, causal left = K-1), LayerNorm over
    the channels of each frame, the exact GELU. p: "dw.weight" [K, C], "dw.bias" [C], "norm.weight",
    "norm.bias" [C], "pw1.weight" [F, C], "pw1.bias" [F], "pw2.weight" [C, F], "pw2.bias" [C], "gamma" [C]."""
    dw, W1, W2 = p["dw.weight"], p["pw1.weight"], p["pw2.weight"]
    K, C = dw.shape
    F = W1.shape[0]
    T = x.shape[0]
    X = np.empty((tile + K - 1, C), np.float32)  # the tile's input frames and the halo its taps read
    H = np.empty((tile, C), np.float32)
    tmp = np.empty((tile, C), np.float32)
    U = np.empty((tile, F), np.float32)
    G = np.empty((tile, F), np.float32)
    S = np.empty((tile, F), np.float32)
    E = np.empty((tile, F), np.float32)
    for s in range(t0, t1, tile):
        n = min(tile, t1 - s)
        lo = s - left  # input frame of the tile's first tap
        a, b = max(lo, 0), min(lo + n + K - 1, T)
        xs = X[: n + K - 1]
        if a > lo or b < lo + n + K - 1:
            xs[:] = 0.0
        xs[a - lo : b - lo] = x[a:b]
        h, tm = H[:n], tmp[:n]
        np.multiply(xs[:n], dw[0], out=h)
        for j in range(1, K):
            np.multiply(xs[j : j + n], dw[j], out=tm)
            h += tm
        h += p["dw.bias"]
        # LayerNorm over channels, float32 statistics in two passes (as ggml_norm)
        mean = h.mean(axis=1, keepdims=True, dtype=np.float32)
        h -= mean
        np.square(h, out=tm)
        var = tm.mean(axis=1, keepdims=True, dtype=np.float32)
        h *= 1.0 / np.sqrt(var + np.float32(eps))
        h *= p["norm.weight"]
        h += p["norm.bias"]
        u = U[:n]
        np.matmul(h, W1.T, out=u)
        u += p["pw1.bias"]
        gelu_erf(u, G[:n], S[:n], E[:n])
        np.matmul(G[:n], W2.T, out=tm)
        tm += p["pw2.bias"]
        tm *= p["gamma"]
        np.add(tm, x[s : s + n], out=y[s : s + n])


# ---- GroupNorm statistics and the normalised conv ----------------------------------------------------------------
def group_norm_affine(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, groups: int, eps: float, c0: int,
                      c1: int, out: np.ndarray) -> None:
    """GroupNorm of x ([T, C], any strides) folded to a per-channel affine for channels [c0, c1) (whole groups):
    out[0, c] = weight[c] / sqrt(var_g + eps), out[1, c] = bias[c] - mean_g * out[0, c], g the channel's group,
    mean and variance over the group's channels and every frame in two passes as ggml's GROUP_NORM takes them
    (float64 sums, the mean rounded to float32, the variance of the float32 centred values). A few whole-range
    numpy calls, not a loop over groups: ggml's threads share the GIL between numpy's calls."""
    T, C = x.shape
    cg = C // groups
    xs = x[:, c0:c1]
    n = T * cg
    mean = (xs.sum(axis=0, dtype=np.float64).reshape(-1, cg).sum(axis=1) / n).astype(np.float32)
    d = xs - np.repeat(mean, cg)
    np.square(d, out=d)
    var = d.sum(axis=0, dtype=np.float64).reshape(-1, cg).sum(axis=1) / n
    a = weight[c0:c1].astype(np.float64) / np.repeat(np.sqrt(var + eps), cg)
    out[0, c0:c1] = a
    out[1, c0:c1] = bias[c0:c1] - np.repeat(mean.astype(np.float64), cg) * a


def silu(u: np.ndarray, tmp: np.ndarray) -> None:
    """u = u * sigmoid(u) = u / (1 + exp(-u)) in place, `tmp` scratch of u's shape (exp overflows to inf for
    u < -88, giving u / inf = -0: the limit)."""
    np.negative(u, out=tmp)
    np.exp(tmp, out=tmp)
    tmp += 1
    np.divide(u, tmp, out=u)


#: bytes of one tile's input rows in the normalised conv's first phase (the input transform, `normconv_inputs`)
NORMCONV_TILE_BYTES = 1 << 21
#: the bounds of that tile, in frames (`tile_rows`)
NORMCONV_ROWS = (96, 768)
#: bytes of one tile of the second phase's products (`normconv_outputs`: m + K - 1 products of a tile of groups by
#: one thread's output channels, `tile_rows` of n x channels values a group), and the bounds of that tile in
#: groups: the products are [groups, C_in] x [C_in, channels], faster the taller they are (one core, C 768, 375
#: frames: 13.5, 10.4, 9.3 and 9.3 ms at 16, 32, 64 and 128 groups of six frames a tile)
NORMCONV_PRODUCT_BYTES = 1 << 22
NORMCONV_GROUPS = (64, 256)


def _view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`a` reshaped as a view (never a copy: a kernel writes through it); raises where the strides cannot merge."""
    v = a.view()
    v.shape = shape
    return v


def normconv_inputs(
    x: np.ndarray, V: np.ndarray, p: dict[str, np.ndarray], taps: int, g0: int, g1: int, tile: int
) -> None:
    """The normalised conv's first phase: Winograd's transformed inputs of the groups [g0, g1) into V.

    The conv is 'same' (output t reads act(x) at t - (K-1)/2 ... t + (K-1)/2, zeros outside the signal) by
    Winograd's F(m, K), n = m + K - 1; group j computes output frames j m ... j m + m - 1 from its n inputs
    z_i = act(x)[j m + i - (K-1)/2], and V[:, j] = B^T z. x is [T, C_in] (any strides), V [n, ceil(T / m), C_in].
    act is x * scale + shift, then swish (x * sigmoid(x)), with p["affine"] = [scale; shift] ([2, C_in], a
    GroupNorm folded by `group_norm_affine`), or the identity without it. `tile` groups at a time; the frames
    past the signal (the last group's, the halo) are zeros."""
    aff = p.get("affine")
    T, c_in = x.shape
    n = V.shape[0]
    m, left = n - taps + 1, (taps - 1) // 2
    bt = wg.matrices(m, taps)[2].astype(np.float32)
    tile = max(1, min(tile, g1 - g0))
    S = np.empty((tile * m + taps - 1, c_in), np.float32)
    S_tmp = np.empty_like(S)
    Z = np.empty((n, tile, c_in), np.float32)
    for s in range(g0, g1, tile):
        q = min(tile, g1 - s)
        need = q * m + taps - 1
        lo = s * m - left  # the input frame S[0] holds
        a, b = min(max(lo, 0), T), max(min(lo + need, T), 0)
        S[: max(a - lo, 0)] = 0.0
        S[max(b - lo, a - lo) : need] = 0.0
        if a < b:
            seg = S[a - lo : b - lo]
            if aff is None:
                seg[...] = x[a:b]
            else:
                np.multiply(x[a:b], aff[0], out=seg)
                seg += aff[1]
                silu(seg, S_tmp[: b - a])
        z = Z[:, :q]
        for i in range(n):
            z[i] = S[i : i + q * m : m]
        np.matmul(bt, _view(z, (n, q * c_in)), out=_view(V[:, s : s + q], (n, q * c_in)))


def normconv_outputs(
    V: np.ndarray, y: np.ndarray, p: dict[str, np.ndarray], taps: int, c0: int, c1: int, tile: int,
    residual: np.ndarray | None = None,
) -> None:
    """The normalised conv's second phase: output channels [c0, c1) of every frame, y = conv(act(x)) + bias
    (+ residual), from the transformed inputs V of `normconv_inputs` ([n, G, C_in]). p["weight"] holds Winograd's
    n transformed matrices ([n, C_in, C_out], `winograd.transform_weights`), p["bias"] [C_out]; y and `residual`
    are [T, C_out] in row order (T <= G m: the last group's extra outputs are computed and dropped). `tile` groups
    at a time: n products [groups, C_in] x [C_in, c1 - c0], then A^T, the bias and the residual."""
    W, bias = p["weight"][:, :, c0:c1], p["bias"][c0:c1]
    n, G, _ = V.shape
    m = n - taps + 1
    T, cc = y.shape[0], c1 - c0
    at = wg.matrices(m, taps)[0].astype(np.float32)
    tile = max(1, min(tile, G))
    P = np.empty((n, tile, cc), np.float32)
    Y = np.empty((m, tile, cc), np.float32)
    for s in range(0, G, tile):
        q = min(tile, G - s)
        Pv, Yv = P[:, :q], Y[:, :q]
        np.matmul(V[:, s : s + q], W, out=Pv)
        np.matmul(at, _view(Pv, (n, q * cc)), out=_view(Yv, (m, q * cc)))
        f0 = s * m
        full = min(q, (T - f0) // m)  # groups whose m outputs are all frames of the signal
        if full:
            out = _view(y[f0 : f0 + full * m], (full, m, y.shape[1]))[:, :, c0:c1]
            res = None if residual is None else _view(residual[f0 : f0 + full * m], (full, m, y.shape[1]))[:, :, c0:c1]
            for r in range(m):
                np.add(Yv[r, :full], bias, out=out[:, r])
                if res is not None:
                    out[:, r] += res[:, r]
        for r in range(min(T - f0, q * m) - full * m):  # the frames of the signal's last group, when it is partial
            t = f0 + full * m + r
            np.add(Yv[r, full], bias, out=y[t, c0:c1])
            if residual is not None:
                y[t, c0:c1] += residual[t, c0:c1]
