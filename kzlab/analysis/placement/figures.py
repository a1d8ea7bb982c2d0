"""A timeline sketch of a simulated placement: which backend runs each stretch of the graph, and the bytes
each split has to copy in before it can start. Node order is the graph's (= execution) order; widths are
node counts, not time, since no device was timed."""

from __future__ import annotations

from matplotlib.figure import Figure

from kzlab.analysis.placement.api import Placement

COLORS = {"CPU": "#9e9e9e", "HTP": "#1f77b4", "BLAS": "#2ca02c", "RPC": "#ff7f0e", "CUDA": "#76b900"}


def timeline(p: Placement, width: float = 12.0) -> Figure:
    """Splits as coloured spans over the node index, copy bytes per split below, stage boundaries marked."""
    fig = Figure(figsize=(width, 3.6), layout="constrained")
    ax, bx = fig.subplots(2, 1, sharex=True, height_ratios=[1, 2])
    start = 0
    seen: set[str] = set()
    for s in p.splits:
        color = COLORS.get(s.backend, "#d62728")
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
