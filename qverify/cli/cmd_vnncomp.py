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

from qverify.backends import Status
from qverify.cli.report import warn
from qverify.errors import EXIT_USAGE, InputError, QverifyError
from qverify.tasks.model import timeout_problem
from qverify.vnncomp import (
    RunnerConfig,
    Semantics,
    check_version,
    prepare_instance,
    run_instance,
    write_result,
)


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
        default=Semantics.REAL.value,
        help="real (competition default): the real-valued network; quantized: the implementation in --format",
    )
    run.add_argument(
        "--format",
        default="16.16",
        metavar="K.L",
        help="with --semantics quantized: fixed point K.L, float or double (default 16.16)",
    )
    run.set_defaults(handler=run_run)


def _instance_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("version", help="the interface version: v1")
    parser.add_argument("category", help="the benchmark category (recorded, not used)")
    parser.add_argument("onnx", metavar="ONNX")
    parser.add_argument("vnnlib", metavar="VNNLIB")


def run_prepare(args: argparse.Namespace) -> int:
    check_version(args.version)
    print(f"prepared ({args.category}): {prepare_instance(args.onnx, args.vnnlib)}")
    return 0


def _semantics(text: str) -> Semantics:
    try:
        return Semantics(text)
    except ValueError:
        known = ", ".join(s.value for s in Semantics)
        raise InputError(f"--semantics {text!r} (QVERIFY_SEMANTICS): expected one of {known}") from None


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if timeout_problem(value):
        raise InputError(f"TIMEOUT {text!r}: {timeout_problem(value)}")
    return value


def run_run(args: argparse.Namespace) -> int:
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
