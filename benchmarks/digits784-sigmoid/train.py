"""Train the sigmoid MLP `digits784_sigmoid.onnx` and write its instances (deterministic).

Run from anywhere with qverify and scikit-learn installed:

    python benchmarks/digits784-sigmoid/train.py

What it does (README.md explains the choices; `../image_suites.py` holds the steps the image
suites share):

1. Loads scikit-learn's digits upsampled to 28x28 as benchmarks/digits784 does (inputs in [0, 1],
   multiples of 1/256), with the `digits` suite's split.
2. Trains an ERAN-style sigmoid MLP, 784-200x3-10 (scikit-learn's MLPClassifier, logistic
   activation, Adam, fixed seed, one BLAS thread); the softmax is dropped (the outputs are logits).
3. Writes it as torch.onnx.export writes `nn.Sequential(Linear, Sigmoid, ..., Linear)` for a
   [1, 784] input (Gemm transB = 1, Sigmoid; opset 13, float32; qverify's writer).
4. Quantizes it to int8 as `qverify quantize --format qop` does (onnxruntime, QOperator: QGemm
   and QLinearSigmoid; per-tensor weights; calibrated on the training images) ->
   `digits784_sigmoid.int8.onnx`.
5. Writes the instances: 8 test images, 4 radii each, two certified by DeepPoly's bounds and two
   falsified by a float attack (`../image_suites.py`) -> `vnnlib/`, `instances.csv`, `suite.toml`
   (formats <16,16>: the sigmoid as qverify's lookup table, and int8: onnxruntime's QLinearSigmoid
   table on codes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.neural_network import MLPClassifier
from threadpoolctl import threadpool_limits

from qverify.io import load_network, write_onnx
from qverify.network import Activation, CodeType
from qverify.quant import ImplementationOptions, Int8Format, quantize_network, simulate
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the shared tools in benchmarks/
from image_suites import build_instances, digits28, suite_text
from training_tools import attack, centre_and_random, sklearn_network

NAME = "digits784-sigmoid"
NETWORK_FILE = "digits784_sigmoid.onnx"
INT8_FILE = "digits784_sigmoid.int8.onnx"
HIDDEN = (200,) * 3
SEED = 0
ALPHA = 1e-4
MAX_ITER = 200
N_IMAGES = 8
TIMEOUT_S = 60
ATTACK_STARTS = centre_and_random(16)
DESCRIPTION = (
    "digits upsampled to 28x28, 784-200x3-10 sigmoid MLP (ERAN-style): L-inf robustness of 8 test images "
    "at 4 radii each, 2 certified by DeepPoly and 2 falsified by an attack (inputs in [0, 1])"
)


def train(x: np.ndarray, y: np.ndarray) -> MLPClassifier:
    model = MLPClassifier(
        hidden_layer_sizes=HIDDEN,
        activation="logistic",
        solver="adam",
        alpha=ALPHA,
        batch_size=64,
        learning_rate_init=1e-3,
        max_iter=MAX_ITER,
        n_iter_no_change=MAX_ITER,
        random_state=SEED,
    )
    return model.fit(x, y)


def suite_file_text() -> str:
    variants = {"int8": ("int8", NETWORK_FILE, INT8_FILE)}
    return suite_text(f"{NAME}/train.py", NAME, DESCRIPTION, ("16.16", "int8"), TIMEOUT_S, (28, 28), variants)


def quantize(net, x_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray) -> None:
    """The int8 model (QOperator, per-tensor weights, int8 codes) and its simulated test accuracy."""
    settings = QuantizeSettings(QuantFormat.QOP, per_channel=False, activations=CodeType.INT8)
    model = quantize_with_onnxruntime(net, x_train, settings, HERE / INT8_FILE)
    qnet = quantize_network(model, ImplementationOptions(Int8Format()))
    predicted = simulate(qnet, qnet.input_quant.quantize(x_test)).outputs.argmax(axis=1)
    print(f"int8 test accuracy (simulator): {int(np.sum(predicted == y_test))}/{len(y_test)}")


def main() -> int:
    data = digits28()
    x, y, train_idx, test_idx = data
    with threadpool_limits(limits=1):
        model = train(x[train_idx], y[train_idx])
        print(f"adam epochs: {model.n_iter_}; final training loss {model.loss_:.4f}")
        path = HERE / NETWORK_FILE
        write_onnx(
            sklearn_network(model, Activation.SIGMOID, "digits784_sigmoid"), path, float32=True, gemm=True
        )
        net = load_network(path)
        quantize(net, x[train_idx], x[test_idx], y[test_idx])

        def falsify(lo: np.ndarray, hi: np.ndarray, label: int, seed: int) -> float:
            return attack(net, lo, hi, label, seed=seed, starts=ATTACK_STARTS)

        built = build_instances(HERE, net, data, falsify, NETWORK_FILE, N_IMAGES, TIMEOUT_S)
    (HERE / "suite.toml").write_text(suite_file_text(), encoding="utf-8")
    print(f"{len(built.instances)} instances")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
