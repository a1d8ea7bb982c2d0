"""Render run records into the HTML template (see kzlab/report/template.html)."""

from __future__ import annotations

import base64
import datetime as _dt
import html
from collections.abc import Iterable, Mapping
from pathlib import Path
from string import Template
from typing import Any

import numpy as np

from kzlab import plots
from kzlab.analysis.accuracy import DEFAULT_BOUND_DB, OUTPUT, Accuracy, stage_accuracy
from kzlab.audio import snr_db, snr_text, wav_bytes
from kzlab.report.elements import figure_tag, table
from kzlab.report.whatif_section import whatif_html

TEMPLATE = Path(__file__).with_name("template.html")


def audio_tag(wav: np.ndarray, sample_rate: int = 24000, label: str = "") -> str:
    """An <audio controls> element whose source is the waveform as a data URI."""
    data = base64.b64encode(wav_bytes(wav, sample_rate)).decode()
    return (
        f'<figure><figcaption>{html.escape(label)} ({len(wav) / sample_rate:.2f} s, {sample_rate} Hz)'
        f'</figcaption><audio controls preload="metadata" src="data:audio/wav;base64,{data}"></audio></figure>'
    )


def what_ran(rec) -> dict[str, Any]:
    """What a run really ran, resolved once when its decoder opened: backends, scheduler, mode, lowering (without
    the options that do not apply to its decoder's family: they changed nothing; the configuration lists them)."""
    if not rec.backend_label:
        return {}
    off = getattr(rec, "not_applicable", None) or {}
    low = {k: v for k, v in rec.lowering_resolved.items() if k not in off}
    return {
        "backends": rec.backend_label,
        "scheduler": "on" if rec.backends_resolved.get("sched") else "off",
        "threads": rec.backends_resolved.get("threads"),
        "mode": rec.mode,
        "lowering": " ".join(f"{k}={v}" for k, v in low.items() if k != "mode"),
    }


def records_accuracy(a, b, bound: float = DEFAULT_BOUND_DB) -> Accuracy | None:
    """B's stages against A's, stage by stage (two runs of one decoder family on the same codes: a lowering, a
    weight type or a backend apart); None when no stage can be compared (another family, other codes)."""
    if a.decode is None or b.decode is None or a.family != b.family:
        return None
    order = [*(b.stage_names or list(b.decode.stages)), OUTPUT]
    rows = stage_accuracy({**b.decode.stages, OUTPUT: b.wav}, {**a.decode.stages, OUTPUT: a.wav}, order)
    if all(r.snr_db is None for r in rows):
        return None
    return Accuracy(model=b.model_path, family=b.family, frames=int(getattr(b, "frames", 0) or 0), bound_db=bound,
                    a={"label": a.label, **what_ran(a)}, b={"label": b.label, **what_ran(b)}, stages=rows)


def accuracy_html(acc: Accuracy | None, title: str = "Accuracy per stage") -> str:
    """A comparison stage by stage: the summary (the first stage below the bound), the SNR table and its figure."""
    if acc is None:
        return ""
    where = acc.first_below
    head = (f'<p class="error">first stage below {acc.bound_db:g} dB: <b>{html.escape(where)}</b></p>' if where
            else f"<p>every stage at or above {acc.bound_db:g} dB</p>")
    return (f"<h3>{html.escape(title)}</h3><p>B = {html.escape(str(acc.b.get('label', '')))} against A = "
            f"{html.escape(str(acc.a.get('label', '')))}: {html.escape(acc.summary())}</p>" + head
            + table(acc.rows(), ["stage", "snr_db", "below", "shape", "ref_rms", "max_abs_err", "note"])
            + figure_tag(plots.stage_snr(acc, title=title), title))


def _range_row(name: str, r: Mapping[str, Any] | None, p50: float) -> dict[str, Any]:
    """One row of a range table: p10, p50, p90, min, max (a record without draws: its point value)."""
    r = plots.span_of(r, p50)
    return {"": name, "p10": r["p10"], "p50": r["p50"], "p90": r["p90"], "min": r["min"], "max": r["max"]}


