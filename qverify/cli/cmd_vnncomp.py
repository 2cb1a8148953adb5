"""`qverify vnncomp prepare|run v1 CATEGORY ONNX VNNLIB [RESULTS TIMEOUT]`: VNN-COMP's tool interface.

The scripts in vnncomp/ call these with the competition's arguments. `run` always writes the result
file (`error` when the instance cannot be read or verified as asked, with one `error:` line and
exit code 2); its exit code is otherwise 0, whatever the verdict: the competition reads the file,
not the code.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from qverify.backends import Status
from qverify.cli.options import capped_jobs, positive_int, read_suite_within_limits
from qverify.cli.report import warn
from qverify.errors import EXIT_USAGE, InputError, QverifyError
from qverify.vocabulary import VnncompSemantics, choices

if TYPE_CHECKING:  # the runner (the verifier) is imported by the actions, not by their parsers
    from qverify.vnncomp import Semantics


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("vnncomp", help="VNN-COMP tool interface (used by vnncomp/*.sh)")
    actions = parser.add_subparsers(dest="vnncomp_action", metavar="ACTION", required=True)
    prepare = actions.add_parser("prepare", help="check that an instance can be run")
    _instance_arguments(prepare)
    prepare.set_defaults(handler=run_prepare)
    run = actions.add_parser("run", help="verify an instance and write the result file")
    _instance_arguments(run)
    run.add_argument("results", metavar="RESULTS_FILE")
    # TIMEOUT and --semantics are checked by `run_run`, not by argparse: a bad value must still
    # leave RESULTS_FILE saying `error`, as the competition's interface promises
    run.add_argument("timeout", metavar="TIMEOUT", help="seconds, start-up included")
    run.add_argument(
        "--semantics",
        help="real (competition default): the real-valued network; quantized: the implementation in --format",
    )
    run.add_argument(
        "--format",
        default="16.16",
        metavar="K.L",
        help="with --semantics quantized: fixed point K.L, float or double (default 16.16)",
    )
    run.set_defaults(handler=run_run)
    _register_category(actions)


def _register_category(actions: argparse._SubParsersAction) -> None:
    category = actions.add_parser(
        "category",
        help="run a whole category (instances.csv or a project suite) and score it by VNN-COMP's rules",
        description="Run every row of INSTANCES.csv (onnx,vnnlib,timeout; paths relative to it) with its own "
        "timeout as run_instance.sh would, write the competition's results CSV and witnesses into --out, and "
        "score the category by VNN-COMP's rules beside other tools' results files (--compare).",
    )
    category.add_argument(
        "instances", metavar="INSTANCES", help="a VNN-COMP instances.csv, or a suite name or file"
    )
    category.add_argument(
        "--out", required=True, metavar="DIR", help="output folder (results.csv, witnesses, score)"
    )
    category.add_argument(
        "--category", metavar="NAME", help="the category's name (default: the CSV's folder)"
    )
    category.add_argument(
        "--timeout-cap",
        type=float,
        metavar="S",
        help="run each row for at most S seconds (its own timeout otherwise)",
    )
    category.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="another tool's results: its results.csv, its folder, or a folder of tools (VNN-COMP's results "
        "repository: <tool>/<category>/results.csv); repeatable",
    )
    category.add_argument(
        "--score-only",
        action="store_true",
        help="run nothing: score the --compare results (e.g. a past competition)",
    )
    category.add_argument("--penalty", type=int, default=150, metavar="P", help="points lost per incorrect answer "
                          "(default 150, VNN-COMP's rules since 2023; its 2022 script: 100)")  # fmt: skip
    category.add_argument(
        "--time-bonus",
        action="store_true",
        help="+2 to the fastest correct tool, +1 to the second (VNN-COMP 2022)",
    )
    category.add_argument(
        "--semantics",
        default=VnncompSemantics.REAL.value,
        choices=choices(VnncompSemantics),
        help="real (default): the real-valued network; quantized: the implementation in --format",
    )
    category.add_argument("--format", default="16.16", metavar="K.L", help="with --semantics quantized")
    category.add_argument(
        "--jobs", type=positive_int, default=1, metavar="N", help="rows in parallel (default 1)"
    )
    category.add_argument("--executor", choices=("local", "dask"), default="local")
    category.add_argument("--scheduler", metavar="ADDRESS", help="Dask scheduler (default: a LocalCluster)")
    category.add_argument("--resume", action="store_true", help="continue a run: skip the journaled rows")
    category.add_argument("--overwrite", action="store_true", help="discard a previous run in --out")
    category.add_argument("--no-progress", action="store_true")
    category.set_defaults(handler=run_category_command)


def _instance_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help="the interface version: v1")
    parser.add_argument("category", help="the benchmark category (recorded, not used)")
    parser.add_argument("onnx", metavar="ONNX")
    parser.add_argument("vnnlib", metavar="VNNLIB")


def run_prepare(args: argparse.Namespace) -> int:
    from qverify.vnncomp import check_version, prepare_instance

    check_version(args.version)
    print(f"prepared ({args.category}): {prepare_instance(args.onnx, args.vnnlib)}")
    return 0


def _semantics(text: str | None) -> Semantics:
    from qverify.vnncomp import Semantics

    if text is None:
        return Semantics.REAL
    try:
        return Semantics(text)
    except ValueError:
        known = ", ".join(s.value for s in Semantics)
        raise InputError(f"--semantics {text!r} (QVERIFY_SEMANTICS): expected one of {known}") from None


def _timeout(text: str) -> float:
    from qverify.tasks.model import timeout_problem

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if timeout_problem(value):
        raise InputError(f"TIMEOUT {text!r}: {timeout_problem(value)}")
    return value


def run_run(args: argparse.Namespace) -> int:
    from qverify.vnncomp import RunnerConfig, check_version, run_instance, write_result

    try:
        check_version(args.version)
        config = RunnerConfig(_semantics(args.semantics), args.format)
        config.implementation()  # a bad --format is an error before any work
        outcome = run_instance(args.onnx, args.vnnlib, _timeout(args.timeout), config)
    except QverifyError:
        write_result(args.results, "error")
        raise
    if outcome.record is not None:
        for message in outcome.record.warnings:
            warn(message)
    write_result(args.results, outcome.result, outcome.witness)
    print(f"{outcome.result} ({outcome.detail})")
    if outcome.record is not None and outcome.record.status is Status.ERROR:
        # what cannot be verified as asked (an int8 format for a float model, ...) is an error of
        # the instance, as the bad files above are: one line, exit 2, the file says error
        print(f"error: {outcome.record.reason}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _instances(args: argparse.Namespace, out: Path):
    """(category name, rows): an instances.csv, or a suite written as one into `out`."""
    from qverify.competition.category import read_instances, suite_instances

    path = Path(args.instances)
    if path.is_file() and path.suffix.lower() == ".csv":
        return args.category or path.resolve().parent.name, read_instances(path)
    suite = read_suite_within_limits(argparse.Namespace(suite=args.instances, timeout=None, memory=None))
    out.mkdir(parents=True, exist_ok=True)
    return args.category or suite.name, read_instances(suite_instances(suite, out))


def run_category_command(args: argparse.Namespace) -> int:
    from qverify.competition.category import run_category, with_engine_share
    from qverify.competition.compare import own_results, tool_results, witness_checker, write_report
    from qverify.competition.scoring import Rules, score_category
    from qverify.suites import make_executor
    from qverify.tasks.model import timeout_problem
    from qverify.vnncomp import RunnerConfig, Semantics

    if args.timeout_cap is not None and timeout_problem(args.timeout_cap):
        raise InputError(f"--timeout-cap {args.timeout_cap}: {timeout_problem(args.timeout_cap)}")
    if args.penalty < 0:
        raise InputError(f"--penalty {args.penalty}: give the points lost as a non-negative number")
    if args.score_only and not args.compare:
        raise InputError("--score-only scores the --compare results: name at least one")
    config = RunnerConfig(Semantics(args.semantics), args.format)
    config.implementation()  # a bad --format is an error before any work
    out = Path(args.out)
    name, instances = _instances(args, out)
    tools = [tool for spec in args.compare for tool in tool_results(spec, name)]
    if not args.score_only:
        if args.executor == "local" or args.scheduler is None:
            args.jobs = capped_jobs(args.jobs)
        executor = make_executor(args.executor, args.jobs, args.scheduler)
        run = run_category(
            instances, name, with_engine_share(config, args.jobs), executor, out, args.timeout_cap,
            args.resume, args.overwrite, not args.no_progress,
        )  # fmt: skip
        counts = ", ".join(f"{word} {count}" for word, count in sorted(run.counts.items()))
        print(f"{name}: {len(run.rows)} of {run.total} instances ({run.ran} run now): {counts}")
        print(f"results: {out / 'results.csv'}")
        tools.insert(0, own_results("qverify", run.rows, out))
    rules = Rules(incorrect=-args.penalty, time_bonus=args.time_bonus)
    score = score_category(name, tools, witness_checker(instances), rules)
    print("\n".join(write_report(score, rules, out, "qverify")))
    return 0
