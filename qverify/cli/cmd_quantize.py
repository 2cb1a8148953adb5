"""`qverify quantize FLOAT.onnx --calibration DATA -o MODEL.onnx`: static int8 quantization with
onnxruntime's quantizer (QDQ or QOperator), read back and summarised."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from qverify.cli.options import non_negative_int, positive_int
from qverify.errors import InputError
from qverify.vocabulary import BUILT_IN, CodeType, QuantFormat

if TYPE_CHECKING:
    import numpy as np

UNIFORM = "uniform"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quantize",
        help="int8-quantize a float network with onnxruntime (static, calibrated)",
        description="Quantize a float network (NNet or ONNX) to int8 with onnxruntime's static quantizer "
        "and write the quantized ONNX model (QDQ or QOperator). Calibration data are in the network's "
        "raw input units (before its own normalisation).",
    )
    parser.add_argument("network", help="the float network (.onnx or .nnet)")
    parser.add_argument(
        "--calibration",
        required=True,
        metavar="DATA",
        help=f"an .npz (array x) or .npy file, a built-in set ({', '.join(BUILT_IN)}, optionally :train), or "
        f"'{UNIFORM}': uniform samples of the network's input domain",
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="MODEL.onnx", help="the quantized model to write"
    )
    parser.add_argument(
        "--format",
        choices=[f.value for f in QuantFormat],
        default=None,
        help="QDQ (QuantizeLinear/DequantizeLinear around float operators; the default for a chain of "
        "layers) or QOperator (QLinearConv, QGemm, QLinearAdd; the default for a graph, whose QDQ forks "
        "onnxruntime runs in float32)",
    )
    parser.add_argument("--per-channel", action="store_true", help="one weight scale per output channel")
    parser.add_argument(
        "--activations",
        choices=[c.value for c in CodeType],
        default=CodeType.INT8.value,
        help="code type of activations (default int8; weights are always int8, symmetric)",
    )
    parser.add_argument(
        "--reduce-range",
        action="store_true",
        help="7-bit weights (rules out int16 saturation in onnxruntime's x86 kernels without VNNI)",
    )
    parser.add_argument(
        "--samples",
        type=positive_int,
        default=1000,
        metavar="N",
        help="at most N calibration samples (default 1000; a random subset with --seed)",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the sampling (default 0)")
    parser.set_defaults(handler=run)


def _calibration(args: argparse.Namespace, net) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Normalised calibration inputs, their labels (if any) and a description."""
    from qverify.data import load_dataset
    from qverify.input_limits import check_tensor
    from qverify.quant.calibrate import uniform_samples

    if args.calibration == UNIFORM:
        check_tensor((args.samples, net.n_inputs), 8, "--samples")
        return (
            uniform_samples(net, args.samples, args.seed),
            None,
            f"{args.samples} uniform samples of the input domain",
        )
    data = load_dataset(args.calibration)
    data.check_inputs(net.n_inputs)
    data = data.subset(args.samples, args.seed)
    x, y = data.x, data.y
    if net.input_norm is not None:
        x = net.input_norm.apply(x)
    _check_float32(x, data.name)
    return x, y, f"{x.shape[0]} samples of {data.name}"


def _check_float32(x: np.ndarray, name: str) -> None:
    """The float model computes in float32: a calibration value beyond its range would give the
    quantizer infinite ranges and made-up scales (onnxruntime does not refuse them)."""
    import numpy as np

    beyond = np.abs(x) > np.finfo(np.float32).max
    if beyond.any():
        sample, feature = (int(v) for v in np.argwhere(beyond)[0])
        raise InputError(
            f"calibration data {name}: sample {sample}, input {feature} is {x[sample, feature]:.6g} after the "
            "network's normalisation, beyond float32's range (the model computes in float32)"
        )


def _check_output(path: str) -> None:
    if Path(path).suffix.lower() != ".onnx":
        raise InputError(f"-o {path}: quantize writes an ONNX model (QDQ or QOperator): name it MODEL.onnx")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from qverify.io import load_network
    from qverify.network import evaluate_core
    from qverify.quant import ImplementationOptions, Int8Format, Int8Kernel, quantize_network, simulate
    from qverify.quant.calibrate import QuantizeSettings, pair_saturation_risk, quantize_with_onnxruntime

    _check_output(args.output)
    net = load_network(args.network)
    if net.quantization is not None:
        raise InputError(f"{args.network} is already quantized")
    x, labels, description = _calibration(args, net)
    quant_format = (
        QuantFormat(args.format) if args.format else QuantFormat.QDQ if net.is_chain else QuantFormat.QOP
    )
    if args.format is None and not net.is_chain:
        print(
            "note: a graph is written in the QOperator format: onnxruntime runs the float operators of a QDQ "
            "graph's forks unfused, in float32 (qverify.io.onnx_fusion)"
        )
    settings = QuantizeSettings(quant_format, args.per_channel, CodeType(args.activations), args.reduce_range)
    quantized = quantize_with_onnxruntime(net, x, settings, args.output)
    qnet = quantize_network(quantized, ImplementationOptions(Int8Format()))
    print(f"wrote {args.output}: {quantized.quantization.describe()}; calibrated on {description}")
    for index, (layer, quant) in enumerate(zip(quantized.layers, quantized.quantization.layers), start=1):
        scales = getattr(quant, "weight_scales", None)
        weights = "" if scales is None else f", weight scale{'s' if scales.size > 1 else ''} {_span(scales)}"
        print(f"  layer {index}: {layer.describe()}; output {quant.output.describe()}{weights}")
    if labels is not None and labels.max() < net.n_outputs:
        float_pred = np.argmax(evaluate_core(net, x), axis=1)
        int8_pred = np.argmax(simulate(qnet, qnet.input_quant.quantize(x)).outputs, axis=1)
        print(
            f"  accuracy on the calibration samples: float {np.mean(float_pred == labels):.2%}, "
            f"int8 {np.mean(int8_pred == labels):.2%} (agreement {np.mean(float_pred == int8_pred):.2%})"
        )
    risks = pair_saturation_risk(quantized)
    if not risks:
        print(
            "  onnxruntime's x86 kernels without AVX-VNNI compute the same (no weight pair can saturate int16)"
        )
    elif labels is not None and labels.max() < net.n_outputs:
        x86 = quantize_network(quantized, ImplementationOptions(Int8Format(kernel=Int8Kernel.X86)))
        x86_pred = np.argmax(simulate(x86, x86.input_quant.quantize(x)).outputs, axis=1)
        print(f"  int8-x86 (onnxruntime on x86 without AVX-VNNI): accuracy {np.mean(x86_pred == labels):.2%}")
    for warning in risks:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _span(values: np.ndarray) -> str:
    import numpy as np

    values = np.asarray(values)
    if values.size == 1:
        return f"{float(values[0]):.6g}"
    return f"{float(values.min()):.6g}..{float(values.max()):.6g}"