def defects_html(pl) -> str:
    """The known defects a placement hits ("" for none): each with its nodes per stage, GFLOP, source and fix, so
    that a placement on a path that computes wrong values never reads as a plain speed-up. A path that approximates
    its op (kind "approximation") is shown apart: the emulated decode against the bound decides it, not the
    placement."""
    rows = plots.field(pl, "defects") or []
    if not rows:
        return ""
    wrong = [d for d in rows if d.get("kind", "wrong") != "approximation"]
    head = ('<h3 style="color:#d62728">Wrong output: nodes on a defective kernel path</h3>' if wrong else
            "<h3>Nodes on a kernel path that approximates their op: right or wrong by the emulated decode against "
            "the bound</h3>")
    out = [f'<div class="defects">{head}']
    for d in rows:
        per = ", ".join(f"{html.escape(str(k))} {v}" for k, v in d["by_stage"].items())
        approx = " (an approximation of the op: judged by the emulated decode)" if d not in wrong else ""
        out.append(f"<p><b>{html.escape(d['title'])}</b> [{html.escape(d['id'])}]{approx}: {d['n_nodes']} nodes, "
                   f"{d['gflop']:.1f} GFLOP; per stage: {per}<br>source: {html.escape(d['source'])}<br>holds for: "
                   f"{html.escape(d['versions'])}<br>fix: {html.escape(d['fix'])}</p>")
    out.append("</div>")
    return "".join(out)


def prediction_html(pl) -> str:
    """A placement's predicted time and memory: the total as a range over the draws, per backend and per stage,
    every parameter with its range and source (the assumed ones marked), and each backend's memory against its
    budget. '' when it was not predicted."""
    pred = plots.field(pl, "predicted")
    if pred is None:
        return ""
    d = pred if isinstance(pred, Mapping) else pred.to_dict()
    parts = ["<h3>Predicted time and memory</h3>"]
    r = plots.total_span(d)
    n = r.get("draws") or 0
    parts.append(f"<p>predicted total: <b>{plots.range_text(r)}</b>, min {r['min']:.0f}, max {r['max']:.0f} ms over "
                 f"{n} draws of the uncertain parameters (seed {d.get('seed', 0)}); "
                 f"{d.get('nominal_ms', d['total_ms']):.0f} ms at their stated values. The total is the p50.</p>")
    rows = [_range_row("total", d.get("range"), d["total_ms"])]
    rows += [_range_row(k, (d.get("backend_ranges") or {}).get(k), v) for k, v in d["by_backend_ms"].items()]
    parts.append(table(rows, ["", "p10", "p50", "p90", "min", "max"]))
    parts.append(table({"input copies ms (p50)": d["copy_ms"], "split synchronisation ms (p50)": d["sync_ms"],
                        "cache maintenance ms (p50)": d.get("cache_ms", 0.0)}))
    stages = d.get("stage_ranges") or {}
    parts.append(table([{**_range_row(k, stages.get(k), v), "stage": k} for k, v in d["by_stage_ms"].items()],
                       ["stage", "p10", "p50", "p90", "min", "max"]))
    assumed = set(d.get("assumed", []))
    rows = [{**p, "low": p.get("low", ""), "high": p.get("high", ""), "assumed": "yes" if p["name"] in assumed else ""}
            for p in d["parameters"]]
    if assumed:
        parts.append(f'<p class="note">this prediction rests on {len(assumed)} assumed value(s), drawn over their '
                     "ranges (low .. high): replace them with measurements (a CPU profile, device op logs, "
                     "`kzlab whatif --measured`, `kzlab calibrate`)</p>")
    parts.append(table(rows, ["name", "value", "low", "high", "unit", "source", "assumed"]))
    mem = plots.field(pl, "memory") or {}
    mrows = []
    for name, m in mem.items():
        m = m if isinstance(m, Mapping) else m.to_dict()
        fits = {True: "fits", False: "DOES NOT FIT", None: "no budget"}[m["fits"]]
        mrows.append({"backend": name, "weights MB": m["weights_bytes"] / 1e6, "compute MB": m["compute_bytes"] / 1e6,
                      "input copies MB": m["copies_bytes"] / 1e6, "total MB": m["total_bytes"] / 1e6,
                      "budget MB": (m["budget_bytes"] or 0) / 1e6 or "", "verdict": fits,
                      "largest": ", ".join(f"{t['name']} {t['bytes'] / 1e6:.1f} MB" for t in m.get("largest", [])[:3])})
    if mrows:
        parts.append("<h4>Memory per backend (measured with ggml's allocator on this graph)</h4>" + table(mrows))
    return "\n".join(parts)


