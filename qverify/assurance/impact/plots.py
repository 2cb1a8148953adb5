"""One picture per family: top-1 accuracy and macro-F1 of the reference and of each candidate
against the intensity (the clean data at the family's neutral value), top-1 intervals as bands, and
the mean KL(P_ref || P_cand) on a second axis. matplotlib with the Agg back end (no display)."""

from __future__ import annotations

import io

import numpy as np

from qverify.assurance.impact.records import CLEAN, Cell, ImpactStudy, Scores

REFERENCE_COLOUR = "black"


def _series(cells: list[Cell], pick) -> tuple[np.ndarray, ...]:
    values = [pick(cell) for cell in cells]
    return tuple(np.array([getattr(v, part) for v in values]) for part in ("value", "low", "high"))


def _plot_scores(axes, xs, cells, pick_scores, colour: str, name: str, style: str) -> None:
    top1 = _series(cells, lambda c: pick_scores(c).top1)
    f1 = _series(cells, lambda c: pick_scores(c).f1)
    axes.plot(xs, top1[0], style, color=colour, marker="o", markersize=3.5, label=f"top-1 {name}")
    axes.fill_between(xs, top1[1], top1[2], color=colour, alpha=0.12, linewidth=0)
    axes.plot(xs, f1[0], style, color=colour, marker="s", markersize=3, alpha=0.6, dashes=(4, 2),
              label=f"F1 {name}")  # fmt: skip


def family_figure_png(study: ImpactStudy, family: str) -> bytes:
    """The family's plot as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    info = next(i for i in study.families if i.name == family)
    cells = [study.cell(CLEAN, None), *study.family_cells(family)]
    xs_raw = [info.neutral, *[cell.intensity for cell in cells[1:]]]
    order = np.argsort(xs_raw, kind="stable")
    xs = [xs_raw[i] for i in order]
    cells = [cells[i] for i in order]
    figure, axes = plt.subplots(figsize=(7.5, 5.4))
    kl_axes = axes.twinx()
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def reference_scores(cell: Cell) -> Scores:
        return cell.reference

    _plot_scores(axes, xs, cells, reference_scores, REFERENCE_COLOUR, study.reference.label, "-")
    for index, candidate in enumerate(study.candidates):
        colour = colours[index % len(colours)]

        def candidate_scores(cell: Cell, index: int = index) -> Scores:
            return cell.comparisons[index].scores

        _plot_scores(axes, xs, cells, candidate_scores, colour, candidate.label, "-")
        kl = [cell.comparisons[index].kl.value for cell in cells]
        kl_axes.plot(xs, kl, ":", color=colour, marker="x", markersize=4, label=f"KL {study.reference.label}"
                     f"‖{candidate.label}")  # fmt: skip
    axes.set(xlabel=f"{info.parameter} ({info.unit})", ylabel="top-1 accuracy, macro-F1", ylim=(0, 1.04))
    axes.set_title(f"{family}: {study.reference.label} vs {', '.join(c.label for c in study.candidates)}"
                   f" ({study.dataset})", fontsize=10)  # fmt: skip
    kl_axes.set_ylabel("mean KL divergence (nats)")
    kl_axes.set_ylim(bottom=0)
    if all(value <= info.neutral for value in info.values) and len(info.values) > 0:
        axes.invert_xaxis()  # intensity grows away from the neutral value: left to right
    axes.grid(alpha=0.3)
    handles, labels = axes.get_legend_handles_labels()
    kl_handles, kl_labels = kl_axes.get_legend_handles_labels()
    axes.legend(handles + kl_handles, labels + kl_labels, fontsize="x-small", loc="upper center",
                bbox_to_anchor=(0.5, -0.14), ncol=min(4, 1 + len(study.candidates)), frameon=False)  # fmt: skip
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()
