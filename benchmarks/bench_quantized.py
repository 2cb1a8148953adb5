#!/usr/bin/env python3
"""Benchmark verification of deployed quantized networks (a benchmark, not a test).

Suites (shipped; see docs/quantization.md)
  digits-cnn   the 8x8 digits CNN, L-inf robustness of 20 test images at 0.5 and 1 pixel level,
               at float, half, <8,8>, int8 per tensor and int8 per channel; target: >= 90 %
               decided within 60 s each.
  acasxu-int8  the 45 ACAS Xu networks quantized to int8 by onnxruntime, properties 1-4 (116 s).

Runs each suite with qverify's suite runner (journaled under --out, resumable with --resume), with
the default back end and the built-in invariants, then prints per suite and format: tasks, SAFE,
UNSAFE, UNKNOWN, ERROR, decided within the per-task limit, total / median / largest time of the
decided tasks, and the median time per engine stage (front end, attack, bounds, split, MILP).

Usage:
  python benchmarks/bench_quantized.py [digits-cnn] [acasxu-int8] [--formats float,int8] [--jobs 2]
                                       [--timeout 60] [--out results/bench-quantized] [--resume]
                                       [--sample N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qverify.backends import Limits
from qverify.invariants import IntervalMethod
from qverify.stage_times import pipeline_seconds
from qverify.suites import make_executor, read_suite, run_suite
from qverify.verification import VerifyOptions

SUITES = ("digits-cnn", "acasxu-int8")
STAGES = (
    "lift",
    "parse",
    "symex",
    "simplify",
    "attack",
    "bounds",
    "split",
    "milp",
    "smt",
    "netlevel.attack",
    "netlevel.bounds",
    "netlevel.enumerate",
)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}" if values else "-"


def table(entries: list[dict], formats: tuple[str, ...], limit_s: float | None) -> list[str]:
    lines = [
        "| format | tasks | SAFE | UNSAFE | UNKNOWN | ERROR | decided | decided % | total s | median s | max s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label in formats:
        rows = [entry["record"] for entry in entries if entry["format"] == label]
        counts = {
            status: sum(r["status"] == status for r in rows)
            for status in ("SAFE", "UNSAFE", "UNKNOWN", "ERROR")
        }
        decided = [r for r in rows if r["status"] in ("SAFE", "UNSAFE")]
        if limit_s is not None:
            decided = [r for r in decided if pipeline_seconds(r["times_s"]) <= limit_s]
        times = [pipeline_seconds(r["times_s"]) for r in decided]
        share = 100.0 * len(decided) / len(rows) if rows else 0.0
        lines.append(
            f"| {label} | {len(rows)} | {counts['SAFE']} | {counts['UNSAFE']} | {counts['UNKNOWN']} | "
            f"{counts['ERROR']} | {len(decided)} | {share:.1f} | {sum(times):.1f} | {_median(times)} | "
            f"{max(times, default=0.0):.1f} |"
        )
    return lines


def stage_table(entries: list[dict], formats: tuple[str, ...]) -> list[str]:
    lines = ["| format | " + " | ".join(STAGES) + " |", "|---|" + "---:|" * len(STAGES)]
    for label in formats:
        rows = [entry["record"] for entry in entries if entry["format"] == label]
        cells = [
            _median([r["times_s"][f"backend.{stage}"] for r in rows if f"backend.{stage}" in r["times_s"]])
            for stage in STAGES
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suites", nargs="*", default=list(SUITES), choices=SUITES)
    parser.add_argument("--formats", help="comma-separated labels (default: the suite's own)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, help="seconds per task (default: the suite's)")
    parser.add_argument("--out", default="results/bench-quantized")
    parser.add_argument("--resume", action="store_true", help="continue a previous run in --out")
    parser.add_argument(
        "--sample",
        type=int,
        help="run N tasks spread evenly over the suite (every len/N-th: on acasxu-int8, 20 tasks "
        "cycle through properties 1-4 over 20 networks)",
    )
    args = parser.parse_args(argv)
    for name in args.suites:
        suite = read_suite(name)
        if args.sample and args.sample < len(suite.tasks):
            step = len(suite.tasks) / args.sample
            chosen = tuple(suite.tasks[int(i * step)] for i in range(args.sample))
            suite = dataclasses.replace(suite, tasks=chosen)
        formats = tuple(args.formats.split(",")) if args.formats else suite.formats
        formats = tuple(suite.check_format(label, "--formats") for label in formats)
        timeout = args.timeout or suite.timeout_s
        options = VerifyOptions(limits=Limits(timeout_s=timeout), intervals=IntervalMethod.BUILTIN)
        out = Path(args.out) / name
        result = run_suite(
            suite,
            formats,
            options,
            make_executor("local", args.jobs, None),
            out,
            timeout_s=timeout,
            resume=args.resume,
            overwrite=not args.resume,
        )
        entries = [
            json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines() if line.strip()
        ]
        print(f"\n## {name}: {suite.description}\n")
        print(f"{len(result.entries)} runs, {args.jobs} jobs, {timeout:g} s per task, built-in invariants\n")
        print("\n".join(table(entries, formats, timeout)))
        print("\nmedian seconds per engine stage (tasks that reached it):\n")
        print("\n".join(stage_table(entries, formats)))
        print(f"\nsummary: {result.summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
