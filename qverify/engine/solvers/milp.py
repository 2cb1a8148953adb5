"""Shared by both paths: a mixed-integer linear program in HiGHS's row form (columns with bounds and
integrality, rows `lo <= a.x <= hi`, an optional cost): what `solvers.highs` solves, built by the scalar
path's encoder (`scalar.milp`), the network level's LP (`netlevel.lp`) and repair's MILP alike."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class MilpModel:
    col_lo: list[float] = field(default_factory=list)
    col_hi: list[float] = field(default_factory=list)
    integer: list[bool] = field(default_factory=list)
    row_lo: list[float] = field(default_factory=list)
    row_hi: list[float] = field(default_factory=list)
    row_start: list[int] = field(default_factory=lambda: [0])
    row_index: list[int] = field(default_factory=list)
    row_value: list[float] = field(default_factory=list)
    inputs: dict[int, int] = field(default_factory=dict)  # program input index -> column
    exact: bool = True
    binaries: int = 0
    trust_infeasible: bool = True  # integer data with the 0.5 slack (False for float models)
    cost: list[float] = field(default_factory=list)  # objective per column (empty: feasibility only)

    @property
    def n_cols(self) -> int:
        return len(self.col_lo)

    @property
    def n_rows(self) -> int:
        return len(self.row_lo)

    def add_column(self, lo: float, hi: float, integer: bool, cost: float = 0.0) -> int:
        """A new column with bounds, integrality and objective coefficient; returns its index.
        (The engine's encoder adds columns its own way; optimisation models such as repair's use this.)"""
        if self.cost or cost != 0.0:
            self.cost.extend([0.0] * (self.n_cols - len(self.cost)))
            self.cost.append(float(cost))
        self.col_lo.append(float(lo))
        self.col_hi.append(float(hi))
        self.integer.append(bool(integer))
        return self.n_cols - 1

    def add_row(self, terms: dict[int, float], lo: float, hi: float) -> None:
        """lo <= sum(terms[c] * column c) <= hi, exactly as given (no slack; -inf/inf for one side)."""
        items = [(column, float(value)) for column, value in terms.items() if value != 0]
        self.row_lo.append(float(lo))
        self.row_hi.append(float(hi))
        self.row_index.extend(column for column, _ in items)
        self.row_value.extend(value for _, value in items)
        self.row_start.append(len(self.row_index))

    def arrays(self) -> dict[str, np.ndarray]:
        cost = np.zeros(self.n_cols)
        cost[: len(self.cost)] = self.cost
        return {
            "cost": cost,
            "col_lo": np.array(self.col_lo, dtype=np.float64),
            "col_hi": np.array(self.col_hi, dtype=np.float64),
            "integer": np.array(self.integer, dtype=bool),
            "row_lo": np.array(self.row_lo, dtype=np.float64),
            "row_hi": np.array(self.row_hi, dtype=np.float64),
            "start": np.array(self.row_start, dtype=np.int64),
            "index": np.array(self.row_index, dtype=np.int64),
            "value": np.array(self.row_value, dtype=np.float64),
        }
