"""Mimi's decoder, the graph half: one function per block, every node named by its block path.

Each block computes what transformers 4.57.3's `MimiModel` (codes) or pocket-tts 4.0.1's `MimiModel` (latents)
computes; the two differ only where the hyperparameters say (RoPE's pairing, GELU's form), see spec.py. Every
conv is causal (zeros on the left offline, the previous call's frames in a stream), so the decode streams
exactly with its state carried (`GraphBuilder.context`, `kv_cache`, `feed_stream`).
"""

from __future__ import annotations

import math

import numpy as np
from ggml import ggml as g

from kzlab.arch.mimi.spec import MimiHParams, stage_input_shape, stage_names
from kzlab.graph.builder import Act, GraphBuilder, StageRun, fit_mask, window_mask
from kzlab.graph.options import LoweringPlan


# ---- input ------------------------------------------------------------------------------------------------
def quantizer(b: GraphBuilder, hp: MimiHParams, codes, T: int) -> Act:
    """The split RVQ: each branch's codebook rows summed, then its projection; the branches added."""
    ctx = b.ctx
    nb1 = int(codes.contents.nb[1])
    branches = [("semantic", range(min(hp.num_semantic, hp.num_quantizers)), 0),
                ("acoustic", range(hp.num_semantic, hp.num_quantizers), hp.num_semantic)]
    out = None
    for branch, rows, first in branches:
        if not rows:
            continue
        with b.layer(f"vq.{branch}", "embedding", c_out=hp.codebook_dim, t_in=T, t_out=T):
            acc = None
            for i in rows:
                row = g.ggml_view_1d(ctx, codes, T, i * nb1)
                e = g.ggml_get_rows(ctx, b.w[f"vq.{branch}.{i - first}.codebook"], row)
                acc = e if acc is None else g.ggml_add(ctx, acc, e)
        y = Act(acc, True)
        if f"vq.{branch}.output_proj.weight" in b.w.prepared:
            macs = hp.codebook_dim * hp.hidden * T
            with b.layer(f"vq.{branch}.output_proj", "conv1d", c_in=hp.codebook_dim, c_out=hp.hidden, kernel=1,
                         t_in=T, t_out=T, macs=macs, macs_seed=macs, extra={"projection": True}):
                y = b.linear(y, f"vq.{branch}.output_proj.weight")
        out = y if out is None else Act(g.ggml_add(ctx, out.t, y.t), True)
    return out


def latent(b: GraphBuilder, hp: MimiHParams, x: Act) -> Act:
    """PocketTTS's latents: denormalised per channel (x * emb_std + emb_mean), then projected (`quant_out`)."""
    T = x.T
    with b.layer("latent.denorm", "other", c_in=hp.latent_dim, c_out=hp.latent_dim, t_in=T, t_out=T):
        x = b.add_bias(b.mul_chan(b.as_cl(x), "latent.emb_std"), "latent.emb_mean")
    macs = hp.latent_dim * hp.hidden * T
    with b.layer("latent.output_proj", "conv1d", c_in=hp.latent_dim, c_out=hp.hidden, kernel=1, t_in=T, t_out=T,
                 macs=macs, macs_seed=macs, extra={"projection": True}):
        return b.linear(x, "latent.output_proj.weight")


def upsample(b: GraphBuilder, hp: MimiHParams, x: Act) -> Act:
    T, s, k = x.T, hp.upsample_stride, hp.upsample_kernel
    macs = hp.hidden * k * T
    with b.layer("upsample", "conv_transpose1d", c_in=hp.hidden, c_out=hp.hidden, kernel=k, t_in=T, t_out=T * s,
                 macs=macs, macs_seed=macs, extra={"stride": s, "groups": hp.hidden}):
        return b.depthwise_conv_transpose1d(x, "upsample.dwconv.weight", s, state="upsample")


# ---- transformer ------------------------------------------------------------------------------------------
def layer_norm(b: GraphBuilder, hp: MimiHParams, x: Act, path: str) -> Act:
    with b.layer(path, "norm", c_in=x.C, c_out=x.C, t_in=x.T, t_out=x.T):
        x = b.as_cl(x)
        y = Act(g.ggml_norm(b.ctx, x.t, hp.norm_eps), True)
        return b.add_bias(b.mul_chan(y, path + ".weight"), path + ".bias")


