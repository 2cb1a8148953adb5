#!/usr/bin/env python3
"""Benchmark the built-in engine (a benchmark, not a test): digits robustness and ACAS Xu φ1–φ4.

Suites
  digits  a 64-input ReLU MLP (scikit-learn's bundled `load_digits`, pixels scaled to [0, 1],
          MLPClassifier(hidden_layer_sizes=(32, 16), random_state=0)) in <k,8> fixed point (k from
          `propose_int_bits` over [0, 1]^64), L-inf robustness around the first N test images of a
          fixed split for radii in grey levels (1 level = 1/16); target: >= 95 % decided within 60 s.
  acasxu  φ1–φ4 on the 45 ACAS Xu NNet networks (benchmarks/acasxu/instances.csv) at <16,16>,
          VNN-LIB boxes in normalised units; target: every instance decided within 116 s.
Both suites run with per-op and wide accumulation (--accumulation) for comparison.

Each task is generated into a temporary folder and decided by `python -m qverify.engine --json`
in a child process (what the internal back end runs), --jobs at a time. One line per task, then
totals. Run in pieces with --networks / --props / --images / --radii / --limit.

Usage:
  python benchmarks/bench_engine.py digits [--images 20] [--radii 0.5,1,2,3] [--timeout 60]
  python benchmarks/bench_engine.py acasxu [--props 1,2,3,4] [--networks 1_1,2_3|all] [--timeout 116]
  common: [--accumulation per-op,wide] [--jobs 2] [--solver milp] [--json-out results.jsonl]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qverify.codegen import render_harness
from qverify.io import load_network
from qverify.network import Activation
from qverify.properties import read_vnnlib, robustness
from qverify.quant import (
    Accumulation,
    FixedFormat,
    ImplementationOptions,
    Layout,
    propose_int_bits,
    quantize_network,
    simulate,
)

sys.path.insert(0, str(ROOT / "benchmarks"))  # the shared training tools
from training_tools import sklearn_network

ACAS = ROOT / "benchmarks" / "acasxu"


@dataclass
class Task:
    suite: str
    name: str
    group: str  # totals are per group
    build: object  # () -> (QuantizedNetwork, Property)
    timeout_s: float
    result: dict = field(default_factory=dict)
    wall_s: float = 0.0


# ------------------------------------------------------------------------------ digits


def digits_network(seed: int = 0):
    """The MLP trained on scikit-learn's digits (deterministic), as a qverify Network, and the test set."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    data = load_digits()
    x = data.data / 16.0
    x_train, x_test, y_train, y_test = train_test_split(x, data.target, test_size=0.25, random_state=seed)
    classifier = MLPClassifier(hidden_layer_sizes=(32, 16), random_state=seed, max_iter=600)
    classifier.fit(x_train, y_train)
    accuracy = classifier.score(x_test, y_test)
    return (
        sklearn_network(classifier, Activation.RELU, "digits-mlp-32-16", source="sklearn load_digits"),
        x_test,
        y_test,
        accuracy,
    )


def digits_tasks(args) -> list[Task]:
    net, x_test, _, accuracy = digits_network()
    lo, hi = np.zeros(64), np.ones(64)
    proposal = propose_int_bits(net, lo, hi, 8)
    fmt = FixedFormat(proposal.int_bits, 8)
    print(f"# digits MLP 64-32-16-10, test accuracy {accuracy:.3f}, format {fmt} ({proposal.binding})")
    radii = [Fraction(r) for r in args.radii.split(",")]
    tasks = []
    for accumulation in args.accumulation.split(","):
        options = ImplementationOptions(
            fmt, accumulation=Accumulation(accumulation), layout=Layout.SEQUENTIAL
        )
        qnet = quantize_network(net, options)
        for image in range(args.images):
            centre = [Fraction(round(v * 16), 16) for v in x_test[image]]
            words = np.array([int(c * fmt.scale) for c in centre])[None, :]
            label = int(np.argmax(simulate(qnet, words).outputs[0]))
            for radius in radii:
                eps = radius / 16

                def build(qnet=qnet, centre=centre, eps=eps, label=label, image=image, radius=radius):
                    prop = robustness(
                        centre, eps, label, 10, domain=([0] * 64, [1] * 64), name=f"digit{image}-r{radius}"
                    )
                    return qnet, prop

                name = f"img{image:02d} r={float(radius):g}/16 label {label}"
                tasks.append(Task("digits", name, f"digits {accumulation}", build, args.timeout or 60.0))
    return tasks


# ------------------------------------------------------------------------------ ACAS Xu


