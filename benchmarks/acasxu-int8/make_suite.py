"""Quantize the 45 ACAS Xu networks to int8 and write the `acasxu-int8` suite (deterministic).

Run from anywhere with qverify installed (onnxruntime included):

    python benchmarks/acasxu-int8/make_suite.py

For each network `../acasxu/nnet/ACASXU_run2a_A_B_batch_2000.nnet`, its core (normalised inputs to
normalised outputs, what VNN-LIB's X_i and Y_j name) is quantized with onnxruntime's static
quantizer, as `qverify quantize NET --calibration uniform` does: MinMax calibration on SAMPLES points
drawn uniformly from the network's normalised input domain (the NNet min/max, seed SEED), int8
activations, int8 weights per output channel, QOperator format (QLinearMatMul-free: Gemm -> QGemm).
The models go to `onnx/`; `instances.csv` lists properties 1-4 on every network (the 180 instances
of `../acasxu-phi1-4`, same VNN-LIB files, same timeout). It prints, per network, how often the
int8 model's advisory (argmin of the outputs) agrees with the float network's on TEST_POINTS other
uniform points.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from qverify.io import load_network
from qverify.network import CodeType, evaluate_core
from qverify.quant import ImplementationOptions, Int8Format, quantize_network, simulate
from qverify.quant.calibrate import QuantFormat, QuantizeSettings, quantize_with_onnxruntime, uniform_samples

HERE = Path(__file__).resolve().parent
ACAS = HERE.parent / "acasxu"
SAMPLES = 1000
SEED = 0
TEST_POINTS = 10_000
TIMEOUT_S = 116
PROPERTIES = (1, 2, 3, 4)


def main() -> int:
    (HERE / "onnx").mkdir(exist_ok=True)
    rows, agreements = [], []
    for path in sorted((ACAS / "nnet").glob("ACASXU_run2a_*_batch_2000.nnet")):
        net = load_network(path)
        target = HERE / "onnx" / f"{path.stem}.int8.onnx"
        settings = QuantizeSettings(QuantFormat.QOP, per_channel=True, activations=CodeType.INT8)
        quantized = quantize_with_onnxruntime(net, uniform_samples(net, SAMPLES, SEED), settings, target)
        qnet = quantize_network(quantized, ImplementationOptions(Int8Format()))
        points = uniform_samples(net, TEST_POINTS, SEED + 1)
        float_advice = evaluate_core(net, points).argmin(axis=1)
        int8_advice = simulate(qnet, qnet.input_quant.quantize(points)).outputs.argmin(axis=1)
        agreements.append(float(np.mean(float_advice == int8_advice)))
        print(f"{target.name}: advisory agreement with the float network {agreements[-1]:.2%}")
        rows += [f"onnx/{target.name},../acasxu/vnnlib/prop_{p}.vnnlib,{TIMEOUT_S}" for p in PROPERTIES]
    (HERE / "instances.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"{len(rows)} instances; agreement min {min(agreements):.2%}, mean {np.mean(agreements):.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
