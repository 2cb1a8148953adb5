"""Scalar path: refuting one input box by a MILP over the relaxed model with every ReLU exact (HiGHS).

Symbolic bounds replace each unstable ReLU by its triangle relaxation, and through six layers the
errors compound: on ACAS Xu phi2 with network 3_3 the violation margin is 60 units, and a box must
shrink to a few hundred units per input before the bounds see it (a float prototype of the same
bounds bisected 600,000 boxes without finishing). Once splitting has made most ReLUs stable, a MILP
that keeps the few unstable ones exact decides the box in milliseconds.

The MILP is the relaxed model (`relax.py`) *collapsed* on the box: every kept variable is written as
an affine form over a small basis -- the level-0 variables (inputs: the box; other bounded values),
the unstable ReLUs and the steps (both bounded by the box's bounds, steps relaxed to that interval),
and per active ReLU one column for its argument's rounding error on this box (shared by every use
of the unit: taking it as an interval per use refuted 3 % of the boxes). An inactive ReLU is 0.
Per unstable ReLU `z` with argument form `A.v + c + [e_lo, e_hi]` and bounds [l, u], a phase binary b:
    z - A.v >= c + e_lo          z - A.v - l b <= c + e_hi - l          z - u b <= 0,   z >= 0
(b = 1: z is a value of the argument, >= 0; b = 0: z = 0 and the argument can be <= 0). Per literal:
`A.v >= -c - e_hi` (`==`: also `<= -c - e_lo`). On ACAS Xu with 20-25 unstable ReLUs the collapsed
MILP solves at the root in milliseconds, where the uncollapsed one (every ReLU a column, stable
ones fixed) took 50 ms.

Soundness: every execution in the box is a point of the relaxed model, so its basis values satisfy
every row; every finite row side is widened by `SLACK` (0.5), which keeps the superset and gives
every execution a slack of 0.5 on every row, and HiGHS's "infeasible" is trusted under the same
magnitude rule as the exact MILP (`solvers.highs`, docs/engine.md). A solution is only a candidate:
its input is probed.
"""

from __future__ import annotations

import numpy as np

from qverify.engine.scalar.relax import BoundResult, NoiseTable, RelaxedModel, Row
from qverify.engine.solvers.base import CheckResult, CheckStatus

SLACK = 0.5
MAX_UNSTABLE = 25  # boxes with more unstable ReLUs are split instead (their MILPs are slow)
TIME_LIMIT_S = 0.2  # per box; a box whose MILP does not finish is split further
NODE_LIMIT = 500  # per box instead, under a work budget (EngineOptions.max_nodes): the same on any machine
MILP_RETRY_AFTER = 2  # after a failed MILP (a spurious solution, the time limit), generations skipped
MILP_TRIAL = 64  # boxes asked before judging whether the MILP refutes often enough to go on


class _Forms:
    """Affine forms over the basis for one level's variables: matrix (m, width) and constant (m,).
    Errors live in columns of the basis, so a form of kept variables carries none; only arguments
    and literals add their own error interval (`_ArgumentForms`)."""

    def __init__(self, matrix: np.ndarray, const: np.ndarray) -> None:
        self.matrix, self.const = matrix, const

    def add_combination(self, block: np.ndarray, forms: _Forms) -> None:
        """self += block @ forms (linear combinations of the variables of `forms`)."""
        self.matrix += block @ forms.matrix
        self.const = self.const + block @ forms.const


class _ArgumentForms(_Forms):
    """Forms plus the error interval [e_lo, e_hi] of the expression's own roundings on the box."""

    def __init__(self, matrix: np.ndarray, const: np.ndarray, e_lo: np.ndarray, e_hi: np.ndarray) -> None:
        super().__init__(matrix, const)
        self.e_lo, self.e_hi = e_lo, e_hi


