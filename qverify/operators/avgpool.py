"""An average pool (`qverify.network.AveragePool2D`): each window's sum times the reciprocal of its
divisor. In int8 it becomes a depthwise convolution of ones whose threshold table is the code of
the window's mean (`qverify.quant.pool8`), so every later stage reads it as a convolution."""

from __future__ import annotations

from typing import Any

import numpy as np

from qverify.errors import UnsupportedError
from qverify.network import Activation, Conv2D
from qverify.network.qparams import MacQuant
from qverify.operators.base import PoolOperator
from qverify.quant.affine import Int8Kernel, RequantMode, accumulator_bounds, thresholds
from qverify.quant.fixed import FixedFormat, add, mult
from qverify.quant.intervals import EPS64
from qverify.quant.network import Int8Tables, QuantizedLayer, QuantizedNetwork, quantize_values
from qverify.quant.pool8 import ambiguous_sums, exact_means


class AveragePoolOperator(PoolOperator):
    kind = "avgpool"

    def quantize(self, index: int, node: Any, number) -> QuantizedLayer:
        """The reciprocal of each output neuron's divisor in the format (the C multiplies the
        window's sum by it)."""
        reciprocals = quantize_values(1.0 / node.divisors(), number, f"layer {index} pool reciprocal")
        return QuantizedLayer(reciprocals, np.zeros(0), node.activation, node)

    def constants(self, node: Any) -> list[tuple[np.ndarray, str]]:
        return [(1.0 / node.divisors(), "pool reciprocals")]

    def quantize_int8(
        self, index: int, node: Any, quant: Any, mode: RequantMode, kernel: Int8Kernel
    ) -> QuantizedLayer:
        """A depthwise convolution of ones whose threshold table is the code of the window's mean,
        when that is a function of the window's sum."""
        where = f"layer {index} ({node.describe()})"
        divisors = np.unique(node.divisors())
        if divisors.size != 1:
            raise UnsupportedError(
                f"{where}: int8 average pooling whose windows have different divisors (padding not counted) "
                "is not supported; count_include_pad=1 or no padding is"
            )
        tflite = mode is RequantMode.TFLITE
        if mode is RequantMode.XNNPACK:
            raise UnsupportedError(
                f"{where}: int8 {'MEAN' if quant.mean else 'average pooling'} under the LiteRT interpreter's default "
                "delegate (XNNPACK's float32 rescaling of the sum) is not modelled; verify with --format int8-tflite"
            )
        if not tflite and quant.mean:
            raise UnsupportedError(
                f"{where}: TFLite's int8 MEAN is modelled with TFLite's arithmetic (--format int8-tflite), not "
                f"with {mode.value} requantization"
            )
        channels, (kh, kw) = node.input_shape[0], node.kernel
        ones = np.ones((channels, 1, kh, kw), dtype=np.int64)
        divisor = int(divisors[0])
        conv = Conv2D(
            np.full(ones.shape, 1.0 / divisor),
            np.zeros(channels),
            Activation.IDENTITY,
            node.input_shape,
            node.strides,
            node.pads,
            groups=channels,
        )
        mac = MacQuant(
            quant.input,
            ones,
            np.ones(1),
            np.zeros(channels),
            quant.output,
            False,
            quant.what,
            pool_divisor=divisor,
            pool_global=tuple(node.kernel) == tuple(node.input_shape[1:])
            and not any(node.pads)
            and not quant.float_path,
            pool_mean=quant.mean,
            act_range=quant.act_range,
        )
        taps = int(conv.taps().count.max())
        acc_lo, acc_hi = accumulator_bounds(mac, np.full(channels, taps))
        ambiguous = np.zeros(0, dtype=np.int64)  # (the global path is exact: `pool8.global_codes`)
        if not mac.pool_global and not tflite:  # (TFLite's pools are integer arithmetic: exact)
            ambiguous = ambiguous_sums(mac, int(acc_lo.min()), int(acc_hi.max()), taps)
        if ambiguous.size:
            sum_ = int(ambiguous[0])
            raise UnsupportedError(
                f"{where}: int8 average pooling ({quant.what}): the code of a window whose codes sum to "
                f"{sum_} above the zero point depends on the float rounding of its values (its exact mean, "
                f"{float(exact_means(np.array([sum_]), mac)[0]):.6f} in output codes, lies within float32 rounding "
                f"of a rounding boundary; {ambiguous.size} such sums); not supported"
            )
        lo, hi = np.array([acc_lo.min()]), np.array([acc_hi.max()])
        table = thresholds(mac, mode, np.broadcast_to(lo, acc_lo.shape), np.broadcast_to(hi, acc_hi.shape))[
            :1
        ]
        table.flags.writeable = False
        return QuantizedLayer(
            ones,
            np.zeros(channels, dtype=np.int64),
            Activation.IDENTITY,
            conv,
            Int8Tables(mac, table, acc_lo, acc_hi),
        )

    def real_bounds(self, node: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The exact mean of the bounds, widened by a float64 rounding margin."""
        pool_lo, pool_hi = self.forward(node, lo[None])[0], self.forward(node, hi[None])[0]
        margin = (node.kernel[0] * node.kernel[1] + 3) * EPS64 * np.maximum(
            np.abs(pool_lo), np.abs(pool_hi)
        ) + 1e-300
        return pool_lo - margin, pool_hi + margin

    def forward(self, node: Any, values: np.ndarray) -> np.ndarray:
        """The exact sum divided by the divisor (the real semantics; implementations multiply by a
        rounded reciprocal: `implemented_values`)."""
        windows = node.windows()
        total = np.where(windows.valid[None], values[:, windows.inputs], 0).sum(axis=2)
        return (total / node.divisors()).astype(np.float64)

    def implemented_values(self, layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork):
        """The window's elements added in order (fixed: fxp_add; float: rounded per addition), then
        multiplied by the neuron's reciprocal (fxp_mult / one float multiplication)."""
        windows = layer.source.windows()  # type: ignore[union-attr]
        inputs, valid = x[:, windows.inputs], windows.valid
        acc = inputs[:, :, 0]
        overflow = np.zeros(acc.shape, dtype=bool)
        fmt = qnet.number
        with np.errstate(over="ignore", invalid="ignore"):
            for t in range(1, windows.width):
                value = inputs[:, :, t]
                if isinstance(fmt, FixedFormat):
                    step, overflowed = add(acc, value, fmt)
                    overflow |= overflowed & valid[None, :, t]
                else:
                    step = (acc + value).astype(fmt.dtype)  # type: ignore[union-attr]
                acc = np.where(valid[None, :, t], step, acc)
            if isinstance(fmt, FixedFormat):
                words, overflowed = mult(acc, layer.weights.astype(np.int64)[None, :], fmt)
                return words, overflow | overflowed
            return (acc * layer.weights.astype(fmt.dtype)[None, :]).astype(fmt.dtype), overflow  # type: ignore[union-attr]

    def c_context(self, qnet: QuantizedNetwork, index: int, layer: QuantizedLayer, names: list[str]) -> dict:
        from qverify.codegen.context import literal_type
        from qverify.codegen.literals import array_rows

        context = super().c_context(qnet, index, layer, names)
        context["weight_rows"] = array_rows(layer.weights, literal_type(qnet))
        return context

    def linear_operation(self, layer: QuantizedLayer, scale: float):
        """The windows with each neuron's reciprocal."""
        from qverify.engine.netlevel.operations import AveragePoolOperation

        windows = layer.source.windows()  # type: ignore[union-attr]
        rows = np.repeat(np.arange(layer.n_out), windows.count)
        reciprocal = np.asarray(layer.weights, dtype=np.float64) * scale
        op = AveragePoolOperation.of_taps(
            rows, windows.inputs[windows.valid], reciprocal[rows], layer.n_out, layer.n_in
        )
        return op, np.zeros(layer.n_out)

    def exact_layer(self, qnet: QuantizedNetwork, layer: QuantizedLayer, scale: int):
        from qverify.engine.netlevel.exact import affine_layer

        windows = layer.source.windows()  # type: ignore[union-attr]
        reciprocal = np.asarray(layer.weights)
        weights = np.where(windows.valid, reciprocal[:, None], np.zeros((), dtype=reciprocal.dtype))
        return affine_layer(
            qnet, layer, scale, weights, np.zeros(layer.n_out, dtype=reciprocal.dtype), windows.inputs
        )
