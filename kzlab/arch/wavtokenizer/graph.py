"""WavTokenizer's decoder, the graph half: one function per block, every node named by its block path, and the
inverse STFT, on the host (numpy, the default, as llama.cpp does) or in the graph (ggml ops only).

Each block computes what the PyTorch module of outetts 0.4.4 (`wav_tokenizer.decoder`) computes: 'same' zero
padding for every conv, GroupNorm over (channels of a group x all frames), LayerNorm over channels per frame,
GELU in its exact erf form. llama.cpp's own graph (src/models/wavtokenizer-dec.cpp at cb295bf5) differs in two
places, both offered as lowering options so that their cost shows: `conv="im2col-f16"` (ggml_conv_1d's F16
columns) and `gelu="tanh"` (ggml_gelu's tanh approximation).
"""

from __future__ import annotations

import math

from ggml import ggml as g

from kzlab.arch.wavtokenizer.spec import WavTokenizerHParams, stage_input_shape, stage_names
from kzlab.graph import fused
from kzlab.graph.builder import Act, GraphBuilder, StageRun
from kzlab.graph.options import KTAP, LoweringPlan

#: the magnitude clip of the head (outetts ISTFTHead: exp(x).clip(max=1e2))
MAG_MAX = 100.0


def _keep(b: GraphBuilder, name: str, a: Act) -> None:
    """An output read back whatever `keep_stages` says (the head, when the iSTFT runs on the host)."""
    g.ggml_set_output(a.t)
    b.outputs[name] = a


def _cont(b: GraphBuilder, a: Act) -> Act:
    return a if g.ggml_is_contiguous(a.t) else Act(g.ggml_cont(b.ctx, a.t), a.cl)


def _pad_time(b: GraphBuilder, a: Act, left: int, right: int) -> Act:
    if a.cl:
        return Act(g.ggml_pad_ext(b.ctx, a.t, 0, 0, left, right, 0, 0, 0, 0), True)
    return Act(g.ggml_pad_ext(b.ctx, a.t, left, right, 0, 0, 0, 0, 0, 0), False)


# ---- blocks ----------------------------------------------------------------------------------------------
def codebook(b: GraphBuilder, hp: WavTokenizerHParams, codes, T: int) -> Act:
    """The codebook lookup: one row of `token_embd` per code."""
    with b.layer("token_embd", "embedding", c_out=hp.features, t_in=T, t_out=T):
        idx = g.ggml_view_1d(b.ctx, codes, T, 0)
        return Act(g.ggml_get_rows(b.ctx, b.w["token_embd.weight"], idx), True)


def conv_same(b: GraphBuilder, x: Act, path: str, c_in: int, c_out: int, k: int) -> Act:
    """Conv1d, stride 1, zero 'same' padding (k odd): the lowering's causal conv (`conv`, `conv_src1`) of the input
    padded by (k-1)/2 frames on the right, read from frame (k-1)/2 on; with `normconv="fused"`, the normalised conv
    node with no norm (`fused_conv`)."""
    if b.low.fused_normconv:
        return fused_conv(b, x, path, c_in, c_out, k)
    T, h = x.T, (k - 1) // 2
    macs = c_in * c_out * k * T
    with b.layer(path, "conv1d", c_in=c_in, c_out=c_out, kernel=k, t_in=T, t_out=T, macs=macs, macs_seed=macs,
                 extra={"padding": "same"}):
        if b.low.conv.startswith("im2col") and b.w.prepared[f"{path}.weight"].layout != "taps" and (
            not b.low.conv_tile or T <= b.low.conv_tile
        ):
            return _im2col_same(b, x, path, c_in, k)
        if b.low.conv in KTAP and b.w.prepared[f"{path}.weight"].layout != "taps":
            return b.conv1d(x, f"{path}.weight", f"{path}.bias", padding=(h, h))
        y = b.conv1d(_pad_time(b, x, 0, h), f"{path}.weight", f"{path}.bias")
        return _cont(b, b.time_view(y, h, T))


