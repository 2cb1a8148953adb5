"""A concatenation (`qverify.network.Concat`): its input (the producers' values one after the
other) is its output; in int8 a copy of codes, or onnxruntime's QLinearConcat requantizing an
input's codes through a table row per input (`qverify.quant.join8`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from qverify.operators.base import JoinOperator, requantized_rows
from qverify.quant.network import QuantizedLayer, QuantizedNetwork


class ConcatOperator(JoinOperator):
    kind = "concat"

    def forward(self, node: Any, values: np.ndarray) -> np.ndarray:
        return values

    def real_bounds(self, node: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lo, hi

    def implemented_values(self, layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork):
        return x, np.zeros(x.shape, dtype=bool)

    def simulate_int8(self, layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
        if layer.int8.table is None:  # type: ignore[union-attr]  # inputs quantized as the output
            return codes
        return requantized_rows(layer, codes)

    def interval_int8(self, layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray) -> tuple:
        """The C's acc of a requantizing Concat is the input's code, requantized through its row."""
        low, high = self.simulate_int8(layer, lo), self.simulate_int8(layer, hi)
        if layer.int8.table is not None:  # type: ignore[union-attr]
            return (lo, hi), (low, high)
        return (low, high), (low, high)

    def join_context(self, layer: QuantizedLayer, names: list[str]) -> dict:
        """The parts: input array, first output index, count."""
        starts = np.concatenate(([0], np.cumsum(layer.source.input_sizes)))  # type: ignore[union-attr]
        parts = [
            {"input": name, "start": int(start), "stop": int(stop)}
            for name, start, stop in zip(names, starts[:-1], starts[1:])
        ]
        return {"parts": parts}
