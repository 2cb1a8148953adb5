"""The study's files: impact.csv (one row per cell and candidate, every metric with its interval),
impact.json (the typed record), one PNG per family, report.md and the self-contained report.html."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from qverify.assurance.impact.html import render_html
from qverify.assurance.impact.plots import family_figure_png
from qverify.assurance.impact.records import CLEAN, Estimate, ImpactStudy, study_json
from qverify.assurance.impact.tables import (
    HEADER,
    THROUGHPUT_HEADER,
    markdown,
    rows,
    throughput_rows,
)

METRICS = ("top1", "top5", "f1")
# what a study writes into its folder (`qverify impact --overwrite` removes these first, and only these)
JOURNAL = "journal.jsonl"  # one line per finished cell (`journal`): what `--resume` continues from
OUTPUTS = ("impact.csv", "impact.json", "impact_*.png", "report.md", "report.html", JOURNAL)
COMPARISON_METRICS = ("kl", "kl_reverse", "flip_rate", "top1_drop")


def _estimate_cells(estimate: Estimate | None) -> list[str]:
    if estimate is None:
        return ["", "", ""]
    return ["" if not math.isfinite(v) else repr(v) for v in (estimate.value, estimate.low, estimate.high)]


def csv_header() -> list[str]:
    head = ["family", "parameter", "intensity", "reference", "candidate", "images"]
    for side in ("ref", "cand"):
        for metric in METRICS:
            head += [f"{side}_{metric}", f"{side}_{metric}_low", f"{side}_{metric}_high"]
    for metric in COMPARISON_METRICS:
        head += [metric, f"{metric}_low", f"{metric}_high"]
    return [*head, "nonfinite"]


def write_csv(study: ImpactStudy, path: Path) -> Path:
    parameters = {info.name: info.parameter for info in study.families}
    with path.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(csv_header())
        for cell in study.cells:
            for comparison in cell.comparisons:
                row = [cell.family, parameters.get(cell.family, ""),
                       "" if cell.intensity is None else repr(cell.intensity),
                       study.reference.label, comparison.candidate, study.images]  # fmt: skip
                for scores in (cell.reference, comparison.scores):
                    for metric in METRICS:
                        row += _estimate_cells(getattr(scores, metric))
                for metric in COMPARISON_METRICS:
                    row += _estimate_cells(getattr(comparison, metric))
                writer.writerow([*row, comparison.nonfinite])
    return path


def header_lines(study: ImpactStudy) -> list[str]:
    """What was compared, on what, and how the numbers were made."""
    candidates = ", ".join(f"{c.label} ({c.network})" for c in study.candidates)
    shape = "x".join(map(str, study.image_shape)) if study.image_shape else "none (vectors)"
    return [
        f"reference: {study.reference.label} ({study.reference.network}); candidates: {candidates}",
        (
            f"data: {study.dataset}, {study.images} images, {study.classes} classes; input domain "
            f"[{study.domain[0]:g}, {study.domain[1]:g}], image shape {shape}"
        ),
        (
            f"softmax over the outputs (logits) at temperature {study.temperature:g}; KL in nats, mean over "
            f"images; intervals: {study.confidence:.0%} percentile bootstrap, {study.resamples} resamples "
            f"of the images (paired); seed {study.seed}"
        ),
        f"wall time {study.wall_s:.1f} s",
    ]


def render_markdown(study: ImpactStudy, plots: dict[str, str]) -> str:
    lines = ["# Quantization impact under perturbation", ""]
    lines += [f"- {line}" for line in header_lines(study)]
    lines += ["", "## Throughput (simulation only)", "", *markdown(THROUGHPUT_HEADER, throughput_rows(study))]
    lines += [
        "",
        "## Clean data",
        "",
        *markdown(HEADER, [r.full for r in rows(study, study.family_cells(CLEAN))]),
    ]
    for info in study.families:
        lines += ["", f"## {info.name}: {info.parameter} ({info.unit})", ""]
        if info.name in plots:
            lines += [f"![{info.name}]({plots[info.name]})", ""]
        lines += markdown(HEADER, [r.full for r in rows(study, study.family_cells(info.name))])
    nonfinite = sum(c.nonfinite for cell in study.cells for c in cell.comparisons)
    if nonfinite:
        lines += [
            "",
            f"{nonfinite} (cell, image) pairs had an infinite or NaN output, left out of the KL means.",
        ]
    return "\n".join(lines) + "\n"


def write_report(study: ImpactStudy, out: Path) -> list[Path]:
    """Write every file of the study into `out` (created) and return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = [write_csv(study, out / "impact.csv")]
    (out / "impact.json").write_text(study_json(study))
    written.append(out / "impact.json")
    pngs: dict[str, bytes] = {}
    for info in study.families:
        pngs[info.name] = family_figure_png(study, info.name)
        path = out / f"impact_{info.name}.png"
        path.write_bytes(pngs[info.name])
        written.append(path)
    (out / "report.md").write_text(render_markdown(study, {name: f"impact_{name}.png" for name in pngs}))
    (out / "report.html").write_text(render_html(study, pngs, header_lines(study)))
    return [*written, out / "report.md", out / "report.html"]
