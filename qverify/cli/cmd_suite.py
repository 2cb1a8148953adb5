"""`qverify suite run NAME|FILE [...]` and `qverify suite list`: whole benchmark suites."""

from __future__ import annotations

import argparse
from pathlib import Path

from qverify.cli.options import (
    add_verify_options,
    capped_jobs,
    positive_int,
    read_suite_within_limits,
    verify_options_from_args,
)
from qverify.errors import EXIT_CODES_HELP


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("suite", help="run benchmark suites (parallel, journaled, resumable)")
    commands = parser.add_subparsers(dest="suite_command", metavar="COMMAND", required=True)
    run = commands.add_parser("run", help="run a suite", epilog=EXIT_CODES_HELP)
    run.add_argument(
        "suite", help="a suite name under benchmarks/ (iris, vocalic, digits, acasxu, tiny) or a suite.toml"
    )
    run.add_argument(
        "--format",
        dest="formats",
        action="append",
        metavar="F",
        help="word length W (integer bits from range analysis), K.L, float or double; repeatable "
        "(default: the suite's formats)",
    )
    run.add_argument(
        "--jobs", type=positive_int, default=2, metavar="N", help="tasks in parallel (default 2)"
    )
    run.add_argument(
        "--executor",
        choices=("local", "dask"),
        default="local",
        help="local processes (default) or a dask.distributed cluster",
    )
    run.add_argument(
        "--scheduler", metavar="ADDRESS", help="Dask scheduler (default: a LocalCluster of --jobs workers)"
    )
    run.add_argument("--out", metavar="DIR", help="output folder (default results/<suite>)")
    run.add_argument("--resume", action="store_true", help="continue a killed run: skip journaled tasks")
    run.add_argument("--overwrite", action="store_true", help="discard a previous run in --out")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_verify_options(run)
    run.set_defaults(handler=run_command, timeout=None)
    listing = commands.add_parser("list", help="list the shipped suites")
    listing.set_defaults(handler=list_command)


def run_command(args: argparse.Namespace) -> int:
    from qverify.quant import FloatFormat, parse_number_format, word_length
    from qverify.suites import make_executor, run_suite
    from qverify.verification import check_semantics, with_core_share

    if args.executor == "local" or args.scheduler is None:  # processes on this machine
        args.jobs = capped_jobs(args.jobs)
    suite = read_suite_within_limits(args)
    formats = (
        tuple(suite.check_format(f, "--format") for f in args.formats) if args.formats else suite.formats
    )
    options = with_core_share(
        verify_options_from_args(_with_default_timeout(args, suite.timeout_s)), args.jobs
    )
    for label in formats:  # before any task runs, not as one ERROR record per task
        suite.check_usable(label)
        number = suite.number_label(label)
        is_float = word_length(number) is None and isinstance(parse_number_format(number), FloatFormat)
        check_semantics(options, is_float, f"format {label}")
    out = Path(args.out) if args.out else Path("results") / suite.name
    executor = make_executor(args.executor, args.jobs, args.scheduler)
    result = run_suite(
        suite,
        formats,
        options,
        executor,
        out,
        timeout_s=args.timeout,
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        formats_given=bool(args.formats),
    )
    counts = result.counts
    print(
        f"{suite.name}: {len(result.entries)} tasks ({result.ran} run now): SAFE {counts['SAFE']}, "
        f"UNSAFE {counts['UNSAFE']}, UNKNOWN {counts['UNKNOWN']}, ERROR {counts['ERROR']}"
    )
    print(f"summary: {result.summary} (and {result.summary.with_suffix('.html').name} beside it)")
    return 0


def _with_default_timeout(args: argparse.Namespace, suite_timeout: float) -> argparse.Namespace:
    """verify_options_from_args wants a timeout; per-task timeouts from the suite apply otherwise."""
    copy = argparse.Namespace(**vars(args))
    copy.timeout = args.timeout if args.timeout is not None else suite_timeout
    return copy


def list_command(args: argparse.Namespace) -> int:
    from qverify.suites.suite_file import BENCHMARKS, list_suite

    suites = [list_suite(path) for path in sorted(BENCHMARKS.glob("*/suite.toml"))]
    width = max((len(suite.name) for suite in suites), default=0)
    for suite in suites:
        print(
            f"{suite.name:{width}s} {suite.tasks:4d} tasks  formats {', '.join(suite.formats):20s} {suite.description}"
        )
    return 0
