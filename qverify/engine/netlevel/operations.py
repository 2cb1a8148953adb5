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
  `backward` adds (their gamma_n);
- `sum_reach(v)`: how large the C's partial sums can grow (overflow checks).

`DenseOperation` holds a matrix; `SparseOperation` a convolution's taps (scipy CSR),
`AveragePoolOperation` a pool's windows with the reciprocal of each divisor, `SumOperation` a
residual addition of tensors, `IdentityOperation` the input of a max pool (the max itself is an
activation, `activations.MaxPool`) and a concatenation, and `PermuteOperation` a permutation.
A join reads its producers' values concatenated (`qverify.network.joins`), so it is one more W.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # scipy.sparse is imported where it is used: a dense network never needs it
    from scipy import sparse  # (~0.1 s of a small query's start: it imports numpy.testing)


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

    def backward_estimate(self, lam: np.ndarray) -> np.ndarray:
        """lam W in float32, for estimates that only choose (FSB's children, `branching`): never
        a bound. (Default: `backward`'s float64 product, stored in float32.)"""
        return self.backward(lam).astype(np.float32, copy=False)

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
        """W as a dense (n_out, n_in) array (small layers only)."""

    @abstractmethod
    def rows(self) -> sparse.csr_array:
        """W as sparse rows (the LP)."""

    def sum_reach(self, v: np.ndarray) -> np.ndarray:
        """The largest magnitude a partial sum of the neuron's terms can reach from inputs with
        |h| <= v, the bias left out (fixed point: overflow; IEEE: no infinity on the way)."""
        return self.magnitude(v)

    @property
    def exact(self) -> bool:
        """No arithmetic at all (z = h): no rounding term, no float64 charge, nothing to refine."""
        return False

    # does it multiply its inputs by constants (a fixed-point rounding per product, which
    # `operand_rounding` enumerates: dense and sparse products, an average pool's, a join's sum)?
    forms_products = False


@dataclass(frozen=True, slots=True, eq=False)
class DenseOperation(LinearOperation):
    """A dense weight matrix (n_out, n_in); its sign parts, magnitudes and non-zero pattern kept
    once (interval propagation and the rounding charges read them at every node)."""

    forms_products = True

    weights: np.ndarray
    abs_weights: np.ndarray = field(init=False)
    positive_t: np.ndarray = field(init=False)  # max(W, 0).T and min(W, 0).T, as `interval` uses them
    negative_t: np.ndarray = field(init=False)
    nonzero_t: np.ndarray = field(init=False)  # (n_in, n_out): 1.0 where the weight is not zero
    weights32: np.ndarray | None = field(init=False, default=None)  # W in float32, made when first used
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

    def backward_estimate(self, lam: np.ndarray) -> np.ndarray:
        if self.weights32 is None:
            object.__setattr__(self, "weights32", self.weights.astype(np.float32))
        rows = np.asarray(lam, dtype=np.float32).reshape(-1, lam.shape[-1])
        return (rows @ self.weights32).reshape(*lam.shape[:-1], self.n_in)

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

    def rows(self) -> sparse.csr_array:
        from scipy import sparse

        return sparse.csr_array(self.weights)


DENSE_BYTES = 1 << 26  # `matrix()` of a structured operation: at most 64 MB as a dense array


