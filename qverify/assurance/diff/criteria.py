"""What counts as a disagreement between a reference and a candidate implementation, and how close an
input is to one (the search's fitness).

Three criteria, all on the outputs of both implementations in the same real (normalised) units:

- `top1`: the two top-1 classes differ (numpy's argmax: ties go to the first output, as the C's
  `>` scan does);
- `targeted` (class T): the candidate predicts T and the reference does not;
- `distance` (delta): max_j |y_ref[j] - y_cand[j]| > delta, computed in float64.

Fitness follows the papers: DiffChaser's k-uncertainty fitness |T(0) - T(k)| on logits (smaller: closer
to a decision boundary), its targeted fitness |T(0) - l(t)|, and DiverGet's Jensen-Shannon divergence of
the two softmax outputs (larger: the two implementations diverge more). Every search method *minimises*
`Criterion.fitness`, so DiverGet's divergence enters negated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.errors import InputError

KINDS = ("top1", "targeted", "distance")


@dataclass(frozen=True, slots=True)
class Criterion:
    """The disagreement criterion: `kind` with its target class or distance threshold."""

    kind: str = "top1"
    target: int | None = None
    delta: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"unknown criterion '{self.kind}' (known: {', '.join(KINDS)})")
        if self.kind == "targeted" and (self.target is None or self.target < 0):
            raise InputError("the targeted criterion needs a class: --target T (T >= 0)")
        if self.kind == "distance" and not (
            self.delta is not None and np.isfinite(self.delta) and self.delta >= 0
        ):
            raise InputError("the distance criterion needs a threshold: --delta D (D >= 0)")

    def check(self, n_outputs: int) -> None:
        if self.kind == "targeted" and self.target >= n_outputs:  # type: ignore[operator]
            raise InputError(
                f"--target {self.target}: the network has {n_outputs} outputs (classes 0..{n_outputs - 1})"
            )

    def describe(self) -> str:
        if self.kind == "targeted":
            return f"targeted: the candidate predicts class {self.target}, the reference does not"
        if self.kind == "distance":
            return f"output distance: max |y_ref - y_cand| > {self.delta:g}"
        return "top-1: the two implementations predict different classes"

    def disagrees(self, reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
        """Per row of outputs (batch, n_outputs): does the pair disagree?"""
        if self.kind == "distance":
            return output_distance(reference, candidate) > self.delta
        ref_top, cand_top = np.argmax(reference, axis=1), np.argmax(candidate, axis=1)
        if self.kind == "targeted":
            return (cand_top == self.target) & (ref_top != self.target)
        return ref_top != cand_top

    def fitness(
        self, reference: np.ndarray, candidate: np.ndarray, k: int = 1, jsd: bool = False
    ) -> np.ndarray:
        """Per row, a value to minimise: DiverGet's -JSD when `jsd`, else DiffChaser's fitness on the
        reference's logits (k-uncertainty), on the candidate's for a targeted criterion, and the negated
        output distance for the distance criterion."""
        if jsd:
            return -jensen_shannon(reference, candidate)
        if self.kind == "distance":
            return -output_distance(reference, candidate)
        if self.kind == "targeted":
            ranked = np.sort(candidate, axis=1)[:, ::-1]
            return np.abs(ranked[:, 0] - candidate[:, self.target])
        ranked = np.sort(reference, axis=1)[:, ::-1]
        return np.abs(ranked[:, 0] - ranked[:, min(k, reference.shape[1] - 1)])


def output_distance(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    return np.max(np.abs(np.asarray(reference, np.float64) - np.asarray(candidate, np.float64)), axis=1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))


def jensen_shannon(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """JSD (natural log, in [0, ln 2]) of the softmax outputs of the two implementations, per row."""
    p, q = np.exp(log_softmax(reference)), np.exp(log_softmax(candidate))
    m = 0.5 * (p + q)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_pm = np.where(p > 0, p * (np.log(p) - np.log(m)), 0.0).sum(axis=1)
        kl_qm = np.where(q > 0, q * (np.log(q) - np.log(m)), 0.0).sum(axis=1)
    return np.maximum(0.5 * (kl_pm + kl_qm), 0.0)
