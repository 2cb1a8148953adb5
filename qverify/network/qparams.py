"""Affine (int8/uint8) quantization parameters of a network, as a quantized ONNX model states them.

A real value v is held as an integer code q with v = (q - zero_point) * scale (ONNX
QuantizeLinear/DequantizeLinear). A MAC layer (dense or convolution) of an int8 model reads codes of
its input tensor, multiplies them by int8 weights (symmetric: weight zero point 0; one scale per
tensor or per output channel), accumulates in int32 with an int32 bias whose scale is
input_scale * weight_scale, and *requantizes* the accumulator to the codes of its output tensor;
a ReLU between the operator and its QuantizeLinear is a clamp at the output zero point. Pools work
on codes. How requantization rounds is the runtime's business: `qverify.quant.affine`.

These records hold only parameters (no arithmetic), checked when a `Network` is built: every value
is what the file says, scales as float32 values, codes and integers as Python/numpy integers.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qverify.errors import InputError
from qverify.network.operators import operator_of
from qverify.vocabulary import CodeType


def _float32_scale(scale: float, what: str) -> float:
    value = float(scale)
    if not np.isfinite(value) or value <= 0:
        raise InputError(f"{what}: scale must be a positive finite number, got {scale!r}")
    if float(np.float32(value)) != value:
        raise InputError(f"{what}: scale {value!r} is not a float32 value")
    if value < float(np.finfo(np.float32).tiny):
        raise InputError(f"{what}: scale {value!r} is subnormal")
    return value


@dataclass(frozen=True, slots=True)
class TensorQuant:
    """Scale, zero point and code type of one quantized tensor (per tensor)."""

    scale: float
    zero_point: int
    code: CodeType
    what: str = "tensor"

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _float32_scale(self.scale, self.what))
        zero_point = int(self.zero_point)
        if not self.code.qmin <= zero_point <= self.code.qmax:
            raise InputError(
                f"{self.what}: zero point {zero_point} outside the {self.code.value} range "
                f"[{self.code.qmin}, {self.code.qmax}]"
            )
        object.__setattr__(self, "zero_point", zero_point)

    def same_as(self, other: TensorQuant) -> bool:
        return (self.scale, self.zero_point, self.code) == (other.scale, other.zero_point, other.code)

    def describe(self) -> str:
        return f"{self.code.value} scale {self.scale!r} zero point {self.zero_point}"

    def quantize(self, values: np.ndarray) -> np.ndarray:
        """ONNX QuantizeLinear as onnxruntime computes it on the CPU: float32 x / scale, rounded half
        to even, plus the zero point, saturated to the code range (int64 codes)."""
        x = np.asarray(values, dtype=np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            scaled = np.rint(x / np.float32(self.scale))
        codes = np.clip(scaled, self.code.qmin - self.zero_point, self.code.qmax - self.zero_point)
        return np.where(np.isnan(codes), 0, codes).astype(np.int64) + self.zero_point

    def dequantize(self, codes: np.ndarray) -> np.ndarray:
        """ONNX DequantizeLinear: float32 (q - zero_point) * scale."""
        delta = (np.asarray(codes, dtype=np.int64) - self.zero_point).astype(np.float32)
        return (delta * np.float32(self.scale)).astype(np.float32)


class QuantForm(enum.Enum):
    """How the file wrote a MAC layer: float operators between DequantizeLinear and QuantizeLinear
    (QDQ), or a quantized operator (QOperator: QLinearConv, QGemm, QLinearMatMul). Runtimes may
    execute them differently: onnxruntime on x86 runs QDQ layers with int8 activations as uint8
    (codes + 128), QOperator ones as int8 (`qverify.quant.x86`)."""

    QDQ = "QDQ"
    QOPERATOR = "QOperator"


class CodeFunction(enum.Enum):
    """An elementwise function a quantized model applies to a MAC layer's codes through a 256-entry
    table (onnxruntime's QLinearSigmoid, or DequantizeLinear -> Sigmoid -> QuantizeLinear, which it
    fuses into one): the table itself is the runtime's business (`qverify.quant.code_tables`)."""

    SIGMOID = "sigmoid"


@dataclass(frozen=True, slots=True)
class CodeLookup:
    """A code-to-code table after a MAC layer's requantization: `input` is the quantization of the
    requantized codes the table reads (the layer's `output` is the table's)."""

    function: CodeFunction
    input: TensorQuant
    what: str = "lookup"


def _check_act_range(act_range: tuple[int, int] | None, out: TensorQuant, what: str) -> None:
    if act_range is None:
        return
    low, high = act_range
    if not out.code.qmin <= low <= high <= out.code.qmax:
        raise InputError(
            f"{what}: its activation clamps codes to [{low}, {high}], outside the {out.code.value} range or empty"
        )


