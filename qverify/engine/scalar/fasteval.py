"""Scalar path: a fast evaluator of an exact integer lowering: the query's literals on many points at once.

The lowering's variables are grouped by depth (1 + the deepest variable in their arguments) and
kind; each group's affine arguments are one int64 matrix product (modular, like the C's int64, so
partial sums may wrap as long as the value does not), followed by the kind's vectorised operation.
On an integer program this computes every variable exactly for every point that reaches the query's
assertion; it is used to screen probe points, and every hit is confirmed on the program itself.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from qverify.engine.c_types import int_type
from qverify.engine.scalar import semantics as sem
from qverify.engine.scalar.evaluate import wrap_array
from qverify.engine.scalar.linear import Affine, Conjunction, Lowering


class LoweredEvaluator:
    def __init__(self, lowering: Lowering) -> None:
        self.lowering = lowering
        n = len(lowering.vars)
        self.n = n
        level = np.zeros(n, dtype=np.int64)
        for var in lowering.vars:
            depth = 0
            for arg in var.args:
                for index in arg.terms:
                    depth = max(depth, int(level[index]) + 1)
            level[var.index] = depth if var.kind != "input" else 0
        self.level = level
        groups: dict[tuple, list[int]] = defaultdict(list)
        for var in lowering.vars:
            if var.kind == "input":
                continue
            key = (int(level[var.index]), var.kind, var.params if var.kind in ("quot", "wrap", "cmp") else ())
            if var.kind == "step":
                key = (int(level[var.index]), "step", var.index)
            groups[key].append(var.index)
        self.groups = []
        for key in sorted(groups, key=lambda k: (k[0], str(k[1]), str(k[2]))):
            members = np.array(groups[key], dtype=np.int64)
            n_args = len(lowering.vars[members[0]].args)
            matrices = []
            for position in range(n_args):
                matrices.append(self._matrix([lowering.vars[m].args[position] for m in members]))
            self.groups.append((key, members, matrices))
        self.inputs = dict(lowering.inputs)
        self._check_rows: tuple | None = None  # built on first use
        self._literal_rows: dict[int, tuple] = {}  # id(conjunction) -> (conjunction, matrix, senses)

    @staticmethod
    def _matrix(rows: list[Affine]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded sparse rows: (columns (m, t), coefficients (m, t), constants (m,))."""
        width = max((len(row.terms) for row in rows), default=0)
        columns = np.zeros((len(rows), max(width, 1)), dtype=np.int64)
        coefs = np.zeros((len(rows), max(width, 1)), dtype=np.int64)
        const = np.zeros(len(rows), dtype=np.int64)
        for r, row in enumerate(rows):
            for k, (index, coef) in enumerate(row.terms.items()):
                columns[r, k] = index
                coefs[r, k] = int(coef)
            const[r] = int(row.const)
        return columns, coefs, const

    @staticmethod
    def _affine(values: np.ndarray, columns: np.ndarray, coefs: np.ndarray, const: np.ndarray) -> np.ndarray:
        total = np.broadcast_to(const, (values.shape[0], len(const))).copy()
        for k in range(columns.shape[1]):
            total += values[:, columns[:, k]] * coefs[:, k]
        return total

    def values(self, x: np.ndarray) -> np.ndarray:
        """(B, n_vars) int64 values; x rows are full program input vectors."""
        x = np.atleast_2d(x).astype(np.int64)
        batch = len(x)
        values = np.zeros((batch, self.n), dtype=np.int64)
        for index, var in self.inputs.items():
            values[:, var] = x[:, index]
        with np.errstate(all="ignore"):
            for (level, kind, params), members, matrices in self.groups:
                args = [self._affine(values, cols, coefs, const) for cols, coefs, const in matrices]
                values[:, members] = self._apply(kind, params, members, args)
        return values

    def _apply(self, kind: str, params, members: np.ndarray, args: list[np.ndarray]) -> np.ndarray:
        if kind == "quot":
            d, mode = params
            a = args[0]
            if mode == "floor":
                return np.floor_divide(a, d)
            if mode == "rna":
                half = d // 2
                magnitude = (np.abs(a) + half) // d
                return np.where(a >= 0, magnitude, -magnitude)
            magnitude = np.abs(a) // d
            return np.where(a >= 0, magnitude, -magnitude)
        if kind == "relu":
            return np.maximum(args[0], 0)
        if kind == "wrap":
            bits, signed = params
            return wrap_array(int_type(bits, signed), args[0])
        if kind == "mul":
            return args[0] * args[1]
        if kind == "ite":
            return np.where(args[0] != 0, args[1], args[2])
        if kind == "cmp":
            (test,) = params
            if test == "ge0":
                return (args[0] >= 0).astype(np.int64)
            if test == "eq0":
                return (args[0] == 0).astype(np.int64)
            return (args[0] != 0).astype(np.int64)
        if kind == "and":
            return np.all(np.stack([a != 0 for a in args]), axis=0).astype(np.int64)
        if kind == "or":
            return np.any(np.stack([a != 0 for a in args]), axis=0).astype(np.int64)
        if kind == "step":
            var = self.lowering.vars[int(params)]
            starts, step_values = var.params
            position = np.maximum(
                np.searchsorted(np.asarray(starts, dtype=np.int64), args[0][:, 0], side="right") - 1, 0
            )
            return np.asarray(step_values, dtype=np.int64)[position][:, None]
        raise ValueError(kind)

    def holds(self, conjunction: Conjunction, x: np.ndarray) -> np.ndarray:
        """Per row of x: do all literals of the conjunction hold? For an optimistic lowering, rows
        where some saturation/wrap check fails (the lowering is not exact there) count as holding:
        they must be decided on the program itself."""
        values = self.values(x)
        literals, is_ge = self._literals(conjunction)
        if literals is None:
            return np.ones(len(values), dtype=bool)
        value = self._affine(values, *literals)
        result = np.where(is_ge[None, :], value >= 0, value == 0).all(axis=1)
        checks, low, high = self._checks()
        if checks is not None:
            value = self._affine(values, *checks)
            result |= ((value < low) | (value > high)).any(axis=1)
        return result

    def _checks(self) -> tuple[tuple | None, np.ndarray, np.ndarray]:
        """The saturation/wrap checks as one stacked matrix (built once: a query under injected
        invariants screens thousands of probes against hundreds of rows)."""
        if self._check_rows is None:
            checks = self.lowering.checks
            matrix = self._matrix([expr for _, expr, _, _ in checks]) if checks else None
            low = np.array([_int64_bound(c[2]) for c in checks], dtype=np.int64)
            high = np.array([_int64_bound(c[3]) for c in checks], dtype=np.int64)
            self._check_rows = (matrix, low[None, :], high[None, :])
        return self._check_rows

    def _literals(self, conjunction: Conjunction) -> tuple[tuple | None, np.ndarray]:
        """The conjunction's literals as one stacked matrix and their senses (cached per conjunction)."""
        cache = self._literal_rows
        key = id(conjunction)
        if key not in cache:
            literals = conjunction.literals
            matrix = self._matrix([lit.expr for lit in literals]) if literals else None
            cache[key] = (conjunction, matrix, np.array([lit.sense == "ge" for lit in literals], dtype=bool))
        _, matrix, is_ge = cache[key]
        return matrix, is_ge


def _int64_bound(bound) -> int:
    """A check's bound as an int64 (an infinite side as the int64 extreme: never exceeded)."""
    limits = np.iinfo(np.int64)
    if bound == math.inf:
        return int(limits.max)
    if bound == -math.inf:
        return int(limits.min)
    return int(bound)


def usable(lowering: Lowering) -> bool:
    """Exact integer lowerings with integer coefficients only."""
    if not lowering.exact:
        return False
    for var in lowering.vars:
        if not var.integer:
            return False
        for arg in var.args:
            if not sem_integral(arg):
                return False
    return True


def sem_integral(expr: Affine) -> bool:
    values = [expr.const, *expr.terms.values()]
    return all(isinstance(v, int) or (not isinstance(v, float) and v == int(v)) for v in values)


_ = sem
