"""A permutation (`qverify.network.Permute`): z[i] = h[order[i]] (tf2onnx's and TFLite's layout
changes); exact in every format, codes moved in int8."""

from __future__ import annotations

from typing import Any

import numpy as np

from qverify.operators.base import JoinOperator
from qverify.quant.network import QuantizedLayer, QuantizedNetwork


class PermuteOperator(JoinOperator):
    kind = "permute"

    def input_image(self, node: Any) -> tuple[tuple[int, ...], np.ndarray] | None:
        """A permutation into a (C, H, W) image (the TFLite reader's, tf2onnx's Transpose): the input
        holds the image's values in the file's order."""
        if len(node.output_shape) != 3:
            return None
        return tuple(node.output_shape), np.asarray(node.order)

    def forward(self, node: Any, values: np.ndarray) -> np.ndarray:
        return values[:, node.order]

    def real_bounds(self, node: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lo[node.order], hi[node.order]

    def implemented_values(self, layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork):
        return x[:, layer.source.order], np.zeros((len(x), layer.n_out), dtype=bool)  # type: ignore[union-attr]

    def simulate_int8(self, layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
        return codes[:, layer.source.order]  # type: ignore[union-attr]

    def join_context(self, layer: QuantizedLayer, names: list[str]) -> dict:
        """The index table."""
        from qverify.codegen.literals import array_rows

        return {"order_rows": array_rows(layer.source.order, "int")}  # type: ignore[union-attr]

    def int8_net_layer(self, layer: QuantizedLayer):
        from qverify.engine.netlevel.activations import Identity
        from qverify.engine.netlevel.model import NetLayer
        from qverify.engine.netlevel.operations import PermuteOperation

        return NetLayer(PermuteOperation(layer.source.order), np.zeros(layer.n_out), Identity())  # type: ignore[union-attr]

    def linear_operation(self, layer: QuantizedLayer, scale: float):
        from qverify.engine.netlevel.operations import PermuteOperation

        return PermuteOperation(layer.source.order), np.zeros(layer.n_in)  # type: ignore[union-attr]

    def exact_values(self, node: Any, values: np.ndarray) -> np.ndarray:
        return values[node.order]
