"""The Qwen3-TTS 12 Hz decoder's graph half: one function per block, each computing exactly what the upstream
PyTorch module does.

Stage names match the reference fixtures: quantizer, pre_conv, pre_transformer, upsample.{i}, decoder.{i}.
`build_decoder` can start at any stage (its input is then a float tensor of that stage's input shape) and
marks every stage output so that intermediates can be read back.
"""

from __future__ import annotations

import math

import numpy as np
from ggml import ggml as g

from kzlab.arch.qwen3_tts_12hz.hparams import HParams
from kzlab.arch.qwen3_tts_12hz.roles import RESIDUAL_DILATIONS
from kzlab.arch.qwen3_tts_12hz.spec import stage_input_shape, stage_names
from kzlab.graph import fused
from kzlab.graph.builder import Act, GraphBuilder, StageRun, fit_mask, window_mask
from kzlab.graph.options import LoweringPlan


# ---- blocks ----------------------------------------------------------------------------------------------
def quantizer(b: GraphBuilder, hp: HParams, codes, T: int) -> Act:
    """RVQ dequantize: semantic codebook + its projection, plus the sum of the acoustic codebooks projected."""
    ctx = b.ctx
    nb1 = int(codes.contents.nb[1])

    def lookup(i: int, table: str):
        idx = g.ggml_view_1d(ctx, codes, T, i * nb1)
        return g.ggml_get_rows(ctx, b.w[table], idx)  # ne [dim, T]

    with b.layer("vq.first", "embedding", c_out=hp.vq_dim, t_in=T, t_out=T):
        first = lookup(0, "vq.first.codebook")
    with b.layer("vq.rest", "embedding", c_out=hp.vq_dim, t_in=T, t_out=T):
        rest = None
        for i in range(1, hp.num_quantizers):
            e = lookup(i, f"vq.rest.{i - 1}.codebook")
            rest = e if rest is None else g.ggml_add(ctx, rest, e)
    macs = hp.vq_dim * hp.codebook_dim * T
    with b.layer(
        "vq.first.output_proj",
        "conv1d",
        c_in=hp.vq_dim,
        c_out=hp.codebook_dim,
        kernel=1,
        t_in=T,
        t_out=T,
        macs=macs,
        macs_seed=macs,
        extra={"projection": True},  # a codebook's projection: no conv verdict of its own
    ):
        y = b.linear(Act(first, True), "vq.first.output_proj.weight")
    if rest is None:
        return y
    with b.layer(
        "vq.rest.output_proj",
        "conv1d",
        c_in=hp.vq_dim,
        c_out=hp.codebook_dim,
        kernel=1,
        t_in=T,
        t_out=T,
        macs=macs,
        macs_seed=macs,
        extra={"projection": True},
    ):
        z = b.linear(Act(rest, True), "vq.rest.output_proj.weight")
        return Act(g.ggml_add(ctx, y.t, z.t), True)


def conv_layer(
    b: GraphBuilder, x: Act, path: str, c_in: int, c_out: int, k: int, dilation: int = 1, bias: bool = True,
    fused_join: bool = False,
) -> Act:
    """A causal conv1d; bias=False leaves the bias to the next node (the fused snake adds it); `fused_join`: a
    streaming call joins its context by kzlab's CPU node (`GraphBuilder.context`)."""
    T = x.T
    macs = c_in * c_out * k * T
    with b.layer(
        path,
        "conv1d",
        c_in=c_in,
        c_out=c_out,
        kernel=k,
        t_in=T,
        t_out=T,
        macs=macs,
        macs_seed=macs,
        extra={"dilation": dilation},
    ):
        return b.conv1d(x, f"{path}.weight", f"{path}.bias" if bias else None, dilation, state=path,
                        fused_join=fused_join)


def convt_record(b: GraphBuilder, path: str, c_in: int, c_out: int, k: int, T: int, stride: int, **extra):
    """The layer context of a transposed conv (MACs on its input frames and, as "seed", on its output)."""
    macs = c_in * c_out * k * T
    return b.layer(
        path,
        "conv_transpose1d",
        c_in=c_in,
        c_out=c_out,
        kernel=k,
        t_in=T,
        t_out=T * stride,
        macs=macs,
        macs_seed=macs * stride,
        extra={"stride": stride, **extra},
    )


