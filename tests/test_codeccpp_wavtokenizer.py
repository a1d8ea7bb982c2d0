"""codec.cpp's WavTokenizer file (tests/data/codeccpp-wavtokenizer, see PROVENANCE.md) decodes with no map from the
user: the built-in map `codeccpp-wavtokenizer` names its tensors and takes one row of its AdaLayerNorm tables
(`row:bandwidth_id`, a value transform of the layout mechanism). The file cannot say GroupNorm's group count: the
16-group reference needs `group_norm_groups=16`, given and recorded as given. F32 bound: 70 dB at every stage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import stage_snrs

import kzlab
from kzlab.audio import snr_db
from kzlab.cli import main
from kzlab.errors import InvalidOptionError, LayoutError

DATA = Path(__file__).parent / "data"
GGUF = DATA / "codeccpp-wavtokenizer" / "codeccpp-wavtokenizer-tiny-f32.gguf"
REF32 = DATA / "wavtokenizer-tiny" / "reference.npz"
REF16 = DATA / "codeccpp-wavtokenizer" / "reference-g16.npz"


def _snr(dec, ref: dict) -> dict[str, float]:
    return stage_snrs(dec, ref, skip=("codes", "posnet"), every=True)


def test_the_file_is_recognised_and_its_tables_read_by_row():
    m = kzlab.load_model(GGUF)
    assert m.layout == "codeccpp-wavtokenizer" and m.family == "wavtokenizer-dec"
    assert m.hparams.bandwidth_id == 0 and m.hparams_given == {}
    assert any(n.startswith("row 0 (bandwidth_id) of 8 tables") for n in m.notes), m.notes
    assert any("no group_norm_groups in the metadata: using 32" in n for n in m.notes), m.notes
    assert m["convnext.0.norm.weight"].shape == (m.hparams.dim,)


@pytest.mark.parametrize("groups,ref", [(None, REF32), (16, REF16)], ids=["32-default", "16-given"])
@pytest.mark.parametrize("mode", ["fast", "portable"])
def test_every_stage_matches_pytorch_with_the_right_group_count(groups, ref, mode):
    hp = {"group_norm_groups": groups} if groups else None
    with kzlab.load(GGUF, hparams=hp, backend="cpu", sched=False, threads=2, mode=mode) as d:
        snr = _snr(d, dict(np.load(ref)))
        assert d.model.hparams_given == ({"group_norm_groups": 16} if groups else {})
    low = {k: round(v, 1) for k, v in snr.items() if v < 70.0}
    assert not low, f"stages under 70 dB: {low}"


def test_the_wrong_group_count_is_far_from_the_reference():
    with kzlab.load(GGUF, backend="cpu", sched=False, threads=2) as d:
        snr = _snr(d, dict(np.load(REF16)))
    assert snr["wav"] < 20.0


def test_another_bandwidth_row_is_taken_when_given_and_a_missing_row_is_refused():
    codes = kzlab.random_codes(kzlab.load_model(GGUF).hparams, 8, seed=3)
    with kzlab.load(GGUF, backend="cpu", sched=False, threads=2) as a, kzlab.load(
        GGUF, hparams={"bandwidth_id": 2}, backend="cpu", sched=False, threads=2
    ) as b:
        assert b.model.hparams.bandwidth_id == 2
        assert not np.allclose(a.decode(codes), b.decode(codes))
    with pytest.raises(InvalidOptionError, match="bandwidth_id=4 is not a row of .* 0..3"):
        kzlab.load_model(GGUF, hparams={"bandwidth_id": 4})
    with pytest.raises(InvalidOptionError, match="expected an integer"):
        kzlab.load_model(GGUF, hparams={"bandwidth_id": 1.5})


def test_the_cli_decodes_it_with_the_given_group_count_and_says_so(tmp_path, capsys):
    ref = dict(np.load(REF16))
    codes, wav = tmp_path / "codes.npy", tmp_path / "wav.npy"
    np.save(codes, ref["codes"])
    assert main(["decode", str(GGUF), "--codes", str(codes), "-o", str(tmp_path / "o.wav"), "--npy", str(wav),
                 "--hparam", "group_norm_groups=16", "--backend", "cpu", "--threads", "2"]) == 0
    assert snr_db(np.load(wav), ref["wav"]) >= 70.0
    assert main(["info", str(GGUF), "--hparam", "group_norm_groups=16"]) == 0
    assert "given, not read from the file: group_norm_groups=16" in capsys.readouterr().out


def test_a_row_transform_is_checked_against_the_tensor_and_the_family(tmp_path):
    builtin = Path(kzlab.__file__).parent / "formats" / "layouts" / "codeccpp_wavtokenizer.toml"
    text = builtin.read_text()
    bad_shape = tmp_path / "bad-shape.toml"  # a row of a 1-D tensor
    bad_shape.write_text(text + "'dec\\.bb\\.fln\\.weight' = \"row:bandwidth_id\"\n")
    with pytest.raises(LayoutError, match="takes a row of a 2-D table, but 'dec.bb.fln.weight' has shape"):
        kzlab.load_model(GGUF, layout=bad_shape)
    bad_param = tmp_path / "bad-param.toml"
    bad_param.write_text(text.replace("row:bandwidth_id", "row:speaker"))
    with pytest.raises(LayoutError, match="row:speaker names a hyperparameter the wavtokenizer-dec family"):
        kzlab.load_model(GGUF, layout=bad_param)
    bad_kind = tmp_path / "bad-kind.toml"
    bad_kind.write_text(text.replace("row:bandwidth_id", "column:bandwidth_id"))
    with pytest.raises(LayoutError, match="expected one of row:NAME"):
        kzlab.load_model(GGUF, layout=bad_kind)
