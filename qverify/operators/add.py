"""A residual addition (`qverify.network.Add`): z = act(the sum of `count` tensors), added left to
right in the format (fxp_add with the overflow mode, one rounded addition per input in float); in
int8 onnxruntime's QLinearAdd (or TFLite's / XNNPACK's ADD) as an exact integer staircase of
acc = MA a + MB b (`qverify.quant.join8`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from qverify.errors import UnsupportedError
from qverify.network import Activation
from qverify.network.float_view import implied_join_activation
from qverify.operators.base import JoinOperator
from qverify.quant import tflite8
from qverify.quant.affine import RequantMode, apply_thresholds
from qverify.quant.buckets import made_once
from qverify.quant.fixed import FixedFormat, add
from qverify.quant.intervals import EPS64
from qverify.quant.join8 import add_staircase, all_pairs, pairs_staircase
from qverify.quant.network import QuantizedLayer, QuantizedNetwork


class AddOperator(JoinOperator):
    kind = "add"
    copies_codes = False  # (an int8 Add always requantizes: its staircase)

    def int8_staircase(self, node: Any, quant: Any, mode: RequantMode, where: str):
        tflite_add = mode in (RequantMode.TFLITE, RequantMode.XNNPACK)
        if not tflite_add:
            self._onnxruntime_only(node, quant, mode, where)
        # (its float view's activation is the one its output's clamp implies, in the staircase already)
        if node.count != 2 or node.activation not in (Activation.IDENTITY, implied_join_activation(quant)):
            raise UnsupportedError(
                f"{where}: an int8 Add is of two tensors, with no activation but its output's clamp"
            )
        if mode is RequantMode.XNNPACK:
            a, b = all_pairs(*quant.inputs)
            codes = tflite8.xnnpack_add_codes(a, b, quant, where)
            weights = tflite8.xnnpack_add_parameters(quant, where)[:2]
            return pairs_staircase(quant, a, b, codes, where, "XNNPACK's integer ADD", weights)
        if tflite_add:
            a, b = all_pairs(*quant.inputs)
            codes = tflite8.add_codes(a, b, quant, where)
            return pairs_staircase(quant, a, b, codes, where, "TFLite's integer ADD")
        return add_staircase(quant, where)

    def forward(self, node: Any, values: np.ndarray) -> np.ndarray:
        return values.reshape(len(values), node.count, -1).sum(axis=1)

    def real_bounds(self, node: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parts_lo, parts_hi = lo.reshape(node.count, -1), hi.reshape(node.count, -1)
        magnitude = np.maximum(np.abs(parts_lo), np.abs(parts_hi)).sum(axis=0)
        slack = (node.count + 3) * EPS64 * magnitude + 1e-300
        return parts_lo.sum(axis=0) - slack, parts_hi.sum(axis=0) + slack

    def implemented_values(self, layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork):
        """The inputs summed left to right (fxp_add, or one rounded addition in the float type per
        input after the first)."""
        source = layer.source
        parts = x.reshape(len(x), source.count, source.size)  # type: ignore[union-attr]
        acc = parts[:, 0]
        overflow = np.zeros(acc.shape, dtype=bool)
        fmt = qnet.number
        with np.errstate(over="ignore", invalid="ignore"):
            for i in range(1, source.count):  # type: ignore[union-attr]
                if isinstance(fmt, FixedFormat):
                    acc, overflowed = add(acc, parts[:, i], fmt)
                    overflow |= overflowed
                else:
                    acc = (acc + parts[:, i]).astype(fmt.dtype)  # type: ignore[union-attr]
        return acc, overflow

    def simulate_int8(self, layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
        """acc = sum_i w_i * (input i's code) through one table (two inputs: one lookup per output)."""
        tables = layer.int8
        source = layer.source
        parts = codes.reshape(len(codes), source.count, source.size)  # type: ignore[union-attr]
        if source.count == 2:  # type: ignore[union-attr]
            pairs = made_once(tables.table, "pairs", lambda _: _pair_codes(layer))  # type: ignore[union-attr]
            first, second = (quant.code for quant in tables.quant.inputs[:2])  # type: ignore[union-attr]
            index = (parts[:, 0] - first.qmin) * (second.qmax - second.qmin + 1)
            index += parts[:, 1] - second.qmin
            return np.take(pairs, index)
        acc = np.einsum("bis,i->bs", parts, layer.weights.astype(np.int64))
        return apply_thresholds(acc, tables.table, tables.code.qmin)  # type: ignore[union-attr]

    def interval_int8(self, layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray) -> tuple:
        """The accumulator's bounds (positive weights) and the codes of the bounds."""
        low, high = self.simulate_int8(layer, lo), self.simulate_int8(layer, hi)
        source = layer.source
        shape = (len(lo), source.count, source.size)  # type: ignore[union-attr]
        weights = layer.weights.astype(np.int64)[None, :, None]
        acc_lo, acc_hi = (weights * lo.reshape(shape)).sum(axis=1), (weights * hi.reshape(shape)).sum(axis=1)
        return (acc_lo, acc_hi), (low, high)

    def requant_note(self, layer: QuantizedLayer, quant: Any) -> str:
        arithmetic = (
            "float32 DequantizeLinear + Add + QuantizeLinear (unfused)" if quant.float_path else "QLinearAdd"
        )
        terms = " + ".join(f"{int(w)} * input {i + 1}" for i, w in enumerate(layer.weights))
        return (
            f"onnxruntime's {arithmetic} of {' and '.join(q.describe() for q in quant.inputs)} into "
            f"{quant.output.describe()}, exactly, as acc = {terms}"
        )

    def linear_operation(self, layer: QuantizedLayer, scale: float):
        """The sum of the parts (one input: an activation of its own, z = h)."""
        from qverify.engine.netlevel.operations import IdentityOperation, SumOperation

        source = layer.source
        if source.count == 1:  # type: ignore[union-attr]
            return IdentityOperation(layer.n_in), np.zeros(layer.n_in)
        return SumOperation.of(source.count, source.size), np.zeros(source.size)  # type: ignore[union-attr]

    def int8_statement(self, layer: QuantizedLayer):
        """z = acc = w_1 a + w_2 b on the two inputs' codes, through the one table."""
        from qverify.engine.netlevel.operations import SumOperation

        source = layer.source
        op = SumOperation.of(source.count, source.size, layer.weights)  # type: ignore[union-attr]
        return op, np.zeros(layer.n_out, dtype=np.int64)

    def exact_values(self, node: Any, values: np.ndarray) -> np.ndarray:
        return values.reshape(node.count, node.size).sum(axis=0)


def _pair_codes(layer: QuantizedLayer) -> np.ndarray:
    """A two-input int8 Add's output code for every pair of input codes (a, b), at index
    (a - qmin_a) * (codes of b) + (b - qmin_b): its staircase applied to all 65,536 pairs once."""
    tables = layer.int8
    a, b = all_pairs(*tables.quant.inputs[:2])  # type: ignore[union-attr]
    weights = layer.weights.astype(np.int64)
    return apply_thresholds(weights[0] * a + weights[1] * b, tables.table, tables.code.qmin)  # type: ignore[union-attr]