@dataclass(frozen=True, slots=True, eq=False)
class MacQuant:
    """The integers of one dense or convolution layer and the quantization of its input and output.

    `weights` has the float layer's weight shape (int8 values); `weight_scales` one float32 scale per
    output channel (per-channel models) or a single one (per-tensor); `bias` one int32 per output
    channel (scale input.scale * weight_scale; zeros when the model has no bias).
    """

    input: TensorQuant
    weights: np.ndarray
    weight_scales: np.ndarray
    bias: np.ndarray
    output: TensorQuant
    relu: bool
    what: str = "layer"
    form: QuantForm = QuantForm.QDQ
    lookup: CodeLookup | None = None
    pool_divisor: int = 0  # > 0: an int8 average pool as a MAC of ones (`qverify.quant.pool8`)
    pool_global: bool = False  # the pool's window is the whole unpadded image (`pool8.global_codes`)
    pool_mean: bool = (
        False  # the pool is TFLite's MEAN (a reduction), not its AVERAGE_POOL_2D (`quant.tflite8`)
    )
    # TFLite: the codes a fused activation clamps the requantized codes to (`tflite8.activation_range`);
    # None: the code range's, or from its zero point under `relu`
    act_range: tuple[int, int] | None = None
    fused: str = ""  # TFLite's fused activation function ("RELU", "RELU6", ...), "" when none is stated
    # TFLite's reference FULLY_CONNECTED: it requantizes in double, round(acc * (s_in * s_w / s_out)),
    # not with the Q31 multiplier its convolutions use (`quant.tflite8.double_requantize`)
    double_requant: bool = False

    def __post_init__(self) -> None:
        _check_act_range(self.act_range, self.requantized, self.what)
        if self.lookup is not None and self.lookup.input.code is not self.output.code:
            raise InputError(
                f"{self.lookup.what}: reads {self.lookup.input.code.value} codes and writes "
                f"{self.output.code.value} codes (a table maps codes of one type)"
            )
        weights = np.array(self.weights, dtype=np.int64, copy=True)
        if weights.size and (weights.min() < -128 or weights.max() > 127):
            raise InputError(f"{self.what}: weights must be int8 values")
        scales = np.array(self.weight_scales, dtype=np.float64, copy=True).reshape(-1)
        for index, scale in enumerate(scales):
            _float32_scale(float(scale), f"{self.what}: weight scale {index}")
        bias = np.array(self.bias, dtype=np.int64, copy=True).reshape(-1)
        if bias.size and (bias.min() < -(1 << 31) or bias.max() >= 1 << 31):
            raise InputError(f"{self.what}: bias must be int32 values")
        channels = weights.shape[0]
        if scales.size not in (1, channels):
            raise InputError(
                f"{self.what}: {scales.size} weight scales for {channels} output channels "
                "(expected one, or one per output channel)"
            )
        if bias.size != channels:
            raise InputError(f"{self.what}: {bias.size} biases for {channels} output channels")
        for array in (weights, scales, bias):
            array.flags.writeable = False
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "weight_scales", scales)
        object.__setattr__(self, "bias", bias)

    @property
    def per_channel(self) -> bool:
        return self.weight_scales.size > 1

    @property
    def requantized(self) -> TensorQuant:
        """The quantization of the codes the requantization writes: the lookup's input, else the
        layer's output."""
        return self.output if self.lookup is None else self.lookup.input

    def channel_scales(self) -> np.ndarray:
        """One weight scale per output channel (a per-tensor scale repeated)."""
        return np.broadcast_to(self.weight_scales, (self.weights.shape[0],))


@dataclass(frozen=True, slots=True, eq=False)
class PoolQuant:
    """A pool on codes: input and output quantization (equal for max pooling)."""

    input: TensorQuant
    output: TensorQuant
    what: str = "pool"
    float_path: bool = False  # onnxruntime runs the QDQ pool unfused, in float32 (`io.onnx_fusion`)
    mean: bool = False  # TFLite's MEAN over the image (its arithmetic differs from AVERAGE_POOL_2D's)
    act_range: tuple[int, int] | None = None  # TFLite: the fused activation's clamp on the output codes

    def __post_init__(self) -> None:
        _check_act_range(self.act_range, self.output, self.what)


@dataclass(frozen=True, slots=True, eq=False)
class JoinQuant:
    """A join on codes (`qverify.network.joins`): the quantization of each input and of the output.

    An `Add` of two tensors is onnxruntime's QLinearAdd (or the QDQ Add it fuses into one): each
    output code a function of the two input codes, computed in float32 (`qverify.quant.add8`).
    A `Concat` copies each input's codes, requantized element by element where that input's
    quantization is not the output's (QLinearConcat's table: QuantizeLinear of DequantizeLinear).
    A `Permute` moves codes (one input, quantized as the output). `float_path`: onnxruntime leaves
    the QDQ Add unfused (`qverify.io.onnx_fusion`) and computes DequantizeLinear, Add and
    QuantizeLinear in float32, another function of the two codes."""

    inputs: tuple[TensorQuant, ...]
    output: TensorQuant
    what: str = "join"
    form: QuantForm = QuantForm.QDQ
    float_path: bool = False
    act_range: tuple[int, int] | None = None  # TFLite's ADD: the fused activation's clamp on the codes
    fused: str = ""  # TFLite's ADD: its fused activation function ("RELU", ...)

    def __post_init__(self) -> None:
        _check_act_range(self.act_range, self.output, self.what)
        object.__setattr__(self, "inputs", tuple(self.inputs))
        if not self.inputs:
            raise InputError(f"{self.what}: a join without inputs")

    @property
    def input(self) -> TensorQuant:
        """The first input's quantization (what a chain's check reads)."""
        return self.inputs[0]

    @property
    def copies(self) -> bool:
        """Does every input already have the output's quantization (a plain copy of codes)?"""
        return all(quant.same_as(self.output) for quant in self.inputs)