#: paired draws of a report's or the Workbench's A/B
AB_DRAWS = 1000


def paired_ab(a, b) -> tuple[Any, str]:
    """(the Decision of runs a and b's predicted placements on paired draws, '') or (None, why not)."""
    from kzlab.analysis.predict.decide import paired_decision
    from kzlab.errors import KzlabError

    pa, pb = plots.field(a, "placement"), plots.field(b, "placement")
    if pa is None or pb is None or plots.field(pa, "predicted") is None or plots.field(pb, "predicted") is None:
        return None, "the paired A/B needs both placements predicted"
    try:
        return paired_decision({"A": pa, "B": pb}, draws=AB_DRAWS, seed=0), ""
    except KzlabError as e:
        return None, f"no paired A/B: {e}"


def paired_ab_html(dec, why: str = "") -> str:
    """The predicted A/B as probabilities: each total's range on the shared draws, P(A faster than B), the ratio's
    p10/p50/p90 and what drives it."""
    if dec is None:
        return f'<p class="note">{html.escape(why)}</p>' if why else ""
    d = dec.to_dict() if hasattr(dec, "to_dict") else dict(dec)
    pair = d["pairs"][0]
    q = pair["ratio"]
    parts = [f"<h3>Predicted A/B on {d['draws']} paired draws</h3>",
             f"<p>P(A faster than B) = <b>{pair['p_a_faster']:.2f}</b>; ratio A/B p10 {q['p10']:.2f}, p50 "
             f"{q['p50']:.2f}, p90 {q['p90']:.2f} (each draw is one possible device for both)</p>",
             table([_range_row(k, c["range"], c["range"]["p50"]) for k, c in d["configs"].items()],
                   ["", "p10", "p50", "p90", "min", "max"])]
    if d.get("sensitivity"):
        parts.append(table([{"parameter": s["parameter"], "share of the variance": s["share"]}
                            for s in d["sensitivity"][:5]]))
    parts += [f'<p class="note">{html.escape(n)}</p>' for n in d.get("notes") or []]
    return "\n".join(parts)


def placement_diff_html(a, b) -> str:
    """Two placements side by side: nodes that moved, splits, copies, predicted ms per stage."""
    from kzlab.analysis.predict.compare import placement_diff

    pa, pb = plots.field(a, "placement"), plots.field(b, "placement")
    if pa is None or pb is None:
        return ""
    d = placement_diff(pa, pb)
    rows = [{"": "splits", "A": d["splits"][0], "B": d["splits"][1]},
            {"": "MB copied", "A": d["copied_bytes"][0] / 1e6, "B": d["copied_bytes"][1] / 1e6}]
    if d["predicted_ms"][0] is not None and d["predicted_ms"][1] is not None:
        rows += [{"": "predicted ms", "A": d["predicted_ms"][0], "B": d["predicted_ms"][1]},
                 {"": "copies ms", "A": d["copy_ms"][0], "B": d["copy_ms"][1]},
                 {"": "synchronisation ms", "A": d["sync_ms"][0], "B": d["sync_ms"][1]}]
    parts = ["<h3>Placements A and B</h3>", table(rows)]
    parts.append(f"<p>{len(d['moved'])} nodes run elsewhere in B ({d['only_a']} only in A, {d['only_b']} only in B)"
                 "</p>")
    if d["moved"]:
        parts.append(table(d["moved"][:40], ["name", "op", "stage", "a", "b"]))
    if d["stages"]:
        parts.append(table(d["stages"], ["stage", "a_ms", "b_ms", "b_minus_a_ms"]))
    return "\n".join(parts)


def same_mode_note(a, b) -> str:
    """A warning when two runs compared are not like with like (different modes), else ''."""
    if a.mode and b.mode and a.mode != b.mode:
        return (f'<p class="error">A ran in {a.mode} mode and B in {b.mode} mode: the comparison includes the '
                "difference between kzlab's fused CPU nodes and ggml ops</p>")
    return ""


