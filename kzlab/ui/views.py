"""What each result tab shows, as plain values: figures, HTML tables, audio bytes, messages.

The workbench only places these into widgets; keeping the content here means it can be checked without a
browser and reused by the HTML report.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kzlab import plots
from kzlab.audio import snr_db, snr_text, wav_bytes, wav_length
from kzlab.report.render import (
    accuracy_html,
    defects_html,
    paired_ab,
    paired_ab_html,
    placement_diff_html,
    prediction_html,
    records_accuracy,
    same_mode_note,
    table,
    what_ran,
)

TABS = ("T-evolution", "GFLOPs", "Ops", "Timeline", "Placement", "Audio", "Compare", "Stream")
#: tabs a run does not fill: they show what their own controls ran (Compare: two runs; Stream: a stream sweep)
OWN_TABS = ("Compare", "Stream")
#: the per-size table of the Stream tab and the state's
STREAM_COLUMNS = ("size", "calls", "first_audio_ms", "call_ms_median", "call_ms_max", "chunk_audio_ms", "rtf",
                  "snr_db", "snr_offline_db", "state_bytes")
STATE_COLUMNS = ("key", "kind", "channels", "frames", "order", "nbytes")
OP_COLUMNS = ("name", "op", "stage", "backend", "shape", "time_ms", "gflop", "gflops")


@dataclass
class View:
    """One tab's content: figures (matplotlib), HTML snippets, audio clips (label, wav bytes)."""

    figures: list = field(default_factory=list)
    html: list[str] = field(default_factory=list)
    audio: list[tuple[str, bytes]] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


def message(text: str) -> View:
    return View(html=[f"<p><i>{html.escape(text)}</i></p>"])