LayerQuant = MacQuant | PoolQuant | JoinQuant


@dataclass(frozen=True, slots=True, eq=False)
class AffineQuantization:
    """The int8 parameters of a whole network: its input, one record per layer, its output."""

    input: TensorQuant
    layers: tuple[LayerQuant, ...]
    origin: str = ""  # e.g. "QDQ", "QOperator": how the file expressed it

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        if not self.layers:
            raise InputError("quantization parameters without layers")

    @property
    def output(self) -> TensorQuant:
        return self.layers[-1].output

    @property
    def model_format(self) -> str:
        """The number format the model means when it is run: a TFLite file's reference kernels
        (`int8-tflite`), else onnxruntime's arithmetic (`int8`)."""
        return "int8-tflite" if self.origin == "TFLite" else "int8"

    @property
    def per_channel(self) -> bool:
        return any(isinstance(layer, MacQuant) and layer.per_channel for layer in self.layers)

    def check_against(self, layers: Sequence[object], wiring: Sequence[Sequence[int]]) -> None:
        """One record per node, of the node's kind and shape, and every node's input quantization
        the one its producers write (the network input's: `input`). Called by `Network`, which has
        checked the wiring itself."""
        if len(layers) != len(self.layers):
            raise InputError(
                f"quantization parameters for {len(self.layers)} layers, the network has {len(layers)}"
            )
        for index, (layer, quant, producers) in enumerate(zip(layers, self.layers, wiring), start=1):
            has_weights = hasattr(layer, "weights")
            is_join = operator_of(layer).is_join
            if has_weights != isinstance(quant, MacQuant) or is_join != isinstance(quant, JoinQuant):
                raise InputError(f"layer {index}: quantization record of the wrong kind")
            if isinstance(quant, MacQuant) and quant.weights.shape != layer.weights.shape:  # type: ignore[attr-defined]
                raise InputError(
                    f"layer {index}: int8 weights of shape {quant.weights.shape}, the layer has "
                    f"{layer.weights.shape}"  # type: ignore[attr-defined]
                )
            reads = quant.inputs if isinstance(quant, JoinQuant) else (quant.input,)
            if len(reads) != len(producers):
                raise InputError(
                    f"{quant.what}: quantizations for {len(reads)} inputs, the node reads {len(producers)}"
                )
            for read, producer in zip(reads, producers):
                written = self.input if producer < 0 else self.layers[producer].output
                source = "the network input" if producer < 0 else self.layers[producer].what
                if not read.same_as(written):
                    raise InputError(
                        f"{quant.what}: its input is quantized as {read.describe()} but {source} writes "
                        f"{written.describe()}"
                    )

    def update_digest(self, sha: hashlib._Hash) -> None:  # type: ignore[name-defined]
        sha.update(self.input.describe().encode())
        for quant in self.layers:
            sha.update(quant.output.describe().encode())
            if isinstance(quant, JoinQuant):
                sha.update(b"join " + " ".join(q.describe() for q in quant.inputs).encode())
                sha.update(b"float" if quant.float_path else b"")
                sha.update(b"" if quant.form is QuantForm.QDQ else quant.form.value.encode())
            if isinstance(quant, PoolQuant):
                sha.update(b"float" if quant.float_path else b"")
                sha.update(b"mean" if quant.mean else b"")
            if getattr(quant, "act_range", None) is not None:
                sha.update(f"clamp {quant.act_range} {getattr(quant, 'fused', '')}".encode())
            if isinstance(quant, MacQuant):
                sha.update(b"relu" if quant.relu else b"-")
                sha.update(b"double" if quant.double_requant else b"")
                if quant.lookup is not None:
                    sha.update(f"{quant.lookup.function.value} {quant.lookup.input.describe()}".encode())
                sha.update(b"" if quant.form is QuantForm.QDQ else quant.form.value.encode())
                for array in (quant.weights, quant.weight_scales, quant.bias):
                    sha.update(np.ascontiguousarray(array).tobytes())

    def describe(self) -> str:
        kind = "per-channel" if self.per_channel else "per-tensor"
        origin = f", {self.origin}" if self.origin else ""
        return f"int8 affine ({kind}{origin}); input {self.input.describe()}"
