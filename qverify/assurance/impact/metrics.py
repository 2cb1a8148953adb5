"""The metrics of one cell of an impact study, with paired bootstrap confidence intervals.

Top-1 and top-5 accuracy and macro-F1 are scikit-learn's (`accuracy_score`, `top_k_accuracy_score`,
`f1_score(average="macro", zero_division=0)`) on the whole set. The networks' outputs are logits;
probabilities are softmax(z / T) (temperature T, default 1), and the KL divergence of an image is
computed from log-softmax values (`scipy.special.log_softmax`): finite for every finite logit, so
no probability ever needs an epsilon or a clip, and it equals `scipy.special.rel_entr(p, q).sum()`
wherever q has no underflowed zero.

Intervals: a percentile bootstrap over images. One set of resamples per cell serves every metric
and every implementation in it (paired), so the interval of a difference (top-1 drop) is that of
the paired difference. Replicates are computed for all resamples at once with numpy (gathers and
per-class counts by `bincount`, no BLAS) instead of calling scikit-learn once per resample (a study
has ~10^5 resamples); the tests check that both ways agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax
from sklearn.metrics import accuracy_score, f1_score, top_k_accuracy_score

from qverify.assurance.impact.records import Comparison, Estimate, Scores

TOP_K = 5


def log_probabilities(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """log softmax(logits / temperature), row-wise."""
    return log_softmax(np.asarray(logits, dtype=np.float64) / temperature, axis=1)


def kl_per_image(log_p: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """KL(P || Q) of each row, sum_k p_k (log p_k - log q_k), in nats; >= 0 (rounding clipped)."""
    return np.maximum(np.sum(np.exp(log_p) * (log_p - log_q), axis=1), 0.0)


def ranking_scores(logits: np.ndarray) -> np.ndarray:
    """Logits to rank classes by: +inf as the largest float, -inf and NaN as the smallest (a half
    overflow still ranks its class first; scikit-learn refuses non-finite scores)."""
    big = np.finfo(np.float64).max
    return np.nan_to_num(np.asarray(logits, dtype=np.float64), nan=-big, posinf=big, neginf=-big)


def top_k_hits(labels: np.ndarray, scores: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """Per image: is the label among the k highest scores? Ties are broken as scikit-learn's
    `top_k_accuracy_score` breaks them (stable sort, reversed: the higher class index first)."""
    ranked = np.argsort(scores, axis=1, kind="mergesort")[:, ::-1][:, :k]
    return np.any(ranked == np.asarray(labels)[:, None], axis=1)


@dataclass(frozen=True, slots=True, eq=False)
class Bootstrap:
    """Resamples of the images: `indices[b]` are the n images (drawn with replacement) of resample b."""

    indices: np.ndarray  # (resamples, n) int64
    confidence: float

    @classmethod
    def draw(cls, n: int, resamples: int, rng: np.random.Generator, confidence: float) -> Bootstrap:
        return cls(rng.integers(0, n, size=(resamples, n)), confidence)

    def interval(self, replicates: np.ndarray, value: float) -> Estimate:
        """The percentile interval of `replicates` (NaN replicates ignored; none: NaN bounds)."""
        finite = replicates[np.isfinite(replicates)]
        if finite.size == 0:
            return Estimate(float(value), float("nan"), float("nan"))
        tail = 50.0 * (1.0 - self.confidence)
        low, high = np.percentile(finite, [tail, 100.0 - tail])
        return Estimate(float(value), float(low), float(high))

    def mean(self, per_image: np.ndarray, included: np.ndarray | None = None) -> Estimate:
        """The mean of per-image values (over the `included` images) and its interval."""
        values = np.asarray(per_image, dtype=np.float64)
        if included is None:
            return self.interval(values[self.indices].mean(axis=1), float(values.mean()))
        keep = np.asarray(included, dtype=bool)
        value = float(values[keep].mean()) if keep.any() else float("nan")
        totals = np.where(keep, values, 0.0)[self.indices].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            replicates = totals / keep[self.indices].sum(axis=1)
        return self.interval(replicates, value)

    def macro_f1(self, labels: np.ndarray, predicted: np.ndarray, n_classes: int) -> Estimate:
        """scikit-learn's macro-F1 (zero_division=0) and its interval: per resample, F1 of every
        class that occurs as a label or a prediction, averaged (scikit-learn's default labels)."""
        labels, predicted = np.asarray(labels), np.asarray(predicted)
        value = float(f1_score(labels, predicted, average="macro", zero_division=0))
        resamples = len(self.indices)
        offset = np.arange(resamples)[:, None] * n_classes
        true, guess = labels[self.indices] + offset, predicted[self.indices] + offset

        def per_class(keys: np.ndarray) -> np.ndarray:
            return np.bincount(keys.ravel(), minlength=resamples * n_classes).reshape(resamples, n_classes)

        true_pos = per_class(true[true == guess])
        occurs = per_class(true) + per_class(guess)  # 2TP + FP + FN
        with np.errstate(invalid="ignore", divide="ignore"):
            f1 = np.where(occurs > 0, 2.0 * true_pos / occurs, 0.0)
            replicates = f1.sum(axis=1) / (occurs > 0).sum(axis=1)
        return self.interval(replicates, value)


def scores(labels: np.ndarray, logits: np.ndarray, boot: Bootstrap) -> Scores:
    """Top-1, top-5 (5 or more classes) and macro-F1 of one implementation's logits."""
    n_classes = logits.shape[1]
    logits = ranking_scores(logits)
    predicted = np.argmax(logits, axis=1)
    top1 = boot.mean(predicted == labels)
    top1 = Estimate(float(accuracy_score(labels, predicted)), top1.low, top1.high)
    top5 = None
    if n_classes >= TOP_K:
        hits = boot.mean(top_k_hits(labels, logits))
        value = top_k_accuracy_score(labels, logits, k=TOP_K, labels=np.arange(n_classes))
        top5 = Estimate(float(value), hits.low, hits.high)
    return Scores(top1, top5, boot.macro_f1(labels, predicted, n_classes))


def compare(
    label: str,
    labels: np.ndarray,
    reference_logits: np.ndarray,
    candidate_logits: np.ndarray,
    boot: Bootstrap,
    temperature: float,
) -> Comparison:
    """The candidate's scores and its divergence from the reference on one cell."""
    finite = np.all(np.isfinite(reference_logits), axis=1) & np.all(np.isfinite(candidate_logits), axis=1)
    log_ref = np.zeros_like(reference_logits, dtype=np.float64)
    log_cand = np.zeros_like(candidate_logits, dtype=np.float64)
    log_ref[finite] = log_probabilities(reference_logits[finite], temperature)
    log_cand[finite] = log_probabilities(candidate_logits[finite], temperature)
    ref_top1 = np.argmax(ranking_scores(reference_logits), axis=1)
    cand_top1 = np.argmax(ranking_scores(candidate_logits), axis=1)
    return Comparison(
        candidate=label,
        scores=scores(labels, candidate_logits, boot),
        kl=boot.mean(kl_per_image(log_ref, log_cand), finite),
        kl_reverse=boot.mean(kl_per_image(log_cand, log_ref), finite),
        flip_rate=boot.mean(ref_top1 != cand_top1),
        top1_drop=boot.mean((ref_top1 == labels).astype(float) - (cand_top1 == labels)),
        nonfinite=int(np.count_nonzero(~finite)),
    )
