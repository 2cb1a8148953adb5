"""A max pool (`qverify.network.MaxPool2D`): the largest value of each window. At the network level
it is the activation of an identity statement (`activations.MaxPool`); in int8 it takes the largest
code, exact on codes when its input and output are quantized alike."""

from __future__ import annotations

from typing import Any

import numpy as np

from qverify.errors import UnsupportedError
from qverify.network import Activation
from qverify.operators.base import PoolOperator
from qverify.quant.affine import Int8Kernel, RequantMode
from qverify.quant.network import Int8Tables, QuantizedLayer, QuantizedNetwork


class MaxPoolOperator(PoolOperator):
    kind = "maxpool"

    def quantize_int8(
        self, index: int, node: Any, quant: Any, mode: RequantMode, kernel: Int8Kernel
    ) -> QuantizedLayer:
        if not quant.input.same_as(quant.output):
            raise UnsupportedError(
                f"layer {index} ({node.describe()}): max pooling that changes the quantization "
                f"({quant.input.describe()} -> {quant.output.describe()}) is not supported"
            )
        empty = np.zeros(0, dtype=np.int64)
        return QuantizedLayer(empty, empty, Activation.IDENTITY, node, Int8Tables(quant, None, None, None))

    def real_bounds(self, node: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The window's largest bounds (exact)."""
        return self.forward(node, lo[None])[0], self.forward(node, hi[None])[0]

    def forward(self, node: Any, values: np.ndarray) -> np.ndarray:
        """The largest of each window (padding ignored)."""
        windows = node.windows()
        return (
            np.where(windows.valid[None], values[:, windows.inputs], -np.inf).max(axis=2).astype(np.float64)
        )

    def implemented_values(self, layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork):
        """The first valid element, replaced by every later one that is larger (the C's loop)."""
        windows = layer.source.windows()  # type: ignore[union-attr]
        inputs, valid = x[:, windows.inputs], windows.valid
        acc = inputs[:, :, 0]
        with np.errstate(over="ignore", invalid="ignore"):
            for t in range(1, windows.width):
                value = inputs[:, :, t]
                acc = np.where(valid[None, :, t], np.where(value > acc, value, acc), acc)
        return acc, np.zeros(acc.shape, dtype=bool)

    def simulate_int8(self, layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
        windows = layer.source.windows()  # type: ignore[union-attr]
        gathered = np.where(windows.valid[None], codes[:, windows.inputs], np.iinfo(np.int64).min)
        return gathered.max(axis=2)

    def interval_int8(self, layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray) -> tuple:
        low, high = self.simulate_int8(layer, lo), self.simulate_int8(layer, hi)
        return (low, high), (low, high)

    def net_layer(self, layer: QuantizedLayer, scale: float, tables: dict):
        """An identity statement whose activation is the pool (`activations.MaxPool`)."""
        return self.int8_net_layer(layer)

    def int8_net_layer(self, layer: QuantizedLayer):
        from qverify.engine.netlevel.activations import MaxPool
        from qverify.engine.netlevel.model import NetLayer
        from qverify.engine.netlevel.operations import IdentityOperation

        windows = layer.source.windows()  # type: ignore[union-attr]
        return NetLayer(
            IdentityOperation(layer.n_in), np.zeros(layer.n_in), MaxPool(windows.inputs, windows.valid)
        )

    def exact_layer(self, qnet: QuantizedNetwork, layer: QuantizedLayer, scale: int):
        from qverify.engine.netlevel.exact import max_pool_layer

        return max_pool_layer(layer)
