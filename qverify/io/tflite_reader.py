"""Read a TensorFlow Lite model (`.tflite`) into a `Network`: int8 models with their
`AffineQuantization`, dynamic-range models as the float network their weights define.

The flatbuffer is read and checked by `qverify.io.tflite_flatbuffer` (bounded); this module walks
the first subgraph's operators in their (execution) order with one state per tensor: which IR node
holds its values, and in which order (`_Tensor.order`). TFLite's tensors are NHWC; the IR's images
are CHW (`qverify.network.spatial`), so a 4-D tensor written by a convolution or pool is held in
the IR node's CHW order and `order` maps the file's row-major (NHWC) positions to the node's:

- the network's input is the file's input tensor in the file's own order (a VNN-LIB `X_i` is the
  i-th value of the flattened NHWC input, as a TFLite user indexes it; `Network.image_shape` is
  (H, W, C)); the first spatial layer reads it through a `Permute` node (NHWC -> CHW), as the
  ONNX reader does for tf2onnx's NHWC inputs;
- RESHAPE and TRANSPOSE only move `order`; a FULLY_CONNECTED layer takes it into its weight
  columns (Keras's HWC flatten costs nothing); CONCATENATION is the IR's flat concatenation of its
  inputs with `order` computed for the file's axis; an operator that needs another order than a
  tensor has gets a `Permute` node first;
- PAD (the zero point, on the two spatial axes) becomes the padding of the convolution or pool that
  reads it (a padded position adds w * (z - z) = 0 to an int8 accumulator);
- a final SOFTMAX is dropped, as the float ONNX reader drops one (`Network.notes`, `output_softmax`:
  the properties compare logits, whose order softmax keeps); a DEQUANTIZE at the output and a
  QUANTIZE at the input are the input and output stages of the int8 model.

int8 operators (full-integer quantization: int8 activations, int8 weights per tensor or per output
channel, int32 biases) mean what TFLite's reference kernels compute (`--format int8-tflite`, the
model's default; `qverify.quant.tflite8`): a convolution, depthwise convolution or dense layer is a
`MacQuant` with its fused activation's clamp (`act_range`), ADD a `JoinQuant` (TFLite's integer
ADD as an exact staircase), MEAN over the image and AVERAGE_POOL_2D are pools with TFLite's
rounding, MAX_POOL_2D a max on codes, CONCATENATION a copy of codes (TFLite requires its int8 inputs
quantized as its output). What TFLite itself refuses (`Prepare` of the kernels, and the model's own
checks: weights with a zero point, per-channel scales of the wrong count,
a zero or negative scale, an ADD multiplier not below one) is refused with the same reason (a
bias's stated scale is not among them: TFLite reads the int32 bias at s_in * s_w whatever it says); what
qverify does not state exactly (LOGISTIC, TANH, an unfused RELU, an AVERAGE_POOL_2D whose windows
count different positions, a SOFTMAX inside the graph) is an `UnsupportedError` naming the operator.

Dynamic-range models (int8 weights, float32 activations: the interpreter's hybrid kernels quantize
each layer's input at run time) are read as the float network of their dequantized weights, with
a note: the run-time quantization of activations is not modelled (verify them as float networks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from qverify.errors import InputError, UnsupportedError
from qverify.io.files import file_stem
from qverify.io.tflite_flatbuffer import (
    TfliteModel,
    TfliteOperator,
    TfliteTensor,
    read_tflite_file,
    reshape_target,
)
from qverify.network import (
    NETWORK_INPUT,
    Activation,
    Add,
    AffineQuantization,
    AveragePool2D,
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

__all__ = ["TFLITE_ORIGIN", "MacSite", "read_tflite", "read_tflite_sites"]

TFLITE_ORIGIN = "TFLite"  # AffineQuantization.origin of a model read here: its default format is int8-tflite
_INT8, _INT32, _FLOAT32 = 9, 2, 0
_ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
_FLOAT_ACTIVATIONS = {"NONE": Activation.IDENTITY, "RELU": Activation.RELU, "RELU6": Activation.RELU6}
_SAME, _VALID = 0, 1


def chw_order(height: int, width: int, channels: int) -> np.ndarray:
    """The IR (CHW) position of each NHWC position of an image: order[(h W + w) C + c] = c H W + h W + w."""
    return np.arange(channels * height * width).reshape(channels, height, width).transpose(1, 2, 0).ravel()


@dataclass(frozen=True, slots=True)
class _Tensor:
    """One TFLite tensor in the IR: node `node` (or the network input) holds its values, the file's
    row-major position i at the node's position `order[i]`; `quant` its codes' quantization (None:
    float); `pads` a pending PAD around the (CHW) image the node holds."""

    shape: tuple[int, ...]
    node: int
    order: np.ndarray
    quant: TensorQuant | None
    pads: tuple[int, int, int, int] | None = None  # a pending PAD: `order` is the unpadded image's
    pad_label: str = ""
    inner: tuple[int, ...] = ()  # the unpadded NHWC shape under a pending PAD


@dataclass(frozen=True, slots=True, eq=False)
class MacSite:
    """Where the integers of IR node `node` (a MAC layer) lie in the file: its operator's weight and
    bias tensors (-1: no bias), and for a FULLY_CONNECTED the IR position of each file column
    (`columns`): what `qverify.io.tflite_patch` writes changed integers back through."""

    node: int
    operator: str
    weights: int
    bias: int
    columns: np.ndarray | None

    def file_weights(self, ir_weights: np.ndarray) -> np.ndarray:
        """IR weights back in the file's layout: [O, KH, KW, I] (CONV_2D), [1, KH, KW, C*M]
        (DEPTHWISE_CONV_2D), [O, N] in the file's column order (FULLY_CONNECTED)."""
        w = np.asarray(ir_weights)
        if self.operator == "CONV_2D":
            return w.transpose(0, 2, 3, 1)
        if self.operator == "DEPTHWISE_CONV_2D":
            return w[:, 0].transpose(1, 2, 0)[None]
        return w[:, self.columns]


