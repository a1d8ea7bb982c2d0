"""`kzlab.Workbench()`: the notebook front end (ipywidgets 8, JupyterLab 4).

The widgets hold no logic: Run builds a `RunSpec` from their values and calls `kzlab.app.runner.execute`
(the function `kzlab report` and `kzlab demo` call) in a worker thread, so the kernel stays responsive and
the progress bar moves; Cancel asks the worker to stop. Each result tab shows a `kzlab.ui.views` view.

Attributes for scripts and headless tests (all ipywidgets unless noted):

* inputs: `model_path` (Text: a GGUF path, or a built-in name), `models` (SelectMultiple: built-ins and
  the GGUF files of `folder`, refreshed by `scan_button`), `input` (Dropdown: fixture/random/npy/audio),
  `frames`, `npy_path`, `audio_path`, `backend` (Dropdown: auto, this build's backends, and the RPC entry
  whose address is `rpc_address`), `threads`, `sched` (checked: under the scheduler; unchecked: none),
  `op_offload`, `weights_on`,
  `lowering` (dict of option name -> widget, names from kzlab.graph.options), `repeat`, `hexagon`,
  `hexagon_changes` (Text: what-if changes to the profile, `+SIN -CONCAT hmx=0`), `hexagon_stages` (Text: the
  stages under the device's scheduler), `predict`
  (Checkbox: predicted time and memory of the Hexagon placement), `cpu_baseline_ms` (the CPU-only decode measured
  on the device, 0: none), `ref_path` (a reference .npz of stage activations: its codes are decoded and every
  stage compared with it) and `bound` (dB: the first stage below it is named), `family` (HTML: the decoder's
  family; lowering options that do not apply to it are disabled, the reason in their tooltip; `show_family()`).
* controls: `run_button`, `cancel_button`, `progress` (IntProgress), `status` (HTML: progress and errors),
  `tabs` (Tab; titles in `kzlab.ui.views.TABS`), `sort_by` / `sort_desc` (per-op table order),
  `compare_a` / `compare_b` (Dropdowns of run indices), `compare_button`; in the Stream tab `stream_sizes`
  (Text: chunk sizes, `1,4,16`) and `stream_button` (streams the first decoder with the options above, its input's
  codes, each size `repeat` times; `kzlab.app.streaming.execute_stream`).
* results (plain Python): `results` (list of `RunRecord`), `streams` (list of `StreamSweep`), `views` (tab title
  -> `View` last shown, with its matplotlib figures, table rows and audio bytes), `error` (the last error text or
  None), `wait(timeout)` (join the worker; True when it finished), `export_html(path)`.
"""

from __future__ import annotations

import dataclasses
import html
import os
import threading
from pathlib import Path

import ipywidgets as W

from kzlab.analysis.placement.capabilities import names as capability_names
from kzlab.app.builtins import BUILTINS, SPEECH
from kzlab.app.runner import HEXAGON_PROFILES, INPUTS, Canceller, RunRecord, RunSpec, execute, peek_family
from kzlab.app.streaming import DEFAULT_SIZES, StreamSweep, execute_stream
from kzlab.environment import default_threads
from kzlab.errors import KzlabError
from kzlab.graph import options as lowering_options
from kzlab.graph.options import Lowering
from kzlab.runtime.backends import available_backends
from kzlab.runtime.stream import parse_sizes
from kzlab.ui import views as V

NO_HEXAGON = "(none)"
#: progress-bar ticks per step of a run
SUB = 20
#: compact tables inside HTML widgets (JupyterLab's defaults are made for prose)
TABLE_CSS = (
    "<style>.kz-view table{border-collapse:collapse;font-size:12px;margin:4px 0}"
    ".kz-view th,.kz-view td{border:1px solid #ccc;padding:1px 6px;line-height:1.35;text-align:left}"
    ".kz-view th{background:#eef2f8}.kz-view{max-height:420px;overflow:auto}</style>"
)


def hexagon_profiles() -> list[str]:
    """Hexagon capability profiles shipped with the placement simulator."""
    return [n for n in capability_names() if n.startswith("hexagon-")] or list(HEXAGON_PROFILES)


#: the backend dropdown's entry that reads the address from `rpc_address`
RPC_CHOICE = "rpc://HOST:PORT"


def backend_choices() -> list[str]:
    """`auto`, the backends this ggml build has, and the RPC entry (the address typed next to it)."""
    return ["auto"] + [b for b in available_backends() if "HOST" not in b] + [RPC_CHOICE]


