"""audio.cpp's packed Qwen3-TTS file (tests/data/audiocpp-qwen3tts, see PROVENANCE.md) decodes with no map from the
user: the built-in map `audiocpp-qwen3tts` reads names through `audiocpp.tensor_names`, keeps the speech tokenizer
(`speech_tokenizer_weights/`, upstream names, the hf map's rules), leaves the talker alone and takes the
hyperparameters from the embedded `speech_tokenizer/config.json`. Bounds by the types the file holds: F32 70 dB at
every stage, the Q8_0 file 25 dB. A packed file whose tables do not add up is refused with a message."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import stages_below

import kzlab
from kzlab.errors import InvalidModelError
from kzlab.formats import reader
from kzlab.formats.layout import get_layout

DATA = Path(__file__).parent / "data"
FILES = {t: DATA / "audiocpp-qwen3tts" / f"audiocpp-qwen3tts-tiny-{t}.gguf" for t in ("f32", "q8_0")}
REF = DATA / "qwen3-tts-12hz-tiny" / "reference.npz"


def test_the_packed_file_is_recognised_and_read_through_its_tables():
    raw = reader.read(FILES["f32"])
    assert any(n.startswith("_audiocpp.") for n in raw.tensors)  # names too long for GGUF are indices
    m = kzlab.load_model(FILES["f32"])
    assert m.layout == "audiocpp-qwen3tts" and m.family == "qwen3-tts-12hz"
    assert any("74 tensors outside 'speech_tokenizer_weights/' left alone" in n for n in m.notes), m.notes
    # the head count is not in the shapes: it came from the embedded config.json (4 heads of 16)
    assert (m.hparams.num_heads, m.hparams.head_dim) == (4, 16)
    assert not any("heads assumed" in n for n in m.notes)


@pytest.mark.parametrize("wtype,bound", [("f32", 70.0), ("q8_0", 25.0)])
def test_every_stage_matches_pytorch(wtype, bound):
    ref = dict(np.load(REF))
    with kzlab.load(FILES[wtype], backend="cpu", sched=False, threads=2) as d:
        low = stages_below(d, ref, bound, must=("quantizer", "pre_transformer", "decoder.4", "wav"))
    assert not low, f"{wtype}: stages under {bound} dB: {low}"


def _with_meta(raw: reader.RawFile, **changes) -> reader.RawFile:
    return dataclasses.replace(raw, metadata={**raw.metadata, **changes})


def test_tables_that_do_not_add_up_are_refused_before_any_model_is_built():
    from kzlab.loader import _unpacked

    raw = reader.read(FILES["f32"])
    lm = get_layout("audiocpp-qwen3tts")
    names = raw.metadata["audiocpp.tensor_names"]
    with pytest.raises(InvalidModelError, match="names 100 tensors but the file holds 416"):
        _unpacked(_with_meta(raw, **{"audiocpp.tensor_names": names[:100]}), lm, [])
    with pytest.raises(InvalidModelError, match="no string array 'audiocpp.tensor_names'"):
        _unpacked(_with_meta(raw, **{"audiocpp.tensor_names": 7}), lm, [])
    files = raw.metadata["audiocpp.embedded_files.names"]
    with pytest.raises(InvalidModelError, match="is not among the embedded files"):
        _unpacked(_with_meta(raw, **{"audiocpp.embedded_files.names": [f + ".x" for f in files]}), lm, [])
    offsets = raw.metadata["audiocpp.embedded_files.offsets"]
    with pytest.raises(InvalidModelError, match="lies outside audiocpp.embedded_files.data"):
        _unpacked(_with_meta(raw, **{"audiocpp.embedded_files.offsets": [o * 10 for o in offsets]}), lm, [])
