"""Figures for notebooks, the workbench and HTML reports.

Every function takes records (a `Profile`, a `Placement`, a `DecodeOutput`, a waveform, or plain rows as
lists of dicts) and returns a `matplotlib.figure.Figure` built with the object-oriented API, never pyplot's
global state: figures can be made from a worker thread, on a headless machine (Agg), and several at once.
In a notebook (with `%matplotlib inline`) a returned Figure displays itself; `fig.savefig(...)` writes it.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

KIND_COLORS = {
    "conv1d": "#1f77b4",
    "conv_transpose1d": "#ff7f0e",
    "snake": "#2ca02c",
    "attention": "#d62728",
    "mlp": "#9467bd",
    "norm": "#8c564b",
    "embedding": "#e377c2",
    "other": "#7f7f7f",
}
BACKEND_COLORS = {"CPU": "#9e9e9e", "HTP": "#1f77b4"}  # as in SPLIT_COLORS


# ---- record access --------------------------------------------------------------------------------------
def field(rec: Any, name: str, default: Any = None) -> Any:
    """`rec.name` or `rec[name]`: profiles are objects, their rows and JSON round-trips are dicts."""
    if isinstance(rec, Mapping):
        return rec.get(name, default)
    return getattr(rec, name, default)


def as_rows(items: Iterable[Any] | None) -> list[dict]:
    """Rows as dicts, whether they come as dicts or as dataclasses (a Placement's nodes and splits)."""
    out = []
    for it in items or []:
        if isinstance(it, Mapping):
            out.append(dict(it))
        elif dataclasses.is_dataclass(it):
            out.append(dataclasses.asdict(it))
        else:
            out.append(dict(vars(it)))
    return out


def stage_order(stages: Iterable[str]) -> list[str]:
    """Stages in the order they first appear. Records list their stages in graph order (a profile's nodes, a
    prediction's per-stage table), so that is the decoder's order, whatever its family; no figure hard-codes it."""
    return list(dict.fromkeys(stages))


def evolution_rows(rec: Any) -> list[dict]:
    """[{stage, channels, T}] from a Profile (its `evolution`), a DecodeOutput (its stages) or rows."""
    if isinstance(rec, Sequence) and not isinstance(rec, str | bytes):
        return _norm_evolution(as_rows(rec))
    ev = field(rec, "evolution")
    if ev:
        return _norm_evolution(as_rows(ev))
    stages = field(rec, "stages")
    if stages:
        return [{"stage": k, "channels": int(v.shape[0]), "T": int(v.shape[1])} for k, v in stages.items()]
    raise ValueError("no T-evolution in this record: pass a Profile, a DecodeOutput(intermediates=True) or rows")


def _norm_evolution(rows: list[dict]) -> list[dict]:
    """Rows with `channels` and `T` (the stage's output), also from rows that say c_out / t_out."""
    out = []
    for r in rows:
        r = dict(r)
        r.setdefault("channels", r.get("c_out", 0))
        r.setdefault("T", r.get("t_out", 0))
        out.append(r)
    return out


def _label(rec: Any, default: str) -> str:
    cfg = field(rec, "config") or {}
    return str(field(rec, "label") or cfg.get("label") or default)


# ---- T-evolution ---------------------------------------------------------------------------------------
def t_evolution(rec: Any, title: str = "T-evolution across blocks") -> Figure:
    """Sequence length (log scale) and channel count at each stage's output, annotated with both."""
    rows = evolution_rows(rec)
    names = [r["stage"] for r in rows]
    ts = np.array([r["T"] for r in rows], dtype=float)
    cs = np.array([r["channels"] for r in rows], dtype=float)
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(rows))
    ax.bar(x, cs, color="#c6dbef", label="channels")
    ax.set_ylabel("channels")
    ax.set_xticks(x, names, rotation=40, ha="right")
    for i, c in enumerate(cs):
        ax.annotate(f"{int(c)}", (i, c), ha="center", va="bottom", fontsize=7, color="#3182bd")
    ax2 = ax.twinx()
    ax2.plot(x, ts, "o-", color="#d62728", label="T (samples per stage)")
    ax2.set_yscale("log")
    ax2.set_ylabel("T (log scale)")
    for i, t in enumerate(ts):
        ax2.annotate(f"{int(t)}", (i, t), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
    ax.set_title(title)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper left", fontsize=8)
    return fig


# ---- GFLOP breakdown -----------------------------------------------------------------------------------
def gflop_table(prof: Any, convention: str = "macs") -> dict[str, dict[str, float]]:
    """GFLOP (2 x MACs / 1e9) per stage and layer kind; convention 'macs' or 'macs_seed'."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in as_rows(field(prof, "layers")):
        out[r["stage"]][r["kind"]] += 2.0 * float(r.get(convention) or 0) / 1e9
    return {s: dict(v) for s, v in out.items()}


def stage_times(prof: Any) -> dict[str, float]:
    """Measured milliseconds per stage (sum of its layers)."""
    t: dict[str, float] = defaultdict(float)
    for r in as_rows(field(prof, "layers")):
        t[r["stage"]] += float(r.get("time_ms") or 0.0)
    return dict(t)


def gflop_breakdown(prof: Any, title: str | None = None) -> Figure:
    """Stacked bars block x op kind, both MAC conventions side by side, with achieved GF/s per block.

    'macs' counts a ConvTranspose per input sample (what the graph multiplies); 'macs_seed' counts it per
    output sample (the usual paper convention). Achieved GF/s = measured FLOPs of the block's nodes / time.
    """
    fig = Figure(figsize=(11, 4.5), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    times = stage_times(prof)
    flops: dict[str, float] = defaultdict(float)
    for r in as_rows(field(prof, "layers")):
        flops[r["stage"]] += float(r.get("flops") or 2 * (r.get("macs") or 0))
    for ax, conv in zip(axes, ("macs", "macs_seed"), strict=True):
        tab = gflop_table(prof, conv)
        stages = stage_order(tab)
        x = np.arange(len(stages))
        bottom = np.zeros(len(stages))
        kinds = [k for k in KIND_COLORS if any(k in tab[s] for s in stages)]
        for k in kinds:
            v = np.array([tab[s].get(k, 0.0) for s in stages])
            ax.bar(x, v, bottom=bottom, color=KIND_COLORS[k], label=k)
            bottom += v
        for i, s in enumerate(stages):
            ms = times.get(s, 0.0)
            if ms > 0:
                ax.annotate(f"{flops[s] / ms / 1e6:.1f} GF/s", (i, bottom[i]), ha="center", va="bottom", fontsize=6,
                            rotation=90)
        ax.set_xticks(x, stages, rotation=40, ha="right")
        ax.set_title(f"convention: {conv} (total {bottom.sum():.1f} GFLOP)", fontsize=9)
        ax.set_ylabel("GFLOP")
    axes[0].legend(fontsize=7)
    peak = field(prof, "peak_gflops")
    sup = title or "GFLOP per block and op kind"
    if peak:
        sup += f"  (measured machine peak {float(peak):.1f} GF/s)"
    fig.suptitle(sup)
    return fig


# ---- roofline ------------------------------------------------------------------------------------------
def roofline(profiles: Any, labels: Sequence[str] | None = None, min_ms: float = 0.0) -> Figure:
    """Achieved GF/s against arithmetic intensity (FLOP/byte) per node, with the measured compute roof."""
    profs = profiles if isinstance(profiles, list | tuple) else [profiles]
    fig = Figure(figsize=(7, 4.5), layout="constrained")
    ax = fig.add_subplot()
    peaks = []
    markers = "os^Dv<>"
    for i, p in enumerate(profs):
        xs, ys, cs = [], [], []
        for n in as_rows(field(p, "nodes")):
            t, f, b = float(n.get("time_ms") or 0), float(n.get("flops") or 0), float(n.get("bytes") or 0)
            if t <= min_ms or f <= 0 or b <= 0:
                continue
            xs.append(f / b)
            ys.append(f / t / 1e6)
            cs.append(BACKEND_COLORS.get(str(n.get("backend", "CPU")).upper(), "#4c72b0"))
        lab = labels[i] if labels else _label(p, f"run {i + 1}")
        ax.scatter(xs, ys, s=12, alpha=0.6, marker=markers[i % len(markers)], label=lab)
        if field(p, "peak_gflops"):
            peaks.append(float(field(p, "peak_gflops")))
    for pk in sorted(set(peaks)):
        ax.axhline(pk, color="k", ls="--", lw=1)
        ax.annotate(f"measured peak {pk:.1f} GF/s", (0.01, pk), xycoords=("axes fraction", "data"), fontsize=7,
                    va="bottom")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved GF/s")
    ax.set_title("roofline: every node with FLOPs")
    ax.legend(fontsize=8)
    return fig


# ---- per-op table --------------------------------------------------------------------------------------
def top_ops(prof: Any, n: int = 20, sort: str = "time_ms", descending: bool = True) -> list[dict]:
    """The top nodes as table rows: name, op, stage, backend, shape, time (ms), GFLOP, GF/s."""
    rows = []
    for nd in as_rows(field(prof, "nodes")):
        if nd.get("is_view"):
            continue
        t = float(nd.get("time_ms") or 0.0)
        f = float(nd.get("flops") or 0.0)
        rows.append(
            {
                "name": nd.get("name", ""),
                "op": nd.get("op", ""),
                "stage": nd.get("stage", ""),
                "backend": nd.get("backend", ""),
                "shape": "x".join(str(int(v)) for v in (nd.get("ne") or []) if int(v) != 1) or "",
                "time_ms": round(t, 4),
                "gflop": round(f / 1e9, 4),
                "gflops": round(f / t / 1e6, 2) if t > 0 else 0.0,
            }
        )
    rows.sort(key=lambda r: (r.get(sort) is None, r.get(sort)), reverse=descending)
    return rows[:n]


def top_ops_figure(prof: Any, n: int = 15) -> Figure:
    """The top-n nodes by time as a table figure."""
    rows = top_ops(prof, n)
    cols = ["name", "op", "stage", "backend", "time_ms", "gflops"]
    fig = Figure(figsize=(11, 0.3 * (len(rows) + 2)), layout="constrained")
    ax = fig.add_subplot()
    ax.axis("off")
    if rows:
        cells = [[str(r[c])[:48] for c in cols] for r in rows]
        tab = ax.table(cellText=cells, colLabels=cols, loc="center", cellLoc="left")
        tab.auto_set_font_size(False)
        tab.set_fontsize(7)
    ax.set_title(f"top {len(rows)} nodes by time")
    return fig


# ---- timeline ------------------------------------------------------------------------------------------
def timeline(prof: Any, title: str = "timeline of one run") -> Figure:
    """Nodes on a time axis (graph order, each as long as its measured time), one lane per backend,
    coloured by block. Start times are the cumulative sum: nodes of one graph run one after the other."""
    nodes = [n for n in as_rows(field(prof, "nodes")) if float(n.get("time_ms") or 0) > 0]
    stages = stage_order(n.get("stage") or "?" for n in nodes)
    cmap = _stage_colors(stages)
    lanes = sorted({str(n.get("backend") or "CPU") for n in nodes})
    fig = Figure(figsize=(11, 2.2 + 0.5 * len(lanes)), layout="constrained")
    ax = fig.add_subplot()
    t0 = 0.0
    per_lane: dict[str, list[tuple[float, float]]] = defaultdict(list)
    colors: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        d = float(n["time_ms"])
        lane = str(n.get("backend") or "CPU")
        per_lane[lane].append((t0, d))
        colors[lane].append(cmap[n.get("stage") or "?"])
        t0 += d
    for i, lane in enumerate(lanes):
        ax.broken_barh(per_lane[lane], (i - 0.4, 0.8), facecolors=colors[lane], linewidth=0)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlabel("ms (sum of node times, graph order)")
    ax.set_xlim(0, max(t0, 1e-6))
    handles = [_patch(cmap[s]) for s in stages]
    ax.legend(handles, stages, fontsize=6, ncol=1 + len(stages) // 8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title)
    return fig


def _stage_colors(stages: Sequence[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    cm = colormaps["tab20"]
    return {s: cm(i % 20) for i, s in enumerate(stages)}


def _patch(color: Any):
    from matplotlib.patches import Patch

    return Patch(color=color)


# ---- placement -----------------------------------------------------------------------------------------
#: the colour of a node whose kernel path computes wrong values
DEFECT_COLOR = "#d62728"


def placement(pl: Any, title: str | None = None) -> Figure:
    """The Hexagon what-if: every node in graph order as a strip coloured by where it would run, the
    splits (runs of nodes on one backend) and the bytes copied between them."""
    nodes = list(as_rows(field(pl, "nodes")))
    fig = Figure(figsize=(11, 3.4), layout="constrained")
    ax, ax2 = fig.subplots(2, 1, height_ratios=[1, 2])
    cols = [BACKEND_COLORS.get(str(n.get("backend")).upper(), "#999999") for n in nodes]
    ax.bar(np.arange(len(nodes)), np.ones(len(nodes)), width=1.0, color=cols, linewidth=0)
    ax.set_xlim(0, max(len(nodes), 1))
    ax.set_yticks([])
    ax.set_xlabel("node (graph order)")
    counts: dict[str, int] = defaultdict(int)
    for n in nodes:
        counts[str(n.get("backend"))] += 1
    ax.legend([_patch(BACKEND_COLORS.get(b.upper(), "#999")) for b in counts],
              [f"{b}: {c} nodes" for b, c in counts.items()], fontsize=7, ncol=len(counts), loc="upper right")
    per_stage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for n in nodes:
        per_stage[n.get("stage") or "?"][str(n.get("backend"))] += 1
    stages = stage_order(per_stage)
    x = np.arange(len(stages))
    bottom = np.zeros(len(stages))
    for b in counts:
        v = np.array([per_stage[s].get(b, 0) for s in stages], dtype=float)
        ax2.bar(x, v, bottom=bottom, color=BACKEND_COLORS.get(b.upper(), "#999"), label=b)
        bottom += v
    ax2.set_xticks(x, stages, rotation=30, ha="right", fontsize=7)
    ax2.set_ylabel("nodes")
    # nodes on a kernel path with a known defect (the profile's [[defects]]): marked on the strip, counted per stage;
    # a path that approximates its op (kind "approximation") is marked apart: the emulated decode judges it
    approx = [i for i, n in enumerate(nodes) if n.get("defect") and n.get("defect_kind") == "approximation"]
    bad = [i for i, n in enumerate(nodes) if n.get("defect") and n.get("defect_kind") != "approximation"]
    if approx:
        ax.scatter(approx, np.full(len(approx), 0.5), marker="^", color=DEFECT_COLOR, s=14, linewidths=0.8,
                   zorder=3, facecolors="none", label=f"approximating path: {len(approx)} nodes")
    if bad:
        ax.scatter(bad, np.full(len(bad), 0.5), marker="x", color=DEFECT_COLOR, s=18, linewidths=1.2, zorder=3,
                   label=f"defective path: {len(bad)} nodes")
    # per stage: "N wrong" (bold) for a defective path, "N approx." for an approximating one
    per_bad: dict[str, int] = defaultdict(int)
    per_approx: dict[str, int] = defaultdict(int)
    for marked, per in ((bad, per_bad), (approx, per_approx)):
        for i in marked:
            per[nodes[i].get("stage") or "?"] += 1
    for j, st in enumerate(stages):
        text = ", ".join(f"{n} {word}" for n, word in ((per_bad.get(st), "wrong"), (per_approx.get(st), "approx."))
                         if n)
        if text:
            ax2.annotate(text, (j, bottom[j]), ha="center", va="bottom", fontsize=7, color=DEFECT_COLOR,
                         fontweight="bold" if per_bad.get(st) else "normal")
    splits = as_rows(field(pl, "splits"))
    copied = float(field(pl, "copied_bytes") or 0.0)
    cfg = field(pl, "config") or {}
    prof = cfg.get("profile") if isinstance(cfg, Mapping) else None
    wrong = f"; WRONG OUTPUT: {len(bad)} nodes on a defective path" if bad else ""
    if approx:  # right or wrong by the emulated decode against the bound, which the placement alone cannot say
        wrong += f"; {len(approx)} approximated"
    fig.suptitle(title or f"placement {prof or ''}: {len(splits)} splits, {copied / 1e6:.1f} MB copied{wrong}",
                 color=DEFECT_COLOR if bad else None)
    return fig


def _prediction(obj: Any) -> Mapping | None:
    p = field(obj, "predicted")
    if p is None or isinstance(p, Mapping):
        return p
    return p.to_dict(rows=True)


#: how a predicted range is drawn: the p10-p90 band solid, min-max faint
BAND = {"elinewidth": 1.6, "capsize": 3, "ecolor": "#222222"}
FULL = {"elinewidth": 0.8, "capsize": 0, "ecolor": "#999999", "alpha": 0.8}


def span_of(r: Mapping | None, point: float) -> dict[str, float]:
    """A range as {p10, p50, p90, min, max}; a point value (a record without draws) as a zero-width range."""
    if not r or "p50" not in r:
        return {"p10": point, "p50": point, "p90": point, "min": point, "max": point, "draws": 0}
    return {k: float(r.get(k, r["p50"])) for k in ("p10", "p50", "p90", "min", "max")} | {"draws": r.get("draws", 0)}


def stage_spans(pr: Mapping) -> dict[str, dict[str, float]]:
    ranges = pr.get("stage_ranges") or {}
    return {s: span_of(ranges.get(s), v) for s, v in pr["by_stage_ms"].items()}


def total_span(pr: Mapping) -> dict[str, float]:
    return span_of(pr.get("range"), pr["total_ms"])


def range_text(r: Mapping, unit: str = " ms") -> str:
    """`p50 X (p10 A - p90 B)`, the way every figure labels a predicted range."""
    if not r.get("draws"):
        return f"{r['p50']:.0f}{unit} (a point: no draws)"
    return f"p50 {r['p50']:.0f}{unit} (p10 {r['p10']:.0f} - p90 {r['p90']:.0f})"


def range_bars(ax: Any, x: np.ndarray, spans: Sequence[Mapping], width: float = 0.8, color: Any = None,
               label: str | None = None, horizontal: bool = False) -> None:
    """Bars at the p50 with the p10-p90 whisker and the min-max whisker (faint): a predicted value is a range."""
    p50 = np.array([s["p50"] for s in spans])
    lo = [p50 - [s["p10"] for s in spans], np.array([s["p90"] for s in spans]) - p50]
    full = [p50 - [s["min"] for s in spans], np.array([s["max"] for s in spans]) - p50]
    if horizontal:
        bars = ax.barh(x, p50, height=width, color=color, alpha=0.55, label=label)
        c = bars.patches[0].get_facecolor() if bars.patches else color
        ax.errorbar(p50, x, xerr=full, fmt="none", **FULL)
        ax.errorbar(p50, x, xerr=lo, fmt="none", **{**BAND, "ecolor": _darker(c)})
    else:
        bars = ax.bar(x, p50, width=width, color=color, alpha=0.55, label=label)
        c = bars.patches[0].get_facecolor() if bars.patches else color
        ax.errorbar(x, p50, yerr=full, fmt="none", **FULL)
        ax.errorbar(x, p50, yerr=lo, fmt="none", **{**BAND, "ecolor": _darker(c)})


def _darker(c: Any) -> Any:
    if c is None:
        return BAND["ecolor"]
    from matplotlib.colors import to_rgb

    return tuple(0.6 * v for v in to_rgb(c))


def _plain_log(axis: Any) -> None:
    """A log axis labelled 1, 2, 5 x 10^k in plain numbers (no overlapping minor labels)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def predicted_stages(pls: Any, labels: Sequence[str] | None = None, baseline: Any = None, log: bool | None = None
                     ) -> Figure:
    """Predicted milliseconds per stage of one or more placements, the split costs (copies and synchronisation)
    included: the bar is the p50 of the draws, the dark whisker p10-p90, the faint one min-max (what nobody
    measured shows as a spread, not as a point). `baseline` (e.g. the CPU-only prediction) as a tick with its
    own p10-p90. `log`: a log axis (default: when the stages differ by more than a hundredfold)."""
    items = pls if isinstance(pls, list | tuple) else [pls]
    preds = [_prediction(p) for p in items]
    labels = list(labels or [f"{(field(p, 'config') or {}).get('profile', '?')}" for p in items])
    stages = stage_order([s for pr in preds if pr for s in pr["by_stage_ms"]])
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(stages))
    w = 0.8 / max(1, len(preds))
    tops, lows = [], []
    for i, (pr, lab) in enumerate(zip(preds, labels, strict=True)):
        if pr is None:
            continue
        sp = stage_spans(pr)
        spans = [sp.get(s) or span_of(None, 0.0) for s in stages]
        range_bars(ax, x + (i - (len(preds) - 1) / 2) * w, spans, width=w, color=f"C{i}",
                   label=f"{lab}: {range_text(total_span(pr))}")
        tops += [s["max"] for s in spans]
        lows += [s["min"] for s in spans if s["min"] > 0]
    base = _prediction(baseline) if baseline is not None else None
    if base is not None:
        bs = stage_spans(base)
        spans = [bs.get(s) or span_of(None, 0.0) for s in stages]
        p50 = np.array([s["p50"] for s in spans])
        ax.errorbar(x, p50, yerr=[p50 - [s["p10"] for s in spans], np.array([s["p90"] for s in spans]) - p50],
                    fmt="k_", markersize=18, mew=2, elinewidth=1, capsize=0,
                    label=f"CPU only: {range_text(total_span(base))}")
    if log is None:
        log = bool(lows) and max(tops) / min(lows) > 100
    if log:
        ax.set_yscale("log")
        _plain_log(ax.yaxis)
    ax.set_xticks(x, stages, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("predicted ms" + (" (log)" if log else ""))
    ax.legend(fontsize=7)
    ax.set_title("predicted time per stage (split copies and synchronisation included): bar p50, dark whisker "
                 "p10-p90, faint min-max", fontsize=9)
    return fig


# ---- decisions ---------------------------------------------------------------------------------------------
def decision_dict(obj: Any) -> dict:
    """A what-if's decision as its JSON: a `WhatIf`, a `Decision`, or either's `to_dict()`."""
    if isinstance(obj, Mapping):
        return dict(obj)
    inner = getattr(obj, "decision", None)
    if inner is not None and hasattr(inner, "to_dict") and hasattr(obj, "placements"):  # a WhatIf
        return obj.to_dict()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"not a what-if decision: {type(obj).__name__}")


