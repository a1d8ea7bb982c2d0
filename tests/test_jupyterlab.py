"""JupyterLab in a real browser (Debian's chromium, driven by Playwright): a notebook runs top to bottom, then
its Workbench's Run button works and every result tab shows what a person would look at: figures that load,
tables with rows, audio with a duration; no widget error and no traceback anywhere. Two notebooks: 04 (the
first decoder family's tiny decoder) and 05 (the WavTokenizer tiny fixture, with its reference .npz: the
Workbench shows the family, its toggles that do not apply are disabled, and the Compare tab has the per-stage
accuracy).

Headless and loopback only: `jupyter lab` of this interpreter on a free port of 127.0.0.1 with no token, its
config, data, runtime, settings and workspaces under tmp_path; it is stopped with its kernels at the end."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from lab_helpers import CHROMIUM, CHROMIUM_ARGS, LabServer

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOK = NOTEBOOKS / "04_compare_and_report.ipynb"
WAVTOKENIZER = NOTEBOOKS / "05_wavtokenizer.ipynb"
WT_GGUF = Path(__file__).resolve().parent / "data" / "wavtokenizer-tiny" / "wavtokenizer-tiny-f32.gguf"
#: the tabs with figures and the least number of them (kzlab.ui.views: t_evolution; gflop_breakdown and
#: roofline; timeline; waveform and spectrogram)
FIGURES = {"T-evolution": 1, "GFLOPs": 2, "Timeline": 1, "Audio": 2}
#: what ipywidgets shows in place of a widget it cannot display (jupyterlab_widgets' error widget)
WIDGET_ERROR = re.compile(r"Error displaying widget|Failed to load (model|view) class|Could not (create|instantiate)")
#: an error output: JupyterLab renders it like stderr (data-mime-type application/vnd.jupyter.stderr), so it is
#: told from a warning by its text
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s*[A-Za-z_][\w.]*(Error|Exception)\b.*$", re.M)

# Every wait below is a hang guard, never a speed check: many times what a busy 2-core machine takes.
RUN_ALL_TIMEOUT = 600  # s; ~15 s on 2 cores
WORKBENCH_TIMEOUT = 300  # s, the Run button's runs
STEP = 60_000  # ms, one page interaction (a tab, an image, an audio's metadata)
START = 120  # s: the page's first load, the notebook's first cell, its kernel; the browser's launch
#: s, the whole test, its server's start included: above the sum of the guards above, which pytest-timeout's
#: per-test default (900 s) is not
TEST_HANG_S = 3600

KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle';
}"""
NOTEBOOK_JSON = "() => window.jupyterapp.shell.currentWidget.context.model.toJSON()"


