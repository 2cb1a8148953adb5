#!/usr/bin/env python3
"""Benchmark the engine's front ends (a benchmark, not a test): the scalar path (cfront parse,
symbolic execution, simplification) against the array-level lift (`qverify.engine.netlevel.lift`).

Cases
  acas-16.16  ACAS Xu 1_9 phi_3 at <16,16>, the built-in invariants (as `qverify harness` writes it)
  acas-float  the same at IEEE float
  cnn-16.16   the digits CNN (benchmarks/digits-cnn/digits_cnn.onnx: conv, max pool, dense) at
              <16,16>, L-inf eps 0.05 around the grey image 0.5, no invariants
  dense784    a random 784-256x6-10 dense ReLU network (He-scaled normal weights, seed 0) at
              <16,16>, L-inf eps 0.03 around a random image in [0, 1]^784, no invariants
              (benchmarks/digits784 holds a trained network of that shape; this one needs no data)
  dense784-float  the same network and property at IEEE float (the harness of --semantics real)
  cifar-16.16 the CIFAR-shaped 3x32x32 CNN of benchmarks/digits32rgb-conv (conv 4x4/2, conv 4x4/2,
              dense 1024->100->10) at <16,16>, its instance img00 at the first radius (issue 29)
  cifar-float the same at IEEE float (the harness of --semantics real)
  sigmoid784  the 784-200x3-10 sigmoid MLP of benchmarks/digits784-sigmoid at <16,16> (its lookup
              table), its instance img00 at the first radius
  digits784-float, digits784-16.16, digits784x4-float, digits784x4-16.16
              the trained 784-256x2-10 and 784-256x4-10 ReLU MLPs of benchmarks/digits784 and
              benchmarks/digits784x4, their first instance, at IEEE float (the harness of
              --semantics real, what vnncomp/run_instance.sh verifies) and at <16,16> (issue 32)
Codegen (rendering the harness and writing it, what `qverify verify` times as "codegen") is timed
in this process, wall and CPU seconds. Each lift runs in a child process, which reports its stage
times, its CPU seconds, its peak resident set (VmHWM) and the resident set after the imports (the
lift's own share is the difference). Other processes share the cores: the CPU seconds are the
figures to compare; the load average is printed with them.
The scalar path runs in this process for the ACAS cases; for dense784 only with --scalar-all
(minutes and gigabytes: issue 16 measured 117 s and 2.8 GB on a smaller 784-256-256-10 net).

Targets (issue 16): ACAS Xu lift < 0.3 s; dense784 lift < 3 s and < 1 GB. Issue 29: a 3x32x32
harness (cifar-*) < 5 s. Issue 32: real mode's codegen + lift of a 784-input net < 2 s on an idle
core, fixed point not slower. The dense784, cifar, sigmoid784 and digits784 cases run the scalar
path only with --scalar-all.

Usage:
  python benchmarks/bench_frontend.py [--cases acas-16.16,acas-float,dense784] [--repeat 3] [--scalar-all]
  python benchmarks/bench_frontend.py --cases digits784-float,digits784-16.16,digits784x4-float,digits784x4-16.16
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import itertools

from qverify.codegen import NeuronBounds, render_harness
from qverify.invariants import IntervalMethod, compute_bounds
from qverify.io import load_network
from qverify.network import Activation, Dense, Network
from qverify.properties import Property, read_vnnlib, robustness, to_normalised
from qverify.quant import FixedFormat, FloatFormat, ImplementationOptions, QuantizedNetwork, quantize_network

ACAS = ROOT / "benchmarks" / "acasxu"
MODELS_C = ROOT / "models_c"
CASES = (
    "acas-16.16",
    "acas-float",
    "cnn-16.16",
    "dense784",
    "dense784-float",
    "cifar-16.16",
    "cifar-float",
    "sigmoid784",
    "digits784-float",
    "digits784-16.16",
    "digits784x4-float",
    "digits784x4-16.16",
)
SUITE_CASES = {  # case -> (suite folder, network file, number format)
    "cifar-16.16": ("digits32rgb-conv", "digits32rgb_conv.onnx", FixedFormat(16, 16)),
    "cifar-float": ("digits32rgb-conv", "digits32rgb_conv.onnx", FloatFormat()),
    "sigmoid784": ("digits784-sigmoid", "digits784_sigmoid.onnx", FixedFormat(16, 16)),
    "digits784-float": ("digits784", "digits784.onnx", FloatFormat()),
    "digits784-16.16": ("digits784", "digits784.onnx", FixedFormat(16, 16)),
    "digits784x4-float": ("digits784x4", "digits784x4.onnx", FloatFormat()),
    "digits784x4-16.16": ("digits784x4", "digits784x4.onnx", FixedFormat(16, 16)),
}


@dataclass(frozen=True, slots=True)
class LiftRun:
    times_s: dict[str, float]
    total_s: float
    cpu_s: float
    peak_mb: float
    baseline_mb: float
    reason: str


@dataclass(frozen=True, slots=True)
class Codegen:
    """What a case renders (network, property, invariants) and the render + write it costs."""

    harness: Path
    wall_s: float
    cpu_s: float


Instance = tuple[QuantizedNetwork, Property, NeuronBounds | None]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _acas(number) -> Instance:
    net = load_network(ACAS / "nnet" / "ACASXU_run2a_1_9_batch_2000.nnet")
    prop = to_normalised(read_vnnlib(ACAS / "vnnlib" / "prop_3.vnnlib"), net)
    qnet = quantize_network(net, ImplementationOptions(number))
    return qnet, prop, compute_bounds(qnet, prop, IntervalMethod.AUTO).bounds


def dense784_network(seed: int = 0) -> Network:
    rng = np.random.default_rng(seed)
    sizes = (784, *([256] * 6), 10)
    layers = []
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        last = index == len(sizes) - 2
        weights = rng.normal(0, np.sqrt(2 / n_in), (n_out, n_in))
        layers.append(
            Dense(weights, rng.normal(0, 0.05, n_out), Activation.IDENTITY if last else Activation.RELU)
        )
    return Network(tuple(layers), name="dense784-random")


def _dense784(number) -> Instance:
    net = dense784_network()
    center = np.random.default_rng(1).uniform(0, 1, 784)
    prop = robustness([str(v) for v in center], "0.03", label=0, n_outputs=10, domain=([0] * 784, [1] * 784))
    return quantize_network(net, ImplementationOptions(number)), prop, None


def _cnn() -> Instance:
    net = load_network(ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.onnx")
    n = net.n_inputs
    prop = robustness(["0.5"] * n, "0.05", label=0, n_outputs=net.n_outputs, domain=([0] * n, [1] * n))
    return quantize_network(net, ImplementationOptions(FixedFormat(16, 16))), prop, None


def _suite_instance(folder: str, network: str, number) -> Instance:
    """A suite's first instance (its first line of instances.csv) at `number`."""
    suite = ROOT / "benchmarks" / folder
    net = load_network(suite / network)
    first = (suite / "instances.csv").read_text().splitlines()[0].split(",")[1]
    return quantize_network(net, ImplementationOptions(number)), read_vnnlib(suite / first), None