MAX_PAIRS = 12


def decision_pairs(d: Mapping, limit: int = MAX_PAIRS) -> list[dict]:
    """The pairs a figure shows: all of them up to `limit`, else the ones with the decision's two contenders."""
    pairs = list(d.get("pairs") or [])
    if len(pairs) <= limit:
        return pairs
    dd = d.get("decision") or {}
    key = {dd.get("a"), dd.get("b")} - {None}
    pick = [p for p in pairs if {p["a"], p["b"]} & key]
    pick.sort(key=lambda p: ({p["a"], p["b"]} != key, -abs(p["p_a_faster"] - 0.5)))
    return pick[:limit]


def decision(obj: Any, title: str | None = None, sensitivity: int = 6) -> Figure:
    """A what-if's answer, titled `title` and then the decision with its probability: each configuration's
    predicted total as a range (box p10-p90, tick p50, whiskers min-max, the measured totals as diamonds, the
    target as a line), each pair's ratio A/B (p10-p50-p90) with P(A faster than B), and what the decision's
    spread rests on. Takes a `WhatIf`, a `Decision` or their JSON."""
    d = decision_dict(obj)
    configs = d.get("configs") or {}
    names = list(configs)
    pairs = decision_pairs(d)
    sens = list(d.get("sensitivity") or [])[:sensitivity]
    panels = 2 + bool(sens)
    fig = Figure(figsize=(13 if panels == 3 else 11, max(3.2, 0.42 * max(len(names), len(pairs)) + 1.6)),
                 layout="constrained")
    axes = fig.subplots(1, panels, width_ratios=[3, 2.4, 1.6][:panels])
    ax = axes[0]
    y = np.arange(len(names))[::-1]
    target_ms = d.get("target_ms")
    target = d.get("target") or {}
    measured = ((d.get("calibration") or {}).get("measured") or {})
    vals = []
    for yi, n in zip(y, names, strict=True):
        r = configs[n]["range"]
        ax.plot([r["min"], r["max"]], [yi, yi], color="#999999", lw=1, zorder=1)
        ax.barh(yi, r["p90"] - r["p10"], left=r["p10"], height=0.5, color="C0" if n != "cpu" else "#9e9e9e",
                alpha=0.55, zorder=2)
        ax.plot([r["p50"], r["p50"]], [yi - 0.25, yi + 0.25], color="k", lw=2, zorder=3)
        ax.annotate(f"{r['p50']:.0f} ms", (r["p50"], yi + 0.27), ha="center", va="bottom", fontsize=7)
        vals += [r["min"], r["max"]]
        if n in measured:
            ax.plot(measured[n], yi, "D", color="#d62728", ms=6, zorder=4,
                    label="measured" if "measured" not in ax.get_legend_handles_labels()[1] else None)
    ticks = [n + (f"\nP(<= {target_ms:g} ms) {target[n]:.2f}" if target_ms is not None and n in target else "")
             for n in names]
    ax.set_yticks(y, ticks, fontsize=8)
    if target_ms is not None:
        ax.axvline(target_ms, color="#2ca02c", ls="--", lw=1.2, label=f"target {target_ms:g} ms")
        vals.append(target_ms)
    pos = [v for v in vals if v > 0]
    if pos and max(pos) / min(pos) > 4:
        ax.set_xscale("log")
        _plain_log(ax.xaxis)
    ax.set_xlabel("predicted total ms: box p10-p90, tick p50, line min-max")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7, loc="lower right")
    ax.set_ylim(-0.7, len(names) - 0.3)
    ax.set_title(f"{d.get('draws', '?')} paired draws from {d.get('draws_from', 'the ranges')}", fontsize=8)
    bx = axes[1]
    dd = d.get("decision") or {}
    yp = np.arange(len(pairs))[::-1]
    for yi, p in zip(yp, pairs, strict=True):
        q = p["ratio"]
        pa = p["p_a_faster"]
        col = "#2ca02c" if pa >= 0.9 else ("#d62728" if pa <= 0.1 else "#7f7f7f")
        bx.plot([q["p10"], q["p90"]], [yi, yi], color=col, lw=3, alpha=0.7, solid_capstyle="butt")
        bx.plot(q["p50"], yi, "o", color=col, ms=5)
        bx.annotate(f"P = {pa:.2f}", (q["p90"], yi), xytext=(4, 0), textcoords="offset points", va="center",
                    fontsize=7)
    bx.axvline(1.0, color="k", lw=0.8)
    bx.set_xscale("log")
    _plain_log(bx.xaxis)
    labels = [f"{p['a']} / {p['b']}" for p in pairs]
    bx.set_yticks(yp, labels, fontsize=7)
    for t, p in zip(bx.get_yticklabels(), pairs, strict=True):
        if {p["a"], p["b"]} == {dd.get("a"), dd.get("b")}:
            t.set_fontweight("bold")
    bx.set_ylim(-0.7, max(len(pairs), 1) - 0.3)
    lo, hi = bx.get_xlim()
    bx.set_xlim(lo, hi * 1.6)  # room for the P labels
    shown = "" if len(pairs) == len(d.get("pairs") or []) else f" ({len(pairs)} of {len(d['pairs'])})"
    bx.set_xlabel("ratio A / B (p10 - p50 - p90); < 1: A faster")
    bx.set_title(f"pairs{shown}: P(A faster than B)", fontsize=8)
    if sens:
        cx = axes[2]
        ys = np.arange(len(sens))[::-1]
        nxt = {m["parameter"] for m in d.get("next_measurements") or []}
        cx.barh(ys, [s["share"] for s in sens], color=["#ff7f0e" if s["parameter"] in nxt else "#c7c7c7"
                                                       for s in sens])
        cx.set_yticks(ys, [s["parameter"] for s in sens], fontsize=7)
        cx.set_xlim(0, 1)
        cx.set_xlabel("share of the decision's variance")
        cx.set_title("what it rests on" + ("\n(orange: a next measurement)" if nxt else ""), fontsize=8)
    title = title or "which configuration first"
    if dd:
        state = "settled" if dd.get("settled") else "not settled"
        title += f": {dd['a']} faster than {dd['b']} with P = {dd['p_a_faster']:.2f} ({state})"
    fig.suptitle(title, fontsize=10)
    return fig


