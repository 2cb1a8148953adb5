#!/usr/bin/env python3
"""Where does Frama-C EVA add anything over the built-in analysis? (a benchmark, not a test)

Usage: python benchmarks/bench_framac_gain.py [--suites iris vocalic digits] [--formats 8 16 32 float]
       [--overflow saturate wrap detect] [--tasks 2] [--jobs 2] [--acas]

For every case (suite task x format x overflow mode, optionally ACAS Xu 1_1 phi1-4) it computes the
built-in bounds (symbolic level, what `--intervals builtin` injects) and Frama-C EVA's, and counts
the neuron bound ends (pre/post, lo/hi) where EVA's is strictly tighter than the built-in one, and
where it is looser. `--intervals auto` runs Frama-C only where this count can be non-zero
(docs/invariants.md, "The auto rule"); this script is the measurement behind that rule.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from qverify.errors import QverifyError
from qverify.invariants import FramacOptions, builtin_bounds, framac_bounds, input_boxes
from qverify.io import load_network
from qverify.properties import read_vnnlib
from qverify.quant import FixedFormat, ImplementationOptions, Overflow, quantize_network
from qverify.suites.suite_file import read_suite
from qverify.suites.tasks import TaskSpec, resolve_implementation
from qverify.verification import VerifyOptions

ROOT = Path(__file__).resolve().parents[1]
ACAS = ROOT / "benchmarks" / "acasxu"


@dataclass(frozen=True, slots=True)
class Case:
    label: str  # suite/task@format/overflow
    qnet: object
    boxes: list


@dataclass(frozen=True, slots=True)
class Gain:
    tighter: int  # bound ends where Frama-C is strictly tighter than the built-in analysis
    looser: int
    ends: int  # bound ends compared
    framac_s: float
    builtin_s: float
    note: str = ""


def _overflowed(implementation: ImplementationOptions, overflow: str) -> ImplementationOptions:
    number = implementation.number
    if isinstance(number, FixedFormat):
        number = FixedFormat(number.int_bits, number.frac_bits, number.rounding, Overflow(overflow))
    return replace(implementation, number=number)


def suite_cases(suites: list[str], formats: list[str], overflows: list[str], per_suite: int) -> list[Case]:
    cases = []
    for name in suites:
        suite = read_suite(name)
        picked = suite.tasks[:: max(1, len(suite.tasks) // per_suite)][:per_suite]
        for task in picked:
            for label in formats:
                spec = TaskSpec(
                    suite.name, task.name, label, str(task.network_path), task.property,
                    suite.implementation, VerifyOptions(), None,
                )  # fmt: skip
                net = load_network(task.network_path)
                implementation, _ = resolve_implementation(spec, net)
                modes = overflows if isinstance(implementation.number, FixedFormat) else ["-"]
                for mode in modes:
                    chosen = implementation if mode == "-" else _overflowed(implementation, mode)
                    qnet = quantize_network(net, chosen)
                    cases.append(
                        Case(f"{name}/{task.name}@{label}/{mode}", qnet, input_boxes(qnet, task.property))
                    )
    return cases


def acas_cases(overflows: list[str]) -> list[Case]:
    net = load_network(ACAS / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet")
    cases = []
    for phi in (1, 2, 3, 4):
        prop = read_vnnlib(ACAS / "vnnlib" / f"prop_{phi}.vnnlib")
        for mode in overflows:
            number = FixedFormat(16, 16, overflow=Overflow(mode))
            qnet = quantize_network(net, ImplementationOptions(number))
            cases.append(Case(f"acasxu/1_1-phi{phi}@16.16/{mode}", qnet, input_boxes(qnet, prop)))
    return cases


def compare(case: Case, options: FramacOptions) -> Gain:
    start = time.perf_counter()
    builtin = builtin_bounds(case.qnet, case.boxes, True)
    builtin_s = time.perf_counter() - start
    if builtin is None:
        return Gain(0, 0, 0, float("nan"), builtin_s, "no representable input in the region")
    try:
        framac = framac_bounds(case.qnet, case.boxes, options)
    except QverifyError as error:
        return Gain(0, 0, 0, float("nan"), builtin_s, str(error).splitlines()[0])
    tighter = looser = ends = 0
    for mine, theirs in zip(builtin, framac.bounds):
        for lo in ("pre_lo", "post_lo"):
            a, b = np.asarray(getattr(mine, lo), float), np.asarray(getattr(theirs, lo), float)
            tighter, looser, ends = tighter + int(np.sum(b > a)), looser + int(np.sum(b < a)), ends + a.size
        for hi in ("pre_hi", "post_hi"):
            a, b = np.asarray(getattr(mine, hi), float), np.asarray(getattr(theirs, hi), float)
            tighter, looser, ends = tighter + int(np.sum(b < a)), looser + int(np.sum(b > a)), ends + a.size
    return Gain(tighter, looser, ends, framac.time_s, builtin_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="*", default=["iris", "vocalic", "digits"])
    parser.add_argument("--formats", nargs="+", default=["8", "16", "32", "float"])
    parser.add_argument("--overflow", nargs="+", default=["saturate", "wrap", "detect"])
    parser.add_argument("--tasks", type=int, default=2, help="tasks per suite (spread over the suite)")
    parser.add_argument(
        "--acas", action="store_true", help="also ACAS Xu 1_1 phi1-4 at 16.16 (slow: ~1 min each)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="Frama-C runs in parallel")
    args = parser.parse_args()
    if shutil.which("frama-c") is None:
        print("frama-c not found: nothing to compare", file=sys.stderr)
        return 2
    cases = suite_cases(args.suites, args.formats, args.overflow, args.tasks)
    cases += acas_cases(args.overflow) if args.acas else []
    options = FramacOptions(timeout_s=1800)
    print(f"{'case':48s} {'tighter':>8s} {'looser':>8s} {'of':>6s} {'framac s':>9s} {'builtin s':>9s}")
    totals = [0, 0, 0]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for case, gain in zip(cases, pool.map(lambda c: compare(c, options), cases)):
            totals = [totals[0] + gain.tighter, totals[1] + gain.looser, totals[2] + gain.ends]
            print(
                f"{case.label:48s} {gain.tighter:8d} {gain.looser:8d} {gain.ends:6d} "
                f"{gain.framac_s:9.2f} {gain.builtin_s:9.3f}" + (f"  {gain.note}" if gain.note else ""),
                flush=True,
            )
    print(f"{'total (' + str(len(cases)) + ' cases)':48s} {totals[0]:8d} {totals[1]:8d} {totals[2]:6d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
