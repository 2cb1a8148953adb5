"""Train the 28x28 average-pool CNN `digits28_avgpool.onnx` and write its suite (deterministic).

Run from anywhere with qverify installed (numpy, scipy, scikit-learn, onnx, onnxruntime):

    python benchmarks/digits28-avgpool/train.py

What it does (README.md explains the choices; `../image_suites.py` and `../conv_training.py` hold
the steps the convolutional suites share):

1. Loads scikit-learn's digits upsampled to 28x28 as benchmarks/digits784 does (inputs in [0, 1],
   multiples of 1/256), with the `digits` suite's split.
2. Trains, in numpy, the average-pool twin of benchmarks/digits28-maxpool (VNN-COMP 2021's
   verivital pair): Conv 32 filters 2x2 (32x27x27) -> ReLU -> AvgPool 4x4 stride 4 with padding 1
   (counted in the divisor, PyTorch's default: 32x7x7) -> Flatten (1568) -> Gemm 1568->10.
3. Writes it as torch.onnx.export writes `nn.Sequential(Conv2d(1, 32, 2), ReLU(), AvgPool2d(4,
   padding=1), Flatten(), Linear(1568, 10))`: the padding becomes a `Pad` node (zeros) before an
   `AveragePool` without pads, the form qverify once refused (issue 29); checks onnxruntime against
   qverify's reading.
4. Writes the instances: 8 test images, 4 radii each, two certified by DeepPoly's bounds and two
   falsified by a float attack (`../image_suites.py`) -> `vnnlib/`, `instances.csv`, `suite.toml`
   (formats <16,16> and int8).
5. Quantizes it with onnxruntime (QOperator, per tensor), calibrated on the first 200 training
   images: calibrated on all of them, the pool gets its input's scale, and a window's mean can then
   be exactly half a code, which onnxruntime's float32 sum rounds up or down depending on the
   window's codes; qverify refuses that model (README.md says more).
   `python benchmarks/digits28-avgpool/train.py --int8-only` redoes this step alone, from the
   trained float model.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from qverify.network import Activation, AveragePool2D, Conv2D, Dense, Network

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the shared tools in benchmarks/
from image_suites import ConvSuite, digits28, requantize_conv_suite, train_conv_suite


def template() -> Network:
    """The architecture (zero weights): what the trainer fills in."""
    conv = Conv2D(np.zeros((32, 1, 2, 2)), np.zeros(32), Activation.RELU, (1, 28, 28))
    pool = AveragePool2D(conv.output_shape, (4, 4), (4, 4), (1, 1, 1, 1), count_include_pad=True)
    dense = Dense(np.zeros((10, pool.n_out)), np.zeros(10), Activation.IDENTITY)
    return Network((conv, pool, dense), name="digits28_avgpool")


SUITE = ConvSuite(
    folder=HERE,
    name="digits28-avgpool",
    template=template(),
    data=digits28,
    description=(
        "digits upsampled to 28x28, conv 32x2x2 + ReLU, avgpool 4x4 padding 1 (a Pad node), dense 1568->10: "
        "L-inf robustness of 8 test images at 4 radii each, 2 certified by DeepPoly and 2 falsified by an attack (inputs in [0, 1])"
    ),
    image_shape=(28, 28),
    epochs=30,
    batch=32,
    rate=0.003,
    decay=1e-3,
    int8=True,
    calibration_images=200,
)

if __name__ == "__main__":
    if sys.argv[1:] == ["--int8-only"]:
        requantize_conv_suite(SUITE)
    else:
        train_conv_suite(SUITE)
