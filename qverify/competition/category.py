"""Run a VNN-COMP category as the competition does: every row of its `instances.csv` with its own
timeout, the results CSV and the sat witnesses written as the competition writes them.

A row is `onnx,vnnlib,timeout` (paths relative to the CSV; a file named `x.onnx` that is only
present as `x.onnx.gz` is read gzipped, as the competition's scripts unpack it). Each row is one
task for the suite runner's executors (`qverify.suites.executors`: this process, local worker
processes or a Dask cluster) and runs `prepare_instance` then `run_instance` (`qverify.vnncomp`,
what `vnncomp/*.sh` call), so its answer is the one `run_instance.sh` would write. Each finished
row is journaled (`DIR/journal.jsonl`, one whole line per row: `--resume` skips the rows it holds);
the output folder is locked for the run. A project suite runs as a category too: its tasks become
rows, each property written as a VNN-LIB file in the units the network's graph uses
(`suite_instances`).
"""

from __future__ import annotations

import csv
import math
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from qverify.competition.results import ResultRow, counterexample_name, write_results
from qverify.errors import InputError, InterruptedRunError, QverifyError
from qverify.input_limits import check_file
from qverify.io import load_network
from qverify.io.files import format_suffix
from qverify.properties import format_vnnlib, to_raw
from qverify.suites.executors import Executor
from qverify.suites.journal import FolderLock, Journal
from qverify.suites.suite_file import Suite
from qverify.tasks.model import timeout_problem
from qverify.vnncomp import RunnerConfig, format_result, prepare_instance, run_instance

RESULTS_NAME = "results.csv"


@dataclass(frozen=True, slots=True)
class Instance:
    """One row of a category: the files as the CSV names them and as found, and the timeout."""

    row: int  # from 1, in the CSV's order
    onnx_text: str
    vnnlib_text: str
    onnx: Path
    vnnlib: Path
    timeout_s: float


def _found(base: Path, text: str, where: str, what: str) -> Path:
    path = (base / text).resolve()
    if path.is_file():
        return path
    packed = path.with_name(path.name + ".gz")
    if packed.is_file():
        return packed
    raise InputError(f"{where}: {what} {text}: no such file (nor {packed.name})")


