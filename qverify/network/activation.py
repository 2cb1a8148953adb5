"""The activations a layer of the IR applies after its linear map (dense, convolution)."""

from __future__ import annotations

import enum


class Activation(enum.Enum):
    """Activation applied after a dense layer's affine map."""

    RELU = "relu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    IDENTITY = "identity"