def _flat_config(rec) -> dict[str, Any]:
    cfg = rec.config()
    low = cfg.pop("lowering_resolved", {}) or {}
    asked = cfg.pop("lowering_requested", {}) or {}
    out = {k: v for k, v in cfg.items() if v not in (None, "")}
    out.update({f"lowering.{k}": v for k, v in low.items()})
    out.update({f"lowering asked.{k}": v for k, v in asked.items() if low.get(k) != v})
    pcfg = plots.field(rec.profile, "config") if rec.profile is not None else None
    if isinstance(pcfg, Mapping):
        for k in ("versions", "machine"):
            if isinstance(pcfg.get(k), Mapping):
                out.update({f"profile.{k}.{kk}": vv for kk, vv in pcfg[k].items()})
    return out


def run_section(rec, index: int) -> str:
    """One run: configuration, errors and notes, figures, tables and audio."""
    parts = [f'<h2 id="run{index}">Run {index}: {html.escape(rec.label)}</h2>']
    if rec.error:
        parts.append(f'<p class="error">error: {html.escape(rec.error)}</p>')
    for n in rec.notes:
        parts.append(f'<p class="note">{html.escape(n.splitlines()[0] if n else n)}</p>')
    ran = what_ran(rec)
    if rec.family_label:
        parts.append(f"<p>decoder family: <b>{html.escape(rec.family_label)}</b> ({html.escape(rec.family)})</p>")
    if ran:
        parts.append("<h3>What ran</h3>" + table(ran))
    if rec.not_applicable:
        parts.append("<p class=\"note\">lowering options that do not apply to this family: "
                     + "; ".join(f"{html.escape(k)} ({html.escape(v)})" for k, v in rec.not_applicable.items())
                     + "</p>")
    if getattr(rec, "accuracy", None) is not None:
        parts.append(accuracy_html(rec.accuracy, "Accuracy per stage against the reference"))
    parts.append("<h3>Configuration</h3>" + table(_flat_config(rec)))
    if rec.decode is not None:
        parts.append("<h3>T-evolution</h3>" + figure_tag(plots.t_evolution(rec.decode), "T-evolution"))
        ev = plots.evolution_rows(rec.decode)
        parts.append(table(ev, ["stage", "channels", "T"]))
    p = rec.profile
    if p is not None:
        summary = {
            "wall ms": plots.field(p, "wall_ms"),
            "profiled ms": plots.field(p, "profiled_ms"),
            "overhead ratio": plots.field(p, "overhead_ratio"),
            "measured peak GF/s": plots.field(p, "peak_gflops"),
        }
        parts.append("<h3>Profile</h3>" + table({k: v for k, v in summary.items() if v is not None}))
        parts.append(figure_tag(plots.gflop_breakdown(p), "GFLOP breakdown"))
        parts.append(figure_tag(plots.roofline(p, labels=[rec.label]), "roofline"))
        parts.append("<h3>Top nodes by time</h3>" + table(plots.top_ops(p, 25)))
        parts.append(figure_tag(plots.timeline(p), "timeline"))
    if rec.placement is not None:
        pl = rec.placement
        parts.append("<h3>Hexagon what-if placement</h3>")
        parts.append(defects_html(pl))
        parts += [figure_tag(f, "placement") for f in plots.placement_figures(pl)]
        convs = plots.as_rows(plots.field(pl, "convs"))
        if convs:
            parts.append("<h3>Per-conv verdicts</h3>" + table(convs, [c for c in plots.CONV_COLUMNS if c in convs[0]]))
        splits = plots.as_rows(plots.field(pl, "splits"))
        cols = [c for c in plots.SPLIT_COLUMNS if splits and c in splits[0]]
        more = f'<p class="note">... and {len(splits) - 40} more splits</p>' if len(splits) > 40 else ""
        parts.append(f"<h3>Splits ({len(splits)})</h3>" + table(splits[:40], cols) + more)
        copied = plots.field(pl, "copied_bytes")
        if copied is not None:
            parts.append(f"<p>copied between backends: {float(copied) / 1e6:.2f} MB</p>")
        parts.append(prediction_html(pl))
    if rec.wav is not None:
        parts.append("<h3>Audio</h3>" + audio_tag(rec.wav, rec.sample_rate, rec.label))
        if rec.reference is not None:
            parts.append(
                f"<p>known answer: SNR against the original recording "
                f"<b>{snr_text(snr_db(rec.wav, rec.reference))}</b></p>"
                + audio_tag(rec.reference, rec.sample_rate, "original recording")
            )
        parts.append(figure_tag(plots.waveform(rec.wav, rec.sample_rate), "waveform"))
        parts.append(figure_tag(plots.spectrogram(rec.wav, rec.sample_rate), "spectrogram"))
    return "\n".join(parts)


