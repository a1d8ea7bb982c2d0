"""The Workbench driven headlessly: set widget values, click Run, wait, and check what it produced."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY

TINY_F32 = TINY / "qwentts-tokenizer-f32.gguf"
TINY_F16 = TINY / "crispasr-tokenizer-f16.gguf"
BLOCKS = ["decoder.0", "decoder.1", "decoder.2", "decoder.3", "decoder.4"]


def tick_labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.get_xticklabels()]


@pytest.fixture(scope="module")
def wb():
    import kzlab

    w = kzlab.Workbench(folder=TINY)
    w.model_path.value = str(TINY_F32)
    w.input.value = "random"
    w.frames.value = 3
    w.repeat.value = 1
    w.threads.value = 2
    w.run_button.click()
    assert w.wait(300), "the run did not finish"
    return w


def test_run_produces_views(wb):
    from kzlab.ui.views import TABS, wav_length

    assert wb.error is None, wb.error
    assert len(wb.results) == 1 and wb.results[0].ok
    assert [wb.tabs.get_title(i) for i in range(len(TABS))] == list(TABS)
    assert wb.progress.value == wb.progress.max > 0
    ev = wb.views["T-evolution"]
    labels = tick_labels(ev.figures[0])
    assert all(b in labels for b in BLOCKS), labels
    ts = {r["stage"]: r["T"] for r in ev.rows}
    assert ts["decoder.0"] == 3 * 4 and ts["decoder.4"] == 3 * 1920  # 4 x (2*2), then x 8*5*4*3
    audio = wb.views["Audio"]
    assert audio.data["samples"] == 3 * 1920
    assert wav_length(audio.audio[0][1]) == 3 * 1920
    kids = wb._tab_boxes["Audio"].children
    assert any(type(k).__name__ == "Audio" for k in kids)
    assert any(type(k).__name__ == "Image" for k in kids)


def test_profile_views(wb):
    rec = wb.results[0]
    if rec.profile is None:
        pytest.skip("; ".join(rec.notes) or "no profile")
    rows = wb.views["Ops"].rows
    assert rows and all(k in rows[0] for k in ("name", "op", "stage", "backend", "time_ms", "gflops"))
    times = [r["time_ms"] for r in rows]
    assert times == sorted(times, reverse=True)
    wb.sort_by.value = "gflop"
    g = [r["gflop"] for r in wb.views["Ops"].rows]
    assert g == sorted(g, reverse=True)
    wb.sort_by.value = "time_ms"
    fig = wb.views["GFLOPs"].figures[0]
    assert any(b in tick_labels(fig) for b in BLOCKS)
    assert wb.views["Timeline"].figures


def test_compare_two_runs(wb):
    wb.lowering["conv"].value = "ktap"
    wb.run_button.click()
    assert wb.wait(300)
    wb.lowering["conv"].value = "im2col-f32"
    assert len(wb.results) == 2 and all(r.ok for r in wb.results)
    assert wb.results[1].spec.lowering["conv"] == "ktap"
    view = wb.views["Compare"]
    assert len(view.audio) == 2
    a, b = wb.results
    # both lowerings compute the same decoder: the outputs agree closely
    assert "SNR of B against A" in "".join(view.html)
    err = np.sum((a.wav - b.wav) ** 2) / np.sum(a.wav**2)
    assert err < 1e-4
    if a.profile is not None and b.profile is not None:
        r = view.data
        assert set(BLOCKS) <= set(r["stage"])
        for s in BLOCKS:
            assert r["stage"][s] > 0
        assert view.figures


def test_corrupt_file_is_a_message(wb, tmp_path):
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    n = len(wb.results)
    wb.model_path.value = str(bad)
    wb.run_button.click()
    assert wb.wait(60)
    wb.model_path.value = str(TINY_F32)
    assert len(wb.results) == n + 1 and not wb.results[-1].ok
    assert wb.error and "corrupt.gguf" in wb.error
    assert "corrupt.gguf" in wb.status.value
    assert "run failed" in "".join(wb.views["T-evolution"].html)
    assert not wb.run_button.disabled  # ready for the next run: the process is alive


def test_bad_option_is_a_message(wb):
    from kzlab.ui.workbench import RPC_CHOICE

    assert wb.rpc_address.disabled  # only the RPC entry reads the address field
    wb.backend.value = RPC_CHOICE
    assert not wb.rpc_address.disabled
    wb.rpc_address.value = "rpc://no-such-host"  # no port
    wb.run_button.click()
    assert wb.wait(60)
    wb.backend.value = "cpu"
    assert "no-such-host" in (wb.error or "")


def test_scan_lists_folder(wb):
    files = wb.scan()
    assert str(TINY_F32) in files and str(TINY_F16) in files
    assert "synthetic" in wb.models.options


def test_cancel_stops_a_run(tmp_path):
    import kzlab

    w = kzlab.Workbench()
    w.model_path.value = str(TINY_F32)
    w.input.value = "fixture"  # 100 frames: long enough to cancel
    w.threads.value = 1
    w.run_button.click()
    w.cancel_button.click()
    assert w.wait(300)
    assert w.results[-1].error is not None and "cancel" in w.results[-1].error


def test_export_html(wb, tmp_path):
    out = wb.export_html(tmp_path / "wb.html")
    text = out.read_text()
    assert text.count("<audio") >= len([r for r in wb.results if r.ok])
    assert "http://" not in text and "https://" not in text


def test_placement_tab(wb):
    """The Hexagon what-if: with mul_mat(kernel, im2col) the long convs pass v0.15.2's 1024-row limit."""
    if wb.hexagon.options == ("(none)",):
        pytest.skip("no Hexagon profile shipped")
    wb.hexagon.value = "hexagon-v0.15.2"
    wb.lowering["conv_src1"].value = "data"
    wb.lowering["wtype"].value = "f16"
    try:
        wb.run_button.click()
        assert wb.wait(300)
    finally:
        wb.hexagon.value = "(none)"
        wb.lowering["conv_src1"].value = "kernel"
        wb.lowering["wtype"].value = "native"
    rec = wb.results[-1]
    if rec.placement is None:
        pytest.skip("; ".join(rec.notes))
    view = wb.views["Placement"]
    assert view.figures and view.data["splits"] >= 1
    assert set(view.data["nodes_by_backend"]) == {"CPU", "HTP"}
    refused = [r for r in view.rows if r["verdict"] != "accepted"]
    long_refused = [r for r in refused if r["src1_rows"] > 1024]
    assert long_refused and all(r["stage"].startswith("decoder.") for r in long_refused)
    assert all(r["src1_rows"] <= 1024 for r in view.rows if r["verdict"] == "accepted")