class BoxMilp:
    """The MILP of one conjunction of literals (`rows`, `senses`) over `model`, asked per box."""

    def __init__(
        self, model: RelaxedModel, rows: list[Row], senses: list[str], solver, node_limit: int | None = None
    ) -> None:
        self.model = model
        self.node_limit = node_limit  # HiGHS branch-and-bound nodes per box; None: TIME_LIMIT_S
        self.rows = rows
        self.eq = np.array([sense == "eq" for sense in senses], dtype=bool)
        self.solver = solver
        self.relus = np.concatenate(
            [level.units[level.relu] for level in model.levels] or [np.zeros(0, dtype=np.int64)]
        ).astype(np.int64)
        self.row_noise = NoiseTable(
            [(r, entry) for r, row in enumerate(rows) for entry in row.noise], len(rows)
        )
        level0 = model.level_members[0]
        self.inputs = {index: int(model.position[kept]) for index, kept in model.input_kept.items()}
        self.n_level0 = len(level0)
        # literal rows as blocks per source level (a literal may read any level)
        self.literal_blocks: dict[int, np.ndarray] = {}
        for r, row in enumerate(rows):
            for col, val in zip(row.cols, row.vals):
                source = model.level[int(col)]
                block = self.literal_blocks.setdefault(
                    source, np.zeros((len(rows), len(model.level_members[source])))
                )
                block[r, model.position[col]] += val

    def unstable(self, result: BoundResult) -> np.ndarray:
        """Per box of `result`: how many ReLUs have an argument whose bounds straddle 0."""
        lo, hi = result.arg_lo[:, self.relus], result.arg_hi[:, self.relus]
        return ((lo < 0) & (hi > 0)).sum(axis=1)

    def check(self, result: BoundResult, box: int, deadline: float) -> CheckResult:
        """Decide box `box` of `result`: UNSAT refutes it; SAT carries a candidate input (program
        input index -> value); UNKNOWN: time limit, an untrusted infeasible, unbounded values."""
        bounded = np.concatenate([result.lb[box], result.ub[box], result.arg_lo[box, self.relus]])
        if not np.isfinite(np.concatenate([bounded, result.arg_hi[box, self.relus]])).all():
            return CheckResult(CheckStatus.UNKNOWN, "a value is unbounded on the box")
        arrays, centre = self._arrays(result, box)
        answer = self.solver.solve(arrays, self.inputs, True, deadline, self.node_limit)
        answer.inputs = {index: value + centre[self.inputs[index]] for index, value in answer.inputs.items()}
        return answer

    # -------------------------------------------------------------- the collapsed MILP

    def _columns(self, result: BoundResult, box: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per level: which units get a value column (unstable ReLUs, steps) and which an error
        column (active ReLUs: the error of their argument, shared by every use of the unit)."""
        arg_lo, arg_hi = result.arg_lo[box], result.arg_hi[box]
        columns = []
        for level in self.model.levels:
            units = level.units
            active = level.relu & (arg_lo[units] >= 0)
            free = ~level.relu | ((arg_lo[units] < 0) & (arg_hi[units] > 0))
            columns.append((free, active))
        return columns

    def _arrays(self, result: BoundResult, box: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
        model = self.model
        lb, ub = result.lb[box : box + 1], result.ub[box : box + 1]
        arg_lo, arg_hi = result.arg_lo[box], result.arg_hi[box]
        columns = self._columns(result, box)
        width = self.n_level0 + sum(int(free.sum() + active.sum()) for free, active in columns)
        level0 = model.level_members[0]
        forms = [_Forms(np.eye(self.n_level0, width), np.zeros(self.n_level0))]
        basis_lo = np.concatenate([lb[0, level0], np.zeros(width - self.n_level0)])
        basis_hi = np.concatenate([ub[0, level0], np.zeros(width - self.n_level0)])
        relus = []
        column = self.n_level0
        for level, (free, active) in zip(model.levels, columns):
            arg = self._argument_forms(level, forms, lb, ub)
            units = level.units
            collapsed = _Forms(np.where(active[:, None], arg.matrix, 0.0), np.where(active, arg.const, 0.0))
            for u in np.flatnonzero(active):  # the argument plus its own error, as a column
                collapsed.matrix[u, column] = 1.0
                basis_lo[column], basis_hi[column] = arg.e_lo[u], arg.e_hi[u]
                column += 1
            for u in np.flatnonzero(free):  # a column of its own: the unit's value
                kept = units[u]
                collapsed.matrix[u, column] = 1.0
                basis_lo[column], basis_hi[column] = lb[0, kept], ub[0, kept]
                if level.relu[u]:
                    basis_lo[column] = max(basis_lo[column], 0.0)
                    relus.append(
                        (
                            column,
                            arg.matrix[u],
                            arg.const[u],
                            arg.e_lo[u],
                            arg.e_hi[u],
                            arg_lo[kept],
                            arg_hi[kept],
                        )
                    )
                column += 1
            forms.append(collapsed)
        return _assemble(basis_lo, basis_hi, relus, self._literal_forms(forms, lb, ub), self.eq)

    def _argument_forms(self, level, forms: list[_Forms], lb: np.ndarray, ub: np.ndarray) -> _ArgumentForms:
        """The level's arguments as forms over the basis, with their own errors on the box."""
        noise_lo, noise_hi = level.noise.intervals(lb, ub)
        total = _ArgumentForms(
            np.zeros((len(level.units), forms[0].matrix.shape[1])),
            level.const.copy(),
            level.elo + noise_lo[0],
            level.ehi + noise_hi[0],
        )
        for source, block in level.blocks.items():
            total.add_combination(block, forms[source])
        return total

    def _literal_forms(self, forms: list[_Forms], lb: np.ndarray, ub: np.ndarray) -> _ArgumentForms:
        noise_lo, noise_hi = self.row_noise.intervals(lb, ub)
        total = _ArgumentForms(
            np.zeros((len(self.rows), forms[0].matrix.shape[1])),
            np.array([row.const for row in self.rows]),
            np.array([row.elo for row in self.rows]) + noise_lo[0],
            np.array([row.ehi for row in self.rows]) + noise_hi[0],
        )
        for source, block in self.literal_blocks.items():
            total.add_combination(block, forms[source])
        return total


def _assemble(
    basis_lo: np.ndarray,
    basis_hi: np.ndarray,
    relus: list[tuple[int, np.ndarray, float, float, float, float, float]],
    literal: _ArgumentForms,
    eq: np.ndarray,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The MILP's arrays (basis columns centred on their bounds, then one phase binary per unstable
    ReLU) and the centres; `relus` holds per unstable ReLU (its column, argument matrix row,
    constant, e_lo, e_hi, l, u)."""
    width = len(basis_lo)
    n_cols = width + len(relus)
    n_literals = len(literal.const)
    matrix = np.zeros((3 * len(relus) + n_literals, n_cols))
    row_lo = np.full(len(matrix), -np.inf)
    row_hi = np.full(len(matrix), np.inf)
    for i, (column, a, c, e_lo, e_hi, low, high) in enumerate(relus):
        binary = width + i
        first = 3 * i
        matrix[first : first + 2, :width] = -a
        matrix[first : first + 3, column] = 1.0
        row_lo[first] = c + e_lo  # z >= the argument
        matrix[first + 1, binary] = -low  # z <= the argument - l (1 - b)
        row_hi[first + 1] = c + e_hi - low
        matrix[first + 2, binary] = -high  # z <= u b
        row_hi[first + 2] = 0.0
    matrix[3 * len(relus) :, :width] = literal.matrix
    row_lo[3 * len(relus) :] = -literal.const - literal.e_hi
    row_hi[3 * len(relus) :] = np.where(eq, -literal.const - literal.e_lo, np.inf)
    # every basis column centred on its bounds: the rows' magnitudes then reflect the box's width,
    # not where it lies (ACAS Xu inputs near 40,000 gave magnitudes above the trusted 1e7)
    centre = (basis_lo + basis_hi) / 2
    moved = matrix[:, :width] @ centre
    row_lo, row_hi = row_lo - moved, row_hi - moved
    nonzero = matrix != 0.0
    integer = np.zeros(n_cols, dtype=bool)
    integer[width:] = True
    arrays = {
        "col_lo": np.concatenate([basis_lo - centre, np.zeros(len(relus))]),
        "col_hi": np.concatenate([basis_hi - centre, np.ones(len(relus))]),
        "integer": integer,
        "row_lo": row_lo - SLACK,
        "row_hi": row_hi + SLACK,
        "start": np.concatenate([[0], np.cumsum(nonzero.sum(axis=1))]).astype(np.int64),
        "index": np.nonzero(nonzero)[1].astype(np.int64),
        "value": matrix[nonzero],
    }
    return arrays, centre