def instance(case: str) -> Instance:
    if case in SUITE_CASES:
        return _suite_instance(*SUITE_CASES[case])
    if case == "cnn-16.16":
        return _cnn()
    if case == "acas-16.16":
        return _acas(FixedFormat(16, 16))
    if case == "acas-float":
        return _acas(FloatFormat())
    return _dense784(FloatFormat() if case == "dense784-float" else FixedFormat(16, 16))


def generate(case: Instance, directory: Path) -> Codegen:
    """The case's harness written to `directory`; the render and write timed."""
    qnet, prop, bounds = case
    wall, cpu = time.perf_counter(), cpu_seconds()
    harness = render_harness(qnet, prop, bounds).write(directory)
    return Codegen(harness, time.perf_counter() - wall, cpu_seconds() - cpu)


def lift_in_child(harness: Path) -> LiftRun:
    """One lift in a fresh interpreter: stage times and peak resident set."""
    completed = subprocess.run(
        [sys.executable, __file__, "--lift-only", str(harness)], capture_output=True, text=True, check=True
    )
    data = json.loads(completed.stdout.strip().splitlines()[-1])
    return LiftRun(**data)


def peak_resident_mb() -> float:
    """This process's peak resident set: VmHWM (reset by exec, unlike ru_maxrss, which a child
    inherits from the parent that forked it), or ru_maxrss where /proc is absent."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def lift_only(harness: Path) -> None:
    """The child's side: import, note the resident set, lift, print one JSON line."""
    from qverify.engine.netlevel.lift import lift_file

    baseline = peak_resident_mb()
    start, cpu = time.perf_counter(), cpu_seconds()
    result = lift_file(harness, [MODELS_C])
    total = time.perf_counter() - start
    data = {
        "times_s": result.times_s,
        "total_s": total,
        "cpu_s": cpu_seconds() - cpu,
        "peak_mb": peak_resident_mb(),
        "baseline_mb": baseline,
        "reason": result.reason,
    }
    print(json.dumps(data))


