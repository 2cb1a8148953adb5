"""Train the CIFAR-shaped CNN `digits32rgb_conv.onnx`, quantize it and write its suite (deterministic).

Run from anywhere with qverify installed (numpy, scipy, scikit-learn, onnx, onnxruntime):

    python benchmarks/digits32rgb-conv/train.py

What it does (README.md explains the choices; `../image_suites.py` and `../conv_training.py` hold
the steps the convolutional suites share):

1. Loads scikit-learn's digits as 3x32x32 images (`image_suites.digits32rgb`: the digit zoomed 4x,
   blurred, and inverted on grey, one per channel; values multiples of 1/256 in [0, 1]) with the
   `digits` suite's split. CIFAR-10 is not available offline; the shape and size are what matter.
2. Trains, in numpy, the shape of the standard small CIFAR verification network (the OVAL
   `cifar_base_kw` of VNN-COMP 2021's oval21): Conv 8 filters 4x4 stride 2 padding 1 (8x16x16) ->
   ReLU -> Conv 16 filters 4x4 stride 2 padding 1 (16x8x8) -> ReLU -> Flatten (1024) -> Gemm
   1024->100 -> ReLU -> Gemm 100->10: 105,966 parameters.
3. Writes it as torch.onnx.export writes that nn.Sequential (opset 13, float32) and checks
   onnxruntime against qverify's reading.
4. Quantizes it to int8 as `qverify quantize` does (onnxruntime, QOperator, per-tensor weights,
   calibrated on the training images) -> `digits32rgb_conv.int8.onnx`.
5. Writes the instances: 8 test images, 4 radii each, two certified by DeepPoly's bounds and two
   falsified by a float attack (`../image_suites.py`) -> `vnnlib/`, `instances.csv`, `suite.toml`
   (formats <16,16> and int8).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from qverify.network import Activation, Conv2D, Dense, Network

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the shared tools in benchmarks/
from image_suites import ConvSuite, digits32rgb, train_conv_suite


def template() -> Network:
    """The architecture (zero weights): what the trainer fills in."""
    first = Conv2D(np.zeros((8, 3, 4, 4)), np.zeros(8), Activation.RELU, (3, 32, 32), (2, 2), (1, 1, 1, 1))
    second = Conv2D(
        np.zeros((16, 8, 4, 4)), np.zeros(16), Activation.RELU, first.output_shape, (2, 2), (1, 1, 1, 1)
    )
    hidden = Dense(np.zeros((100, second.n_out)), np.zeros(100), Activation.RELU)
    logits = Dense(np.zeros((10, 100)), np.zeros(10), Activation.IDENTITY)
    return Network((first, second, hidden, logits), name="digits32rgb_conv")


SUITE = ConvSuite(
    folder=HERE,
    name="digits32rgb-conv",
    template=template(),
    data=digits32rgb,
    description=(
        "digits as 3x32x32 images, conv 8x4x4/2 + ReLU, conv 16x4x4/2 + ReLU, dense 1024->100->10 (OVAL's "
        "cifar_base_kw shape, 105,966 parameters): L-inf robustness of 8 test images at 4 radii each, "
        "2 certified by DeepPoly and 2 falsified by an attack (inputs in [0, 1])"
    ),
    image_shape=(3, 32, 32),
    epochs=30,
    batch=32,
    rate=0.002,
    decay=1e-3,
    int8=True,
)

if __name__ == "__main__":
    train_conv_suite(SUITE)