def convt_layer(
    b: GraphBuilder, x: Act, path: str, c_in: int, c_out: int, k: int, stride: int, out_cl: bool | None = None
) -> Act:
    """A transposed conv; `out_cl` asks for its output in that memory order (None: the lowering's own)."""
    with convt_record(b, path, c_in, c_out, k, x.T, stride):
        y = b.conv_transpose1d(x, f"{path}.weight", f"{path}.bias", stride, k, state=path)
        if out_cl is None or y.cl == out_cl:
            return y
        return b.as_cl(y) if out_cl else b.as_cf(y)


def snake_layer(b: GraphBuilder, x: Act, path: str, out_cl: bool | None = None, bias: str | None = None) -> Act:
    """SnakeBeta; `out_cl` is the memory order the next conv reads, `bias` the previous conv's bias (both
    used by the fused lowering only, see GraphBuilder.snake)."""
    with b.layer(path, "snake", c_in=x.C, c_out=x.C, t_in=x.T, t_out=x.T):
        return b.snake(x, path, out_cl, bias)


def rms_norm(b: GraphBuilder, x: Act, path: str, weight: str, eps: float) -> Act:
    with b.layer(path, "norm", c_in=x.C, c_out=x.C, t_in=x.T, t_out=x.T):
        x = b.as_cl(x)
        return b.mul_chan(Act(g.ggml_rms_norm(b.ctx, x.t, eps), True), weight)


def attention(b: GraphBuilder, hp: HParams, x: Act, h: Act, i: int, pos, mask) -> Act:
    """Causal self-attention over a sliding window (the mask), RoPE (NeoX order), layer scale, residual.

    Streaming, the keys and values (after RoPE) of the window's other sliding_window - 1 positions come from the
    previous calls (`GraphBuilder.kv_cache`), and the mask (`feed_stream`) hides those not yet decoded."""
    ctx = b.ctx
    T, D, H, KV = x.T, hp.head_dim, hp.num_heads, hp.num_kv_heads
    p = f"tfm.blk.{i}."
    proj = hp.hidden_size * (H + 2 * KV) * D * T + H * D * hp.hidden_size * T
    scores = 2 * H * D * T * T  # the graph computes the full masked T x T scores
    with b.layer(
        f"tfm.blk.{i}.attn",
        "attention",
        c_in=hp.hidden_size,
        c_out=hp.hidden_size,
        t_in=T,
        t_out=T,
        macs=proj + scores,
        macs_seed=proj + scores,
    ):
        q = g.ggml_reshape_3d(ctx, b.linear(h, p + "attn_q.weight").t, D, H, T)
        k = g.ggml_reshape_3d(ctx, b.linear(h, p + "attn_k.weight").t, D, KV, T)
        v = g.ggml_reshape_3d(ctx, b.linear(h, p + "attn_v.weight").t, D, KV, T)
        rope = dict(n_dims=D, mode=g.GGML_ROPE_TYPE_NEOX, n_ctx_orig=0, freq_base=hp.rope_theta)
        q = g.ggml_rope_ext(
            ctx, q, pos, None, rope["n_dims"], rope["mode"], 0, rope["freq_base"], 1.0, 0.0, 1.0, 0.0, 0.0
        )
        k = g.ggml_rope_ext(
            ctx, k, pos, None, rope["n_dims"], rope["mode"], 0, rope["freq_base"], 1.0, 0.0, 1.0, 0.0, 0.0
        )
        k = b.kv_cache(f"tfm.blk.{i}.attn.k", k, hp.sliding_window - 1)  # streaming: [D, KV, window - 1 + T]
        v = b.kv_cache(f"tfm.blk.{i}.attn.v", v, hp.sliding_window - 1)
        o = b.attend(q, k, v, mask, 1.0 / math.sqrt(D))
        o = b.mul_chan(b.linear(o, p + "attn_o.weight"), p + "attn_scale")
        return Act(g.ggml_add(ctx, x.t, o.t), True)


