"""The views of streaming: `kzlab.stream_sweep` (each chunk size measured on a prepared stream, as plain records)
and `kzlab.plots.stream_figure` (chunk size against time to first audio and real-time factor, measured points and
predicted ranges, the real-time line marked). No timing thresholds: the machine is shared."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY

import kzlab
from kzlab import plots

F32 = TINY / "qwentts-tokenizer-f32.gguf"


def test_stream_sweep_records_what_ran_and_the_state():
    with kzlab.load(F32, threads=2, mode="portable") as dec:
        codes = kzlab.random_codes(dec.hparams, 10, 1)
        sw = kzlab.stream_sweep(dec, codes, [4, 1], repeat=2)
        assert sw.ok and sw.kind == "stateful" and sw.mode == "portable" and sw.backend_label == dec.backend_label
        assert sw.plan_changes == {} and sw.reference == "the offline decode"  # portable: the same plan
        assert [r["size"] for r in sw.rows] == [1, 4] and all(r["repeat"] == 2 for r in sw.rows)
        per_ms = 1e3 * dec.arch.samples_per_frame(dec.hparams) / dec.sample_rate
        for r in sw.rows:
            assert r["calls"] == -(-10 // r["size"]) and r["chunk_audio_ms"] == pytest.approx(r["size"] * per_ms)
            assert r["snr_db"] >= 100 and r["snr_db"] == r["snr_offline_db"]
            assert r["first_audio_ms"] > 0 and r["call_ms_median"] > 0 and r["rtf"] > 0
        assert sw.state and sw.state_bytes == sum(s["nbytes"] for s in sw.state) == sw.rows[0]["state_bytes"]
        assert set(sw.state[0]) == {"key", "kind", "channels", "frames", "order", "nbytes"}
        assert json.loads(json.dumps(sw.to_dict()))["rows"][0]["size"] == 1
        with pytest.raises(kzlab.InvalidInputError):
            kzlab.stream_sweep(dec, codes, [0])


def test_stream_sweep_in_the_fast_mode_holds_the_stream_to_its_own_arithmetic():
    """The fast mode's streaming call computes the unit conv directly (not Winograd's): the SNR is against the
    offline decode in that arithmetic, and `snr_offline_db` against this decoder's own (Winograd) decode."""
    with kzlab.load(F32, threads=2, mode="fast") as dec:
        sw = kzlab.stream_sweep(dec, kzlab.random_codes(dec.hparams, 6, 2), 3)
    assert set(sw.plan_changes) == {"unitconv"} and "unitconv=direct" in sw.reference
    (r,) = sw.rows
    assert r["snr_db"] >= 100 and 60 <= r["snr_offline_db"] < r["snr_db"]


def test_a_failed_stream_is_a_record_not_an_exception(tmp_path):
    from kzlab.app.streaming import execute_stream

    rec = execute_stream(kzlab.RunSpec(model=str(tmp_path / "missing.gguf")), [1])
    assert not rec.ok and "missing.gguf" in rec.error and not rec.rows
    rec = execute_stream(kzlab.RunSpec(model=str(F32), input="audio"), [1])  # no codes to stream
    assert not rec.ok and "audio" in rec.error


def test_stream_figure_draws_measured_points_predicted_ranges_and_the_real_time_line():
    rows = [
        {"label": "cpu", "size": k, "first_audio_ms": 2.0 * k + 5, "call_ms_median": 2.0 * k, "rtf": 3.0 / k,
         "chunk_audio_ms": 80.0 * k}
        for k in (1, 4, 16)
    ] + [
        {"label": "htp", "size": k, "rtf_range": {"p10": 0.5 / k, "p50": 1.0 / k, "p90": 2.0 / k, "min": 0.2 / k,
                                                 "max": 4.0 / k, "draws": 100},
         "first_audio_range": {"p10": 1.0, "p50": 2.0, "p90": 3.0, "min": 0.5, "max": 6.0, "draws": 100}}
        for k in (1, 4)
    ]
    fig = plots.stream_figure(rows, "two backends")
    ax_t, ax_r = fig.axes
    assert ax_t.get_xscale() == ax_r.get_xscale() == "log"
    labels = [t.get_text() for t in ax_r.get_legend().get_texts()]
    assert "real time (RTF = 1)" in labels and any("predicted RTF" in t for t in labels)
    assert any("cpu: measured" == t for t in labels)
    lo, hi = ax_r.get_ylim()
    assert lo < 0.2 / 4 and hi > 4.0  # every range and the real-time line in view
    measured = next(line for line in ax_r.lines if line.get_label() == "cpu: measured")
    assert list(measured.get_xdata()) == [1.0, 4.0, 16.0] and np.allclose(measured.get_ydata(), [3.0, 0.75, 0.1875])
    assert any("real time" in t.get_text() for t in ax_t.get_legend().get_texts())  # the arrival-time curve
    fig.savefig(__import__("io").BytesIO(), format="png")
