"""Scalar path: refuting a box by a convex combination of the literals' linear upper bounds.

A violation needs every literal `g_r(x) >= 0` of a conjunction to hold at one point. The bounds give,
per box, affine functions `U_r(x) = a_r . x + c_r >= g_r(x)`; when no literal's bound is negative on
the whole box, the box is still refuted if the affine functions cannot all be non-negative at one
point of it. By LP duality (Farkas, with the box as the domain) that happens exactly when some convex
combination `sum_r w_r U_r` is negative on the whole box, and any such `w` is a certificate: the
refutation is sound for whichever weights are tried, the search only decides how often it succeeds.

The weights tried are pairs at 1/4, 1/2, 3/4 and the uniform combination, over the tightest
literals of the whole box (one matrix product per batch). Measured and dropped: the *optimal*
weights per box (the minimum of the convex piecewise-linear `max over the box of sum_r w_r U_r` over
the simplex, found exactly by enumerating the vertices of its kink arrangement: 84 small linear
solves per box for ACAS Xu's 5 inputs and 4 literals) refuted no box that single literals left
open on ACAS Xu phi2 with network 3_3 (float prototype, 600,000 boxes), and in the engine the same
number of boxes went through in 200 s.
"""

from __future__ import annotations

import numpy as np

from qverify.engine.scalar.relax import MARGIN_ABSOLUTE, MARGIN_RELATIVE

MAX_COMBINED = 8  # literals whose bounds are combined pairwise (the tightest on the whole box)


def fixed_weights(count: int, among: np.ndarray | None = None) -> np.ndarray:
    """Convex weights for combining literal bounds: pairs at 1/4, 1/2, 3/4 and the uniform one,
    over the literals `among` (default all); the others get weight 0."""
    among = np.arange(count) if among is None else among
    rows = []
    for position, i in enumerate(among):
        for j in among[position + 1 :]:
            for w in (0.25, 0.5, 0.75):
                row = np.zeros(count)
                row[i], row[j] = w, 1 - w
                rows.append(row)
    if len(among) > 2:
        row = np.zeros(count)
        row[among] = 1.0 / len(among)
        rows.append(row)
    return np.array(rows) if rows else np.zeros((0, count))


def tightest_literals(row_ub: np.ndarray, limit: int = MAX_COMBINED) -> np.ndarray:
    """The `limit` literals nearest to failing on a box (smallest upper bounds): those worth
    combining. The pair count grows quadratically, so a query with hundreds of literals (injected
    invariants) would otherwise build hundreds of thousands of combinations per box."""
    return np.sort(np.argsort(row_ub, kind="stable")[:limit])


def _box_maximum(weights: np.ndarray, coef: np.ndarray, const: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """Sound upper bound of `max over the box of sum_r w_r U_r`, per box and weight vector.

    weights (B, K, R), coef (B, R, n), const (B, R), lo/hi (B, n) -> (B, K). The float sum carries an
    outward margin relative to the magnitude of its terms (the bounds themselves already carry theirs).
    """
    combined = weights @ coef  # (B, K, n)
    high = np.maximum(combined, 0) * hi[:, None, :] + np.minimum(combined, 0) * lo[:, None, :]
    offset = np.einsum("bkr,br->bk", weights, const)
    magnitude = np.abs(high).sum(axis=2) + np.einsum("bkr,br->bk", weights, np.abs(const))
    terms = coef.shape[1] + coef.shape[2] + 16
    return offset + high.sum(axis=2) + MARGIN_ABSOLUTE + MARGIN_RELATIVE * terms * magnitude


def refuted_by_fixed(
    result, ge: np.ndarray, lo: np.ndarray, hi: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """Boxes where one of the fixed convex combinations of the `ge` literals' linear upper bounds
    is negative on the whole box."""
    if len(weights) == 0:
        return np.zeros(len(lo), dtype=bool)
    coef = result.row_input_coef[:, ge, :]
    const = result.row_const[:, ge]
    per_box = np.broadcast_to(weights, (len(lo),) + weights.shape)
    return (_box_maximum(per_box, coef, const, lo, hi) < 0).any(axis=1)
