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
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1600})
            page.on("request", lambda r: requests.append(r.url))
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
