"""Scalar path: mixed-integer linear encoding of a lowered query (exact for integer programs).

`encode(lowering, conjunction, mode)` returns a `MilpModel`: columns with bounds and integrality,
and rows `lo <= a.x <= hi`. One column per lowering variable (plus auxiliary binaries); affine
arguments are expanded in the rows. Encodings (z the variable, [l, u] bounds of its argument a):

    quot floor   d z <= a <= d z + d - 1
    quot rna     r = a - d z in [-h, h], with r <= h - 1 where a >= 0 and r >= 1 - h where a < 0
                 (a sign binary where a's sign is not known; h = d / 2)
    quot trunc   floor where a >= 0, ceiling where a <= 0 (a sign binary otherwise)
    relu         z >= a, z >= 0, z <= a - l (1 - b), z <= u b     (no binary when l >= 0 or u <= 0)
    step         the pieces reachable in [l, u] in incremental form: binaries d_1 >= ... >= d_n-1
                 (d_k: the piece is k or later), a >= lo_0 + sum d_k (lo_k - lo_k-1), a <= hi_0 +
                 sum d_k (hi_k - hi_k-1), z = v_0 + sum d_k (v_k - v_k-1)
    wrap         z = a - 2^w k, k integer, z in the type's range
    ite          big-M on both arms;  cmp  z = 1 <=> a >= 0 (a >= l (1 - z), a <= -1 + (u + 1) z)
    and / or     the usual linearisations;  mul  binary expansion of the factor with fewer values

`mode="relaxed"` leaves the quotients and the sign binaries continuous: a superset of the
executions, so infeasibility still proves the query unsatisfiable, and a solution is a candidate.
Integer programs have integer data: every row is widened by `slack` (0.5), which changes no integer
solution but gives every execution a margin of 0.5 on every row (docs/engine.md: why a solver's
"infeasible" is then trusted).
"""

from __future__ import annotations

import itertools
import math

from qverify.engine.scalar.linear import Affine, Conjunction, Lowering, Var
from qverify.engine.solvers.milp import MilpModel
from qverify.errors import UnsupportedError

INF = math.inf
MUL_EXPAND_LIMIT = 1 << 16
ONE_HOT_LIMIT = 64  # exact mode: inputs with at most this many values get a one-hot encoding