def mlp(b: GraphBuilder, hp: HParams, x: Act, h: Act, i: int) -> Act:
    """SwiGLU MLP with layer scale and residual."""
    ctx = b.ctx
    p = f"tfm.blk.{i}."
    macs = 3 * hp.hidden_size * hp.intermediate_size * x.T
    with b.layer(
        f"tfm.blk.{i}.mlp",
        "mlp",
        c_in=hp.hidden_size,
        c_out=hp.hidden_size,
        t_in=x.T,
        t_out=x.T,
        macs=macs,
        macs_seed=macs,
    ):
        gate = b.linear(h, p + "ffn_gate.weight")
        up = b.linear(h, p + "ffn_up.weight")
        a = Act(g.ggml_mul(ctx, g.ggml_silu(ctx, gate.t), up.t), True)
        y = b.mul_chan(b.linear(a, p + "ffn_down.weight"), p + "ffn_scale")
        return Act(g.ggml_add(ctx, x.t, y.t), True)


def transformer(b: GraphBuilder, hp: HParams, x: Act, pos, mask) -> Act:
    T = x.T
    m = hp.latent_dim * hp.hidden_size * T
    with b.layer(
        "tfm.input_proj", "other", c_in=hp.latent_dim, c_out=hp.hidden_size, t_in=T, t_out=T, macs=m, macs_seed=m
    ):
        x = b.linear(x, "tfm.input_proj.weight", "tfm.input_proj.bias")
    for i in range(hp.num_layers):
        h = rms_norm(b, x, f"tfm.blk.{i}.attn_norm", f"tfm.blk.{i}.attn_norm.weight", hp.rms_norm_eps)
        x = attention(b, hp, x, h, i, pos, mask)
        h = rms_norm(b, x, f"tfm.blk.{i}.ffn_norm", f"tfm.blk.{i}.ffn_norm.weight", hp.rms_norm_eps)
        x = mlp(b, hp, x, h, i)
    x = rms_norm(b, x, "tfm.norm", "tfm.norm.weight", hp.rms_norm_eps)
    with b.layer(
        "tfm.output_proj", "other", c_in=hp.hidden_size, c_out=hp.latent_dim, t_in=T, t_out=T, macs=m, macs_seed=m
    ):
        return b.linear(x, "tfm.output_proj.weight", "tfm.output_proj.bias")


def upsample(b: GraphBuilder, hp: HParams, x: Act, i: int) -> Act:
    """ConvTranspose (k = s) then a ConvNeXt block (causal depthwise conv, LayerNorm, GELU MLP, gamma)."""
    ctx = b.ctx
    L, f = hp.latent_dim, hp.upsampling_ratios[i]
    x = convt_layer(b, x, f"up.{i}.convt", L, L, f, f)
    T = x.T
    p = f"up.{i}."
    with b.layer(
        p + "dwconv",
        "conv1d",
        c_in=L,
        c_out=L,
        kernel=7,
        t_in=T,
        t_out=T,
        macs=7 * L * T,
        macs_seed=7 * L * T,
        extra={"groups": L},
    ):
        h = b.depthwise_conv(x, p + "dwconv.weight", p + "dwconv.bias", state=p + "dwconv")
    with b.layer(p + "norm", "norm", c_in=L, c_out=L, t_in=T, t_out=T):
        h = b.add_bias(b.mul_chan(Act(g.ggml_norm(ctx, h.t, 1e-6), True), p + "norm.weight"), p + "norm.bias")
    m = 2 * 4 * L * L * T
    with b.layer(p + "mlp", "mlp", c_in=L, c_out=L, t_in=T, t_out=T, macs=m, macs_seed=m):
        h = b.linear(h, p + "pw1.weight", p + "pw1.bias")
        h = Act(g.ggml_gelu(ctx, h.t) if b.low.gelu == "tanh" else g.ggml_gelu_erf(ctx, h.t), True)
        h = b.mul_chan(b.linear(h, p + "pw2.weight", p + "pw2.bias"), p + "gamma")
        x = b.as_cl(x)
        return Act(g.ggml_add(ctx, x.t, h.t), True)


