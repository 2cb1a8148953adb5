"""Accuracy of every zoo file on the CIFAR-10 test images, beside what zoo.json records.

The test images are not in the repository (README.md: no licence is stated for the copy they come
from); `data.py` rebuilds data/cifar10_test.npz from a fetched copy. This script then runs every
committed model in its own runtime (onnxruntime; LiteRT for .tflite) on the first N images (default
all 10,000) and prints correct counts beside zoo.json's (its `correct_first_500` column is checked
with --first 500: the tolerance per runtime is the one the zoo's README states). Exit 1 on a
mismatch, 2 when the images are missing.

    python benchmarks/cifar10/accuracy.py [--first 500]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ZOO = Path(__file__).resolve().parent
RECORD = json.loads((ZOO / "zoo.json").read_text())
# correct images among the first 500 that may differ from the recorded count: float ONNX may flip a
# near-tie on another CPU's summation order; int8 kernels differ between CPUs (onnxruntime's AVX2 vs
# AVX-VNNI paths, docs/quantization.md; XNNPACK's per-ISA requantization in LiteRT)
TOLERANCE = {"float": 1, "int8-qdq": 5, "int8-qop": 5, "int8": 3, "dynamic": 3}


def onnx_outputs(path: Path, images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    if feed.shape[-1] == 3:  # tf2onnx's NHWC input
        images = images.transpose(0, 2, 3, 1)
    return np.vstack([session.run(None, {feed.name: image[None]})[0] for image in images])


def tflite_outputs(path: Path, images: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path), num_threads=1)
    interpreter.allocate_tensors()
    feed, fetch = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    nhwc = images.transpose(0, 2, 3, 1)
    if feed["dtype"] == np.int8:
        scale, zero = feed["quantization"]
        nhwc = np.clip(np.round(nhwc / scale) + zero, -128, 127).astype(np.int8)
    outputs = []
    for image in nhwc:
        interpreter.set_tensor(feed["index"], image[None])
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(fetch["index"])[0].astype(np.float64))
    return np.array(outputs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=10_000, help="how many test images (default all)")
    args = parser.parse_args()
    path = ZOO / RECORD["test_data"]["file"]
    if not path.is_file():
        print(
            f"error: {path} is not there: make it with benchmarks/cifar10/data.py (README.md)",
            file=sys.stderr,
        )
        return 2
    if hashlib.sha256(path.read_bytes()).hexdigest() != RECORD["test_data"]["sha256"]:
        print(
            f"error: {path} is not the file the accuracies were measured on (sha256 differs)", file=sys.stderr
        )
        return 2
    from qverify.data import load_dataset

    data = load_dataset(str(path))
    images = data.x[: args.first].reshape(-1, 3, 32, 32).astype(np.float32)
    labels = data.y[: args.first]
    failed = 0
    print(f"{'file':32} {'correct':>8} {'recorded':>9}")
    for record in RECORD["families"].values():
        for label, entry in record["files"].items():
            model = ZOO / "models" / entry["file"]
            run = tflite_outputs if model.suffix == ".tflite" else onnx_outputs
            correct = int(np.sum(run(model, images).argmax(axis=1) == labels))
            recorded = entry.get(f"correct_first_{args.first}")
            ok = recorded is None or abs(correct - recorded) <= TOLERANCE[label]
            failed += not ok
            print(
                f"{entry['file']:32} {correct:8d} {'' if recorded is None else recorded:>9} {'' if ok else 'MISMATCH'}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