def test_placement_tab_predicts_time_and_memory(wb):
    """With `predict` checked, the Placement tab says how long the placed decode would take, on what it rests
    (a CPU-only profile of the portable graph, taken for it), and whether each backend's memory fits."""
    wb.hexagon.value = "hexagon-v0.15.3"
    wb.predict.value = True
    wb.cpu_baseline_ms.value = 3340.0
    try:
        wb.run_button.click()
        assert wb.wait(300)
    finally:
        wb.hexagon.value, wb.predict.value, wb.cpu_baseline_ms.value = "(none)", False, 0.0
    rec = wb.results[-1]
    assert rec.ok and rec.placement is not None and rec.placement.predicted is not None, rec.notes
    view = wb.views["Placement"]
    assert view.data["predicted_ms"] == rec.placement.predicted.total_ms > 0
    text = "".join(view.html)
    assert "Predicted time and memory" in text and "from the CPU-only baseline 3340 ms" in text
    assert "Memory per backend" in text and "HTP" in view.data["memory"]
    assert len(view.figures) == 3  # placement, split timeline, predicted time per stage


def test_placement_tab_takes_what_ifs_and_stages(wb):
    """The what-if field changes the profile (`+SIN`: the SIN nodes move to the HTP; the label says so) and the
    stages field keeps the other stages on the CPU path; a bad what-if is a message in the run, not a crash."""
    wb.hexagon.value = "hexagon-v0.15.3"
    wb.hexagon_changes.value, wb.hexagon_stages.value = "+SIN hmx=0", "decoder"
    try:
        wb.run_button.click()
        assert wb.wait(300)
        rec = wb.results[-1]
        assert rec.ok and rec.placement is not None, rec.notes
        pl = rec.placement
        assert pl.config["profile"] == "hexagon-v0.15.3 (hmx=off, +SIN)" and pl.config["sched_stages"] == ["decoder"]
        assert all(n.backend == "HTP" for n in pl.nodes if n.op == "SIN")
        assert all(n.backend == "CPU" for n in pl.nodes if not n.stage.startswith("decoder") and n.op == "MUL_MAT")
        assert all(n.path in ("", "hvx") for n in pl.nodes)  # HMX off
        wb.hexagon_changes.value = "+SINE"
        wb.run_button.click()
        assert wb.wait(300)
        bad = wb.results[-1]
        assert bad.placement is None and any("not an op of this ggml" in n for n in bad.notes), bad.notes
    finally:
        wb.hexagon.value, wb.hexagon_changes.value, wb.hexagon_stages.value = "(none)", "", ""