def attention(b: GraphBuilder, hp: MimiHParams, x: Act, h: Act, i: int, pos, mask) -> Act:
    """Self-attention over the window (the mask), RoPE (rotate-half or interleaved pairs), layer scale, residual.
    Streaming, the keys and values (after RoPE) of the window's other context - 1 steps come from the previous
    calls (`GraphBuilder.kv_cache`)."""
    ctx = b.ctx
    T, D, H = x.T, hp.head_dim, hp.num_heads
    p = f"tfm.blk.{i}."
    proj = 4 * hp.hidden * H * D * T
    scores = 2 * H * D * T * T
    with b.layer(f"tfm.blk.{i}.attn", "attention", c_in=hp.hidden, c_out=hp.hidden, t_in=T, t_out=T,
                 macs=proj + scores, macs_seed=proj + scores):
        q = g.ggml_reshape_3d(ctx, b.linear(h, p + "attn_q.weight").t, D, H, T)
        k = g.ggml_reshape_3d(ctx, b.linear(h, p + "attn_k.weight").t, D, H, T)
        v = g.ggml_reshape_3d(ctx, b.linear(h, p + "attn_v.weight").t, D, H, T)
        mode = 0 if hp.rope_interleaved else g.GGML_ROPE_TYPE_NEOX
        q = g.ggml_rope_ext(ctx, q, pos, None, D, mode, 0, hp.rope_theta, 1.0, 0.0, 1.0, 0.0, 0.0)
        k = g.ggml_rope_ext(ctx, k, pos, None, D, mode, 0, hp.rope_theta, 1.0, 0.0, 1.0, 0.0, 0.0)
        k = b.kv_cache(f"tfm.blk.{i}.attn.k", k, hp.context - 1)
        v = b.kv_cache(f"tfm.blk.{i}.attn.v", v, hp.context - 1)
        o = b.attend(q, k, v, mask, 1.0 / math.sqrt(D))
        o = b.mul_chan(b.linear(o, p + "attn_o.weight"), p + "attn_scale")
        return Act(g.ggml_add(ctx, x.t, o.t), True)


def mlp(b: GraphBuilder, hp: MimiHParams, x: Act, h: Act, i: int) -> Act:
    """fc1, GELU (the model's form), fc2, layer scale, residual."""
    p = f"tfm.blk.{i}."
    macs = 2 * hp.hidden * hp.intermediate_size * x.T
    with b.layer(f"tfm.blk.{i}.mlp", "mlp", c_in=hp.hidden, c_out=hp.hidden, t_in=x.T, t_out=x.T, macs=macs,
                 macs_seed=macs):
        u = b.linear(h, p + "ffn_up.weight").t
        u = g.ggml_gelu(b.ctx, u) if hp.gelu_tanh else g.ggml_gelu_erf(b.ctx, u)
        y = b.mul_chan(b.linear(Act(u, True), p + "ffn_down.weight"), p + "ffn_scale")
        return Act(g.ggml_add(b.ctx, x.t, y.t), True)


def transformer_layer(b: GraphBuilder, hp: MimiHParams, x: Act, i: int, pos, mask) -> Act:
    x = b.as_cl(x)
    h = layer_norm(b, hp, x, f"tfm.blk.{i}.attn_norm")
    x = attention(b, hp, x, h, i, pos, mask)
    h = layer_norm(b, hp, x, f"tfm.blk.{i}.ffn_norm")
    return mlp(b, hp, x, h, i)


# ---- SEANet decoder ---------------------------------------------------------------------------------------
def elu(b: GraphBuilder, x: Act, path: str) -> Act:
    with b.layer(path, "other", c_in=x.C, c_out=x.C, t_in=x.T, t_out=x.T, extra={"activation": "elu"}):
        return Act(g.ggml_elu(b.ctx, x.t), x.cl)


def conv_layer(b: GraphBuilder, x: Act, path: str, c_in: int, c_out: int, k: int, dilation: int = 1) -> Act:
    """A causal conv1d with bias, its left context carried when streaming."""
    macs = c_in * c_out * k * x.T
    with b.layer(path, "conv1d", c_in=c_in, c_out=c_out, kernel=k, t_in=x.T, t_out=x.T, macs=macs, macs_seed=macs,
                 extra={"dilation": dilation}):
        return b.conv1d(x, f"{path}.weight", f"{path}.bias", dilation, state=path)


def convt_layer(b: GraphBuilder, x: Act, path: str, c_in: int, c_out: int, stride: int) -> Act:
    k = 2 * stride
    macs = c_in * c_out * k * x.T
    with b.layer(path, "conv_transpose1d", c_in=c_in, c_out=c_out, kernel=k, t_in=x.T, t_out=x.T * stride,
                 macs=macs, macs_seed=macs * stride, extra={"stride": stride}):
        return b.conv_transpose1d(x, f"{path}.weight", f"{path}.bias", stride, k, state=path)


