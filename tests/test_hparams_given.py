"""Hyperparameters a file does not carry, given by the user (kzlab.formats.given): `hparams=` in the API, `--hparam`
on the commands, `[hparams]` in a layout map; each family accepts its own, refuses the rest with the accepted
names, and the value is recorded as given, not read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kzlab
from kzlab.cli import main
from kzlab.errors import InvalidOptionError, KzlabError
from kzlab.formats.given import parse_items

WT = "wavtokenizer-tiny"


def test_items_parse_as_numbers_or_text_and_bad_items_are_named():
    assert parse_items(["group_norm_groups=16", "layer_norm_eps=1e-5", "x=abc"]) == {
        "group_norm_groups": 16, "layer_norm_eps": 1e-5, "x": "abc"}
    for bad in (["groups"], ["=16"], ["groups="], ["a=1", "a=2"]):
        with pytest.raises(InvalidOptionError, match="hparam"):
            parse_items(bad)


def test_a_wavtokenizer_group_count_given_is_used_and_recorded_as_given():
    m = kzlab.load_model(WT, hparams={"group_norm_groups": 16})
    assert m.hparams.group_norm_groups == 16 and m.hparams_given == {"group_norm_groups": 16}
    assert m.info()["hparams_given"] == {"group_norm_groups": 16}
    assert any("given, not read from the file: group_norm_groups=16" in n for n in m.notes)
    assert kzlab.load_model(WT).hparams_given == {}
    codes = kzlab.random_codes(m.hparams, 12, seed=1)
    with kzlab.load(WT, backend="cpu", sched=False, threads=2) as a, kzlab.Decoder(m, backend="cpu", sched=False,
                                                                                    threads=2) as b:
        wa, wb = a.decode(codes), b.decode(codes)
    assert wa.shape == wb.shape and np.all(np.isfinite(wb)) and not np.allclose(wa, wb)  # 16 groups really ran


@pytest.mark.parametrize("values,match", [
    ({"num_heads": 2}, "accepted: group_norm_groups \\(int\\), group_norm_eps \\(float\\)"),
    ({"group_norm_groups": "16"}, "expected an integer"),
    ({"group_norm_groups": True}, "expected an integer"),
    ({"group_norm_groups": 16.5}, "expected an integer"),
    ({"group_norm_groups": 5}, "does not divide the 64 channels"),
    ({"layer_norm_eps": -1.0}, "expected a number > 0"),
    ({"layer_norm_eps": float("nan")}, "expected a finite number"),
])
def test_bad_values_are_refused_with_a_message_that_names_them(values, match):
    with pytest.raises(InvalidOptionError, match=match):
        kzlab.load_model(WT, hparams=values)


def test_the_first_family_keeps_its_own_names_and_both_spellings_cannot_be_mixed():
    m = kzlab.load_model("tiny", hparams={"num_heads": 2})
    assert m.hparams.num_heads == 2 and m.hparams_given == {"num_heads": 2}
    with pytest.raises(InvalidOptionError, match="accepted: num_heads"):
        kzlab.load_model("tiny", hparams={"group_norm_groups": 16})
    with pytest.raises(InvalidOptionError, match="not both"):
        kzlab.load_model("tiny", hparams={"num_heads": 2}, overrides={"num_heads": 2})
    assert kzlab.load_model("tiny", overrides={"num_heads": 2}).hparams_given == {"num_heads": 2}


def test_commands_take_hparam_and_say_it_was_given(tmp_path, capsys):
    assert main(["info", WT, "--hparam", "group_norm_groups=16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["hparams"]["group_norm_groups"] == 16 and d["hparams_given"] == {"group_norm_groups": 16}
    codes = tmp_path / "c.npy"
    np.save(codes, np.arange(10, dtype=np.int32)[None] * 7 % 512)
    out = tmp_path / "o.wav"
    assert main(["decode", WT, "--codes", str(codes), "-o", str(out), "--hparam", "group_norm_groups=16",
                 "--backend", "cpu", "--threads", "2"]) == 0
    assert out.stat().st_size > 0
    assert main(["info", WT, "--hparam", "num_heads=2"]) != 0
    assert "accepted: group_norm_groups" in capsys.readouterr().err


def test_a_run_record_and_a_layout_map_carry_the_given_value(tmp_path):
    from kzlab.app.runner import RunSpec, execute

    rec = execute(RunSpec(model=WT, frames=4, backend="cpu", profile=False, hparams={"group_norm_groups": 16}))
    assert rec.ok, rec.error
    assert any("given, not read from the file: group_norm_groups=16" in n for n in rec.notes)
    builtin = Path(kzlab.__file__).parent / "formats" / "layouts" / "wavtokenizer_llama.toml"
    text = builtin.read_text() + "\n[hparams]\ngroup_norm_groups = 16\n"
    lm = tmp_path / "wt16.toml"
    lm.write_text(text)
    m = kzlab.load_model(WT, layout=lm)
    assert m.hparams.group_norm_groups == 16 and m.hparams_given == {"group_norm_groups": 16}
    assert any("given by the layout map" in n and "group_norm_groups=16" in n for n in m.notes), m.notes
    assert not any(n.startswith("hyperparameters given, not read") for n in m.notes), m.notes  # not the user


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(["group_norm_groups", "group_norm_eps", "layer_norm_eps", "sample_rate", "num_heads",
                             "dim", "", "x"]),
       value=st.one_of(st.integers(-5, 200), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                       st.booleans()))
def test_any_given_value_is_taken_or_refused_with_a_kzlab_error(name, value):
    try:
        m = kzlab.load_model(WT, hparams={name: value})
    except KzlabError:
        return
    assert m.hparams_given and getattr(m.hparams, name) == m.hparams_given[name]
