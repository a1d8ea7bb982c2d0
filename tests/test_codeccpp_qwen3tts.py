"""codec.cpp's Qwen3-TTS tokenizer file (tests/data/codeccpp-qwen3tts, see PROVENANCE.md) decodes with no map from the
user: the built-in map `codeccpp-qwen3tts` names its `q3t.dec.*` tensors, leaves the encoder alone and reads the
folded SnakeBeta constants back through the `log` and `log_recip:1e-9` value transforms. Bounds by the types the
file really holds: F32 70 dB at every stage; the Q8_0 file (Q8_0 products, the rest F16) 25 dB."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import stages_below

import kzlab
from kzlab.errors import InvalidModelError, LayoutError

DATA = Path(__file__).parent / "data"
FILES = {t: DATA / "codeccpp-qwen3tts" / f"codeccpp-qwen3tts-tokenizer-tiny-{t}.gguf" for t in ("f32", "q8_0")}
REF = DATA / "qwen3-tts-12hz-tiny" / "reference.npz"


@pytest.fixture(scope="module")
def ref():
    return dict(np.load(REF))


def test_the_file_is_recognised_and_its_folded_constants_read_back():
    m = kzlab.load_model(FILES["f32"])
    assert m.layout == "codeccpp-qwen3tts" and m.family == "qwen3-tts-12hz"
    assert not any("not used by the decoder" in n for n in m.notes), m.notes  # the encoder is ignored
    assert any(n.startswith("29 tensors stored folded read back through log,") for n in m.notes), m.notes
    assert any(n.startswith("29 tensors stored folded read back through log_recip,") for n in m.notes), m.notes
    assert m["dec.1.snake.alpha"].type == "F32"


@pytest.mark.parametrize("wtype,bound,mode", [("f32", 70.0, "fast"), ("f32", 70.0, "portable"), ("q8_0", 25.0, "fast")])
def test_every_stage_matches_pytorch(ref, wtype, bound, mode):
    with kzlab.load(FILES[wtype], backend="cpu", sched=False, threads=2, mode=mode) as d:
        low = stages_below(d, ref, bound, must=("quantizer", "pre_transformer", "decoder.4", "wav"))
    assert not low, f"{wtype} {mode}: stages under {bound} dB: {low}"


def test_a_transform_that_cannot_undo_a_value_or_is_misspelt_is_refused(tmp_path):
    builtin = Path(kzlab.__file__).parent / "formats" / "layouts" / "codeccpp_qwen3tts.toml"
    text = builtin.read_text()
    negative = tmp_path / "log-of-a-bias.toml"  # biases have negative values: no logarithm
    negative.write_text(text.replace("'q3t\\.dec\\..*\\.a' = \"log\"", "'q3t\\.dec\\..*\\.(a|b)' = \"log\""))
    with pytest.raises(InvalidModelError, match="holds values that log cannot undo"):
        kzlab.load_model(FILES["f32"], layout=negative)
    misspelt = tmp_path / "misspelt.toml"
    misspelt.write_text(text.replace("log_recip:1e-9", "log_recip:tiny"))
    with pytest.raises(LayoutError, match="expected one of row:NAME, log, log_recip:EPS"):
        kzlab.load_model(FILES["f32"], layout=misspelt)