def png(fig, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def _needs_profile(rec) -> View | None:
    if rec.profile is None:
        why = "; ".join(n.splitlines()[0] for n in rec.notes if "profil" in n) or "this run was not profiled"
        return message(why)
    return None


def evolution_view(rec) -> View:
    if rec.decode is None:
        return message("no decode in this run")
    v = View(figures=[plots.t_evolution(rec.decode, f"T-evolution: {rec.label}")])
    v.rows = plots.evolution_rows(rec.decode)
    v.html.append(table(v.rows, ["stage", "channels", "T"]))
    return v


def gflops_view(rec) -> View:
    miss = _needs_profile(rec)
    if miss:
        return miss
    return View(figures=[plots.gflop_breakdown(rec.profile), plots.roofline(rec.profile, labels=[rec.label])])


def ops_view(rec, sort: str = "time_ms", descending: bool = True, n: int = 30) -> View:
    miss = _needs_profile(rec)
    if miss:
        return miss
    rows = plots.top_ops(rec.profile, n=n, sort=sort, descending=descending)
    return View(html=[table(rows, OP_COLUMNS)], rows=rows)


def timeline_view(rec) -> View:
    return _needs_profile(rec) or View(figures=[plots.timeline(rec.profile, f"timeline: {rec.label}")])


def placement_view(rec) -> View:
    pl = rec.placement
    if pl is None:
        why = "; ".join(n.splitlines()[0] for n in rec.notes if "placement" in n) or "pick a Hexagon profile and run"
        return message(why)
    v = View(figures=plots.placement_figures(pl))
    cfg = plots.field(pl, "config") or {}
    v.html.append(f"<p>placed graph: {html.escape(str(cfg.get('mode', 'portable')))} mode (ggml ops only), "
                  f"{html.escape(str(cfg.get('lowering_label', '')))}</p>")
    splits = plots.as_rows(plots.field(pl, "splits"))
    convs = plots.as_rows(plots.field(pl, "convs"))
    copied = float(plots.field(pl, "copied_bytes") or 0.0)
    by = {}
    for n in plots.as_rows(plots.field(pl, "nodes")):
        by[n["backend"]] = by.get(n["backend"], 0) + 1
    v.data = {"splits": len(splits), "copied_mb": copied / 1e6, "nodes_by_backend": by}
    v.rows = convs
    v.html.append(f"<p>{len(splits)} splits, {copied / 1e6:.2f} MB copied between backends; nodes: "
                  + ", ".join(f"{k} {n}" for k, n in by.items()) + "</p>")
    v.html.append(defects_html(pl))
    # nodes on a path that computes wrong values, and apart those on one that approximates its op (which the
    # emulated decode against the bound judges)
    found = plots.field(pl, "defects") or []
    v.data["defect_nodes"] = sum(d["n_nodes"] for d in found if d.get("kind", "wrong") != "approximation")
    v.data["approximate_nodes"] = sum(d["n_nodes"] for d in found if d.get("kind", "wrong") == "approximation")
    if plots.field(pl, "predicted") is not None:  # the "predicted time and memory" view
        v.html.append(prediction_html(pl))
        v.data["predicted_ms"] = pl.predicted.total_ms  # the p50 of the draws
        v.data["predicted_range"] = dict(pl.predicted.range)
        v.data["memory"] = {k: m.to_dict() for k, m in pl.memory.items()}
    if convs:
        v.html.append(table(convs, [c for c in plots.CONV_COLUMNS if c in convs[0]]))
    v.html.append(table(splits[:40], [c for c in plots.SPLIT_COLUMNS if splits and c in splits[0]])
                  + (f"<p>... and {len(splits) - 40} more splits</p>" if len(splits) > 40 else ""))
    return v


def audio_view(rec) -> View:
    if rec.wav is None:
        return message("no audio in this run")
    v = View(figures=[plots.waveform(rec.wav, rec.sample_rate), plots.spectrogram(rec.wav, rec.sample_rate)])
    v.audio.append((rec.label, wav_bytes(rec.wav, rec.sample_rate)))
    v.data = {"samples": int(len(rec.wav)), "seconds": len(rec.wav) / rec.sample_rate}
    if rec.reference is not None:
        v.audio.append(("original recording", wav_bytes(rec.reference, rec.sample_rate)))
        v.data["snr_db"] = snr_db(rec.wav, rec.reference)
        v.html.append(f"<p>known answer: SNR against the recording <b>{snr_text(v.data['snr_db'])}</b></p>")
    return v


def accuracy_view(rec) -> View | None:
    """One run against its reference .npz (`RunSpec.ref`), stage by stage; None when it had no reference."""
    acc = getattr(rec, "accuracy", None)
    if acc is None:
        return None
    v = View(html=[accuracy_html(acc, "Accuracy per stage against the reference")])
    v.rows = acc.rows()
    v.data["accuracy"] = acc.to_dict()
    return v


def compare_view(a, b, bound: float | None = None) -> View:
    """Two runs side by side: the SNR of each stage of B against A (and of each against its reference, if any),
    ratios per block and per op (profiles), wall and decode times, both audios."""
    v = View()
    rows = [{"": "decode s", "A": a.decode_s, "B": b.decode_s, "B/A": b.decode_s / a.decode_s if a.decode_s else 0}]
    if a.profile is not None and b.profile is not None:
        r = plots.ratios(a.profile, b.profile)
        v.data = r
        v.figures.append(plots.compare(a.profile, b.profile, (a.label, b.label)))
        wa, wb = plots.field(a.profile, "wall_ms"), plots.field(b.profile, "wall_ms")
        rows.append({"": "profile wall ms", "A": wa, "B": wb, "B/A": r.get("wall", {}).get("wall", float("nan"))})
        v.rows = [{"stage": k, "ratio": x} for k, x in r["stage"].items()]
        v.html.append(table(v.rows) + table([{"op": k, "ratio": x} for k, x in r["op"].items()]))
    else:
        v.html.append("<p><i>ratios per block and per op need both runs profiled</i></p>")
    acc = records_accuracy(a, b, **({"bound": bound} if bound is not None else {}))
    if acc is not None:
        v.data["accuracy"] = acc.to_dict()
        v.data["accuracy_rows"] = acc.rows()
        v.html.insert(0, accuracy_html(acc, "Accuracy per stage: B against A"))
    else:
        v.html.insert(0, "<p><i>no stage to compare: the two runs decode other codes or decoder families</i></p>")
    for name, rec in (("A", a), ("B", b)):
        if getattr(rec, "accuracy", None) is not None:
            v.html.append(accuracy_html(rec.accuracy, f"{name} against its reference"))
    ran = table([{"": name, **what_ran(r)} for name, r in (("A", a), ("B", b))])
    v.html.insert(0, f"<p>A = {html.escape(a.label)}, B = {html.escape(b.label)}</p>" + same_mode_note(a, b) + ran
                  + table(rows))
    diff = placement_diff_html(a, b)  # the A/B of two placements: nodes that moved, splits, copies, ms per stage
    if diff:
        v.html.append(diff)
        if a.placement.predicted is not None and b.placement.predicted is not None:
            dec, why = paired_ab(a, b)  # P(A faster than B) and the ratio, on paired draws
            v.html.append(paired_ab_html(dec, why))
            if dec is not None:
                v.data["paired"] = dec.to_dict()
                v.figures.append(plots.decision(dec, title="A/B of the predicted placements"))
            v.figures.append(plots.predicted_stages([a.placement, b.placement], [a.label, b.label]))
    for rec in (a, b):
        if rec.wav is not None:
            v.audio.append((rec.label, wav_bytes(rec.wav, rec.sample_rate)))
    if a.wav is not None and b.wav is not None and len(a.wav) == len(b.wav):
        v.html.append(f"<p>SNR of B against A: {snr_text(snr_db(b.wav, a.wav))}</p>")
    return v


def all_views(rec, sort: str = "time_ms", descending: bool = True) -> dict[str, View]:
    if rec.error:
        err = message(f"run failed: {rec.error}")
        return {t: err for t in TABS if t not in OWN_TABS}
    views = {
        "T-evolution": evolution_view(rec),
        "GFLOPs": gflops_view(rec),
        "Ops": ops_view(rec, sort, descending),
        "Timeline": timeline_view(rec),
        "Placement": placement_view(rec),
        "Audio": audio_view(rec),
    }
    ran = what_ran(rec)
    if ran:  # every result says what ran: backends, scheduler, mode, resolved lowering
        caption = f'<p class="kz-ran">{html.escape(", ".join(f"{k}: {v}" for k, v in ran.items()))}</p>'
        for t in ("T-evolution", "GFLOPs", "Ops", "Timeline"):
            views[t].html.insert(0, caption)
    return views


def stream_view(sw) -> View:
    """A stream sweep (`kzlab.app.streaming.StreamSweep`): what ran and how the graphs were made ready, the figure
    (chunk size against time to first audio and real-time factor), a row per chunk size, and the carried state's
    tensors with their bytes."""
    if sw is None:
        return message("pick chunk sizes and press Stream: the decoder, backend, lowering and input above, streamed")
    if not sw.ok:
        return message(f"stream failed: {sw.error}")
    v = View(rows=[dict(r) for r in sw.rows])
    v.figures.append(plots.stream_figure(sw.rows, f"streaming {sw.frames} frames: {sw.label}"))
    changes = "".join(f"; streaming calls: {html.escape(k)} {html.escape(w)}" for k, w in sw.plan_changes.items())
    v.html.append(
        f'<p class="kz-ran">{html.escape(sw.kind)} stream on {html.escape(sw.backend_label)}, '
        f"{html.escape(sw.mode)} mode ({html.escape(sw.lowering_label)}){changes}; "
        f"threads {html.escape(str(sw.threads))}</p>"
        f"<p>{html.escape(sw.describe)}</p>"
        f"<p>times: {html.escape(sw.prepared)}; median of {sw.rows[0]['repeat'] if sw.rows else 0} pass(es); "
        f"first audio = the first call that returned audio, codes to audio. SNR against "
        f"{html.escape(sw.reference)}.</p>"
    )
    v.html.append(table(v.rows, [c for c in STREAM_COLUMNS if not v.rows or c in v.rows[0]]))
    if sw.state:
        v.html.append(f"<p><b>carried state</b>: {len(sw.state)} tensors, {sw.state_bytes} bytes "
                      f"({sw.state_bytes / 1e6:.3f} MB)</p>" + table(sw.state, STATE_COLUMNS))
    elif sw.kind == "windowed":
        v.html.append(f"<p>no carried state: each call decodes a window of {sw.left} frames before its own and "
                      f"{sw.lookahead} after</p>")
    v.data = {"kind": sw.kind, "state": [dict(r) for r in sw.state], "state_bytes": sw.state_bytes,
              "plan_changes": dict(sw.plan_changes), "backend_label": sw.backend_label, "mode": sw.mode,
              "reference": sw.reference}
    return v


def ok_pair(records: Sequence) -> tuple[Any, Any] | None:
    ok = [r for r in records if r.ok]
    return (ok[-2], ok[-1]) if len(ok) >= 2 else None


__all__ = ["TABS", "View", "accuracy_view", "all_views", "compare_view", "stream_view", "wav_length"]