def scalar_front_end(harness: Path) -> dict[str, float]:
    """parse (gcc -E + pycparser), symbolic execution, simplification: seconds per stage."""
    from qverify.engine import cfront
    from qverify.engine.scalar import symex
    from qverify.engine.scalar.passes.simplify import simplify

    times = {}
    start = time.perf_counter()
    unit = cfront.parse_file(harness, [MODELS_C])
    times["parse"] = time.perf_counter() - start
    start = time.perf_counter()
    program = symex.execute(unit)
    times["symex"] = time.perf_counter() - start
    start = time.perf_counter()
    simplify(program)
    times["simplify"] = time.perf_counter() - start
    return times


def _stages(times: dict[str, float]) -> str:
    return " ".join(f"{name} {seconds:.3f}" for name, seconds in times.items())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="codegens and lifts per case (the one of least CPU is reported)",
    )
    parser.add_argument("--scalar-all", action="store_true", help="also run the scalar path on dense784")
    parser.add_argument("--lift-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lift_only:
        lift_only(args.lift_only)
        return
    print(f"load average {' '.join(f'{load:.2f}' for load in os.getloadavg())} on {os.cpu_count()} cores")
    print(
        f"{'case':<17} {'front end':<9} {'total s':>8}  stages (s)                                   peak MB"
    )
    for case in args.cases.split(","):
        with tempfile.TemporaryDirectory(prefix="qv-bench-frontend-") as scratch:
            rendered = instance(case)
            codegens = [generate(rendered, Path(scratch) / str(run)) for run in range(args.repeat)]
            codegen = min(codegens, key=lambda run: run.cpu_s)
            harness = codegen.harness
            size_mb = harness.stat().st_size / 1e6
            print(
                f"{case:<17} {'codegen':<9} {codegen.wall_s:>8.3f}  cpu {codegen.cpu_s:.3f} s, "
                f"harness {size_mb:.1f} MB"
            )
            runs = [lift_in_child(harness) for _ in range(args.repeat)]
            best = min(runs, key=lambda run: run.cpu_s)
            if best.reason:
                print(f"{case:<17} lift      NOT LIFTED: {best.reason}")
                continue
            print(
                f"{case:<17} {'lift':<9} {best.total_s:>8.3f}  {_stages(best.times_s):<44} "
                f"{best.peak_mb:.0f} (after imports {best.baseline_mb:.0f}, lift +{best.peak_mb - best.baseline_mb:.0f})"
            )
            print(
                f"{case:<17} {'both':<9} {codegen.wall_s + best.total_s:>8.3f}  "
                f"cpu codegen {codegen.cpu_s:.3f} + lift {best.cpu_s:.3f} = {codegen.cpu_s + best.cpu_s:.3f} s"
            )
            if case.startswith(("acas", "cnn")) or args.scalar_all:
                times = scalar_front_end(harness)
                total = sum(times.values())
                print(
                    f"{case:<17} {'scalar':<9} {total:>8.3f}  {_stages(times):<44} "
                    f"(ratio scalar / lift {total / best.total_s:.0f}x)"
                )


if __name__ == "__main__":
    main()