def fused_residual_unit(b: GraphBuilder, x: Act, p: str, c: int, dilation: int) -> Act:
    """The residual unit as one kzlab CPU node (kzlab.graph.fused), named by the unit's path.

    The unit's five logical layers are still recorded (with their MACs, for the conv tables and T-evolution),
    marked `fused_into` the unit; the node's time and FLOPs belong to the unit's own row."""
    T = x.T
    d = {"fused_into": p}
    conv1: dict = {"dilation": dilation}
    if b.low.winograd_unit:  # the record keeps the conv's own MACs; its products do fewer (an effective GF/s)
        conv1 |= fused.winograd.record(c, c, T)
    subs = [
        (".act1", "snake", 0, 0, {}),
        (".conv1", "conv1d", 7, c * c * 7 * T, conv1),
        (".act2", "snake", 0, 0, {}),
        (".conv2", "conv1d", 1, c * c * T, {"dilation": 1}),
        (".residual", "other", 0, 0, {}),
    ]
    with b.layer(p, "residual_unit", c_in=c, c_out=c, t_in=T, t_out=T, extra={"fuses": [p + s[0] for s in subs]}):
        w = {name: b.w[f"{p}.{name}"] for name in fused.UNIT_SOURCES[1:]}
        # streaming: the unit reads its input's past (conv1's left context) and writes the call's frames only
        xs, _ = b.context(p, x, 6 * dilation, fused_join=True)
        y = Act(fused.residual_unit(b.ctx, xs.t, xs.cl, w, dilation, b.low.winograd_unit, lead=xs.T - T), True)
    for suffix, kind, k, macs, extra in subs:
        info = {"kernel": k, "macs": macs, "macs_seed": macs} if k else {}
        with b.layer(p + suffix, kind, c_in=c, c_out=c, t_in=T, t_out=T, extra=extra | d, **info):
            pass
    return y


def residual_unit(b: GraphBuilder, x: Act, blk: int, j: int, c: int) -> Act:
    p = f"dec.{blk}.res.{j}"
    if b.low.fused_resunit:
        return fused_residual_unit(b, x, p, c, RESIDUAL_DILATIONS[j])
    fused_snake = b.low.fused_snake  # conv1's bias is added inside act2's node
    h = snake_layer(b, x, p + ".act1", out_cl=b.conv_input_cl(7))
    h = conv_layer(b, h, p + ".conv1", c, c, 7, RESIDUAL_DILATIONS[j], bias=not fused_snake)
    h = snake_layer(b, h, p + ".act2", out_cl=b.conv_input_cl(1), bias=p + ".conv1.bias" if fused_snake else None)
    h = conv_layer(b, h, p + ".conv2", c, c, 1)
    with b.layer(p + ".residual", "other", c_in=c, c_out=c, t_in=x.T, t_out=x.T):
        if h.cl != x.cl:
            h = b.as_cl(h) if x.cl else b.as_cf(h)
        return Act(g.ggml_add(b.ctx, h.t, x.t), x.cl)


def fused_snake_convt(b: GraphBuilder, x: Act, blk: int, cin: int, cout: int, r: int) -> Act:
    """The block's SnakeBeta and transposed conv as one kzlab CPU node, named by the conv's path (the snake's
    layer is recorded, marked `fused_into` it)."""
    T, k = x.T, 2 * r
    sp, cp = f"dec.{blk}.snake", f"dec.{blk}.convt"
    with b.layer(sp, "snake", c_in=cin, c_out=cin, t_in=T, t_out=T, extra={"fused_into": cp}):
        pass
    with convt_record(b, cp, cin, cout, k, T, r, fuses=[sp]):
        w = b.w
        # streaming: the frame before the call, whose products overlap its first
        xs, _ = b.context(cp, x, 1, fused_join=True)
        y = fused.snake_convt(
            b.ctx, xs.t, xs.cl, w[sp + ".alpha"], w[sp + ".beta"], w[cp + ".weight"], w[cp + ".bias"], r,
            lead=xs.T - T,
        )
        return Act(y, True)


def decoder_block(b: GraphBuilder, hp: HParams, x: Act, blk: int) -> Act:
    cin, cout = hp.block_channels(blk)
    r = hp.upsample_rates[blk - 1]
    if b.w.prepared[f"dec.{blk}.convt.weight"].layout == "snake-convt":  # convt="fused" (see weights.py)
        x = fused_snake_convt(b, x, blk, cin, cout, r)
    else:
        x = snake_layer(b, x, f"dec.{blk}.snake", out_cl=b.convt_input_cl())
        # the units' convs read channels-last under ktap: transposed once here, not twice in every unit
        x = convt_layer(b, x, f"dec.{blk}.convt", cin, cout, 2 * r, r, out_cl=b.conv_input_cl(7))
    for j in range(len(RESIDUAL_DILATIONS)):
        x = residual_unit(b, x, blk, j, cout)
    return x


