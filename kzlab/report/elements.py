"""The HTML elements every report section is made of: a figure as an inline PNG, rows as a table."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def figure_tag(fig, alt: str = "", dpi: int = 80) -> str:
    """A matplotlib Figure as an inline base64 PNG <img>."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def table(rows: Sequence[Mapping[str, Any]] | Mapping[str, Any], cols: Sequence[str] | None = None) -> str:
    """Rows of dicts (or one dict as key/value rows) as an HTML table."""
    if isinstance(rows, Mapping):
        rows = [{"key": k, "value": v} for k, v in rows.items()]
    rows = list(rows)
    if not rows:
        return '<p class="note">(none)</p>'
    cols = list(cols or rows[0].keys())
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c, "")
            num = isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)
            text = f"{v:.4g}" if isinstance(v, float | np.floating) else str(v)
            cells.append(f'<td class="num">{html.escape(text)}</td>' if num else f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


__all__ = ["figure_tag", "table"]
