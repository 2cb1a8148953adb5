"""One picture of a repair: per metric (and per random draw) the quantized model's accuracy after
the repair on the repair and validation sets, against the accuracy before and the float model's
(horizontal lines). matplotlib with the Agg back end (no display)."""

from __future__ import annotations

import io

import numpy as np

from qverify.assurance.repair.records import RepairReport


def repair_figure_png(report: RepairReport) -> bytes:
    """The picture as PNG bytes."""
    import matplotlib.pyplot as plt

    figure = repair_figure(report)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def repair_figure(report: RepairReport):
    """The matplotlib figure (closed by the caller). The legend sits right of the axes: inside them,
    in any corner, it covered bars (accuracies run from the bottom of the axes to near 100 %)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    study = report.study
    names = [o.metric for o in report.outcomes]
    repair_after = np.array([o.accuracy.repair for o in report.outcomes]) * 100
    valid_after = np.array([o.accuracy.validation for o in report.outcomes]) * 100
    xs = np.arange(len(names))
    figure, axes = plt.subplots(figsize=(max(6.0, 0.6 * len(names) + 2), 3.8), dpi=110)
    axes.bar(xs - 0.2, repair_after, 0.4, color="#7a9cc6", label="repair set, after")
    axes.bar(xs + 0.2, valid_after, 0.4, color="#d98c3f", label="validation set, after")
    for value, colour, style, label in (
        (study.before.validation, "#d98c3f", ":", "validation, before"),
        (study.float_accuracy.validation, "black", "--", "validation, float model"),
        (study.before.repair, "#7a9cc6", ":", "repair set, before"),
    ):
        axes.axhline(100 * value, color=colour, linestyle=style, linewidth=1.2, label=label)
    low = 100 * min(study.before.validation, study.before.repair, valid_after.min(), repair_after.min())
    axes.set_ylim(max(0.0, low - 2), 100.5)
    axes.set_xticks(xs, names, rotation=35, ha="right", fontsize=8)
    axes.set_ylabel("top-1 accuracy (%)")
    target = study.target
    axes.set_title(
        f"repair of {target.implementation.label} ({target.implementation.network.name}), {target.describe()}",
        fontsize=9,
    )
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    figure.tight_layout()
    return figure
