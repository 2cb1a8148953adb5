"""Run a suite: expand tasks x formats, skip what the journal holds, run the rest in parallel,
journal each result as it arrives, write counterexamples, then the reports (summary.md, summary.html,
results.csv/jsonl, plots)."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from qverify import __version__
from qverify.backends import engine_host
from qverify.counterexample import AdversarialExample
from qverify.counterexample.picture import write_example_png
from qverify.errors import InputError, InterruptedRunError, QverifyError
from qverify.suites.executors import Executor, InProcessExecutor
from qverify.suites.html_report import write_summary_html
from qverify.suites.journal import FolderLock, Journal
from qverify.suites.report import cactus_png, preload_plotting, write_plots, write_results, write_summary
from qverify.suites.suite_file import Suite
from qverify.suites.tasks import TaskSpec, expand, run_task
from qverify.verification import VerifyOptions

PROGRESS_STATUSES = ("SAFE", "UNSAFE", "UNKNOWN", "ERROR")  # the progress bar counts the verdicts by name


@dataclass(frozen=True, slots=True)
class SuiteRunResult:
    out: Path
    summary: Path
    entries: tuple[dict[str, Any], ...]
    ran: int  # tasks run now (the others came from the journal)

    @property
    def counts(self) -> Counter:
        return Counter(entry["record"]["status"] for entry in self.entries)


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def _write_counterexample(entry: dict[str, Any], out: Path) -> None:
    """cex/<task>@<format>.json (the record) and .png when the input is an image."""
    record = entry["record"]
    if not record.get("counterexample"):
        return
    folder, stem = out / "cex", _safe_name(f"{entry['task']}@{entry['format']}")
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / f"{stem}.json"  # not with_suffix: task names such as img00-eps0.5 hold dots
    json_path.write_text(json.dumps(record, indent=2) + "\n")
    entry["cex_json"] = str(json_path.relative_to(out))
    example = AdversarialExample.from_json(record["counterexample"])
    if example.image_shape is not None:
        try:
            png = write_example_png(
                example, folder / f"{stem}.png", title=f"{entry['task']} @ {entry['format']}"
            )
            entry["cex_png"] = str(png.relative_to(out))
        except QverifyError as error:
            record.setdefault("warnings", []).append(f"no picture: {error}")


def _entry(spec: TaskSpec, record: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": spec.key,
        "suite": spec.suite,
        "task": spec.task,
        "format": spec.format_label,
        "record": record,
    }


def _progress_text(counts: Counter) -> str:
    return " ".join(f"{status}={counts.get(status, 0)}" for status in PROGRESS_STATUSES)


def run_suite(
    suite: Suite,
    formats: tuple[str, ...],
    options: VerifyOptions,
    executor: Executor,
    out: Path,
    timeout_s: float | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    formats_given: bool = False,
) -> SuiteRunResult:
    """Run (or resume) the suite into `out`; returns the entries in suite order. `formats_given`:
    the formats came from the command line (recorded in each record's origins).

    The output folder is locked for the whole run (a second run into it is refused, naming this
    run's pid) and checked writable before any task starts.
    """
    try:
        with FolderLock(out):
            return _run_locked(
                suite, formats, options, executor, out, timeout_s, resume, overwrite, progress, formats_given
            )
    finally:
        executor.close()  # also when the folder is refused (a Dask cluster must not outlive us)


def _run_locked(
    suite: Suite,
    formats: tuple[str, ...],
    options: VerifyOptions,
    executor: Executor,
    out: Path,
    timeout_s: float | None,
    resume: bool,
    overwrite: bool,
    progress: bool,
    formats_given: bool,
) -> SuiteRunResult:
    journal = Journal(out / "journal.jsonl")
    if journal.path.exists() and not (resume or overwrite):
        raise InputError(
            f"{out} already holds a run: add --resume to continue it or --overwrite to start over"
        )
    if overwrite:
        journal.reset()
    done: dict[str, dict[str, Any]] = {}
    if resume:
        done = {entry["key"]: entry for entry in journal.resume()}
    specs = expand(suite, formats, options, timeout_s, formats_given)
    todo = [spec for spec in specs if spec.key not in done]
    counts = Counter(entry["record"]["status"] for key, entry in done.items())
    bar = tqdm(
        total=len(specs),
        initial=len(specs) - len(todo),
        desc=suite.name,
        unit="task",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    bar.set_postfix_str(_progress_text(counts))
    try:  # (an interruption from here on is reported with the journal's count)
        try:
            if todo:
                preload_plotting()
                if options.backend == "internal" and executor.name == InProcessExecutor.name:
                    engine_host.prewarm()  # the engine's imports beside this process's first task's work
            for spec, outcome in executor.map_unordered(run_task, todo):
                record = outcome.to_json()
                entry = _entry(spec, record)
                _write_counterexample(entry, out)
                journal.append(entry)
                done[spec.key] = entry
                counts[record["status"]] += 1
                bar.set_postfix_str(_progress_text(counts))
                bar.update()
        finally:
            bar.close()
            executor.close()
        entries = tuple(done[spec.key] for spec in specs if spec.key in done)
        write_results(entries, out)
        started = time.strftime("%Y-%m-%d %H:%M")
        header = [
            f"suite `{suite.name}` ({suite.description}) — qverify {__version__}, {started}",
            f"options: `{options.key()}`, executor {executor.name}",
        ]
        summary = write_summary(entries, formats, out, header)
        cactus = cactus_png(entries)
        write_summary_html(entries, formats, out, header, cactus)
        write_plots(entries, out, cactus)
    except KeyboardInterrupt:
        kept = journal.count([spec.key for spec in specs])  # the file: `done` may miss the last record
        raise InterruptedRunError(
            f"interrupted: {kept} of {len(specs)} tasks are journaled in {journal.path}; "
            + (
                "run the same command with --resume to finish the others"
                if kept < len(specs)
                else "run the same command with --resume to write the reports"
            )
        ) from None
    return SuiteRunResult(out, summary, entries, len(todo))