def _same_padding(size: int, kernel: int, stride: int) -> tuple[int, int, int]:
    """TFLite's SAME padding: output ceil(size / stride), the total split with the odd one after."""
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


class _Reader:
    """Walks one model's operators (module docstring); lives for one `read_tflite` call."""

    def __init__(self, model: TfliteModel) -> None:
        self.model = model
        self.where = model.where
        self.layers: list = []
        self.quants: list = []
        self.wiring: list = []
        self.tensors: dict[int, _Tensor] = {}
        self.notes: list[str] = []
        self.softmax = False
        self.input_quant: TensorQuant | None = None
        self.integer = True
        self.readers = self._count_readers()
        self.sites: list[MacSite] = []  # where each MAC layer's integers lie in the file, in node order

    # -- helpers -----------------------------------------------------------------------------------

    def _count_readers(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for operator in self.model.operators:
            for index in operator.inputs:
                counts[index] = counts.get(index, 0) + 1
        for index in self.model.outputs:
            counts[index] = counts.get(index, 0) + 1
        return counts

    def label(self, operator: TfliteOperator) -> str:
        outputs = operator.outputs
        name = self.model.tensors[outputs[0]].name if outputs else ""
        return f"operator {operator.index} ({operator.name}{', ' + repr(name) if name else ''})"

    def fail(self, operator: TfliteOperator, what: str) -> InputError:
        return InputError(f"{self.where}: {self.label(operator)} {what}")

    def unsupported(self, operator: TfliteOperator, what: str) -> UnsupportedError:
        return UnsupportedError(f"{self.where}: {self.label(operator)} {what}")

    def tensor(self, operator: TfliteOperator, slot: int, what: str) -> TfliteTensor:
        if slot >= len(operator.inputs) or operator.inputs[slot] < 0:
            raise self.fail(operator, f"has no {what} (input {slot})")
        return self.model.tensors[operator.inputs[slot]]

    def dynamic(self, operator: TfliteOperator, slot: int) -> _Tensor:
        index = operator.inputs[slot] if slot < len(operator.inputs) else -1
        if index < 0:
            raise self.fail(operator, f"has no input {slot}")
        state = self.tensors.get(index)
        if state is None:
            tensor = self.model.tensors[index]
            if tensor.data is not None:
                raise self.unsupported(operator, f"reads the constant tensor {index} '{tensor.name}' as data")
            raise self.fail(
                operator, f"reads tensor {index} '{tensor.name}', which no earlier operator writes"
            )
        return state

    def constant(self, operator: TfliteOperator, slot: int, what: str) -> np.ndarray:
        tensor = self.tensor(operator, slot, what)
        if tensor.data is None:
            raise self.unsupported(operator, f"has a {what} that is not a constant (tensor {tensor.index})")
        return tensor.values(f"{self.where}: {self.label(operator)}")

    def tensor_quant(self, operator: TfliteOperator, tensor: TfliteTensor) -> TensorQuant:
        """An activation's per-tensor int8 quantization, checked as TFLite checks it."""
        what = f"tensor {tensor.index} '{tensor.name}'"
        if tensor.type != _INT8:
            raise self.unsupported(
                operator,
                f"has the {tensor.type_name} {what}; int8 activations (or float ones, dynamic range) are read",
            )
        params = tensor.quant
        if params is None or params.scales.size == 0:
            raise self.fail(operator, f"reads or writes the int8 {what} without quantization parameters")
        if params.scales.size != 1 or params.zero_points.size not in (0, 1):
            raise self.unsupported(
                operator, f"quantizes its activation {what} per axis (per tensor is supported)"
            )
        zero = int(params.zero_points[0]) if params.zero_points.size else 0
        try:
            return TensorQuant(float(params.scales[0]), zero, CodeType.INT8, what)
        except InputError as error:
            raise self.fail(operator, f"has invalid quantization parameters: {error}") from None

    def fused(self, operator: TfliteOperator) -> str:
        options = operator.options
        if options is None or not hasattr(options, "FusedActivationFunction"):
            return "NONE"
        code = int(options.FusedActivationFunction())
        if code not in _ACTIVATIONS:
            raise self.fail(operator, f"has an unknown fused activation {code}")
        return _ACTIVATIONS[code]

    def float_activation(self, operator: TfliteOperator, fused: str) -> Activation:
        if fused not in _FLOAT_ACTIVATIONS:
            raise self.unsupported(operator, f"has the fused activation {fused}, which is not supported")
        return _FLOAT_ACTIVATIONS[fused]

    def append(self, layer, quant, producers: tuple[int, ...]) -> int:
        self.layers.append(layer)
        self.quants.append(quant)
        self.wiring.append(producers)
        return len(self.layers) - 1

    def output_tensor(self, operator: TfliteOperator) -> TfliteTensor:
        if len(operator.outputs) != 1:
            raise self.unsupported(operator, f"writes {len(operator.outputs)} tensors; one is supported")
        return self.model.tensors[operator.outputs[0]]

    def settle(self, operator: TfliteOperator, state: _Tensor) -> None:
        """The operator's output tensor holds `state`; its declared shape must hold as many values."""
        out = self.output_tensor(operator)
        size = math.prod(state.shape) if state.pads is not None else state.order.size
        if out.shape and math.prod(out.shape) != size:
            raise self.fail(
                operator,
                f"writes {state.order.size} values into tensor {out.index} of shape {list(out.shape)}",
            )
        self.tensors[out.index] = replace(state, shape=out.shape or state.shape)

    # -- orders ------------------------------------------------------------------------------------

    def reordered(self, operator: TfliteOperator, state: _Tensor, wanted: np.ndarray, shape) -> _Tensor:
        """The tensor with its IR values in the order `wanted` (a `Permute` node when it differs)."""
        if state.pads is not None:
            raise self.unsupported(
                operator,
                f"reads the output of {state.pad_label}; a PAD is supported only before a convolution or pool",
            )
        if np.array_equal(state.order, wanted):
            return state
        moves = np.empty_like(wanted)
        moves[wanted] = state.order
        size = int(wanted.size)
        quant = None
        if self.integer:
            quant = JoinQuant((state.quant,), state.quant, f"{self.label(operator)} input order")
        node = self.append(Permute(moves, (size,), tuple(shape)), quant, (state.node,))
        return _Tensor(state.shape, node, wanted, state.quant)

    def image(self, operator: TfliteOperator, state: _Tensor) -> tuple[int, int, int]:
        """(C, H, W) of a 4-D NHWC tensor of batch 1, after reordering it into the IR's CHW order."""
        shape = state.shape
        if len(shape) != 4 or shape[0] != 1:
            raise self.unsupported(operator, f"needs an NHWC image of batch 1, got shape {list(shape)}")
        return shape[3], shape[1], shape[2]

    def spatial(
        self, operator: TfliteOperator, state: _Tensor
    ) -> tuple[_Tensor, tuple[int, int, int], tuple]:
        """The input image in CHW order, its (C, H, W) before a pending PAD, and that PAD's pads."""
        channels, height, width = self.image(operator, state)
        pads = state.pads or (0, 0, 0, 0)
        inner = (height - pads[0] - pads[2], width - pads[1] - pads[3])
        base = replace(state, pads=None, shape=state.inner) if state.pads is not None else state
        base = self.reordered(operator, base, chw_order(inner[0], inner[1], channels), (channels, *inner))
        return base, (channels, *inner), pads

    # -- operators ---------------------------------------------------------------------------------

    def feed(self, operator: TfliteOperator) -> None:
        handler = {
            "CONV_2D": self.conv,
            "DEPTHWISE_CONV_2D": self.conv,
            "FULLY_CONNECTED": self.dense,
            "ADD": self.add,
            "CONCATENATION": self.concat,
            "MAX_POOL_2D": self.pool,
            "AVERAGE_POOL_2D": self.pool,
            "MEAN": self.mean,
            "PAD": self.pad,
            "PADV2": self.pad,
            "RESHAPE": self.reshape,
            "SQUEEZE": self.reshape,
            "TRANSPOSE": self.transpose,
            "SOFTMAX": self.softmax_op,
            "QUANTIZE": self.quantize,
            "DEQUANTIZE": self.dequantize,
        }.get(operator.name)
        if handler is None:
            reason = {
                "LOGISTIC": "TFLite's int8 LOGISTIC (gemmlowp's fixed-point logistic) is not modelled",
                "TANH": "TFLite's int8 TANH (gemmlowp's fixed-point tanh) is not modelled",
                "RELU": "an unfused RELU requantizes its codes, which qverify does not state (the converter "
                "fuses it into the layer before it)",
                "RELU6": "an unfused RELU6 requantizes its codes, which qverify does not state (the converter "
                "fuses it into the layer before it)",
            }.get(operator.name, "is not an operator qverify reads")
            raise self.unsupported(
                operator, reason if reason.startswith("is") else f"is not supported: {reason}"
            )
        handler(operator)

    def quantize(self, operator: TfliteOperator) -> None:
        source = self.tensor(operator, 0, "input")
        state = self.dynamic(operator, 0)
        out = self.output_tensor(operator)
        if source.type != _FLOAT32 or state.node != NETWORK_INPUT or state.quant is not None:
            raise self.unsupported(
                operator, "requantizes codes; QUANTIZE is supported on the float graph input only"
            )
        quant = self.tensor_quant(operator, out)
        if self.input_quant is not None and not quant.same_as(self.input_quant):
            raise self.unsupported(operator, "quantizes the graph input a second time, otherwise")
        self.input_quant = quant
        self.settle(operator, replace(state, quant=quant))

    def dequantize(self, operator: TfliteOperator) -> None:
        source = self.tensor(operator, 0, "input")
        if source.data is not None:
            raise self.unsupported(
                operator, "dequantizes a constant (float16 or int8 weights), which is not read"
            )
        state = self.dynamic(operator, 0)
        if operator.outputs[0] not in self.model.outputs:
            raise self.unsupported(operator, "dequantizes codes inside the graph; only at its output")
        self.settle(operator, state)

    def reshape(self, operator: TfliteOperator) -> None:
        state = self.dynamic(operator, 0)
        if state.pads is not None:
            self.reordered(operator, state, state.order, state.shape)
        out = self.output_tensor(operator)
        if operator.name == "RESHAPE" and not out.shape:
            target = reshape_target(self.model, operator)
            if target is None:
                raise self.fail(operator, "states no output shape")
        self.settle(operator, state)

    def transpose(self, operator: TfliteOperator) -> None:
        state = self.dynamic(operator, 0)
        if state.pads is not None:
            self.reordered(operator, state, state.order, state.shape)
        perm = [int(v) for v in self.constant(operator, 1, "permutation").reshape(-1)]
        if sorted(perm) != list(range(len(state.shape))):
            raise self.fail(operator, f"has the permutation {perm} for a tensor of shape {list(state.shape)}")
        order = state.order.reshape(state.shape).transpose(perm).ravel()
        self.settle(operator, replace(state, order=order, shape=tuple(state.shape[p] for p in perm)))

    def pad(self, operator: TfliteOperator) -> None:
        state = self.dynamic(operator, 0)
        out = self.output_tensor(operator)
        amounts = self.constant(operator, 1, "paddings")
        if amounts.shape != (4, 2) or len(state.shape) != 4:
            raise self.unsupported(
                operator, f"pads a tensor of shape {list(state.shape)} by {amounts.tolist()}"
            )
        if np.any(amounts < 0) or np.any(amounts[0]) or np.any(amounts[3]):
            raise self.unsupported(
                operator, "pads the batch or channel axis, or crops; spatial padding is supported"
            )
        if self.integer:
            quant = self.tensor_quant(operator, out)
            if not quant.same_as(state.quant):
                raise self.fail(
                    operator, "has an output quantized otherwise than its input (TFLite requires them equal)"
                )
            if operator.name == "PADV2":
                value = self.constant(operator, 2, "padding value").reshape(-1)
                if value.size != 1 or int(value[0]) != quant.zero_point:
                    raise self.unsupported(operator, "pads with a value other than the zero point")
        elif operator.name == "PADV2":
            value = self.constant(operator, 2, "padding value").reshape(-1)
            if value.size != 1 or float(value[0]) != 0.0:
                raise self.unsupported(operator, "pads with a value other than 0")
        if state.pads is not None:
            raise self.unsupported(operator, f"pads the output of {state.pad_label} again")
        channels, height, width = self.image(operator, state)
        top, bottom = (int(v) for v in amounts[1])
        left, right = (int(v) for v in amounts[2])
        base, _, _ = self.spatial(operator, state)
        padded = (1, height + top + bottom, width + left + right, channels)
        pending = (top, left, bottom, right)
        self.settle(
            operator,
            replace(base, shape=padded, pads=pending, pad_label=self.label(operator), inner=base.shape),
        )

    def geometry(self, operator: TfliteOperator, image, kernel, pads) -> dict:
        """Strides and pads (TFLite's SAME/VALID padding plus a PAD before it) of a window operator."""
        options = operator.options
        dilation = (
            (int(options.DilationHFactor()), int(options.DilationWFactor()))
            if hasattr(options, "DilationHFactor")
            else (1, 1)
        )
        if dilation != (1, 1):
            raise self.unsupported(operator, f"has dilation {list(dilation)}; not supported")
        strides = (int(options.StrideH()), int(options.StrideW()))
        if min(strides) < 1:
            raise self.fail(operator, f"has strides {list(strides)}")
        _, height, width = image
        if int(options.Padding()) == _SAME:
            _, top, bottom = _same_padding(height, kernel[0], strides[0])
            _, left, right = _same_padding(width, kernel[1], strides[1])
            own = (top, left, bottom, right)
        elif int(options.Padding()) == _VALID:
            own = (0, 0, 0, 0)
        else:
            raise self.fail(operator, f"has an unknown padding {int(options.Padding())}")
        if any(own) and any(pads):
            raise self.unsupported(operator, "pads SAME after a PAD; not supported")
        return {"strides": strides, "pads": tuple(a + b for a, b in zip(own, pads))}

    def weights(self, operator: TfliteOperator, slot: int, channels_axis: int, channels: int):
        """The int8 weights and their scales (one, or one per output channel), TFLite's checks."""
        tensor = self.tensor(operator, slot, "weights")
        values = self.constant(operator, slot, "weights")
        if tensor.type == _FLOAT32 and not self.integer:  # a dynamic-range model keeps small layers float
            return values.astype(np.float64), np.ones(1)
        if tensor.type != _INT8:
            raise self.unsupported(operator, f"has {tensor.type_name} weights; int8 weights are read")
        params = tensor.quant
        if params is None or not params.scales.size:
            raise self.fail(operator, "has int8 weights without quantization parameters")
        scales = params.scales.astype(np.float64)
        if scales.size not in (1, channels):
            raise self.fail(
                operator,
                f"has {scales.size} weight scales for {channels} output channels (TFLite: one or one per channel)",
            )
        if scales.size > 1 and params.axis != channels_axis:
            raise self.fail(
                operator,
                f"quantizes its weights along axis {params.axis}; TFLite requires axis {channels_axis}",
            )
        if np.any(~np.isfinite(scales)) or np.any(scales <= 0):
            raise self.fail(operator, "has a weight scale that is not positive and finite")
        if params.zero_points.size and np.any(params.zero_points != 0):
            raise self.fail(operator, "has int8 weights with a non-zero zero point (TFLite requires 0)")
        return values.astype(np.int64), scales

    def bias(
        self, operator: TfliteOperator, slot: int, channels: int, input_scale: float, scales: np.ndarray
    ):
        """The int32 bias (zeros when absent), its scale checked against s_in * s_w as TFLite does."""
        if slot >= len(operator.inputs) or operator.inputs[slot] < 0:
            return np.zeros(channels, dtype=np.int64)
        tensor = self.tensor(operator, slot, "bias")
        values = self.constant(operator, slot, "bias").reshape(-1)
        if tensor.type != _INT32:
            raise self.unsupported(operator, f"has a {tensor.type_name} bias; int32 is read")
        if values.size != channels:
            raise self.fail(operator, f"has {values.size} biases for {channels} output channels")
        return values.astype(np.int64)

    def conv(self, operator: TfliteOperator) -> None:
        depthwise = operator.name == "DEPTHWISE_CONV_2D"
        state = self.dynamic(operator, 0)
        base, image, pads = self.spatial(operator, state)
        channels = image[0]
        kernel = self.tensor(operator, 1, "weights")
        if len(kernel.shape) != 4:
            raise self.fail(operator, f"has weights of shape {list(kernel.shape)}")
        if depthwise:
            _, kh, kw, out_channels = kernel.shape
            if kernel.shape[0] != 1 or out_channels % channels:
                raise self.fail(
                    operator, f"has depthwise weights {list(kernel.shape)} for {channels} channels"
                )
            groups, axis = channels, 3
        else:
            out_channels, kh, kw, in_channels = kernel.shape
            if channels % in_channels:
                raise self.fail(
                    operator, f"has weights for {in_channels} input channels; the image has {channels}"
                )
            groups, axis = channels // in_channels, 0
        geometry = self.geometry(operator, image, (kh, kw), pads)
        fused = self.fused(operator)
        integers, scales = self.weights(operator, 1, axis, out_channels)
        if depthwise:  # [1, KH, KW, C*M] -> [C*M, 1, KH, KW]
            integers = integers.reshape(kh, kw, out_channels).transpose(2, 0, 1)[:, None]
        else:  # [O, KH, KW, I] -> [O, I, KH, KW]
            integers = integers.transpose(0, 3, 1, 2)
        self.mac(operator, base, image, integers, scales, fused, geometry, groups)

    def mac(
        self, operator, base: _Tensor, image, integers, scales, fused: str, geometry, groups, columns=None
    ) -> None:
        out_channels = integers.shape[0]
        out = self.output_tensor(operator)
        if not self.integer:  # the dequantized int8 weights (float32 products), or float weights as they are
            weights = integers.astype(np.float32) * np.broadcast_to(
                scales.astype(np.float32), (out_channels,)
            ).reshape((-1,) + (1,) * (integers.ndim - 1))
            bias = self.float_bias(operator, 2, out_channels)
            activation = self.float_activation(operator, fused)
            layer = self.make_layer(
                operator,
                weights.astype(np.float32).astype(np.float64),
                bias,
                activation,
                image,
                geometry,
                groups,
            )
            node = self.append(layer, None, (base.node,))
            self.settle(operator, self.written(layer, node, None))
            return
        input_quant = base.quant
        bias = self.bias(operator, 2, out_channels, input_quant.scale, scales)
        output = self.tensor_quant(operator, out)
        act_range = activation_range(fused, output, f"{self.where}: {self.label(operator)}")
        quant = MacQuant(
            input_quant,
            integers,
            scales,
            bias,
            output,
            False,
            self.label(operator),
            QuantForm.QOPERATOR,
            act_range=act_range,
            fused=fused,
            double_requant=image is None,  # FULLY_CONNECTED (`MacQuant.double_requant`)
        )
        weights, float_bias = _dequantized(integers, scales, bias, input_quant.scale)
        layer = self.make_layer(
            operator, weights, float_bias, implied_activation(quant), image, geometry, groups
        )
        node = self.append(layer, quant, (base.node,))
        has_bias = len(operator.inputs) > 2 and operator.inputs[2] >= 0
        bias_tensor = operator.inputs[2] if has_bias else -1
        self.sites.append(MacSite(node, operator.name, operator.inputs[1], bias_tensor, columns))
        self.settle(operator, self.written(layer, node, output))

    def make_layer(self, operator, weights, bias, activation, image, geometry, groups):
        try:
            if image is None:
                return Dense(weights, bias, activation)
            return Conv2D(weights, bias, activation, image, groups=groups, **geometry)
        except InputError as error:
            raise self.fail(operator, f"has invalid parameters: {error}") from None

    def written(self, layer, node: int, quant: TensorQuant | None) -> _Tensor:
        """The state of a layer's output: a CHW image in NHWC positions, or a vector."""
        shape = layer.output_shape
        if len(shape) == 3:
            channels, height, width = shape
            return _Tensor((1, height, width, channels), node, chw_order(height, width, channels), quant)
        return _Tensor((1, layer.n_out), node, np.arange(layer.n_out), quant)

    def float_bias(self, operator: TfliteOperator, slot: int, channels: int) -> np.ndarray:
        if slot >= len(operator.inputs) or operator.inputs[slot] < 0:
            return np.zeros(channels)
        values = self.constant(operator, slot, "bias").reshape(-1)
        if values.size != channels or values.dtype != np.float32:
            raise self.unsupported(operator, f"has a bias of {values.size} {values.dtype} values")
        return values.astype(np.float64)

    def dense(self, operator: TfliteOperator) -> None:
        state = self.dynamic(operator, 0)
        if state.pads is not None:
            self.reordered(operator, state, state.order, state.shape)
        matrix = self.tensor(operator, 1, "weights")
        if len(matrix.shape) != 2:
            raise self.fail(operator, f"has weights of shape {list(matrix.shape)}")
        options = operator.options
        if options is not None and int(options.WeightsFormat()) != 0:
            raise self.unsupported(
                operator, "has shuffled weights (weights_format); the default format is read"
            )
        out_channels, n_in = matrix.shape
        size = int(state.order.size)
        if size != n_in:
            raise self.unsupported(operator, f"reads {size} values as rows of {n_in}; batch 1 is supported")
        integers, scales = self.weights(operator, 1, 0, out_channels)
        columns = np.zeros_like(integers)
        columns[:, state.order] = integers  # the file's input position i is the IR's order[i]
        base = _Tensor((1, size), state.node, np.arange(size), state.quant)
        self.mac(operator, base, None, columns, scales, self.fused(operator), None, 1, state.order)

    def add(self, operator: TfliteOperator) -> None:
        first, second = self.dynamic(operator, 0), self.dynamic(operator, 1)
        if len(operator.inputs) != 2:
            raise self.fail(operator, f"has {len(operator.inputs)} inputs")
        if tuple(first.shape) != tuple(second.shape):
            raise self.unsupported(
                operator,
                f"adds tensors of shapes {list(first.shape)} and {list(second.shape)}; broadcasting is not supported",
            )
        first = self.reordered(operator, first, first.order, first.shape)
        second = self.reordered(operator, second, first.order, first.shape)
        shape = _ir_shape(first)
        fused = self.fused(operator)
        out = self.output_tensor(operator)
        if self.integer:
            output = self.tensor_quant(operator, out)
            act_range = activation_range(fused, output, f"{self.where}: {self.label(operator)}")
            quant = JoinQuant(
                (first.quant, second.quant),
                output,
                self.label(operator),
                QuantForm.QOPERATOR,
                act_range=act_range,
                fused=fused,
            )
            node = self.append(
                Add(shape, 2, implied_join_activation(quant)), quant, (first.node, second.node)
            )
        else:
            output = None
            node = self.append(
                Add(shape, 2, self.float_activation(operator, fused)), None, (first.node, second.node)
            )
        self.settle(operator, _Tensor(first.shape, node, first.order, output))

    def concat(self, operator: TfliteOperator) -> None:
        states = [self.dynamic(operator, slot) for slot in range(len(operator.inputs))]
        if self.fused(operator) != "NONE":
            raise self.unsupported(operator, "has a fused activation; not supported")
        rank = len(states[0].shape)
        axis = int(operator.options.Axis()) if operator.options is not None else 0
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank or any(len(s.shape) != rank for s in states):
            raise self.fail(
                operator,
                f"concatenates along axis {axis} tensors of shapes {[list(s.shape) for s in states]}",
            )
        states = [self.reordered(operator, s, s.order, s.shape) for s in states]
        out = self.output_tensor(operator)
        output = None
        if self.integer:
            output = self.tensor_quant(operator, out)
            for state in states:
                if not state.quant.same_as(output):
                    raise self.fail(
                        operator,
                        f"concatenates int8 codes quantized as {state.quant.describe()} into {output.describe()}; "
                        "TFLite requires its int8 inputs quantized as its output",
                    )
        if len(states) == 1:
            self.settle(operator, states[0])
            return
        positions, offset = [], 0
        for state in states:
            positions.append(state.order.reshape(state.shape) + offset)
            offset += state.order.size
        try:
            order = np.concatenate(positions, axis=axis).ravel()
        except ValueError:
            raise self.fail(
                operator, f"concatenates tensors of shapes {[list(s.shape) for s in states]}"
            ) from None
        layer = Concat(tuple((int(s.order.size),) for s in states))
        quant = (
            JoinQuant(tuple(s.quant for s in states), output, self.label(operator), QuantForm.QOPERATOR)
            if self.integer
            else None
        )
        node = self.append(layer, quant, tuple(s.node for s in states))
        self.settle(operator, _Tensor(tuple(out.shape), node, order, output))

    def pool(self, operator: TfliteOperator) -> None:
        state = self.dynamic(operator, 0)
        base, image, pads = self.spatial(operator, state)
        options = operator.options
        kernel = (int(options.FilterHeight()), int(options.FilterWidth()))
        geometry = self.geometry(operator, image, kernel, pads)
        fused = self.fused(operator)
        maximum = operator.name == "MAX_POOL_2D"
        if any(pads) and maximum:
            raise self.unsupported(
                operator, "max-pools a PAD's output (its zero-point codes would take part)"
            )
        try:
            layer = (MaxPool2D if maximum else AveragePool2D)(image, kernel, **geometry)
        except InputError as error:
            raise self.fail(operator, f"has invalid parameters: {error}") from None
        if any(pads) and not maximum:
            layer = AveragePool2D(image, kernel, count_include_pad=True, **geometry)
        quant = None
        output = None
        if self.integer:
            output = self.tensor_quant(operator, self.output_tensor(operator))
            act_range = activation_range(fused, output, f"{self.where}: {self.label(operator)}")
            if maximum and (
                act_range != (output.code.qmin, output.code.qmax) or not output.same_as(base.quant)
            ):
                raise self.unsupported(
                    operator,
                    "clamps or requantizes its codes (a fused activation, or an output quantized otherwise)",
                )
            quant = PoolQuant(
                base.quant, output, self.label(operator), act_range=None if maximum else act_range
            )
        elif fused != "NONE":
            raise self.unsupported(
                operator, f"has the fused activation {fused}; not supported on a float pool"
            )
        node = self.append(layer, quant, (base.node,))
        self.settle(operator, self.written(layer, node, output))

    def mean(self, operator: TfliteOperator) -> None:
        state = self.dynamic(operator, 0)
        axes = sorted({int(v) % 4 for v in self.constant(operator, 1, "axes").reshape(-1)})
        if len(state.shape) != 4 or axes != [1, 2]:
            raise self.unsupported(
                operator,
                f"averages axes {axes} of a tensor of shape {list(state.shape)}; the image's (1, 2) are supported",
            )
        base, image, pads = self.spatial(operator, state)
        if any(pads):
            raise self.unsupported(operator, "averages a PAD's output; not supported")
        layer = AveragePool2D(image, (image[1], image[2]))
        quant = output = None
        if self.integer:
            output = self.tensor_quant(operator, self.output_tensor(operator))
            quant = PoolQuant(base.quant, output, self.label(operator), mean=True)
        node = self.append(layer, quant, (base.node,))
        self.settle(operator, self.written(layer, node, output))

    def softmax_op(self, operator: TfliteOperator) -> None:
        state = self.dynamic(operator, 0)
        out = self.output_tensor(operator)
        if not self._reaches_output(out.index):
            raise self.unsupported(
                operator, "is inside the graph; a SOFTMAX is supported (dropped) at the output only"
            )
        self.softmax = True
        self.notes.append(
            f"{self.label(operator)} at the output is dropped: the property is stated over its input (the "
            "logits' codes), which SOFTMAX maps monotonically (every Y_i - Y_j comparison keeps its truth, up to "
            "the ties its 1/256 output steps make)"
        )
        self.settle(operator, state)

    def _reaches_output(self, index: int) -> bool:
        """Is tensor `index` the graph's output, possibly through a DEQUANTIZE or RESHAPE?"""
        seen = {index}
        for operator in self.model.operators:
            if (
                operator.inputs
                and operator.inputs[0] in seen
                and operator.name in ("DEQUANTIZE", "RESHAPE", "SQUEEZE")
            ):
                seen.update(operator.outputs)
        return any(out in seen for out in self.model.outputs) and self.readers.get(index, 0) <= 1


def _round_half_away(value: float) -> int:
    """TfLiteRound (std::round): half away from zero."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def activation_range(fused: str, out: TensorQuant, what: str) -> tuple[int, int]:
    """TFLite's CalculateActivationRangeQuantized: the codes a fused activation clamps to (RELU at
    max(qmin, z + round(0 / s)), RELU6 also at min(qmax, z + round(6 / s)), RELU_N1_TO_1 at the codes
    of -1 and 1; f / s in float32, rounded half away from zero)."""
    qmin, qmax = out.code.qmin, out.code.qmax

    def code_of(real: float) -> int:
        with np.errstate(over="ignore"):
            steps = _round_half_away(float(np.float32(real) / np.float32(out.scale)))
        if not -(1 << 31) <= steps < 1 << 31:
            raise UnsupportedError(
                f"{what}: {real} / scale {out.scale!r} overflows int32 (TFLite refuses it)"
            )
        return out.zero_point + steps

    if fused == "NONE":
        return qmin, qmax
    if fused == "RELU":
        return max(qmin, code_of(0.0)), qmax
    if fused == "RELU6":
        return max(qmin, code_of(0.0)), min(qmax, code_of(6.0))
    if fused == "RELU_N1_TO_1":
        return max(qmin, code_of(-1.0)), min(qmax, code_of(1.0))
    raise UnsupportedError(f"{what}: the fused activation {fused} is not supported on int8 tensors")


def _ir_shape(state: _Tensor) -> tuple[int, ...]:
    """The IR shape of a tensor in the order it has: (C, H, W) for an image in CHW order, else flat."""
    shape = state.shape
    if (
        len(shape) == 4
        and shape[0] == 1
        and np.array_equal(state.order, chw_order(shape[1], shape[2], shape[3]))
    ):
        return (shape[3], shape[1], shape[2])
    return (int(state.order.size),)


def _dequantized(integers, scales, bias, input_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The float view's weights and bias: the integers times their float32 scales (as float32)."""
    channels = integers.shape[0]
    scale = np.broadcast_to(np.asarray(scales, dtype=np.float32), (channels,))
    weights = (integers.astype(np.float32) * scale.reshape((-1,) + (1,) * (integers.ndim - 1))).astype(
        np.float32
    )
    bias_scale = (np.float32(input_scale) * scale).astype(np.float32)
    float_bias = (np.asarray(bias).astype(np.float32) * bias_scale).astype(np.float32)
    return weights.astype(np.float64), float_bias.astype(np.float64)


