"""The streaming what-if (`kzlab whatif --stream K[,K...]`): one streaming call of each size placed and priced on
each configuration, on the whole-graph answer's draws.

The tiny decoder stands for the full one (the JSON contract, the probabilities' facts, correctness carried to the
stream and the pace do not depend on its size); the seed's lowering at 8 frames puts products with F16 columns on
HMX under v0.15.3, a configuration that computes wrong output.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY, ask_whatif

import kzlab
from kzlab.analysis.predict.stream_whatif import StreamQuestion, paced
from kzlab.errors import InvalidOptionError

F32 = TINY / "qwentts-tokenizer-f32.gguf"
SEED = kzlab.Lowering(mode="portable", conv="im2col-f16", conv_src1="data", resunit="ops", convt="col2im",
                      snake="folded")
CONFIGS = ["v0.15.3=hexagon-v0.15.3", "f32cols=hexagon-v0.15.3,conv=im2col-f32"]
SIZES = [1, 4, 16]

pytestmark = pytest.mark.usefixtures("isolated_cache")


@pytest.fixture(scope="module")
def model():
    return kzlab.load_model(F32)


def ask(model, **kw):
    kw = {"frames": 8, "lowering": SEED, "stream": SIZES, "remedies": False, **kw}
    return ask_whatif(model, CONFIGS, **kw)


@pytest.fixture(scope="module")
def answer(model, tmp_path_factory, request):
    mp = pytest.MonkeyPatch()
    mp.setenv("KZLAB_CACHE", str(tmp_path_factory.getbasetemp() / "kzlab-cache"))
    request.addfinalizer(mp.undo)
    return ask(model, pace=12.5)


def test_contract(answer):
    d = json.loads(json.dumps(answer.to_dict()))
    assert set(d["configs"]) == {"cpu", "v0.15.3", "f32cols"}
    frame = d["stream"]["question"]["frame_ms"]
    assert frame == pytest.approx(80.0)  # 12.5 Hz: from the family's samples per frame and sample rate
    assert d["stream"]["question"]["sizes"] == SIZES and d["stream"]["question"]["realtime_p"] == 0.9
    for name, c in d["configs"].items():
        assert set(c["stream"]) == {"1", "4", "16"}, name
        for key, row in c["stream"].items():
            assert row["frames"] == int(key) and row["audio_ms"] == pytest.approx(int(key) * frame)
            for part in ("call_ms", "first_audio_ms"):
                r = row[part]
                assert set(r) == {"p10", "p50", "p90"} and r["p10"] <= r["p50"] <= r["p90"]
            assert 0.0 <= row["p_realtime"] <= 1.0 and 0.0 <= row["p_underrun"] <= 1.0
            # the first call is a warm one plus its first-use costs
            assert all(row["first_audio_ms"][p] >= row["call_ms"][p] - 1e-9 for p in ("p10", "p50", "p90"))
            # P(real time) is the share of draws whose call is shorter than its audio: the range brackets it
            if row["call_range"]["max"] < row["audio_ms"]:
                assert row["p_realtime"] == 1.0
            if row["call_range"]["min"] >= row["audio_ms"]:
                assert row["p_realtime"] == 0.0
            if row["call_ms"]["p90"] < row["audio_ms"]:
                assert row["p_realtime"] >= 0.9 - 1e-9
            if row["call_ms"]["p10"] > row["audio_ms"]:
                assert row["p_realtime"] <= 0.1 + 1e-9
            assert row["splits"] >= 1 and row["products"] and row["state_bytes"] > 0
        assert "recommended_chunk" in c
    assert d["recommended_chunk"] == d["stream"]["recommended_chunk"]
    # the device's configurations map their buffers on the first call; the CPU-only decode maps nothing
    assert d["configs"]["f32cols"]["stream"]["1"]["buffers_mapped"] >= 1
    assert d["configs"]["cpu"]["stream"]["1"]["first_audio_ms"] == d["configs"]["cpu"]["stream"]["1"]["call_ms"]
    text = answer.summary()
    assert "streaming calls of 1, 4, 16 frames" in text and "recommended chunk" in text
    assert "call-to-call jitter is not modelled" in text


def test_a_wrong_configuration_is_wrong_at_every_size_and_never_recommended(answer):
    d = answer.to_dict()
    wrong = d["configs"]["v0.15.3"]
    assert wrong["correct"] is False
    assert all(row["correct"] is False for row in wrong["stream"].values())
    assert wrong["recommended_chunk"]["frames"] is None
    # the streaming graph's own nodes are checked: a call too small for HMX hits no defect, and is still wrong
    # (one frame: every product's src1 has too few rows for HMX, so no node of the call hits the HMX defect)
    one, many = wrong["stream"]["1"], wrong["stream"]["16"]
    assert one["defect_nodes"] == 0 and "whole decode computes wrong output" in one["why"]
    assert "hmx" not in one["products"] or one["products"]["hmx"] < many["products"]["hmx"]
    assert many["defect_nodes"] > 0 and "streaming call on a defective path" in many["why"]
    assert d["recommended_chunk"]["config"] != "v0.15.3"
    for w in d["recommended_chunk"].get("not_recommended", []):
        assert w["name"] == "v0.15.3"
    right = d["configs"]["f32cols"]
    assert right["correct"] is True and all(r["correct"] is True and r["defect_nodes"] == 0
                                            for r in right["stream"].values())
    rec = right["recommended_chunk"]
    ok = [r["frames"] for r in right["stream"].values() if r["p_realtime"] >= 0.9]
    assert rec["frames"] == (min(ok) if ok else None)


def test_p_realtime_falls_as_the_call_grows_against_the_audio(model, answer):
    """The same draws with a CPU ten times slower: every CPU-only call is longer, none more often real time."""
    slow = ask(model, cpu_baseline_ms=2000.0, pace=12.5).to_dict()["configs"]["cpu"]["stream"]
    fast = answer.to_dict()["configs"]["cpu"]["stream"]
    for k in fast:
        assert slow[k]["call_ms"]["p50"] > fast[k]["call_ms"]["p50"]
        assert slow[k]["p_realtime"] <= fast[k]["p_realtime"]
        assert slow[k]["p_underrun"] >= fast[k]["p_underrun"]
    # a stricter probability never recommends a smaller chunk
    lax = ask(model, realtime_p=0.5).to_dict()["recommended_chunk"]
    strict = ask(model, realtime_p=1.0).to_dict()["recommended_chunk"]
    if strict["frames"] is not None:
        assert lax["frames"] is not None and lax["frames"] <= strict["frames"]


def test_codes_slower_than_the_frame_rate_underrun(model):
    d = ask(model, pace=6.0, utterance_s=10.0).to_dict()
    for name, c in d["configs"].items():
        for row in c["stream"].values():
            assert row["paced"]["calls"] >= 2
            assert row["p_underrun"] == 1.0, (name, row["frames"])
            assert row["paced"]["gap_ms"]["p10"] > 0


def test_the_pace_model():
    call, first = np.array([10.0, 100.0]), np.array([20.0, 200.0])
    # codes at the frame rate, calls shorter than their audio: each chunk ready exactly as the one before runs out
    r = paced(call[:1], first[:1], 4, 12.5, 80.0, 10.0)
    assert r["p_underrun"] == 0.0 and r["calls"] == 32 and r["first_audio_ms"]["p50"] == pytest.approx(320 + 20)
    # a call longer than its audio underruns whatever the pace
    r = paced(np.array([400.0]), np.array([400.0]), 4, 1000.0, 80.0, 10.0)
    assert r["p_underrun"] == 1.0
    # one chunk for the whole utterance: nothing to run out
    assert paced(call, first, 200, 1.0, 80.0, 10.0)["p_underrun"] == 0.0


def test_bad_arguments_are_refused(model, capsys):
    from kzlab.cli import main

    for bad in ([0], "0", "1,x", [-4], [True]):
        with pytest.raises(InvalidOptionError, match="chunk size"):
            StreamQuestion.of(bad)
    with pytest.raises(InvalidOptionError, match="pace"):
        StreamQuestion.of([4], pace=-1.0)
    with pytest.raises(InvalidOptionError, match="utterance"):
        StreamQuestion.of([4], pace=12.5, utterance_s=0)
    with pytest.raises(InvalidOptionError, match="realtime_p"):
        StreamQuestion.of([4], realtime_p=1.5)
    with pytest.raises(InvalidOptionError, match="--stream"):
        kzlab.whatif(model, CONFIGS, frames=8, pace=12.5)
    base = ["whatif", str(F32), "--frames", "4", "--config", CONFIGS[0], "--no-accuracy", "-q"]
    assert main([*base, "--stream", "0"]) == 2
    assert main([*base, "--stream", "4", "--pace", "-1"]) == 2
    err = capsys.readouterr().err
    assert "chunk size" in err and "pace" in err


def test_cli_writes_the_stream_contract(tmp_path, capsys):
    from kzlab.cli import main

    out = tmp_path / "w.json"
    rc = main(["whatif", str(F32), "--frames", "4", "--cpu-baseline-ms", "200", "--threads", "1", "--config",
               CONFIGS[1], "--draws", "200", "--stream", "1,4", "--pace", "12.5", "--utterance", "5",
               "--json", str(out), "-q"])
    assert rc == 0
    d = json.loads(out.read_text())
    row = d["configs"]["f32cols"]["stream"]["4"]
    assert {"call_ms", "p_realtime", "first_audio_ms", "p_underrun"} <= set(row)
    assert d["stream"]["question"]["utterance_s"] == 5.0 and "recommended_chunk" in d
    assert "P(rt)" in capsys.readouterr().out
