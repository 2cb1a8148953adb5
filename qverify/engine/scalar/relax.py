"""Scalar path: a layered linear relaxation of a lowered query, and symbolic bounds over it (DeepPoly-style).

`RelaxedModel.build(lowering)` keeps the variables whose relaxation depends on bounds (inputs,
relu, step) and eliminates the others:
    quot   z = a/d + e   e: the rounding error, in [-(d-1)/d, 0] (floor), [-1/2, 1/2] (rna, d even),
                         by sign for trunc; for a quotient of one kept variable (w * h / 2^l: the
                         product rounding of a fixed-point MAC) the error interval is computed per
                         box from h's bounds -- 0 when h is 0 (an inactive ReLU), -a/d when |a| is
                         below the rounding threshold
    fround z = a + e    |e| <= eps
    other  (mul, ite, cmp, free, ...)  z in [lo, hi]: a kept variable with constant bounds
so every kept variable's argument is an affine form over earlier kept variables plus an error
interval. This is a sound over-approximation of the exact lowering: every execution satisfies it.

`bounds(model, lo, hi, rows)` computes, for a batch of input boxes at once, bounds of every kept
variable, level by level (arguments back-substituted to the inputs through the relaxations of ReLUs
-- the triangle relaxation with DeepPoly's lower slope -- and steps -- a chord with offsets -- or,
for few inputs, linear bound functions propagated forward), and upper bounds of the given rows
(always back-substituted). Computed in float64 with an outward margin that dominates the
accumulated rounding error (`MARGIN_*`, relative to the magnitude of everything summed); integer-
valued quantities are then rounded inward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from qverify.engine.scalar.linear import Affine, Lowering, Var
from qverify.errors import InternalError

MARGIN_RELATIVE = 1e-12  # times the magnitude of everything summed into a bound, per term of fan-in
MARGIN_ABSOLUTE = 1e-9
FORWARD_MAX_INPUTS = 24
MODES = {"floor": 0, "rna": 1, "trunc": 2}
SEPARABLE_MAX_DOMAIN = 257  # inputs with at most this many values can be tabulated

# a structured rounding error: alpha * e(c * z + k) where z is a kept variable and e the error of
# rounding (c z + k) / d by `mode`
Noise = tuple  # (alpha, kept z, c, k, d, mode)


@dataclass
class Expr:
    """sum(terms[k] * kept_k) + const + e_static + sum(alpha * e(noise)), e_static in [elo, ehi]."""

    terms: dict[int, float]
    const: float
    elo: float
    ehi: float
    integral: bool
    noise: list = field(default_factory=list)


@dataclass
class Row:
    """An expression over kept variables, ready for the bounds: `integral` if its value is an integer."""

    cols: np.ndarray
    vals: np.ndarray
    const: float
    elo: float
    ehi: float
    integral: bool
    noise: list = field(default_factory=list)


class NoiseTable:
    """Structured rounding errors of several rows, evaluated per box as (B, n_rows) intervals."""

    def __init__(self, entries: list[tuple[int, Noise]], n_rows: int) -> None:
        self.n_rows = n_rows
        self.count = len(entries)
        if not entries:
            return
        self.row = np.array([r for r, _ in entries], dtype=np.int64)
        self.alpha = np.array([e[0] for _, e in entries], dtype=np.float64)
        self.source = np.array([e[1] for _, e in entries], dtype=np.int64)
        self.c = np.array([e[2] for _, e in entries], dtype=np.float64)
        self.k = np.array([e[3] for _, e in entries], dtype=np.float64)
        self.d = np.array([e[4] for _, e in entries], dtype=np.float64)
        self.mode = np.array([e[5] for _, e in entries], dtype=np.int64)
        order = np.argsort(self.row, kind="stable")
        for name in ("row", "alpha", "source", "c", "k", "d", "mode"):
            setattr(self, name, getattr(self, name)[order])
        # entries grouped by row: sums per row with reduceat (rows without entries get 0)
        self.present = np.unique(self.row)
        self.starts = np.searchsorted(self.row, self.present)
        self.alpha_pos = np.maximum(self.alpha, 0.0)
        self.alpha_neg = np.minimum(self.alpha, 0.0)
        self._bands()

    def _bands(self) -> None:
        """Per entry, the open interval (band_lo, band_hi) of arguments whose quotient is 0, and
        the error interval outside it (trunc: by the argument's sign, decided per box).

        rna: |a| < d/2; floor: 0 <= a <= d - 1; trunc: |a| <= d - 1. The closed ends become open
        ones at the neighbouring float (nextafter), so one strict test serves every mode."""
        d, mode = self.d, self.mode
        full = (d - 1) / d
        rna, floor = mode == 1, mode == 0
        self.trunc = ~(rna | floor)
        self.any_trunc = bool(self.trunc.any())
        self.band_lo = np.where(rna, -d / 2, np.nextafter(np.where(floor, 0.0, -(d - 1)), -np.inf))
        self.band_hi = np.where(rna, d / 2, np.nextafter(d - 1, np.inf))
        self.generic_lo = np.where(rna, -0.5, -full)
        self.generic_hi = np.where(rna, 0.5, np.where(floor, 0.0, full))

    def intervals(self, lb: np.ndarray, ub: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per box, the summed error interval of each row (the profile of input splitting: keep
        the number of whole-array operations small)."""
        batch = lb.shape[0]
        if self.count == 0:
            zero = np.zeros((batch, self.n_rows))
            return zero, zero
        a1 = self.c * lb[:, self.source] + self.k
        a2 = self.c * ub[:, self.source] + self.k
        a_lo, a_hi = np.minimum(a1, a2), np.maximum(a1, a2)
        d = self.d
        # inside the band the quotient is 0 and e = -a / d (a nan argument is never inside)
        zero = (a_lo > self.band_lo) & (a_hi < self.band_hi)
        generic_lo, generic_hi = self.generic_lo, self.generic_hi
        if self.any_trunc:
            # trunc: [-full, 0] for a >= 0, [0, full] for a <= 0, both otherwise
            generic_lo = np.where(self.trunc & (a_hi <= 0), 0.0, generic_lo)
            generic_hi = np.where(self.trunc & (a_lo >= 0), 0.0, generic_hi)
        e_lo = np.where(zero, -a_hi / d, generic_lo)
        e_hi = np.where(zero, -a_lo / d, generic_hi)
        # a single value: the error exactly
        point = (a_lo == a_hi) & ~zero & np.isfinite(a_lo)
        if point.any():
            a = np.where(point, a_lo, 0.0)
            rows = np.broadcast_to(self.mode, a.shape)
            exact = np.choose(rows, [_quotients(a, d, mode) for mode in range(3)]) - a / d
            e_lo = np.where(point, exact, e_lo)
            e_hi = np.where(point, exact, e_hi)
        low = self.alpha_pos * e_lo + self.alpha_neg * e_hi
        high = self.alpha_pos * e_hi + self.alpha_neg * e_lo
        return self._per_row(low), self._per_row(high)

    def _per_row(self, values: np.ndarray) -> np.ndarray:
        out = np.zeros((values.shape[0], self.n_rows))
        out[:, self.present] = np.add.reduceat(values, self.starts, axis=1)
        return out


@dataclass
class Level:
    units: np.ndarray  # kept indices at this level (relu/step)
    blocks: dict[int, np.ndarray]  # source level -> (n_units, n_source) coefficient block
    const: np.ndarray
    elo: np.ndarray  # static error bounds
    ehi: np.ndarray
    noise: NoiseTable
    integral: np.ndarray
    arg_lo: np.ndarray  # static argument bounds (from the lowering's intervals)
    arg_hi: np.ndarray
    relu: np.ndarray  # bool per unit (else step)
    steps: dict[int, tuple[np.ndarray, np.ndarray]] = field(
        default_factory=dict
    )  # unit position -> (starts, values)
    # units whose argument is a sum of exact functions of single small-domain inputs (the
    # product roundings of a first fixed-point layer): bounded through tables, not errors
    separable: np.ndarray | None = None  # bool per unit
    sep_index: np.ndarray | None = None  # per unit: its unit in model.sep_tabulated (-1 if not)
    const_sep: np.ndarray | None = None  # the constant of the exact form (quotients' k excluded)


def _is_integer(value) -> bool:
    """An exact integer (not a float: float data may come from a relaxation)."""
    if isinstance(value, (bool, int)):
        return True
    return not isinstance(value, float) and value == int(value)


class RelaxedModel:
    """Kept variables by level; see the module docstring."""

    def __init__(self) -> None:
        self.kind: list[str] = []
        self.level: list[int] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.rows: dict[int, Row] = {}
        self.params: dict[int, tuple] = {}
        self.plp_to_kept: dict[int, int] = {}
        self.elim: dict[int, Expr] = {}
        self.input_kept: dict[int, int] = {}  # program input index -> kept index
        self.integral_var: list[bool] = []
        self.levels: list[Level] = []
        self.level_members: list[np.ndarray] = []
        self.position: np.ndarray = np.zeros(0, dtype=np.int64)  # kept index -> position in its level
        self.fan_in = 1
        # the inputs of the separable units (kept indices, level 0) and their tables (built when
        # some unit is separable): the contribution of input sep_inputs[i] at each of its values
        self.sep_inputs: np.ndarray = np.zeros(0, dtype=np.int64)
        self.sep_tabulated: _SeparableTables | None = None

    # -------------------------------------------------------------- building

    @classmethod
    def build(cls, lowering: Lowering) -> RelaxedModel:
        model = cls()
        input_of_var = {var_index: index for index, var_index in lowering.inputs.items()}
        for var in lowering.vars:
            model._add(var, input_of_var.get(var.index))
        model._layer()
        return model

    @property
    def n(self) -> int:
        return len(self.kind)

    def _keep(self, var: Var, kind: str, level: int, lo: float, hi: float) -> int:
        index = len(self.kind)
        self.kind.append(kind)
        self.level.append(level)
        self.lo.append(float(lo))
        self.hi.append(float(hi))
        self.integral_var.append(bool(var.integer))
        self.plp_to_kept[var.index] = index
        return index

    def expr(self, affine: Affine) -> Expr:
        """An affine expression over lowering variables, in terms of kept variables."""
        terms: dict[int, float] = {}
        const = float(affine.const)
        elo = ehi = 0.0
        integral = _is_integer(affine.const)
        noise: list = []
        for index, coef in affine.terms.items():
            coef_f = float(coef)
            integral = integral and _is_integer(coef)
            kept = self.plp_to_kept.get(index)
            if kept is not None:
                terms[kept] = terms.get(kept, 0.0) + coef_f
                integral = integral and self.integral_var[kept]
                continue
            sub = self.elim[index]
            integral = integral and sub.integral
            for k, c in sub.terms.items():
                terms[k] = terms.get(k, 0.0) + coef_f * c
            const += coef_f * sub.const
            if coef_f >= 0:
                elo += coef_f * sub.elo
                ehi += coef_f * sub.ehi
            else:
                elo += coef_f * sub.ehi
                ehi += coef_f * sub.elo
            noise.extend((coef_f * entry[0], *entry[1:]) for entry in sub.noise)
        return Expr(terms, const, elo, ehi, integral, noise)

    def _level_of(self, expr: Expr) -> int:
        sources = list(expr.terms) + [entry[1] for entry in expr.noise]
        return 1 + max((self.level[k] for k in sources), default=0)

    def _add(self, var: Var, input_index: int | None) -> None:
        kind = var.kind
        if kind == "input":
            kept = self._keep(var, "input", 0, var.lo, var.hi)
            if input_index is not None:
                self.input_kept[input_index] = kept
            return
        if kind == "quot":
            self._eliminate_quotient(var)
            return
        if kind == "fround":
            sub = self.expr(var.args[0])
            (eps,) = var.params
            self.elim[var.index] = Expr(
                sub.terms, sub.const, sub.elo - float(eps), sub.ehi + float(eps), False, sub.noise
            )
            return
        if kind == "wrap":
            sub = self.expr(var.args[0])
            lo_arg, hi_arg = self.expr_range(sub)
            bits, signed = var.params
            low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
            if low <= lo_arg and hi_arg <= high:
                self.elim[var.index] = sub
                return
        if kind in ("relu", "step"):
            sub = self.expr(var.args[0])
            kept = self._keep(var, kind, self._level_of(sub), var.lo, var.hi)
            self.rows[kept] = _row(sub)
            if kind == "step":
                self.params[kept] = var.params
            return
        self._keep(var, "bound", 0, float(var.lo), float(var.hi))

    def _eliminate_quotient(self, var: Var) -> None:
        sub = self.expr(var.args[0])
        d, mode = var.params
        d = float(d)
        scale = 1.0 / d
        terms = {k: c * scale for k, c in sub.terms.items()}
        const = sub.const * scale
        if sub.integral and len(sub.terms) == 1 and sub.elo == sub.ehi == 0.0 and not sub.noise:
            ((source, c),) = sub.terms.items()
            self.elim[var.index] = Expr(
                terms, const, 0.0, 0.0, True, [(1.0, source, c, sub.const, d, MODES[mode])]
            )
            return
        lo_arg, hi_arg = self.expr_range(sub)
        integral = sub.integral
        full = (d - 1) / d if integral else 1.0
        if mode == "floor":
            e = (-full, 0.0)
        elif mode == "rna":
            e = (-0.5, 0.5)
        elif lo_arg >= 0:
            e = (-full, 0.0)
        elif hi_arg <= 0:
            e = (0.0, full)
        else:
            e = (-full, full)
        # errors nested inside the argument: at their widest, scaled by 1/d
        nested_lo, nested_hi = _static_noise(sub.noise)
        self.elim[var.index] = Expr(
            terms, const, (sub.elo + nested_lo) * scale + e[0], (sub.ehi + nested_hi) * scale + e[1], True, []
        )

    def expr_range(self, expr: Expr) -> tuple[float, float]:
        """Interval of an expression from the kept variables' static bounds (errors at their widest)."""
        lo = expr.const + expr.elo
        hi = expr.const + expr.ehi
        for k, c in expr.terms.items():
            if c >= 0:
                lo += c * self.lo[k]
                hi += c * self.hi[k]
            else:
                lo += c * self.hi[k]
                hi += c * self.lo[k]
        noise_lo, noise_hi = _static_noise(expr.noise)
        return lo + noise_lo, hi + noise_hi

    def _layer(self) -> None:
        n = len(self.kind)
        level = np.array(self.level, dtype=np.int64)
        self.position = np.zeros(n, dtype=np.int64)
        self.level_members = []
        top = int(level.max()) if n else 0
        for lvl in range(top + 1):
            members = np.flatnonzero(level == lvl)
            self.position[members] = np.arange(len(members))
            self.level_members.append(members)
        self.levels = []
        for lvl in range(1, top + 1):
            units = self.level_members[lvl]
            m = len(units)
            blocks: dict[int, np.ndarray] = {}
            const, elo, ehi = np.zeros(m), np.zeros(m), np.zeros(m)
            integral = np.zeros(m, dtype=bool)
            arg_lo, arg_hi = np.full(m, -np.inf), np.full(m, np.inf)
            relu = np.zeros(m, dtype=bool)
            steps: dict[int, tuple[np.ndarray, np.ndarray]] = {}
            noise_entries: list[tuple[int, Noise]] = []
            for u, kept in enumerate(units):
                row = self.rows[int(kept)]
                self.fan_in = max(self.fan_in, len(row.cols) + len(row.noise))
                for col, val in zip(row.cols, row.vals):
                    source = self.level[int(col)]
                    block = blocks.get(source)
                    if block is None:
                        block = blocks[source] = np.zeros((m, len(self.level_members[source])))
                    block[u, self.position[col]] += val
                const[u], elo[u], ehi[u], integral[u] = row.const, row.elo, row.ehi, row.integral
                noise_entries.extend((u, entry) for entry in row.noise)
                arg_lo[u], arg_hi[u] = self.expr_range(
                    Expr(
                        dict(zip(row.cols.tolist(), row.vals.tolist())),
                        row.const,
                        row.elo,
                        row.ehi,
                        row.integral,
                        row.noise,
                    )
                )
                if self.kind[int(kept)] == "relu":
                    relu[u] = True
                else:
                    starts, values = self.params[int(kept)]
                    steps[u] = (np.asarray(starts, dtype=np.float64), np.asarray(values, dtype=np.float64))
            self.levels.append(
                Level(
                    units,
                    blocks,
                    const,
                    elo,
                    ehi,
                    NoiseTable(noise_entries, m),
                    integral,
                    arg_lo,
                    arg_hi,
                    relu,
                    steps,
                )
            )
        self._separable()

    def _small_input(self, kept: int) -> bool:
        return (
            self.kind[kept] == "input"
            and self.integral_var[kept]
            and math.isfinite(self.lo[kept])
            and math.isfinite(self.hi[kept])
            and self.hi[kept] - self.lo[kept] + 1 <= SEPARABLE_MAX_DOMAIN
        )

    def _separable(self) -> None:
        """Find the separable units and tabulate them (see Level.separable)."""
        chosen: list[tuple[Level, int, Row]] = []
        for level in self.levels:
            level.separable = np.zeros(len(level.units), dtype=bool)
            level.sep_index = np.full(len(level.units), -1, dtype=np.int64)
            level.const_sep = level.const.copy()
            for u, kept in enumerate(level.units):
                row = self.rows[int(kept)]
                if (
                    row.noise
                    and row.elo == row.ehi == 0.0
                    and all(self._small_input(int(c)) for c in row.cols)
                    and all(self._small_input(int(entry[1])) for entry in row.noise)
                    and all(
                        float(entry[2]).is_integer() and float(entry[3]).is_integer() for entry in row.noise
                    )
                ):
                    level.separable[u] = True
                    level.sep_index[u] = len(chosen)
                    chosen.append((level, u, row))
        if not chosen:
            return
        inputs = sorted(
            {int(c) for _, _, row in chosen for c in row.cols}
            | {int(e[1]) for _, _, row in chosen for e in row.noise}
        )
        where = {kept: i for i, kept in enumerate(inputs)}
        width = max(int(self.hi[k] - self.lo[k]) + 1 for k in inputs)
        values = np.full((len(inputs), width), np.nan)
        for i, kept in enumerate(inputs):
            count = int(self.hi[kept] - self.lo[kept]) + 1
            values[i, :count] = self.lo[kept] + np.arange(count)
        table = np.zeros((len(chosen), len(inputs), width))
        for s, (level, u, row) in enumerate(chosen):
            linear = dict(zip(row.cols.tolist(), row.vals.tolist()))
            const = row.const
            for alpha, source, c, k, d, mode in row.noise:
                i = where[int(source)]
                x = values[i]
                table[s, i] += alpha * _quotients(c * x + k, d, mode)
                linear[int(source)] = linear.get(int(source), 0.0) - alpha * c / d
                const -= alpha * k / d
            for kept, coef in linear.items():
                table[s, where[kept]] += coef * values[where[kept]]
            level.const_sep[u] = const
        self.sep_inputs = np.array(inputs, dtype=np.int64)
        self.sep_tabulated = _SeparableTables(table, values)

    def row_of(self, affine: Affine) -> Row:
        return _row(self.expr(affine))


def _static_noise(noise: list) -> tuple[float, float]:
    """The widest interval of a sum of structured rounding errors (independent of bounds)."""
    lo = hi = 0.0
    for alpha, _source, _c, _k, d, mode in noise:
        full = (d - 1) / d
        e_lo, e_hi = {0: (-full, 0.0), 1: (-0.5, 0.5), 2: (-full, full)}[mode]
        if alpha >= 0:
            lo, hi = lo + alpha * e_lo, hi + alpha * e_hi
        else:
            lo, hi = lo + alpha * e_hi, hi + alpha * e_lo
    return lo, hi


def _quotients(a: np.ndarray, d: float, mode: int) -> np.ndarray:
    """The rounded quotients a / d (floor, rna, trunc), elementwise (nan stays nan)."""
    if mode == 0:
        return np.floor(a / d)
    magnitude = np.abs(a)
    if mode == 1:
        return np.sign(a) * np.floor((magnitude + d / 2) / d)
    return np.sign(a) * np.floor(magnitude / d)


def _row(expr: Expr) -> Row:
    return Row(
        np.fromiter(expr.terms.keys(), dtype=np.int64, count=len(expr.terms)),
        np.fromiter(expr.terms.values(), dtype=np.float64, count=len(expr.terms)),
        expr.const,
        expr.elo,
        expr.ehi,
        expr.integral,
        list(expr.noise),
    )


# ------------------------------------------------------------------------------ symbolic bounds


@dataclass
class BoundResult:
    """Per box b: `lb[b, k]`, `ub[b, k]` of kept variable k; `row_ub[b, r]` of each row; `row_argmax`
    the input vector (floats) at which row r's linear upper bound is largest, per box."""

    lb: np.ndarray
    ub: np.ndarray
    row_ub: np.ndarray
    row_lb: np.ndarray
    row_argmax: np.ndarray
    row_input_coef: np.ndarray  # (B, R, n_inputs): the rows' upper-bound coefficients on the inputs
    arg_lo: np.ndarray  # (B, n): bounds of the argument of each relu/step variable (nan elsewhere)
    arg_hi: np.ndarray
    row_const: np.ndarray  # (B, R): row r <= row_input_coef[b, r] . x + row_const[b, r] on box b
    # (B, R, n_inputs): what splitting each input can gain for row r's upper bound on box b: how
    # much the input moves it (|coefficient| times width; for a tabulated input, the spread of its
    # table over the box) plus its share of the relaxation error the bound paid at unstable units
    row_spread: np.ndarray | None = None
    many_lb: np.ndarray | None = None  # bounds of `many` rows (batched, no per-row details)
    many_ub: np.ndarray | None = None


def _margin(value: np.ndarray, magnitude: np.ndarray, fan_in: int) -> np.ndarray:
    return MARGIN_ABSOLUTE + MARGIN_RELATIVE * (fan_in + 16) * (magnitude + np.abs(value))


def _finite(values: np.ndarray) -> np.ndarray:
    """Infinite bounds as +-1e300: products with 0 stay 0, and in an upper bound every infinite
    contribution is +huge (never cancelled), so the result is huge, as it should be."""
    return np.nan_to_num(values, nan=0.0, posinf=1e300, neginf=-1e300)


def _bmv(matrix: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Per box b: matrix[b] @ vectors[b]  ((B, m, n) x (B, n) -> (B, m))."""
    return np.matmul(matrix, vectors[:, :, None])[:, :, 0]


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b with 0 * inf = 0."""
    return np.where(a == 0, 0.0, a * np.where(a == 0, 0.0, b))


class _Relaxations:
    """Per level: slopes/offsets of every unit for every box, and its per-box error bounds."""

    def __init__(self) -> None:
        self.a_u: list[np.ndarray] = []
        self.b_u: list[np.ndarray] = []
        self.a_l: list[np.ndarray] = []
        self.b_l: list[np.ndarray] = []
        self.arg_mag: list[np.ndarray] = []
        self.elo: list[np.ndarray] = []  # (B, n_units)
        self.ehi: list[np.ndarray] = []
        # (B, n_units): how far the upper / lower relaxation can lie from the unit's value
        self.gap_u: list[np.ndarray] = []
        self.gap_l: list[np.ndarray] = []
        # (B, n_units, n_inputs): each input's share of the width of the unit's argument bounds
        self.share: list[np.ndarray] = []


def _step_relaxation(
    starts: np.ndarray, values: np.ndarray, lo: np.ndarray, hi: np.ndarray, integral: bool
) -> tuple[np.ndarray, ...]:
    """Linear bounds a_l*x + b_l <= f(x) <= a_u*x + b_u for x in [lo, hi] (arrays over boxes).

    Any slope gives a sound bound once its offset is the extreme of f - a*x over the pieces (f - a*x
    is linear on a piece: extremes at the piece's ends). The slopes are chosen per box among the
    chord, 0, the slope after the first piece and the slope up to the last one: the lower line with
    the largest value at the middle of [lo, hi], the upper with the smallest (for a step of either
    kind, the line closest to f in area). A requantization with a fused ReLU clamp is a convex step
    (flat, then rising): there the lower line follows the rising part, as DeepPoly's ReLU slope does,
    where one slope for both sides (the chord) left a band of the triangle's whole height; a
    saturating top (concave) gets the mirror image; tables of sigmoid/tanh keep the chord.
    Also returns the value range and how far each line can lie from f (for the split rule)."""
    count = len(starts)
    # piece k covers [starts[k], starts[k+1]) (integral: [starts[k], starts[k+1] - 1])
    ends = np.append(starts[1:], np.inf)
    ends = ends - 1 if integral else ends
    first = np.clip(np.searchsorted(starts, lo, side="right") - 1, 0, count - 1)
    last = np.clip(np.searchsorted(starts, hi, side="right") - 1, 0, count - 1)
    f_lo, f_hi = values[first], values[last]
    width = hi - lo
    chord = np.where(width > 0, (f_hi - f_lo) / np.where(width > 0, width, 1), 0.0)
    piece = np.arange(count)
    inside = (piece[None, :] >= first[:, None]) & (piece[None, :] <= last[:, None])
    x_start = np.maximum(starts[None, :], lo[:, None])
    x_end = np.minimum(ends[None, :], hi[:, None])

    def offsets(slope: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        at_start = values[None, :] - _mul(slope[:, None], x_start)
        at_end = values[None, :] - _mul(slope[:, None], x_end)
        low = np.where(inside, np.minimum(at_start, at_end), np.inf).min(axis=1)
        high = np.where(inside, np.maximum(at_start, at_end), -np.inf).max(axis=1)
        return low, high

    value_lo = np.where(inside, values[None, :], np.inf).min(axis=1)
    value_hi = np.where(inside, values[None, :], -np.inf).max(axis=1)
    finite = np.isfinite(lo) & np.isfinite(hi)
    first_end = np.minimum(ends[first], hi)
    last_start = np.maximum(starts[last], lo)
    rise = f_hi - f_lo
    after_first = np.where(
        finite & (hi > first_end), rise / np.where(hi > first_end, hi - first_end, 1), chord
    )
    before_last = np.where(
        finite & (last_start > lo), rise / np.where(last_start > lo, last_start - lo, 1), chord
    )
    middle = np.where(finite, (lo + hi) / 2, 0.0)
    a_l, a_u = chord, chord
    b_l, b_u = offsets(chord)
    for slope in (np.zeros_like(chord), after_first, before_last):
        slope = np.where(finite, slope, chord)
        low, high = offsets(slope)
        better_lower = finite & (slope * middle + low > a_l * middle + b_l)
        better_upper = finite & (slope * middle + high < a_u * middle + b_u)
        a_l, b_l = np.where(better_lower, slope, a_l), np.where(better_lower, low, b_l)
        a_u, b_u = np.where(better_upper, slope, a_u), np.where(better_upper, high, b_u)
    # the largest distance of each line from f: f - a*x ranges over [low, high] for a given slope
    gap_u = b_u - offsets(a_u)[0]
    gap_l = offsets(a_l)[1] - b_l
    return a_u, b_u, a_l, b_l, value_lo, value_hi, gap_u, gap_l


def _relu_relaxation(lo_r: np.ndarray, hi_r: np.ndarray):
    """Triangle relaxation with DeepPoly's lower slope (1 if u > -l else 0)."""
    active = (lo_r >= 0) & np.isfinite(hi_r)
    inactive = hi_r <= 0
    unbounded = ~np.isfinite(lo_r) | ~np.isfinite(hi_r)
    crossing = ~(active | inactive | unbounded)
    denom = np.where(crossing, hi_r - lo_r, 1.0)
    slope = np.where(active, 1.0, np.where(crossing, hi_r / denom, 0.0))
    a_u = slope
    b_u = np.where(crossing, -slope * lo_r, 0.0)
    a_l = np.where(active, 1.0, np.where(crossing, (hi_r > -lo_r).astype(np.float64), 0.0))
    b_l = np.zeros_like(a_l)
    value_lo = np.maximum(lo_r, 0.0)
    value_hi = np.maximum(hi_r, 0.0)
    b_u = np.where(unbounded & ~inactive, value_hi, b_u)
    b_l = np.where(unbounded & ~inactive, value_lo, b_l)
    return a_u, b_u, a_l, b_l, value_lo, value_hi


def _relu_gaps(lo_r: np.ndarray, hi_r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest distance of the triangle's upper side (at 0: u*(-l)/(u-l)) and of DeepPoly's
    lower side (min(u, -l)) from the ReLU; 0 for stable or unbounded units."""
    crossing = (lo_r < 0) & (hi_r > 0) & np.isfinite(lo_r) & np.isfinite(hi_r)
    denom = np.where(crossing, hi_r - lo_r, 1.0)
    gap_u = np.where(crossing, hi_r * -lo_r / denom, 0.0)
    gap_l = np.where(crossing, np.minimum(hi_r, -lo_r), 0.0)
    return gap_u, gap_l


def bounds(
    model: RelaxedModel,
    box_lo: np.ndarray,
    box_hi: np.ndarray,
    rows: list[Row],
    mode: str = "auto",
    many: list[Row] | None = None,
) -> BoundResult:
    """Bounds over a batch of input boxes (B, n_inputs) given in program-input-index order.

    Intermediate bounds (the arguments of relu/step variables) come from back-substitution to the
    inputs (mode "backward", DeepPoly) or from linear bound functions of the inputs propagated
    forward (mode "forward", symbolic intervals: cheaper, looser); the rows are always
    back-substituted. "auto" is "backward"."""
    if mode == "auto":
        mode = "backward"
    box_lo, box_hi = np.atleast_2d(box_lo).astype(np.float64), np.atleast_2d(box_hi).astype(np.float64)
    batch = box_lo.shape[0]
    n = model.n
    lb = np.tile(np.array(model.lo, dtype=np.float64), (batch, 1))
    ub = np.tile(np.array(model.hi, dtype=np.float64), (batch, 1))
    input_order = sorted(model.input_kept)
    input_order_kept = [model.input_kept[i] for i in input_order]
    for column, kept in enumerate(input_order_kept):
        lb[:, kept] = np.maximum(lb[:, kept], box_lo[:, column])
        ub[:, kept] = np.minimum(ub[:, kept], box_hi[:, column])
    relax = _Relaxations()
    layout = _InputLayout(model, input_order_kept, lb, ub)
    all_arg_lo = np.full((batch, n), np.nan)
    all_arg_hi = np.full((batch, n), np.nan)
    forward = _Forward(model, lb, ub, input_order_kept) if mode == "forward" else None
    for lvl_index, level in enumerate(model.levels):
        lvl = lvl_index + 1
        m = len(level.units)
        noise_lo, noise_hi = level.noise.intervals(lb, ub)
        elo = level.elo[None, :] + noise_lo
        ehi = level.ehi[None, :] + noise_hi
        relax.elo.append(elo)
        relax.ehi.append(ehi)
        if forward is not None:
            arg_lo, arg_hi = forward.arguments(level, elo, ehi)
            relax.share.append(_shares(np.abs(forward.arg_upper[..., :-1]) * layout.width[:, None, :]))
        else:
            blocks = {
                source: np.broadcast_to(block, (batch, *block.shape)).copy()
                for source, block in level.blocks.items()
            }
            const = np.broadcast_to(level.const, (batch, m)).copy()
            tables: dict = {}
            up, up_mag, input_block, _ = _backsub(
                model, relax, blocks, const, elo, ehi, lvl - 1, lb, ub, tables
            )
            relax.share.append(_shares(_input_spread(input_block, tables, layout, m)))
            neg_blocks = {
                source: -np.broadcast_to(block, (batch, *block.shape))
                for source, block in level.blocks.items()
            }
            neg_const = -np.broadcast_to(level.const, (batch, m))
            down, down_mag, _, _ = _backsub(
                model, relax, neg_blocks, neg_const.copy(), -ehi, -elo, lvl - 1, lb, ub
            )
            arg_hi = up + _margin(up, up_mag, model.fan_in)
            arg_lo = -down - _margin(down, down_mag, model.fan_in)
        if level.separable is not None and level.separable.any():
            _tabulated_arguments(model, level, lb, ub, arg_lo, arg_hi)
        arg_lo = np.maximum(arg_lo, level.arg_lo)
        arg_hi = np.minimum(arg_hi, level.arg_hi)
        arg_lo = np.where(level.integral, np.ceil(arg_lo), arg_lo)
        arg_hi = np.where(level.integral, np.floor(arg_hi), arg_hi)
        arg_hi = np.maximum(arg_hi, arg_lo)  # an empty box: keep the bounds ordered
        units = level.units
        all_arg_lo[:, units] = arg_lo
        all_arg_hi[:, units] = arg_hi
        a_u, b_u = np.zeros((batch, m)), np.zeros((batch, m))
        a_l, b_l = np.zeros((batch, m)), np.zeros((batch, m))
        value_lo, value_hi = np.zeros((batch, m)), np.zeros((batch, m))
        gap_u, gap_l = np.zeros((batch, m)), np.zeros((batch, m))
        r = level.relu
        if r.any():
            a_u[:, r], b_u[:, r], a_l[:, r], b_l[:, r], value_lo[:, r], value_hi[:, r] = _relu_relaxation(
                arg_lo[:, r], arg_hi[:, r]
            )
            gap_u[:, r], gap_l[:, r] = _relu_gaps(arg_lo[:, r], arg_hi[:, r])
        for u, (starts, values) in level.steps.items():
            slope_u, upper, slope_l, lower, v_lo, v_hi, step_gap_u, step_gap_l = _step_relaxation(
                starts, values, arg_lo[:, u], arg_hi[:, u], bool(level.integral[u])
            )
            a_u[:, u], a_l[:, u] = slope_u, slope_l
            b_u[:, u], b_l[:, u] = upper, lower
            value_lo[:, u], value_hi[:, u] = v_lo, v_hi
            gap_u[:, u] = np.where(np.isfinite(step_gap_u), step_gap_u, 0.0)
            gap_l[:, u] = np.where(np.isfinite(step_gap_l), step_gap_l, 0.0)
        relax.a_u.append(a_u)
        relax.b_u.append(b_u)
        relax.a_l.append(a_l)
        relax.b_l.append(b_l)
        relax.arg_mag.append(np.maximum(np.abs(arg_lo), np.abs(arg_hi)))
        relax.gap_u.append(gap_u)
        relax.gap_l.append(gap_l)
        lb[:, units] = np.maximum(lb[:, units], value_lo)
        ub[:, units] = np.minimum(ub[:, units], value_hi)
        if forward is not None:
            forward.units(level, a_u, b_u, a_l, b_l, lb[:, units], ub[:, units])
    result = _rows(model, relax, rows, lb, ub, box_lo, box_hi, layout, all_arg_lo, all_arg_hi)
    if many:
        result.many_lb, result.many_ub = _many_rows(model, relax, many, lb, ub)
    return result


def _tabulated_arguments(model, level, lb, ub, arg_lo, arg_hi) -> None:
    """Narrow (in place) the argument bounds of a level's separable units to their exact range
    over each box, read from the tables: back-substitution bounds each product's rounding error
    separately (up to half a unit each, 64 of them per neuron of a 64-input per-op layer)."""
    units = np.flatnonzero(level.separable)
    low, high, magnitude = model.sep_tabulated.unit_ranges(level.sep_index[units], lb, ub, model.sep_inputs)
    const = level.const_sep[units][None, :]
    magnitude = magnitude[None, :] + np.abs(const)
    top, bottom = const + high, const + low
    arg_hi[:, units] = np.minimum(arg_hi[:, units], top + _margin(top, magnitude, model.fan_in))
    arg_lo[:, units] = np.maximum(arg_lo[:, units], bottom - _margin(bottom, magnitude, model.fan_in))


MANY_CHUNK = 2048


def _many_rows(
    model, relax, rows: list[Row], lb: np.ndarray, ub: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Bounds (B, m) of many rows at once: stacked into one back-substitution per chunk."""
    batch = lb.shape[0]
    top = len(model.levels)
    lows, highs = [], []
    for start in range(0, len(rows), MANY_CHUNK):
        chunk = rows[start : start + MANY_CHUNK]
        m = len(chunk)
        blocks: dict[int, np.ndarray] = {}
        const = np.array([row.const for row in chunk])
        elo = np.array([row.elo for row in chunk])
        ehi = np.array([row.ehi for row in chunk])
        for r, row in enumerate(chunk):
            for col, val in zip(row.cols, row.vals):
                source = model.level[int(col)]
                block = blocks.get(source)
                if block is None:
                    block = blocks[source] = np.zeros((1, m, len(model.level_members[source])))
                block[0, r, model.position[col]] += val
        noise = NoiseTable([(r, entry) for r, row in enumerate(chunk) for entry in row.noise], m)
        noise_lo, noise_hi = noise.intervals(lb, ub)
        integral = np.array([row.integral for row in chunk])
        results = []
        for sign in (1.0, -1.0):
            signed = {
                source: np.broadcast_to(sign * block, (batch, m, block.shape[2])).copy()
                for source, block in blocks.items()
            }
            c = np.broadcast_to(sign * const, (batch, m)).copy()
            if sign > 0:
                e_lo, e_hi = elo[None, :] + noise_lo, ehi[None, :] + noise_hi
            else:
                e_lo, e_hi = -(ehi[None, :] + noise_hi), -(elo[None, :] + noise_lo)
            value, magnitude, _, _ = _backsub(model, relax, signed, c, e_lo, e_hi, top, lb, ub)
            value = value + _margin(value, magnitude, model.fan_in)
            results.append(np.where(integral[None, :], np.floor(value), value))
        highs.append(results[0])
        lows.append(-results[1])
    return np.concatenate(lows, axis=1), np.concatenate(highs, axis=1)


class _InputLayout:
    """Where the inputs sit: their positions among the level-0 members, the columns of the
    tabulated ones, and their bounds and widths per box."""

    def __init__(self, model: RelaxedModel, input_kept: list[int], lb: np.ndarray, ub: np.ndarray) -> None:
        self.kept = input_kept
        self.positions = [int(model.position[k]) for k in input_kept]
        column_of = {int(kept): column for column, kept in enumerate(input_kept)}
        self.sep_columns = [column_of[int(kept)] for kept in model.sep_inputs]
        self.top = _finite(ub[:, input_kept])
        self.bottom = _finite(lb[:, input_kept])
        self.width = self.top - self.bottom


def _input_spread(input_block: np.ndarray | None, tables: dict, layout: _InputLayout, m: int) -> np.ndarray:
    """(B, m, n_inputs): how much each input moves m upper bounds across each box (|coefficient|
    times width; for a tabulated input, the spread of its table's contribution)."""
    if input_block is None:
        spread = np.zeros((layout.width.shape[0], m, len(layout.kept)))
    else:
        spread = np.abs(input_block[:, :, layout.positions]) * layout.width[:, None, :]
    if "spread" in tables:
        spread[:, :, layout.sep_columns] = tables["spread"]
    return spread


def _shares(spread: np.ndarray) -> np.ndarray:
    """Each input's fraction of the total spread (rows without any spread: all 0)."""
    total = spread.sum(axis=2, keepdims=True)
    return np.where(total > 0, spread / np.where(total > 0, total, 1.0), 0.0)


def _relaxation_attribution(relax: _Relaxations, costs: list) -> np.ndarray:
    """(B, m, n_inputs): the relaxation error that a bound paid at each unstable unit, shared among
    the inputs by their share of the unit's argument width. Splitting an input narrows the
    arguments it drives, and the triangle's error shrinks with the argument's width: without this
    term, a split rule that only sees the bound's input coefficients keeps halving the inputs that
    the output depends on linearly while the error comes from ReLUs driven by the others (ACAS Xu
    phi1: more than 290,000 boxes instead of a few hundred)."""
    total = None
    for level_index, cost in costs:
        part = np.matmul(cost, relax.share[level_index])
        total = part if total is None else total + part
    return total


def _rows(model, relax, rows, lb, ub, box_lo, box_hi, layout, all_arg_lo, all_arg_hi) -> BoundResult:
    batch = lb.shape[0]
    top = len(model.levels)
    members = model.level_members
    n_rows, n_inputs = len(rows), len(layout.kept)
    row_ub = np.zeros((batch, n_rows))
    row_lb = np.zeros((batch, n_rows))
    row_argmax = np.zeros((batch, n_rows, n_inputs))
    row_coef = np.zeros((batch, n_rows, n_inputs))
    row_const = np.zeros((batch, n_rows))
    row_spread = np.zeros((batch, n_rows, n_inputs))
    for r_index, row in enumerate(rows):
        noise_lo, noise_hi = NoiseTable([(0, entry) for entry in row.noise], 1).intervals(lb, ub)
        for sign in (1.0, -1.0):
            blocks: dict[int, np.ndarray] = {}
            for col, val in zip(row.cols, row.vals):
                source = model.level[int(col)]
                block = blocks.get(source)
                if block is None:
                    block = blocks[source] = np.zeros((batch, 1, len(members[source])))
                block[:, 0, model.position[col]] += sign * val
            const = np.full((batch, 1), sign * row.const)
            if sign > 0:
                elo, ehi = row.elo + noise_lo, row.ehi + noise_hi
            else:
                elo, ehi = -(row.ehi + noise_hi), -(row.elo + noise_lo)
            tables: dict = {}
            costs: list | None = [] if sign > 0 else None
            value, magnitude, input_block, _ = _backsub(
                model, relax, blocks, const, elo, ehi, top, lb, ub, tables, costs
            )
            margin = _margin(value[:, 0], magnitude[:, 0], model.fan_in)
            value = value[:, 0] + margin
            unrounded = value
            if row.integral:
                value = np.floor(value)
            if sign > 0:
                row_ub[:, r_index] = value
                coef = (
                    input_block[:, 0, layout.positions]
                    if input_block is not None
                    else np.zeros((batch, n_inputs))
                )
                row_coef[:, r_index, :] = coef
                contribution = (np.maximum(coef, 0) * layout.top + np.minimum(coef, 0) * layout.bottom).sum(
                    axis=1
                )
                row_const[:, r_index] = unrounded - contribution
                row_argmax[:, r_index, :] = np.where(coef >= 0, box_hi, box_lo)
                if "argmax" in tables:  # tabulated inputs: the value maximising their contribution
                    row_argmax[:, r_index, layout.sep_columns] = tables["argmax"][:, 0, :]
                spread = _input_spread(input_block, tables, layout, 1)
                if costs:
                    spread = spread + _relaxation_attribution(relax, costs)
                row_spread[:, r_index, :] = spread[:, 0, :]
            else:
                row_lb[:, r_index] = -value
    return BoundResult(
        lb, ub, row_ub, row_lb, row_argmax, row_coef, all_arg_lo, all_arg_hi, row_const, row_spread
    )


def _backsub(
    model: RelaxedModel,
    relax: _Relaxations,
    blocks: dict[int, np.ndarray],
    const: np.ndarray,
    elo: np.ndarray,
    ehi: np.ndarray,
    top: int,
    lb: np.ndarray,
    ub: np.ndarray,
    tables: dict | None = None,
    costs: list | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """Upper bound of sum(blocks * z) + const + e (e in [elo, ehi], (B, m)) over the boxes,
    substituting levels top..1. A walk of its own, not the network level's operator walk
    (`engine.netlevel.bounds.backsubstitute`): the scalar path has no layers, only the levels of
    the C's expression graph (each unit a C operation on scalars: products, sums, table reads),
    which is why it exists -- for C the lifter cannot read back as layers. Returns (bound (B, m), magnitude of what was summed, input block,
    bound before the inputs' contribution). Separable units are not substituted: their
    coefficients are collected and bounded exactly through their tables at the inputs; `tables`,
    if given, receives per tabulated input its maximising value ("argmax") and its contribution's
    spread over the box ("spread"); `costs`, if given, receives per level (index, (B, m, units)):
    what the bound paid for the gaps of the units' relaxations."""
    value = const + ehi
    magnitude = np.abs(const) + np.maximum(np.abs(elo), np.abs(ehi))
    batch, m = const.shape
    sep = None
    for lvl in range(top, 0, -1):
        block = blocks.pop(lvl, None)
        if block is None:
            continue
        level = model.levels[lvl - 1]
        i = lvl - 1
        positive, negative = np.maximum(block, 0), np.minimum(block, 0)
        if costs is not None:
            costs.append((i, positive * relax.gap_u[i][:, None, :] - negative * relax.gap_l[i][:, None, :]))
        g = positive * relax.a_u[i][:, None, :] + negative * relax.a_l[i][:, None, :]
        b_u, b_l = _finite(relax.b_u[i]), _finite(relax.b_l[i])
        separable = level.separable
        if separable is not None and separable.any():
            if sep is None:
                sep = np.zeros((batch, m, model.sep_tabulated.n_units))
            sep[:, :, level.sep_index[separable]] += g[:, :, separable]
            const_used = np.where(separable, level.const_sep, level.const)
            g_reg = g * (~separable)[None, None, :]
        else:
            const_used = level.const
            g_reg = g
        g_pos, g_neg = np.maximum(g_reg, 0), np.minimum(g_reg, 0)
        value = (
            value
            + g @ const_used
            + _bmv(g_pos, relax.ehi[i])
            + _bmv(g_neg, relax.elo[i])
            + _bmv(positive, b_u)
            + _bmv(negative, b_l)
        )
        scale = relax.arg_mag[i] + np.abs(level.const)[None, :]
        magnitude = (
            magnitude
            + _bmv(np.abs(g), _finite(scale))
            + _bmv(positive, np.abs(b_u))
            - _bmv(negative, np.abs(b_l))
        )
        for source, coef in level.blocks.items():
            product = g_reg @ coef
            blocks[source] = blocks[source] + product if source in blocks else product
    for source in blocks:
        if source != 0:
            raise InternalError(f"back-substitution left a block at level {source}")
    block = blocks.get(0)
    members = model.level_members[0] if model.level_members else np.zeros(0, dtype=np.int64)
    if sep is not None:
        if block is None:
            block = np.zeros((batch, m, len(members)))
        positions = model.position[model.sep_inputs]
        linear = block[:, :, positions]
        block = block.copy()
        block[:, :, positions] = 0.0
        top, top_magnitude = model.sep_tabulated.maxima(sep, linear, lb, ub, model.sep_inputs, tables)
        value = value + top
        magnitude = magnitude + top_magnitude
    input_block = block
    before_inputs = value
    if block is not None:
        hi = _finite(ub[:, members])
        lo = _finite(lb[:, members])
        positive, negative = np.maximum(block, 0), np.minimum(block, 0)
        value = value + _bmv(positive, hi) + _bmv(negative, lo)
        magnitude = magnitude + _bmv(positive - negative, np.maximum(np.abs(hi), np.abs(lo)))
    value = np.where(value > 1e299, np.inf, value)
    return value, magnitude, input_block, before_inputs


class _SeparableTables:
    """The tables of the separable units in the layout the bounds need (built once per model).

    Per box b and bounded row m, the contribution of input i at its value t is
    `sum_s sep[b, m, s] table[s, i, t] + linear[b, m, i] values[i, t]`: one matrix product over the
    flattened (i, t) axis, then the largest entry among the values inside the box."""

    def __init__(self, table: np.ndarray, values: np.ndarray) -> None:
        """table[s, i, t]: the contribution of input i at its value values[i, t] to the argument of
        separable unit s (padding: nan in both)."""
        n_sep, n_inputs, width = table.shape
        self.n_units = n_sep
        clean = np.nan_to_num(table, nan=0.0)
        self.flat = clean.reshape(n_sep, n_inputs * width)
        self.values = np.nan_to_num(values, nan=0.0)  # (I, D)
        self.defined = ~np.isnan(values)
        # for the rounding margin: an upper bound of sum_i max_t |contribution| per unit weight
        self.table_magnitude = np.abs(clean).max(axis=2).sum(axis=1)  # (S,)
        self.value_magnitude = np.abs(self.values).max(axis=1)  # (I,)
        # range-extremum tables: top[k][s, i, t] = max of table[s, i, t : t + 2^k] (bottom: min),
        # so the extremum over any run of consecutive values is two lookups
        self.first = self.values[:, 0]  # inputs take consecutive integers from here
        self.count = self.defined.sum(axis=1)
        top, bottom = [clean], [clean]
        while 2 ** len(top) <= width:
            half = 2 ** (len(top) - 1)
            previous_top, previous_bottom = top[-1], bottom[-1]
            shifted = np.arange(width) + half
            inside = np.minimum(shifted, width - 1)
            top.append(np.maximum(previous_top, previous_top[:, :, inside]))
            bottom.append(np.minimum(previous_bottom, previous_bottom[:, :, inside]))
        self.range_top = np.stack(top).transpose(0, 2, 3, 1)  # (K, I, D, S)
        self.range_bottom = np.stack(bottom).transpose(0, 2, 3, 1)

    def unit_ranges(self, units: np.ndarray, lb, ub, inputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per box, the exact least and greatest sum over inputs of separable units' tables (their
        arguments less the constant), and the magnitude summed: (B, len(units)) each."""
        n_inputs = self.values.shape[0]
        last = self.count - 1
        start = np.clip(np.ceil(lb[:, inputs] - self.first), 0, last).astype(np.int64)  # (B, I)
        stop = np.clip(np.floor(ub[:, inputs] - self.first), 0, last).astype(np.int64)
        length = np.maximum(stop - start + 1, 1)
        k = np.floor(np.log2(length)).astype(np.int64)
        other = np.maximum(stop - (1 << k) + 1, start)
        column = np.broadcast_to(np.arange(n_inputs), start.shape)
        high = np.maximum(self.range_top[k, column, start], self.range_top[k, column, other])  # (B, I, S)
        low = np.minimum(self.range_bottom[k, column, start], self.range_bottom[k, column, other])
        return low[:, :, units].sum(axis=1), high[:, :, units].sum(axis=1), self.table_magnitude[units]

    def maxima(self, sep, linear, lb, ub, inputs, details: dict | None = None):
        """Per (b, m): the sum over inputs of the largest contribution inside box b, and a bound of
        the magnitudes summed into it. `details`, if given, receives per (b, m, input) the
        maximising value ("argmax") and the contribution's spread over the box ("spread": what
        splitting that input can gain)."""
        batch, m, n_sep = sep.shape
        n_inputs, width = self.values.shape
        table = (sep.reshape(batch * m, n_sep) @ self.flat).reshape(batch, m, n_inputs, width)
        table += linear[..., None] * self.values[None, None]
        low, high = lb[:, inputs][:, :, None], ub[:, inputs][:, :, None]
        allowed = self.defined[None] & (self.values[None] >= low) & (self.values[None] <= high)  # (B, I, D)
        if details is not None:
            details["spread"] = -np.where(allowed[:, None], table, np.inf).min(axis=3)
        np.copyto(table, -np.inf, where=~allowed[:, None])
        best = table.max(axis=3)
        top = best.sum(axis=2)
        magnitude = np.abs(sep) @ self.table_magnitude + np.abs(linear) @ self.value_magnitude
        if details is not None:
            details["spread"] += best
            details["argmax"] = self.values[np.arange(n_inputs), table.argmax(axis=3)]
        return top, magnitude


class _Forward:
    """Linear bound functions of the inputs, per kept variable, propagated level by level:
    L(x) <= z <= U(x) on each box, as (B, members, n_inputs + 1) arrays (last column: constant)."""

    def __init__(self, model: RelaxedModel, lb: np.ndarray, ub: np.ndarray, input_kept: list[int]) -> None:
        self.model = model
        batch = lb.shape[0]
        n_in = len(input_kept)
        self.lo_in = _finite(lb[:, input_kept])
        self.hi_in = _finite(ub[:, input_kept])
        members = model.level_members[0]
        upper = np.zeros((batch, len(members), n_in + 1))
        lower = np.zeros((batch, len(members), n_in + 1))
        column_of = {kept: column for column, kept in enumerate(input_kept)}
        for position, kept in enumerate(members):
            column = column_of.get(int(kept))
            if column is not None:
                upper[:, position, column] = 1.0
                lower[:, position, column] = 1.0
            else:
                upper[:, position, -1] = _finite(ub[:, kept])
                lower[:, position, -1] = _finite(lb[:, kept])
        self.upper = {0: upper}
        self.lower = {0: lower}
        self.magnitude = {0: np.maximum(np.abs(_finite(lb[:, members])), np.abs(_finite(ub[:, members])))}

    def _extremes(self, form: np.ndarray, top: bool) -> np.ndarray:
        coef, const = form[..., :-1], form[..., -1]
        hi, lo = self.hi_in[:, None, :], self.lo_in[:, None, :]
        if top:
            return const + (np.maximum(coef, 0) * hi + np.minimum(coef, 0) * lo).sum(axis=-1)
        return const + (np.maximum(coef, 0) * lo + np.minimum(coef, 0) * hi).sum(axis=-1)

    def arguments(self, level: Level, elo: np.ndarray, ehi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        upper = lower = None
        magnitude = np.abs(level.const)[None, :] + np.maximum(np.abs(elo), np.abs(ehi))
        for source, block in level.blocks.items():
            positive, negative = np.maximum(block, 0), np.minimum(block, 0)
            up = positive @ self.upper[source] + negative @ self.lower[source]
            down = positive @ self.lower[source] + negative @ self.upper[source]
            upper = up if upper is None else upper + up
            lower = down if lower is None else lower + down
            magnitude = magnitude + self.magnitude[source] @ np.abs(block).T
        batch = self.lo_in.shape[0]
        if upper is None:
            upper = np.zeros((batch, len(level.units), self.lo_in.shape[1] + 1))
            lower = upper.copy()
        upper[..., -1] += level.const + ehi
        lower[..., -1] += level.const + elo
        self.arg_upper, self.arg_lower = upper, lower
        top = self._extremes(upper, True)
        bottom = self._extremes(lower, False)
        fan_in = self.model.fan_in
        return bottom - _margin(bottom, magnitude, fan_in), top + _margin(top, magnitude, fan_in)

    def units(self, level: Level, a_u, b_u, a_l, b_l, value_lo, value_hi) -> None:
        lvl = int(self.model.level[int(level.units[0])])
        up_arg, low_arg = self.arg_upper, self.arg_lower
        upper = np.where((a_u >= 0)[..., None], a_u[..., None] * up_arg, a_u[..., None] * low_arg)
        lower = np.where((a_l >= 0)[..., None], a_l[..., None] * low_arg, a_l[..., None] * up_arg)
        upper[..., -1] += _finite(b_u)
        lower[..., -1] += _finite(b_l)
        bad_up, bad_low = ~np.isfinite(b_u), ~np.isfinite(b_l)
        if bad_up.any() or bad_low.any():
            upper = np.where(bad_up[..., None], 0.0, upper)
            upper[..., -1] = np.where(bad_up, _finite(value_hi), upper[..., -1])
            lower = np.where(bad_low[..., None], 0.0, lower)
            lower[..., -1] = np.where(bad_low, _finite(value_lo), lower[..., -1])
        self.upper[lvl] = upper
        self.lower[lvl] = lower
        self.magnitude[lvl] = np.maximum(np.abs(_finite(value_lo)), np.abs(_finite(value_hi)))


def finite(value: float) -> bool:
    return math.isfinite(value)
