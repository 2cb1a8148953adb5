"""Suspiciousness of neurons from their activation spectrum: the seven spectrum-based fault-localisation
metrics QNNRepair uses, a ranking per metric, and the random baseline.

With a_f, n_f, a_s, n_s the counts of `spectra.Spectrum` (activated / not activated on failing /
passing tests), as the metrics' original papers define them:

    tarantula  (a_f / (a_f + n_f)) / (a_f / (a_f + n_f) + a_s / (a_s + n_s))      Jones & Harrold 2005
    ochiai     a_f / sqrt((a_f + n_f) (a_f + a_s))                                 Abreu et al. 2006
    dstar      a_f^2 / (a_s + n_f)                  (D*, star = 2)                 Wong et al. 2014
    jaccard    a_f / (a_f + n_f + a_s)                                             Abreu et al. 2007
    ample      | a_f / (a_f + n_f) - a_s / (a_s + n_s) |                           Dallmeier et al. 2005
    euclid     sqrt(a_f + n_s)                                                     Lucia et al. 2014
    wong3      a_f - h,  h = a_s (a_s <= 2), 2 + 0.1 (a_s - 2) (2 < a_s <= 10),
               2.8 + 0.001 (a_s - 10) (a_s > 10)                                   Wong et al. 2007

QNNRepair's table of these formulas is the same list (its text gives the star of D* as a square).
A fraction 0/0 counts as 0 (no evidence); x/0 with x > 0 as +infinity (every failing test and no
passing test activates the neuron: the most suspicious). Rankings sort by decreasing score; equal
scores keep neuron order, so every ranking is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qverify.assurance.repair.spectra import Spectrum
from qverify.errors import InputError

RANDOM = "random"


def _divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator with 0/0 = 0 and x/0 = +inf (x > 0)."""
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = numerator / denominator
    return np.where(denominator == 0, np.where(numerator > 0, np.inf, 0.0), ratio)


def tarantula(s: Spectrum) -> np.ndarray:
    failed = _divide(s.a_f, s.a_f + s.n_f)
    passed = _divide(s.a_s, s.a_s + s.n_s)
    return _divide(failed, failed + passed)


def ochiai(s: Spectrum) -> np.ndarray:
    return _divide(s.a_f, np.sqrt(((s.a_f + s.n_f) * (s.a_f + s.a_s)).astype(np.float64)))


def dstar(s: Spectrum) -> np.ndarray:
    return _divide(s.a_f.astype(np.float64) ** 2, s.a_s + s.n_f)


def jaccard(s: Spectrum) -> np.ndarray:
    return _divide(s.a_f, s.a_f + s.n_f + s.a_s)


def ample(s: Spectrum) -> np.ndarray:
    return np.abs(_divide(s.a_f, s.a_f + s.n_f) - _divide(s.a_s, s.a_s + s.n_s))


def euclid(s: Spectrum) -> np.ndarray:
    return np.sqrt((s.a_f + s.n_s).astype(np.float64))


def wong3(s: Spectrum) -> np.ndarray:
    a_s = s.a_s.astype(np.float64)
    h = np.where(a_s <= 2, a_s, np.where(a_s <= 10, 2 + 0.1 * (a_s - 2), 2.8 + 0.001 * (a_s - 10)))
    return s.a_f - h


METRICS: dict[str, Callable[[Spectrum], np.ndarray]] = {
    "tarantula": tarantula,
    "ochiai": ochiai,
    "dstar": dstar,
    "jaccard": jaccard,
    "ample": ample,
    "euclid": euclid,
    "wong3": wong3,
}


def suspiciousness(metric: str, spectrum: Spectrum) -> np.ndarray:
    """The metric's score of every neuron (float64; larger = more suspicious)."""
    try:
        return METRICS[metric](spectrum)
    except KeyError:
        raise InputError(f"unknown metric '{metric}' (one of {', '.join(METRICS)}, {RANDOM})") from None


def ranking(scores: np.ndarray) -> np.ndarray:
    """Neuron indices by decreasing score; equal scores in neuron order."""
    scores = np.asarray(scores, dtype=np.float64)
    return np.lexsort((np.arange(scores.size), -scores))


def random_ranking(n_neurons: int, rng: np.random.Generator) -> np.ndarray:
    """The random baseline: a uniformly random order of the neurons."""
    return rng.permutation(n_neurons)
