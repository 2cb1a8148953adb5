"""The products of a MAC layer (dense or convolution) in the order the generated C adds them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True, eq=False)
class Taps:
    """The products of a MAC layer in C order: per output neuron, up to `width` (input, weight) pairs.

    `inputs[j, t]` is the flat input index of neuron j's t-th product and `weights[j, t]` the flat
    index into the layer's weight tensor; `count[j]` products are valid, the rest of the row is
    padding (index 0, never read).
    """

    inputs: np.ndarray  # int64 (n_out, width)
    weights: np.ndarray  # int64 (n_out, width)
    count: np.ndarray  # int64 (n_out,)

    @property
    def width(self) -> int:
        return int(self.inputs.shape[1])

    @property
    def valid(self) -> np.ndarray:
        """bool (n_out, width): which entries are real products."""
        return np.arange(self.width)[None, :] < self.count[:, None]
