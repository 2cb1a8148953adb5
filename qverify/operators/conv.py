"""A 2-D convolution (`qverify.network.Conv2D`, grouped and depthwise included): act(the kernel's
taps of each output position summed from the channel's bias)."""

from __future__ import annotations

from typing import Any

import numpy as np

from qverify.errors import UnsupportedError
from qverify.network.evaluate import DENSE_MATRIX_BYTES
from qverify.network.im2col import conv_values
from qverify.operators.base import MacOperator, chw_image
from qverify.quant.network import QuantizedLayer, QuantizedNetwork
from qverify.quant.x86 import conv_can_saturate, operand_offset


class ConvOperator(MacOperator):
    kind = "conv"
    weight_shape = "(out channel, in channel, row, column)"

    def input_image(self, node: Any) -> tuple[tuple[int, ...], np.ndarray] | None:
        """A convolution reads a CHW image in its own order."""
        return chw_image(node)

    def expanded_bias(self, layer: QuantizedLayer) -> np.ndarray:
        return layer.bias[layer.source.channel_of()]  # type: ignore[union-attr]

    def forward(self, node: Any, values: np.ndarray) -> np.ndarray:
        """A convolution whose dense matrix would be large runs as im2col (`network.im2col`)."""
        if node.n_out * node.n_in * 8 > DENSE_MATRIX_BYTES:
            return conv_values(node, values) + node.expanded_bias()
        return super().forward(node, values)

    def products(self, node: Any) -> int:
        return int(node.taps().count.sum())

    def paired_sums(self, node: Any, quant: Any, what: str) -> None:
        """:raises UnsupportedError: weights that could saturate a pair (their pairing in a
        convolution is not modelled); else the exact sum is the x86 sum (None)."""
        if operand_offset(quant) is not None and conv_can_saturate(quant.weights):
            raise UnsupportedError(
                f"{what} ({node.describe()}): its weights can saturate an int16 pair sum in onnxruntime's "
                "x86 kernels without AVX-VNNI, and their pairing in convolutions is not modelled; "
                "verify the exact int8 semantics (--format int8) or quantize with --reduce-range"
            )

    def can_saturate_pairs(self, weights: np.ndarray) -> bool:
        return bool(conv_can_saturate(weights))

    def c_context(self, qnet: QuantizedNetwork, index: int, layer: QuantizedLayer, names: list[str]) -> dict:
        """The kernel and bias, the geometry of the loops, the input channel of a group."""
        from qverify.codegen.context import geometry, int8_context, literal_type
        from qverify.codegen.literals import array_rows, tensor_rows

        source = layer.source
        weight_type = "int" if qnet.is_int8 else literal_type(qnet)
        group_in = source.group_in_channels  # type: ignore[union-attr]
        group_out = source.out_channels // source.groups  # type: ignore[union-attr]
        context = {
            **geometry(layer),
            "kind": self.kind,
            "weight_dims": "".join(f"[{size}]" for size in layer.weights.shape),
            "weight_rows": tensor_rows(layer.weights, weight_type),
            "bias_rows": array_rows(layer.bias, weight_type),
            "bias_count": layer.bias.shape[0],
            "group_in": group_in,
            "in_channel": "ic" if source.groups == 1 else f"(oc / {group_out} * {group_in} + ic)",  # type: ignore[union-attr]
        }
        if qnet.is_int8:
            context.update(int8_context(qnet, layer, "oc"))
        return context

    def linear_operation(self, layer: QuantizedLayer, scale: float):
        """The kernel's taps as a sparse matrix."""
        from qverify.engine.netlevel.operations import SparseOperation

        taps = layer.source.taps()  # type: ignore[union-attr]
        valid = taps.valid
        rows = np.repeat(np.arange(layer.n_out), taps.count)
        values = np.asarray(layer.weights, dtype=np.float64).reshape(-1)[taps.weights[valid]] * scale
        op = SparseOperation.of_taps(rows, taps.inputs[valid], values, layer.n_out, layer.n_in)
        return op, np.asarray(layer.expanded_bias(), dtype=np.float64) * scale

    def blas_geometry(self, node: Any) -> tuple[int, int, int]:
        """(im2col values per image, channels, positions) of `quant.blas8`."""
        channels, out_h, out_w = node.output_shape
        return out_h * out_w * node.group_in_channels * int(np.prod(node.kernel)), channels, out_h * out_w
