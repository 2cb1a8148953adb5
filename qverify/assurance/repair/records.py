"""The records of a repair run (settings, the study fixed before any repair, outcomes, the report):
shared by the repair itself, its journal, its report and its plots."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qverify.assurance.implementations import Implementation
from qverify.assurance.repair.metrics import METRICS, RANDOM
from qverify.assurance.repair.spectra import Spectrum, TestSplit
from qverify.assurance.repair.target import RepairTarget
from qverify.errors import InputError
from qverify.network import Network
from qverify.tasks.model import timeout_problem


@dataclass(frozen=True, slots=True)
class RepairSettings:
    """What to repair and how (defaults: the output layer, the top 5 neurons, every metric)."""

    layer: int | None = None  # 1-based; None: the output layer
    neurons: int = 5
    metrics: tuple[str, ...] = (*METRICS, RANDOM)
    random_runs: int = 5
    margin: int = 1  # output steps (words or codes) failing tests must win by
    max_tests: int = 400
    time_limit_s: float = 30.0
    max_delta: int | None = 8  # largest change of one weight (steps); None: the format's range
    seed: int = 0

    def __post_init__(self) -> None:
        if self.neurons < 1:
            raise InputError(f"--neurons {self.neurons}: must be at least 1")
        if self.margin < 0:
            raise InputError(f"--margin {self.margin}: must be >= 0")
        if self.max_tests < 1:
            raise InputError(f"--max-tests {self.max_tests}: must be at least 1")
        if timeout_problem(self.time_limit_s):
            raise InputError(f"--time-limit: {timeout_problem(self.time_limit_s)}")
        if self.random_runs < 0:
            raise InputError(f"--random-runs {self.random_runs}: must be >= 0")
        if self.seed < 0:
            raise InputError(f"--random-seed {self.seed}: must be >= 0")
        if self.max_delta is not None and self.max_delta < 1:
            raise InputError(f"--max-delta {self.max_delta}: must be at least 1")
        unknown = [m for m in self.metrics if m not in METRICS and m != RANDOM]
        if unknown:
            raise InputError(f"unknown metric '{unknown[0]}' (one of {', '.join(METRICS)}, {RANDOM})")


@dataclass(frozen=True, slots=True)
class Accuracy:
    """Top-1 accuracy (fractions) on the repair set and on the validation set."""

    repair: float
    validation: float


@dataclass(frozen=True, slots=True)
class WeightChange:
    """One changed parameter: neuron, input (-1 for the bias), old and new integer value, and the
    change in real units."""

    neuron: int
    input: int
    old: int
    new: int
    real_delta: float


@dataclass(frozen=True, slots=True, eq=False)
class RepairOutcome:
    """One repair (one metric, or one random draw), measured by the simulator."""

    metric: str
    neurons: tuple[int, ...]
    status: str
    highs_status: str
    milp_time_s: float
    milp_size: tuple[int, int, int]  # rows, columns, integer columns (of the last round)
    milp_rounds: int  # solves (per-op: again with the partial sums of saturating tests)
    tests_encoded: int
    failing_encoded: int
    soft_goals: int  # output layer: one per encoded failing test; hidden layer: per test and neuron
    soft_met: int  # of those, the ones the MILP's solution meets (a promise the simulator re-checks)
    fallback_pairs: int
    disagreements: int  # encoded tests on which a promised goal does not hold in the simulator
    changes: tuple[WeightChange, ...]
    accuracy: Accuracy
    time_s: float
    network: Network | None = None
    same_as: str = ""  # another metric chose the same neurons: its repair, not solved again

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    @property
    def total_change(self) -> float:
        return float(sum(abs(c.real_delta) for c in self.changes))


@dataclass(frozen=True, slots=True, eq=False)
class RepairStudy:
    """Everything fixed before any repair is tried (module docstring, steps 1-2)."""

    target: RepairTarget
    reference: Implementation
    repair_x: np.ndarray
    repair_y: np.ndarray
    validation_x: np.ndarray
    validation_y: np.ndarray
    split: TestSplit
    spectrum: Spectrum
    float_accuracy: Accuracy
    before: Accuracy
    inputs: np.ndarray  # the repaired layer's inputs on every repair sample
    outputs: np.ndarray  # its outputs (words/codes before the activation)
    final: np.ndarray  # the network's output words/codes
    float_active: np.ndarray
    prepare_s: float


@dataclass(frozen=True, slots=True, eq=False)
class RepairReport:
    """Every outcome, and the one chosen for writing (the best repair-set accuracy among metrics)."""

    study: RepairStudy
    settings: RepairSettings
    outcomes: tuple[RepairOutcome, ...]
    selected: RepairOutcome | None
    time_s: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    def by_metric(self, metric: str) -> tuple[RepairOutcome, ...]:
        """The outcome of a metric, or the random draws (metric `random`)."""
        if metric == RANDOM:
            return tuple(o for o in self.outcomes if o.metric.startswith(RANDOM))
        return tuple(o for o in self.outcomes if o.metric == metric)
