"""A dense layer (`qverify.network.Dense`): act(W x + b), W a matrix (n_out, n_in)."""

from __future__ import annotations

from typing import Any

import numpy as np

from qverify.operators.base import MacOperator
from qverify.quant.network import QuantizedLayer, QuantizedNetwork
from qverify.quant.x86 import PairedSums, dense_can_saturate, operand_offset


class DenseOperator(MacOperator):
    kind = "dense"
    is_dense = True
    weight_shape = "(neuron, input)"

    def products(self, node: Any) -> int:
        return int(node.n_in * node.n_out)

    def channel_reach(self, node: Any, weights: np.ndarray) -> np.ndarray:
        return np.abs(weights).sum(axis=1)

    def paired_sums(self, node: Any, quant: Any, what: str) -> PairedSums | None:
        offset = operand_offset(quant)
        if offset is None or not dense_can_saturate(quant.weights):
            return None
        correction = (quant.input.zero_point + offset) * quant.weights.sum(axis=1)
        return PairedSums(offset, (quant.bias - correction).astype(np.int64))

    def can_saturate_pairs(self, weights: np.ndarray) -> bool:
        return bool(dense_can_saturate(weights.reshape(weights.shape[0], -1)))

    def loop_variables(self, balanced: bool) -> set[str]:
        return {"j"} if balanced else {"j", "i"}

    def c_context(self, qnet: QuantizedNetwork, index: int, layer: QuantizedLayer, names: list[str]) -> dict:
        """The weight matrix and bias; the balanced layout's expression tree; int8's table (and
        int8-x86's bias with the zero-point correction folded in, its pairs)."""
        from qverify.codegen.context import int8_context, literal_type, tree_expression
        from qverify.codegen.literals import array_rows, matrix_rows
        from qverify.vocabulary import Layout

        weight_type = "int" if qnet.is_int8 else literal_type(qnet)
        context = {
            "kind": self.kind,
            "weight_dims": f"[{layer.n_out}][{layer.n_in}]",
            "weight_rows": matrix_rows(layer.weights, weight_type),
            "bias_rows": array_rows(layer.bias, weight_type),
            "bias_count": layer.n_out,
        }
        if qnet.options.layout is Layout.BALANCED:
            context["tree"] = tree_expression(qnet, index, layer.n_in, names[0])
        if qnet.is_int8:
            context.update(int8_context(qnet, layer, "j"))
            paired = layer.int8.paired  # type: ignore[union-attr]
            if paired is not None:
                context.update(
                    bias_rows=array_rows(paired.bias, weight_type),
                    pair_offset=paired.offset,
                    pair_count=layer.n_in // 2,
                    odd_input=layer.n_in - 1 if layer.n_in % 2 else None,
                )
        return context

    def linear_operation(self, layer: QuantizedLayer, scale: float):
        from qverify.engine.netlevel.operations import DenseOperation

        weights = np.asarray(layer.weights, dtype=np.float64) * scale
        return DenseOperation(weights), np.asarray(layer.bias, dtype=np.float64) * scale

    def exact_terms(self, layer: QuantizedLayer) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        return np.asarray(layer.weights), np.asarray(layer.bias), None

    def blas_geometry(self, node: Any) -> tuple[int, int, int]:
        """(im2col values per image, channels, positions) of `quant.blas8`: a matrix row per neuron."""
        return node.n_in, node.n_out, 1
