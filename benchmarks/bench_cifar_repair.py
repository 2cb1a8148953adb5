#!/usr/bin/env python3
"""QNNRepair's Table 3 at the paper's scale (issue 44; docs/repair.md): the zoo's int8 networks with
dense heads (benchmarks/cifar10: VGG-16 and ResNet-18 at 1/4 width, dense 128-64-64-10; LeNet-5's
1024-120-84-10), repaired in their dense-1 (the output layer), dense-2 and dense-3 (the second and
third last dense layers) by `qverify repair` (the command's own code, in process), with each of
its seven fault-localisation metrics (Tarantula, Ochiai, DStar, Jaccard, Ample, Euclid, Wong3) and
the random baseline; repair set: the first 1,000 CIFAR-10 test images, validation: the other 9,000.

Each (model, layer) is one `qverify repair --format int8` run of the onnxruntime int8 file
(QOperator) against the float ONNX file, journalled by the command (`OUT/MODEL/dense-K/
journal.jsonl`, one line per solved MILP) and resumed with `--resume`. The table prints, per row,
the float and int8 validation accuracy, the validation accuracy after each metric's repair, the
written repair, and the run's time, beside QNNRepair's Table 3 / Table 7 figures.

Then the issue's check on every written int8 repair: its validation accuracy against the int8
model's, and bit-exactness -- the repaired `.onnx` run by onnxruntime on all 10,000 test images
against qverify's simulator of the same file: every output code equal.

Usage:
  nice -n 5 python benchmarks/bench_cifar_repair.py [--models vgg16,resnet18] [--layers 1,2,3]
      [--neurons 5] [--time-limit 30] [--random-runs 2] [--out results/bench-cifar-repair]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from qverify.assurance import make_implementation
from qverify.assurance.repair.metrics import METRICS, RANDOM
from qverify.assurance.runtime import OnnxRuntimeModel
from qverify.cli import main as qverify_main
from qverify.data import load_dataset
from qverify.io import load_network
from qverify.network import Dense

ZOO = ROOT / "benchmarks" / "cifar10"
DATA = ZOO / "data" / "cifar10_test.npz"
REPAIR_IMAGES = 1000
MODELS = {"vgg16": "VGGNet", "resnet18": "ResNet-18", "lenet5": "Conv3/Conv5"}
COLUMNS = (*METRICS, RANDOM)
# QNNRepair (Song et al.), Table 2 (float / quantized accuracy on CIFAR-10's test set) and the best
# fault-localisation figure of its Table 3 per row (Table 7 for the per-metric VGGNet rows)
PAPER = {
    ("VGGNet", 1): "float 78.67, int8 78.57; best FL 79.29 (1 neuron), random 78.94",
    ("VGGNet", 2): "best FL 78.83 (every metric, Table 7: 100 neurons), random 78.38",
    ("VGGNet", 3): "Table 7: 78.64-78.66 per metric, random 78.22",
    ("ResNet-18", 1): "float 79.32, int8 79.16; best FL 79.20 (5 neurons), random 78.92",
    ("ResNet-18", 2): "not in the paper (its Table 3 repairs ResNet-18's dense-1 only)",
    ("ResNet-18", 3): "not in the paper (its Table 3 repairs ResNet-18's dense-1 only)",
}


def dense_layers(path: Path) -> list[int]:
    """1-based numbers of the network's dense layers, last first (dense-1, dense-2, ...)."""
    net = load_network(path)
    return [index + 1 for index, layer in reversed(list(enumerate(net.layers))) if isinstance(layer, Dense)]


def split_sets(out: Path) -> tuple[Path, Path]:
    """The repair set (first 1,000 test images) and the validation set (the other 9,000) as .npz."""
    data = load_dataset(str(DATA))
    x = np.asarray(data.x).reshape(data.size, 3, 32, 32)
    paths = out / "repair-set.npz", out / "validation-set.npz"
    for path, part in zip(paths, (slice(0, REPAIR_IMAGES), slice(REPAIR_IMAGES, None))):
        if not path.is_file():
            np.savez_compressed(path, x=x[part], y=np.asarray(data.y)[part])
    return paths


def run_layer(model: str, layer: int, depth: int, sets: tuple[Path, Path], out: Path, args) -> None:
    folder = out / model / f"dense-{depth}"
    command = [
        "repair", str(ZOO / "models" / f"{model}.onnx"),
        "--quantized", str(ZOO / "models" / f"{model}.int8-qop.onnx"), "--format", "int8",
        "--repair-set", str(sets[0]), "--validation", str(sets[1]), "--layer", str(layer),
        "--neurons", str(args.neurons), "--time-limit", str(args.time_limit),
        "--random-runs", str(args.random_runs), "--max-tests", str(args.max_tests),
        "-o", str(folder), "--resume",
    ]  # fmt: skip
    began = time.perf_counter()
    code = qverify_main(command)
    print(f"[{model} dense-{depth}: exit {code}, {time.perf_counter() - began:.0f} s]", flush=True)


