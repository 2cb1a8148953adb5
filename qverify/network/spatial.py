"""Convolutional and pooling layers of the IR, on tensors stored flat in NCHW order.

Every layer of a `Network` maps a flat vector to a flat vector; a spatial layer also knows the
(channels, height, width) shape of its input and output, and that the flat index of element
(c, y, x) is (c * H + y) * W + x -- the row-major (C-order) flattening of ONNX's NCHW tensors
(batch 1). ONNX `Flatten` is therefore the identity on the stored values and has no layer of its own.

A convolution and a dense layer are both *MAC layers*: each output neuron is a bias plus a sum of
weight x input products. `MacLayer.taps()` lists, per output neuron, the products in the order the
generated C adds them: for a convolution the kernel positions (input channel, kernel row, kernel
column) in lexicographic order, padded positions skipped (the C tests the bounds and adds nothing,
as microcontroller kernels do; int8 runtimes pad with the input zero point, whose product term is
0, so both agree). `matrix` is the same layer as a dense (n_out, n_in) matrix with structural zeros:
analyses that only need a linear map (interval and symbolic bounds, range analysis) use it. It is
built when first asked for, never on construction (a 1x1 convolution of a 300x300 image has 90,000
taps and a 65 GB dense matrix), and refused with the tensor-size limit (`input_limits.TENSOR_SIZE`)
when it would exceed it; the taps and windows are checked against that limit before they are built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qverify.errors import InputError
from qverify.input_limits import check_tensor
from qverify.network.activation import Activation
from qverify.network.arrays import frozen_array, require_finite
from qverify.network.taps import Taps

Shape3 = tuple[int, int, int]
Pair = tuple[int, int]
Pads = tuple[int, int, int, int]  # top, left, bottom, right (ONNX pads: [y_begin, x_begin, y_end, x_end])


def _pair(values: tuple[int, ...] | list[int], what: str) -> Pair:
    items = tuple(int(v) for v in values)
    if len(items) != 2 or any(v < 1 for v in items):
        raise InputError(f"{what} must be two positive integers, got {tuple(values)}")
    return items  # type: ignore[return-value]


def _pads(values: tuple[int, ...] | list[int]) -> Pads:
    items = tuple(int(v) for v in values)
    if len(items) != 4 or any(v < 0 for v in items):
        raise InputError(f"pads must be four non-negative integers, got {tuple(values)}")
    return items  # type: ignore[return-value]


def _shape3(values: tuple[int, ...] | list[int]) -> Shape3:
    items = tuple(int(v) for v in values)
    if len(items) != 3 or any(v < 1 for v in items):
        raise InputError(
            f"input shape must be (channels, height, width) of positive sizes, got {tuple(values)}"
        )
    return items  # type: ignore[return-value]


def output_size(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, what: str) -> int:
    """ONNX's output size floor((size + pads - kernel) / stride) + 1, which must be positive."""
    span = size + pad_begin + pad_end - kernel
    if span < 0:
        raise InputError(
            f"{what}: kernel {kernel} is larger than the padded input ({size} + {pad_begin + pad_end})"
        )
    return span // stride + 1


def _window_positions(
    in_shape: Shape3, out_shape: Shape3, kernel: Pair, strides: Pair, pads: Pads
) -> tuple[np.ndarray, np.ndarray]:
    """Per output position (oy, ox) and kernel position (ky, kx): input row and column, and validity.

    Returns iy, ix of shape (H_out, W_out, KH, KW) and a bool mask of the positions inside the input.
    """
    _, height, width = in_shape
    _, out_h, out_w = out_shape
    oy = np.arange(out_h)[:, None, None, None]
    ox = np.arange(out_w)[None, :, None, None]
    ky = np.arange(kernel[0])[None, None, :, None]
    kx = np.arange(kernel[1])[None, None, None, :]
    iy = oy * strides[0] - pads[0] + ky
    ix = ox * strides[1] - pads[1] + kx
    iy, ix = np.broadcast_arrays(iy, ix)
    inside = (iy >= 0) & (iy < height) & (ix >= 0) & (ix < width)
    return iy, ix, inside


def _compact(inputs: np.ndarray, weights: np.ndarray, valid: np.ndarray) -> Taps:
    """Move each row's valid entries to its front (order kept) and drop all-padding columns."""
    count = valid.sum(axis=1).astype(np.int64)
    width = int(count.max()) if count.size else 0
    order = np.argsort(~valid, axis=1, kind="stable")[:, :width]
    rows = np.arange(valid.shape[0])[:, None]
    keep = np.arange(width)[None, :] < count[:, None]
    packed_inputs = np.where(keep, inputs[rows, order], 0).astype(np.int64)
    packed_weights = np.where(keep, weights[rows, order], 0).astype(np.int64)
    for array in (packed_inputs, packed_weights, count):
        array.flags.writeable = False
    return Taps(packed_inputs, packed_weights, count)


