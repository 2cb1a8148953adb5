"""summary.html: the suite report as one self-contained page (tables, cactus plot, counterexamples).

The same content as summary.md, for a browser: the counts per suite x format, the outcome of every
property at every format (coloured cells), a cactus plot, and a thumbnail of every counterexample
picture. Self-contained on purpose: images are embedded as `data:` URIs and the style is inline,
so the file can be mailed, archived or opened from a CI artifact without the folder around it.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from qverify.suites.report import LEGEND, STATUS_ORDER, count_rows, outcome_rows

__all__ = ["render_summary_html", "write_summary_html"]

CELL_CLASS = {"S": "safe", "F": "unsafe", "TO": "unknown", "E": "error"}
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; background: #fff; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #e8e8e8; }
td.safe { background: #c8ecc8; } td.unsafe { background: #f6c4c4; }
td.unknown { background: #f7e7b4; } td.error { background: #d9d9d9; }
.legend, .header { color: #555; }
.cex { display: inline-block; margin: 0.4em; text-align: center; font-size: 0.85em; }
.cex img { width: 320px; border: 1px solid #999; }
"""


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _counts_html(entries: Sequence[dict[str, Any]], formats: Sequence[str]) -> list[str]:
    head = "".join(
        f"<th>{name}</th>"
        for name in ("suite", "format", "tasks", *STATUS_ORDER, "total time (s)", "median time (s)")
    )
    lines = ["<table>", f"<tr>{head}</tr>"]
    for row in count_rows(entries, formats):
        cells = [row.suite, f"{row.label} ({row.number})", str(row.tasks)]
        cells += [str(row.counts[status]) for status in STATUS_ORDER]
        cells += [f"{row.total_s:.1f}", f"{row.median_s:.2f}"]
        lines.append("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    return [*lines, "</table>"]


def _outcome_html(entries: Sequence[dict[str, Any]], formats: Sequence[str]) -> list[str]:
    head = "<th>property</th>" + "".join(f"<th>{html.escape(label)}</th>" for label in formats)
    lines = ["<table>", f"<tr>{head}</tr>"]
    for task, cells in outcome_rows(entries, formats):
        row = f"<td>{html.escape(task)}</td>"
        for cell in cells:
            kind = CELL_CLASS.get(cell.split(" ")[0].rstrip("*"), "")
            row += f'<td class="{kind}">{html.escape(cell)}</td>'
        lines.append(f"<tr>{row}</tr>")
    return [*lines, "</table>"]


def _problems_html(entries: Sequence[dict[str, Any]]) -> list[str]:
    problems = [e for e in entries if e["record"]["status"] in ("UNKNOWN", "ERROR")]
    if not problems:
        return []
    items = [
        f"<li>{html.escape(e['task'])} @ {html.escape(e['format'])}: {e['record']['status']}: "
        f"{html.escape(e['record'].get('reason', ''))}</li>"
        for e in problems
    ]
    return ["<h2>Unknown and errors</h2>", "<ul>", *items, "</ul>"]


def _examples_html(entries: Sequence[dict[str, Any]], out: Path) -> list[str]:
    figures = []
    for entry in entries:
        png = entry.get("cex_png")
        if not png or not (out / png).is_file():
            continue
        caption = html.escape(f"{entry['task']} @ {entry['format']}")
        uri = _data_uri((out / png).read_bytes())
        figures.append(f'<div class="cex"><img src="{uri}" alt="{caption}"><br>{caption}</div>')
    listed = [e for e in entries if e.get("cex_json") and not e.get("cex_png")]
    items = [f"<li>{html.escape(e['task'])} @ {html.escape(e['format'])}: {html.escape(e['cex_json'])}</li>"
             for e in listed]  # fmt: skip
    if not figures and not items:
        return []
    return ["<h2>Counterexamples</h2>", *figures, *(["<ul>", *items, "</ul>"] if items else [])]


def render_summary_html(
    entries: Sequence[dict[str, Any]],
    formats: Sequence[str],
    out: Path,
    header: Sequence[str],
    cactus: bytes | None = None,
) -> str:
    """The page's text. `out` is the run folder (counterexample pictures are read from it); `cactus`
    the cactus plot's PNG (`report.cactus_png`), shown when given."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>qverify suite results</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>qverify suite results</h1>",
        *(f'<p class="header">{html.escape(line)}</p>' for line in header),
        "<h2>Counts per suite and format</h2>",
        *_counts_html(entries, formats),
        "<h2>Outcome per property and format</h2>",
        f'<p class="legend">{html.escape(LEGEND)}</p>',
        *_outcome_html(entries, formats),
    ]
    if cactus is not None:
        parts += ["<h2>Cactus plot</h2>", f'<img src="{_data_uri(cactus)}" alt="cactus plot">']
    parts += [*_problems_html(entries), *_examples_html(entries, out), "</body></html>"]
    return "\n".join(parts) + "\n"


def write_summary_html(
    entries: Sequence[dict[str, Any]],
    formats: Sequence[str],
    out: Path,
    header: Sequence[str],
    cactus: bytes | None = None,
) -> Path:
    """Write `out/summary.html` and return its path."""
    path = out / "summary.html"
    path.write_text(render_summary_html(entries, formats, out, header, cactus))
    return path