def bit_exact(folder: Path, images: np.ndarray) -> tuple[int, int] | None:
    """Images on which onnxruntime's outputs on the repaired file equal the simulator's, of all;
    None for a file that ends in a softmax (the simulator's outputs are the logits before it).
    Kept in `bit_exact.json` beside the file, keyed by its sha256 (a report of a stopped run reuses it)."""
    path = folder / "repaired.int8.onnx"
    if onnx.load(str(path)).graph.node[-1].op_type.endswith("Softmax"):
        return None
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    kept = folder / "bit_exact.json"
    if kept.is_file() and json.loads(kept.read_text()).get("sha256") == digest:
        record = json.loads(kept.read_text())
        return record["same"], record["images"]
    same, total = _compare_with_onnxruntime(path, images)
    kept.write_text(json.dumps({"sha256": digest, "same": same, "images": total}) + "\n")
    return same, total


def _compare_with_onnxruntime(path: Path, images: np.ndarray) -> tuple[int, int]:
    net = load_network(path)
    simulator = make_implementation(net, "int8")
    runtime = OnnxRuntimeModel(path, net.n_inputs)
    out = simulator.qnet.output_quant  # type: ignore[union-attr]
    ours = simulator.run(images).raw.astype(np.int64)
    theirs = np.rint(runtime.outputs(images) / out.scale).astype(np.int64) + out.zero_point
    same = np.all(ours == theirs, axis=1)
    return int(same.sum()), len(images)


def table(rows: list[tuple[str, int, dict]]) -> list[str]:
    head = "| row | float | int8 | " + " | ".join(COLUMNS) + " | written | time (s) | QNNRepair |"
    lines = [head, "|---" * (len(COLUMNS) + 6) + "|"]
    for model, depth, record in rows:
        by_metric: dict[str, list[float]] = {}
        for outcome in record["outcomes"]:
            name = RANDOM if outcome["metric"].startswith(RANDOM) else outcome["metric"]
            by_metric.setdefault(name, []).append(100 * outcome["accuracy_after"]["validation"])
        cells = []
        for name in COLUMNS:
            values = by_metric.get(name, [])
            cells.append(
                "-"
                if not values
                else f"{np.mean(values):.2f}" + (f" (n={len(values)})" if len(values) > 1 else "")
            )
        paper = PAPER.get((MODELS[model], depth), "")
        lines.append(
            f"| {model} dense-{depth} | {100 * record['float_accuracy']['validation']:.2f} | "
            f"{100 * record['quantized_before']['validation']:.2f} | " + " | ".join(cells)
            + f" | {record['selected'] or 'none'} | {record['time_s']:.0f} | {paper} |"
        )  # fmt: skip
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="vgg16,resnet18")
    parser.add_argument("--layers", default="1,2,3", help="dense-K to repair (1: the output layer)")
    parser.add_argument("--neurons", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=30.0)
    parser.add_argument("--random-runs", type=int, default=2)
    parser.add_argument("--max-tests", type=int, default=400)
    parser.add_argument("--out", default=str(ROOT / "results" / "bench-cifar-repair"))
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="repair nothing: the tables and checks of the repairs OUT holds (a stopped run)",
    )
    args = parser.parse_args()
    if not DATA.is_file():
        print(f"error: {DATA} is not there: make it with benchmarks/cifar10/data.py", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sets = split_sets(out)
    started = time.perf_counter()
    rows, checks = [], []
    everything = load_dataset(str(DATA)).x
    models = [name.strip() for name in args.models.split(",") if name.strip()]
    for depth in (int(k) for k in args.layers.split(",")):  # layer-major: every model's dense-1 first
        for model in models:
            dense = dense_layers(ZOO / "models" / f"{model}.int8-qop.onnx")
            if depth > len(dense):
                print(f"{model}: no dense-{depth} (it has {len(dense)} dense layers)")
                continue
            folder = out / model / f"dense-{depth}"
            if not args.report_only:
                run_layer(model, dense[depth - 1], depth, sets, out, args)
            if not (folder / "repair.json").is_file():  # --report-only, or a run stopped or refused
                print(f"{model} dense-{depth}: not finished (no {folder / 'repair.json'})")
                continue
            record = json.loads((folder / "repair.json").read_text())
            rows.append((model, depth, record))
            if (folder / "repaired.int8.onnx").is_file():
                exact = bit_exact(folder, everything)
                same = "softmax output: not compared" if exact is None else f"{exact[0]:,}/{exact[1]:,}"
                after = next(o for o in record["outcomes"] if o["metric"] == record["selected"])
                checks.append(
                    f"| {model} dense-{depth} | {record['selected']} | "
                    f"{100 * record['quantized_before']['validation']:.2f} | "
                    f"{100 * after['accuracy_after']['validation']:.2f} | {same} |"
                )
                print(checks[-1], flush=True)  # as it comes: a stopped run keeps what it checked
    lines = ["", "## Validation accuracy (%) after repair, per metric (9,000 images)", "", *table(rows)]
    lines += ["", "## The written repairs: validation accuracy and bit-exactness (onnxruntime = simulator)", "",
              "| row | written | int8 before | after | same outputs |", "|---|---|---:|---:|---:|", *checks]  # fmt: skip
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines += [
        "",
        f"whole benchmark: {time.perf_counter() - started:,.0f} s; peak resident memory {peak:,.0f} MB",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (out / "tables.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
