"""Refuting agreement at a decision boundary: a disagreement between two points the pair classifies
differently, found by bisection on the segment between them.

Why it works. Take two points a, b of a region on which both implementations agree, with class(a) !=
class(b). Bisect the segment, keeping the two ends classified differently. When the ends come so close
that the candidate *receives the same input* at both -- its fixed-point words, int8 codes or half
values are equal, its input rounding being coarser than the reference's doubles -- the candidate gives
one class at both ends while the reference gives two: one end is a disagreement. So wherever the
reference's decision boundary crosses the inside of one of the candidate's input cells (almost always
when it crosses the region at all), a disagreement exists and this finds it in a few dozen simulator
batches. It fails only when the boundary falls exactly on a cell edge (or the ends reach adjacent
doubles first); the caller then goes on to the proofs.

The search runs on the region's nondet values (the normalised input for an L-inf region, the
(brightness, contrast) parameters for a distortion box), so whatever it returns is a point of the region
the harness replays as it replays a back end's counterexample.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qverify.assurance.diff.criteria import Criterion
from qverify.assurance.implementations import ImplementationPair

STEPS_PER_ROUND = 32  # points per simulator batch on the current segment: 5 bits of progress a round
MAX_ROUNDS = 80  # 400 bits: doubles of any exponent meet long before


def find_disagreement_between(
    pair: ImplementationPair,
    criterion: Criterion,
    to_inputs: Callable[[np.ndarray], np.ndarray],
    start: np.ndarray,
    end: np.ndarray,
) -> np.ndarray | None:
    """Nondet values of a disagreement on the segment [start, end] (values of the region), or None.

    `to_inputs` maps a batch of nondet values to normalised inputs. The two ends must be classified
    differently by the reference or by the candidate (else there is nothing to bisect: None)."""
    start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    ends = np.stack([start, end])
    hit, classes = _evaluate(pair, criterion, to_inputs, ends)
    if classes is None or classes[0] == classes[1]:
        return None if hit is None else ends[hit]
    for _ in range(MAX_ROUNDS):
        t = np.linspace(0.0, 1.0, STEPS_PER_ROUND + 1)[:, None]
        points = np.clip(start + t * (end - start), np.minimum(start, end), np.maximum(start, end))
        points[0], points[-1] = start, end  # the ends exactly: their classes differ
        hit, labels = _evaluate(pair, criterion, to_inputs, points)
        if hit is not None:
            return points[hit]
        change = next(i for i in range(1, len(points)) if labels[i] != labels[0])  # the ends differ
        new_start, new_end = points[change - 1], points[change]
        if np.array_equal(new_start, start) and np.array_equal(new_end, end):
            return None  # adjacent values: the boundary lies between two doubles, on a cell edge
        start, end = new_start, new_end
    return None


def _evaluate(
    pair: ImplementationPair, criterion: Criterion, to_inputs, values: np.ndarray
) -> tuple[int | None, list | None]:
    """One run of the pair on a batch: the index of the first disagreement (or None), and per point
    the (reference, candidate) top-1 classes to bisect on (None for the distance criterion: no
    classes)."""
    reference, candidate = pair.run(to_inputs(values))
    hits = np.flatnonzero(criterion.disagrees(reference.outputs, candidate.outputs))
    classes = None
    if criterion.kind != "distance":
        classes = list(zip(np.argmax(reference.outputs, axis=1), np.argmax(candidate.outputs, axis=1)))
    return (int(hits[0]) if len(hits) else None), classes


def differently_classified(values: np.ndarray, classes: np.ndarray, limit: int = 8) -> list[np.ndarray]:
    """Up to `limit` points of `values` whose reference class (`classes`, already computed) differs
    from that of `values[0]` (the anchor), one per class and the nearest to the anchor first (short
    segments: fewer rounds)."""
    anchor = values[0]
    order = np.argsort(np.max(np.abs(values - anchor), axis=1), kind="stable")
    chosen: dict[int, np.ndarray] = {}
    for i in order:
        label = int(classes[i])
        if label != int(classes[0]) and label not in chosen:
            chosen[label] = values[i]
        if len(chosen) == limit:
            break
    return list(chosen.values())