def _im2col_same(b: GraphBuilder, x: Act, path: str, c_in: int, k: int) -> Act:
    """The im2col lowerings of a 'same' conv in one tile: im2col pads both ends by (k-1)/2 itself, so its T columns
    are the conv's, with no PAD before it and no CONT of a shifted view after the product (the causal spelling
    needs both). Same columns, same product, same sums as `GraphBuilder.conv1d`'s im2col."""
    ctx, T, h = b.ctx, x.T, (k - 1) // 2
    ct = g.GGML_TYPE_F16 if b.low.conv == "im2col-f16" else g.GGML_TYPE_F32
    kshape = g.ggml_new_tensor_2d(ctx, g.GGML_TYPE_F16, k, c_in)  # im2col reads only its shape
    cols = g.ggml_im2col(ctx, kshape, b.as_cf(x).t, 1, 0, h, 0, 1, 0, False, ct)
    cols = g.ggml_reshape_2d(ctx, cols, k * c_in, T)
    W = b.w[f"{path}.weight"]
    if b.low.conv_src1 == "data":
        y = Act(b.mul_mat(W, cols), True)
    else:
        y = Act(b.mul_mat(cols, W), False)
    return b.add_bias(y, f"{path}.bias")


def fused_conv(b: GraphBuilder, x: Act, path: str, c_in: int, c_out: int, k: int, affine=None,
               residual: Act | None = None, fuses: tuple[str, ...] = ()) -> Act:
    """The 'same' conv as kzlab's normalised conv node (kzlab.graph.fused.normconv): swish(x * scale + shift) first
    where `affine` (a GroupNorm's statistics node) is given, the conv by Winograd's F(m, k) on tiles of frames, its
    bias, and `residual` added; channels-last out. The record keeps the conv's own MACs and says what its products
    did (`algorithm`, `product_macs`: an effective GF/s above the machine's peak reads as what it is)."""
    T = x.T
    macs = c_in * c_out * k * T
    extra = {"padding": "same", **fused.winograd.record(c_in, c_out, T, k)}
    if fuses:
        extra["fuses"] = list(fuses)
    with b.layer(path, "conv1d", c_in=c_in, c_out=c_out, kernel=k, t_in=T, t_out=T, macs=macs, macs_seed=macs,
                 extra=extra):
        res = _cont(b, b.as_cl(residual)).t if residual is not None else None
        y = fused.normconv(b.ctx, x.t, x.cl, b.w[f"{path}.weight"], b.w[f"{path}.bias"], k, affine=affine,
                           residual=res)
        return Act(y, True)


def group_norm_stats(b: GraphBuilder, hp: WavTokenizerHParams, x: Act, path: str, into: str):
    """A GroupNorm as kzlab's statistics node: its per-channel scale and shift (ne [C, 2]), which the conv `into`
    applies with swish on its tiles."""
    C = x.C
    with b.layer(path, "norm", c_in=C, c_out=C, t_in=x.T, t_out=x.T, extra={"fused_into": into}):
        return fused.group_norm_affine_node(b.ctx, x.t, x.cl, b.w[f"{path}.vectors"], hp.group_norm_groups,
                                            hp.group_norm_eps)


def group_norm(b: GraphBuilder, hp: WavTokenizerHParams, x: Act, path: str, swish: bool) -> Act:
    """GroupNorm (statistics over a group's channels and every frame), its affine, then swish if asked. With
    `normconv="fused"` the statistics and affine come from kzlab's statistics node, applied channels-last by ggml's
    MUL and ADD (a per-channel broadcast over a channels-first tensor walks one element at a time)."""
    ctx, T, C = b.ctx, x.T, x.C
    if b.low.fused_normconv:
        with b.layer(path, "norm", c_in=C, c_out=C, t_in=T, t_out=T):
            x = _cont(b, b.as_cl(x))
            a = fused.group_norm_affine_node(ctx, x.t, True, b.w[f"{path}.vectors"], hp.group_norm_groups,
                                             hp.group_norm_eps)
            nb1 = int(a.contents.nb[1])
            scale, shift = (g.ggml_view_2d(ctx, a, C, 1, nb1, i * nb1) for i in (0, 1))
            y = g.ggml_add(ctx, g.ggml_mul(ctx, x.t, scale), shift)
            return Act(g.ggml_silu(ctx, y) if swish else y, True)
    with b.layer(path, "norm", c_in=C, c_out=C, t_in=T, t_out=T):
        xc = b.as_cf(x)  # ne [T, C]: ggml groups channels along ne2
        t = g.ggml_reshape_3d(ctx, xc.t, T, 1, C)
        t = g.ggml_group_norm(ctx, t, hp.group_norm_groups, hp.group_norm_eps)
        y = b.add_bias(b.mul_chan(Act(g.ggml_reshape_2d(ctx, t, T, C), False), f"{path}.weight"), f"{path}.bias")
        return Act(g.ggml_silu(ctx, y.t), False) if swish else y


