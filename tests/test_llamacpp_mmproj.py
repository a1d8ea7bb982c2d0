"""llama.cpp's own Qwen3-TTS files (tests/data/llamacpp-mmproj, see PROVENANCE.md): the decoder is the `a.gen.wav.*`
part of the `clip` mmproj file, read with no map from the user through the built-in map `llamacpp-mmproj` (the 15
acoustic codebooks split out of their stacked tensor, SnakeBeta read back from its folded form); the talker file
and a clip file with no decoder are refused with a message that says where the decoder is. The file's clip.*
metadata is the speaker encoder's and the code predictor's, so it is not read; the map gives what clip.cpp
hard-codes (16 heads of 64), and the tests give the tiny model's 4 heads.

Bounds by the types the files really hold: the converter stores the conv kernels in F16 whatever the outtype, so
the "F32" file's bound is the F16 one, 40 dB; the F16 file 40 dB; Q8_0 25 dB. BF16 keeps three mantissa bits
fewer than F16: the file's own values, decoded in F32 arithmetic, sit at 40.5 dB from PyTorch (tiny; 40.0 dB on
the full-size file), which the test computes; kzlab meets that floor with `wtype="f32"` (products in F32) and
stays within 3 dB of it natively (ggml's BF16 products also round the activations to BF16)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import stages_below

import kzlab
from kzlab.errors import InvalidModelError

DATA = Path(__file__).parent / "data"
DIR = DATA / "llamacpp-mmproj"
REF = DATA / "qwen3-tts-12hz-tiny" / "reference.npz"
HEADS = {"num_heads": 4}


def test_the_mmproj_file_is_recognised_and_its_other_parts_left_alone():
    m = kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-f32.gguf", hparams=HEADS)
    assert m.layout == "llamacpp-mmproj" and m.family == "qwen3-tts-12hz"
    assert m.hparams.num_quantizers == 16 and m["vq.rest.14.codebook"].shape == m["vq.first.codebook"].shape
    other = next(n for n in m.notes if "not used by the decoder" in n)
    assert "a.gen.code." in other or "a.conv" in other or "mm.a" in other, other
    assert any("stored folded read back" in n for n in m.notes)
    assert {w.type for r, w in m.weights.items() if r.endswith("conv1.weight")} == {"F16"}  # as stored


def test_the_clip_metadata_is_not_read_as_the_decoders_and_the_map_gives_what_clip_cpp_hard_codes():
    # the file's clip.audio.* / clip.gen.audio.* keys (speaker encoder, code predictor) end in
    # attention.head_count like a decoder's would; read as the decoder's they gave 1 head of 1024 on a full file
    raw_meta = kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-f32.gguf", hparams=HEADS).metadata
    assert any(k.endswith("attention.head_count") for k in raw_meta)
    m = kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-f32.gguf")
    assert m.hparams.num_heads == 16 and m.hparams.sliding_window == 72  # clip.cpp:1871-1882, given by the map
    assert m.hparams_given["num_heads"] == 16
    assert any("given by the layout map llamacpp-mmproj" in n and "num_heads=16" in n for n in m.notes), m.notes
    assert any("metadata describes its other parts" in n for n in m.notes)
    user = kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-f32.gguf", hparams=HEADS)  # the user's value wins
    assert user.hparams.num_heads == 4 and user.hparams.head_dim == 16
    assert any(n.startswith("hyperparameters given, not read from the file: num_heads=4") for n in user.notes)


@pytest.mark.parametrize("outtype,bound", [("f32", 40.0), ("f16", 40.0), ("bf16", 30.0), ("q8_0", 25.0)])
def test_every_stage_matches_pytorch(outtype, bound):
    ref = dict(np.load(REF))
    with kzlab.load(DIR / f"mmproj-qwen3tts-tiny-{outtype}.gguf", hparams=HEADS, backend="cpu", sched=False,
                    threads=2) as d:
        low = stages_below(d, ref, bound, must=("quantizer", "pre_transformer", "decoder.4", "wav"))
    assert not low, f"{outtype}: stages under {bound} dB: {low}"


def test_the_talker_file_points_to_its_mmproj_file(capsys):
    from kzlab.cli import main

    with pytest.raises(InvalidModelError, match="the decoder is in the mmproj-\\*.gguf file beside it"):
        kzlab.load_model(DIR / "talker-qwen3tts-tiny-f32.gguf")
    assert main(["info", str(DIR / "talker-qwen3tts-tiny-f32.gguf")]) != 0
    assert "mmproj" in capsys.readouterr().err


def _with_rest_codebook(monkeypatch, data):
    import dataclasses

    from kzlab.formats import reader

    raw = reader.read(DIR / "mmproj-qwen3tts-tiny-f32.gguf")
    name = "a.gen.wav.quant.rest.codebook.weight"
    t = raw.tensors[name]
    bad = dataclasses.replace(raw, tensors={**raw.tensors, name: dataclasses.replace(t, shape=data.shape, data=data)})
    monkeypatch.setattr(reader, "read", lambda path: bad)
    return t.data


@pytest.mark.parametrize("cut", ["flat", "empty"])
def test_a_stacked_codebook_that_is_not_a_stack_is_refused(monkeypatch, cut):
    from kzlab.formats import reader

    full = reader.read(DIR / "mmproj-qwen3tts-tiny-f32.gguf").tensors["a.gen.wav.quant.rest.codebook.weight"].data
    data = full[0] if cut == "flat" else full[:0]  # the stack's outer axis missing, or no part at all
    _with_rest_codebook(monkeypatch, data)
    with pytest.raises(InvalidModelError):
        kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-f32.gguf", hparams=HEADS)


def test_a_shallower_stack_is_a_decoder_of_fewer_codebooks_and_says_so(monkeypatch):
    from kzlab.formats import reader

    full = reader.read(DIR / "mmproj-qwen3tts-tiny-f32.gguf").tensors["a.gen.wav.quant.rest.codebook.weight"].data
    _with_rest_codebook(monkeypatch, full[:14])
    m = kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-f32.gguf", hparams=HEADS)
    assert m.hparams.num_quantizers == 15  # the depth is the file's only word on the codebook count
    with kzlab.Decoder(m, backend="cpu", sched=False, threads=2) as d:
        with pytest.raises(kzlab.errors.InvalidInputError):
            d.decode(np.zeros((16, 4), np.int32))  # codes of the 16-codebook model do not fit it


def test_a_clip_file_without_the_decoder_says_there_is_none(monkeypatch):
    import dataclasses

    from kzlab.formats import reader

    raw = reader.read(DIR / "mmproj-qwen3tts-tiny-f32.gguf")  # as a vision or speech-in mmproj: no a.gen.wav.*
    other = dataclasses.replace(raw, tensors={n: t for n, t in raw.tensors.items() if not n.startswith("a.gen.wav.")})
    monkeypatch.setattr(reader, "read", lambda path: other)
    with pytest.raises(InvalidModelError, match="a clip \\(mmproj\\) file with no decoder kzlab knows in it"):
        kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-f32.gguf")


def test_a_map_whose_metadata_key_is_not_a_boolean_is_refused():
    from kzlab.errors import LayoutError
    from kzlab.formats.layout import LayoutMap

    with pytest.raises(LayoutError, match="metadata must be true or false"):
        LayoutMap.from_dict({"layout": {"name": "x", "metadata": "no"}, "tensors": {"a": "b"}}, source="x.toml")


def test_the_bf16_file_meets_the_floor_its_own_values_set():
    from helpers import bf16_values_in_f32

    from kzlab.audio import snr_db
    from kzlab.graph.options import Lowering
    from kzlab.runtime.backends import BackendSpec
    from kzlab.runtime.decoder import Decoder

    ref = dict(np.load(REF))
    f32 = kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-f32.gguf", hparams=HEADS)
    bf16 = kzlab.load_model(DIR / "mmproj-qwen3tts-tiny-bf16.gguf", hparams=HEADS)
    rounded = bf16_values_in_f32(f32, bf16)
    for role, w in bf16.weights.items():
        if w.type == "BF16":  # the file's values are the F32 file's rounded to nearest even: the floor is exact
            np.testing.assert_array_equal(rounded.weights[role].data, w.f32())
    assert sum(w.type == "BF16" for w in bf16.weights.values()) >= 30
    spec = BackendSpec.from_kw(None, backend="cpu", threads=2, sched=False)
    with Decoder(rounded, Lowering(), spec, None) as d:
        floor = snr_db(d.decode(ref["codes"]), ref["wav"])
    with kzlab.load(DIR / "mmproj-qwen3tts-tiny-bf16.gguf", hparams=HEADS, wtype="f32", backend="cpu", threads=2,
                    sched=False) as d:
        wide = snr_db(d.decode(ref["codes"]), ref["wav"])
    with kzlab.load(DIR / "mmproj-qwen3tts-tiny-bf16.gguf", hparams=HEADS, backend="cpu", threads=2, sched=False) as d:
        native = snr_db(d.decode(ref["codes"]), ref["wav"])
    # F32 arithmetic on the same values, in another graph: their difference is F32 rounding, ~100 dB below the signal
    assert abs(wide - floor) < 0.1, (wide, floor)
    assert wide >= 40.0, wide
    assert floor - 3.0 <= native <= floor + 0.1, (native, floor)
