"""Self-contained HTML reports of workbench runs (`kzlab report`, `Workbench.export_html`, `kzlab demo`).

One file holds everything: figures as base64 PNG (PNG rather than SVG because matplotlib's SVG carries
namespace URLs, and a report must open offline without referring to anything outside itself), audio as
`data:audio/wav;base64` sources of `<audio controls>` elements, tables as HTML, and the configuration,
machine and versions of each run.
"""

from kzlab.report.render import audio_tag, figure_tag, render, write_report
from kzlab.report.whatif_section import read_whatif, whatif_html

__all__ = ["audio_tag", "figure_tag", "read_whatif", "render", "whatif_html", "write_report"]