SPLIT_COLUMNS = ("backend", "stage", "n_nodes", "n_inputs", "input_bytes", "first_node")
CONV_COLUMNS = ("layer", "kind", "stage", "t_in", "c_out", "src1", "src1_rows", "mul_mats", "backends", "verdict",
                "rule", "reason")


#: split colours by ggml backend name
SPLIT_COLORS = {"CPU": "#9e9e9e", "HTP": "#1f77b4", "BLAS": "#2ca02c", "RPC": "#ff7f0e", "CUDA": "#76b900"}


def split_timeline(p: Any, width: float = 12.0) -> Figure:
    """A simulated placement's splits as coloured spans over the node index, copy bytes per split below, stage
    boundaries marked. Widths are node counts, not time: no device was timed."""
    fig = Figure(figsize=(width, 3.6), layout="constrained")
    ax, bx = fig.subplots(2, 1, sharex=True, height_ratios=[1, 2])
    start = 0
    seen: set[str] = set()
    for s in p.splits:
        color = SPLIT_COLORS.get(s.backend, "#d62728")
        label = s.backend if s.backend not in seen else None
        seen.add(s.backend)
        ax.broken_barh([(start, s.n_nodes)], (0, 1), facecolors=color, label=label)
        if s.input_bytes:
            bx.bar(start, s.input_bytes / 1e6, width=max(1.0, s.n_nodes * 0.1), color=color, align="edge")
        start += s.n_nodes
    last = None
    for i, n in enumerate(p.nodes):
        if n.stage != last and n.stage:
            for a in (ax, bx):
                a.axvline(i, color="k", lw=0.4, alpha=0.3)
            ax.text(i, 1.05, n.stage, rotation=60, fontsize=6, va="bottom")
            last = n.stage
    ax.set_xlim(0, max(1, len(p.nodes)))
    ax.set_yticks([])
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right", fontsize=7, ncols=len(seen))
    bx.set_ylabel("copied in (MB)")
    bx.set_xlabel("graph node")
    c = p.config
    fig.suptitle(
        f"{c['profile']}: {p.n_splits} splits, {p.copied_bytes / 1e6:.1f} MB copied ({c['lowering_label']})", fontsize=9
    )
    return fig