def layer_norm(b: GraphBuilder, hp: WavTokenizerHParams, x: Act, path: str, weight: str) -> Act:
    """LayerNorm over the channels of each frame, with its weight and bias."""
    with b.layer(path, "norm", c_in=x.C, c_out=x.C, t_in=x.T, t_out=x.T):
        x = b.as_cl(x)
        y = Act(g.ggml_norm(b.ctx, x.t, hp.layer_norm_eps), True)
        return b.add_bias(b.mul_chan(y, f"{weight}.weight"), f"{weight}.bias")


def resnet_block(b: GraphBuilder, hp: WavTokenizerHParams, x: Act, i: int) -> Act:
    p, C = f"posnet.{i}", hp.dim
    if b.low.fused_normconv:  # two statistics nodes, two normalised convs, the residual in the second
        a1 = group_norm_stats(b, hp, x, f"{p}.norm1", f"{p}.conv1")
        h = fused_conv(b, x, f"{p}.conv1", C, C, 3, affine=a1, fuses=(f"{p}.norm1",))
        a2 = group_norm_stats(b, hp, h, f"{p}.norm2", f"{p}.conv2")
        h = fused_conv(b, h, f"{p}.conv2", C, C, 3, affine=a2, residual=x, fuses=(f"{p}.norm2", f"{p}.residual"))
        with b.layer(f"{p}.residual", "other", c_in=C, c_out=C, t_in=x.T, t_out=x.T,
                     extra={"fused_into": f"{p}.conv2"}):
            return h
    h = group_norm(b, hp, x, f"{p}.norm1", swish=True)
    h = conv_same(b, h, f"{p}.conv1", C, C, 3)
    h = group_norm(b, hp, h, f"{p}.norm2", swish=True)
    h = conv_same(b, h, f"{p}.conv2", C, C, 3)
    with b.layer(f"{p}.residual", "other", c_in=C, c_out=C, t_in=x.T, t_out=x.T):
        h = b.as_cl(h) if x.cl else b.as_cf(h)
        return Act(g.ggml_add(b.ctx, x.t, h.t), x.cl)


def attn_block(b: GraphBuilder, hp: WavTokenizerHParams, x: Act, i: int) -> Act:
    """Self-attention over every frame (one head, softmax(q^T k / sqrt(C)) over keys), 1x1 convs, residual."""
    ctx, p, C, T = b.ctx, f"posnet.{i}", hp.dim, x.T
    h = b.as_cl(group_norm(b, hp, x, f"{p}.attn_norm", swish=False))  # once for the three products
    macs = 4 * C * C * T + 2 * C * T * T
    with b.layer(f"{p}.attn", "attention", c_in=C, c_out=C, t_in=T, t_out=T, macs=macs, macs_seed=macs):
        q = b.linear(h, f"{p}.attn_q.weight", f"{p}.attn_q.bias")  # ne [C, T]
        k = b.linear(h, f"{p}.attn_k.weight", f"{p}.attn_k.bias")
        v = b.linear(h, f"{p}.attn_v.weight", f"{p}.attn_v.bias")
        kq = g.ggml_mul_mat(ctx, k.t, q.t)  # ne [Tk, Tq]
        kq = g.ggml_soft_max_ext(ctx, kq, None, 1.0 / math.sqrt(C), 0.0)
        vt = g.ggml_cont(ctx, g.ggml_transpose(ctx, v.t))  # ne [Tk, C]
        o = Act(g.ggml_mul_mat(ctx, vt, kq), True)  # ne [C, Tq]
        o = b.linear(o, f"{p}.attn_output.weight", f"{p}.attn_output.bias")
        return Act(g.ggml_add(ctx, b.as_cl(x).t, o.t), True)


