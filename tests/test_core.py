"""Issue: load every decoder layout and decode codes, matching upstream PyTorch (tests/data/reference.npz)."""

from __future__ import annotations

import pytest
from conftest import TINY, snr_db

import kzlab
from kzlab.loader import load_model

STAGES = [
    "quantizer",
    "pre_conv",
    "pre_transformer",
    "upsample.0",
    "upsample.1",
    "decoder.0",
    "decoder.1",
    "decoder.2",
    "decoder.3",
    "decoder.4",
    "decoder.6",
]


def decode_all(path, ref, **kw):
    with kzlab.load(path, **kw) as d:
        return d.decode(ref["codes"], intermediates=True)


def test_qwentts_f32_every_stage(ref):
    out = decode_all(TINY / "qwentts-tokenizer-f32.gguf", ref)
    assert out.wav.shape == ref["wav"].shape
    assert snr_db(out.wav, ref["wav"]) >= 70
    for s in STAGES:
        assert out.stages[s].shape == ref[s].shape, s
        assert snr_db(out.stages[s], ref[s]) >= 70, s


def test_crispasr_f16(ref):
    m = load_model(TINY / "crispasr-tokenizer-f16.gguf")
    assert m.layout == "crispasr"
    assert m.dtype_histogram()["F16"] > 0
    out = decode_all(TINY / "crispasr-tokenizer-f16.gguf", ref)
    assert snr_db(out.wav, ref["wav"]) >= 40
    for s in STAGES:
        assert snr_db(out.stages[s], ref[s]) >= 40, s


@pytest.mark.parametrize("outtype,bound", [("f32", 70), ("f16", 40), ("q8_0", 30)])
def test_convert_then_decode(converted, ref, outtype, bound):
    m = load_model(converted[outtype])
    assert m.layout == "qwentts"
    if outtype == "q8_0":
        assert m.dtype_histogram().get("Q8_0", 0) >= 10
    out = decode_all(converted[outtype], ref)
    assert snr_db(out.wav, ref["wav"]) >= bound
    for s in STAGES:
        assert snr_db(out.stages[s], ref[s]) >= bound, s


@pytest.mark.parametrize("outtype,bound", [("f32", 70), ("f16", 40), ("q8_0", 30)])
def test_qwen3tts_cpp_layout(qwen3tts_cpp_files, ref, outtype, bound):
    m = load_model(qwen3tts_cpp_files[outtype])
    assert m.layout == "qwen3tts-cpp"
    out = decode_all(qwen3tts_cpp_files[outtype], ref)
    assert snr_db(out.wav, ref["wav"]) >= bound


def test_hf_directory_directly(ref):
    m = load_model(TINY / "hf")
    assert m.layout == "hf" and m.kind == "safetensors"
    out = decode_all(TINY / "hf", ref)
    assert snr_db(out.wav, ref["wav"]) >= 70


def test_chunked_decode_matches_upstream(ref):
    with kzlab.load(TINY / "qwentts-tokenizer-f32.gguf") as d:
        wav = d.decode(ref["codes_long"], chunked=True)
    assert wav.shape == ref["wav_long_chunked"].shape
    assert snr_db(wav, ref["wav_long_chunked"]) >= 70


def test_decode_from_latent_equals_full_decode(ref):
    with kzlab.load(TINY / "qwentts-tokenizer-f32.gguf") as d:
        full = d.decode(ref["codes"])
        w2 = d.decode_from("latent", ref["upsample.1"])
        w3 = d.decode_from("decoder.3", ref["decoder.2"])
    assert snr_db(w2, ref["wav"]) >= 70
    assert snr_db(w3, ref["wav"]) >= 70
    assert snr_db(w2, full) >= 70


def test_hparams_agree_across_layouts(converted):
    hps = [
        load_model(p).hparams
        for p in (
            TINY / "qwentts-tokenizer-f32.gguf",
            TINY / "crispasr-tokenizer-f16.gguf",
            TINY / "hf",
            converted["f16"],
        )
    ]
    assert all(h == hps[0] for h in hps)
    h = hps[0]
    assert (h.vq_dim, h.codebook_dim, h.num_heads, h.head_dim, h.sliding_window) == (16, 32, 4, 16, 72)
    assert h.upsample_rates == (8, 5, 4, 3) and h.upsampling_ratios == (2, 2)


def test_codebook_dim_internal_warning():
    """Metadata the shapes contradict is a warning, unless the layout knows its writer gets it wrong."""
    import dataclasses

    from kzlab.formats.layout import get_layout

    plain = dataclasses.replace(get_layout("qwentts"), quirks={})
    with pytest.warns(UserWarning, match="vq_dim = 256 but the tensors say 16"):
        load_model(TINY / "qwentts-tokenizer-f32.gguf", layout=plain)


def test_weights_are_memory_mapped_views():
    m = load_model(TINY / "qwentts-tokenizer-f32.gguf")
    w = m["dec.2.res.1.conv1.weight"]
    assert not w.data.flags.owndata  # a view of the file, not a copy
    from kzlab.graph.options import Lowering
    from kzlab.graph.prepared import prepare_weights

    prepared = prepare_weights(m, Lowering(conv="im2col-f32", conv_src1="data").resolve(cpu_only=True))
    assert prepared["dec.2.res.1.conv1.weight"].zero_copy


@pytest.mark.parametrize("resunit", ["ops", "fused"])
def test_block_paths_name_every_node(ref, resunit):
    from kzlab.graph.options import Lowering

    with kzlab.load(TINY / "qwentts-tokenizer-f32.gguf", lowering=Lowering(resunit=resunit)) as d:
        bg = d.session.graph(ref["codes"].shape[1])
        names = [n.contents.name.decode() for n in bg.nodes()]
    assert all(n for n in names)
    if resunit == "ops":
        assert any(n.startswith("dec.3.res.1.conv1:") for n in names)
    else:  # one node per unit, named by the unit; its five layers are recorded as fused into it
        assert "dec.3.res.1:CUSTOM" in names and not any(n.startswith("dec.3.res.1.") for n in names)
        fused_into = {lay.path: lay.extra.get("fused_into") for lay in bg.layers}
        assert fused_into["dec.3.res.1.conv1"] == "dec.3.res.1"
    assert any(n.startswith("tfm.blk.1.attn:") for n in names)
    paths = {lay.path for lay in bg.layers}
    layer_of = {n.split(":")[0] for n in names if ":" in n}
    assert layer_of <= paths | {"graph"}


def test_a_known_layout_quirk_is_a_note_not_a_warning():
    """qwentts.cpp writes vq_dim 256 for every model: its layout knows it, so loading says it once, in the notes."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = load_model(TINY / "qwentts-tokenizer-f32.gguf")
    assert [n for n in m.notes if "vq_dim = 256" in n and "known quirk" in n]