# ---- the whole decoder -------------------------------------------------------------------------------------
def build_decoder(b: GraphBuilder, hp: HParams, frames: int, start: str = "quantizer") -> Act:
    """Build the graph from stage `start` to the clamped waveform; returns the output (1 x samples)."""
    stages = stage_names(hp)
    if start not in stages:
        raise ValueError(f"unknown stage {start!r}")
    first = stages.index(start)
    c, t = stage_input_shape(hp, start, frames)
    if start == "quantizer":
        x = None
        codes = b.input("codes", g.GGML_TYPE_I32, frames, hp.num_quantizers)
    else:
        x = Act(b.input("x", g.GGML_TYPE_F32, t, c), False)  # torch [C, T] memory
    need_tfm = first <= stages.index("pre_transformer")
    if need_tfm:
        pos = b.input("pos", g.GGML_TYPE_I32, frames)
        keys = frames + (hp.sliding_window - 1 if b.carry is not None else 0)  # streaming: the cached ones too
        mask = b.attention_mask(keys, frames)

    run = StageRun(b, stages, x, first)

    L, D, nb = hp.latent_dim, hp.decoder_dim, hp.n_blocks
    run("quantizer", lambda _: quantizer(b, hp, codes, frames))
    run("pre_conv", lambda x: conv_layer(b, x, "pre_conv", hp.codebook_dim, L, 3))
    run("pre_transformer", lambda x: transformer(b, hp, x, pos, mask))
    for i in range(len(hp.upsampling_ratios)):
        run(f"upsample.{i}", lambda x, i=i: upsample(b, hp, x, i))
    run("decoder.0", lambda x: conv_layer(b, x, "dec.0.conv", L, D, 7))
    for blk in range(1, nb + 1):
        run(f"decoder.{blk}", lambda x, blk=blk: decoder_block(b, hp, x, blk))
    run(
        f"decoder.{nb + 1}",
        # the memory order the waveform conv (one output channel) reads
        lambda x: snake_layer(b, x, f"dec.{nb + 1}.snake", out_cl=b.conv_input_cl(7, 1)),
    )
    # the waveform conv reads the last block's frames (7680 a 4-frame call): in the fast mode its streaming context
    # is joined by kzlab's CPU node, not by ggml's one-thread CONCAT (1.2 ms a call)
    run(f"decoder.{nb + 2}", lambda x: conv_layer(b, x, f"dec.{nb + 2}.conv", hp.out_channels, 1, 7,
                                                   fused_join=b.low.mode == "fast"))
    x = run.x
    b.stage = f"decoder.{nb + 2}"
    with b.layer(f"dec.{nb + 2}.clamp", "other", c_in=1, c_out=1, t_in=x.T, t_out=x.T):
        # ggml_clamp works in place (it returns a view); copy first so that decoder.6 stays unclamped
        wav = Act(g.ggml_clamp(b.ctx, g.ggml_cont(b.ctx, x.t), -1.0, 1.0), x.cl)
    b.mark_output("wav", wav)
    return wav


def feed(hp: HParams, frames: int, inputs: dict) -> dict:
    """The graph inputs the caller does not give: the transformer's positions and sliding-window mask."""
    if "pos" not in inputs:
        return {}
    t = np.arange(frames)
    mask = window_mask(t[:, None], t[None, :], hp.sliding_window)
    return {"pos": t.astype(np.int32), "mask": fit_mask(inputs["mask"], mask)}


def feed_stream(hp: HParams, frames: int, position: int, inputs: dict) -> dict:
    """A streaming call's inputs that follow from the shape and the stream's position (the frames decoded before
    it): absolute positions for RoPE, and the sliding-window mask over the cached keys (the window's other
    sliding_window - 1 positions, oldest first) and this call's; keys before the stream's start are hidden."""
    if "pos" not in inputs:
        return {}
    W = hp.sliding_window
    q = position + np.arange(frames)[:, None]
    k = position - (W - 1) + np.arange(W - 1 + frames)[None, :]
    mask = fit_mask(inputs["mask"], window_mask(q, k, W))
    return {"pos": np.arange(position, position + frames, dtype=np.int32), "mask": mask}


def finish(outputs: dict, plan: LoweringPlan, hp: HParams) -> dict:
    """Host post-processing of the graph's outputs: none, the graph ends at the waveform."""
    return outputs