def depthwise_same(b: GraphBuilder, x: Act, wname: str, bname: str) -> Act:
    """Depthwise Conv1d with 'same' padding as one direct depthwise conv node (ggml_conv_2d_dw_direct, height 1)
    in its channels-innermost form: the activations stay channels-last, the kernel is read as stored (ne [C, K]),
    every output frame is the K taps summed in tap order in F32 over a vector of channels, zero padding included.
    No im2col (ggml_conv_1d_dw's F16 columns), no transposed copy, no PAD node; K shifted multiply-adds (2K full
    passes) and ggml_ssm_conv (strided per-channel reads of a transposed, padded copy) were slower."""
    ctx, W = b.ctx, b.w[wname]  # ne [C, K], channels innermost
    C, k = int(W.contents.ne[0]), int(W.contents.ne[1])
    h, T = (k - 1) // 2, x.T
    if b.low.dwconv == "taps":
        return _depthwise_taps(b, x, wname, bname)
    if T < 2:
        return _depthwise_ssm(b, x, wname, bname)
    xl = _cont(b, b.as_cl(x))  # ne [C, T]
    # as ggml's [W=T, H=1, C, N=1] with channels innermost (CWHN): a permuted view, no copy
    src = g.ggml_permute(ctx, g.ggml_reshape_4d(ctx, xl.t, C, T, 1, 1), 2, 0, 1, 3)
    # the kernel as [KW=K, KH=1, 1, C], channels innermost too
    knl = g.ggml_permute(ctx, g.ggml_reshape_4d(ctx, W, C, 1, 1, k), 3, 1, 2, 0)
    y = g.ggml_conv_2d_dw_direct(ctx, knl, src, 1, 1, h, 0, 1, 1)  # ne [T, 1, C, 1], channels innermost
    y = g.ggml_view_2d(ctx, y, C, T, C * 4, 0)  # the same memory as ne [C, T]
    return b.add_bias(Act(y, True), bname)


def _depthwise_taps(b: GraphBuilder, x: Act, wname: str, bname: str) -> Act:
    """The same conv as K shifted multiply-adds over channels-last frames (`dwconv="taps"`): only MUL, ADD and
    views of a padded copy, ops every device backend takes, where CONV_2D_DW is a CPU op."""
    W = b.w[wname]  # ne [C, K]
    C, k = int(W.contents.ne[0]), int(W.contents.ne[1])
    h, T = (k - 1) // 2, x.T
    xp = _pad_time(b, b.as_cl(x), h, h)
    acc = None
    for j in range(k):
        wj = g.ggml_view_2d(b.ctx, W, C, 1, int(W.contents.nb[1]), j * int(W.contents.nb[1]))
        y = g.ggml_mul(b.ctx, b.time_view(xp, j, T).t, wj)
        acc = y if acc is None else g.ggml_add(b.ctx, acc, y)
    return b.add_bias(Act(acc, True), bname)


def _depthwise_ssm(b: GraphBuilder, x: Act, wname: str, bname: str) -> Act:
    """The same conv as one ggml_ssm_conv node (the K taps summed in order per channel and frame, F32) on the
    input transposed and padded by one PAD: for a single frame, where the direct conv cannot tell the channels-
    innermost layout from a plain one."""
    ctx, W = b.ctx, b.w[wname]  # ne [C, K]
    C, k = int(W.contents.ne[0]), int(W.contents.ne[1])
    h, T = (k - 1) // 2, x.T
    xt = g.ggml_transpose(ctx, x.t) if x.cl else x.t  # ne [T, C], a view when channels-last
    xp = g.ggml_pad_ext(ctx, xt, h, h, 0, 0, 0, 0, 0, 0)  # ne [T + K - 1, C], contiguous
    wk = g.ggml_cont(ctx, g.ggml_transpose(ctx, W))  # ne [K, C]: K * C floats
    y = g.ggml_ssm_conv(ctx, g.ggml_reshape_3d(ctx, xp, T + k - 1, C, 1), wk)  # ne [C, T, 1]
    return b.add_bias(Act(g.ggml_reshape_2d(ctx, y, C, T), True), bname)


