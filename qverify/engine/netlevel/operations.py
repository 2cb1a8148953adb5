"""Network level: the linear part of a layer as an operation, so that every analysis (bounds,
back-substitution, attack, rounding terms) reads a layer through the same few products whatever
its structure (a dense matrix; convolutions and pools are structured operations behind the same
interface, never a dense matrix of an image-size layer).

A layer computes z = W h + b (+ the arithmetic's error, `model.NetModel.error_terms`). What the
analyses need of W, with any number of leading batch axes on the vectors:

- `forward(h)`: W h, (..., n_in) -> (..., n_out) (interval propagation, the attack, alpha-CROWN's
  gradients);
- `backward(lam)`: lam W for rows lam, (..., n_out) -> (..., n_in) (back-substitution, gradients);
- `magnitude(v)`: |W| v for v >= 0 (the float64 rounding charges: |lam| |W| max|h| is
  |lam| . magnitude(max|h|), |b| + |W| max|h| the size of a neuron's sum);
- `interval(lo, hi)`: the two ends of W h over the box [lo, hi];
- `live_products(live)`: per neuron, how many products w h can round given which inputs may be
  non-zero (fixed point: a product by a zero weight or of an exactly-zero input is exact);
- `forward_terms` / `backward_terms`: the most terms one float64 dot product of `forward` /
  `backward` adds (their gamma_n).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np


class LinearOperation(ABC):
    """W of one layer (module docstring)."""

    n_in: int
    n_out: int

    @property
    @abstractmethod
    def forward_terms(self) -> int:
        """The most products one neuron's sum W h adds."""

    @property
    @abstractmethod
    def backward_terms(self) -> int:
        """The most terms one entry of lam W adds."""

    @abstractmethod
    def forward(self, h: np.ndarray) -> np.ndarray:
        """W h for h (..., n_in)."""

    @abstractmethod
    def backward(self, lam: np.ndarray) -> np.ndarray:
        """lam W for rows lam (..., n_out)."""

    @abstractmethod
    def magnitude(self, v: np.ndarray) -> np.ndarray:
        """|W| v for v >= 0 (..., n_in)."""

    @abstractmethod
    def interval(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(W+ lo + W- hi, W+ hi + W- lo): W h's range over the box [lo, hi] (before rounding)."""

    @abstractmethod
    def live_products(self, live: np.ndarray) -> np.ndarray:
        """Per neuron, the products by a non-zero weight of inputs marked live (1.0) in `live`."""

    @abstractmethod
    def matrix(self) -> np.ndarray:
        """W as a dense (n_out, n_in) array (the LP and the split scores of small layers)."""


@dataclass(frozen=True, slots=True, eq=False)
class DenseOperation(LinearOperation):
    """A dense weight matrix (n_out, n_in); its sign parts, magnitudes and non-zero pattern kept
    once (interval propagation and the rounding charges read them at every node)."""

    weights: np.ndarray
    abs_weights: np.ndarray = field(init=False)
    positive_t: np.ndarray = field(init=False)  # max(W, 0).T and min(W, 0).T, as `interval` uses them
    negative_t: np.ndarray = field(init=False)
    nonzero_t: np.ndarray = field(init=False)  # (n_in, n_out): 1.0 where the weight is not zero
    n_in: int = field(init=False)
    n_out: int = field(init=False)

    def __post_init__(self) -> None:
        weights = np.asarray(self.weights, dtype=np.float64)
        set_ = object.__setattr__
        set_(self, "weights", weights)
        set_(self, "abs_weights", np.abs(weights))
        set_(self, "positive_t", np.maximum(weights, 0.0).T)
        set_(self, "negative_t", np.minimum(weights, 0.0).T)
        set_(self, "nonzero_t", (weights != 0).astype(np.float64).T)
        set_(self, "n_out", int(weights.shape[0]))
        set_(self, "n_in", int(weights.shape[1]))

    @property
    def forward_terms(self) -> int:
        return self.n_in

    @property
    def backward_terms(self) -> int:
        return self.n_out

    def forward(self, h: np.ndarray) -> np.ndarray:
        return h @ self.weights.T

    def backward(self, lam: np.ndarray) -> np.ndarray:
        if lam.ndim > 2:  # one product for every row of every box (numpy would loop over boxes)
            return (lam.reshape(-1, lam.shape[-1]) @ self.weights).reshape(*lam.shape[:-1], self.n_in)
        return lam @ self.weights

    def magnitude(self, v: np.ndarray) -> np.ndarray:
        return v @ self.abs_weights.T

    def interval(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (
            lo @ self.positive_t + hi @ self.negative_t,
            hi @ self.positive_t + lo @ self.negative_t,
        )

    def live_products(self, live: np.ndarray) -> np.ndarray:
        return live @ self.nonzero_t

    def matrix(self) -> np.ndarray:
        return self.weights