def lowering_widgets(style: dict) -> dict[str, W.ValueWidget]:
    """One widget per field of `Lowering`: a Dropdown where kzlab.graph.options lists the choices
    (`<NAME>_CHOICES`), an integer box for integer options; defaults and tooltips from the same module."""
    out: dict[str, W.ValueWidget] = {}
    defaults = Lowering()
    for f in dataclasses.fields(Lowering):
        value = getattr(defaults, f.name)
        choices = getattr(lowering_options, f"{f.name.upper()}_CHOICES", None)
        if choices:
            wid = W.Dropdown(options=list(choices), value=value, description=f.name, style=style)
        elif isinstance(value, int):
            wid = W.BoundedIntText(value=value, min=0, max=1 << 30, description=f.name, style=style)
        else:
            wid = W.Text(value=str(value), description=f.name, style=style)
        wid.tooltip = lowering_options.HELP.get(f.name, "")
        out[f.name] = wid
    return out


class Workbench:
    """Pick decoders and options, run, and look at the results in tabs."""

    def __init__(self, folder: str | os.PathLike | None = None, model: str = "synthetic"):
        lay = W.Layout(width="95%")
        style = {"description_width": "110px"}
        self.model_path = W.Text(value=model, description="decoder", placeholder="path.gguf or a built-in name",
                                 layout=lay, style=style)
        #: the decoder's family (kzlab.arch), read from the file's header when the path changes and from each run
        self.family = W.HTML(value="")
        self.folder = W.Text(value=str(folder or Path.cwd()), description="folder", layout=lay, style=style)
        self.scan_button = W.Button(description="list GGUF files", icon="folder-open")
        self.models = W.SelectMultiple(options=list(BUILTINS), description="also run", rows=5, layout=lay,
                                       style=style)
        self.input = W.Dropdown(options=list(INPUTS), value="random", description="input", style=style)
        self.frames = W.BoundedIntText(value=8, min=1, max=100000, description="frames", style=style)
        self.npy_path = W.Text(description="codes .npy", placeholder="codes [16, T]", layout=lay, style=style)
        self.audio_path = W.Text(value=str(SPEECH), description="audio (24 kHz)", layout=lay, style=style)
        self.backend = W.Dropdown(value="auto", options=backend_choices(), description="backend", style=style)
        self.rpc_address = W.Text(value="", description="RPC server", placeholder="rpc://127.0.0.1:50052",
                                  style=style, disabled=True)
        self.backend.observe(lambda c: setattr(self.rpc_address, "disabled", c["new"] != RPC_CHOICE), names="value")
        cores = default_threads()
        self.threads = W.BoundedIntText(value=cores, min=1, max=max(cores, 256), description="threads", style=style)
        # checked = under ggml_backend_sched, unchecked = no scheduler, exactly; the default is what backend
        # "auto" needs here (BLAS + CPU under the scheduler when this build has BLAS)
        self.sched = W.Checkbox(value="blas" in available_backends(), description="scheduler (ggml_backend_sched)")
        self.op_offload = W.Checkbox(value=True, description="op_offload")
        self.weights_on = W.Text(value="", description="weights on", placeholder="backend name (default: first)",
                                 style=style)
        self.lowering: dict[str, W.ValueWidget] = lowering_widgets(style)
        self.repeat = W.BoundedIntText(value=3, min=1, max=1000, description="repeat", style=style)
        self.hexagon = W.Dropdown(options=[NO_HEXAGON, *hexagon_profiles()], value=NO_HEXAGON,
                                  description="Hexagon profile", style=style)
        self.hexagon_changes = W.Text(value="", description="what-if", style=style,
                                      placeholder="+SIN -CONCAT hmx=0",
                                      tooltip="ops the device would also run (+OP) or not (-OP), its options")
        self.hexagon_stages = W.Text(value="", description="stages", style=style,
                                     placeholder="all (e.g. decoder)",
                                     tooltip="only these stages under the device's scheduler; the rest on the CPU")
        self.predict = W.Checkbox(value=False, description="predict time and memory")
        self.ref_path = W.Text(value="", description="reference .npz", layout=lay, style=style,
                               placeholder="stage activations (codes + one array per stage) to compare each stage with")
        self.bound = W.BoundedFloatText(value=40.0, min=-1000.0, max=1000.0, description="bound dB", style=style,
                                        tooltip="the Compare tab names the first stage whose SNR is below this")
        self.cpu_baseline_ms = W.BoundedFloatText(value=0.0, min=0.0, max=1e7, description="CPU-only ms",
                                                  style=style, tooltip="the CPU-only decode measured on the device "
                                                  "(0: this machine's CPU as it is)")
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.cancel_button = W.Button(description="Cancel", icon="stop", disabled=True)
        self.progress = W.IntProgress(value=0, min=0, max=1, description="", layout=W.Layout(width="40%"))
        self.status = W.HTML(value="ready")
        self.sort_by = W.Dropdown(options=list(V.OP_COLUMNS), value="time_ms", description="sort by")
        self.sort_desc = W.ToggleButton(value=True, description="descending")
        self.compare_a = W.Dropdown(options=[], description="A")
        self.compare_b = W.Dropdown(options=[], description="B")
        self.compare_button = W.Button(description="compare")
        self.stream_sizes = W.Text(value=",".join(map(str, DEFAULT_SIZES)), description="chunk sizes", style=style,
                                   placeholder="frames per call, e.g. 1,4,16",
                                   tooltip="each size is streamed on its own, its graphs built before timing")
        self.stream_button = W.Button(description="Stream", icon="forward",
                                      tooltip="stream the first decoder's input codes at each chunk size")
        self._tab_boxes = {t: W.VBox() for t in V.TABS}
        self.tabs = W.Tab(children=[self._tab_boxes[t] for t in V.TABS], titles=list(V.TABS))

        self.results: list[RunRecord] = []
        self.streams: list[StreamSweep] = []
        self.views: dict[str, V.View] = {}
        self.error: str | None = None
        self._thread: threading.Thread | None = None
        self._canceller: Canceller | None = None

        self.run_button.on_click(lambda _b: self.run())
        self.cancel_button.on_click(lambda _b: self.cancel())
        self.scan_button.on_click(lambda _b: self.scan())
        self.compare_button.on_click(lambda _b: self.show_compare())
        self.stream_button.on_click(lambda _b: self.stream())
        self.sort_by.observe(lambda _c: self._show_ops(), names="value")
        self.model_path.observe(lambda _c: self.show_family(), names="value")
        self.sort_desc.observe(lambda _c: self._show_ops(), names="value")

        options = W.VBox([
            W.HTML("<b>decoders</b>"), self.model_path, self.family, W.HBox([self.folder, self.scan_button]),
            self.models,
            W.HTML("<b>input</b>"), W.HBox([self.input, self.frames]), self.npy_path, self.audio_path,
            W.HTML("<b>backend</b>"), W.HBox([self.backend, self.rpc_address]), W.HBox([self.threads, self.weights_on]),
            W.HBox([self.sched, self.op_offload]),
            W.HTML("<b>lowering</b>"),
            *[W.HBox(list(self.lowering.values())[i : i + 3]) for i in range(0, len(self.lowering), 3)],
            W.HBox([self.repeat, self.hexagon]), W.HBox([self.hexagon_changes, self.hexagon_stages]),
            W.HBox([self.predict, self.cpu_baseline_ms]),
            W.HTML("<b>accuracy</b>"), W.HBox([self.ref_path, self.bound]),
        ])
        self.widget = W.VBox([
            options, W.HBox([self.run_button, self.cancel_button, self.progress]), self.status, self.tabs,
        ])
        self._tab_boxes["Ops"].children = [W.HBox([self.sort_by, self.sort_desc])]
        self._tab_boxes["Compare"].children = [W.HBox([self.compare_a, self.compare_b, self.compare_button])]
        self._place("Stream", V.stream_view(None), self._stream_header())
        self.show_family()

    # ---- notebook display -----------------------------------------------------------------------------
    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)

    # ---- the decoder's family ---------------------------------------------------------------------------
    def show_family(self, arch=None) -> str | None:
        """Show the family of the decoder in `model_path` (or `arch`, a family or a RunRecord) and disable the
        lowering options that do not apply to it, each with the family's reason as its tooltip. Returns the
        family's name, or None when it cannot be told before a run."""
        if isinstance(arch, RunRecord):
            name, label, off = arch.family, arch.family_label, dict(arch.not_applicable)
        else:
            arch = arch if arch is not None else peek_family(self.model_path.value)
            name = getattr(arch, "name", None)
            label = getattr(arch, "label", "")
            off = dict(getattr(arch, "not_applicable", {}) or {})
        for opt, wid in self.lowering.items():
            why = off.get(opt)
            wid.disabled = why is not None
            wid.tooltip = f"does not apply to this decoder: {why}" if why else lowering_options.HELP.get(opt, "")
        if not name:
            self.family.value = "<i>family: known when the file is read (run)</i>"
            return None
        text = f"family: <b>{html.escape(label)}</b> ({html.escape(name)})"
        if off:
            text += "; not used by it: " + "; ".join(f"{html.escape(k)} ({html.escape(v)})" for k, v in off.items())
        self.family.value = f'<span class="kz-family">{text}</span>'
        return name

    # ---- actions --------------------------------------------------------------------------------------
    def scan(self) -> list[str]:
        """List the GGUF files of `folder` next to the built-in decoders."""
        d = Path(self.folder.value).expanduser()
        files = sorted(str(p) for p in d.glob("*.gguf")) if d.is_dir() else []
        if not d.is_dir():
            self._set_status(f"error: {d} is not a folder", error=True)
        self.models.options = [*BUILTINS, *files]
        return files

    def specs(self) -> list[RunSpec]:
        """One RunSpec per chosen decoder (the path field first, then the selected list)."""
        targets = [self.model_path.value.strip()] if self.model_path.value.strip() else []
        targets += [m for m in self.models.value if m not in targets]
        low = {k: w.value for k, w in self.lowering.items() if not w.disabled}  # disabled: not this family's
        backend = self.rpc_address.value.strip() if self.backend.value == RPC_CHOICE else self.backend.value
        hexagon = None if self.hexagon.value == NO_HEXAGON else self.hexagon.value
        return [
            RunSpec(
                model=t, input=self.input.value, frames=int(self.frames.value), npy_path=self.npy_path.value,
                audio_path=self.audio_path.value, backend=backend, threads=int(self.threads.value),
                sched=bool(self.sched.value), op_offload=bool(self.op_offload.value),
                weights_on=self.weights_on.value.strip() or None, lowering=low, repeat=int(self.repeat.value),
                hexagon_profile=hexagon, predict=bool(self.predict.value) and hexagon is not None,
                hexagon_changes=self.hexagon_changes.value.strip(), hexagon_stages=self.hexagon_stages.value.strip(),
                cpu_baseline_ms=float(self.cpu_baseline_ms.value) or None,
                ref=self.ref_path.value.strip(), bound=float(self.bound.value),
            )
            for t in targets
        ]

    def run(self) -> None:
        """Start the chosen runs in a worker thread (what the Run button does)."""
        specs = self._ready()
        if specs is None:
            return
        self._start(self._work, specs)

    def stream(self) -> None:
        """Stream the first chosen decoder's input codes at each chunk size of `stream_sizes`, in a worker thread
        (what the Stream button does); the Stream tab shows it."""
        specs = self._ready()
        if specs is None:
            return
        try:
            sizes = parse_sizes(self.stream_sizes.value)
        except KzlabError:
            self._set_status(f"error: chunk sizes are frames per call, integers >= 1 (e.g. 1,4,16); got "
                             f"{self.stream_sizes.value!r}", error=True)
            return
        self._start(self._work_stream, specs[0], sizes)

    def _ready(self) -> list[RunSpec] | None:
        if self._thread is not None and self._thread.is_alive():
            self._set_status("a run is in progress: wait or cancel it")
            return None
        specs = self.specs()
        if not specs:
            self._set_status("error: no decoder chosen", error=True)
            return None
        return specs

    def _start(self, target, *args) -> None:
        self.error = None
        self._canceller = Canceller()
        self.run_button.disabled, self.stream_button.disabled, self.cancel_button.disabled = True, True, False
        self._thread = threading.Thread(target=target, args=(*args, self._canceller), daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Ask the running work to stop (between steps, or at the next node of a decode)."""
        if self._canceller is not None:
            self._canceller.cancel()
            self._set_status("cancelling...")

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker has finished (for scripts and tests); True when it has."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _work(self, specs: list[RunSpec], canc: Canceller) -> None:
        try:
            total = len(specs)
            for k, spec in enumerate(specs):
                n_run = len(self.results) + 1

                def progress(i: float, n: int, text: str, k: int = k) -> None:
                    # SUB ticks per step, so that the bar moves within a step (the profile's runs)
                    self.progress.max = n * total * SUB
                    self.progress.value = min(int((k * n + i) * SUB), n * total * SUB)
                    self._set_status(f"run {k + 1}/{total}: {html.escape(text)}")

                rec = execute(spec, progress, canc)
                rec.label = f"#{n_run} {rec.label}"  # execute labels it with what ran (backends, mode)
                if rec.family and k == 0:  # the decoder of the path field: its family as the file said
                    self.show_family(rec)
                self.results.append(rec)
                if rec.error:
                    self._set_status(f"error: {rec.error}", error=True)
                self._show(rec)
                if canc.event.is_set():
                    break
            if self.error is None:
                self._set_status(f"done: {len(self.results)} run(s); see the tabs")
            self._refresh_compare_choices()
            if V.ok_pair(self.results):
                self.show_compare()
            elif self.results and self.results[-1].accuracy is not None:
                self.show_compare()
        except Exception as e:  # never let a widget callback die silently
            self._set_status(f"error: {type(e).__name__}: {e}", error=True)
        finally:
            self.run_button.disabled, self.stream_button.disabled, self.cancel_button.disabled = False, False, True

    def _work_stream(self, spec: RunSpec, sizes: list[int], canc: Canceller) -> None:
        try:
            def progress(i: float, n: int, text: str) -> None:
                self.progress.max = max(1, n) * SUB
                self.progress.value = min(int(i * SUB), self.progress.max)
                self._set_status(f"stream: {html.escape(text)}")

            sw = execute_stream(spec, sizes, progress, canc)
            sw.label = f"#{len(self.streams) + 1} {sw.label}"
            self.streams.append(sw)
            self._place("Stream", V.stream_view(sw), self._stream_header())
            if sw.ok:
                self.progress.value = self.progress.max
                self._set_status(f"done: streamed {sw.frames} frames at {len(sw.rows)} chunk size(s); see the "
                                 "Stream tab")
            else:
                self._set_status(f"error: {sw.error}", error=True)
        except Exception as e:  # never let a widget callback die silently
            self._set_status(f"error: {type(e).__name__}: {e}", error=True)
        finally:
            self.run_button.disabled, self.stream_button.disabled, self.cancel_button.disabled = False, False, True

    def _stream_header(self) -> list:
        return [W.HBox([self.stream_sizes, self.stream_button])]

    # ---- showing results ------------------------------------------------------------------------------
    def _set_status(self, text: str, error: bool = False) -> None:
        if error:
            self.error = text.removeprefix("error: ")
            self.status.value = f'<span style="color:#b00020"><b>{html.escape(text)}</b></span>'
        else:
            self.status.value = text

    def _place(self, tab: str, view: V.View, header: list | None = None) -> None:
        self.views[tab] = view
        kids = list(header or [])
        kids += [W.HTML(f'{TABLE_CSS}<div class="kz-view">{h}</div>') for h in view.html]
        for label, data in view.audio:
            kids += [W.HTML(f"<b>{html.escape(label)}</b>"), W.Audio(value=data, format="wav", autoplay=False)]
        kids += [W.Image(value=V.png(f), format="png", layout=W.Layout(max_width="100%")) for f in view.figures]
        self._tab_boxes[tab].children = kids

    def _show(self, rec: RunRecord) -> None:
        for tab, view in V.all_views(rec, self.sort_by.value, self.sort_desc.value).items():
            header = [W.HBox([self.sort_by, self.sort_desc])] if tab == "Ops" else None
            self._place(tab, view, header)

    def _show_ops(self) -> None:
        if self.results:
            rec = self.results[-1]
            v = V.ops_view(rec, self.sort_by.value, self.sort_desc.value) if rec.ok else self.views.get("Ops")
            self._place("Ops", v, [W.HBox([self.sort_by, self.sort_desc])])

    def _refresh_compare_choices(self) -> None:
        opts = [(r.label, i) for i, r in enumerate(self.results) if r.ok]
        self.compare_a.options = opts
        self.compare_b.options = opts
        if len(opts) >= 2:
            self.compare_a.value, self.compare_b.value = opts[-2][1], opts[-1][1]

    def show_compare(self) -> V.View | None:
        """Compare the runs chosen in compare_a / compare_b (by default the last two that succeeded)."""
        header = [W.HBox([self.compare_a, self.compare_b, self.compare_button])]
        if (self.compare_a.value is None or self.compare_b.value is None) and self.results:
            one = V.accuracy_view(self.results[-1])  # a single run against its reference .npz
            if one is not None:
                self._place("Compare", one, header)
                return one
        if self.compare_a.value is None or self.compare_b.value is None:
            self._place("Compare", V.message("compare needs two successful runs"), header)
            return None
        view = V.compare_view(self.results[self.compare_a.value], self.results[self.compare_b.value],
                              float(self.bound.value))
        self._place("Compare", view, header)
        return view

    def export_html(self, path: str | os.PathLike, title: str = "kzlab workbench report") -> Path:
        """Write every run so far into one self-contained HTML report."""
        from kzlab.report import write_report

        return write_report(self.results, path, title)


__all__ = ["Workbench"]
