"""Known defects in the placement and the device's arithmetic emulated on the host (`kzlab.analysis.emulate`).

The seed's graph (the full-size F16 decoder at 31 frames, convs as ggml_conv_1d builds them: F16 im2col columns as
src1) puts its conv products on HMX under v0.15.3, whose kernel reads an F16 src1 as F32: the placement must mark
every such node, and the emulated decode must play what the device would, noise, where F32 columns (the same
device, F32 src1) stay within the bound.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY, ask_whatif, run_cli

import kzlab
from kzlab.analysis.accuracy import snr_counting_nonfinite
from kzlab.analysis.emulate.device import emulate
from kzlab.analysis.placement import capabilities
from kzlab.errors import InvalidOptionError

SEED_FLAGS = ("--mode", "portable", "--conv", "im2col-f16", "--conv-src1", "data", "--resunit", "ops", "--convt",
              "col2im", "--snake", "folded")
SEED = {"mode": "portable", "conv": "im2col-f16", "conv_src1": "data", "resunit": "ops", "convt": "col2im",
        "snake": "folded"}
F32 = TINY / "qwentts-tokenizer-f32.gguf"


def _simulate_json(model, profile: str, tmp_path, *flags: str) -> dict:
    out = tmp_path / f"{profile}.json"
    run_cli("simulate", str(model), "--profile", profile, *flags, "--json", str(out), "-q")
    return json.loads(out.read_text())


def test_seed_graph_on_v0153_lists_its_defective_products(full_synth, tmp_path):
    d = _simulate_json(full_synth, "hexagon-v0.15.3", tmp_path, *SEED_FLAGS)
    assert d["defects"], "the seed's graph on v0.15.3 hits HMX's F16-as-F32 read"
    named = set()
    for row in d["defects"]:
        assert {"id", "source", "nodes", "gflop"} <= set(row)
        assert "matmul-ops.c" in row["source"] and row["gflop"] > 0
        named |= set(row["nodes"])
    marked = [n for n in d["nodes"] if n["defect"]]
    assert {n["name"] for n in marked} == named
    assert len(marked) >= 20 and all(n["op"] == "MUL_MAT" for n in marked)
    # each marked node is an HMX product with a non-F32 src1 on the HTP, and every such node is marked
    hmx_f16 = [n for n in d["nodes"] if n["backend"] == "HTP" and n["path"] == "hmx" and n["src_types"][1] != "F32"]
    assert {n["name"] for n in hmx_f16} == named
    assert sum(r["defect_nodes"] for r in d["stages"]) == len(marked)


@pytest.mark.parametrize("profile,flags", [
    ("hexagon-v0.15.3", ("--conv", "im2col-f32")),  # F32 columns: HMX reads them as they are
    ("hexagon-78c531d", ()),  # PR #1601's head routes an F16 src1 to HVX
])
def test_seed_graph_without_the_defect(full_synth, tmp_path, profile, flags):
    d = _simulate_json(full_synth, profile, tmp_path, *SEED_FLAGS, *flags)  # a later --conv wins
    assert d["defects"] == [] and not any(n["defect"] for n in d["nodes"])
    assert any(n["path"] == "hmx" for n in d["nodes"])  # HMX still runs products: only the defective ones are gone


def test_hmx_off_hits_no_defect():
    m = kzlab.load_model(F32)
    on = kzlab.simulate(m, "hexagon-v0.15.3", frames=8, **SEED)
    off = kzlab.simulate(m, capabilities.load_changed("hexagon-v0.15.3", "hmx=0"), frames=8, **SEED)
    assert on.defect_nodes > 0 and off.defect_nodes == 0
    assert "WRONG OUTPUT" in on.summary() and "WRONG OUTPUT" not in off.summary()


def test_defect_tables_are_validated(tmp_path):
    good = (capabilities.DIR / "hexagon-v0.15.3.toml").read_text().split("[[defects]]")[0]
    entry = {"id": "x", "op": "MUL_MAT", "when": "hmx_src1_not_f32", "title": "t", "source": "s", "versions": "v",
             "fix": "f"}
    cases = [({"when": "no_such_rule"}, "unknown defect rule"), ({"colour": "red"}, "unknown key 'colour'"),
             ({"fix": None}, "missing key 'fix'"), ({"op": "NOT_AN_OP"}, "not an op name"),
             ({"remedies": [1]}, "remedies must be a list")]
    for change, msg in cases:
        d = {k: v for k, v in {**entry, **change}.items() if v is not None}
        body = "".join(f"{k} = {json.dumps(v)}\n" for k, v in d.items())
        p = tmp_path / "bad.toml"
        p.write_text(good + "[[defects]]\n" + body)
        with pytest.raises(InvalidOptionError, match=msg):
            capabilities.load(p)
    p.write_text(good + "[[defects]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in entry.items()))
    assert capabilities.load(p).defects[0]["id"] == "x"


def test_snr_counts_nonfinite_samples_as_lost():
    ref = np.array([1.0, -1.0, 0.5, 0.25], np.float32)
    out = ref.copy()
    out[1] = np.nan
    out[3] = np.inf
    db, bad = snr_counting_nonfinite(out, ref)
    assert bad == 2
    # the two lost samples' error is the reference there: 1 + 1/16 of 1 + 1 + 1/4 + 1/16
    assert db == pytest.approx(10 * np.log10((1 + 1 + 0.25 + 0.0625) / (1 + 0.0625)))


def test_seed_configuration_emulated_plays_noise_and_f32_columns_do_not(full_synth):
    m = kzlab.load_model(full_synth)
    wrong = emulate(m, "hexagon-v0.15.3", frames=31, **SEED)
    assert wrong.defect_nodes >= 20 and not wrong.correct
    assert wrong.snr_db < 10, wrong.summary()
    assert wrong.first_stage_below is not None
    right = emulate(m, "hexagon-v0.15.3", frames=31, **{**SEED, "conv": "im2col-f32"})
    assert right.defect_nodes == 0 and right.correct, right.summary()
    assert right.snr_db >= 40
    assert right.emulated and {n.path for n in right.emulated} >= {"hmx"}
    d = wrong.to_dict()
    json.dumps(d)  # non-finite figures are written as text, never as NaN
    assert d["correct"] is False and d["defect_nodes"] == wrong.defect_nodes


def test_compare_device_cli(tmp_path):
    out, wav = tmp_path / "dev.json", tmp_path / "dev.wav"
    p = run_cli("compare", str(F32), "--device", "hexagon-v0.15.3", "--frames", "8", *SEED_FLAGS, "--json",
                str(out), "--wav", str(wav), check=False)
    assert p.returncode == 1, p.stdout + p.stderr  # wrong output: exit 1
    assert "WRONG OUTPUT" in p.stdout
    d = json.loads(out.read_text())
    assert d["correct"] is False and d["defect_nodes"] > 0
    assert wav.is_file() and (tmp_path / "dev-host.wav").is_file()
    p = run_cli("compare", str(F32), "--device", "hexagon-v0.15.3,hmx=0", "--frames", "8", *SEED_FLAGS)
    assert "RIGHT audio" in p.stdout


def test_whatif_never_recommends_wrong_output(isolated_cache):
    m = kzlab.load_model(F32)
    configs = ["v0.15.3=hexagon-v0.15.3", "v0.15.3-f32cols=hexagon-v0.15.3,conv=im2col-f32"]
    w = ask_whatif(m, configs, lowering=kzlab.Lowering(**SEED), frames=8, target_ms=100.0)
    d = w.to_dict()
    assert d["configs"]["v0.15.3"]["correct"] is False
    assert d["configs"]["v0.15.3"]["accuracy"]["defect_nodes"] > 0
    assert d["configs"]["v0.15.3-f32cols"]["correct"] is True
    for info in d["configs"].values():
        assert {"snr_db", "first_stage_below", "defect_nodes"} <= set(info["accuracy"])
    assert d["recommended"] and d["configs"][d["recommended"]]["correct"] is True
    assert d["decision"]["a"] != "v0.15.3" and d["decision"]["b"] != "v0.15.3"
    # the defect's remedies are priced on the same draws: HMX off and PR #1601's routing (F32 columns is asked)
    variants = d["configs"]["v0.15.3"]["correct_variants"]
    assert {v["remedy"] for v in variants} == {"hmx=0", "profile=hexagon-78c531d"}
    assert all(d["configs"][v["name"]]["variant_of"] == "v0.15.3" for v in variants)
    # what reaching the target takes starts from the right audio: `needs` names the correct variants
    assert [v["name"] for v in d["configs"]["v0.15.3"]["needs"]["correct_variants"]] == [
        v["name"] for v in variants if v["correct"]]
    assert d["configs"]["v0.15.3"]["needs"]["text"].startswith("the right audio first")
    assert "WRONG OUTPUT" in w.summary() and "recommended:" in w.summary()