def _check_graph(model: TfliteModel) -> None:
    if model.subgraphs != 1:
        raise UnsupportedError(f"{model.where}: the model has {model.subgraphs} subgraphs; one is supported")
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise UnsupportedError(
            f"{model.where}: the model has {len(model.inputs)} inputs and {len(model.outputs)} outputs; one of each is supported"
        )
    if not model.operators:
        raise UnsupportedError(f"{model.where}: the model has no operators")


def read_tflite(path: str | Path) -> Network:
    """Read a `.tflite` file into a `Network` (the module docstring says what is understood)."""
    return read_tflite_sites(path)[0]


def read_tflite_sites(path: str | Path) -> tuple[Network, TfliteModel, tuple[MacSite, ...]]:
    """The `Network`, the checked file records and where each MAC layer's integers lie."""
    model = read_tflite_file(path)
    _check_graph(model)
    source = model.tensors[model.inputs[0]]
    reader = _Reader(model)
    if source.type == _INT8:
        reader.input_quant = reader.tensor_quant(model.operators[0], source)
    elif source.type == _FLOAT32:
        reader.integer = any(op.name == "QUANTIZE" for op in model.operators)
    else:
        raise UnsupportedError(
            f"{model.where}: the input is {source.type_name}; int8 or float32 inputs are read"
        )
    if not source.shape or source.shape[0] != 1:
        raise UnsupportedError(
            f"{model.where}: the input has shape {list(source.shape)}; batch 1 is supported"
        )
    size = math.prod(source.shape)
    reader.tensors[source.index] = _Tensor(source.shape, NETWORK_INPUT, np.arange(size), reader.input_quant)
    if not reader.integer:
        reader.notes.append(
            f"{model.where} is a dynamic-range model (int8 weights, float32 activations): read as the float network "
            "of its dequantized weights; the interpreter's run-time quantization of each layer's input is not modelled"
        )
    for operator in model.operators:
        reader.feed(operator)
    final = reader.tensors.get(model.outputs[0])
    if final is None or final.node == NETWORK_INPUT:
        raise UnsupportedError(f"{model.where}: the graph's output is not written by a layer qverify reads")
    final = reader.reordered(
        model.operators[-1], final, np.arange(final.order.size), (int(final.order.size),)
    )
    if final.node != len(reader.layers) - 1:
        raise UnsupportedError(f"{model.where}: the graph's output is not its last layer's")
    if reader.integer and reader.input_quant is None:
        raise UnsupportedError(f"{model.where}: the model's input is never quantized")
    shape = tuple(int(v) for v in source.shape[1:])
    try:
        quantization = None
        if reader.integer:
            quantization = AffineQuantization(reader.input_quant, tuple(reader.quants), TFLITE_ORIGIN)
        network = Network(
            tuple(reader.layers),
            name=file_stem(path),
            source=str(path),
            image_shape=shape if len(shape) > 1 else None,
            quantization=quantization,
            wiring=tuple(reader.wiring),
            notes=tuple(reader.notes),
            output_softmax=reader.softmax,
        )
    except InputError as error:
        raise InputError(f"{model.where}: {error}") from None
    return network, model, tuple(reader.sites)