@dataclass(frozen=True, slots=True, eq=False)
class SparseOperation(LinearOperation):
    """W stored sparse (CSR, explicit zeros dropped): a convolution (any strides, padding, groups,
    depthwise: each output neuron's taps), never a dense matrix of an image-size layer. The
    products run through scipy's sparse kernels, which add only the stored terms of a row (or a
    column, for lam W): their float64 rounding is gamma_n of the most stored terms per row
    (`forward_terms`) or per column (`backward_terms`), in any order."""

    forms_products = True

    sparse: sparse.csr_array
    transpose: sparse.csr_array = field(init=False)  # W^T in CSR: lam W as W^T lam^T
    abs_sparse: sparse.csr_array = field(init=False)
    positive: sparse.csr_array = field(init=False)
    negative: sparse.csr_array = field(init=False)
    pattern: sparse.csr_array = field(init=False)  # 1.0 at every stored (non-zero) weight
    n_in: int = field(init=False)
    n_out: int = field(init=False)
    row_terms: int = field(init=False)
    column_terms: int = field(init=False)

    def __post_init__(self) -> None:
        from scipy import sparse

        matrix = sparse.csr_array(self.sparse, dtype=np.float64)
        matrix.eliminate_zeros()
        matrix.sort_indices()
        set_ = object.__setattr__
        set_(self, "sparse", matrix)
        set_(self, "transpose", sparse.csr_array(matrix.T))
        set_(self, "abs_sparse", abs(matrix))
        set_(self, "positive", matrix.maximum(0.0).tocsr())
        set_(self, "negative", matrix.minimum(0.0).tocsr())
        pattern = matrix.copy()
        pattern.data[:] = 1.0
        set_(self, "pattern", pattern)
        set_(self, "n_out", int(matrix.shape[0]))
        set_(self, "n_in", int(matrix.shape[1]))
        set_(self, "row_terms", int(np.diff(matrix.indptr).max(initial=0)))
        set_(self, "column_terms", int(np.diff(self.transpose.indptr).max(initial=0)))

    @classmethod
    def of_taps(cls, rows: np.ndarray, columns: np.ndarray, values: np.ndarray, n_out: int, n_in: int):
        """W with W[rows[i], columns[i]] = values[i] (each pair once)."""
        from scipy import sparse

        return cls(sparse.csr_array((values, (rows, columns)), shape=(n_out, n_in)))

    @property
    def forward_terms(self) -> int:
        return self.row_terms

    @property
    def backward_terms(self) -> int:
        return self.column_terms

    @staticmethod
    def _apply(matrix: sparse.csr_array, v: np.ndarray, n_out: int) -> np.ndarray:
        """matrix @ v along v's last axis, any leading axes."""
        flat = np.reshape(v, (-1, v.shape[-1]))
        return np.asarray(matrix @ flat.T).T.reshape(*v.shape[:-1], n_out)

    def forward(self, h: np.ndarray) -> np.ndarray:
        return self._apply(self.sparse, h, self.n_out)

    def backward(self, lam: np.ndarray) -> np.ndarray:
        return self._apply(self.transpose, lam, self.n_in)

    def magnitude(self, v: np.ndarray) -> np.ndarray:
        return self._apply(self.abs_sparse, v, self.n_out)

    def interval(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (
            self._apply(self.positive, lo, self.n_out) + self._apply(self.negative, hi, self.n_out),
            self._apply(self.positive, hi, self.n_out) + self._apply(self.negative, lo, self.n_out),
        )

    def live_products(self, live: np.ndarray) -> np.ndarray:
        return self._apply(self.pattern, live, self.n_out)

    def matrix(self) -> np.ndarray:
        if self.n_out * self.n_in * 8 > DENSE_BYTES:
            raise MemoryError(f"a dense {self.n_out} x {self.n_in} matrix exceeds {DENSE_BYTES >> 20} MB")
        return self.sparse.toarray()

    def rows(self) -> sparse.csr_array:
        return self.sparse


@dataclass(frozen=True, slots=True, eq=False)
class AveragePoolOperation(SparseOperation):
    """An average pool: z_j = r_j * (the sum of window j), r_j the implementation's reciprocal of
    the divisor (W[j, i] = r_j on the window). The C adds the window's values (exact in fixed point
    unless a partial sum leaves the word range) and multiplies the sum by r_j once: one rounding per
    neuron (`live_products`), and the partial sums reach the window's sum of magnitudes, not r_j
    times it (`sum_reach`)."""

    window: sparse.csr_array = field(init=False)  # 1.0 on each window (without r)

    def __post_init__(self) -> None:
        SparseOperation.__post_init__(self)
        object.__setattr__(self, "window", self.pattern)

    def live_products(self, live: np.ndarray) -> np.ndarray:
        return np.minimum(self._apply(self.window, live, self.n_out), 1.0)

    def sum_reach(self, v: np.ndarray) -> np.ndarray:
        return self._apply(self.window, v, self.n_out)


@dataclass(frozen=True, slots=True, eq=False)
class IdentityOperation(LinearOperation):
    """z = h: a max pool's layer reads its inputs unchanged (its activation takes the maxima), with
    no arithmetic, so no rounding term and no float64 charge."""

    n_in: int
    n_out: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_out", self.n_in)

    @property
    def exact(self) -> bool:
        return True

    @property
    def forward_terms(self) -> int:
        return 1

    @property
    def backward_terms(self) -> int:
        return 1

    def forward(self, h: np.ndarray) -> np.ndarray:
        return h

    def backward(self, lam: np.ndarray) -> np.ndarray:
        return lam

    def magnitude(self, v: np.ndarray) -> np.ndarray:
        return v

    def interval(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lo, hi

    def live_products(self, live: np.ndarray) -> np.ndarray:
        return np.zeros_like(live)

    def matrix(self) -> np.ndarray:
        return np.eye(self.n_in)

    def rows(self) -> sparse.csr_array:
        from scipy import sparse

        return sparse.csr_array(sparse.identity(self.n_in, format="csr"))


@dataclass(frozen=True, slots=True, eq=False)
class SumOperation(SparseOperation):
    """A residual addition of `count` tensors of `size` values: z_j = sum_i w_i h_(i size + j), W
    the blocks [w_1 I ... w_k I] (w = 1: fixed point and IEEE; int8: the integer weights of the
    join's staircase, `qverify.quant.join8`). The C adds words exactly unless a sum leaves the word
    range (fixed point: no product, so no rounding, `live_products` is 0) and rounds each addition
    once in IEEE (the error model's gamma over `forward_terms` = count terms covers it)."""

    count: int = 0

    @classmethod
    def of(cls, count: int, size: int, weights: np.ndarray | None = None) -> SumOperation:
        from scipy import sparse

        scales = np.ones(count) if weights is None else np.asarray(weights, dtype=np.float64)
        blocks = sparse.hstack(
            [sparse.identity(size, format="csr") * float(scale) for scale in scales], format="csr"
        )
        return cls(blocks, count)

    def live_products(self, live: np.ndarray) -> np.ndarray:
        return np.zeros((*live.shape[:-1], self.n_out))


@dataclass(frozen=True, slots=True, eq=False)
class PermuteOperation(LinearOperation):
    """z = h[order]: values moved, none computed (exact, as `IdentityOperation`)."""

    order: np.ndarray
    inverse: np.ndarray = field(init=False)
    n_in: int = field(init=False)
    n_out: int = field(init=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "order", np.asarray(self.order, dtype=np.int64))
        set_(self, "inverse", np.argsort(self.order))
        set_(self, "n_in", int(self.order.size))
        set_(self, "n_out", int(self.order.size))

    @property
    def exact(self) -> bool:
        return True

    @property
    def forward_terms(self) -> int:
        return 1

    @property
    def backward_terms(self) -> int:
        return 1

    def forward(self, h: np.ndarray) -> np.ndarray:
        return h[..., self.order]

    def backward(self, lam: np.ndarray) -> np.ndarray:
        return lam[..., self.inverse]  # (lam W)_i = lam_o with order[o] = i

    def magnitude(self, v: np.ndarray) -> np.ndarray:
        return v[..., self.order]

    def interval(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return lo[..., self.order], hi[..., self.order]

    def live_products(self, live: np.ndarray) -> np.ndarray:
        return np.zeros_like(live)

    def matrix(self) -> np.ndarray:
        return np.eye(self.n_in)[self.order]

    def rows(self) -> sparse.csr_array:
        from scipy import sparse

        ones = np.ones(self.n_out)
        return sparse.csr_array((ones, (np.arange(self.n_out), self.order)), shape=(self.n_out, self.n_in))
