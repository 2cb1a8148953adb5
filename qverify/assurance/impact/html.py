"""report.html: the study in one self-contained page (plots embedded as data: URIs, style inline, no
external resource), so it can be mailed or opened from a CI artifact without its folder."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence

from qverify.assurance.impact.records import CLEAN, ImpactStudy
from qverify.assurance.impact.tables import HEADER, THROUGHPUT_HEADER, rows, throughput_rows

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; background: #fff; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; white-space: nowrap; }
th { white-space: normal; max-width: 7em; }
.ci { color: #666; font-size: 0.85em; }
th:first-child, td:first-child { text-align: left; }
th { background: #e8e8e8; }
.header { color: #555; margin: 0.2em 0; }
img.plot { width: 750px; border: 1px solid #ccc; display: block; }
"""


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _cell(text: str) -> str:
    """A table cell; a value with its interval (`0.981 [0.962, 0.995]`) on two lines, the interval
    smaller: on one line, twelve such columns made the tables wider than a 1,920-pixel screen."""
    value, bracket, interval = text.partition(" [")
    if not bracket:
        return f"<td>{html.escape(text)}</td>"
    return f'<td>{html.escape(value)}<br><span class="ci">[{html.escape(interval)}</span></td>'


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["<table>", "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for row in body:
        lines.append("<tr>" + "".join(_cell(cell) for cell in row) + "</tr>")
    return [*lines, "</table>"]


def render_html(study: ImpactStudy, pngs: Mapping[str, bytes], header: Sequence[str]) -> str:
    """The page's text: header, throughput, the clean table, then per family its plot and table."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>qverify impact</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Quantization impact under perturbation</h1>",
        *(f'<p class="header">{html.escape(line)}</p>' for line in header),
        "<h2>Throughput (simulation only)</h2>",
        *_table(THROUGHPUT_HEADER, throughput_rows(study)),
        "<h2>Clean data</h2>",
        *_table(HEADER, [r.full for r in rows(study, study.family_cells(CLEAN))]),
    ]
    for info in study.families:
        parts.append(
            f"<h2>{html.escape(info.name)}: {html.escape(info.parameter)} ({html.escape(info.unit)})</h2>"
        )
        if info.name in pngs:
            parts.append(
                f'<img class="plot" src="{data_uri(pngs[info.name])}" alt="{html.escape(info.name)} plot">'
            )
        parts += _table(HEADER, [r.full for r in rows(study, study.family_cells(info.name))])
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