def residual_unit(b: GraphBuilder, hp: MimiHParams, x: Act, j: int, m: int, c: int) -> Act:
    p = f"dec.{j}.res.{m}"
    h = elu(b, x, p + ".act1")
    h = conv_layer(b, h, p + ".conv1", c, c // hp.compress, hp.residual_kernel, hp.dilation(m))
    h = elu(b, h, p + ".act2")
    h = conv_layer(b, h, p + ".conv2", c // hp.compress, c, 1)
    with b.layer(p + ".residual", "other", c_in=c, c_out=c, t_in=x.T, t_out=x.T):
        if h.cl != x.cl:
            h = b.as_cl(h) if x.cl else b.as_cf(h)
        return Act(g.ggml_add(b.ctx, h.t, x.t), x.cl)


def decoder_block(b: GraphBuilder, hp: MimiHParams, x: Act, j: int) -> Act:
    cin, cout = hp.block_channels(j)
    x = elu(b, x, f"dec.{j}.act")
    x = convt_layer(b, x, f"dec.{j}.convt", cin, cout, hp.ratios[j - 1])
    for m in range(hp.residual_layers):
        x = residual_unit(b, hp, x, j, m, cout)
    return x


# ---- the whole decoder ------------------------------------------------------------------------------------
def build_decoder(b: GraphBuilder, hp: MimiHParams, frames: int, start: str | None = None) -> Act:
    """Build the graph from stage `start` (default: the input's) to the waveform; returns it (1 x samples)."""
    stages = stage_names(hp)
    start = start or stages[0]
    if start not in stages:
        raise ValueError(f"unknown stage {start!r}")
    first = stages.index(start)
    c, t = stage_input_shape(hp, start, frames)
    if start == "quantizer":
        x = None
        codes = b.input("codes", g.GGML_TYPE_I32, frames, hp.num_quantizers)
    elif first == 0:  # latents: the decoder's input frames, named as codes are (kzlab.codes), float32
        x = Act(b.input("codes", g.GGML_TYPE_F32, t, c), False)
    else:
        x = Act(b.input("x", g.GGML_TYPE_F32, t, c), False)  # torch [C, T] memory
    steps = frames * hp.upsample_stride
    if hp.num_layers and first <= stages.index(f"transformer.{hp.num_layers - 1}"):
        pos = b.input("pos", g.GGML_TYPE_I32, steps)
        keys = steps + (hp.context - 1 if b.carry is not None else 0)
        mask = b.attention_mask(keys, steps)

    run = StageRun(b, stages, x, first)

    if stages[0] == "quantizer":
        run("quantizer", lambda _: quantizer(b, hp, codes, frames))
    else:
        run("latent", lambda x: latent(b, hp, x))
    run("upsample", lambda x: upsample(b, hp, x))
    for i in range(hp.num_layers):
        run(f"transformer.{i}", lambda x, i=i: transformer_layer(b, hp, x, i, pos, mask))
    run("decoder.0", lambda x: conv_layer(b, x, "dec.0.conv", hp.hidden, hp.seanet_channels, hp.kernel_size))
    for j in range(1, hp.n_blocks + 1):
        run(f"decoder.{j}", lambda x, j=j: decoder_block(b, hp, x, j))
    last = hp.n_blocks + 1

    def out(x: Act) -> Act:
        x = elu(b, x, f"dec.{last}.act")
        return conv_layer(b, x, f"dec.{last}.conv", hp.num_filters, 1, hp.last_kernel)

    run(f"decoder.{last}", out)
    x = run.x
    b.stage = f"decoder.{last}"
    wav = Act(g.ggml_cont(b.ctx, x.t), x.cl) if x.t.contents.view_src else x
    b.mark_output("wav", wav)
    return wav


def feed(hp: MimiHParams, frames: int, inputs: dict) -> dict:
    """The transformer's positions (steps from 0) and its causal window mask."""
    if "pos" not in inputs:
        return {}
    n = frames * hp.upsample_stride
    steps = np.arange(n)
    mask = window_mask(steps[:, None], steps[None, :], hp.context)
    return {"pos": steps.astype(np.int32), "mask": fit_mask(inputs["mask"], mask)}


def feed_stream(hp: MimiHParams, frames: int, position: int, inputs: dict) -> dict:
    """A streaming call's positions (absolute steps: `position` frames decoded before it) and the window's mask
    over the cached keys (the context - 1 steps before the call, oldest first) and the call's; keys before the
    stream's start are hidden."""
    if "pos" not in inputs:
        return {}
    s0, n, W = position * hp.upsample_stride, frames * hp.upsample_stride, hp.context
    q = s0 + np.arange(n)[:, None]
    k = s0 - (W - 1) + np.arange(W - 1 + n)[None, :]
    return {"pos": np.arange(s0, s0 + n, dtype=np.int32), "mask": fit_mask(inputs["mask"], window_mask(q, k, W))}


def finish(outputs: dict, plan: LoweringPlan, hp: MimiHParams) -> dict:
    """Host post-processing of the graph's outputs: none, the graph ends at the waveform."""
    return outputs
