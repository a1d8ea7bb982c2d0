"""The transformers' attention in its two lowerings (`attn`): one FLASH_ATTN_EXT node on the CPU, two products
around SOFT_MAX where a device takes part; both compute the same decode, offline and streaming, and the profile
counts the same FLOPs for both."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY, snr_db

import kzlab
from kzlab.analysis.flops import TensorInfo, op_flops
from kzlab.analysis.profile import profile
from kzlab.graph.builder import fit_mask, window_mask
from kzlab.graph.options import PRESETS, Lowering

#: (decoder, frames, bound in dB): the first family's tiny F32 file, kyutai/mimi's and PocketTTS's tiny built-ins
#: (their windows are 250 steps: 140 frames of 2 steps, and 20 of 16, run past them). PocketTTS's file keeps its
#: convs F16, as llama.cpp's mmproj does: ggml-cpu rounds a product's activations to F16 (2^-11 relative), and a
#: float32 difference of an ulp upstream flips some of those roundings (measured 81.8 dB there). The first family's
#: BigVGAN carries a rounding difference to the waveform the most (measured 102.0 dB, 128.8 for kyutai/mimi's)
DECODERS = [(str(TINY / "qwentts-tokenizer-f32.gguf"), 12, 90), ("mimi-tiny", 140, 100), ("pockettts-tiny", 20, 60)]


def test_attn_auto_is_flash_on_the_cpu_and_mulmat_where_a_device_takes_part():
    assert Lowering().resolve(cpu_only=True).attn == "flash"
    assert Lowering().resolve(cpu_only=False).attn == "mulmat"
    # the graph a device port runs (and the simulator places) keeps the products, on any backend
    assert Lowering().portable().resolve(cpu_only=True).attn == "mulmat"
    assert PRESETS["device"].resolve(cpu_only=True).attn == "mulmat"
    # what is asked is kept, and the plan's label says flash where it runs
    assert Lowering(attn="mulmat").resolve(cpu_only=True).attn == "mulmat"
    assert Lowering(attn="flash").resolve(cpu_only=False).attn == "flash"
    assert "attn=flash" in Lowering().resolve(cpu_only=True).label()
    assert "attn=" not in Lowering().resolve(cpu_only=False).label()
    with pytest.raises(kzlab.InvalidOptionError, match="attn='fused'"):
        Lowering(attn="fused")


def random_input(dec: kzlab.Decoder, frames: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dec.takes_codes:
        hp = dec.model.hparams
        return rng.integers(0, hp.codebook_size, (hp.num_quantizers, frames)).astype(np.int32)
    return rng.standard_normal((32, frames)).astype(np.float32)


@pytest.mark.parametrize(("model", "frames", "bound"), DECODERS)
def test_flash_and_mulmat_compute_the_same_decode(model, frames, bound):
    """Both lowerings compute every score in float32; they differ in the order of the softmax's sums (FLASH_ATTN_EXT
    keeps a running maximum and rescales) and in where exp rounds, some ulps per score, which the decoder carries to
    the waveform at well above 100 dB where the products are float32."""
    wavs, ops = {}, {}
    for attn in ("flash", "mulmat"):
        with kzlab.load(model, lowering=Lowering(attn=attn), threads=2) as dec:
            assert dec.lowering.attn == attn
            x = random_input(dec, frames)
            wavs[attn] = dec.decode(x)
            prof = profile(dec, codes=x, repeat=1, warmup=0, peak=False, progress=False)
            ops[attn] = {r["op"] for r in prof.by_op()}
    assert "FLASH_ATTN_EXT" in ops["flash"] and "SOFT_MAX" not in ops["flash"]
    assert "SOFT_MAX" in ops["mulmat"] and "FLASH_ATTN_EXT" not in ops["mulmat"]
    assert snr_db(wavs["flash"], wavs["mulmat"]) >= bound


@pytest.mark.parametrize("attn", ["flash", "mulmat"])
def test_both_attentions_stream_exactly(attn):
    """The window's keys and values come from the state in either lowering: a stream in irregular chunks equals the
    offline decode of the same lowering."""
    with kzlab.load("mimi-tiny", lowering=Lowering(attn=attn), threads=2) as dec:
        x = random_input(dec, 140)
        offline = dec.decode(x)
        streamed = dec.stream().run(x, [1, 3, 7, 2, 72, 5])
    assert snr_db(streamed, offline) >= 100


def test_the_mask_is_written_as_its_input_holds_it():
    from ggml import ggml as g

    q, k = np.arange(5)[:, None], np.arange(-2, 5)[None, :]
    m = window_mask(q, k, 3)

    class Input:  # what fit_mask reads of a graph input: its type and ne
        def __init__(self, type_, ne):
            self.contents = type("T", (), {"type": type_, "ne": ne})()

    assert fit_mask(Input(g.GGML_TYPE_F32, (7, 5)), m) is m
    h = fit_mask(Input(g.GGML_TYPE_F16, (7, 32)), m)
    assert h.dtype == np.float16 and h.shape == (32, 7)
    np.testing.assert_array_equal(h[:5], m.astype(np.float16))
    assert np.all(np.isneginf(h[5:]))


def test_flash_attention_counts_the_products_and_softmax_it_replaces():
    D, H, KV, Tq, Tk = 64, 8, 2, 50, 299
    q, k, v = (TensorInfo((D, T, n, 1), "F32", 4 * D * T * n) for T, n in ((Tq, H), (Tk, KV), (Tk, KV)))
    mask = TensorInfo((Tk, 64, 1, 1), "F16", 2 * Tk * 64)
    out = TensorInfo((D, H, Tq, 1), "F32", 4 * D * H * Tq)
    scores = TensorInfo((Tk, Tq, H, 1), "F32", 4 * Tk * Tq * H)
    vt, kqv = TensorInfo((Tk, D, KV, 1), "F32", 0), TensorInfo((D, Tq, H, 1), "F32", 0)
    unfused = (op_flops("MUL_MAT", scores, [k, q]) + op_flops("SOFT_MAX", scores, [scores])
               + op_flops("MUL_MAT", kqv, [vt, scores]))
    assert op_flops("FLASH_ATTN_EXT", out, [q, k, v, mask]) == unfused