def acas_tasks(args) -> list[Task]:
    props = {f"vnnlib/prop_{p}.vnnlib" for p in args.props.split(",")}
    wanted = None if args.networks == "all" else set(args.networks.split(","))
    rows = []
    with open(ACAS / "instances.csv") as handle:
        for onnx, vnnlib, timeout in csv.reader(handle):
            if vnnlib.strip() not in props:
                continue
            stem = Path(onnx).stem  # ACASXU_run2a_1_1_batch_2000
            short = "_".join(stem.split("_")[2:4])
            if wanted is not None and short not in wanted:
                continue
            rows.append((stem, short, vnnlib.strip(), float(timeout)))
    networks: dict[str, object] = {}
    tasks = []
    for accumulation in args.accumulation.split(","):
        for stem, short, vnnlib, timeout in rows:

            def build(stem=stem, vnnlib=vnnlib, accumulation=accumulation):
                if stem not in networks:
                    networks[stem] = load_network(ACAS / "nnet" / f"{stem}.nnet")
                options = ImplementationOptions(
                    FixedFormat(16, 16), accumulation=Accumulation(accumulation), layout=Layout.SEQUENTIAL
                )
                return quantize_network(networks[stem], options), read_vnnlib(ACAS / vnnlib)

            prop = Path(vnnlib).stem.replace("prop_", "φ")
            tasks.append(
                Task(
                    "acasxu",
                    f"{short} {prop}",
                    f"acasxu {prop} {accumulation}",
                    build,
                    args.timeout or timeout,
                )
            )
    return tasks


# ------------------------------------------------------------------------------ running


def run_task(task: Task, scratch: Path, solver: str) -> Task:
    qnet, prop = task.build()  # type: ignore[operator]
    folder = scratch / f"{task.suite}-{abs(hash((task.name, task.group)))}"
    harness = render_harness(qnet, prop).write(folder)
    command = [
        sys.executable,
        "-m",
        "qverify.engine",
        str(harness),
        "-I",
        str(folder),
        "--json",
        "--timeout",
        str(task.timeout_s),
        "--solver",
        solver,
    ]
    start = time.monotonic()
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=task.timeout_s + 60, cwd=ROOT, check=False
        )
        lines = completed.stdout.strip().splitlines()
        task.result = (
            json.loads(lines[-1]) if lines else {"status": "ERROR", "reason": completed.stderr[-400:]}
        )
    except subprocess.TimeoutExpired:
        task.result = {"status": "UNKNOWN", "reason": "killed: engine overran its budget by 60 s"}
    except json.JSONDecodeError as error:
        task.result = {"status": "ERROR", "reason": f"bad JSON: {error}"}
    task.wall_s = time.monotonic() - start
    return task


def report_line(task: Task) -> str:
    result = task.result
    counts = result.get("counts", {})
    extra = []
    for key in ("boxes", "milp_queries", "smt_queries"):
        if counts.get(key):
            extra.append(f"{key}={counts[key]}")
    reason = result.get("reason", "")
    if result.get("status") in ("UNKNOWN", "ERROR") and reason:
        extra.append(reason[:120])
    return (
        f"{task.group:24s} {task.name:28s} {result.get('status', '?'):8s} {result.get('decided_by', ''):8s} "
        f"{task.wall_s:8.2f} {' '.join(extra)}"
    )


def totals(tasks: list[Task]) -> None:
    print(
        "\ngroup                     tasks  SAFE UNSAFE UNKNOWN ERROR  decided  within   total_s  median_s  max_s"
    )
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        groups.setdefault(task.group, []).append(task)
    for group, members in groups.items():
        status = [t.result.get("status") for t in members]
        times = [t.wall_s for t in members]
        decided = [t for t in members if t.result.get("status") in ("SAFE", "UNSAFE")]
        within = [t for t in decided if t.wall_s <= t.timeout_s]
        print(
            f"{group:24s} {len(members):6d} {status.count('SAFE'):5d} {status.count('UNSAFE'):6d} "
            f"{status.count('UNKNOWN'):7d} {status.count('ERROR'):5d} {len(decided):8d} {len(within):7d} "
            f"{sum(times):9.1f} {statistics.median(times):9.2f} {max(times):6.1f}"
        )
    by_step: dict[str, int] = {}
    for task in tasks:
        step = task.result.get("decided_by") or task.result.get("status", "?")
        by_step[step] = by_step.get(step, 0) + 1
    print("deciding step:", ", ".join(f"{k} {v}" for k, v in sorted(by_step.items())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=("digits", "acasxu"))
    parser.add_argument("--accumulation", default="per-op,wide")
    parser.add_argument("--timeout", type=float, default=None, help="per task (default 60 digits, 116 ACAS)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--solver", default="milp")
    parser.add_argument("--images", type=int, default=20)
    parser.add_argument("--radii", default="0.5,1,2,3", help="L-inf radii in grey levels (1/16)")
    parser.add_argument("--props", default="1,2,3,4")
    parser.add_argument("--networks", default="all", help="e.g. 1_1,2_3 or all")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--json-out", type=Path, default=None, help="append one JSON line per task")
    args = parser.parse_args(argv)
    tasks = digits_tasks(args) if args.suite == "digits" else acas_tasks(args)
    if args.limit is not None:
        tasks = tasks[: args.limit]
    print(f"{'group':24s} {'task':28s} {'verdict':8s} {'by':8s} {'time_s':>8s}")
    with (
        tempfile.TemporaryDirectory(prefix="qv-bench-") as scratch,
        ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool,
    ):
        futures = [pool.submit(run_task, task, Path(scratch), args.solver) for task in tasks]
        for future in futures:
            task = future.result()
            print(report_line(task), flush=True)
            if args.json_out is not None:
                with open(args.json_out, "a") as handle:
                    record = {
                        "suite": task.suite,
                        "group": task.group,
                        "task": task.name,
                        "wall_s": task.wall_s,
                    }
                    handle.write(json.dumps({**record, **task.result}) + "\n")
    totals(tasks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
