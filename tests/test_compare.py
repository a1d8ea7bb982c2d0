"""Accuracy per stage (`kzlab.compare`, `kzlab compare`): each stage's SNR against a reference .npz of stage
activations (the fixtures' format) or against another run, and the first stage below a bound, for both families.

Bounds follow from the arithmetic: F32 ggml against PyTorch F32 keeps every stage above 70 dB (the reference
tests' F32 bound); an F16 im2col rounds the conv inputs to 11 significant bits (about 66 dB of SNR per rounding,
less after the stages that amplify it), so it must lose dB at the first conv and keep losing them; the in-graph
and host inverse STFTs differ only in rounding, so every stage before the waveform is identical."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import DATA, TINY, run_cli

import kzlab
from kzlab.analysis.accuracy import compare, first_below, parse_run, read_reference, stage_accuracy
from kzlab.errors import InvalidInputError, InvalidOptionError, KzlabError

WT = DATA / "wavtokenizer-tiny"
WT_GGUF = WT / "wavtokenizer-tiny-f32.gguf"
WT_REF = WT / "reference.npz"
QW_GGUF = TINY / "qwentts-tokenizer-f32.gguf"
QW_REF = TINY / "reference.npz"


@pytest.fixture(scope="module")
def wt_model():
    return kzlab.load_model(WT_GGUF)


def _stages(model) -> list[str]:
    return [s.name for s in kzlab.load(model.path).arch.stages(model.hparams)]


def test_facade_exports_compare():
    assert "compare" in kzlab.__all__ and "Accuracy" in kzlab.__all__
    assert kzlab.compare is compare


def test_wavtokenizer_f32_matches_the_reference_at_every_stage(wt_model):
    res = compare(wt_model, ref=WT_REF, bound=70, repeat=0)
    names = _stages(wt_model)
    assert [s.stage for s in res.stages] == [*names, "wav"]  # the family's stages in order, then the output
    assert all(s.snr_db is not None and s.snr_db >= 70 for s in res.stages), res.rows()
    assert res.first_below is None and res.ok
    assert res.family == wt_model.hparams.family and res.frames == 100


def test_llama_cpp_like_toggles_cost_db_from_the_first_conv_on(wt_model):
    """F16 im2col + tanh GELU (llama.cpp's graph): exact codebook lookup, then measurably lower at the first conv
    and every stage after it, and a bound between the two names a stage at or after the first conv."""
    base = compare(wt_model, ref=WT_REF, repeat=0)
    llama = compare(wt_model, ref=WT_REF, conv="im2col-f16", gelu="tanh", repeat=1)
    first, *rest = llama.stages
    assert math.isinf(first.snr_db)  # a row lookup: nothing to round
    for b, l_ in zip(base.stages[1:], rest, strict=True):
        assert l_.snr_db < b.snr_db - 20, (l_.stage, l_.snr_db, b.snr_db)
    assert 40 <= llama.snr["head.linear"] <= 80, llama.rows()  # the fixture README: llama.cpp ~63 dB here
    assert llama.b["lowering_resolved"]["conv"] == "im2col-f16" and llama.b["decode_ms"] > 0
    assert "snake" not in llama.b["label"] and "gelu=tanh" in llama.b["label"]  # only the family's toggles
    bound = (llama.stages[1].snr_db + llama.stages[-1].snr_db) / 2
    res = compare(wt_model, ref=WT_REF, conv="im2col-f16", gelu="tanh", bound=bound, repeat=0)
    assert res.first_below is not None and res.first_below != first.stage


def test_in_graph_istft_agrees_with_the_host_one_stage_by_stage(wt_model):
    res = compare(wt_model, against="istft=host", istft="graph", frames=12, repeat=0)
    assert all(math.isinf(s.snr_db) for s in res.stages[:-1]), res.rows()  # the graphs up to the head are one graph
    assert res.stages[-1].stage == "wav" and res.stages[-1].snr_db >= 70
    assert res.a["changed"] == {"istft": "host"} and res.b["lowering_resolved"]["istft"] == "graph"


def test_a_wrong_stage_is_found_where_it_goes_wrong(wt_model, tmp_path):
    """Perturb the reference from one stage on: the first stage below the bound is that one, not the waveform."""
    with np.load(WT_REF) as z:
        arrays = {k: z[k] for k in z.files}
    names = _stages(wt_model)
    bad = names[len(names) // 2]
    for n in names[names.index(bad):] + ["wav"]:
        arrays[n] = arrays[n] * np.float32(1.01)  # 40 dB off
    ref = tmp_path / "perturbed.npz"
    np.savez(ref, **arrays)
    res = compare(wt_model, ref=ref, bound=60, repeat=0)
    assert res.first_below == bad
    assert 39 < res.snr[bad] < 41


def test_qwen_family_against_its_reference():
    res = compare(QW_GGUF, ref=QW_REF, bound=70, repeat=0)
    rows = {s.stage: s for s in res.stages}
    missing = [s for s in res.stages if s.snr_db is None]
    with np.load(QW_REF) as z:
        keys = set(z.files)
    assert all(s.stage not in keys and "not in the reference" in s.note for s in missing)
    assert all(s.snr_db >= 70 for s in res.stages if s.snr_db is not None), res.rows()
    assert rows["wav"].snr_db >= 70 and res.first_below is None
    assert set(res.a["not_compared"]) == {k for k in keys if k not in rows and k != "codes"}


def test_two_runs_of_weight_types_on_the_qwen_family():
    res = compare(QW_GGUF, against={"wtype": "f32"}, wtype="f16", frames=3, bound=200, repeat=0)
    assert res.first_below == res.stages[0].stage or res.first_below is not None
    assert all(s.snr_db is not None and 30 < s.snr_db < 200 for s in res.stages[1:]), res.rows()


def test_stage_accuracy_rows_say_why_a_stage_is_not_compared():
    a = {"x": np.ones((2, 3)), "y": np.ones(4), "z": np.ones(2)}
    r = {"x": np.ones((2, 3)) * 1.1, "y": np.ones(5)}
    rows = stage_accuracy(a, r, ["x", "y", "z"])
    assert abs(rows[0].snr_db - 20 * math.log10(11)) < 1e-9 and rows[0].shape == (2, 3)  # ref 1.1, error 0.1
    assert rows[1].snr_db is None and "shape" in rows[1].note
    assert rows[2].snr_db is None and "not in the reference" in rows[2].note
    assert first_below(rows, 25) == "x" and first_below(rows, 15) is None


def test_run_options_parse_and_refuse():
    assert parse_run("conv=im2col-f16 gelu=tanh backend=blas,cpu threads=2 sched=on mm-chunk=64") == (
        {"conv": "im2col-f16", "gelu": "tanh", "mm_chunk": 64}, {"backend": ("blas", "cpu"), "threads": 2,
                                                                  "sched": True})
    for bad in ("conv", "nope=1", "threads=x", "sched=maybe", "mm_chunk=big"):
        with pytest.raises(InvalidOptionError):
            parse_run(bad)


def test_bad_input_is_a_kzlab_error(wt_model, tmp_path):
    with pytest.raises(InvalidOptionError):
        compare(wt_model, repeat=0)
    with pytest.raises(InvalidOptionError):
        compare(wt_model, ref=WT_REF, against="conv=ktap", repeat=0)
    with pytest.raises(InvalidOptionError):
        compare(wt_model, against="", bound="high", repeat=0)
    np.savez(tmp_path / "nocodes.npz", wav=np.zeros(10, np.float32))
    with pytest.raises(InvalidInputError, match="codes"):
        compare(wt_model, ref=tmp_path / "nocodes.npz", repeat=0)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InvalidInputError):
        read_reference(tmp_path / "junk.npz")
    with pytest.raises(KzlabError):  # the first family's codes (16 codebooks) against a one-codebook decoder
        compare(wt_model, ref=QW_REF, repeat=0)


def test_cli_compare(tmp_path):
    out = tmp_path / "acc.json"
    p = run_cli("compare", str(WT_GGUF), "--ref", str(WT_REF), "--conv", "im2col-f16", "--bound", "90",
                "--json", str(out), "--repeat", "1", check=False)
    assert p.returncode == 1, p.stderr  # a stage below the bound
    assert "first stage below 90 dB" in p.stdout and "< bound" in p.stdout
    d = json.loads(out.read_text())
    assert d["first_below"] and d["bound_db"] == 90 and d["b"]["lowering_resolved"]["conv"] == "im2col-f16"
    assert [s["stage"] for s in d["stages"]][-1] == "wav" and d["family"] == "wavtokenizer-dec"
    p = run_cli("compare", str(WT_GGUF), "--against", "istft=graph", "--frames", "4", "--repeat", "0")
    assert "every stage at or above 40 dB" in p.stdout
    p = run_cli("compare", str(WT_GGUF), "--against", "colour=blue", check=False)
    assert p.returncode == 2 and "unknown run option" in p.stderr
    p = run_cli("compare", str(WT_GGUF), check=False)
    assert p.returncode == 2  # --ref or --against is required


# ---- what a family says does not apply: labels and the Workbench run --------------------------------------------
def test_each_family_says_which_toggles_do_not_apply_and_labels_leave_them_out():
    from kzlab.arch import families, not_applicable
    from kzlab.graph.options import Lowering

    fields = set(Lowering().to_dict())
    for arch in families():
        assert isinstance(arch.not_applicable, dict) and set(arch.not_applicable) <= fields, arch.name
        assert all(isinstance(v, str) and v for v in arch.not_applicable.values())
    wt = kzlab.load_model(WT_GGUF).hparams
    plan = Lowering(gelu="tanh").resolve(cpu_only=True)
    label = plan.label(not_applicable(wt))
    assert "snake=" not in label and plan.convt not in label.split() and "gelu=tanh" in label
    assert plan.label() == plan.label(()) and "snake=" in plan.label()  # no skip: as before


def test_a_workbench_run_reads_the_file_once(monkeypatch):
    from kzlab.app.runner import RunSpec, execute
    from kzlab.formats import reader

    opened = []
    real = reader.read
    monkeypatch.setattr(reader, "read", lambda path, *a, **k: opened.append(str(path)) or real(path, *a, **k))
    rec = execute(RunSpec(model=str(WT_GGUF), frames=4, repeat=1, threads=2, hexagon_profile="hexagon-v0.15.2",
                          predict=True))
    assert rec.ok, rec.error
    assert rec.profile is not None and rec.placement is not None and rec.placement.predicted is not None
    assert opened == [str(WT_GGUF)], opened
    assert rec.family == "wavtokenizer-dec" and rec.family_label and rec.stage_names[0] in rec.decode.stages
    assert set(rec.not_applicable) == {"convt", "snake", "resunit", "unitconv", "attn"}
    assert rec.placement.config["model"] == str(WT_GGUF)
    assert "snake=" not in rec.profile.config["lowering_label"]


def test_workbench_shows_the_family_and_disables_what_does_not_apply():
    from kzlab.arch import families

    wb = kzlab.Workbench(folder=WT)
    wb.model_path.value = str(WT_GGUF)
    wt = next(a for a in families() if a.name == kzlab.load_model(WT_GGUF).hparams.family)
    assert wt.label in wb.family.value
    for opt, wid in wb.lowering.items():
        assert wid.disabled == (opt in wt.not_applicable), opt
        if opt in wt.not_applicable:
            assert wt.not_applicable[opt] in wid.tooltip
    spec = wb.specs()[0]
    assert not set(spec.lowering) & set(wt.not_applicable) and "conv" in spec.lowering
    wb.model_path.value = str(QW_GGUF)  # the other family: its own set
    qw = kzlab.load_model(QW_GGUF).hparams
    off = kzlab.load(QW_GGUF).arch.not_applicable
    assert all(wb.lowering[o].disabled == (o in off) for o in wb.lowering), qw
    wb.model_path.value = str(WT / "nothing-here.gguf")
    assert not any(w.disabled for w in wb.lowering.values()) and "known when" in wb.family.value


def test_workbench_compare_tab_per_stage_on_the_wavtokenizer_fixture():
    wb = kzlab.Workbench(folder=WT)
    wb.model_path.value = str(WT_GGUF)
    wb.ref_path.value = str(WT_REF)
    wb.repeat.value, wb.threads.value, wb.bound.value = 1, 2, 70.0
    wb.run_button.click()
    assert wb.wait(300) and wb.results[-1].ok, wb.error
    one = wb.views["Compare"]  # one run: against its reference
    rows = one.data["accuracy"]["stages"]
    assert [r["stage"] for r in rows][-1] == "wav" and all(r["snr_db"] >= 70 for r in rows if r["snr_db"] != "inf")
    assert "Accuracy per stage against the reference" in "".join(one.html)
    wb.lowering["conv"].value = "im2col-f16"
    wb.run_button.click()
    assert wb.wait(300) and wb.results[-1].ok, wb.error
    wb.lowering["conv"].value = "im2col-f32"
    view = wb.views["Compare"]
    acc = view.data["accuracy"]
    assert acc["bound_db"] == 70 and acc["first_below"] is not None  # an F16 im2col: below 70 dB somewhere
    assert acc["stages"][0]["snr_db"] == "inf"  # the codebook lookup does not round
    html = "".join(view.html)
    assert "Accuracy per stage: B against A" in html and "first stage below 70 dB" in html
    assert "B against its reference" in html and wb.results[-1].family_label in wb.family.value


def test_report_of_a_wavtokenizer_run_has_the_family_and_the_accuracy(tmp_path):
    out = tmp_path / "r.html"
    p = run_cli("report", str(WT_GGUF), "--ref", str(WT_REF), "--hexagon", "hexagon-v0.15.2", "--predict",
                "--repeat", "1", "--threads", "2", "-o", str(out))
    text = out.read_text()
    assert "accuracy: B against A over 100 frames" in p.stdout
    assert "Accuracy per stage against the reference" in text and "decoder family:" in text
    assert "do not apply to this family" in text and "Predicted time and memory" in text


def test_what_ran_leaves_out_the_options_that_do_not_apply():
    from kzlab.app.runner import RunSpec, execute
    from kzlab.report.render import what_ran

    rec = execute(RunSpec(model=str(WT_GGUF), frames=3, profile=False, threads=2))
    assert rec.ok, rec.error
    low = what_ran(rec)["lowering"]
    assert "conv=" in low and not any(f"{k}=" in low for k in rec.not_applicable)
    assert set(rec.not_applicable) <= set(rec.config()["lowering_resolved"])  # the full record keeps them


def test_peek_family_reads_the_header_and_never_raises(tmp_path):
    from kzlab.app.runner import peek_family

    assert peek_family(str(WT_GGUF)).name == kzlab.load_model(WT_GGUF).hparams.family
    assert peek_family(str(QW_GGUF)).name == kzlab.load_model(QW_GGUF).hparams.family
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    for s in ("", str(tmp_path / "missing.gguf"), str(bad), str(tmp_path)):
        assert peek_family(s) is None, s