@dataclass(frozen=True, slots=True, eq=False)
class Conv2D:
    """A 2-D convolution (cross-correlation, as ONNX Conv) followed by an activation.

    `weights` has ONNX's shape (out_channels, in_channels / groups, kernel_h, kernel_w); groups = 1
    is an ordinary convolution, groups = in_channels a depthwise one. Dilation is not supported.
    """

    weights: np.ndarray
    bias: np.ndarray
    activation: Activation
    input_shape: Shape3
    strides: Pair = (1, 1)
    pads: Pads = (0, 0, 0, 0)
    groups: int = 1
    output_shape: Shape3 = field(init=False)
    _taps: Taps = field(init=False, repr=False)
    _matrix: np.ndarray | None = field(init=False, repr=False, default=None)  # built on first use

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "weights", frozen_array(self.weights, ndim=4))
        set_(self, "bias", frozen_array(self.bias, ndim=1))
        set_(self, "input_shape", _shape3(self.input_shape))
        set_(self, "strides", _pair(self.strides, "conv strides"))
        set_(self, "pads", _pads(self.pads))
        require_finite(self.weights, "convolution kernel")
        require_finite(self.bias, "convolution bias")
        out_channels, group_in, kh, kw = self.weights.shape
        channels, height, width = self.input_shape
        if 0 in self.weights.shape:
            raise InputError(
                f"conv kernel of shape {self.weights.shape} is empty (0 output channels, input channels "
                "or kernel size)"
            )
        if self.groups < 1 or channels % self.groups or out_channels % self.groups:
            raise InputError(
                f"conv groups {self.groups} must divide both the input channels ({channels}) and the "
                f"output channels ({out_channels})"
            )
        if group_in * self.groups != channels:
            raise InputError(
                f"shape mismatch: conv kernel {self.weights.shape} with groups {self.groups} expects "
                f"{group_in * self.groups} input channels, the input has {channels} (shape {self.input_shape})"
            )
        if self.bias.shape[0] != out_channels:
            raise InputError(f"conv has {out_channels} output channels but {self.bias.shape[0]} biases")
        out_h = output_size(height, kh, self.strides[0], self.pads[0], self.pads[2], "conv height")
        out_w = output_size(width, kw, self.strides[1], self.pads[1], self.pads[3], "conv width")
        set_(self, "output_shape", (out_channels, out_h, out_w))
        # the taps' index arrays, (n_out, products per neuron) int64, before anything allocates them
        check_tensor((self.n_out, group_in * kh * kw), 8, f"conv {self.shape_text()}: its taps")
        set_(self, "_taps", self._build_taps())

    @property
    def kernel(self) -> Pair:
        return int(self.weights.shape[2]), int(self.weights.shape[3])

    @property
    def n_in(self) -> int:
        return math.prod(self.input_shape)

    @property
    def input_sizes(self) -> tuple[int, ...]:
        return (self.n_in,)

    @property
    def n_out(self) -> int:
        return math.prod(self.output_shape)

    @property
    def out_channels(self) -> int:
        return int(self.weights.shape[0])

    @property
    def group_in_channels(self) -> int:
        return int(self.weights.shape[1])

    def channel_of(self) -> np.ndarray:
        """The output channel of every output neuron (flat NCHW order)."""
        _, out_h, out_w = self.output_shape
        return np.repeat(np.arange(self.out_channels), out_h * out_w)

    def taps(self) -> Taps:
        return self._taps

    @property
    def matrix(self) -> np.ndarray:
        """The layer as a dense (n_out, n_in) matrix (structural zeros where no product is formed),
        built on first use.

        :raises InputError: the matrix exceeds the tensor-size limit (QVERIFY_MAX_TENSOR_MB)."""
        if self._matrix is None:
            check_tensor((self.n_out, self.n_in), 8, f"conv {self.shape_text()}: its dense matrix")
            object.__setattr__(self, "_matrix", self._build_matrix())
        return self._matrix  # type: ignore[return-value]

    def shape_text(self) -> str:
        """`1x300x300 -> 1x300x300`: what error messages name the layer by."""
        return f"{'x'.join(map(str, self.input_shape))} -> {'x'.join(map(str, self.output_shape))}"

    def _build_taps(self) -> Taps:
        _, height, width = self.input_shape
        out_channels, out_h, out_w = self.output_shape
        group_in, kh, kw = self.weights.shape[1:]
        per_group_out = out_channels // self.groups
        iy, ix, inside = _window_positions(
            self.input_shape, self.output_shape, self.kernel, self.strides, self.pads
        )
        oc = np.arange(out_channels)[:, None, None, None, None, None]
        ic = np.arange(group_in)[None, None, None, :, None, None]
        channel = (oc // per_group_out) * group_in + ic  # input channel of (oc, ic)
        shape = (out_channels, out_h, out_w, group_in, kh, kw)
        inputs = (channel * height + iy[None, :, :, None, :, :]) * width + ix[None, :, :, None, :, :]
        weights = (
            (oc * group_in + ic) * kh + np.arange(kh)[None, None, None, None, :, None]
        ) * kw + np.arange(kw)[None, None, None, None, None, :]
        valid = np.broadcast_to(inside[None, :, :, None, :, :], shape)
        n_out = out_channels * out_h * out_w
        return _compact(
            np.broadcast_to(inputs, shape).reshape(n_out, -1),
            np.broadcast_to(weights, shape).reshape(n_out, -1),
            valid.reshape(n_out, -1),
        )

    def _build_matrix(self) -> np.ndarray:
        taps = self.taps()
        matrix = np.zeros((self.n_out, self.n_in))
        rows = np.repeat(np.arange(self.n_out), taps.count)
        valid = taps.valid
        matrix[rows, taps.inputs[valid]] = self.weights.reshape(-1)[taps.weights[valid]]
        matrix.flags.writeable = False
        return matrix

    def expanded_bias(self) -> np.ndarray:
        """The bias of every output neuron (flat NCHW order)."""
        return self.bias[self.channel_of()]

    def describe(self) -> str:
        kh, kw = self.kernel
        extra = f", groups {self.groups}" if self.groups > 1 else ""
        return f"conv {self.shape_text()}, kernel {kh}x{kw}, stride {self.strides[0]}x{self.strides[1]}, pads {list(self.pads)}{extra}"


@dataclass(frozen=True, slots=True, eq=False)
class _Pool2D:
    """A pooling window over each channel: shared geometry of max and average pooling."""

    input_shape: Shape3
    kernel: Pair
    strides: Pair = (1, 1)
    pads: Pads = (0, 0, 0, 0)
    output_shape: Shape3 = field(init=False)
    _windows: Taps = field(init=False, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "input_shape", _shape3(self.input_shape))
        set_(self, "kernel", _pair(self.kernel, "pool kernel"))
        set_(self, "strides", _pair(self.strides, "pool strides"))
        set_(self, "pads", _pads(self.pads))
        channels, height, width = self.input_shape
        kh, kw = self.kernel
        if self.pads[0] >= kh or self.pads[2] >= kh or self.pads[1] >= kw or self.pads[3] >= kw:
            raise InputError(f"pool pads {list(self.pads)} must be smaller than the kernel {kh}x{kw}")
        out_h = output_size(height, kh, self.strides[0], self.pads[0], self.pads[2], "pool height")
        out_w = output_size(width, kw, self.strides[1], self.pads[1], self.pads[3], "pool width")
        set_(self, "output_shape", (channels, out_h, out_w))
        check_tensor((math.prod(self.output_shape), kh * kw), 8, f"pool {self.shape_text()}: its windows")
        iy, ix, inside = _window_positions(
            self.input_shape, self.output_shape, self.kernel, self.strides, self.pads
        )
        c = np.arange(channels)[:, None, None, None, None]
        inputs = (c * height + iy[None]) * width + ix[None]
        shape = (channels, out_h, out_w, kh, kw)
        n_out = channels * out_h * out_w
        flat = np.broadcast_to(inputs, shape).reshape(n_out, -1)
        valid = np.broadcast_to(inside[None], shape).reshape(n_out, -1)
        if not valid.any(axis=1).all():
            raise InputError("a pooling window lies entirely in the padding")
        set_(self, "_windows", _compact(flat, np.zeros_like(flat), valid))

    @property
    def activation(self) -> Activation:
        return Activation.IDENTITY

    @property
    def n_in(self) -> int:
        return math.prod(self.input_shape)

    @property
    def input_sizes(self) -> tuple[int, ...]:
        return (self.n_in,)

    @property
    def n_out(self) -> int:
        return math.prod(self.output_shape)

    def windows(self) -> Taps:
        """Per output neuron, the flat input indices of its window (padding skipped), in C order."""
        return self._windows

    def shape_text(self) -> str:
        return f"{'x'.join(map(str, self.input_shape))} -> {'x'.join(map(str, self.output_shape))}"

    def _geometry(self, name: str) -> str:
        kh, kw = self.kernel
        return f"{name} {self.shape_text()}, kernel {kh}x{kw}, stride {self.strides[0]}x{self.strides[1]}, pads {list(self.pads)}"


@dataclass(frozen=True, slots=True, eq=False)
class MaxPool2D(_Pool2D):
    """The largest value of each window (padded positions are ignored, as ONNX pads with -inf)."""

    def describe(self) -> str:
        return self._geometry("maxpool")


@dataclass(frozen=True, slots=True, eq=False)
class AveragePool2D(_Pool2D):
    """The mean of each window: the sum times 1/divisor, divisor = the window's valid positions, or
    the whole kernel when `count_include_pad` (ONNX's attribute of that name)."""

    count_include_pad: bool = False

    def divisors(self) -> np.ndarray:
        """The divisor of every output neuron."""
        if self.count_include_pad:
            return np.full(self.n_out, self.kernel[0] * self.kernel[1], dtype=np.int64)
        return self.windows().count.copy()

    def describe(self) -> str:
        suffix = ", count_include_pad" if self.count_include_pad else ""
        return self._geometry("avgpool") + suffix


Pool2D = MaxPool2D | AveragePool2D
SpatialLayer = Conv2D | MaxPool2D | AveragePool2D