def test_compare_tab_gives_a_probability_for_two_predicted_placements(wb):
    """Two predicted placements: the Placement tab shows the total as a range, and the Compare tab P(A faster than
    B) and the ratio's p10/p50/p90 from paired draws (the same device in each draw), seeded."""
    wb.predict.value = True
    wb.cpu_baseline_ms.value = 3340.0
    wb.lowering["conv_src1"].value = "data"
    try:
        for profile in ("hexagon-v0.15.2", "hexagon-v0.15.3"):
            wb.hexagon.value = profile
            wb.run_button.click()
            assert wb.wait(300)
    finally:
        wb.hexagon.value, wb.predict.value, wb.cpu_baseline_ms.value = "(none)", False, 0.0
        wb.lowering["conv_src1"].value = "kernel"
    a, b = wb.results[-2:]
    assert a.ok and b.ok and a.placement.predicted is not None and b.placement.predicted is not None
    place = wb.views["Placement"]
    r = place.data["predicted_range"]
    assert r["min"] <= r["p10"] <= place.data["predicted_ms"] == r["p50"] <= r["p90"] <= r["max"] and r["draws"] > 1
    assert "p10" in "".join(place.html) and "low" in "".join(place.html)
    view = wb.show_compare()
    d = view.data["paired"]
    (pair,) = d["pairs"]
    assert (pair["a"], pair["b"]) == ("A", "B") and 0.0 <= pair["p_a_faster"] <= 1.0
    q = pair["ratio"]
    assert q["p10"] <= q["p50"] <= q["p90"]
    # each total on the paired draws lies where that prediction's own draws put it (the same distribution)
    for name, rec in (("A", a), ("B", b)):
        own, paired = rec.placement.predicted.range, d["configs"][name]["range"]
        assert own["min"] * 0.9 <= paired["p50"] <= own["max"] * 1.1
    text = "".join(view.html)
    assert f"P(A faster than B) = <b>{pair['p_a_faster']:.2f}</b>" in text
    assert any("P = " in t.get_text() for f in view.figures for ax in f.axes for t in ax.texts)
    again = wb.show_compare().data["paired"]
    assert again["pairs"] == d["pairs"]  # seeded: the same draws each time


def test_stream_tab(wb):
    """The Stream tab streams the first decoder's input codes at each chunk size (graphs built before timing): the
    figure, a row per size, and the carried state's tensors with their bytes; the stream equals the offline decode."""
    from kzlab.ui.views import TABS

    assert "Stream" in TABS and any(type(k).__name__ == "HBox" for k in wb._tab_boxes["Stream"].children)
    n_runs = len(wb.results)
    wb.stream_sizes.value = "3, 1"
    wb.stream_button.click()
    assert wb.wait(300)
    assert wb.error is None, wb.error
    assert len(wb.results) == n_runs and len(wb.streams) == 1  # a stream is not a run: the run tabs keep theirs
    sw = wb.streams[-1]
    assert sw.ok and sw.kind == "stateful" and sw.frames == wb.frames.value
    view = wb.views["Stream"]
    assert [r["size"] for r in view.rows] == [1, 3]
    for r in view.rows:
        assert r["first_audio_ms"] > 0 and r["rtf"] > 0 and r["calls"] == -(-sw.frames // r["size"])
        assert r["snr_db"] >= 100, r  # against the offline decode in the streaming call's arithmetic
    assert view.data["state"] and view.data["state_bytes"] == sum(s["nbytes"] for s in view.data["state"])
    text = "".join(view.html)
    assert "before timing" in sw.prepared and "carried state" in text and sw.backend_label in text
    fig = view.figures[0]
    assert [ax.get_xscale() for ax in fig.axes] == ["log", "log"]
    assert any(line.get_ydata()[0] == 1.0 and "real time" in line.get_label() for line in fig.axes[1].lines)
    kids = wb._tab_boxes["Stream"].children
    assert any(type(k).__name__ == "Image" for k in kids) and kids[0].children[0] is wb.stream_sizes
    assert wb.progress.value == wb.progress.max > 0 and "Stream tab" in wb.status.value
    wb.stream_sizes.value = "0,x"
    wb.stream_button.click()
    assert wb.wait(10) and "chunk sizes" in (wb.error or "") and "'0,x'" in wb.error
    assert len(wb.streams) == 1
    wb.stream_sizes.value = "1,4,16"


def test_stream_tab_of_a_windowed_family_says_so():
    """A family that is not causal streams in overlapping windows: the tab says so, carries no state, and gives the
    SNR against the offline decode."""
    import kzlab

    w = kzlab.Workbench(model="wavtokenizer-tiny")
    w.frames.value, w.threads.value, w.repeat.value = 24, 2, 1
    w.stream_sizes.value = "8"
    w.stream_button.click()
    assert w.wait(300)
    sw = w.streams[-1]
    assert sw.ok, sw.error
    assert sw.kind == "windowed" and not sw.state and sw.reference == "the offline decode"
    text = "".join(w.views["Stream"].html)
    assert "not causal" in text and "no carried state" in text
    assert w.views["Stream"].rows[0]["snr_db"] is not None
