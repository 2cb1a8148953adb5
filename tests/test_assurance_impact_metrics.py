"""Impact metrics against scikit-learn and scipy on fixed arrays: KL (scipy.special.rel_entr), top-1,
top-5 with ties, macro-F1 (also per bootstrap resample), flip rate, the non-finite rule, and the
bootstrap interval's width."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import rel_entr, softmax
from sklearn.metrics import accuracy_score, f1_score, top_k_accuracy_score

from qverify.assurance.impact.metrics import (
    Bootstrap,
    compare,
    kl_per_image,
    log_probabilities,
    scores,
    top_k_hits,
)

RNG = np.random.default_rng(20261123)
LOGITS_P = RNG.normal(0, 3, size=(60, 10))
LOGITS_Q = LOGITS_P + RNG.normal(0, 0.5, size=(60, 10))
LABELS = RNG.integers(0, 10, size=60)


def one_resample(indices: np.ndarray) -> Bootstrap:
    """A bootstrap whose only resample is `indices`: its interval is that resample's value."""
    return Bootstrap(np.asarray(indices)[None, :], 0.95)


def test_kl_equals_scipy_rel_entr_both_ways_and_at_a_temperature():
    for temperature in (1.0, 2.5):
        p, q = softmax(LOGITS_P / temperature, axis=1), softmax(LOGITS_Q / temperature, axis=1)
        log_p, log_q = log_probabilities(LOGITS_P, temperature), log_probabilities(LOGITS_Q, temperature)
        assert np.allclose(kl_per_image(log_p, log_q), rel_entr(p, q).sum(axis=1), rtol=1e-10, atol=1e-14)
        assert np.allclose(kl_per_image(log_q, log_p), rel_entr(q, p).sum(axis=1), rtol=1e-10, atol=1e-14)
    # the paper's worked example: FP32 (0.7, 0.2, 0.1) vs INT8 (0.5, 0.4, 0.1)
    p, q = np.log([[0.7, 0.2, 0.1]]), np.log([[0.5, 0.4, 0.1]])
    expected = 0.7 * math.log(0.7 / 0.5) + 0.2 * math.log(0.2 / 0.4)
    assert kl_per_image(log_probabilities(p), log_probabilities(q))[0] == pytest.approx(expected, rel=1e-12)
    assert kl_per_image(log_probabilities(p), log_probabilities(p))[0] == 0.0


def test_kl_needs_no_epsilon_where_a_probability_underflows():
    p_logits, q_logits = np.array([[0.0, 0.0]]), np.array([[0.0, -800.0]])  # q = (1, e^-800): 0 in float64
    assert softmax(q_logits, axis=1)[0, 1] == 0.0
    assert np.isinf(
        rel_entr(softmax(p_logits, axis=1), softmax(q_logits, axis=1)).sum()
    )  # an epsilon would be needed
    kl = kl_per_image(log_probabilities(p_logits), log_probabilities(q_logits))[0]
    assert kl == pytest.approx(800 / 2 - math.log(2), rel=1e-12)  # exact: 0.5 log 0.5 + 0.5 (log 0.5 + 800)


def test_top1_top5_and_f1_equal_scikit_learn():
    boot = Bootstrap.draw(60, 50, np.random.default_rng(0), 0.95)
    got = scores(LABELS, LOGITS_P, boot)
    predicted = np.argmax(LOGITS_P, axis=1)
    assert got.top1.value == accuracy_score(LABELS, predicted)
    assert got.top5.value == top_k_accuracy_score(LABELS, LOGITS_P, k=5, labels=np.arange(10))
    assert got.f1.value == f1_score(LABELS, predicted, average="macro", zero_division=0)
    assert scores(LABELS % 3, LOGITS_P[:, :3], boot).top5 is None  # fewer than 5 classes


def test_top_k_hits_break_ties_as_scikit_learn():
    tied = RNG.integers(-3, 3, size=(200, 10)).astype(float)  # int8-like outputs: many ties
    labels = RNG.integers(0, 10, size=200)
    for k in (1, 3, 5):
        expected = top_k_accuracy_score(labels, tied, k=k, labels=np.arange(10))
        assert top_k_hits(labels, tied, k).mean() == expected


def test_bootstrap_replicates_equal_scikit_learn_on_each_resample():
    predicted = np.argmax(LOGITS_Q, axis=1)
    for seed in range(5):
        indices = np.random.default_rng(seed).integers(0, 60, size=60)
        boot = one_resample(indices)
        f1 = boot.macro_f1(LABELS, predicted, 10)
        assert (
            f1.low
            == f1.high
            == pytest.approx(
                f1_score(LABELS[indices], predicted[indices], average="macro", zero_division=0), abs=1e-12
            )
        )
        assert f1.value == f1_score(LABELS, predicted, average="macro", zero_division=0)
        top1 = boot.mean(predicted == LABELS)
        assert top1.low == pytest.approx(accuracy_score(LABELS[indices], predicted[indices]), abs=1e-12)
        values = RNG.random(60)
        keep = values > 0.3
        mean = boot.mean(values, keep)
        assert mean.value == pytest.approx(values[keep].mean())
        assert mean.low == pytest.approx(values[indices][keep[indices]].mean())


def test_bootstrap_interval_has_the_normal_width_on_a_proportion():
    hits = np.zeros(450)
    hits[:405] = 1.0  # 90 % accuracy on 450 images
    estimate = Bootstrap.draw(450, 2000, np.random.default_rng(1), 0.95).mean(hits)
    expected = 2 * 1.96 * math.sqrt(0.9 * 0.1 / 450)
    assert estimate.value == 0.9 and estimate.low < 0.9 < estimate.high
    assert abs((estimate.high - estimate.low) / expected - 1) < 0.1
    assert math.isnan(Bootstrap.draw(450, 0, np.random.default_rng(1), 0.95).mean(hits).low)  # no resamples


def test_compare_gives_flip_rate_kl_and_leaves_non_finite_images_out():
    boot = Bootstrap.draw(60, 100, np.random.default_rng(2), 0.9)
    candidate = LOGITS_Q.copy()
    candidate[5, 3] = np.inf  # a half overflow
    got = compare("half", LABELS, LOGITS_P, candidate, boot, 1.0)
    finite = np.ones(60, dtype=bool)
    finite[5] = False
    p, q = softmax(LOGITS_P[finite], axis=1), softmax(LOGITS_Q[finite], axis=1)
    assert got.nonfinite == 1
    assert got.kl.value == pytest.approx(rel_entr(p, q).sum(axis=1).mean(), rel=1e-10)
    assert got.kl_reverse.value == pytest.approx(rel_entr(q, p).sum(axis=1).mean(), rel=1e-10)
    flips = np.argmax(LOGITS_P, axis=1) != np.argmax(candidate, axis=1)
    assert got.flip_rate.value == flips.mean()
    ref_hits = np.argmax(LOGITS_P, axis=1) == LABELS
    assert got.top1_drop.value == pytest.approx(ref_hits.mean() - got.scores.top1.value)
    assert got.kl.low <= got.kl.value <= got.kl.high
