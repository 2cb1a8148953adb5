"""Passing and failing tests, and the activation spectrum of one layer's neurons (QNNRepair, Sec. 4.1).

A repair-set sample is a *passing* test when the quantized model classifies it right, a *failing*
test when the quantized model is wrong where the float model is right; a sample both models get
wrong is left out (the float model offers nothing to repair towards). QNNRepair's paper calls a
test passing when the two models merely agree; the issue's definition (above) is kept because a
repair should make the quantized model right, not make it copy the float model's mistakes.

A neuron is *activated* on a test when its activation status (pre-activation > 0, i.e. a ReLU that
lets it through) differs between the float and the quantized model: the paper's "activation
differential". The spectrum counts, per neuron, the failing and passing tests on which it is
activated (a_f, a_s) and not (n_f, n_s); the fault-localisation metrics (`metrics`) rank neurons
from these four numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.errors import InputError


@dataclass(frozen=True, slots=True, eq=False)
class TestSplit:
    """Indices of the passing, failing and left-out samples of a labelled set."""

    passing: np.ndarray
    failing: np.ndarray
    excluded: np.ndarray

    @property
    def size(self) -> int:
        return int(self.passing.size + self.failing.size + self.excluded.size)

    def describe(self) -> str:
        return (
            f"{self.passing.size} passing, {self.failing.size} failing, {self.excluded.size} wrong in "
            "both models (left out)"
        )


def split_tests(labels: np.ndarray, float_pred: np.ndarray, quant_pred: np.ndarray) -> TestSplit:
    """Passing: the quantized model is right; failing: it is wrong and the float model right."""
    labels, float_pred, quant_pred = (np.asarray(a, dtype=np.int64) for a in (labels, float_pred, quant_pred))
    if not labels.shape == float_pred.shape == quant_pred.shape:
        raise InputError("labels and predictions of different lengths")
    quant_right = quant_pred == labels
    float_right = float_pred == labels
    return TestSplit(
        passing=np.flatnonzero(quant_right),
        failing=np.flatnonzero(~quant_right & float_right),
        excluded=np.flatnonzero(~quant_right & ~float_right),
    )


@dataclass(frozen=True, slots=True, eq=False)
class Spectrum:
    """Per neuron: failing tests on which it is activated (a_f) or not (n_f), passing likewise."""

    a_f: np.ndarray
    n_f: np.ndarray
    a_s: np.ndarray
    n_s: np.ndarray

    def __post_init__(self) -> None:
        arrays = [np.asarray(getattr(self, name), dtype=np.int64) for name in ("a_f", "n_f", "a_s", "n_s")]
        if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
            raise InputError("spectrum counts must be vectors of one length")
        if any(np.any(a < 0) for a in arrays):
            raise InputError("spectrum counts must be >= 0")
        for name, array in zip(("a_f", "n_f", "a_s", "n_s"), arrays):
            object.__setattr__(self, name, array)

    @property
    def n_neurons(self) -> int:
        return int(self.a_f.size)


def activation_spectrum(float_active: np.ndarray, quant_active: np.ndarray, split: TestSplit) -> Spectrum:
    """The spectrum of a layer from the activation status of its neurons in both models.

    float_active, quant_active: bool (samples, neurons) over the whole labelled set; `split` says
    which samples fail and pass (left-out samples do not count)."""
    float_active = np.asarray(float_active, dtype=bool)
    quant_active = np.asarray(quant_active, dtype=bool)
    if float_active.shape != quant_active.shape or float_active.ndim != 2:
        raise InputError(
            f"activation statuses of different shapes: {float_active.shape} and {quant_active.shape}"
        )
    differs = float_active != quant_active
    a_f = differs[split.failing].sum(axis=0)
    a_s = differs[split.passing].sum(axis=0)
    return Spectrum(a_f=a_f, n_f=split.failing.size - a_f, a_s=a_s, n_s=split.passing.size - a_s)
