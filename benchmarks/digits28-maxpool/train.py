"""Train the 28x28 max-pool CNN `digits28_maxpool.onnx`, quantize it and write its suite (deterministic).

Run from anywhere with qverify installed (numpy, scipy, scikit-learn, onnx, onnxruntime):

    python benchmarks/digits28-maxpool/train.py

What it does (README.md explains the choices; `../image_suites.py` and `../conv_training.py` hold
the steps the convolutional suites share):

1. Loads scikit-learn's digits upsampled to 28x28 as benchmarks/digits784 does (inputs in [0, 1],
   multiples of 1/256), with the `digits` suite's split.
2. Trains, in numpy, the shape of the smallest convolutional network of VNN-COMP 2021's verivital
   benchmark: Conv 32 filters 2x2 (stride 1, no padding: 32x27x27) -> ReLU -> MaxPool 4x4 stride 4
   (32x6x6) -> Flatten (1152) -> Gemm 1152->10 (logits): minibatch Adam on the cross-entropy with
   an L2 penalty, fixed seeds, one BLAS thread.
3. Writes it as torch.onnx.export writes `nn.Sequential(Conv2d(1, 32, 2), ReLU(), MaxPool2d(4),
   Flatten(), Linear(1152, 10))` (opset 13, float32) and checks onnxruntime against qverify's reading.
4. Quantizes it to int8 as `qverify quantize` does (onnxruntime, QOperator, per-tensor weights,
   calibrated on the training images) -> `digits28_maxpool.int8.onnx`.
5. Writes the instances: 8 test images, 4 radii each, two certified by DeepPoly's bounds and two
   falsified by a float attack (`../image_suites.py`) -> `vnnlib/`, `instances.csv`, `suite.toml`
   (formats <16,16> and int8).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from qverify.network import Activation, Conv2D, Dense, MaxPool2D, Network

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the shared tools in benchmarks/
from image_suites import ConvSuite, digits28, train_conv_suite


def template() -> Network:
    """The architecture (zero weights): what the trainer fills in."""
    conv = Conv2D(np.zeros((32, 1, 2, 2)), np.zeros(32), Activation.RELU, (1, 28, 28))
    pool = MaxPool2D(conv.output_shape, (4, 4), (4, 4))
    dense = Dense(np.zeros((10, pool.n_out)), np.zeros(10), Activation.IDENTITY)
    return Network((conv, pool, dense), name="digits28_maxpool")


SUITE = ConvSuite(
    folder=HERE,
    name="digits28-maxpool",
    template=template(),
    data=digits28,
    description=(
        "digits upsampled to 28x28, conv 32x2x2 + ReLU, maxpool 4x4, dense 1152->10 (verivital's shape): "
        "L-inf robustness of 8 test images at 4 radii each, 2 certified by DeepPoly and 2 falsified by an attack (inputs in [0, 1])"
    ),
    image_shape=(28, 28),
    epochs=30,
    batch=32,
    rate=0.003,
    decay=1e-3,
    int8=True,
)

if __name__ == "__main__":
    train_conv_suite(SUITE)
