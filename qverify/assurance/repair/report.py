"""The repair's tables and files: one row per metric (and per random draw, with their mean), the
accuracies before and after on the repair and validation sets, the share of the validation gap to
the float model that the repair recovers, the changes and the times; `report.md` and `repair.json`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from qverify.assurance.repair.metrics import RANDOM
from qverify.assurance.repair.plot import repair_figure_png
from qverify.assurance.repair.records import RepairOutcome, RepairReport
from qverify.assurance.repair.reverify import VerdictChange
from qverify.errors import InputError

# what a run writes into its folder (`qverify repair --overwrite` removes these first, and only these)
OUTPUTS = ("repaired.*", "c", "report.md", "repair.png", "repair.json", "journal.jsonl")
HEADER = (
    "metric",
    "neurons",
    "MILP",
    "MILP s",
    "fixed",
    "changed",
    "sum|d|",
    "repair %",
    "valid. %",
    "recovered",
    "time s",
)


def _percent(value: float) -> str:
    return f"{100 * value:.2f}"


def recovered(report: RepairReport, validation: float) -> float:
    """The share of the validation gap (float minus quantized) that a repair closes."""
    study = report.study
    gap = study.float_accuracy.validation - study.before.validation
    return (validation - study.before.validation) / gap if gap > 0 else float("nan")


def _row(report: RepairReport, o: RepairOutcome) -> list[str]:
    neurons = ",".join(str(n) for n in o.neurons)
    status = o.status + (f" x{o.milp_rounds}" if o.milp_rounds > 1 else "")
    share = recovered(report, o.accuracy.validation)
    return [
        o.metric + (f" (= {o.same_as})" if o.same_as else ""),
        neurons if len(neurons) <= 24 else neurons[:21] + "...",
        status,
        f"{o.milp_time_s:.1f}",
        f"{o.soft_met}/{o.soft_goals}",
        str(len(o.changes)),
        f"{o.total_change:.3g}",
        _percent(o.accuracy.repair),
        _percent(o.accuracy.validation),
        "-" if np.isnan(share) else f"{100 * share:.0f}%",
        f"{o.time_s:.1f}",
    ]


def table_rows(report: RepairReport) -> list[list[str]]:
    """One row per outcome, then the mean of the random draws."""
    rows = [_row(report, o) for o in report.outcomes]
    draws = report.by_metric(RANDOM)
    if len(draws) > 1:
        mean_valid = float(np.mean([o.accuracy.validation for o in draws]))
        share = recovered(report, mean_valid)
        rows.append(
            [f"{RANDOM} (mean of {len(draws)})", "", "", f"{np.mean([o.milp_time_s for o in draws]):.1f}", "",
             f"{np.mean([len(o.changes) for o in draws]):.1f}", f"{np.mean([o.total_change for o in draws]):.3g}",
             _percent(float(np.mean([o.accuracy.repair for o in draws]))), _percent(mean_valid),
             "-" if np.isnan(share) else f"{100 * share:.0f}%", f"{np.mean([o.time_s for o in draws]):.1f}"]
        )  # fmt: skip
    return rows


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows])


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cells(row: Sequence[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |"

    return "\n".join([cells(header), "|" + "---|" * len(header), *(cells(r) for r in rows)])


def summary_lines(report: RepairReport) -> list[str]:
    """What was repaired and the baseline accuracies (the gap the table's `recovered` refers to)."""
    study, settings = report.study, report.settings
    target = study.target
    return [
        (
            f"repair of {target.implementation.label} ({target.implementation.network.name}), "
            f"{target.describe()}: top {settings.neurons} neurons per metric"
        ),
        (
            f"repair set: {study.repair_y.size} samples ({study.split.describe()}); validation set: "
            f"{study.validation_y.size} samples"
        ),
        (
            f"float accuracy: repair {_percent(study.float_accuracy.repair)} %, validation "
            f"{_percent(study.float_accuracy.validation)} %; quantized before: repair {_percent(study.before.repair)} %, "
            f"validation {_percent(study.before.validation)} % (gap "
            f"{100 * (study.float_accuracy.validation - study.before.validation):.2f} points)"
        ),
    ]


def verdict_lines(changes: Sequence[VerdictChange]) -> list[str]:
    """Broken properties first (with their counterexample), then proofs lost to a timeout or an
    error, then other changes, then the counts."""
    lines = []
    broken = [c for c in changes if c.broken]
    for change in broken:
        example = change.after.counterexample
        lines.append(f"BROKEN by the repair: {change.name}: SAFE -> UNSAFE")
        if example is not None:
            lines.append(
                f"  counterexample input (normalised): {[round(float(v), 6) for v in example.inputs_real]}"
            )
            lines.append(f"  outputs of the repaired C: {[round(float(v), 6) for v in example.outputs_c]}")
    unproven = [c for c in changes if c.unproven]
    for change in unproven:
        lines.append(
            f"NO LONGER PROVEN: {change.name}: SAFE -> {change.after.status.value} ({change.after.reason})"
        )
    for change in changes:
        if change.changed and not change.broken and not change.unproven:
            lines.append(
                f"changed: {change.name}: {change.before.status.value} -> {change.after.status.value}"
            )
    same = sum(1 for c in changes if not c.changed)
    seconds = sum(c.time_s for c in changes)
    lines.append(
        f"{len(changes)} properties re-verified in {seconds:.0f} s: {len(broken)} broken, {len(unproven)} no "
        f"longer proven, {same} unchanged"
    )
    return lines


def _outcome_json(report: RepairReport, o: RepairOutcome) -> dict:
    return {
        "metric": o.metric,
        "same_as": o.same_as,
        "neurons": list(o.neurons),
        "milp": {
            "status": o.status,
            "highs_status": o.highs_status,
            "time_s": round(o.milp_time_s, 3),
            "rounds": o.milp_rounds,
            "rows": o.milp_size[0],
            "columns": o.milp_size[1],
            "integer_columns": o.milp_size[2],
            "tests_encoded": o.tests_encoded,
            "failing_encoded": o.failing_encoded,
            "soft_goals": o.soft_goals,
            "soft_goals_met": o.soft_met,
            "fallback_pairs": o.fallback_pairs,
            "disagreements": o.disagreements,
        },
        "accuracy_after": {"repair": o.accuracy.repair, "validation": o.accuracy.validation},
        "validation_gap_recovered": recovered(report, o.accuracy.validation),
        "changes": [
            {"neuron": c.neuron, "input": c.input, "old": c.old, "new": c.new, "real_delta": c.real_delta}
            for c in o.changes
        ],
        "total_real_change": o.total_change,
        "time_s": round(o.time_s, 3),
    }


def _verdict_json(change: VerdictChange) -> dict:
    return {
        "property": change.name,
        "before": change.before.to_json(),
        "after": change.after.to_json(),
        "changed": change.changed,
        "broken": change.broken,
        "unproven": change.unproven,
    }


def write_report(
    report: RepairReport, out: Path, changes: Sequence[VerdictChange], files: dict[str, str]
) -> list[Path]:
    """report.md, repair.png and repair.json under `out`."""
    study = report.study
    settings = report.settings
    document = {
        "target": study.target.describe(),
        "implementation": study.target.implementation.label,
        "settings": {
            "layer": settings.layer,
            "neurons": settings.neurons,
            "metrics": list(settings.metrics),
            "random_runs": settings.random_runs,
            "margin": settings.margin,
            "max_tests": settings.max_tests,
            "time_limit_s": settings.time_limit_s,
            "max_delta": settings.max_delta,
            "seed": settings.seed,
        },
        "split": {
            "passing": int(study.split.passing.size),
            "failing": int(study.split.failing.size),
            "excluded": int(study.split.excluded.size),
        },
        "spectrum": {k: getattr(study.spectrum, k).tolist() for k in ("a_f", "n_f", "a_s", "n_s")},
        "float_accuracy": {
            "repair": study.float_accuracy.repair,
            "validation": study.float_accuracy.validation,
        },
        "quantized_before": {"repair": study.before.repair, "validation": study.before.validation},
        "outcomes": [_outcome_json(report, o) for o in report.outcomes],
        "selected": report.selected.metric if report.selected else None,
        "files": files,
        "reverification": [_verdict_json(c) for c in changes],
        "time_s": round(report.time_s + study.prepare_s, 3),
    }
    md = ["# qverify repair", "", *[f"- {line}" for line in [*summary_lines(report), *report.notes]], ""]
    md += [
        markdown(HEADER, table_rows(report)),
        "",
        "![accuracy after the repair per metric](repair.png)",
        "",
    ]
    md += [
        (
            "`MILP`: HiGHS's outcome (optimal / feasible = best within the time limit; xN: solved N times, "
            "per-op partial sums added); `fixed`: soft goals the solution meets / encoded; `changed`: "
            "parameters changed; `sum|d|`: total change in real units; `recovered`: share of the validation "
            "gap to the float model closed."
        ),
        "",
    ]
    if report.selected is not None:
        md += [
            f"Written: the `{report.selected.metric}` repair ({', '.join(f'{k}: `{v}`' for k, v in files.items())}).",
            "",
        ]
    if changes:
        md += ["## Re-verification", "", *[f"    {line}" for line in verdict_lines(changes)], ""]
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "repair.json").write_text(json.dumps(document, indent=2, default=float) + "\n")
        (out / "repair.png").write_bytes(repair_figure_png(report))
        (out / "report.md").write_text("\n".join(md))
    except OSError as error:
        raise InputError(f"cannot write to {out}: {error.strerror}") from None
    return [out / "repair.json", out / "repair.png", out / "report.md"]
