"""`qverify sweep NET --property P --bits 6..32` (or `--suite NAME`): the minimum word length."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from qverify.cli.options import (
    add_implementation_options,
    add_property_options,
    add_verify_options,
    capped_jobs,
    implementation_from_args,
    positive_int,
    property_from_args,
    read_suite_within_limits,
    verify_options_from_args,
)
from qverify.errors import InputError
from qverify.vocabulary import FRAC_POLICIES

if TYPE_CHECKING:
    from qverify.suites.sweep import SweepResult

_RANGE = re.compile(r"^(\d+)\.\.(\d+)(?::(\d+))?$")  # example: "6..32", "8..32:4"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep", help="verify at every word length; report the minimum word length"
    )
    parser.add_argument("network", nargs="?", help="an .nnet or .onnx file (or use --suite)")
    parser.add_argument("--suite", help="sweep every task of a suite instead")
    parser.add_argument("--bits", default="6..32", help="word lengths FROM..TO[:STEP] (default 6..32)")
    parser.add_argument(
        "--frac-policy",
        choices=FRAC_POLICIES,
        default="fixed-int",
        help="fixed-int: k from range analysis, the rest fractional (default); "
        "fit: per width, the most fractional bits that cannot overflow",
    )
    parser.add_argument("--jobs", type=positive_int, default=2, metavar="N")
    add_property_options(parser)
    add_implementation_options(parser)
    add_verify_options(parser)
    parser.set_defaults(handler=run)


def parse_bits(text: str) -> range:
    match = _RANGE.match(text.strip())
    if not match:
        raise InputError(f"--bits '{text}': expected FROM..TO or FROM..TO:STEP, e.g. 6..32")
    low, high, step = int(match.group(1)), int(match.group(2)), int(match.group(3) or 1)
    if not 2 <= low <= high <= 32 or step < 1:
        raise InputError(f"--bits '{text}': widths must satisfy 2 <= FROM <= TO <= 32")
    return range(low, high + 1, step)


def _jobs(args: argparse.Namespace, widths: range):
    from qverify.io import load_network
    from qverify.suites.sweep import sweep_specs
    from qverify.verification import check_semantics, with_core_share

    implementation = implementation_from_args(args)
    options = with_core_share(verify_options_from_args(args), args.jobs)
    check_semantics(options, False, "a sweep over fixed-point word lengths")
    if args.suite:
        suite = read_suite_within_limits(args)
        return [
            (
                task.name,
                *sweep_specs(
                    task.name,
                    str(task.network_path),
                    load_network(task.network_path),
                    task.property,
                    widths,
                    implementation,
                    options,
                    args.frac_policy,
                ),
            )
            for task in suite.tasks
        ]
    if args.network is None:
        raise InputError("give a network with --property (or --suite NAME)")
    net = load_network(args.network)
    prop = property_from_args(args, net, cases=True)
    return [
        (
            prop.name,
            *sweep_specs(
                prop.name, args.network, net, prop, widths, implementation, options, args.frac_policy
            ),
        )
    ]


def render(result: SweepResult) -> list[str]:
    lines = [
        f"{result.task} (integer bits from range analysis: {result.int_bits})",
        "  width  format    outcome   time",
    ]
    for point in result.points:
        detail = f"  {point.reason}" if point.status in ("UNKNOWN", "ERROR") else ""
        lines.append(
            f"  {point.word_bits:5d}  {point.number_format:8s}  {point.status:8s} {point.time_s:6.2f}s{detail}"
        )
    minimum = result.minimum_word_length
    if minimum is None:
        lines.append("  minimum word length: undetermined (the widest width is not decided)")
    else:
        lines.append(
            f"  minimum word length: {minimum} bits (every width >= {minimum} agrees with the widest: "
            f"{result.points[-1].status})"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    args.jobs = capped_jobs(args.jobs)
    widths = parse_bits(args.bits)
    jobs = [(name, int_bits, specs) for name, int_bits, specs in _jobs(args, widths)]
    for name, _, specs in jobs:
        if not specs:
            raise InputError(f"{name}: no width in {args.bits} exceeds the integer bits the network needs")
    from qverify.suites import make_executor
    from qverify.suites.sweep import run_sweep

    results = run_sweep(jobs, make_executor("local", args.jobs))
    for result in results:
        print("\n".join(render(result)))
    return 0