def _quotient(a: int, d: int, mode: str) -> int:
    if mode == "floor":
        return a // d
    if mode == "rna":
        magnitude = (abs(a) + d // 2) // d
        return magnitude if a >= 0 else -magnitude
    magnitude = abs(a) // d
    return magnitude if a >= 0 else -magnitude


def _is_integer(value) -> bool:
    if isinstance(value, (bool, int)):
        return True
    if isinstance(value, float):
        return False
    return value == int(value)


class _Encoder:
    def __init__(self, lowering: Lowering, mode: str, slack: float, bounds: dict[int, tuple] | None) -> None:
        self.low = lowering
        self.mode = mode
        self.slack = slack
        self.model = MilpModel()
        self.column: dict[int, int] = {}  # lowering var index -> column
        self.var_bounds = bounds or {}
        self.model.exact = lowering.exact and mode == "exact"
        self.one_hot: dict[int, list[tuple[int, int]]] = {}  # input var -> [(value, binary column)]
        # exact mode: inputs that some quotient depends on alone (its value is a function of them)
        self.one_hot_candidates: set[int] = set()
        if mode == "exact":
            for var in lowering.vars:
                if var.kind == "quot" and len(var.args[0].terms) == 1:
                    (index,) = var.args[0].terms
                    if lowering.vars[index].kind == "input" and lowering.vars[index].integer:
                        self.one_hot_candidates.add(index)

    # -------------------------------------------------------------- primitives

    def new_col(self, lo: float, hi: float, integer: bool) -> int:
        self.model.col_lo.append(float(lo))
        self.model.col_hi.append(float(hi))
        self.model.integer.append(integer)
        if integer and lo >= 0 and hi <= 1:
            self.model.binaries += 1
        return self.model.n_cols - 1

    def binary(self) -> int:
        return self.new_col(0, 1, self.mode == "exact")

    def binary_always(self) -> int:
        """A binary that stays integral in relaxed mode too (relu phases, pieces, booleans)."""
        return self.new_col(0, 1, True)

    def lin(self, expr: Affine) -> tuple[dict[int, float], float]:
        terms: dict[int, float] = {}
        for index, coef in expr.terms.items():
            column = self.column[index]
            terms[column] = terms.get(column, 0.0) + float(coef)
        return terms, float(expr.const)

    def row(self, terms: dict[int, float], lo: float, hi: float) -> None:
        """lo <= terms <= hi, widened by the slack on each finite side."""
        model = self.model
        items = [(c, v) for c, v in terms.items() if v != 0]
        if not items:
            if lo - self.slack > 1e-9 or hi + self.slack < -1e-9:
                # an infeasible constant row: keep it as an explicit contradiction
                column = self.new_col(0, 0, False)
                items = [(column, 1.0)]
            else:
                return
        model.row_lo.append(lo - self.slack if math.isfinite(lo) else -INF)
        model.row_hi.append(hi + self.slack if math.isfinite(hi) else INF)
        for column, value in items:
            model.row_index.append(column)
            model.row_value.append(value)
        model.row_start.append(len(model.row_index))

    def ge(self, expr: dict[int, float], const: float) -> None:
        """expr + const >= 0."""
        self.row(expr, -const, INF)

    def combine(self, *parts: tuple[dict[int, float], float, float]) -> tuple[dict[int, float], float]:
        """sum(scale * (terms + const))."""
        terms: dict[int, float] = {}
        const = 0.0
        for part_terms, part_const, scale in parts:
            for c, v in part_terms.items():
                terms[c] = terms.get(c, 0.0) + scale * v
            const += scale * part_const
        return terms, const

    def integral(self, expr: Affine) -> bool:
        """Is the expression integer-valued on every execution (integer data, integer variables)?"""
        if not _is_integer(expr.const):
            return False
        vars_ = self.low.vars
        return all(_is_integer(c) and vars_[i].integer for i, c in expr.terms.items())

    def bounds_of(self, expr: Affine) -> tuple[float, float]:
        lo = hi = float(expr.const)
        for index, coef in expr.terms.items():
            column = self.column[index]
            c_lo, c_hi = self.model.col_lo[column], self.model.col_hi[column]
            coef = float(coef)
            if coef > 0:
                lo += coef * c_lo
                hi += coef * c_hi
            else:
                lo += coef * c_hi
                hi += coef * c_lo
        return lo, hi

    # -------------------------------------------------------------- variables

    def encode_var(self, var: Var) -> None:
        lo, hi = self.var_bounds.get(var.index, (var.lo, var.hi))
        lo, hi = float(lo), float(hi)
        integer = bool(var.integer)
        kind = var.kind
        if kind in ("input", "free"):
            self.column[var.index] = self.new_col(lo, hi, integer and self.mode == "exact")
            if var.index in self.one_hot_candidates and 1 < hi - lo + 1 <= ONE_HOT_LIMIT:
                self._one_hot(var.index, int(lo), int(hi))
            return
        if kind == "quot":
            self._quot(var, lo, hi)
            return
        if kind == "relu":
            self._relu(var, lo, hi)
            return
        if kind == "step":
            self._step(var, lo, hi)
            return
        if kind == "wrap":
            self._wrap(var, lo, hi)
            return
        if kind == "ite":
            self._ite(var, lo, hi)
            return
        if kind == "cmp":
            self._cmp(var)
            return
        if kind in ("and", "or"):
            self._logic(var)
            return
        if kind == "mul":
            self._mul(var, lo, hi)
            return
        if kind == "fround":
            z = self.new_col(lo, hi, False)
            self.column[var.index] = z
            a, ac = self.lin(var.args[0])
            (eps,) = var.params
            # |z - a| <= eps
            terms, const = self.combine(({z: 1.0}, 0.0, 1.0), (a, ac, -1.0))
            self.row(terms, -const - float(eps), -const + float(eps))
            return
        raise UnsupportedError(f"MILP encoding of variable kind '{kind}'")

    def _one_hot(self, index: int, lo: int, hi: int) -> None:
        """x = sum v b_v, sum b_v = 1: quotients of x alone become exact linear functions."""
        column = self.column[index]
        pairs = [(value, self.new_col(0, 1, True)) for value in range(lo, hi + 1)]
        self.model.binaries += 0
        self.row({b: 1.0 for _, b in pairs}, 1.0, 1.0)
        terms = {column: 1.0}
        for value, b in pairs:
            terms[b] = terms.get(b, 0.0) - value
        self.row(terms, 0.0, 0.0)
        self.one_hot[index] = pairs

    def _quot_one_hot(self, var: Var, lo: float, hi: float) -> bool:
        """u = q(c x + k) with x one-hot encoded: u = sum q(c v + k) b_v, exactly."""
        arg = var.args[0]
        if len(arg.terms) != 1:
            return False
        ((index, coef),) = arg.terms.items()
        pairs = self.one_hot.get(index)
        if pairs is None or not _is_integer(coef) or not _is_integer(arg.const):
            return False
        d, mode = var.params
        z = self.new_col(lo, hi, True)
        self.column[var.index] = z
        terms = {z: 1.0}
        for value, b in pairs:
            terms[b] = terms.get(b, 0.0) - _quotient(int(coef) * value + int(arg.const), int(d), mode)
        self.row(terms, 0.0, 0.0)
        return True

    def _quot(self, var: Var, lo: float, hi: float) -> None:
        if self.one_hot and self._quot_one_hot(var, lo, hi):
            return
        d, mode = var.params
        d = int(d)
        integral_arg = self.integral(var.args[0])
        z = self.new_col(lo, hi, self.mode == "exact")
        self.column[var.index] = z
        a, ac = self.lin(var.args[0])
        a_lo, a_hi = self.bounds_of(var.args[0])
        # residual r = a - d z
        r_terms, r_const = self.combine((a, ac, 1.0), ({z: float(d)}, 0.0, -1.0))
        if not integral_arg:
            # trunc of a real value (float -> int): closure of the half-open ranges
            if a_lo >= 0:
                self.row(r_terms, -r_const, -r_const + 1)
            elif a_hi <= 0:
                self.row(r_terms, -r_const - 1, -r_const)
            else:
                self.row(r_terms, -r_const - 1, -r_const + 1)
            return
        if mode == "floor":
            self.row(r_terms, -r_const, -r_const + d - 1)
            return
        if mode == "rna":
            h = d // 2
            if a_lo >= 0:
                self.row(r_terms, -r_const - h, -r_const + h - 1)
            elif a_hi <= -1:
                self.row(r_terms, -r_const - h + 1, -r_const + h)
            elif self.mode != "exact":
                self.row(r_terms, -r_const - h, -r_const + h)
            else:
                s = self._sign(a, ac, a_lo, a_hi)
                # r <= h - s ; r >= -h + 1 - s
                terms, const = self.combine((r_terms, r_const, 1.0), ({s: 1.0}, 0.0, 1.0))
                self.row(terms, -INF, h - const)
                self.row(terms, -h + 1 - const, INF)
            return
        # trunc: floor where a >= 0 (r in [0, d-1]), ceiling where a <= 0 (r in [-(d-1), 0])
        if a_lo >= 0:
            self.row(r_terms, -r_const, -r_const + d - 1)
        elif a_hi <= 0:
            self.row(r_terms, -r_const - d + 1, -r_const)
        elif self.mode != "exact":
            self.row(r_terms, -r_const - d + 1, -r_const + d - 1)
        else:
            s = self._sign(a, ac, a_lo, a_hi)
            # r >= -(d-1)(1 - s) ; r <= (d-1) s
            t1, c1 = self.combine((r_terms, r_const, 1.0), ({s: -(d - 1.0)}, 0.0, 1.0))
            self.row(t1, -(d - 1.0) - c1, INF)
            t2, c2 = self.combine((r_terms, r_const, 1.0), ({s: -(d - 1.0)}, 0.0, 1.0))
            self.row(t2, -INF, -c2)

    def _sign(self, a: dict[int, float], ac: float, a_lo: float, a_hi: float) -> int:
        """A binary s with s = 1 => a >= 0 and s = 0 => a <= -1 (a integer-valued)."""
        s = self.binary()
        # a >= a_lo (1 - s)  <=>  a + a_lo s >= a_lo
        terms, const = self.combine((a, ac, 1.0), ({s: a_lo}, 0.0, 1.0))
        self.row(terms, a_lo - const, INF)
        # a <= -1 + (a_hi + 1) s
        terms, const = self.combine((a, ac, 1.0), ({s: -(a_hi + 1.0)}, 0.0, 1.0))
        self.row(terms, -INF, -1.0 - const)
        return s

    def _relu(self, var: Var, lo: float, hi: float) -> None:
        a, ac = self.lin(var.args[0])
        a_lo, a_hi = self.var_bounds.get(("arg", var.index), self.bounds_of(var.args[0]))
        a_lo, a_hi = float(a_lo), float(a_hi)
        exact_int = self.mode == "exact" and var.integer
        if a_lo >= 0:
            z = self.new_col(max(lo, a_lo), min(hi, a_hi), exact_int)
            terms, const = self.combine(({z: 1.0}, 0.0, 1.0), (a, ac, -1.0))
            self.row(terms, -const, -const)
            self.column[var.index] = z
            return
        if a_hi <= 0:
            z = self.new_col(0, 0, False)
            self.column[var.index] = z
            return
        z = self.new_col(max(lo, 0.0), min(hi, a_hi), exact_int)
        self.column[var.index] = z
        b = self.binary_always()
        # z >= a
        terms, const = self.combine(({z: 1.0}, 0.0, 1.0), (a, ac, -1.0))
        self.row(terms, -const, INF)
        # z <= a - a_lo (1 - b)   <=>  z - a - a_lo b <= -a_lo
        terms, const = self.combine(({z: 1.0, b: -a_lo}, 0.0, 1.0), (a, ac, -1.0))
        self.row(terms, -INF, -a_lo - const)
        # z <= a_hi b
        self.row({z: 1.0, b: -a_hi}, -INF, 0.0)

    def _step(self, var: Var, lo: float, hi: float) -> None:
        starts, values = var.params
        a, ac = self.lin(var.args[0])
        a_lo, a_hi = self.var_bounds.get(("arg", var.index), self.bounds_of(var.args[0]))
        integral = self.integral(var.args[0])
        pieces = []
        for k, start in enumerate(starts):
            end = starts[k + 1] - (1 if integral else 0) if k + 1 < len(starts) else INF
            p_lo, p_hi = max(float(start), a_lo), min(float(end), a_hi)
            if p_lo <= p_hi:
                pieces.append((p_lo, p_hi, float(values[k])))
        if not pieces:
            raise UnsupportedError("step function with no reachable piece")
        value_lo, value_hi = min(p[2] for p in pieces), max(p[2] for p in pieces)
        z = self.new_col(max(lo, value_lo), min(hi, value_hi), self.mode == "exact" and var.integer)
        self.column[var.index] = z
        if len(pieces) == 1:
            return
        # The incremental form of "one binary per piece" (b_k = d_k - d_k+1 maps one onto the
        # other: the same LP relaxation, the same integer points) with row magnitudes of a's
        # range rather than the sum of all pieces' ends: a requantization's 256 pieces over an
        # accumulator of +-290,000 summed to 3.7e7, above what an "infeasible" is trusted with.
        later = [self.binary_always() for _ in pieces[1:]]
        for first, second in itertools.pairwise(later):
            self.row({first: 1.0, second: -1.0}, 0.0, INF)
        steps = list(zip(later, pieces[1:], pieces))
        # a >= lo_0 + sum d_k (lo_k - lo_k-1)
        terms, const = self.combine((a, ac, 1.0), ({d: -(p[0] - q[0]) for d, p, q in steps}, 0.0, 1.0))
        self.row(terms, pieces[0][0] - const, INF)
        if all(math.isfinite(p[1]) for p in pieces):
            # a <= hi_0 + sum d_k (hi_k - hi_k-1)
            terms, const = self.combine((a, ac, 1.0), ({d: -(p[1] - q[1]) for d, p, q in steps}, 0.0, 1.0))
            self.row(terms, -INF, pieces[0][1] - const)
        # z = v_0 + sum d_k (v_k - v_k-1)
        terms = {z: 1.0}
        for d, p, q in steps:
            terms[d] = terms.get(d, 0.0) - (p[2] - q[2])
        self.row(terms, pieces[0][2], pieces[0][2])

    def _wrap(self, var: Var, lo: float, hi: float) -> None:
        bits, signed = var.params
        a, ac = self.lin(var.args[0])
        a_lo, a_hi = self.bounds_of(var.args[0])
        t_lo, t_hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        modulus = float(2**bits)
        k_lo = math.floor((a_lo - t_hi) / modulus) if math.isfinite(a_lo) else -(2**20)
        k_hi = math.ceil((a_hi - t_lo) / modulus) if math.isfinite(a_hi) else 2**20
        z = self.new_col(max(lo, t_lo), min(hi, t_hi), self.mode == "exact")
        self.column[var.index] = z
        k = self.new_col(k_lo, k_hi, self.mode == "exact")
        # z = a - 2^bits k
        terms, const = self.combine(({z: 1.0, k: modulus}, 0.0, 1.0), (a, ac, -1.0))
        self.row(terms, -const, -const)

    def _ite(self, var: Var, lo: float, hi: float) -> None:
        c_expr, a_expr, b_expr = var.args
        c, cc = self.lin(c_expr)
        a, ac = self.lin(a_expr)
        b, bc = self.lin(b_expr)
        a_lo, a_hi = self.bounds_of(a_expr)
        b_lo, b_hi = self.bounds_of(b_expr)
        z = self.new_col(
            max(lo, min(a_lo, b_lo)), min(hi, max(a_hi, b_hi)), self.mode == "exact" and var.integer
        )
        self.column[var.index] = z
        z_lo, z_hi = self.model.col_lo[z], self.model.col_hi[z]
        # when c = 1: z = a ;  z - a <= M (1 - c), a - z <= M (1 - c)
        for arm, arm_c, arm_lo, arm_hi, when_one in ((a, ac, a_lo, a_hi, True), (b, bc, b_lo, b_hi, False)):
            m_up = max(z_hi - arm_lo, 0.0)  # bound of z - arm
            m_down = max(arm_hi - z_lo, 0.0)  # bound of arm - z
            # z - arm - m_up * (1 - c) <= 0   (when_one)   or   z - arm - m_up * c <= 0
            sign = -1.0 if when_one else 1.0
            base = m_up if when_one else 0.0
            terms, const = self.combine(({z: 1.0}, 0.0, 1.0), (arm, arm_c, -1.0), (c, cc, -sign * m_up))
            self.row(terms, -INF, base - const)
            base = m_down if when_one else 0.0
            terms, const = self.combine((arm, arm_c, 1.0), ({z: -1.0}, 0.0, 1.0), (c, cc, -sign * m_down))
            self.row(terms, -INF, base - const)

    def _cmp(self, var: Var) -> None:
        (test,) = var.params
        a, ac = self.lin(var.args[0])
        a_lo, a_hi = self.bounds_of(var.args[0])
        gap = 1.0 if self.integral(var.args[0]) else 0.0
        if test == "ge0":
            z = self._indicator_ge(a, ac, a_lo, a_hi, gap)
        else:
            p = self._indicator_ge(a, ac, a_lo, a_hi, gap)
            neg = {c: -v for c, v in a.items()}
            q = self._indicator_ge(neg, -ac, -a_hi, -a_lo, gap)
            z = self.binary_always()
            self.row({z: 1.0, p: -1.0}, -INF, 0.0)
            self.row({z: 1.0, q: -1.0}, -INF, 0.0)
            self.row({z: 1.0, p: -1.0, q: -1.0}, -1.0, INF)
            if test == "ne0":
                w = self.new_col(0, 1, True)
                self.row({w: 1.0, z: 1.0}, 1.0, 1.0)
                z = w
        self.column[var.index] = z

    def _indicator_ge(self, a: dict[int, float], ac: float, a_lo: float, a_hi: float, gap: float) -> int:
        """z = 1 <=> a >= 0 (a integral: a <= -1 when z = 0)."""
        if a_lo >= 0:
            return self.new_col(1, 1, True)
        if a_hi < 0 or (gap and a_hi <= -1):
            return self.new_col(0, 0, True)
        z = self.binary_always()
        # a >= a_lo (1 - z)
        terms, const = self.combine((a, ac, 1.0), ({z: a_lo}, 0.0, 1.0))
        self.row(terms, a_lo - const, INF)
        # a <= -gap + (a_hi + gap) z
        terms, const = self.combine((a, ac, 1.0), ({z: -(a_hi + gap)}, 0.0, 1.0))
        self.row(terms, -INF, -gap - const)
        return z

    def _logic(self, var: Var) -> None:
        z = self.binary_always()
        self.column[var.index] = z
        args = [self.lin(arg) for arg in var.args]
        if var.kind == "and":
            total: dict[int, float] = {z: -1.0}
            const = 0.0
            for terms, c in args:
                t, tc = self.combine((terms, c, 1.0), ({z: -1.0}, 0.0, 1.0))
                self.row(t, -tc, INF)  # arg - z >= 0
                for col, v in terms.items():
                    total[col] = total.get(col, 0.0) + v
                const += c
            # z >= sum(args) - (n - 1)  <=>  sum(args) - z <= n - 1
            self.row(total, -INF, len(args) - 1 - const)
        else:
            total = {z: -1.0}
            const = 0.0
            for terms, c in args:
                t, tc = self.combine(({z: 1.0}, 0.0, 1.0), (terms, c, -1.0))
                self.row(t, -tc, INF)  # z - arg >= 0
                for col, v in terms.items():
                    total[col] = total.get(col, 0.0) + v
                const += c
            self.row(total, -const, INF)  # sum(args) - z >= 0

    def _mul(self, var: Var, lo: float, hi: float) -> None:
        a_expr, b_expr = var.args
        a_lo, a_hi = self.bounds_of(a_expr)
        b_lo, b_hi = self.bounds_of(b_expr)
        if (b_hi - b_lo) > (a_hi - a_lo):
            a_expr, b_expr, a_lo, a_hi, b_lo, b_hi = b_expr, a_expr, b_lo, b_hi, a_lo, a_hi
        a, ac = self.lin(a_expr)
        b, bc = self.lin(b_expr)
        integral = self.integral(b_expr)
        z = self.new_col(lo, hi, self.mode == "exact" and var.integer)
        self.column[var.index] = z
        if integral and math.isfinite(b_lo) and b_hi - b_lo < MUL_EXPAND_LIMIT and math.isfinite(a_lo + a_hi):
            # b = b_lo + sum 2^i beta_i ; z = a b_lo + sum 2^i (a beta_i)
            width = max(int(b_hi - b_lo), 0).bit_length()
            betas = [self.binary_always() for _ in range(width)]
            terms, const = self.combine(
                (b, bc, 1.0), ({beta: -(2.0**i) for i, beta in enumerate(betas)}, 0.0, 1.0)
            )
            self.row(terms, b_lo - const, b_lo - const)
            total: dict[int, float] = {z: 1.0}
            const_total = 0.0
            for c, v in a.items():
                total[c] = total.get(c, 0.0) - b_lo * v
            const_total -= b_lo * ac
            for i, beta in enumerate(betas):
                p = self.new_col(
                    min(a_lo, 0.0), max(a_hi, 0.0), self.mode == "exact" and self.integral(a_expr)
                )
                # p = a * beta
                self.row({p: 1.0, beta: -a_hi}, -INF, 0.0)
                self.row({p: 1.0, beta: -a_lo}, 0.0, INF)
                t, tc = self.combine(({p: 1.0, beta: -a_lo}, 0.0, 1.0), (a, ac, -1.0))
                self.row(t, -INF, -a_lo - tc)
                t, tc = self.combine(({p: 1.0, beta: -a_hi}, 0.0, 1.0), (a, ac, -1.0))
                self.row(t, -a_hi - tc, INF)
                total[p] = total.get(p, 0.0) - 2.0**i
            self.row(total, -const_total, -const_total)
            return
        # McCormick envelope: a relaxation
        self.model.exact = False
        for x_c, y_c, sign in ((a_lo, b_lo, 1), (a_hi, b_hi, 1), (a_lo, b_hi, -1), (a_hi, b_lo, -1)):
            # sign 1: z >= x_c b + y_c a - x_c y_c ; sign -1: z <= ...
            terms, const = self.combine(({z: 1.0}, 0.0, 1.0), (b, bc, -x_c), (a, ac, -y_c))
            if sign > 0:
                self.row(terms, -x_c * y_c - const, INF)
            else:
                self.row(terms, -INF, -x_c * y_c - const)

    # -------------------------------------------------------------- literals

    def literal(self, expr: Affine, sense: str) -> None:
        terms, const = self.lin(expr)
        if sense == "ge":
            self.row(terms, -const, INF)
        else:
            self.row(terms, -const, -const)


def encode(
    lowering: Lowering,
    conjunction: Conjunction,
    mode: str = "exact",
    slack: float = 0.5,
    bounds: dict | None = None,
) -> MilpModel:
    """The MILP of `conjunction` (its literals must hold) over the lowering's variables.

    `bounds` may narrow variables (`var index -> (lo, hi)`) and arguments of relu/step variables
    (`("arg", var index) -> (lo, hi)`), e.g. from symbolic bounds valid for the query's region.
    """
    encoder = _Encoder(lowering, mode, slack, bounds)
    for var in lowering.vars:
        encoder.encode_var(var)
    for lit in conjunction.literals:
        encoder.literal(lit.expr, lit.sense)
    model = encoder.model
    model.inputs = {index: encoder.column[var] for index, var in lowering.inputs.items()}
    model.trust_infeasible = slack >= 0.5 or lowering.semantics == "real"
    return model
