"""The study's numbers as rows of text, shared by report.md, report.html, the command's summary and
the benchmark: one row per cell and candidate, each metric as "value [low, high]"."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from qverify.assurance.impact.records import CLEAN, Cell, Estimate, ImpactStudy

HEADER = (
    "family", "intensity", "candidate", "top-1 ref", "top-1 cand", "top-5 ref", "top-5 cand",
    "F1 ref", "F1 cand", "KL(ref‖cand)", "KL(cand‖ref)", "flip rate",
)  # fmt: skip
SHORT_HEADER = (
    "family",
    "intensity",
    "candidate",
    "top-1 ref",
    "top-1 cand",
    "F1 ref",
    "F1 cand",
    "KL",
    "flip",
)


def fraction(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.3f}"


def small(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.3g}"


def with_interval(estimate: Estimate | None, style=fraction) -> str:
    if estimate is None:
        return "-"
    if not (math.isfinite(estimate.low) and math.isfinite(estimate.high)):
        return style(estimate.value)
    return f"{style(estimate.value)} [{style(estimate.low)}, {style(estimate.high)}]"


def intensity_text(cell: Cell) -> str:
    return "-" if cell.intensity is None else f"{cell.intensity:g}"


@dataclass(frozen=True, slots=True)
class Row:
    """The text cells of one (cell, candidate) row, in `HEADER` order, with and without intervals."""

    full: tuple[str, ...]
    short: tuple[str, ...]


def rows(study: ImpactStudy, cells: Sequence[Cell], intervals: bool = True) -> list[Row]:
    out = []
    for cell in cells:
        ref = cell.reference
        for comparison in cell.comparisons:
            cand = comparison.scores

            def show(estimate: Estimate | None, style=fraction) -> str:
                if intervals:
                    return with_interval(estimate, style)
                return "-" if estimate is None else style(estimate.value)

            head = (cell.family, intensity_text(cell), comparison.candidate)
            full = (
                *head, show(ref.top1), show(cand.top1), show(ref.top5), show(cand.top5), show(ref.f1),
                show(cand.f1), show(comparison.kl, small), show(comparison.kl_reverse, small),
                show(comparison.flip_rate),
            )  # fmt: skip
            short = (
                *head, fraction(ref.top1.value), fraction(cand.top1.value), fraction(ref.f1.value),
                fraction(cand.f1.value), small(comparison.kl.value), fraction(comparison.flip_rate.value),
            )  # fmt: skip
            out.append(Row(full, short))
    return out


def pick_intensities(values: Sequence[float], count: int = 3) -> list[float]:
    """`count` intensities spread over a grid: the first, the middle and the last for 3."""
    if len(values) <= count:
        return list(values)
    picks = [values[round(i * (len(values) - 1) / (count - 1))] for i in range(count)]
    return list(dict.fromkeys(picks))


def summary_cells(study: ImpactStudy, per_family: int = 3) -> list[Cell]:
    """The clean cell and `per_family` intensities of each family (low, middle, high)."""
    cells = [study.cell(CLEAN, None)]
    for info in study.families:
        cells += [study.cell(info.name, value) for value in pick_intensities(info.values, per_family)]
    return cells


def aligned(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    """A plain-text table with columns padded to their widest cell."""
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in [header, *body]
    ]
    return "\n".join(lines)


def markdown(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in body]


def throughput_rows(study: ImpactStudy) -> list[tuple[str, str, str, str]]:
    return [(t.label, f"{t.images:,}", f"{t.seconds:.2f}", f"{t.per_second:,.0f}") for t in study.throughput]


THROUGHPUT_HEADER = ("implementation", "images", "simulation s", "images/s")