def _skip_reason() -> str | None:
    if not CHROMIUM:
        return "no chromium (/usr/bin/chromium or chromium on PATH): apt-get install chromium"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not importable: pip install playwright (the browser is Debian's chromium)"
    return None


SKIP = _skip_reason()


@pytest.fixture(params=[NOTEBOOK, WAVTOKENIZER], ids=["04", "05-wavtokenizer"])
def notebook(request) -> Path:
    return request.param


@pytest.fixture
def lab(tmp_path, notebook):
    """A JupyterLab server whose root holds a copy of the notebook (it finds tests/data through the editable
    kzlab install, whatever its working directory)."""
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        pytest.fail("jupyterlab is not installed in this environment: pip install -e '.[notebook]'")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(notebook, root / notebook.name)
    server = LabServer(tmp_path / "lab", root)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def _wait(what: str, cond, timeout: float, poll: float = 0.5):
    """Poll `cond()` until it is truthy (returned) or `timeout` s pass (AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


def _accept_dialog(page) -> None:
    """Accept a JupyterLab dialog if one is open (e.g. "Select Kernel" with the notebook's python3 preselected)."""
    dlg = page.locator(".jp-Dialog")
    if dlg.count() and dlg.first.is_visible():
        text = dlg.first.inner_text()
        print("dialog:", " ".join(text.split()))
        assert "Select Kernel" in text or "Kernel" in text, f"unexpected dialog: {text}"
        dlg.locator(".jp-mod-accept").first.click()


def _tracebacks(page) -> list[str]:
    """Error outputs in the notebook: in the DOM (what one sees) and in the notebook model (output_type)."""
    found = []
    for el in page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').all():
        text = el.inner_text()
        if TRACEBACK.search(text):
            found.append(text[-2000:])
    nb = page.evaluate(NOTEBOOK_JSON)
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
    return found


def _widget_errors(page) -> list[str]:
    errs = [el.inner_text() for el in page.locator(".jupyter-widgets-error-widget").all()]
    body = page.locator("#main").inner_text()
    errs += [m.group(0) for m in WIDGET_ERROR.finditer(body)]
    return errs


def _run_all_cells(page, n_code: int) -> None:
    """Run > Run All Cells, then wait until every code cell has an execution count and the kernel is idle."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Run\s*$")).click()
    item = page.locator(".lm-Menu-item[data-command='runmenu:run-all'], "
                        ".lm-Menu-item[data-command='notebook:run-all-cells']")
    item.first.click(timeout=STEP)
    prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-prompt")

    def done():
        _accept_dialog(page)
        texts = prompts.all_inner_texts()
        counted = [t for t in texts if re.fullmatch(r"\s*\[\d+\]:\s*", t)]
        return len(texts) == n_code and len(counted) == n_code and page.evaluate(KERNEL_IDLE)

    _wait(f"all {n_code} code cells to run (Run > Run All Cells)", done, RUN_ALL_TIMEOUT)


def _check_tab(page, wb, title: str) -> dict:
    """Click a result tab of the Workbench and check what it shows; returns what was seen."""
    tab = wb.locator(".widget-tab-bar .lm-TabBar-tab").filter(
        has=page.locator(".lm-TabBar-tabLabel", has_text=re.compile(rf"^\s*{re.escape(title)}\s*$")))
    assert tab.count() == 1, f"no tab {title!r} in the Workbench"
    tab.click(timeout=STEP)
    page.wait_for_function("el => el.classList.contains('lm-mod-current')", arg=tab.element_handle(), timeout=STEP)
    panel = wb.locator(".widget-tab-contents > .widget-box:not(.lm-mod-hidden)")
    _wait(f"the {title} tab's panel to show", lambda: panel.count() == 1 and panel.first.is_visible(), STEP / 1000)
    seen = {"text": " ".join(panel.inner_text().split())[:200]}
    box = panel.bounding_box()
    assert box and box["height"] > 0 and box["width"] > 0, f"{title}: the tab shows nothing"

    imgs = panel.locator("img")
    seen["images"] = []
    for k in range(imgs.count()):
        img = imgs.nth(k)
        img.scroll_into_view_if_needed(timeout=STEP)
        page.wait_for_function("el => el.complete && el.naturalWidth > 0 && el.naturalHeight > 0",
                               arg=img.element_handle(), timeout=STEP)
        seen["images"].append(img.evaluate("el => [el.naturalWidth, el.naturalHeight]"))
    want = FIGURES.get(title, 0)
    assert len(seen["images"]) >= want, f"{title}: {len(seen['images'])} figure(s), want at least {want}"

    seen["table_rows"] = panel.locator("table tr:has(td)").count()
    if title == "Ops":
        assert seen["table_rows"] >= 1, "Ops: no table rows of ops"

    audios = panel.locator("audio")
    seen["audio_s"] = []
    for k in range(audios.count()):
        a = audios.nth(k)
        a.scroll_into_view_if_needed(timeout=STEP)
        h = a.element_handle()
        if a.evaluate("el => el.readyState") < 1:
            a.evaluate("el => { el.preload = 'metadata'; el.load(); }")
        page.wait_for_function("el => el.readyState >= 1 && isFinite(el.duration) && el.duration > 0",
                               arg=h, timeout=STEP)
        seen["audio_s"].append(a.evaluate("el => el.duration"))
    if title == "Audio":
        assert seen["audio_s"] and all(d > 0 for d in seen["audio_s"]), f"Audio: no playable audio: {seen}"

    errors = [el.inner_text() for el in panel.locator(".jupyter-widgets-error-widget").all()]
    errors += [m.group(0) for m in WIDGET_ERROR.finditer(panel.inner_text())]
    assert not errors, f"{title}: widget errors: {errors}"
    return seen


@pytest.mark.browser
@pytest.mark.timeout(TEST_HANG_S)
@pytest.mark.skipif(SKIP is not None, reason=SKIP or "")
def test_notebook_and_workbench_in_jupyterlab(lab, notebook, tmp_path):
    import nbformat
    from playwright.sync_api import sync_playwright

    import kzlab
    from kzlab.arch import arch_of, not_applicable
    from kzlab.ui.views import TABS

    nb = nbformat.read(notebook, as_version=4)
    family = kzlab.load_model(WT_GGUF).hparams if notebook == WAVTOKENIZER else None
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    console: list[str] = []
    shot = tmp_path / "jupyterlab-failure.png"
    t0 = time.perf_counter()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
                                    timeout=START * 1000)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(STEP)
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            try:
                page.goto(f"{lab.url}/lab/tree/{notebook.name}?reset", timeout=START * 1000)
                page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=START * 1000)
                _wait("the notebook's kernel to start", lambda: _accept_dialog(page) or page.evaluate(KERNEL_IDLE),
                      START)
                kernels = lab.api("/api/kernels")
                assert [k["name"] for k in kernels] == ["python3"], kernels
                print(f"lab up, kernel idle: {time.perf_counter() - t0:.1f} s")

                _run_all_cells(page, n_code)
                print(f"notebook ran: {time.perf_counter() - t0:.1f} s")
                assert not _tracebacks(page), f"error outputs in the notebook: {_tracebacks(page)}"
                n_img = page.locator('.jp-OutputArea-output[data-mime-type="image/png"] img').count()
                assert n_img >= 1, "the notebook shows no figures"

                wb = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-tab")).last
                wb.wait_for(state="visible", timeout=STEP)
                assert not _widget_errors(page), f"widget errors: {_widget_errors(page)}"
                titles = [t.strip() for t in wb.locator(".widget-tab-bar .lm-TabBar-tabLabel").all_inner_texts()]
                assert titles == list(TABS), titles
                if family is not None:  # the family is shown, and what does not apply to it is disabled
                    off = not_applicable(family)
                    shown = wb.locator(".kz-family")
                    assert shown.count() == 1 and all(k in shown.inner_text() for k in off), shown.all_inner_texts()
                    assert wb.locator("select:disabled").count() == len(off)

                run = wb.locator("button.widget-button", has_text=re.compile(r"^\s*Run\s*$"))
                assert run.count() == 1, "no Run button in the Workbench"
                run.scroll_into_view_if_needed()
                run.click()
                status = wb.locator(".widget-html-content").filter(has_text=re.compile(r"^\s*(done|error):"))
                _wait("the Workbench's run to finish (status 'done:' or 'error:')", lambda: status.count() > 0,
                      WORKBENCH_TIMEOUT)
                text = status.first.inner_text().strip()
                assert text.startswith("done:"), f"the Workbench's run failed: {text}"
                print(f"workbench: {text} ({time.perf_counter() - t0:.1f} s)")

                for title in TABS:
                    seen = _check_tab(page, wb, title)
                    if family is not None and title == "Compare":  # one run against the reference .npz
                        assert "Accuracy per stage" in seen["text"] and len(seen["images"]) >= 1, seen
                        assert seen["table_rows"] >= len(arch_of(family).stages(family)), seen
                    wb.locator(".widget-tab").screenshot(path=str(tmp_path / f"tab-{title}.png"))
                    print(f"  {title}: {seen}")
                assert not _widget_errors(page), f"widget errors: {_widget_errors(page)}"
                assert not _tracebacks(page), f"error outputs in the notebook: {_tracebacks(page)}"
                widget_console = [c for c in console if WIDGET_ERROR.search(c)]
                assert not widget_console, f"widget errors in the browser console: {widget_console}"
                page.screenshot(path=str(tmp_path / "jupyterlab-done.png"))
            except BaseException:
                try:
                    page.screenshot(path=str(shot))
                    print(f"\nscreenshot: {shot}")
                except Exception as e:  # the page may be gone
                    print(f"\nno screenshot: {e}")
                print("browser console errors:", *console[-20:], sep="\n  ")
                print(f"jupyter lab log ({lab.log_path}):\n{lab.log_tail()}")
                raise
        finally:
            browser.close()
    print(f"jupyterlab test: {time.perf_counter() - t0:.1f} s; console errors: {len(console)}")
