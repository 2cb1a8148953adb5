#!/usr/bin/env python3
"""qverify's bit-exact int8 simulator against onnxruntime's own int8 inference, side by side.

Issue 44 asks the simulator behind `qverify impact` / `diff` / `repair` to run a CIFAR-10 ResNet-20
at no less than half onnxruntime's speed on the same cores. This script runs, in one process and on
the same N test images:

  onnxruntime  the int8 model's own inference (CPUExecutionProvider), 1 and 2 intra-op threads,
               batch 1 (what the file declares) and batches of --batch images (the file's batch
               dimension made symbolic, as a user who runs many images would export it);
  qverify      `Implementation.run` of the model's int8 implementation (the simulator `impact`
               runs: onnxruntime's QuantizeLinear of the inputs, the bit-exact integer pipeline,
               outputs in real units), numpy's BLAS with its default threads (2 here);

in rounds of --round images, each contender taking its turn in every round, so that a busy machine
(the cores are shared) slows all of them alike. It prints images/s per contender, the simulator's
ratio to each, how many images onnxruntime and the simulator give the same outputs on (the
simulator is the onnxruntime arithmetic, bit for bit: every one, unless the CPU's kernels differ,
see docs/int8.md), and the peak memory: the simulator's own (tracemalloc: numpy's allocations
during its runs) and the process's (getrusage; onnxruntime's arenas included).

Usage:
  python benchmarks/bench_simulator_throughput.py [--model benchmarks/cifar10/models/resnet20.int8-qop.onnx]
      [--images 10000] [--batch 256] [--round 1000] [--label int8] [--json results/throughput.json]
Needs benchmarks/cifar10/data/cifar10_test.npz (benchmarks/cifar10/README.md, "Data").
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qverify.cli.pairs import ModelFiles, implementation_of

CIFAR = ROOT / "benchmarks" / "cifar10"
DEFAULT_MODEL = CIFAR / "models" / "resnet20.int8-qop.onnx"
DEFAULT_DATA = CIFAR / "data" / "cifar10_test.npz"


@dataclass
class Contender:
    """One way of running the model, with its time and outputs over the rounds."""

    name: str
    threads: str
    batch: str
    run: object  # (x float32 (n, 3, 32, 32)) -> outputs (n, classes) float64
    seconds: float = 0.0
    images: int = 0
    outputs: list = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.images / self.seconds if self.seconds else float("nan")


def symbolic_batch(model: onnx.ModelProto) -> bytes:
    """The model with its inputs' and outputs' first dimension symbolic (`N`): what a user who
    runs batches exports (torch.onnx.export(dynamic_axes=...)); nothing else changes."""
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    del model.graph.value_info[:]  # (shapes inferred for batch 1; onnxruntime infers them again)
    return model.SerializeToString()


def ort_contender(model: bytes, threads: int, batch: int) -> Contender:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name

    def run(x: np.ndarray) -> np.ndarray:
        parts = [session.run(None, {name: x[i : i + batch]})[0] for i in range(0, len(x), batch)]
        return np.concatenate(parts).astype(np.float64)

    return Contender("onnxruntime", str(threads), str(batch), run)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--batch", type=int, default=256, help="onnxruntime's batch (default 256)")
    parser.add_argument("--round", type=int, default=1000, help="images per round (default 1000)")
    parser.add_argument("--label", default="int8", help="the qverify implementation (default int8)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not args.data.exists():
        print(
            f"error: {args.data} is missing: build it (benchmarks/cifar10/README.md, Data)", file=sys.stderr
        )
        return 2
    data = np.load(args.data)
    x = (data["x"][: args.images].astype(np.float32) / np.float32(255)).astype(np.float32)
    n = len(x)
    implementation = implementation_of(ModelFiles()(str(args.model)), args.label)
    model = onnx.load(args.model)
    batched = symbolic_batch(model)
    contenders = [
        ort_contender(model.SerializeToString(), 1, 1),
        ort_contender(model.SerializeToString(), 2, 1),
        ort_contender(batched, 1, args.batch),
        ort_contender(batched, 2, args.batch),
    ]
    simulator = Contender(
        "qverify simulator",
        "numpy BLAS",
        "chunks",
        lambda images: implementation.run(images.reshape(len(images), -1).astype(np.float64)).outputs,
    )
    contenders.append(simulator)
    sim_peak = 0
    started = time.perf_counter()
    for start in range(0, n, args.round):
        part = x[start : start + args.round]
        for contender in contenders:
            if contender is simulator:
                tracemalloc.start()
            begin = time.perf_counter()
            contender.outputs.append(contender.run(part))
            contender.seconds += time.perf_counter() - begin
            contender.images += len(part)
            if contender is simulator:
                sim_peak = max(sim_peak, tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
        print(f"  {start + len(part)}/{n} images, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    sim_out = np.concatenate(simulator.outputs)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.model.name}: {n} CIFAR-10 test images, qverify label {args.label}")
    print(
        f"{'contender':<20} {'threads':>10} {'batch':>6} {'images/s':>9} {'simulator / it':>15} {'same outputs':>13}"
    )
    rows = []
    for contender in contenders:
        outputs = np.concatenate(contender.outputs)
        same = int(np.all(outputs.astype(np.float32) == sim_out.astype(np.float32), axis=1).sum())
        ratio = simulator.rate / contender.rate
        rows.append(
            {"contender": contender.name, "threads": contender.threads, "batch": contender.batch,
             "images_per_s": round(contender.rate, 1), "simulator_ratio": round(ratio, 3), "same_outputs": same}
        )  # fmt: skip
        print(
            f"{contender.name:<20} {contender.threads:>10} {contender.batch:>6} {contender.rate:>9.1f} "
            f"{ratio:>14.0%} {same:>8}/{n}"
        )
    print(f"simulator peak memory (tracemalloc, numpy's allocations): {sim_peak / 2**20:.0f} MB; "
          f"process peak RSS (getrusage, onnxruntime included): {rss_mb:.0f} MB")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        summary = {"model": args.model.name, "images": n, "label": args.label, "rows": rows,
                   "simulator_peak_mb": sim_peak / 2**20, "process_peak_rss_mb": rss_mb}  # fmt: skip
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
