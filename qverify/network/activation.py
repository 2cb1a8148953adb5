"""The activations a layer of the IR applies after its linear map (dense, convolution)."""

from __future__ import annotations

import enum


class Activation(enum.Enum):
    """Activation applied after a dense layer's affine map."""

    RELU = "relu"
    RELU6 = "relu6"  # min(max(x, 0), 6): ONNX Clip(0, 6), and the float view of an int8 clamp at 6
    SIGMOID = "sigmoid"
    TANH = "tanh"
    IDENTITY = "identity"
