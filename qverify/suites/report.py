"""Suite outputs: results.jsonl, results.csv, summary.md (thesis-style tables) and plots."""

from __future__ import annotations

import csv
import io
import json
import statistics
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qverify.stage_times import pipeline_seconds

LEGEND = (
    "S = SAFE, F = UNSAFE (counterexample replayed; F* = quantization-induced: the float network does "
    "not violate it), TO = UNKNOWN (timeout or solver gave up), E = ERROR; times are wall-clock per task."
)
STATUS_ORDER = ("SAFE", "UNSAFE", "UNKNOWN", "ERROR")
CELL = {"SAFE": "S", "UNSAFE": "F", "UNKNOWN": "TO", "ERROR": "E"}
CSV_COLUMNS = (
    "suite",
    "task",
    "format",
    "number_format",
    "status",
    "time_s",
    "backend_s",
    "decided_by",
    "backend",
    "solver",
    "quantization_induced",
    "lut_eps",
    "peak_memory_mb",
    "reason",
    "network",
    "property",
)


def record_row(entry: dict[str, Any]) -> dict[str, Any]:
    """One flat CSV row of a journal entry."""
    record = entry["record"]
    cex = record.get("counterexample") or {}
    return {
        "suite": entry["suite"],
        "task": entry["task"],
        "format": entry["format"],
        "number_format": record.get("format", ""),
        "status": record["status"],
        "time_s": round(pipeline_seconds(record.get("times_s", {})), 3),
        "backend_s": round(record.get("times_s", {}).get("backend", 0.0), 3),
        "decided_by": record.get("decided_by", ""),
        "backend": record.get("backend", ""),
        "solver": record.get("solver", ""),
        "quantization_induced": cex.get("quantization_induced", "") if cex else "",
        "lut_eps": record.get("lut_eps", 0.0),
        "peak_memory_mb": round(record.get("peak_memory_mb", 0.0), 1),
        "reason": record.get("reason", ""),
        "network": portable_path(record.get("network", "")),
        "property": record.get("property", ""),
    }


def portable_path(text: str) -> str:
    """A path as results.csv shows it: relative to the working directory when it lies under it
    (`benchmarks/acasxu/...` from a checkout), so the table reads the same on every machine."""
    if not text or not Path(text).is_absolute():
        return text
    try:
        return str(Path(text).relative_to(Path.cwd()))
    except ValueError:
        return text


