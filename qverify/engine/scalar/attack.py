"""Scalar path: falsification with the bit-exact evaluator: box corners, random points, local search.

A box holding at most ENUMERATE_POINTS points (integers, or values of each float input's type) is
searched exhaustively instead of locally: every point once, chunk by chunk within the deadline.

The search space is the input region read off the program's assumes (a union of boxes); points are
scored by a quantitative reading of the conditions (how far from violating an assertion, how far
inside the assumes), computed on the evaluator's node values:
    a >= b  ->  a - b          a > b  ->  a - b - 1 (ints)      !x -> -x - 1 (ints) or -x (floats)
    x && y  ->  min            x || y ->  max
A point scores >= 0 exactly when it violates an assertion with every earlier assume holding; the
final word on every candidate is `ProgramRunner.run` on the original (unsimplified) program.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from qverify.engine.scalar import ssa
from qverify.engine.scalar.branch import box_counts, box_points, snap_to_grid
from qverify.engine.scalar.evaluate import VIOLATED, Evaluator, ProgramRunner, input_env
from qverify.engine.scalar.linear import dnf
from qverify.engine.scalar.semantics import FLOAT_MAX, float_dtype
from qverify.engine.scalar.ssa import Binary, Compare, Const, Input, Node, Unary

MAX_CORNER_INPUTS = 12
# a box with at most this many points is enumerated (fewer evaluations than one local search:
# 16 starts x 32 candidates x up to 1,000 rounds; the 61 x 61 float32 boxes of the float oracle
# spent 0.7 s in the local search, 516,375 points for 3,721)
ENUMERATE_POINTS = 1 << 16
ENUMERATE_CHUNK = 1024  # points per evaluation: the deadline is checked between chunks


@dataclass
class Box:
    """Inclusive bounds per input (ints for integer inputs, floats for float inputs)."""

    lo: np.ndarray
    hi: np.ndarray


def input_boxes(program: ssa.Program, interval, limit: int = 64) -> list[Box]:
    """The input region as boxes: one per disjunct of the assumes before the first assertion."""
    inputs = program.inputs
    n = len(inputs)
    base_lo = np.empty(n, dtype=object)
    base_hi = np.empty(n, dtype=object)
    for node in inputs:
        lo, hi = interval(node)
        if node.ty.is_float:
            if math.isnan(lo):
                lo, hi = -FLOAT_MAX[node.ty.bits], FLOAT_MAX[node.ty.bits]
            lo, hi = max(lo, -FLOAT_MAX[node.ty.bits]), min(hi, FLOAT_MAX[node.ty.bits])
        base_lo[node.index], base_hi[node.index] = lo, hi
    disjuncts: list[list[tuple[Node, bool]]] = [[]]
    for step in program.steps:
        if isinstance(step, ssa.Assert):
            break
        parts = dnf(step.cond, True, limit)
        if parts is None or len(disjuncts) * len(parts) > limit:
            continue
        disjuncts = [a + b for a in disjuncts for b in parts]
    boxes = []
    for literals in disjuncts:
        lo, hi = base_lo.copy(), base_hi.copy()
        for node, positive in literals:
            bound = _input_bound(node, positive)
            if bound is None:
                continue
            index, low, high = bound
            lo[index] = max(lo[index], low)
            hi[index] = min(hi[index], high)
        if all(lo[i] <= hi[i] for i in range(n)):
            boxes.append(Box(lo, hi))
    if not boxes:
        boxes = [Box(base_lo, base_hi)]
    return boxes


def _input_bound(node: Node, positive: bool):
    if not isinstance(node, Compare) or not isinstance(node.a, Input) or not isinstance(node.b, Const):
        return None
    ty = node.a.ty
    if ty.is_float and not positive:
        return None
    op = (
        node.op
        if positive
        else {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}[node.op]
    )
    value = node.b.value
    inf = math.inf
    if ty.is_float:
        table = {
            "ge": (value, inf),
            "gt": (value, inf),
            "le": (-inf, value),
            "lt": (-inf, value),
            "eq": (value, value),
        }
    else:
        table = {
            "ge": (value, inf),
            "gt": (value + 1, inf),
            "le": (-inf, value),
            "lt": (-inf, value - 1),
            "eq": (value, value),
        }
    if op not in table:
        return None
    low, high = table[op]
    return node.a.index, low, high


class Scorer:
    """Scores points: max over assertions of the violation margin, -inf-like where assumes fail."""

    def __init__(self, program: ssa.Program) -> None:
        self.program = program
        self.targets: list[Node] = []
        for step in program.steps:
            for node in _margin_leaves(step.cond):
                self.targets.append(node)
        self.evaluator = Evaluator([step.cond for step in program.steps] + self.targets)

    def score(self, x: np.ndarray) -> np.ndarray:
        size = len(x)
        keep = [step.cond for step in self.program.steps] + self.targets
        values = self.evaluator.evaluate(input_env(self.program.inputs, x), size, keep=keep)
        best = np.full(size, -np.inf)
        running = np.ones(size, dtype=bool)
        penalty = np.zeros(size)
        for step in self.program.steps:
            holds = values[step.cond.id]
            if isinstance(step, ssa.Assume):
                margin = _margin(step.cond, True, values)
                penalty = np.where(running & ~holds, np.minimum(penalty, margin) - 1, penalty)
                running = running & holds
            else:
                margin = _margin(step.cond, False, values)
                best = np.where(running, np.maximum(best, margin), best)
                running = running & holds
        return np.where(penalty < 0, penalty - 1e6, best)


def _margin_leaves(cond: Node) -> list[Node]:
    leaves = []
    stack = [cond]
    while stack:
        node = stack.pop()
        if isinstance(node, Unary) and node.op == "lnot":
            stack.append(node.a)
        elif isinstance(node, Binary) and node.op in ("land", "lor"):
            stack.extend((node.a, node.b))
        elif isinstance(node, Compare):
            leaves.extend((node.a, node.b))
    return leaves


def _as_float(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float64)


def _margin(cond: Node, positive: bool, values: dict[int, np.ndarray]) -> np.ndarray:
    """>= 0 iff cond (positive) / !cond holds; larger is 'more true'."""
    if isinstance(cond, Const):
        truth = bool(cond.value) == positive
        size = len(next(iter(values.values())))
        return np.full(size, 1.0 if truth else -1.0)
    if isinstance(cond, Unary) and cond.op == "lnot":
        return _margin(cond.a, not positive, values)
    if isinstance(cond, Binary) and cond.op in ("land", "lor"):
        a, b = _margin(cond.a, positive, values), _margin(cond.b, positive, values)
        conjunctive = (cond.op == "land") == positive
        return np.minimum(a, b) if conjunctive else np.maximum(a, b)
    if isinstance(cond, Compare) and cond.a.id in values and cond.b.id in values:
        a, b = _as_float(values[cond.a.id]), _as_float(values[cond.b.id])
        integral = not cond.a.ty.is_float
        strict = 1.0 if integral else 0.0
        op = cond.op
        if not positive:
            op = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}[op]
        with np.errstate(invalid="ignore"):
            if op == "ge":
                result = a - b
            elif op == "gt":
                result = a - b - strict
            elif op == "le":
                result = b - a
            elif op == "lt":
                result = b - a - strict
            elif op == "eq":
                result = -np.abs(a - b)
            else:
                result = np.abs(a - b) - strict
        return np.where(np.isnan(result), -np.inf, result)
    truth = values.get(cond.id)
    if truth is None:
        size = len(next(iter(values.values())))
        return np.zeros(size)
    truth = truth if positive else ~truth
    return np.where(truth, 0.0, -1.0)


@dataclass
class AttackResult:
    counterexample: np.ndarray | None
    evaluated: int


class Attack:
    """Corners, random points and a local search; confirmed on `confirm` (the original program)."""

    def __init__(self, search: ssa.Program, confirm: ProgramRunner, boxes: Sequence[Box], seed: int) -> None:
        self.search = search
        self.confirm = confirm
        self.boxes = list(boxes)
        self.rng = np.random.default_rng(seed)
        self.scorer = Scorer(search)
        self.float_inputs = [node.ty.is_float for node in search.inputs]
        self.dtypes = [node.ty for node in search.inputs]
        self.evaluated = 0
        self.exhausted: set[int] = set()  # boxes whose every point was checked

    def enumerate(self, deadline: float) -> np.ndarray | None:
        """Check every point of each box with at most ENUMERATE_POINTS points (until the
        deadline); the boxes finished are `exhausted`."""
        integer = np.array([not f for f in self.float_inputs], dtype=bool)
        grid = np.array([ty.bits if ty.is_float else 0 for ty in self.dtypes], dtype=np.int64)
        for index, box in enumerate(self.boxes):
            lo, hi = snap_to_grid(box.lo.astype(np.float64), box.hi.astype(np.float64), grid)
            lo, hi = np.where(integer, np.ceil(lo), lo), np.where(integer, np.floor(hi), hi)
            if box_counts(lo[None], hi[None], integer, grid)[0] > ENUMERATE_POINTS:
                continue
            points = box_points(lo, hi, grid)
            for start in range(0, len(points), ENUMERATE_CHUNK):
                if time.monotonic() > deadline:
                    return None
                found = self.check(self._to_input(points[start : start + ENUMERATE_CHUNK]))
                if found is not None:
                    return found
            self.exhausted.add(index)
        return None

    def _cast(self, x: np.ndarray, box: Box) -> np.ndarray:
        x = np.clip(x, box.lo.astype(np.float64), box.hi.astype(np.float64))
        out = np.empty_like(x, dtype=np.float64)
        for i, ty in enumerate(self.dtypes):
            if ty.is_float:
                column = x[:, i].astype(float_dtype(ty)).astype(np.float64)
                out[:, i] = np.clip(column, float(box.lo[i]), float(box.hi[i]))
            else:
                out[:, i] = np.round(x[:, i])
        return out

    def _to_input(self, x: np.ndarray) -> np.ndarray:
        if any(self.float_inputs):
            return x
        return x.astype(np.int64)

    def check(self, x: np.ndarray) -> np.ndarray | None:
        """Evaluate candidate rows; the first confirmed violating row, if any."""
        if len(x) == 0:
            return None
        self.evaluated += len(x)
        scores = self.scorer.score(self._to_input(x))
        hits = np.flatnonzero(scores >= 0)
        if len(hits):
            candidates = self._to_input(x[hits[:64]])
            outcome = self.confirm.run(candidates)
            rows = np.flatnonzero(outcome.status == VIOLATED)
            if len(rows):
                return candidates[rows[0]]
        self._last_scores = scores
        return None

    def corners_and_random(self, samples: int) -> np.ndarray | None:
        for box in self.boxes:
            lo, hi = box.lo.astype(np.float64), box.hi.astype(np.float64)
            n = len(lo)
            points = [lo, hi, (lo + hi) / 2]
            if n <= MAX_CORNER_INPUTS:
                points.extend(
                    np.where(np.array(bits, dtype=bool), hi, lo)
                    for bits in itertools.product((0, 1), repeat=n)
                )
            else:
                points.extend(np.where(self.rng.random(n) < 0.5, hi, lo) for _ in range(min(samples, 1024)))
            found = self.check(self._cast(np.array(points), box))
            if found is not None:
                return found
        per_box = max(samples // max(len(self.boxes), 1), 16)
        for box in self.boxes:
            lo, hi = box.lo.astype(np.float64), box.hi.astype(np.float64)
            points = lo + (hi - lo + np.where(self.float_inputs, 0.0, 1.0)) * self.rng.random(
                (per_box, len(lo))
            )
            points = np.minimum(points, hi)
            found = self.check(self._cast(np.floor(points) if not any(self.float_inputs) else points, box))
            if found is not None:
                return found
        return None

    def local_search(
        self, starts: np.ndarray, box: Box, deadline: float, rounds: int = 1000, width: int = 32
    ) -> np.ndarray | None:
        """Hill climbing on the score from the start points (rows): each round moves a few
        coordinates of every point by random steps of random scale, keeping improvements;
        points that stall restart near the best one."""
        lo, hi = box.lo.astype(np.float64), box.hi.astype(np.float64)
        span = np.maximum(hi - lo, 0)
        current = self._cast(np.atleast_2d(starts), box)
        found = self.check(current)
        if found is not None:
            return found
        scores = self._last_scores.copy()
        count, n = current.shape
        stall = np.zeros(count, dtype=np.int64)
        is_float = np.array(self.float_inputs)
        for _ in range(rounds):
            if time.monotonic() > deadline:
                return None
            changed = max(1, min(n, int(self.rng.choice((1, 1, 2, 3, 4, 8)))))
            mask = np.zeros((count, width, n), dtype=bool)
            picks = self.rng.random((count, width, n)).argsort(axis=2)[:, :, :changed]
            np.put_along_axis(mask, picks, True, axis=2)
            scale = 0.5 ** self.rng.integers(0, 12, size=(count, width, 1))
            step = np.maximum(span * scale, np.where(is_float, 0.0, 1.0))
            direction = self.rng.choice((-1.0, 1.0), size=(count, width, n))
            magnitude = np.where(
                is_float, self.rng.random((count, width, n)), self.rng.integers(1, 4, size=(count, width, n))
            )
            candidates = current[:, None, :] + mask * direction * magnitude * step
            candidates = self._cast(candidates.reshape(-1, n), box)
            found = self.check(candidates)
            if found is not None:
                return found
            cand_scores = self._last_scores.reshape(count, width)
            best = cand_scores.argmax(axis=1)
            best_scores = cand_scores[np.arange(count), best]
            improved = best_scores > scores
            chosen = candidates.reshape(count, width, n)[np.arange(count), best]
            current = np.where(improved[:, None], chosen, current)
            scores = np.where(improved, best_scores, scores)
            stall = np.where(improved, 0, stall + 1)
            stuck = stall > 40
            if stuck.any():
                leader = current[int(np.argmax(scores))]
                jitter = leader + self.rng.normal(0, 1, (int(stuck.sum()), n)) * np.maximum(span * 0.05, 1)
                current[stuck] = self._cast(jitter, box)
                scores[stuck] = -np.inf
                stall[stuck] = 0
        return None

    def run(self, samples: int, deadline: float) -> AttackResult:
        found = self.corners_and_random(samples)
        if found is None and time.monotonic() <= deadline:
            found = self.enumerate(deadline)
        if found is not None or time.monotonic() > deadline:
            return AttackResult(found, self.evaluated)
        for index, box in enumerate(self.boxes):
            if index in self.exhausted:
                continue
            lo, hi = box.lo.astype(np.float64), box.hi.astype(np.float64)
            starts = lo + (hi - lo) * self.rng.random((256, len(lo)))
            starts = self._cast(starts, box)
            if self.check(starts) is not None:
                return AttackResult(self.check(starts), self.evaluated)
            best = np.argsort(self._last_scores)[-16:]
            found = self.local_search(starts[best], box, deadline)
            if found is not None:
                break
        return AttackResult(found, self.evaluated)
