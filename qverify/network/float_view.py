"""What an int8 model means as a float network: the one place that decides its *float view*.

An int8 model computes on codes; its float view is the float network it stands for, the one every
float format (`--format K.L`, `float`, `half`, `double`), real semantics, `qverify info`,
`qverify convert` and the VNN-COMP runner reason about. The dequantized weights and biases are the
float view's weights; its activations are those the *quantization* implies, which are not always
operators of the file:

- a requantization whose lower clamp is the real value 0 is a ReLU. onnxruntime's quantizer folds
  a ReLU into the output zero point (`Gemm -> Relu -> QuantizeLinear` becomes `Gemm ->
  QuantizeLinear` with zero point -128 for int8, 0 for uint8, since the calibrated range starts at
  0): no Relu node is left, yet every such layer clamps at 0. An explicit Relu before the
  QuantizeLinear is the same clamp (at the output zero point);
- a ReLU clamp whose upper clamp is the real value 6 (within the float32 rounding of the scale) is
  a ReLU6 (a folded `Clip(0, 6)`), and so is a TFLite layer's fused RELU6 that clamps below the
  code maximum (at the code nearest 6, `MacQuant.act_range`);
- any other clamp of the code range (a lower clamp below 0, an upper clamp elsewhere) is the
  saturation of the calibrated range: quantization error, like rounding, not an activation;
- a table after the requantization (QLinearSigmoid) is its function (sigmoid).

Activation operators that the int8 readers do not understand (Clip with other bounds, LeakyRelu,
Tanh, ...) are refused by the readers naming the node, never dropped: a float view always means
what the int8 model computes up to rounding and range saturation.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from qverify.network.model import Activation, Network
from qverify.network.qparams import CodeFunction, JoinQuant, MacQuant

RELU6_TOP = 6.0
_LOOKUP_ACTIVATIONS = {CodeFunction.SIGMOID: Activation.SIGMOID}


def lower_clamp_code(quant: MacQuant) -> int:
    """The smallest code the requantization can write: its zero point under an explicit ReLU,
    else the code range's minimum."""
    out = quant.requantized
    if quant.act_range is not None:
        return quant.act_range[0]
    return out.zero_point if quant.relu else out.code.qmin


def clamps(quant: MacQuant) -> tuple[float, float]:
    """The real values of the requantization's lowest and highest codes (DequantizeLinear, float32)."""
    out = quant.requantized
    top = out.code.qmax if quant.act_range is None else quant.act_range[1]
    low, high = out.dequantize(np.array([lower_clamp_code(quant), top]))
    return float(low), float(high)


def is_relu6_top(high: float) -> bool:
    """Is an upper clamp at `high` the value 6, up to the float32 rounding of a scale 6 / steps
    multiplied back by the steps (a few ulps)?"""
    return abs(high - RELU6_TOP) <= 4 * float(np.spacing(np.float32(RELU6_TOP)))


def implied_activation(quant: MacQuant) -> Activation:
    """The activation a MAC layer's requantization implies in the float view (module docstring); a
    layer with a lookup has the lookup's function (sigmoid), which any clamp before it leaves as it is
    up to saturation."""
    if quant.lookup is not None:
        return _LOOKUP_ACTIVATIONS[quant.lookup.function]
    low, high = clamps(quant)
    if low != 0.0:
        return Activation.IDENTITY
    if (
        quant.fused == "RELU6"
        and quant.act_range is not None
        and quant.act_range[1] < quant.requantized.code.qmax
    ):
        return Activation.RELU6  # TFLite's RELU6 clamps at the code of 6 (rounded), not at 6 exactly
    return Activation.RELU6 if is_relu6_top(high) else Activation.RELU


def implied_join_activation(quant: JoinQuant) -> Activation:
    """The activation a residual Add's output requantization implies in the float view, as a MAC
    layer's does: onnxruntime folds the block's ReLU after the Add into QLinearAdd's output zero
    point (and TFLite into ADD's fused activation), so the codes clamp at the real value 0 with no
    Relu node left. Concat and Permute move codes their producers already clamped: no activation."""
    out = quant.output
    low_code, top_code = quant.act_range or (out.code.qmin, out.code.qmax)
    low, high = (float(v) for v in out.dequantize(np.array([low_code, top_code])))
    if low != 0.0:
        return Activation.IDENTITY
    return Activation.RELU6 if is_relu6_top(high) else Activation.RELU


def describe_implied(quant: MacQuant) -> str:
    """Why the float view has this activation (for `qverify info`)."""
    activation = implied_activation(quant)
    if quant.lookup is not None:
        lookup = quant.lookup
        return f"{activation.value}: the model's table '{lookup.what}' on the requantized codes ({lookup.input.describe()})"
    low, high = clamps(quant)
    if activation is Activation.IDENTITY:
        return f"codes clamp to [{low:.6g}, {high:.6g}]: range saturation, no activation"
    how = (
        f"TFLite's fused {quant.fused}"
        if quant.fused and quant.fused != "NONE"
        else "an explicit Relu"
        if quant.relu
        else f"the output zero point {quant.output.zero_point} is the code minimum"
    )
    top = "and at 6" if activation is Activation.RELU6 else f"(codes saturate at {high:.6g})"
    return f"{activation.value}: {how}, so codes clamp at 0 {top}"


def float_network(net: Network) -> Network:
    """An int8 model's float view as a float network (its int8 parameters dropped): what
    `qverify convert` writes. The layers already carry the implied activations (the int8 readers
    build them with `implied_activation`)."""
    return replace(net, quantization=None) if net.quantization is not None else net
