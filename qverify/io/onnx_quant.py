"""Read int8 quantized ONNX models (QDQ and QOperator formats) into a `Network` with its
`AffineQuantization` (using the `onnx` package only).

Both formats describe the same computation: codes flow between layers; a dense or convolution layer
reads the codes of its input, multiplies them by int8 weights, adds an int32 bias and requantizes
to its output's codes. What is understood, in graph order along the one dynamic tensor:

    QuantizeLinear                                  the graph input's codes (float input -> codes)
    QDQ:  DequantizeLinear -> (Conv | Gemm | MatMul) [Relu] -> QuantizeLinear
          with weights and bias given as DequantizeLinear of int8 / int32 initializers
    QOp:  QLinearConv | QGemm (com.microsoft) | QLinearMatMul
    after a MAC layer's codes, a table on codes (`CodeLookup`): QLinearSigmoid (com.microsoft), or
          DequantizeLinear -> Sigmoid -> QuantizeLinear (which onnxruntime fuses into it)
    either: MaxPool, Flatten, Reshape, Identity on codes (QDQ: between DequantizeLinear and
          QuantizeLinear with the same parameters); AveragePool between DequantizeLinear and
          QuantizeLinear, or QLinearAveragePool (com.microsoft), with quantizations of its own
          (`qverify.quant.pool8` says when its rounding is a function of the window's sum)
    DequantizeLinear                                the graph output (codes -> float output)

Activations must be quantized per tensor; weights symmetric (zero point 0), per tensor or per output
channel; biases int32 with scale input_scale * weight_scale (as onnxruntime's quantizer writes
them). The float layers of the returned `Network` hold the dequantized weights and biases (float32
values, as DequantizeLinear computes them): the model the int8 one approximates. Anything else is
an `UnsupportedError` naming the node; malformed parameters (missing scale, zero point out of
range, NaN or non-positive scale, shape mismatch) are `InputError`s naming the node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from qverify.errors import InputError, UnsupportedError
from qverify.io.files import file_stem
from qverify.network import (
    NETWORK_INPUT,
    Activation,
    Add,
    AffineQuantization,
    AveragePool2D,
    CodeFunction,
    CodeLookup,
    CodeType,
    Concat,
    Conv2D,
    Dense,
    JoinQuant,
    MacQuant,
    MaxPool2D,
    Network,
    Permute,
    PoolQuant,
    QuantForm,
    TensorQuant,
)
from qverify.network.float_view import implied_activation, implied_join_activation

QUANTIZED_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "QGemm",
        "ConvInteger",
        "MatMulInteger",
        "QLinearAdd",
        "QLinearMul",
        "QLinearAveragePool",
        "QLinearGlobalAveragePool",
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearConcat",
        "DynamicQuantizeLinear",
    }
)
_CODE_TYPES = {onnx.TensorProto.INT8: CodeType.INT8, onnx.TensorProto.UINT8: CodeType.UINT8}


def is_quantized(model: onnx.ModelProto) -> bool:
    """Does the graph use quantization operators (so `read_quantized` must read it)?"""
    return any(node.op_type in QUANTIZED_OPS for node in model.graph.node)


@dataclass(frozen=True, slots=True)
class _Constant:
    """A constant tensor: its value and, for the output of a DequantizeLinear of an initializer,
    the integers, scales, zero points and axis it came from."""

    value: np.ndarray
    integers: np.ndarray | None = None
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    axis: int = 1


@dataclass(frozen=True, slots=True)
class _Pending:
    """A layer read from a float operator between DequantizeLinear and QuantizeLinear (QDQ), made
    when the QuantizeLinear states its output codes: what it reads (`producers`, `reads`: the nodes
    and the quantizations of its input codes) and what it computes."""

    node: onnx.NodeProto
    label: str
    kind: str  # "mac", "pool", "lookup", "add" or "concat"
    producers: tuple[int, ...]
    reads: tuple[TensorQuant, ...]
    shape: tuple[int, ...]  # the output tensor's
    layer: object = None
    int_weights: np.ndarray | None = None
    weight_scales: np.ndarray | None = None
    bias: np.ndarray | None = None
    relu: bool = False


@dataclass(frozen=True, slots=True)
class _QTensor:
    """What one dynamic tensor of the graph holds: the codes of node `node` (`NETWORK_INPUT`: of
    the graph input), or their DequantizeLinear (`float_view`, QDQ), or a float operator's result
    waiting for its QuantizeLinear (`pending`); `codes` is None only for the float graph input.
    `shared`: the codes are read by more than one node (a table may not be fused into their layer)."""

    shape: tuple[int, ...]
    node: int
    codes: TensorQuant | None
    float_view: bool = False
    pending: _Pending | None = None
    shared: bool = False
    input_order: np.ndarray | None = None  # the float graph input transposed before its QuantizeLinear
    softmax: bool = False  # a final (QLinear)Softmax's output: the logits' codes, the Softmax dropped


@dataclass(slots=True)
class _Reader:
    """Walks the live nodes of one quantized graph in topological order, one `_QTensor` per
    dynamic tensor; lives for one `read_quantized` call."""

    where: str
    constants: dict[str, _Constant]
    readers: dict[str, int]
    unfused: frozenset[str]  # outputs of the float operators onnxruntime runs unfused (`onnx_fusion`)
    tensors: dict[str, _QTensor] = field(default_factory=dict)
    input_quant: TensorQuant | None = None
    layers: list = field(default_factory=list)
    quants: list = field(default_factory=list)
    wiring: list = field(default_factory=list)
    origin: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    # -- helpers ---------------------------------------------------------------------------------

    def describe(self, node: onnx.NodeProto, label: str) -> str:
        return f"{self.where}: ONNX node '{label}' ({node.op_type})"

    def fail(self, node: onnx.NodeProto, label: str, what: str) -> InputError:
        return InputError(f"{self.describe(node, label)} {what}")

    def unsupported(self, node: onnx.NodeProto, label: str, what: str) -> UnsupportedError:
        return UnsupportedError(f"{self.describe(node, label)} {what}")

    def constant(self, node: onnx.NodeProto, label: str, index: int, what: str) -> _Constant:
        names = node.input
        if index >= len(names) or not names[index]:
            raise self.fail(node, label, f"has no {what} (input {index})")
        found = self.constants.get(names[index])
        if found is None:
            raise self.unsupported(node, label, f"has a non-constant {what} '{names[index]}'")
        return found

    def attribute(self, node: onnx.NodeProto, name: str, default):
        for attribute in node.attribute:
            if attribute.name == name:
                return onnx.helper.get_attribute_value(attribute)
        return default

    def tensor_quant(
        self, node: onnx.NodeProto, label: str, scale_index: int, zero_index: int, what: str
    ) -> TensorQuant:
        """Per-tensor scale and zero point of an activation (inputs of `node` at the two indices)."""
        scale = self.constant(node, label, scale_index, f"{what} scale").value
        if scale.dtype.kind != "f":
            raise self.fail(
                node,
                label,
                f"has a {what} scale '{node.input[scale_index]}' of type {scale.dtype}; scales are float",
            )
        if scale.size != 1:
            raise self.unsupported(
                node, label, f"quantizes its {what} per axis; only per-tensor activations are supported"
            )
        if zero_index >= len(node.input) or not node.input[zero_index]:
            raise self.fail(node, label, f"has no {what} zero point (uint8 defaults are not assumed)")
        zero = self.constant(node, label, zero_index, f"{what} zero point").value
        if zero.size != 1:
            raise self.unsupported(node, label, f"has a per-axis {what} zero point")
        code = _CODE_TYPES.get(_dtype_code(zero.dtype))
        if code is None:
            raise self.unsupported(
                node, label, f"has {what} codes of type {zero.dtype}; int8 and uint8 are supported"
            )
        value = float(scale.reshape(-1)[0])
        if not math.isfinite(value) or value <= 0:
            raise self.fail(node, label, f"has a {what} scale {value!r}: it must be positive and finite")
        try:
            return TensorQuant(value, int(zero.reshape(-1)[0]), code, f"{label} {what}")
        except InputError as error:
            raise self.fail(node, label, str(error)) from None

    def weights(
        self,
        node: onnx.NodeProto,
        label: str,
        integers: np.ndarray,
        scale: np.ndarray,
        zero: np.ndarray,
        channel_axis: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """int8 weights and one scale per output channel (or one), checked symmetric."""
        if integers.dtype != np.int8:
            raise self.unsupported(node, label, f"has {integers.dtype} weights; int8 weights are supported")
        scale = np.asarray(scale, dtype=np.float32).reshape(-1)
        zero = np.asarray(zero).reshape(-1)
        channels = integers.shape[channel_axis]
        if scale.size not in (1, channels):
            raise self.fail(
                node, label, f"shape mismatch: {scale.size} weight scales for {channels} output channels"
            )
        if np.any(~np.isfinite(scale)) or np.any(scale <= 0):
            raise self.fail(node, label, "has a weight scale that is not positive and finite")
        if zero.size and np.any(zero != 0):
            raise self.unsupported(
                node, label, "has non-zero weight zero points; symmetric weights are supported"
            )
        return integers, scale.astype(np.float64)

    def bias(
        self,
        node: onnx.NodeProto,
        label: str,
        integers: np.ndarray | None,
        channels: int,
        input_scale: float,
        weight_scales: np.ndarray,
        stated_scale: np.ndarray | None,
    ) -> np.ndarray:
        """int32 bias per output channel (zeros when absent), its scale checked against s_in * s_w."""
        if integers is None:
            return np.zeros(channels, dtype=np.int64)
        if integers.dtype != np.int32:
            raise self.unsupported(node, label, f"has a {integers.dtype} bias; int32 biases are supported")
        integers = integers.reshape(-1)
        if integers.size != channels:
            raise self.fail(
                node, label, f"shape mismatch: {integers.size} biases for {channels} output channels"
            )
        if stated_scale is not None:
            with np.errstate(over="ignore"):
                expected = (np.float32(input_scale) * weight_scales.astype(np.float32)).astype(np.float32)
            stated = np.asarray(stated_scale, dtype=np.float32).reshape(-1)
            if stated.size not in (1, expected.size):
                raise self.fail(
                    node, label, f"has {stated.size} bias scales for {expected.size} output channels"
                )
            stated = np.broadcast_to(stated, expected.shape)
            if np.any(stated != expected):
                channel = int(np.argmax(stated != expected))
                raise self.unsupported(
                    node,
                    label,
                    f"has a bias scale {float(stated[channel]):.9g} (output channel {channel}) other than input "
                    f"scale {input_scale:.9g} * weight scale {float(weight_scales[channel]):.9g} = "
                    f"{float(expected[channel]):.9g}; not supported",
                )
        return integers.astype(np.int64)

    # -- the walk --------------------------------------------------------------------------------

    def feed(self, node: onnx.NodeProto, label: str, dynamic: list[str]) -> None:
        """Read one node: its dynamic inputs' states in, its output's state out."""
        op = node.op_type
        handler = {
            "QuantizeLinear": self.quantize,
            "DequantizeLinear": self.dequantize,
            "QLinearConv": self.qlinear_conv,
            "QGemm": self.qgemm,
            "QLinearMatMul": self.qlinear_matmul,
            "Conv": self.float_conv,
            "Gemm": self.float_gemm,
            "MatMul": self.float_matmul,
            "Relu": self.relu,
            "QLinearSigmoid": self.qlinear_sigmoid,
            "Sigmoid": self.float_sigmoid,
            "MaxPool": self.pool,
            "QLinearAveragePool": self.qlinear_average_pool,
            "QLinearGlobalAveragePool": self.qlinear_average_pool,
            "AveragePool": self.pool,
            "GlobalAveragePool": self.pool,
            "Add": self.float_add,
            "QLinearAdd": self.qlinear_add,
            "Concat": self.float_concat,
            "QLinearConcat": self.qlinear_concat,
            "Flatten": self.flatten,
            "Reshape": self.reshape,
            "Identity": self.identity,
            "Transpose": self.transpose,
            "Softmax": self.softmax,
            "QLinearSoftmax": self.softmax,
        }.get(op)
        if handler is None or node.domain not in ("", "ai.onnx", "com.microsoft"):
            raise self.unsupported(node, label, "is not supported in a quantized model")
        inputs = [self.tensors[name] for name in dynamic]
        if any(tensor.softmax for tensor in inputs) and op not in _AFTER_SOFTMAX:
            raise self.unsupported(
                node, label, "reads a Softmax's output; a Softmax is supported (dropped) at the output only"
            )
        expected = len(dynamic) if op in ("Add", "QLinearAdd", "Concat", "QLinearConcat") else 1
        if len(inputs) != expected or not inputs:
            raise self.unsupported(
                node, label, f"reads {len(inputs)} dynamic tensors {dynamic}; it is supported on one"
            )
        result = handler(node, label, inputs)
        name = node.output[0]
        self.tensors[name] = replace(result, shared=result.shared or self.readers.get(name, 0) > 1)

    def quantize(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        quant = self.tensor_quant(node, label, 1, 2, "output")
        if tensor.codes is None:  # the graph input
            if self.input_quant is not None and not quant.same_as(self.input_quant):
                raise self.unsupported(node, label, "quantizes the graph input a second time, otherwise")
            self.input_quant = quant
            codes = _QTensor(tensor.shape, NETWORK_INPUT, quant)
            if tensor.input_order is None:
                return codes
            return self.permuted(node, label, codes, tensor.input_order, tensor.shape)
        if tensor.pending is not None:
            return self.finish_pending(tensor.pending, quant)
        if tensor.softmax and tensor.float_view:  # QDQ's Softmax -> QuantizeLinear: the logits' codes stay
            return replace(tensor, float_view=False)
        if tensor.float_view and quant.same_as(tensor.codes):
            return replace(tensor, float_view=False)  # Q(DQ(codes)) with the same parameters
        raise self.unsupported(
            node, label, "requantizes codes without a layer in between (only Q(DQ(x)) with equal parameters)"
        )

    def dequantize(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        if tensor.codes is None or tensor.float_view or tensor.pending is not None:
            raise self.unsupported(node, label, "does not dequantize the codes of a layer")
        quant = self.tensor_quant(node, label, 1, 2, "input")
        if not quant.same_as(tensor.codes) and not tensor.softmax:
            raise self.fail(
                node, label, f"dequantizes with {quant.describe()} codes written as {tensor.codes.describe()}"
            )
        return replace(tensor, float_view=True)

    def need_codes(self, node: onnx.NodeProto, label: str, tensor: _QTensor) -> TensorQuant:
        if tensor.codes is None or tensor.float_view or tensor.pending is not None:
            raise self.unsupported(node, label, "needs quantized codes as its input here")
        return tensor.codes

    def need_float_view(self, node: onnx.NodeProto, label: str, tensor: _QTensor) -> TensorQuant:
        if tensor.codes is None or not tensor.float_view or tensor.pending is not None:
            raise self.unsupported(
                node, label, "is a float operator outside a DequantizeLinear -> op -> QuantizeLinear group"
            )
        return tensor.codes

    def stated_input(
        self, node: onnx.NodeProto, label: str, tensor: _QTensor, scale: int, zero: int
    ) -> TensorQuant:
        """A QOperator's input codes, its stated input quantization checked against them."""
        codes = self.need_codes(node, label, tensor)
        if not self.tensor_quant(node, label, scale, zero, "input").same_as(codes):
            raise self.fail(node, label, "input quantization differs from the codes it reads")
        return codes

    # QOperator layers

    def qlinear_conv(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        input_quant = self.stated_input(node, label, tensor, 1, 2)
        kernel = self.constant(node, label, 3, "weight").value
        w_scale = self.constant(node, label, 4, "weight scale").value
        w_zero = self.constant(node, label, 5, "weight zero point").value
        output = self.tensor_quant(node, label, 6, 7, "output")
        integers, scales = self.weights(node, label, kernel, w_scale, w_zero, 0)
        bias_int = (
            self.constant(node, label, 8, "bias").value if len(node.input) > 8 and node.input[8] else None
        )
        bias = self.bias(node, label, bias_int, integers.shape[0], input_quant.scale, scales, None)
        layer, shape = self.conv_layer(node, label, tensor.shape, integers, scales, bias, input_quant.scale)
        self.origin.add("QOperator")
        quant = MacQuant(input_quant, integers, scales, bias, output, False, label, QuantForm.QOPERATOR)
        return self.add_mac(layer, quant, tensor.node, shape)

    def qgemm(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        if self.attribute(node, "transA", 0):
            raise self.unsupported(node, label, "with transA=1 is not supported")
        if float(self.attribute(node, "alpha", 1.0)) != 1.0:
            raise self.unsupported(node, label, "with alpha != 1 is not supported")
        input_quant = self.stated_input(node, label, tensor, 1, 2)
        matrix = self.constant(node, label, 3, "weight").value
        if len(node.input) < 9 or not node.input[7]:
            raise self.unsupported(node, label, "without an output scale (float output) is not supported")
        trans_b = bool(self.attribute(node, "transB", 0))
        w_scale = self.constant(node, label, 4, "weight scale").value
        w_zero = self.constant(node, label, 5, "weight zero point").value
        integers, scales = self.weights(node, label, matrix, w_scale, w_zero, 0 if trans_b else 1)
        integers = integers if trans_b else integers.T
        output = self.tensor_quant(node, label, 7, 8, "output")
        bias_int = self.constant(node, label, 6, "bias").value if node.input[6] else None
        bias = self.bias(node, label, bias_int, integers.shape[0], input_quant.scale, scales, None)
        layer, shape = self.dense_layer(node, label, tensor.shape, integers, scales, bias, input_quant.scale)
        self.origin.add("QOperator")
        quant = MacQuant(input_quant, integers, scales, bias, output, False, label, QuantForm.QOPERATOR)
        return self.add_mac(layer, quant, tensor.node, shape)

    def qlinear_matmul(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        input_quant = self.stated_input(node, label, tensor, 1, 2)
        matrix = self.constant(node, label, 3, "weight").value
        w_scale = self.constant(node, label, 4, "weight scale").value
        w_zero = self.constant(node, label, 5, "weight zero point").value
        integers, scales = self.weights(node, label, matrix, w_scale, w_zero, 1)
        output = self.tensor_quant(node, label, 6, 7, "output")
        bias = np.zeros(integers.shape[1], dtype=np.int64)
        layer, shape = self.dense_layer(
            node, label, tensor.shape, integers.T, scales, bias, input_quant.scale
        )
        self.origin.add("QOperator")
        quant = MacQuant(input_quant, integers.T, scales, bias, output, False, label, QuantForm.QOPERATOR)
        return self.add_mac(layer, quant, tensor.node, shape)

    def lookup_target(self, node: onnx.NodeProto, label: str, tensor: _QTensor) -> MacQuant:
        """The MAC layer whose codes a table reads: a MAC without a table yet, whose codes nothing
        else reads (the table becomes part of that layer)."""
        quant = self.quants[tensor.node] if tensor.node >= 0 else None
        if not isinstance(quant, MacQuant) or quant.lookup is not None:
            raise self.unsupported(
                node, label, "is supported only on the codes of a dense or convolution layer"
            )
        if tensor.shared:
            raise self.unsupported(
                node,
                label,
                "reads codes that another node reads too; a table is supported on a layer's only reader",
            )
        return quant

    def qlinear_sigmoid(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        self.stated_input(node, label, tensor, 1, 2)
        self.lookup_target(node, label, tensor)
        self.origin.add("QOperator")
        return self.add_lookup(node, label, tensor, self.tensor_quant(node, label, 3, 4, "output"))

    def float_sigmoid(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        codes = self.need_float_view(node, label, tensor)
        self.lookup_target(node, label, tensor)
        self.refuse_unfused(node, label)
        self.origin.add("QDQ")
        pending = _Pending(node, label, "lookup", (tensor.node,), (codes,), tensor.shape)
        return replace(tensor, float_view=False, pending=pending)

    def add_lookup(self, node: onnx.NodeProto, label: str, tensor: _QTensor, output: TensorQuant) -> _QTensor:
        """A MAC layer followed by a table on its codes: its float view gets the function."""
        index = tensor.node
        quant = self.quants[index]
        if output.code is not quant.output.code:
            raise self.fail(
                node,
                label,
                f"reads {quant.output.code.value} codes and writes {output.code.value} codes; a table maps "
                "codes of one type",
            )
        self.quants[index] = replace(
            quant, output=output, lookup=CodeLookup(CodeFunction.SIGMOID, quant.output, label)
        )
        self.layers[index] = _with_activation(self.layers[index], implied_activation(self.quants[index]))
        return _QTensor(tensor.shape, index, output)

    # QDQ layers

    def dq_constant(self, node: onnx.NodeProto, label: str, index: int, what: str) -> _Constant:
        found = self.constant(node, label, index, what)
        if found.integers is None:
            raise self.unsupported(
                node,
                label,
                f"has a float {what}; a quantized model needs DequantizeLinear of an integer {what}",
            )
        return found

    def refuse_unfused(self, node: onnx.NodeProto, label: str) -> None:
        """A float operator onnxruntime runs as such, not as the quantized kernel its group states."""
        if node.output[0] in self.unfused:
            raise self.unsupported(
                node,
                label,
                "is run by onnxruntime in float32, not fused with its DequantizeLinear/QuantizeLinear "
                "into a quantized kernel (typically: its DequantizeLinear input is read by other nodes "
                "too, as at a residual fork); qverify does not state a float32 "
                f"{node.op_type} inside an int8 model bit for bit. Export the model in the QOperator "
                "format (onnxruntime's quantize_static(quant_format=QuantFormat.QOperator), or "
                "`qverify quantize --format QOperator`)",
            )

    def float_mac(self, node, label, tensor: _QTensor, layer, shape, integers, scales, bias) -> _QTensor:
        codes = self.need_float_view(node, label, tensor)
        self.refuse_unfused(node, label)
        pending = _Pending(node, label, "mac", (tensor.node,), (codes,), shape, layer, integers, scales, bias)
        self.origin.add("QDQ")
        return _QTensor(shape, tensor.node, codes, pending=pending)

    def float_conv(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        input_quant = self.need_float_view(node, label, tensor)
        weight = self.dq_constant(node, label, 1, "weight")
        if weight.value.ndim != 4:
            raise self.unsupported(node, label, "is not a 2-D convolution")
        integers, scales = self.weights(node, label, weight.integers, weight.scale, weight.zero_point, 0)
        if weight.scale.size > 1 and weight.axis not in (0, -4):
            raise self.unsupported(
                node, label, f"has weights quantized along axis {weight.axis}, not the output channels"
            )
        bias = self.dq_bias(node, label, integers.shape[0], input_quant.scale, scales)
        self.check_kernel_attributes(node, label, integers.shape[2:])
        layer, shape = self.conv_layer(node, label, tensor.shape, integers, scales, bias, input_quant.scale)
        return self.float_mac(node, label, tensor, layer, shape, integers, scales, bias)

    def dq_bias(
        self, node: onnx.NodeProto, label: str, n_out: int, input_scale: float, scales: np.ndarray
    ) -> np.ndarray:
        """The int32 bias of a QDQ conv/gemm: its DequantizeLinear'd third input, or zeros."""
        const = self.dq_constant(node, label, 2, "bias") if len(node.input) > 2 and node.input[2] else None
        return self.bias(
            node,
            label,
            None if const is None else const.integers,
            n_out,
            input_scale,
            scales,
            None if const is None else const.scale,
        )

    def float_gemm(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        input_quant = self.need_float_view(node, label, tensor)
        if self.attribute(node, "transA", 0):
            raise self.unsupported(node, label, "with transA=1 is not supported")
        if (
            float(self.attribute(node, "alpha", 1.0)) != 1.0
            or float(self.attribute(node, "beta", 1.0)) != 1.0
        ):
            raise self.unsupported(node, label, "with alpha or beta != 1 is not supported")
        trans_b = bool(self.attribute(node, "transB", 0))
        weight = self.dq_constant(node, label, 1, "weight")
        channel_axis = 0 if trans_b else 1
        if weight.scale.size > 1 and weight.axis % 2 != channel_axis:
            raise self.unsupported(node, label, "has weights quantized along the input axis")
        integers, scales = self.weights(
            node, label, weight.integers, weight.scale, weight.zero_point, channel_axis
        )
        integers = integers if trans_b else integers.T
        bias = self.dq_bias(node, label, integers.shape[0], input_quant.scale, scales)
        layer, shape = self.dense_layer(node, label, tensor.shape, integers, scales, bias, input_quant.scale)
        return self.float_mac(node, label, tensor, layer, shape, integers, scales, bias)

    def float_matmul(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        input_quant = self.need_float_view(node, label, tensor)
        weight = self.dq_constant(node, label, 1, "weight")
        if weight.value.ndim != 2:
            raise self.unsupported(node, label, "needs a weight matrix")
        if weight.scale.size > 1 and weight.axis % 2 != 1:
            raise self.unsupported(node, label, "has weights quantized along the input axis")
        integers, scales = self.weights(node, label, weight.integers, weight.scale, weight.zero_point, 1)
        bias = np.zeros(integers.shape[1], dtype=np.int64)
        layer, shape = self.dense_layer(
            node, label, tensor.shape, integers.T, scales, bias, input_quant.scale
        )
        return self.float_mac(node, label, tensor, layer, shape, integers.T, scales, bias)

    def relu(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        pending = tensor.pending
        if pending is None or pending.kind != "mac" or pending.relu:
            raise self.unsupported(
                node, label, "is supported only between a convolution or dense layer and its QuantizeLinear"
            )
        return replace(tensor, pending=replace(pending, relu=True))

    def finish_pending(self, pending: _Pending, output: TensorQuant) -> _QTensor:
        """The QuantizeLinear after a QDQ group: the node it states."""
        if pending.kind == "lookup":
            return self.add_lookup(
                pending.node,
                pending.label,
                _QTensor(pending.shape, pending.producers[0], pending.reads[0]),
                output,
            )
        float_path = pending.node.output[0] in self.unfused
        if pending.kind == "pool":
            quant = PoolQuant(pending.reads[0], output, pending.label, float_path)
            return self.add_node(pending.layer, quant, pending)
        if pending.kind in ("add", "concat"):
            quant = JoinQuant(pending.reads, output, pending.label, float_path=float_path)
            return self.add_node(pending.layer, quant, pending)
        quant = MacQuant(
            pending.reads[0],
            pending.int_weights,
            pending.weight_scales,
            pending.bias,
            output,
            pending.relu,
            pending.label,
        )
        return self.add_mac(pending.layer, quant, pending.producers[0], pending.shape)

    # joins

    def join_shapes(self, node: onnx.NodeProto, label: str, tensors: list[_QTensor]) -> list[tuple[int, ...]]:
        """The joined tensors' shapes, each without its batch dimension of 1."""
        shapes = []
        for tensor in tensors:
            if not tensor.shape or tensor.shape[0] != 1:
                raise self.unsupported(
                    node, label, f"joins a tensor of shape {tensor.shape}; batch 1 is supported"
                )
            shapes.append(tensor.shape[1:])
        return shapes

    def add_layer(
        self, node: onnx.NodeProto, label: str, tensors: list[_QTensor]
    ) -> tuple[Add, tuple[int, ...]]:
        shapes = self.join_shapes(node, label, tensors)
        if len(set(shapes)) != 1 or len(tensors) != 2:
            raise self.fail(
                node, label, f"shape mismatch: adds tensors of shapes {[t.shape for t in tensors]}"
            )
        return Add(shapes[0], 2), tensors[0].shape

    def concat_layer(
        self, node: onnx.NodeProto, label: str, tensors: list[_QTensor]
    ) -> tuple[Concat, tuple[int, ...]]:
        shapes = self.join_shapes(node, label, tensors)
        rank = len(tensors[0].shape)
        axis = int(self.attribute(node, "axis", 1))
        axis = axis + rank if axis < 0 else axis
        channel = rank == 4 and axis == 1
        feature = rank == 2 and axis == 1
        if not (channel or feature) or any(len(t.shape) != rank for t in tensors):
            raise self.unsupported(
                node,
                label,
                f"concatenates along axis {axis} of shapes {[t.shape for t in tensors]}; only the channel "
                "axis of NCHW images or the feature axis of vectors is supported",
            )
        try:
            layer = Concat(tuple(shapes))
        except InputError as error:
            raise self.fail(node, label, str(error)) from None
        return layer, (1, *layer.output_shape)

    def float_add(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        if any(name in self.constants for name in node.input):
            raise self.unsupported(
                node, label, "adds a constant to codes; a quantized Add of two tensors is supported"
            )
        reads = tuple(self.need_float_view(node, label, tensor) for tensor in inputs)
        layer, shape = self.add_layer(node, label, inputs)
        self.origin.add("QDQ")
        pending = _Pending(node, label, "add", tuple(t.node for t in inputs), reads, shape, layer)
        return _QTensor(shape, inputs[0].node, reads[0], pending=pending)

    def qlinear_add(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        if [name for name in node.input if name not in self.constants] != [node.input[0], node.input[3]]:
            raise self.unsupported(node, label, "reads other dynamic tensors than its inputs A and B")
        reads = (
            self.stated_input(node, label, inputs[0], 1, 2),
            self.stated_input(node, label, inputs[1], 4, 5),
        )
        layer, shape = self.add_layer(node, label, inputs)
        output = self.tensor_quant(node, label, 6, 7, "output")
        self.origin.add("QOperator")
        quant = JoinQuant(reads, output, label, QuantForm.QOPERATOR)
        return self.add_node(
            layer, quant, _Pending(node, label, "add", tuple(t.node for t in inputs), reads, shape)
        )

    def float_concat(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        if len(inputs) != len(node.input):
            raise self.unsupported(node, label, "concatenates constants with tensors, which is not supported")
        reads = tuple(self.need_float_view(node, label, tensor) for tensor in inputs)
        if len(inputs) == 1:
            return inputs[0]
        layer, shape = self.concat_layer(node, label, inputs)
        self.origin.add("QDQ")
        pending = _Pending(node, label, "concat", tuple(t.node for t in inputs), reads, shape, layer)
        return _QTensor(shape, inputs[0].node, reads[0], pending=pending)

    def qlinear_concat(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        names = list(node.input)
        if (
            len(names) < 5
            or (len(names) - 2) % 3
            or names[2::3] != [t for t in names if t not in self.constants]
        ):
            raise self.fail(
                node, label, "has inputs other than Y_scale, Y_zero_point and (X, scale, zero point) triples"
            )
        output = self.tensor_quant(node, label, 0, 1, "output")
        reads = tuple(
            self.stated_input(node, label, tensor, 3 + 3 * slot, 4 + 3 * slot)
            for slot, tensor in enumerate(inputs)
        )
        self.origin.add("QOperator")
        if len(inputs) == 1:
            if not reads[0].same_as(output):
                raise self.unsupported(node, label, "requantizes one tensor; not supported")
            return inputs[0]
        layer, shape = self.concat_layer(node, label, inputs)
        quant = JoinQuant(reads, output, label, QuantForm.QOPERATOR)
        return self.add_node(
            layer, quant, _Pending(node, label, "concat", tuple(t.node for t in inputs), reads, shape)
        )

    # layers shared by both formats

    def check_kernel_attributes(self, node: onnx.NodeProto, label: str, kernel: tuple[int, ...]) -> None:
        declared = tuple(self.attribute(node, "kernel_shape", list(kernel)))
        if declared != tuple(kernel):
            raise self.fail(
                node, label, f"shape mismatch: kernel_shape {list(declared)} but weights {tuple(kernel)}"
            )

    def image(self, node: onnx.NodeProto, label: str, shape: tuple[int, ...]) -> tuple[int, int, int]:
        if len(shape) != 4 or shape[0] != 1:
            raise self.unsupported(node, label, f"needs an NCHW input of batch 1, got shape {shape}")
        return shape[1], shape[2], shape[3]

    def geometry(self, node: onnx.NodeProto, label: str, kernel: tuple[int, int]) -> dict:
        auto_pad = self.attribute(node, "auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        if auto_pad != "NOTSET" and any(attribute.name == "pads" for attribute in node.attribute):
            raise self.fail(
                node,
                label,
                f"has both auto_pad {auto_pad} and a pads attribute: ONNX allows one or the "
                "other (onnxruntime refuses the file)",
            )
        if auto_pad not in ("NOTSET", "VALID"):
            raise self.unsupported(node, label, "with auto_pad SAME_* is not supported in quantized models")
        if any(v != 1 for v in self.attribute(node, "dilations", [1, 1])):
            raise self.unsupported(node, label, "with dilations is not supported")
        strides = tuple(self.attribute(node, "strides", [1, 1]))
        pads = tuple(self.attribute(node, "pads", [0, 0, 0, 0]))
        if len(strides) != 2 or len(pads) != 4:
            raise self.fail(
                node, label, f"has strides {list(strides)} / pads {list(pads)} of the wrong length"
            )
        return {"strides": strides, "pads": pads}

    def dequantized(self, node, label, integers, scales, bias, input_scale) -> tuple[np.ndarray, np.ndarray]:
        """`_dequantized`, its refusal naming the node."""
        try:
            return _dequantized(integers, scales, bias, input_scale, 0)
        except InputError as error:
            raise self.fail(node, label, str(error)) from None

    def conv_layer(
        self, node, label, shape, integers, scales, bias, input_scale
    ) -> tuple[Conv2D, tuple[int, ...]]:
        image = self.image(node, label, shape)
        geometry = self.geometry(node, label, tuple(integers.shape[2:]))
        weights, float_bias = self.dequantized(node, label, integers, scales, bias, input_scale)
        try:
            layer = Conv2D(
                weights,
                float_bias,
                Activation.IDENTITY,
                image,
                groups=int(self.attribute(node, "group", 1)),
                **geometry,
            )
        except InputError as error:
            raise self.fail(node, label, f"has invalid parameters: {error}") from None
        return layer, (1, *layer.output_shape)

    def dense_layer(
        self, node, label, shape, integers, scales, bias, input_scale
    ) -> tuple[Dense, tuple[int, ...]]:
        if not shape or any(dim != 1 for dim in shape[:-1]):
            raise self.unsupported(node, label, f"needs a vector input, got shape {shape}")
        if integers.shape[1] != shape[-1]:
            raise self.fail(
                node,
                label,
                f"shape mismatch: weights expect {integers.shape[1]} inputs, the tensor has {shape[-1]}",
            )
        weights, float_bias = self.dequantized(node, label, integers, scales, bias, input_scale)
        return Dense(weights, float_bias, Activation.IDENTITY), (*shape[:-1], integers.shape[0])

    def add_node(self, layer, quant, pending: _Pending) -> _QTensor:
        """A node reading `pending.producers`, its codes quantized as `quant.output` (an Add with
        the activation its output requantization implies: `implied_join_activation`)."""
        if isinstance(layer, Add):
            layer = Add(layer.shape, layer.count, implied_join_activation(quant))
        return self.append(layer, quant, pending.producers, pending.shape)

    def add_mac(self, layer, quant: MacQuant, producer: int, shape: tuple[int, ...]) -> _QTensor:
        """The layer with the activation its requantization implies (`qverify.network.float_view`)."""
        return self.append(_with_activation(layer, implied_activation(quant)), quant, (producer,), shape)

    def append(self, layer, quant, producers: tuple[int, ...], shape: tuple[int, ...]) -> _QTensor:
        """The next node of the network: its layer, quantization and producers; its output's codes."""
        self.layers.append(layer)
        self.quants.append(quant)
        self.wiring.append(producers)
        return _QTensor(shape, len(self.layers) - 1, quant.output)

    def qlinear_average_pool(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        input_quant = self.stated_input(node, label, tensor, 1, 2)
        if self.attribute(node, "channels_last", 0):
            raise self.unsupported(node, label, "with channels_last=1 is not supported")
        output = self.tensor_quant(node, label, 3, 4, "output")
        layer, shape = self.pool_layer(node, label, tensor.shape)
        self.origin.add("QOperator")
        pending = _Pending(node, label, "pool", (tensor.node,), (input_quant,), shape)
        return self.add_node(layer, PoolQuant(input_quant, output, label), pending)

    def pool(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        qdq = tensor.float_view
        quant = self.need_float_view(node, label, tensor) if qdq else self.need_codes(node, label, tensor)
        layer, shape = self.pool_layer(node, label, tensor.shape)
        pending = _Pending(node, label, "pool", (tensor.node,), (quant,), shape, layer)
        if qdq:
            return _QTensor(shape, tensor.node, quant, pending=pending)
        return self.add_node(layer, PoolQuant(quant, quant, label), pending)

    def pool_layer(
        self, node: onnx.NodeProto, label: str, shape: tuple[int, ...]
    ) -> tuple[MaxPool2D | AveragePool2D, tuple[int, ...]]:
        """The pooling layer a MaxPool, AveragePool, GlobalAveragePool or QLinear(Global)AveragePool
        states."""
        image = self.image(node, label, shape)
        if node.op_type in ("GlobalAveragePool", "QLinearGlobalAveragePool"):
            kernel, geometry = (image[1], image[2]), {"strides": (1, 1), "pads": (0, 0, 0, 0)}
        else:
            kernel = tuple(self.attribute(node, "kernel_shape", []))
            if len(kernel) != 2:
                raise self.fail(node, label, f"has kernel_shape {list(kernel)}; two sizes expected")
            if self.attribute(node, "ceil_mode", 0):
                raise self.unsupported(node, label, "with ceil_mode=1 is not supported")
            geometry = self.geometry(node, label, kernel)
        try:
            if node.op_type == "MaxPool":
                layer = MaxPool2D(image, kernel, **geometry)
            else:
                layer = AveragePool2D(
                    image,
                    kernel,
                    count_include_pad=bool(self.attribute(node, "count_include_pad", 0)),
                    **geometry,
                )
        except InputError as error:
            raise self.fail(node, label, f"has invalid parameters: {error}") from None
        return layer, (1, *layer.output_shape)

    def reshaped(
        self, node: onnx.NodeProto, label: str, tensor: _QTensor, shape: tuple[int, ...]
    ) -> _QTensor:
        if tensor.pending is not None:
            raise self.unsupported(node, label, "reshapes a float result before its QuantizeLinear")
        return replace(tensor, shape=shape)

    def flatten(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        axis = int(self.attribute(node, "axis", 1))
        rank = len(tensor.shape)
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis <= rank:
            raise self.fail(node, label, f"has axis {axis} outside 0..{rank}")
        return self.reshaped(
            node, label, tensor, (math.prod(tensor.shape[:axis]), math.prod(tensor.shape[axis:]))
        )

    def reshape(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        (tensor,) = inputs
        shape = tensor.shape
        requested = [int(v) for v in self.constant(node, label, 1, "shape").value.reshape(-1)]
        dims = [shape[i] if v == 0 and i < len(shape) else v for i, v in enumerate(requested)]
        size, known = math.prod(shape), math.prod(v for v in dims if v != -1)
        if dims.count(-1) == 1 and known and size % known == 0:
            dims = [size // known if v == -1 else v for v in dims]
        if any(v < 0 for v in dims) or math.prod(dims) != size:
            raise self.fail(node, label, f"shape mismatch: cannot reshape {shape} to {tuple(requested)}")
        return self.reshaped(node, label, tensor, tuple(dims))

    def transpose(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        """tf2onnx's NHWC `Transpose`s (of the float input before its QuantizeLinear, of codes before
        a Flatten/Reshape): a `Permute` node that moves codes, exact in every arithmetic (onnxruntime
        transposes the integers themselves)."""
        (tensor,) = inputs
        if tensor.pending is not None:
            raise self.unsupported(node, label, "transposes a float result before its QuantizeLinear")
        shape = tensor.shape
        perm = [int(v) for v in self.attribute(node, "perm", list(range(len(shape)))[::-1])]
        if sorted(perm) != list(range(len(shape))):
            raise self.fail(node, label, f"has the permutation {perm} for a tensor of shape {list(shape)}")
        new_shape = tuple(shape[p] for p in perm)
        moves = np.arange(math.prod(shape)).reshape(shape).transpose(perm).ravel()
        if tensor.codes is None:  # the graph input: the Permute follows its QuantizeLinear
            earlier = tensor.input_order
            return replace(tensor, shape=new_shape, input_order=moves if earlier is None else earlier[moves])
        return self.permuted(node, label, tensor, moves, new_shape)

    def permuted(
        self, node: onnx.NodeProto, label: str, tensor: _QTensor, moves: np.ndarray, shape: tuple[int, ...]
    ) -> _QTensor:
        """A `Permute` node (z[i] = h[moves[i]]) on the tensor's codes, their quantization unchanged."""
        if np.array_equal(moves, np.arange(moves.size)):
            return replace(tensor, shape=shape, input_order=None)
        unbatched = shape[1:] if len(shape) > 1 and shape[0] == 1 else shape
        layer = Permute(moves, (moves.size,), tuple(unbatched) if len(unbatched) == 3 else (moves.size,))
        quant = JoinQuant((tensor.codes,), tensor.codes, f"{label} (Transpose)")
        moved = self.append(layer, quant, (tensor.node,), shape)
        return replace(moved, float_view=tensor.float_view)

    def softmax(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        """A final Softmax (QOperator's QLinearSoftmax; QDQ's Softmax between DequantizeLinear and
        QuantizeLinear), dropped as the float reader drops one: the property is stated over the
        logits' codes, and the record says so (`Network.notes`). Softmax keeps their order; its
        quantized probabilities may tie where the logits' codes do not, which the note says."""
        (tensor,) = inputs
        if tensor.pending is not None or (node.op_type == "Softmax" and not tensor.float_view):
            raise self.unsupported(node, label, "reads no layer's codes")
        axis = int(self.attribute(node, "axis", -1))
        if len(tensor.shape) > 2 or axis not in (-1, len(tensor.shape) - 1):
            raise self.unsupported(node, label, "is supported over the output vector only (it is dropped)")
        self.notes.append(
            f"{self.describe(node, label)} at the output is dropped: the property is stated over its input "
            "(the logits' codes), which Softmax maps monotonically (every Y_i - Y_j comparison keeps its "
            "truth, up to the ties its quantized output steps make)"
        )
        return replace(tensor, softmax=True)

    def identity(self, node: onnx.NodeProto, label: str, inputs: list[_QTensor]) -> _QTensor:
        return inputs[0]

    def finish(self, output: str, last_node: onnx.NodeProto, last_label: str) -> None:
        """The graph output: DequantizeLinear of the last node's codes."""
        tensor = self.tensors[output]
        if (
            not tensor.float_view
            or tensor.pending is not None
            or tensor.node != len(self.layers) - 1
            or not self.layers
        ):
            raise self.unsupported(
                last_node,
                last_label,
                "ends the graph: a quantized model must end with DequantizeLinear of its last layer's codes",
            )


# what may read a dropped final Softmax's output on the way to the graph output
_AFTER_SOFTMAX = frozenset({"QuantizeLinear", "DequantizeLinear", "Flatten", "Reshape", "Identity"})


def _with_activation(layer, activation: Activation):
    if isinstance(layer, Conv2D):
        return Conv2D(
            layer.weights, layer.bias, activation, layer.input_shape, layer.strides, layer.pads, layer.groups
        )
    return Dense(layer.weights, layer.bias, activation)


def _dequantized(
    integers, scales, bias, input_scale: float, channel_axis: int
) -> tuple[np.ndarray, np.ndarray]:
    """DequantizeLinear of the weights and of the bias, as float32 values (held as float64)."""
    shape = [1] * integers.ndim
    shape[channel_axis] = -1
    weight_scale = np.asarray(scales, dtype=np.float32).reshape(shape)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, naming the values
        weights = (integers.astype(np.float32) * weight_scale).astype(np.float32)
        bias_scale = (np.float32(input_scale) * np.asarray(scales, dtype=np.float32)).astype(np.float32)
        float_bias = (np.asarray(bias).astype(np.float32) * bias_scale).astype(np.float32)
    for what, values in (("weights", weights), ("bias", np.broadcast_to(float_bias, (integers.shape[0],)))):
        if not np.all(np.isfinite(values)):
            channel = int(np.argmax(~np.isfinite(values.reshape(values.shape[0], -1)).any(axis=1)))
            raise InputError(
                f"its dequantized {what} overflow float32 in output channel {channel}: input scale "
                f"{float(input_scale):.9g} x weight scale {float(np.asarray(scales).reshape(-1)[channel % np.asarray(scales).size]):.9g}"
                " (onnxruntime would compute inf)"
            )
    return weights.astype(np.float64), np.broadcast_to(float_bias, (integers.shape[0],)).astype(np.float64)


def _dtype_code(dtype: np.dtype) -> int:
    return {np.dtype(np.int8): onnx.TensorProto.INT8, np.dtype(np.uint8): onnx.TensorProto.UINT8}.get(
        np.dtype(dtype), -1
    )


def _dequantize_constant(
    node: onnx.NodeProto, label: str, values: dict[str, _Constant], where: str
) -> _Constant:
    """DequantizeLinear of constant integers, every parameter checked as onnxruntime checks it (a
    float scale, a zero point of the integers' type, an axis inside the tensor, one scale and one
    zero point per slice along it), each refusal naming the node and the value."""
    names = list(node.input) + [""] * 3
    what = f"{where}: ONNX node '{label}' (DequantizeLinear) of '{names[0]}'"
    if not names[1] or names[1] not in values:
        raise InputError(f"{what} has no constant scale")
    integers = values[names[0]].value
    raw_scale = np.asarray(values[names[1]].value)
    if raw_scale.dtype.kind != "f":
        raise InputError(
            f"{what}: scale '{names[1]}' is of type {raw_scale.dtype}; DequantizeLinear scales are float"
        )
    scale = raw_scale.astype(np.float32)
    if names[2] and names[2] in values:
        zero = np.asarray(values[names[2]].value)
        if zero.dtype != integers.dtype:
            raise InputError(
                f"{what}: zero point '{names[2]}' is of type {zero.dtype}, the integers of type {integers.dtype}"
            )
    else:
        zero = np.zeros(1, dtype=integers.dtype)
    axis = 1
    for attribute in node.attribute:
        if attribute.name == "axis":
            axis = int(onnx.helper.get_attribute_value(attribute))
    if np.any(~np.isfinite(scale)) or np.any(scale <= 0):
        bad = scale.reshape(-1)[int(np.argmax(~np.isfinite(scale.reshape(-1)) | (scale.reshape(-1) <= 0)))]
        raise InputError(
            f"{what}: scale '{names[1]}' holds {float(bad)!r}; scales must be positive and finite"
        )
    shape = [1] * max(integers.ndim, 1)
    if scale.size > 1:
        if not -integers.ndim <= axis < integers.ndim:
            raise InputError(
                f"{what}: axis {axis} is outside its {integers.ndim} dimensions (shape {integers.shape})"
            )
        axis %= integers.ndim
        if scale.ndim != 1 or scale.size != integers.shape[axis]:
            raise InputError(
                f"{what}: shape mismatch: scale '{names[1]}' of shape {scale.shape} for {integers.shape[axis]} "
                f"slices along axis {axis} of {integers.shape}"
            )
        shape[axis] = -1
    if zero.size != scale.size:
        raise InputError(
            f"{what}: zero point '{names[2]}' has {zero.size} values for {scale.size} scale"
            f"{'s' if scale.size > 1 else ''}"
        )
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, naming the values
        value = (integers.astype(np.float32) - zero.astype(np.float32).reshape(shape)) * scale.reshape(shape)
    if not np.all(np.isfinite(value)):
        at = np.unravel_index(int(np.argmax(~np.isfinite(value))), value.shape)
        factor = scale.reshape(-1)[at[axis] if scale.size > 1 else 0]
        raise InputError(
            f"{what}: its value at {tuple(int(i) for i in at)} overflows float32: integer "
            f"{int(integers[at])} x scale '{names[1]}' {float(factor):.9g} (onnxruntime would compute inf)"
        )
    return _Constant(value.astype(np.float32), integers, scale, zero, axis)


def fold_dequantized_constants(
    graph: onnx.GraphProto, values: dict[str, np.ndarray], where: str
) -> dict[str, _Constant]:
    """Every constant tensor; a DequantizeLinear of constants becomes a constant that remembers its
    integers, scale, zero point and axis."""
    constants = {name: _Constant(value) for name, value in values.items()}
    for index, node in enumerate(graph.node):
        if node.op_type != "DequantizeLinear" or not node.input or node.input[0] not in constants:
            continue
        label = node.name or f"#{index} DequantizeLinear"
        constants[node.output[0]] = _dequantize_constant(node, label, constants, where)
    return constants


def read_quantized(
    where: str,
    folded: dict[str, _Constant],
    steps: list[tuple[onnx.NodeProto, str, list[str]]],
    readers: dict[str, int],
    graph_input: tuple[str, tuple[int, ...]],
    output: str,
    unfused: frozenset[str] = frozenset(),
) -> Network:
    """The quantized graph's `Network` with its `AffineQuantization` (see the module docstring).

    `steps` are the graph's live nodes in topological order with their labels and dynamic inputs,
    `readers` how many of them read each tensor (`qverify.io.onnx_reader` finds both, after folding
    the constant DequantizeLinear nodes: `fold_dequantized_constants`); `graph_input` its name and
    shape; `unfused` the outputs of the float operators onnxruntime does not fuse
    (`qverify.io.onnx_fusion`)."""
    reader = _Reader(where, folded, readers, unfused)
    name, shape = graph_input
    reader.tensors[name] = _QTensor(shape, NETWORK_INPUT, None)
    for node, label, dynamic in steps:
        reader.feed(node, label, dynamic)
    last_node, last_label, _ = steps[-1]
    reader.finish(output, last_node, last_label)
    if reader.input_quant is None:
        raise reader.unsupported(last_node, last_label, "ends a graph whose input is never quantized")
    try:
        quantization = AffineQuantization(
            reader.input_quant, tuple(reader.quants), "+".join(sorted(reader.origin))
        )
        transposed = any(
            isinstance(layer, Permute) and producers == (NETWORK_INPUT,)
            for layer, producers in zip(reader.layers, reader.wiring)
        )
        return Network(
            tuple(reader.layers),
            name=file_stem(where),
            source=where,
            image_shape=tuple(shape[1:]) if transposed and len(shape) == 4 else None,
            quantization=quantization,
            wiring=tuple(reader.wiring),
            notes=tuple(reader.notes),
            output_softmax=reader.tensors[output].softmax,
        )
    except InputError as error:
        raise InputError(f"{where}: {error}") from None
