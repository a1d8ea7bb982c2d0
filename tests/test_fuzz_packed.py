"""Fuzzing the files of other producers as kzlab reads them (mmproj, audio.cpp, codec.cpp), with the `--hparam`
values a user may type: whatever is removed, cut short or mistyped, the answer is a model or a kzlab error that names
the problem, never another exception (and never ggml, which sees nothing before a model is built).
KZLAB_FUZZ_CASES sets the number of cases (`make fuzz` runs 10,000)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kzlab
from kzlab.errors import KzlabError
from kzlab.formats import reader

N_CASES = max(20, int(os.environ.get("KZLAB_FUZZ_CASES", "300")) // 5)
DATA = Path(__file__).parent / "data"
MMPROJ = DATA / "llamacpp-mmproj" / "mmproj-qwen3tts-tiny-f32.gguf"
AUDIOCPP = DATA / "audiocpp-qwen3tts" / "audiocpp-qwen3tts-tiny-f32.gguf"
CODECCPP = DATA / "codeccpp-wavtokenizer" / "codeccpp-wavtokenizer-tiny-f32.gguf"
_RAW: dict[Path, reader.RawFile] = {}


def _raw(path: Path) -> reader.RawFile:
    if path not in _RAW:
        _RAW[path] = reader.read(path)
    return _RAW[path]


def _load(raw: reader.RawFile, path: Path, hparams=None):
    try:
        reader_read = reader.read
        reader.read = lambda p: raw
        try:
            return kzlab.load_model(path, hparams=hparams)
        finally:
            reader.read = reader_read
    except KzlabError as e:
        assert str(e), "a refusal must say why"
        return None


@settings(max_examples=N_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_partial_mmproj_decoder_or_a_cut_stack_is_refused_or_read(data):
    from kzlab.formats.layout import get_layout

    raw = _raw(MMPROJ)
    lm = get_layout("llamacpp-mmproj")  # the decoder's tensors: those the map reads (not the ones it ignores)
    names = sorted(n for n in raw.tensors if lm.role_of(n) is not None and not lm.is_ignored(n))
    drop = data.draw(st.sets(st.sampled_from(names), max_size=4))
    tensors = {n: t for n, t in raw.tensors.items() if n not in drop}
    stack = "a.gen.wav.quant.rest.codebook.weight"
    if stack in tensors and data.draw(st.booleans()):
        t = tensors[stack]
        depth = data.draw(st.integers(0, t.shape[0]))
        tensors[stack] = dataclasses.replace(t, shape=(depth, *t.shape[1:]), data=t.data[:depth])
    m = _load(dataclasses.replace(raw, tensors=tensors), MMPROJ, {"num_heads": 4})
    if m is not None:
        assert not drop, f"a decoder with {sorted(drop)} missing was read"


@settings(max_examples=N_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(cut=st.integers(0, 420), mangle=st.booleans())
def test_a_short_or_broken_audiocpp_name_array_is_refused(cut, mangle):
    raw = _raw(AUDIOCPP)
    names = list(raw.metadata["audiocpp.tensor_names"])
    meta = dict(raw.metadata)
    meta["audiocpp.tensor_names"] = names[:cut] if not mangle else [n[::-1] for n in names[:cut]]
    m = _load(dataclasses.replace(raw, metadata=meta), AUDIOCPP)
    if m is not None:
        assert cut >= len(raw.tensors) and not mangle


@settings(max_examples=N_CASES, deadline=None, suppress_health_check=list(HealthCheck))
@given(items=st.dictionaries(
    st.sampled_from(["group_norm_groups", "bandwidth_id", "layer_norm_eps", "sample_rate", "num_heads", "dim", "x"]),
    st.one_of(st.integers(-3, 70), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
              st.booleans(), st.none()),
    max_size=3))
def test_any_hparams_on_a_codeccpp_file_are_taken_or_refused(items):
    m = _load(_raw(CODECCPP), CODECCPP, items or None)
    if m is not None and items:
        assert m.hparams_given == {k: getattr(m.hparams, k) for k in items}