def read_instances(path: str | Path) -> list[Instance]:
    """The rows of a VNN-COMP `instances.csv`.

    :raises InputError: the file cannot be read, a row is not `onnx,vnnlib,timeout`, a file is
        missing, or a timeout is not a positive number of seconds.
    """
    csv_path = Path(path)
    check_file(csv_path)
    try:
        with csv_path.open(newline="", encoding="utf-8") as handle:
            lines = list(csv.reader(handle))
    except FileNotFoundError:
        raise InputError(f"{csv_path}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise InputError(f"{csv_path}: cannot read: {error}") from None
    instances = []
    for number, fields in enumerate(lines, start=1):
        if not fields or fields[0].strip().startswith("#") or not "".join(fields).strip():
            continue
        where = f"{csv_path}:{number}"
        if len(fields) != 3:
            raise InputError(f"{where}: expected onnx,vnnlib,timeout, got {len(fields)} fields")
        onnx_text, vnnlib_text, timeout_text = (field.strip() for field in fields)
        try:
            timeout_s = float(timeout_text)
        except ValueError:
            timeout_s = math.nan
        if timeout_problem(timeout_s):
            raise InputError(f"{where}: timeout {timeout_text!r}: {timeout_problem(timeout_s)}")
        onnx = _found(csv_path.parent, onnx_text, where, "network")
        vnnlib = _found(csv_path.parent, vnnlib_text, where, "property")
        instances.append(Instance(number, onnx_text, vnnlib_text, onnx, vnnlib, timeout_s))
    if not instances:
        raise InputError(f"{csv_path}: no instances (rows onnx,vnnlib,timeout)")
    return instances


def suite_instances(suite: Suite, folder: Path) -> Path:
    """Write the suite as a category into `folder`: `instances.csv` (network paths as found, the
    task's timeout) and `vnnlib/<task>.vnnlib`, each property in the units of its network's graph
    (raw where an ONNX graph normalises, as `run_instance` reads VNN-LIB). Returns the CSV's path."""
    properties = folder / "vnnlib"
    properties.mkdir(parents=True, exist_ok=True)
    rows = []
    for task in suite.tasks:
        net = load_network(task.network_path)
        raw = format_suffix(task.network_path) == ".onnx" and (
            net.input_norm is not None or net.output_norm is not None
        )
        prop = to_raw(task.property, net) if raw else task.property
        file = properties / f"{task.name}.vnnlib"
        file.write_text(format_vnnlib(prop, n_outputs=net.n_outputs), encoding="utf-8")
        rows.append([str(task.network_path), f"vnnlib/{file.name}", f"{task.timeout_s:g}"])
    path = folder / "instances.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)
    return path


@dataclass(frozen=True, slots=True)
class RowTask:
    """What a worker runs: one instance, the category's name, the configuration, its timeout."""

    instance: Instance
    category: str
    config: RunnerConfig
    timeout_s: float

    @property
    def key(self) -> str:
        config = self.config
        return (
            f"{self.instance.row}|{self.instance.onnx_text}|{self.instance.vnnlib_text}|{self.timeout_s:g}|"
            f"{config.semantics.value}|{config.number_format}"
        )


@dataclass(frozen=True, slots=True)
class RowOutcome:
    row: ResultRow
    detail: str  # qverify's verdict line, or the error
    witness: str  # the result file's text after its first line ("" unless sat)


def run_row(task: RowTask) -> RowOutcome:
    """`prepare_instance.sh` then `run_instance.sh` on one row (in a worker); never raises for a
    problem of the instance (the row says `error`, the detail why)."""
    instance = task.instance

    def row(prepare_s: float, result: str, time_s: float) -> ResultRow:
        return ResultRow(task.category, instance.onnx_text, instance.vnnlib_text, prepare_s, result, time_s)

    started = time.perf_counter()
    try:
        prepare_instance(instance.onnx, instance.vnnlib)
    except QverifyError as error:
        return RowOutcome(row(time.perf_counter() - started, "error", 0.0), f"error: {error}", "")
    prepared = time.perf_counter()
    try:
        outcome = run_instance(instance.onnx, instance.vnnlib, task.timeout_s, task.config)
    except QverifyError as error:
        return RowOutcome(
            row(prepared - started, "error", time.perf_counter() - prepared), f"error: {error}", ""
        )
    witness = (
        format_result(outcome.result, outcome.witness).partition("\n")[2] if outcome.result == "sat" else ""
    )
    return RowOutcome(
        row(prepared - started, outcome.result, time.perf_counter() - prepared), outcome.detail, witness
    )


@dataclass(frozen=True, slots=True)
class CategoryRun:
    out: Path
    rows: tuple[ResultRow, ...]  # in the CSV's order, the rows done
    ran: int  # rows run now (the others came from the journal)
    total: int

    @property
    def counts(self) -> Counter:
        return Counter(row.result for row in self.rows)


def _entry(task: RowTask, outcome: RowOutcome) -> dict:
    row = outcome.row
    record = {"status": row.result, "prepare": row.prepare_s, "time": row.time_s, "detail": outcome.detail}
    return {"key": task.key, "row": task.instance.row, "record": record, "witness": outcome.witness}


def _row_of(task: RowTask, entry: dict) -> ResultRow:
    record = entry["record"]
    instance = task.instance
    return ResultRow(
        task.category,
        instance.onnx_text,
        instance.vnnlib_text,
        record["prepare"],
        record["status"],
        record["time"],
    )


def run_category(
    instances: list[Instance],
    category: str,
    config: RunnerConfig,
    executor: Executor,
    out: Path,
    timeout_cap_s: float | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> CategoryRun:
    """Run (or resume) every row into `out` (module docstring): `results.csv`, the witnesses
    `<network>_<property>.counterexample`, `journal.jsonl`. `timeout_cap_s` caps every row's
    timeout (the rows' own otherwise)."""
    try:
        with FolderLock(out):
            return _run_locked(
                instances, category, config, executor, out, timeout_cap_s, resume, overwrite, progress
            )
    finally:
        executor.close()


def _tasks(instances, category, config, timeout_cap_s) -> list[RowTask]:
    return [
        RowTask(instance, category, config, min(instance.timeout_s, timeout_cap_s or math.inf))
        for instance in instances
    ]


def _run_locked(instances, category, config, executor, out, timeout_cap_s, resume, overwrite, progress):
    journal = Journal(out / "journal.jsonl")
    if journal.path.exists() and not (resume or overwrite):
        raise InputError(
            f"{out} already holds a run: add --resume to continue it or --overwrite to start over"
        )
    if overwrite:
        journal.reset()
    done = {entry["key"]: entry for entry in journal.resume()} if resume else {}
    tasks = _tasks(instances, category, config, timeout_cap_s)
    todo = [task for task in tasks if task.key not in done]
    counts = Counter(entry["record"]["status"] for entry in done.values())
    bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), desc=category, unit="instance",
               disable=not progress, file=sys.stderr, dynamic_ncols=True)  # fmt: skip
    try:
        try:
            for task, outcome in _outcomes(executor, todo):
                entry = _entry(task, outcome)
                if outcome.witness:
                    (out / counterexample_name(outcome.row)).write_text(outcome.witness, encoding="utf-8")
                journal.append(entry)
                done[task.key] = entry
                counts[outcome.row.result] += 1
                bar.set_postfix_str(" ".join(f"{word}={count}" for word, count in sorted(counts.items())))
                bar.update()
        finally:
            bar.close()
            executor.close()
    except KeyboardInterrupt:
        kept = journal.count([task.key for task in tasks])
        raise InterruptedRunError(
            f"interrupted: {kept} of {len(tasks)} instances are journaled in {journal.path}; run the same "
            "command with --resume to finish the others"
        ) from None
    rows = tuple(_row_of(task, done[task.key]) for task in tasks if task.key in done)
    write_results(list(rows), out / RESULTS_NAME)
    return CategoryRun(out, rows, len(todo), len(tasks))


def _outcomes(executor: Executor, todo: list[RowTask]) -> Iterator[tuple[RowTask, RowOutcome]]:
    yield from executor.map_unordered(run_row, todo)


def with_engine_share(config: RunnerConfig, rows_in_parallel: int) -> RunnerConfig:
    """Each of the rows run at once gets its share of the usable cores for the engine's search."""
    from qverify.backends.internal import core_share

    return replace(config, engine_jobs=config.engine_jobs or core_share(rows_in_parallel))
