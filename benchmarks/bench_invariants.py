#!/usr/bin/env python3
"""Compare the interval invariants of Frama-C EVA and of the built-in analysis (a benchmark, not a test).

Usage: python benchmarks/bench_invariants.py [--formats 8.8 20.12] [--jobs 2] [--no-framac] [--quick]
Prints one row per network x property x format: the mean width (pre_hi - pre_lo, real units) of the
last hidden layer, the analysis time, and the ReLUs proved stable (pre_lo >= 0 or pre_hi <= 0), for
Frama-C EVA, the built-in interval level, and the built-in symbolic level (what `--intervals builtin`
injects, and what `auto` injects: docs/invariants.md, "The auto rule").
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.errors import QverifyError
from qverify.invariants import (
    FramacOptions,
    builtin_bounds,
    framac_bounds,
    input_boxes,
    mean_width,
    stable_relus,
)
from qverify.io import load_network
from qverify.network import Activation, Dense, Network
from qverify.properties import read_vnnlib, robustness
from qverify.quant import FixedFormat, FloatFormat, FloatKind, ImplementationOptions, quantize_network

ROOT = Path(__file__).resolve().parents[1]
ACAS = ROOT / "benchmarks" / "acasxu"


@dataclass(frozen=True, slots=True)
class Case:
    network: str
    prop: str
    number: str


@dataclass(frozen=True, slots=True)
class Measure:
    width: float
    time_s: float
    stable: int
    relus: int
    note: str = ""


def number_format(text: str):
    if text in ("float", "double"):
        return FloatFormat(FloatKind(text))
    return FixedFormat.parse(text)


def toy_network(activation: Activation, seed: int = 7) -> Network:
    """A 5-30-30-30-3 network with `activation` in the hidden layers (fixed seed)."""
    rng = np.random.default_rng(seed)
    sizes = (5, 30, 30, 30, 3)
    layers = []
    for index in range(len(sizes) - 1):
        n_in, n_out = sizes[index], sizes[index + 1]
        act = activation if index < len(sizes) - 2 else Activation.IDENTITY
        layers.append(
            Dense(rng.normal(0, 1 / np.sqrt(n_in) * 1.5, (n_out, n_in)), rng.normal(0, 0.3, n_out), act)
        )
    return Network(tuple(layers), name=f"toy-{activation.value}")


def load_case(case: Case):
    if case.network.startswith("toy-"):
        net = toy_network(Activation(case.network.removeprefix("toy-")))
        prop = robustness(
            [0.1, -0.2, 0.3, 0.0, -0.1], float(case.prop.removeprefix("eps=")), label=0, n_outputs=3
        )
    else:
        net = load_network(ACAS / "nnet" / f"ACASXU_run2a_{case.network}_batch_2000.nnet")
        prop = read_vnnlib(ACAS / "vnnlib" / f"prop_{case.prop.removeprefix('phi')}.vnnlib")
    qnet = quantize_network(net, ImplementationOptions(number_format(case.number)))
    return qnet, input_boxes(qnet, prop)


def measure_builtin(case: Case, symbolic: bool) -> Measure:
    qnet, boxes = load_case(case)
    start = time.perf_counter()
    layers = builtin_bounds(qnet, boxes, symbolic)
    elapsed = time.perf_counter() - start
    return Measure(mean_width(qnet, layers), elapsed, *stable_relus(qnet, layers))


def measure_framac(case: Case, options: FramacOptions) -> Measure:
    qnet, boxes = load_case(case)
    try:
        result = framac_bounds(qnet, boxes, options)
    except QverifyError as error:
        return Measure(float("nan"), float("nan"), 0, 0, str(error).splitlines()[0])
    return Measure(mean_width(qnet, result.bounds), result.time_s, *stable_relus(qnet, result.bounds))


def cases(formats: list[str], quick: bool) -> list[Case]:
    acas = [("1_1", p) for p in ("phi1", "phi2", "phi3", "phi4")]
    if not quick:
        acas += [(n, p) for n in ("2_1", "3_3", "4_5") for p in ("phi1", "phi3")]
    toys = [("toy-sigmoid", "eps=0.1"), ("toy-tanh", "eps=0.1")]
    return [Case(n, p, f) for n, p in acas + toys for f in formats]


def cell(value: float, digits: int = 3) -> str:
    return "-" if np.isnan(value) else f"{value:.{digits}g}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", nargs="+", default=["8.8", "20.12"])
    parser.add_argument("--jobs", type=int, default=2, help="Frama-C runs in parallel")
    parser.add_argument("--no-framac", action="store_true")
    parser.add_argument("--quick", action="store_true", help="ACAS Xu 1_1 and the toy networks only")
    parser.add_argument("--precision", type=int, default=0, help="-eva-precision")
    args = parser.parse_args()
    todo = cases(args.formats, args.quick)
    run_framac = not args.no_framac and shutil.which("frama-c") is not None
    if not args.no_framac and not run_framac:
        print("frama-c not found: Frama-C columns left empty", file=sys.stderr)
    options = FramacOptions(precision=args.precision, timeout_s=1800)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        framac_runs = (
            {case: pool.submit(measure_framac, case, options) for case in todo} if run_framac else {}
        )
        header = (
            f"{'network':12s} {'prop':8s} {'format':6s} | {'width: framac':>13s} {'interval':>9s} "
            f"{'symbolic':>9s} | {'time s: framac':>14s} {'interval':>9s} {'symbolic':>9s} | "
            f"{'stable ReLUs: framac':>20s} {'interval':>9s} {'symbolic':>9s} {'of':>4s}"
        )
        print(header)
        print("-" * len(header))
        for case in todo:
            interval, symbolic = measure_builtin(case, False), measure_builtin(case, True)
            framac = (
                framac_runs[case].result()
                if case in framac_runs
                else Measure(float("nan"), float("nan"), 0, 0)
            )
            relus = symbolic.relus
            stable = (
                (
                    str(framac.stable) if not np.isnan(framac.width) else "-",
                    str(interval.stable),
                    str(symbolic.stable),
                )
                if relus
                else ("-", "-", "-")
            )
            print(
                f"{case.network:12s} {case.prop:8s} {case.number:6s} | {cell(framac.width):>13s} "
                f"{cell(interval.width):>9s} {cell(symbolic.width):>9s} | {cell(framac.time_s):>14s} "
                f"{cell(interval.time_s, 2):>9s} {cell(symbolic.time_s, 2):>9s} | {stable[0]:>20s} "
                f"{stable[1]:>9s} {stable[2]:>9s} {relus:>4d}",
                flush=True,
            )
            if framac.note:
                print(f"    frama-c: {framac.note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
