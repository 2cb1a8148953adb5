"""What the repair asks of each test, as MILP goals over the chosen neurons (`milp.Goal`).

Output layer (label repair): a test with label y is classified y when o_y > o_k for every k < y and
o_y >= o_k for every k > y (argmax takes the first maximum, in the C as in the simulator). Passing
tests must keep that (hard goals); failing tests should get it with `margin` output steps to spare,
o_y - o_k >= max(margin, [k < y]) (soft goals: one per test). Outputs of neurons that are not
chosen do not change, so a comparison with one is a threshold on the chosen one; a comparison of
two unchosen outputs cannot change, and a failing test that one of them defeats is not encodable
with these neurons (reported, left out).

Hidden layer (QNNRepair's formulation): the chosen neurons' activation status (pre-activation > 0)
should match the float model's on failing tests (one soft goal per test and neuron that differs,
o >= zero + margin or o <= zero), and keep the quantized model's status wherever it already matches
(hard goals, margin 1). Whether that fixes the labels is for the simulator to say.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.assurance.repair.milp import Goal


@dataclass(frozen=True, slots=True, eq=False)
class GoalSet:
    """Goals over the encoded tests (positions in `tests`), and the failing tests left out."""

    goals: tuple[Goal, ...]
    tests: np.ndarray  # sample indices (of the repair set) the goals' `test` positions refer to
    unreachable: np.ndarray  # failing samples no change of the chosen neurons can fix


def _position(chosen: np.ndarray) -> dict[int, int]:
    return {int(neuron): k for k, neuron in enumerate(chosen)}


def label_goal(
    outputs: np.ndarray, label: int, chosen: dict[int, int], position: int, soft: bool, margin: int
) -> Goal | None:
    """The goal of one test at the output layer, or None when unchosen outputs already defeat it."""
    at_least, at_most, pairs = [], [], []
    y = int(label)
    for k in range(outputs.size):
        if k == y:
            continue
        need = max(margin if soft else 0, 1 if k < y else 0)
        if y in chosen and k in chosen:
            pairs.append((chosen[y], chosen[k], need))
        elif y in chosen:
            at_least.append((chosen[y], int(outputs[k]) + need))
        elif k in chosen:
            at_most.append((chosen[k], int(outputs[y]) - need))
        elif int(outputs[y]) - int(outputs[k]) < need:
            return None
    return Goal(position, soft, tuple(at_least), tuple(at_most), tuple(pairs))


def label_goals(
    outputs: np.ndarray,
    labels: np.ndarray,
    chosen: np.ndarray,
    passing: np.ndarray,
    failing: np.ndarray,
    margin: int,
) -> GoalSet:
    """Output-layer goals for the given passing and failing samples (`outputs`: the output words
    or codes of every sample)."""
    where = _position(chosen)
    goals, tests, unreachable = [], [], []
    for sample, soft in [(int(s), False) for s in passing] + [(int(s), True) for s in failing]:
        goal = label_goal(outputs[sample], int(labels[sample]), where, len(tests), soft, margin)
        if goal is None:
            unreachable.append(sample)
            continue
        goals.append(goal)
        tests.append(sample)
    return GoalSet(tuple(goals), np.array(tests, dtype=np.int64), np.array(unreachable, dtype=np.int64))


def status_goals(
    outputs: np.ndarray,
    float_active: np.ndarray,
    zero: int,
    chosen: np.ndarray,
    passing: np.ndarray,
    failing: np.ndarray,
    margin: int,
) -> GoalSet:
    """Hidden-layer goals (module docstring); `outputs` are the layer's words/codes per sample,
    `float_active` the float model's statuses."""
    goals, tests = [], []
    for sample, is_failing in [(int(s), False) for s in passing] + [(int(s), True) for s in failing]:
        position = len(tests)
        keep_up, keep_down = [], []
        for k, neuron in enumerate(chosen):
            active = bool(outputs[sample, neuron] > zero)
            wanted = bool(float_active[sample, neuron]) if is_failing else active
            if wanted != active:
                goal = (
                    Goal(position, True, at_least=((k, zero + max(margin, 1)),))
                    if wanted
                    else Goal(position, True, at_most=((k, zero),))
                )
                goals.append(goal)
            elif active:
                keep_up.append((k, zero + 1))
            else:
                keep_down.append((k, zero))
        goals.append(Goal(position, False, tuple(keep_up), tuple(keep_down)))
        tests.append(sample)
    return GoalSet(tuple(goals), np.array(tests, dtype=np.int64), np.zeros(0, dtype=np.int64))


def goal_holds(goal: Goal, outputs: np.ndarray, chosen: np.ndarray) -> bool:
    """Does the goal hold for one test's exact layer values (`outputs`: every neuron's word/code)?"""
    values = outputs[np.asarray(chosen, dtype=np.int64)]
    return (
        all(values[k] >= t for k, t in goal.at_least)
        and all(values[k] <= t for k, t in goal.at_most)
        and all(values[w] - values[lo] >= n for w, lo, n in goal.pairs)
    )