def compare_section(a, b, ia: int, ib: int, bound: float = DEFAULT_BOUND_DB) -> str:
    """Two runs side by side: ratios per block and per op (when both were profiled) and both audios."""
    parts = [f"<h2>Compare run {ia} and run {ib}</h2>", same_mode_note(a, b)]
    parts.append(table([{"": name, **what_ran(r)} for name, r in (("A", a), ("B", b))]))
    parts.append(placement_diff_html(a, b))
    parts.append(accuracy_html(records_accuracy(a, b, bound), "Accuracy per stage: B against A"))
    if a.placement is not None and b.placement is not None and a.placement.predicted and b.placement.predicted:
        dec, why = paired_ab(a, b)
        parts.append(paired_ab_html(dec, why))
        if dec is not None:
            parts.append(figure_tag(plots.decision(dec, title="A/B of the predicted placements"), "paired A/B"))
        parts.append(figure_tag(plots.predicted_stages([a.placement, b.placement], ["A", "B"]), "predicted A/B"))
    if a.profile is not None and b.profile is not None:
        r = plots.ratios(a.profile, b.profile)
        parts.append(figure_tag(plots.compare(a.profile, b.profile, (a.label, b.label)), "compare"))
        parts.append('<div class="grid"><div><h3>B / A per block</h3>'
                     + table([{"stage": k, "ratio": v} for k, v in r["stage"].items()])
                     + "</div><div><h3>B / A per op</h3>"
                     + table([{"op": k, "ratio": v} for k, v in r["op"].items()]) + "</div></div>")
    if a.wav is not None and b.wav is not None:
        parts.append('<div class="grid"><div>' + audio_tag(a.wav, a.sample_rate, a.label) + "</div><div>"
                     + audio_tag(b.wav, b.sample_rate, b.label) + "</div></div>")
        if len(a.wav) == len(b.wav):
            parts.append(f"<p>SNR of B against A: {snr_text(snr_db(b.wav, a.wav))}</p>")
    return "\n".join(parts)


def render(records: Iterable, title: str = "kzlab report", whatifs: Iterable = (),
           bound: float = DEFAULT_BOUND_DB) -> str:
    """The whole report as one HTML string: each run, the A/B of the first two that succeeded, and each what-if
    (a `WhatIf`, or the JSON `kzlab whatif --json` wrote, as read by `read_whatif`)."""
    from kzlab.environment import machine_info
    from kzlab.version import __version__

    recs = list(records)
    machine = recs[0].machine if recs and recs[0].machine else machine_info()
    body = [run_section(r, i + 1) for i, r in enumerate(recs)]
    ok = [(i + 1, r) for i, r in enumerate(recs) if r.ok]
    if len(ok) >= 2:
        (ia, a), (ib, b) = ok[0], ok[1]
        body.append(compare_section(a, b, ia, ib, bound))
    body += [whatif_html(w, i + 1) for i, w in enumerate(whatifs)]
    page = Template(TEMPLATE.read_text()).substitute(
        title=html.escape(title),
        generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        version=html.escape(__version__),
        machine=table(machine),
        body="\n".join(body),
    )
    for scheme in ("http://", "https://"):  # a report never points outside itself
        if scheme in page:
            page = page.replace(scheme, scheme.replace("://", ":&#47;&#47;"))
    return page


def write_report(records: Iterable, path: str | Path, title: str = "kzlab report", whatifs: Iterable = (),
                 bound: float = DEFAULT_BOUND_DB) -> Path:
    """Render and write the report; returns its path. `bound` (dB): the per-stage comparison of the first two
    runs names the first stage below it."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(render(records, title, whatifs, bound), encoding="utf-8")
    return p