def placement_figures(pl: Any) -> list[Figure]:
    """`placement(pl)`, the split timeline of the same placement and, when it was predicted, its time per stage."""
    figs = [placement(pl), split_timeline(pl)]
    if field(pl, "predicted") is not None:
        figs.append(predicted_stages(pl))
    return figs


# ---- audio ---------------------------------------------------------------------------------------------
def _wav(rec: Any) -> np.ndarray:
    if isinstance(rec, np.ndarray):
        return rec.reshape(-1)
    w = field(rec, "wav")
    if w is None:
        raise ValueError("this record has no waveform")
    return np.asarray(w).reshape(-1)


def waveform(rec: Any, sample_rate: int = 24000, title: str = "waveform") -> Figure:
    """Samples against time in seconds."""
    w = _wav(rec)
    fig = Figure(figsize=(9, 2.4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(np.arange(w.size) / sample_rate, w, lw=0.5)
    ax.set_xlabel("s")
    peak = float(np.abs(w).max()) if w.size else 0.0
    lim = 1.05 if peak > 0.5 else max(peak * 1.1, 1e-9)  # full scale for audio, zoomed for small differences
    ax.set_ylim(-lim, lim)
    ax.set_title(f"{title} ({w.size} samples, {w.size / sample_rate:.2f} s at {sample_rate / 1000:g} kHz)")
    return fig


def spectrogram(rec: Any, sample_rate: int = 24000, title: str = "spectrogram", n_fft: int = 512) -> Figure:
    """Log-magnitude STFT (Hann window, hop n_fft/4), computed in numpy."""
    w = _wav(rec).astype(np.float64)
    hop = n_fft // 4
    if w.size < n_fft:
        w = np.pad(w, (0, n_fft - w.size))
    frames = 1 + (w.size - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    spec = np.abs(np.fft.rfft(w[idx] * np.hanning(n_fft), axis=1)).T
    db = 20 * np.log10(spec + 1e-8)
    fig = Figure(figsize=(9, 2.8), layout="constrained")
    ax = fig.add_subplot()
    im = ax.imshow(db, origin="lower", aspect="auto", cmap="magma", vmin=db.max() - 90, vmax=db.max(),
                   extent=(0, w.size / sample_rate, 0, sample_rate / 2000))
    ax.set_xlabel("s")
    ax.set_ylabel("kHz")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="dB")
    return fig


# ---- compare -------------------------------------------------------------------------------------------
def ratios(a: Any, b: Any) -> dict[str, dict[str, float]]:
    """Time ratios b / a per block ('stage') and per ggml op ('op'); > 1 means b is slower."""

    def per(prof: Any, key: str) -> dict[str, float]:
        t: dict[str, float] = defaultdict(float)
        for n in as_rows(field(prof, "nodes")):
            t[str(n.get(key) or "?")] += float(n.get("time_ms") or 0.0)
        return t

    out = {}
    for key in ("stage", "op"):
        ta, tb = per(a, key), per(b, key)
        out[key] = {k: tb[k] / ta[k] for k in ta if ta[k] > 0 and k in tb}
    wa, wb = field(a, "wall_ms"), field(b, "wall_ms")
    if wa and wb:
        out["wall"] = {"wall": float(wb) / float(wa)}
    return out


def compare(a: Any, b: Any, labels: tuple[str, str] = ("A", "B")) -> Figure:
    """Two runs side by side: milliseconds per block for each, and the ratio B/A per block and per op."""
    r = ratios(a, b)
    ta, tb = _times_by(a, "stage"), _times_by(b, "stage")
    stages = stage_order([*ta, *tb])
    fig = Figure(figsize=(12, 4.2), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3, width_ratios=[3, 3, 2])
    x = np.arange(len(stages))
    ax1.bar(x - 0.2, [ta.get(s, 0) for s in stages], 0.4, label=labels[0])
    ax1.bar(x + 0.2, [tb.get(s, 0) for s in stages], 0.4, label=labels[1])
    ax1.set_xticks(x, stages, rotation=40, ha="right", fontsize=7)
    ax1.set_ylabel("ms")
    ax1.legend(fontsize=8)
    ax1.set_title("time per block")
    rs = [r["stage"].get(s, np.nan) for s in stages]
    ax2.bar(x, rs, color=["#d62728" if v > 1 else "#2ca02c" for v in np.nan_to_num(rs)])
    ax2.axhline(1.0, color="k", lw=0.8)
    ax2.set_xticks(x, stages, rotation=40, ha="right", fontsize=7)
    ax2.set_title(f"{labels[1]} / {labels[0]} per block")
    ops = sorted(r["op"], key=lambda k: -(_times_by(a, "op").get(k, 0)))[:12]
    ax3.barh(np.arange(len(ops)), [r["op"][k] for k in ops], color="#8172b2")
    ax3.axvline(1.0, color="k", lw=0.8)
    ax3.set_yticks(np.arange(len(ops)), ops, fontsize=7)
    ax3.invert_yaxis()
    ax3.set_title("per op (top by time)")
    wall = r.get("wall", {}).get("wall")
    fig.suptitle(f"compare {labels[0]} vs {labels[1]}" + (f": wall ratio {wall:.2f}" if wall else ""))
    return fig


def stage_snr(acc: Any, labels: Sequence[str] | None = None, bound: float | None = None,
              title: str = "accuracy per stage") -> Figure:
    """SNR per stage (dB, in decoder order) of one or several comparisons (`Accuracy` records, their dicts, or
    their rows), with the bound as a line: where a curve crosses it is where a run goes wrong. An exact stage is
    drawn at the top of the axis and marked 'exact'."""
    def is_rows(x: Any) -> bool:
        return isinstance(x, list | tuple) and (not x or (isinstance(x[0], Mapping) and "stage" in x[0]))

    accs = [acc] if is_rows(acc) or not isinstance(acc, list | tuple) else list(acc)
    series = []
    for a in accs:
        rows = a if is_rows(a) else as_rows(field(a, "stages"))
        series.append([(str(r["stage"]), r.get("snr_db")) for r in rows])
    if bound is None and not is_rows(accs[0]):
        bound = field(accs[0], "bound_db")
    stages = stage_order(s for ser in series for s, _ in ser)
    finite = [float(v) for ser in series for _, v in ser
              if isinstance(v, int | float) and np.isfinite(v)]
    top = (max(finite) if finite else 100.0) + 10.0
    fig = Figure(figsize=(max(6.0, 0.45 * len(stages) + 2), 3.6), layout="constrained")
    ax = fig.add_subplot()
    x = {s: i for i, s in enumerate(stages)}
    for k, ser in enumerate(series):
        pts = [(x[s], top if v in ("exact", "inf") or (isinstance(v, float) and np.isposinf(v)) else float(v))
               for s, v in ser if v not in (None, "")]
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        name = labels[k] if labels and k < len(labels) else f"B vs A {k + 1}" if len(series) > 1 else "SNR"
        ax.plot(xs, ys, marker="o", label=name)
    if bound is not None:
        ax.axhline(float(bound), color="#b00020", ls="--", lw=1, label=f"bound {float(bound):g} dB")
    ax.text(0, top, " exact", va="bottom", fontsize=7, color="#555")
    ax.set_xticks(range(len(stages)), stages, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("SNR (dB)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


# ---- streaming ---------------------------------------------------------------------------------------------
def stream_rows(obj: Any) -> list[dict]:
    """A stream sweep's rows: a `StreamSweep` (its `rows`), its `to_dict()`, or the rows themselves."""
    rows = field(obj, "rows") if not isinstance(obj, list | tuple) else obj
    return as_rows(rows)


def _range_errorbar(ax: Any, xs: Sequence[float], spans: Sequence[Mapping], color: Any, label: str) -> None:
    """A predicted value per x drawn as predicted_stages draws it: the p50 marked, the p10-p90 whisker dark, min-max
    faint."""
    p50 = np.array([s["p50"] for s in spans])
    lo = [p50 - [s["p10"] for s in spans], np.array([s["p90"] for s in spans]) - p50]
    full = [p50 - [s["min"] for s in spans], np.array([s["max"] for s in spans]) - p50]
    ax.errorbar(xs, p50, yerr=full, fmt="none", **FULL)
    ax.errorbar(xs, p50, yerr=lo, fmt="D", color=color, mfc="none", ms=6, label=label,
                **{**BAND, "ecolor": _darker(color)})


def stream_figure(rows: Any, title: str | None = None, frame_ms: float | None = None) -> Figure:
    """Chunk size (frames per call, log axis) against the time to first audio and the real-time factor of a
    stream: measured rows (`kzlab.app.streaming.stream_sweep`: size, first_audio_ms, call_ms_median, rtf; a
    `label` column draws one curve per label) as points and lines; a row's predicted values
    (`first_audio_range`, `rtf_range`: {p10, p50, p90, min, max}) as ranges, the way every predicted figure draws
    them. The real-time line (RTF = 1) is marked: below it the decoder keeps up with the audio it returns.
    `frame_ms` (or the rows' `chunk_audio_ms`): also draw the first audio as a listener waits for it when the codes
    arrive in real time (the chunk's own duration, then its call)."""
    rows = [r for r in stream_rows(rows) if r.get("size")]
    series: dict[str, list[dict]] = {}
    for r in rows:
        series.setdefault(str(r.get("label") or ""), []).append(r)
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax_t, ax_r = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    rtfs: list[float] = []
    for i, (lab, rs) in enumerate(series.items()):
        rs = sorted(rs, key=lambda r: r["size"])
        c = f"C{i}"
        pre = f"{lab}: " if lab else ""
        xs = [float(r["size"]) for r in rs]

        def col(key: str, rs: list[dict] = rs) -> list[float]:
            return [float(r[key]) if r.get(key) is not None else np.nan for r in rs]

        if any(r.get("first_audio_ms") is not None for r in rs):
            ax_t.plot(xs, col("first_audio_ms"), "o-", color=c, label=f"{pre}first audio (first call)")
        if any(r.get("call_ms_median") is not None for r in rs):
            ax_t.plot(xs, col("call_ms_median"), "s:", color=c, alpha=0.7, ms=4, label=f"{pre}call median")
        waits = [(r.get("chunk_audio_ms") if frame_ms is None else r["size"] * frame_ms) for r in rs]
        if all(w is not None for w in waits) and any(r.get("first_audio_ms") is not None for r in rs):
            ax_t.plot(xs, np.array(waits, float) + np.array(col("first_audio_ms")), "--", color=c, alpha=0.45,
                      label=f"{pre}codes arriving in real time (+ the chunk's duration)")
        if any(r.get("rtf") is not None for r in rs):
            ax_r.plot(xs, col("rtf"), "o-", color=c, label=f"{pre}measured" if lab else "measured")
            rtfs += [v for v in col("rtf") if np.isfinite(v)]
        for key, ax, what in (("first_audio_range", ax_t, "first audio"), ("rtf_range", ax_r, "RTF")):
            pts = [(float(r["size"]), span_of(r[key], 0.0)) for r in rs if r.get(key)]
            if pts:
                _range_errorbar(ax, [x for x, _ in pts], [s for _, s in pts], c,
                                f"{pre}predicted {what} (p50, p10-p90, min-max)")
                if ax is ax_r:
                    rtfs += [s["max"] for _, s in pts] + [s["min"] for _, s in pts]
    ax_r.axhline(1.0, color="#b00020", ls="--", lw=1, label="real time (RTF = 1)")
    if rtfs:
        lo, hi = min([*rtfs, 1.0]), max([*rtfs, 1.0])
        ax_r.set_ylim(lo / 1.6, hi * 1.6)
    ax_r.set_yscale("log")
    _plain_log(ax_r.yaxis)
    ax_r.fill_between([0, 1], 1.0, 1e9, transform=ax_r.get_yaxis_transform(), color="#b00020", alpha=0.05, lw=0)
    for ax in (ax_t, ax_r):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(_int_formatter())
        ax.set_xlabel("chunk size (code frames per call)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    ax_t.set_yscale("log")
    _plain_log(ax_t.yaxis)
    ax_t.set_ylabel("ms")
    ax_t.set_title("time to first audio (graphs built before timing)", fontsize=9)
    ax_r.set_ylabel("real-time factor (compute / audio)")
    ax_r.set_title("real-time factor: below the line the stream keeps up", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _int_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:g}")


def _times_by(prof: Any, key: str) -> dict[str, float]:
    t: dict[str, float] = defaultdict(float)
    for n in as_rows(field(prof, "nodes")):
        t[str(n.get(key) or "?")] += float(n.get("time_ms") or 0.0)
    return dict(t)


__all__ = [
    "compare",
    "decision",
    "decision_dict",
    "evolution_rows",
    "gflop_breakdown",
    "gflop_table",
    "placement",
    "placement_figures",
    "predicted_stages",
    "range_bars",
    "range_text",
    "span_of",
    "split_timeline",
    "stage_spans",
    "total_span",
    "as_rows",
    "ratios",
    "roofline",
    "spectrogram",
    "stage_snr",
    "stream_figure",
    "stream_rows",
    "t_evolution",
    "timeline",
    "top_ops",
    "top_ops_figure",
    "waveform",
]