def fused_dwmlp_block(b: GraphBuilder, hp: WavTokenizerHParams, x: Act, i: int) -> Act:
    """The block as one kzlab CPU node (kzlab.graph.fused.dwmlp), named by the block's path.

    Its four logical layers are still recorded (with their MACs, for the tables), marked `fused_into` the block;
    the node's time and FLOPs belong to the block's own row."""
    p, C, F, T = f"convnext.{i}", hp.dim, hp.intermediate_size, x.T
    subs = [
        (".dwconv", "conv1d", 7 * C * T, {"kernel": 7, "extra": {"groups": C, "padding": "same"}}),
        (".norm", "norm", 0, {}),
        (".mlp", "mlp", 2 * C * F * T, {}),
        (".residual", "other", 0, {}),
    ]
    with b.layer(p, "convnext", c_in=C, c_out=C, t_in=T, t_out=T, extra={"fuses": [p + s[0] for s in subs]}):
        names = {"dw.weight": "dwconv.weight", "vectors": "vectors", "pw1.weight": "pw1.weight",
                 "pw1.bias": "pw1.bias", "pw2.weight": "pw2.weight"}
        w = {k: b.w[f"{p}.{v}"] for k, v in names.items()}
        k = int(w["dw.weight"].contents.ne[1])
        y = Act(fused.dwmlp(b.ctx, x.t, x.cl, w, (k - 1) // 2, hp.layer_norm_eps), True)
    for suffix, kind, macs, info in subs:
        extra = {**info.get("extra", {}), "fused_into": p}
        more = {"macs": macs, "macs_seed": macs} if macs else {}
        if "kernel" in info:
            more["kernel"] = info["kernel"]
        with b.layer(p + suffix, kind, c_in=C, c_out=C, t_in=T, t_out=T, extra=extra, **more):
            pass
    return y


def convnext_block(b: GraphBuilder, hp: WavTokenizerHParams, x: Act, i: int) -> Act:
    """Depthwise conv, LayerNorm, Linear, GELU, Linear, gamma, residual."""
    if b.low.fused_dwmlp:
        return fused_dwmlp_block(b, hp, x, i)
    ctx, p, C, F, T = b.ctx, f"convnext.{i}", hp.dim, hp.intermediate_size, x.T
    with b.layer(f"{p}.dwconv", "conv1d", c_in=C, c_out=C, kernel=7, t_in=T, t_out=T, macs=7 * C * T,
                 macs_seed=7 * C * T, extra={"groups": C, "padding": "same"}):
        h = depthwise_same(b, x, f"{p}.dwconv.weight", f"{p}.dwconv.bias")
    h = layer_norm(b, hp, h, f"{p}.norm", f"{p}.norm")
    m = 2 * C * F * T
    with b.layer(f"{p}.mlp", "mlp", c_in=C, c_out=C, t_in=T, t_out=T, macs=m, macs_seed=m):
        h = b.linear(h, f"{p}.pw1.weight", f"{p}.pw1.bias")
        act = g.ggml_gelu(ctx, h.t) if b.low.gelu == "tanh" else g.ggml_gelu_erf(ctx, h.t)
        h = b.mul_chan(b.linear(Act(act, True), f"{p}.pw2.weight", f"{p}.pw2.bias"), f"{p}.gamma")
    with b.layer(f"{p}.residual", "other", c_in=C, c_out=C, t_in=T, t_out=T):
        return Act(g.ggml_add(ctx, b.as_cl(x).t, h.t), True)


def head(b: GraphBuilder, hp: WavTokenizerHParams, x: Act) -> Act:
    n, T = hp.n_fft + 2, x.T
    with b.layer("output", "conv1d", c_in=hp.dim, c_out=n, kernel=1, t_in=T, t_out=T, macs=hp.dim * n * T,
                 macs_seed=hp.dim * n * T, extra={"projection": True}):
        return b.linear(x, "output.weight", "output.bias")


def istft_graph(b: GraphBuilder, hp: WavTokenizerHParams, x: Act) -> Act:
    """The inverse STFT in ggml ops: magnitude and phase, one product with the windowed inverse real DFT basis
    (`istft.basis`, made at load), overlap-add with COL2IM_1D, division by the overlap-added squared window
    (COL2IM_1D of it repeated per frame), the 'same' padding cut."""
    ctx, T, N, hop, nb = b.ctx, x.T, hp.n_fft, hp.hop, hp.n_bins
    x = b.as_cl(x)  # ne [N + 2, T]
    L = (T - 1) * hop + N
    pad = (N - hop) // 2
    macs = (N + 2) * N * T
    with b.layer("istft", "istft", c_in=N + 2, c_out=1, kernel=N, t_in=T, t_out=T * hop, macs=macs, macs_seed=macs,
                 extra={"stride": hop}):
        nb1 = int(x.t.contents.nb[1])
        mag = g.ggml_view_2d(ctx, x.t, nb, T, nb1, 0)
        ph = g.ggml_view_2d(ctx, x.t, nb, T, nb1, nb * 4)
        mag = g.ggml_clamp(ctx, g.ggml_exp(ctx, mag), 0.0, MAG_MAX)
        re = g.ggml_mul(ctx, mag, g.ggml_cos(ctx, ph))
        im = g.ggml_mul(ctx, mag, g.ggml_sin(ctx, ph))
        z = g.ggml_concat(ctx, re, im, 0)  # ne [2 nb, T]
        frames = g.ggml_mul_mat(ctx, b.w["istft.basis"], z)  # ne [N, T]: windowed frames
        y = g.ggml_col2im_1d(ctx, frames, hop, 1, 0)  # ne [L, 1]
        wsq = g.ggml_repeat(ctx, b.w["istft.window_sq"], frames)
        env = g.ggml_col2im_1d(ctx, wsq, hop, 1, 0)
        yv = g.ggml_view_1d(ctx, y, T * hop, pad * 4)
        ev = g.ggml_view_1d(ctx, env, T * hop, pad * 4)
        wav = g.ggml_div(ctx, yv, ev)
        assert L == pad * 2 + T * hop
        return Act(g.ggml_reshape_2d(ctx, wav, T * hop, 1), False)


# ---- the whole decoder -------------------------------------------------------------------------------------
def build_decoder(
    b: GraphBuilder, hp: WavTokenizerHParams, frames: int, start: str = "embd", stop: str | None = None
) -> Act:
    """The graph from stage `start` to the head (and the waveform, with istft='graph'), or to stage `stop`."""
    stages = stage_names(hp)
    if start not in stages or (stop is not None and stop not in stages):
        raise ValueError(f"unknown stage {start!r} or {stop!r}")
    first = stages.index(start)
    last = stages.index(stop) if stop is not None else len(stages) - 1
    if last < first:
        raise ValueError(f"stage {stop!r} comes before {start!r}")
    c, t = stage_input_shape(hp, start, frames)
    if start == stages[0]:
        x = None
        codes = b.input("codes", g.GGML_TYPE_I32, frames, 1)
    else:
        x = Act(b.input("x", g.GGML_TYPE_F32, t, c), False)

    run = StageRun(b, stages, x, first, last)

    C = hp.dim
    run("embd", lambda _: codebook(b, hp, codes, frames))
    run("backbone.embed", lambda x: conv_same(b, x, "conv1d", hp.features, C, 7))
    for i, kind in enumerate(hp.posnet_kinds):
        if kind == "resnet":
            fn = lambda x, i=i: resnet_block(b, hp, x, i)  # noqa: E731
        elif kind == "attn":
            fn = lambda x, i=i: attn_block(b, hp, x, i)  # noqa: E731
        else:
            fn = lambda x, i=i: group_norm(b, hp, x, f"posnet.{i}.attn_norm", swish=False)  # noqa: E731
        run(f"posnet.{i}", fn)
    run("backbone.norm", lambda x: layer_norm(b, hp, x, "token_embd_norm", "token_embd_norm"))
    for i in range(hp.num_convnext):
        run(f"convnext.{i}", lambda x, i=i: convnext_block(b, hp, x, i))
    run("backbone", lambda x: layer_norm(b, hp, x, "output_norm", "output_norm"))
    run("head.linear", lambda x: head(b, hp, x))
    x = run.x
    if stop is not None:
        _keep(b, stop, x)
        return x
    if b.low.istft == "graph":
        b.stage = "istft"
        wav = istft_graph(b, hp, x)
        b.mark_output("wav", wav)
        return wav
    _keep(b, "head.linear", x)
    return x


def feed(hp: WavTokenizerHParams, frames: int, inputs: dict) -> dict:
    """No inputs follow from the shape alone."""
    return {}


def finish(outputs: dict, plan: LoweringPlan, hp: WavTokenizerHParams) -> dict:
    """The waveform from the head on the host (istft='host'), as llama.cpp's tts tool does it but with a proper
    inverse real FFT (kzlab.arch.wavtokenizer.istft)."""
    if "wav" not in outputs and "head.linear" in outputs:
        from kzlab.arch.wavtokenizer.istft import istft

        outputs = {**outputs, "wav": istft(outputs["head.linear"], hp.n_fft, hp.hop)[None, :]}
    return outputs
