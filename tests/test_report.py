"""The HTML report: `kzlab report` writes one self-contained file that a headless browser renders, with
playable audio and no reference to anything outside the file."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, run_cli

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
#: ms, the browser's launch and the page's load: a hang guard (Playwright's default, 30 s, is one that a busy
#: 2-core machine can reach)
BROWSER_HANG_MS = 300_000


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    p = run_cli(
        "report",
        str(TINY / "qwentts-tokenizer-f32.gguf"),
        str(TINY / "crispasr-tokenizer-f16.gguf"),
        "--frames", "4", "--repeat", "1", "--threads", "2", "-o", str(out),
    )
    assert "wrote" in p.stdout
    return out


def test_report_is_self_contained(report):
    text = report.read_text()
    assert "http://" not in text and "https://" not in text
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", text), "a resource outside the file"
    assert text.count("<audio") >= 2  # one per run (+ the comparison's)
    assert "data:image/png;base64," in text
    for needle in ("decoder.4", "ggml-python", "lowering.conv", "Compare run 1 and run 2"):
        assert needle in text, needle


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_report_in_headless_chromium(report, tmp_path):
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, timeout=BROWSER_HANG_MS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            page.on("request", lambda r: requests.append(r.url))
            page.set_default_timeout(BROWSER_HANG_MS)
            page.goto(report.as_uri())
            durations = page.evaluate(
                """async () => {
                    const els = Array.from(document.querySelectorAll('audio'));
                    return await Promise.all(els.map(a => a.readyState >= 1 ? a.duration :
                        new Promise(res => { a.addEventListener('loadedmetadata', () => res(a.duration));
                                             a.addEventListener('error', () => res(-1)); a.load(); })));
                }"""
            )
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=False)
            n_img = page.evaluate("Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length")
        finally:
            browser.close()
    assert len(durations) >= 2
    assert all(d > 0 for d in durations), durations
    assert n_img >= 4
    external = [u for u in requests if not u.startswith(("file:", "data:"))]
    assert not external, external
    import matplotlib.image as mpimg

    px = mpimg.imread(shot)
    assert px.shape[0] > 100 and float(np.var(px[..., :3])) > 1e-3, "blank screenshot"


def test_report_with_predicted_placements(tmp_path):
    """`--hexagon --predict`: each run's placement with its predicted time, parameters and memory, and the A/B of
    the two placements."""
    out = tmp_path / "r.html"
    p = run_cli(
        "report", str(TINY / "qwentts-tokenizer-f32.gguf"), str(TINY / "crispasr-tokenizer-f16.gguf"),
        "--frames", "4", "--repeat", "1", "--threads", "2", "--hexagon", "hexagon-v0.15.3", "--predict",
        "--cpu-baseline-ms", "3340", "--mode", "portable", "-o", str(out),
    )
    assert "wrote" in p.stdout
    text = out.read_text()
    assert text.count("Predicted time and memory") == 2 and "from the CPU-only baseline 3340 ms" in text
    assert "Memory per backend" in text and "Placements A and B" in text and 'class="error"' not in text


# ---- predictions as ranges, decisions as probabilities -------------------------------------------------------
WHATIF_CONFIGS = ["v0.15.2=hexagon-v0.15.2", "v0.15.3=hexagon-v0.15.3", "chunk=hexagon-v0.15.2,mm_chunk=1024"]


@pytest.fixture(scope="module")
def whatif_pair(tmp_path_factory):
    """A what-if on the tiny decoder from the stated ranges, and one calibrated on two totals it gave itself (a
    profile cache of its own, never the user's)."""
    import kzlab

    mp = pytest.MonkeyPatch()
    mp.setenv("KZLAB_CACHE", str(tmp_path_factory.mktemp("cache")))
    try:
        m = kzlab.load_model(TINY / "qwentts-tokenizer-f32.gguf")
        kw = {"frames": 4, "cpu_baseline_ms": 200.0, "draws": 300, "seed": 3, "threads": 1, "target_ms": 150.0}
        prior = kzlab.whatif(m, WHATIF_CONFIGS, **kw)
        measured = {"cpu": 200.0, "v0.15.2": prior.decision.configs["v0.15.2"]["range"]["p50"]}
        post = kzlab.whatif(m, WHATIF_CONFIGS, measured=measured, **kw)
    finally:
        mp.undo()
    return prior, post


def _segments(ax) -> list[tuple[float, float]]:
    """(low, high) of every vertical segment the axes' error bars draw."""
    from matplotlib.collections import LineCollection

    out = []
    for c in ax.collections:
        if isinstance(c, LineCollection):
            out += [(float(min(s[:, 1])), float(max(s[:, 1]))) for s in c.get_segments()]
    return out


def test_predicted_stages_draws_each_range(whatif_pair):
    """Every stage's bar is the p50 with whiskers at p10-p90 and min-max, read from the prediction's own ranges."""
    from kzlab import plots

    pl = whatif_pair[0].placements["v0.15.3"]
    fig = plots.predicted_stages(pl, log=False)
    ax = fig.axes[0]
    stages = plots.stage_order(pl.predicted.by_stage_ms)
    heights = [p.get_height() for p in ax.patches]
    assert heights == pytest.approx([pl.predicted.stage_ranges[s]["p50"] for s in stages])
    segs = _segments(ax)
    for s in stages:
        r = pl.predicted.stage_ranges[s]
        for lo, hi in ((r["p10"], r["p90"]), (r["min"], r["max"])):
            assert any(abs(a - lo) <= 1e-9 * max(1.0, hi) and abs(b - hi) <= 1e-9 * max(1.0, hi) for a, b in segs), s
    assert "p10" in ax.get_legend().get_texts()[0].get_text()


def test_decision_figure_from_the_object_and_its_json(whatif_pair):
    """The what-if figure shows each total's p10-p90 box and min-max line, the target, the measured totals and a P
    for each pair, alike from a WhatIf and from its JSON."""
    import json

    from kzlab import plots

    post = whatif_pair[1]
    d = json.loads(json.dumps(post.to_dict()))
    for fig in (plots.decision(post), plots.decision(d)):
        ax, bx = fig.axes[:2]
        boxes = sorted(v for p in ax.patches for v in (p.get_x(), p.get_x() + p.get_width()))
        want = sorted(v for c in d["configs"].values() for v in (c["range"]["p10"], c["range"]["p90"]))
        assert boxes == pytest.approx(want, rel=1e-12)
        assert any(line.get_xdata()[0] == d["target_ms"] for line in ax.lines)  # the target line
        assert sum(1 for line in ax.lines if line.get_marker() == "D") == len(d["calibration"]["measured"])
        texts = [t.get_text() for t in bx.texts]
        assert texts == [f"P = {p['p_a_faster']:.2f}" for p in d["pairs"]]
        assert f"P = {d['decision']['p_a_faster']:.2f}" in fig.get_suptitle()


def test_report_shows_the_whatif(whatif_pair, tmp_path):
    """`kzlab report --whatif W.json` (no model needed): configurations as ranges, pairs with P, the target, the
    next measurement with its device command, and what the calibration identified, left at its prior and
    flagged."""
    import json

    post = whatif_pair[1]
    w = tmp_path / "w.json"
    w.write_text(json.dumps(post.to_dict()))
    out = tmp_path / "w.html"
    p = run_cli("report", "--whatif", str(w), "-o", str(out))
    assert "wrote" in p.stdout
    text = out.read_text()
    assert "What-if 1: which configuration to try first" in text and "P(A faster than B)" in text
    d = post.decision
    assert f"P = {d.decision['p_a_faster']:.2f}" in text and "P(&lt;= 150 ms)" in text
    assert d.next_measurements and all(html_escape(m["command"]) in text for m in d.next_measurements)
    assert "identified by the totals" in text and "left at their prior" in text
    assert text.count("data:image/png;base64,") == 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"configs": {}}))
    p = run_cli("report", "--whatif", str(bad), "-o", str(tmp_path / "x.html"), check=False)
    assert p.returncode != 0 and "not a what-if result: no pairs" in p.stdout + p.stderr


def html_escape(s: str) -> str:
    import html

    return html.escape(s)
