#!/usr/bin/env python3
"""Benchmark `qverify repair` (a benchmark, not a test; docs/repair.md).

1. The gap: top-1 accuracy of the digits MLP (benchmarks/digits/digits.nnet, 64-32-16-10 ReLU) on
   `digits-raw:train` (the repair set, 1,347 images) and `digits-raw:test` (the validation set, 450
   images, never used by the repair) in the float64 reference and in narrow formats: fixed point
   <6,4>, <5,3> (per-operation rounding and wide accumulation) and int8 per tensor (onnxruntime's
   static quantizer, calibrated on 1,000 training images, QOperator).
2. Per studied implementation, one `qverify repair` run (the command's own code, in process): the
   output layer, the top 5 neurons per metric, the seven metrics and 5 random draws, at most 400
   encoded tests, weight changes of at most 8 steps, 30 s per MILP. It prints the table per metric
   (accuracies after the repair on both sets, the share of the validation gap recovered, the
   changes, MILP status and times), and the wall time.

Usage:
  python benchmarks/bench_repair.py [--out results/bench-repair] [--time-limit 30] [--neurons 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qverify.assurance import make_implementation, normalised_inputs
from qverify.cli import main as qverify_main
from qverify.data import load_dataset
from qverify.io import load_network
from qverify.quant import Accumulation, ImplementationOptions
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime

MLP = ROOT / "benchmarks" / "digits" / "digits.nnet"
STUDIES = {  # name: (format label, --accumulate)
    "<5,3> wide": ("5.3", "wide"),
    "<6,4> per-op": ("6.4", "per-op"),
}


def int8_per_tensor(out: Path) -> Path:
    net = load_network(MLP)
    x = net.input_norm.apply(load_dataset("digits-raw:train").subset(1000, seed=0).x)
    path = out / "digits.int8-pt.onnx"
    quantize_with_onnxruntime(net, x, QuantizeSettings(QuantFormat.QOP, per_channel=False), path)
    return path


def gap_table(out: Path) -> None:
    net = load_network(MLP)
    sets = {split: load_dataset(f"digits-raw:{split}") for split in ("train", "test")}
    rows = [("float64 reference", make_implementation(net, "real"))]
    for label in ("6.4", "5.3"):
        for accumulation in (Accumulation.PER_OP, Accumulation.WIDE):
            options = ImplementationOptions(accumulation=accumulation)
            rows.append(
                (
                    f"<{label.replace('.', ',')}> {accumulation.value}",
                    make_implementation(net, label, options),
                )
            )
    rows.append(("int8 per tensor", make_implementation(load_network(int8_per_tensor(out)), "int8")))
    print("## the gap: top-1 accuracy (%) of the digits MLP\n")
    print(f"{'implementation':<20}  {'repair set (train)':>18}  {'validation (test)':>17}")
    for name, implementation in rows:
        accuracy = [
            100 * float(np.mean(implementation.predict(normalised_inputs(net, d.x)) == d.y))
            for d in sets.values()
        ]
        print(f"{name:<20}  {accuracy[0]:>18.2f}  {accuracy[1]:>17.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-repair"))
    parser.add_argument("--time-limit", default="30")
    parser.add_argument("--neurons", default="5")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    gap_table(out)
    for name, (label, accumulation) in STUDIES.items():
        print(f"\n## qverify repair, digits MLP in {name}\n")
        began = time.perf_counter()
        code = qverify_main([
            "repair", str(MLP), "--format", label, "--accumulate", accumulation,
            "--repair-set", "digits-raw:train", "--validation", "digits-raw:test",
            "--neurons", args.neurons, "--time-limit", args.time_limit, "--no-progress",
            "-o", str(out / name.replace(" ", "-").replace("<", "").replace(">", "").replace(",", ".")), "--overwrite",
        ])  # fmt: skip
        print(f"exit code {code}; wall time {time.perf_counter() - began:.1f} s")
    print(f"\nwhole benchmark: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