def write_results(entries: Sequence[dict[str, Any]], out: Path) -> None:
    with (out / "results.jsonl").open("w") as handle:
        for entry in entries:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
    with (out / "results.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for entry in entries:
            writer.writerow(record_row(entry))


def _cell(entry: dict[str, Any]) -> str:
    record = entry["record"]
    status = record["status"]
    mark = CELL[status]
    cex = record.get("counterexample")
    if status == "UNSAFE" and cex and cex.get("quantization_induced"):
        mark += "*"
    seconds = pipeline_seconds(record.get("times_s", {}))
    return f"{mark} {seconds:.1f}s" if status in ("SAFE", "UNSAFE") else mark


@dataclass(frozen=True, slots=True)
class CountRow:
    """One suite x format: how many tasks ended how, and their times (summary.md and summary.html)."""

    suite: str
    label: str  # the format as the run named it ("16")
    number: str  # the resolved format ("<6,10>")
    counts: dict[str, int]  # status -> tasks
    total_s: float
    median_s: float

    @property
    def tasks(self) -> int:
        return sum(self.counts.values())


def count_rows(entries: Sequence[dict[str, Any]], formats: Sequence[str]) -> list[CountRow]:
    """The rows of the counts table, by suite then by the order of `formats`."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for entry in entries:
        groups[(entry["suite"], entry["format"])].append(entry)
    rows = []
    for (suite, label), group in sorted(
        groups.items(),
        key=lambda item: (item[0][0], formats.index(item[0][1]) if item[0][1] in formats else 99),
    ):
        counts = {status: sum(e["record"]["status"] == status for e in group) for status in STATUS_ORDER}
        times = [pipeline_seconds(e["record"].get("times_s", {})) for e in group]
        number = group[0]["record"].get("format", label)
        rows.append(CountRow(suite, label, number, counts, sum(times), statistics.median(times)))
    return rows


def outcome_rows(entries: Sequence[dict[str, Any]], formats: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(task, one cell per format: `S 1.2s`, `F*`, `TO`, ... or "") in suite order."""
    by_task: dict[str, dict[str, dict]] = defaultdict(dict)
    for entry in entries:
        by_task[entry["task"]][entry["format"]] = entry
    return [
        (task, [_cell(cells[f]) if f in cells else "" for f in formats]) for task, cells in by_task.items()
    ]


def _counts_table(entries: Sequence[dict[str, Any]], formats: Sequence[str]) -> list[str]:
    lines = [
        "| suite | format | tasks | SAFE | UNSAFE | UNKNOWN | ERROR | total time (s) | median time (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in count_rows(entries, formats):
        counts = row.counts
        lines.append(
            f"| {row.suite} | {row.label} ({row.number}) | {row.tasks} | {counts['SAFE']} | {counts['UNSAFE']} | "
            f"{counts['UNKNOWN']} | {counts['ERROR']} | {row.total_s:.1f} | {row.median_s:.2f} |"
        )
    return lines


# the stages of a task's record (times_s) that the time table sums, in pipeline order
TIME_STAGES = (
    ("quantize", "quantize"),
    ("invariants", "invariants"),
    ("codegen", "codegen (harness C)"),
    ("backend.host", "back end start-up: the engine host's imports (once per host)"),
    ("backend.startup", "back end start-up, all (process, imports, answer)"),
    ("backend.total", "back end's own work (the engine's reasoning)"),
    ("replay", "replay of counterexamples (gcc, simulator)"),
    ("pipeline", "tasks, whole (quantize .. replay)"),
)


def _time_table(entries: Sequence[dict[str, Any]]) -> list[str]:
    """Where the tasks' time went, summed over the tasks (wall seconds, and the back end's CPU)."""
    records = [e["record"] for e in entries]
    lines = ["| stage | seconds, summed over the tasks | share of the tasks' time |", "|---|---:|---:|"]
    whole = sum(pipeline_seconds(r.get("times_s", {})) for r in records)
    for key, name in TIME_STAGES:
        seconds = sum(
            pipeline_seconds(r.get("times_s", {}))
            if key == "pipeline"
            else r.get("times_s", {}).get(key, 0.0)
            for r in records
        )
        share = f"{100 * seconds / whole:.0f} %" if whole > 0 else "-"
        lines.append(f"| {name} | {seconds:.2f} | {share} |")
    cpu = sum((r.get("verdict") or {}).get("cpu_s", 0.0) for r in records)
    lines.append(f"| back end processes' CPU (user + system) | {cpu:.2f} | |")
    return lines


def _outcome_table(entries: Sequence[dict[str, Any]], formats: Sequence[str]) -> list[str]:
    lines = ["| property | " + " | ".join(formats) + " |", "|---|" + "---|" * len(formats)]
    for task, cells in outcome_rows(entries, formats):
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return lines


def write_summary(
    entries: Sequence[dict[str, Any]], formats: Sequence[str], out: Path, header: Sequence[str]
) -> Path:
    lines = [
        "# qverify suite results",
        "",
        *header,
        "",
        "## Counts per suite and format",
        "",
        *_counts_table(entries, formats),
        "",
        "## Where the time went",
        "",
        *_time_table(entries),
        "",
        "## Outcome per property and format",
        "",
        LEGEND,
        "",
        *_outcome_table(entries, formats),
        "",
    ]
    problems = [e for e in entries if e["record"]["status"] in ("UNKNOWN", "ERROR")]
    if problems:
        lines += ["## Unknown and errors", ""]
        lines += [
            f"- {e['task']} @ {e['format']}: {e['record']['status']}: {e['record'].get('reason', '')}"
            for e in problems
        ]
        lines.append("")
    examples = [e for e in entries if e.get("cex_png") or e.get("cex_json")]
    if examples:
        lines += ["## Counterexamples", ""]
        lines += [
            f"- {e['task']} @ {e['format']}: {e.get('cex_json', '')} {e.get('cex_png', '')}".rstrip()
            for e in examples
        ]
        lines.append("")
    path = out / "summary.md"
    path.write_text("\n".join(lines))
    return path


def configuration(entry: dict[str, Any]) -> str:
    record = entry["record"]
    return f"{entry['format']} {record.get('backend', '')}".strip()


def pyplot():
    """matplotlib's pyplot on the Agg back end (no display); imported when plots are drawn (the
    runner starts the import early, beside the tasks: `preload_plotting`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def preload_plotting() -> None:
    """Import matplotlib in a background thread (~0.7 s of CPU), while the tasks run: a suite's
    process mostly waits for its verifier then."""
    threading.Thread(target=pyplot, name="qverify-plot-import", daemon=True).start()


def _seconds_axis(axes) -> None:
    """A log-scale time axis labelled 0.1, 1, 10 (plain text: matplotlib's default 10^k labels go
    through its mathtext parser, which cost more than drawing the whole plot)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axes.set_yscale("log")
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.yaxis.set_minor_formatter(NullFormatter())


def _png(figure) -> bytes:
    """A matplotlib figure as PNG bytes, then freed (pyplot keeps every open figure alive). Fixed
    margins, room for the labels of these plots: `tight_layout` measured every tick label, drawing
    the figure once more (~45 % of a plot's ~0.5 s, two plots per suite run)."""
    buffer = io.BytesIO()
    width, height = figure.get_size_inches()
    figure.subplots_adjust(
        left=0.7 / width, right=1 - 0.15 / width, bottom=0.55 / height, top=1 - 0.35 / height
    )
    figure.savefig(buffer, format="png", dpi=120)
    pyplot().close(figure)
    return buffer.getvalue()


def cactus_png(entries: Sequence[dict[str, Any]]) -> bytes | None:
    """The cactus plot as PNG bytes (None when no task was decided): cactus.png and summary.html's."""
    if not any(e["record"]["status"] in ("SAFE", "UNSAFE") for e in entries):
        return None
    figure, axes = pyplot().subplots(figsize=(7, 4.5))
    cactus_axes(axes, configurations(entries))
    return _png(figure)


def write_plots(entries: Sequence[dict[str, Any]], out: Path, cactus: bytes | None = None) -> list[Path]:
    """time_per_task.png always; cactus.png (the `cactus_png` given) when more than one configuration
    is compared."""
    groups = configurations(entries)
    figure, axes = pyplot().subplots(figsize=(9, 4.5))
    for name, group in groups.items():
        times = [max(pipeline_seconds(e["record"].get("times_s", {})), 1e-3) for e in group]
        axes.plot(range(1, len(times) + 1), times, marker="o", linestyle="", markersize=4, label=name)
    axes.set(xlabel="task", ylabel="wall-clock time (s)", title="time per task and format")
    _seconds_axis(axes)
    axes.legend(fontsize="small")
    paths = [out / "time_per_task.png"]
    paths[0].write_bytes(_png(figure))
    if len(groups) > 1 and cactus is not None:
        paths.append(out / "cactus.png")
        paths[1].write_bytes(cactus)
    return paths


def configurations(entries: Sequence[dict[str, Any]]) -> dict[str, list[dict]]:
    """Entries grouped by configuration (format and back end): the lines of the plots."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for entry in entries:
        groups[configuration(entry)].append(entry)
    return groups


def cactus_axes(axes, groups: dict[str, list[dict]]) -> None:
    """Draw the cactus plot (per configuration, the sorted times of the decided tasks) on `axes`."""
    for name, group in groups.items():
        solved = sorted(
            pipeline_seconds(e["record"].get("times_s", {}))
            for e in group
            if e["record"]["status"] in ("SAFE", "UNSAFE")
        )
        axes.plot(range(1, len(solved) + 1), solved, marker=".", label=f"{name} ({len(solved)} solved)")
    axes.set(xlabel="instances solved", ylabel="time (s)", title="cactus plot")
    _seconds_axis(axes)
    axes.legend(fontsize="small")
