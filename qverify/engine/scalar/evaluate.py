"""Scalar path: the bit-exact SSA evaluator, vectorised over many input vectors with numpy.

Integer values of every width are held in int64 arrays (a u64 value as its bit pattern, viewed as
uint64 where signedness matters); _Float16/float/double values in float16/float32/float64 arrays,
each operation in the node's type (numpy rounds to nearest even and never fuses; its float16
arithmetic is float32 arithmetic rounded back, the correctly rounded binary16 result); booleans in
bool arrays. The scalar
twin is `qverify.engine.scalar.semantics`. This evaluator is the attack's simulator and the confirmation of
every counterexample: an UNSAFE is reported only for an input it evaluates as violating.

`run(program, x)` executes the steps in order per row and reports, per row, HOLDS, ASSUME_FAILED or
VIOLATED with the index of the first failing assertion -- the outcome the C replay prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from qverify.engine import c_types
from qverify.engine.scalar import semantics, ssa
from qverify.engine.scalar.ssa import Binary, Cast, Compare, Const, Input, Ite, Node, Read, Step, Unary
from qverify.errors import InternalError

HOLDS, ASSUME_FAILED, VIOLATED = 0, 1, 2
DEFAULT_CHUNK = 4096


def _dtype(ty: c_types.Type):
    if ty.is_bool:
        return np.bool_
    if ty.is_float:
        return semantics.float_dtype(ty)
    return np.int64


def wrap_array(ty: c_types.Type, v: np.ndarray) -> np.ndarray:
    """int64 values (or bit patterns) wrapped into `ty` (two's complement)."""
    if ty.bits >= 64:
        return v
    mask = np.int64((1 << ty.bits) - 1)
    bits = v & mask
    if ty.signed:
        sign = np.int64(1 << (ty.bits - 1))
        return (bits ^ sign) - sign
    return bits


def _unsigned64(ty: c_types.Type) -> bool:
    return ty.is_int and not ty.signed and ty.bits == 64


def _as_u64(v: np.ndarray) -> np.ndarray:
    return v.view(np.uint64)


def constant_array(node: Const, size: int) -> np.ndarray:
    ty = node.ty
    if ty.is_int and not ty.signed and ty.bits == 64 and node.value >= 1 << 63:
        return np.full(size, node.value - (1 << 64), dtype=np.int64)
    return np.full(size, node.value, dtype=_dtype(ty))


def _round_half_up_shift(magnitude: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """floor(m / 2^s) plus the bit below the cut: m / 2^s rounded half up, without forming m + half."""
    below = np.where(shift > 0, (magnitude >> np.maximum(shift - 1, 0).astype(magnitude.dtype)) & 1, 0)
    return (magnitude >> shift.astype(magnitude.dtype)) + below.astype(magnitude.dtype)


def _shr_rna(a: np.ndarray, shift: np.ndarray, unsigned64: bool = False) -> np.ndarray:
    """a / 2^shift rounded to nearest, ties away from zero; uint64 bit patterns are read unsigned."""
    if unsigned64:
        return _round_half_up_shift(_as_u64(a), shift.astype(np.uint64)).view(np.int64)
    magnitude = _round_half_up_shift(np.abs(a), shift)
    return np.where(a >= 0, magnitude, -magnitude)


def _int_binary(op: str, ty: c_types.Type, a: np.ndarray, b: np.ndarray, b_ty: c_types.Type) -> np.ndarray:
    u64 = _unsigned64(ty)
    if op == "add":
        return wrap_array(ty, a + b)
    if op == "sub":
        return wrap_array(ty, a - b)
    if op == "mul":
        return wrap_array(ty, a * b)
    if op in ("div", "rem"):
        zero = b == 0
        safe = np.where(zero, 1, b)
        if u64:
            ua, ub = _as_u64(a), _as_u64(safe)
            result = (ua // ub if op == "div" else ua % ub).view(np.int64)
        else:
            remainder = np.fmod(a, safe)
            result = (a - remainder) // safe if op == "div" else remainder
        return wrap_array(ty, np.where(zero, 0, result))
    if op in ("shl", "shr", "shr_rna"):
        shift = b.astype(np.int64)
        bad = (shift < 0) | (shift >= ty.bits)
        shift = np.where(bad, 0, shift)
        if op == "shl":
            result = wrap_array(ty, np.left_shift(a, shift))
        elif op == "shr":
            result = (_as_u64(a) >> shift.astype(np.uint64)).view(np.int64) if u64 else a >> shift
        else:
            result = wrap_array(ty, _shr_rna(a, shift, u64))
        return np.where(bad, 0, result)
    if op == "band":
        return a & b
    if op == "bor":
        return a | b
    if op == "bxor":
        return a ^ b
    if op in ("max", "min"):
        if u64:
            ua, ub = _as_u64(a), _as_u64(b)
            return (np.maximum(ua, ub) if op == "max" else np.minimum(ua, ub)).view(np.int64)
        return np.maximum(a, b) if op == "max" else np.minimum(a, b)
    raise InternalError(f"evaluator: integer operation {op}")


def _float_binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        return a / b
    if op == "max":
        return np.maximum(a, b)
    if op == "min":
        return np.minimum(a, b)
    raise InternalError(f"evaluator: float operation {op}")


def _compare(op: str, a: np.ndarray, b: np.ndarray, ty: c_types.Type) -> np.ndarray:
    if _unsigned64(ty):
        a, b = _as_u64(a), _as_u64(b)
    try:
        return semantics.COMPARISONS[op](a, b)
    except KeyError:
        raise InternalError(f"evaluator: comparison {op}") from None


def _cast(to: c_types.Type, source: c_types.Type, v: np.ndarray) -> np.ndarray:
    if to.is_bool:
        return v != 0
    if source.is_bool:
        v = v.astype(np.int64)
        return v.astype(_dtype(to)) if to.is_float else v
    if to.is_float:
        if source.is_float:
            return v.astype(_dtype(to))
        if _unsigned64(source):
            return _as_u64(v).astype(_dtype(to))
        return v.astype(_dtype(to))
    if source.is_float:
        finite = np.isfinite(v)
        truncated = np.trunc(np.where(finite, v, 0)).astype(np.float64)
        if _unsigned64(to):
            big = truncated >= 2.0**63
            low = np.where(big, 0, np.clip(truncated, -(2.0**63), 2.0**63 - 1024)).astype(np.int64)
            high = (np.where(big, truncated - 2.0**63, 0)).astype(np.int64) + np.int64(-(1 << 63))
            return np.where(big, high, low)
        clipped = np.clip(truncated, -(2.0**63), 2.0**63 - 1024)
        return wrap_array(to, clipped.astype(np.int64))
    return wrap_array(to, v)


class Evaluator:
    """Evaluates nodes on a batch, given arrays for the inputs (or any other nodes)."""

    def __init__(self, roots: Iterable[Node], leaves: Iterable[Node] = ()) -> None:
        leaf_ids = {node.id for node in leaves}
        self.order = ssa.topological(roots, leaf_ids)
        self.positions = {node.id: index for index, node in enumerate(self.order)}
        self.last_use = [0] * len(self.order)
        for index, node in enumerate(self.order):
            if node.id in leaf_ids:
                continue
            for child in node.children():
                position = self.positions[child.id]
                self.last_use[position] = max(self.last_use[position], index)
        self.leaf_ids = leaf_ids

    def evaluate(
        self, env: dict[int, np.ndarray], size: int, keep: Iterable[Node] = ()
    ) -> dict[int, np.ndarray]:
        """Values of every node in order; returns those of `keep`. Arrays are freed after last use."""
        keep_ids = {node.id for node in keep}
        values: dict[int, np.ndarray] = dict(env)
        positions, last_use, leaf_ids = self.positions, self.last_use, self.leaf_ids
        with np.errstate(all="ignore"):
            for index, node in enumerate(self.order):
                if node.id not in values:
                    values[node.id] = self.node_value(node, values, size)
                if node.id in leaf_ids:
                    continue
                for child in node.children():
                    if last_use[positions[child.id]] == index and child.id not in keep_ids:
                        values.pop(child.id, None)
        return {key: value for key, value in values.items() if key in keep_ids}

    @staticmethod
    def node_value(node: Node, values: dict[int, np.ndarray], size: int) -> np.ndarray:
        if isinstance(node, Const):
            return constant_array(node, size)
        if isinstance(node, Input):
            raise InternalError(f"evaluator: no value given for input {node.index}")
        if isinstance(node, Binary):
            a, b = values[node.a.id], values[node.b.id]
            if node.op == "land":
                return a & b
            if node.op == "lor":
                return a | b
            if node.ty.is_float:
                return _float_binary(node.op, a, b)
            return _int_binary(node.op, node.ty, a, b, node.b.ty)
        if isinstance(node, Compare):
            return _compare(node.op, values[node.a.id], values[node.b.id], node.a.ty)
        if isinstance(node, Ite):
            return np.where(values[node.c.id], values[node.a.id], values[node.b.id])
        if isinstance(node, Cast):
            return _cast(node.ty, node.a.ty, values[node.a.id])
        if isinstance(node, Unary):
            a = values[node.a.id]
            if node.op == "lnot":
                return ~a
            if node.op == "neg":
                return -a if node.ty.is_float else wrap_array(node.ty, -a)
            if node.op == "bnot":
                return wrap_array(node.ty, ~a)
            raise InternalError(f"evaluator: unary {node.op}")
        if isinstance(node, Read):
            table = _table_array(node.table)
            index = np.clip(values[node.index.id], 0, len(table) - 1)
            return table[index]
        if isinstance(node, Step):
            starts = np.asarray(node.starts, dtype=np.int64)
            position = np.maximum(np.searchsorted(starts, values[node.a.id], side="right") - 1, 0)
            return np.asarray(node.values, dtype=np.int64)[position]
        raise InternalError(f"evaluator: unknown node kind {type(node).__name__}")


_TABLE_CACHE: dict[int, tuple[ssa.Table, np.ndarray]] = {}


def _table_array(table: ssa.Table) -> np.ndarray:
    cached = _TABLE_CACHE.get(id(table))
    if cached is not None and cached[0] is table:
        return cached[1]
    if table.ty.is_int and not table.ty.signed and table.ty.bits == 64:
        array = np.array([v - (1 << 64) if v >= 1 << 63 else v for v in table.values], dtype=np.int64)
    else:
        array = np.array(table.values, dtype=_dtype(table.ty))
    _TABLE_CACHE[id(table)] = (table, array)
    return array


def input_env(inputs: Sequence[Input], x: np.ndarray) -> dict[int, np.ndarray]:
    """Arrays for the inputs from the columns of x (rows = input vectors), cast to each input's type."""
    x = np.atleast_2d(x)
    if x.shape[1] != len(inputs):
        raise InternalError(f"evaluator: {x.shape[1]} input columns for {len(inputs)} inputs")
    env = {}
    for node in inputs:
        column = x[:, node.index]
        if node.ty.is_float:
            env[node.id] = column.astype(np.float64).astype(_dtype(node.ty))
        elif node.ty.is_bool:
            env[node.id] = column != 0
        else:
            env[node.id] = wrap_array(node.ty, np.asarray(column).astype(np.int64))
    return env


@dataclass(frozen=True, slots=True)
class Outcome:
    """Per row: HOLDS / ASSUME_FAILED / VIOLATED and the index (into program.asserts) that failed."""

    status: np.ndarray
    violated: np.ndarray

    @property
    def violating_rows(self) -> np.ndarray:
        return np.flatnonzero(self.status == VIOLATED)


class ProgramRunner:
    """`run(x)`: the replay's outcome for each row of x; reusable across batches."""

    def __init__(self, program: ssa.Program) -> None:
        self.program = program
        self.evaluator = Evaluator(program.roots())
        self.conds = [step.cond for step in program.steps]

    def run(self, x: np.ndarray, chunk: int = DEFAULT_CHUNK) -> Outcome:
        x = np.atleast_2d(x)
        statuses, violated = [], []
        for start in range(0, max(len(x), 1), chunk):
            part = x[start : start + chunk]
            if len(part) == 0:
                break
            status, index = self._run_chunk(part)
            statuses.append(status)
            violated.append(index)
        if not statuses:
            return Outcome(np.zeros(0, dtype=np.int8), np.zeros(0, dtype=np.int64))
        return Outcome(np.concatenate(statuses), np.concatenate(violated))

    def _run_chunk(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        size = len(x)
        values = self.evaluator.evaluate(input_env(self.program.inputs, x), size, keep=self.conds)
        status = np.full(size, HOLDS, dtype=np.int8)
        violated = np.full(size, -1, dtype=np.int64)
        running = np.ones(size, dtype=bool)
        assert_index = 0
        for step in self.program.steps:
            holds = values[step.cond.id]
            failing = running & ~holds
            if isinstance(step, ssa.Assume):
                status[failing] = ASSUME_FAILED
            else:
                status[failing] = VIOLATED
                violated[failing] = assert_index
                assert_index += 1
            running &= holds
        return status, violated


def run(program: ssa.Program, x: np.ndarray) -> Outcome:
    """The outcome of every row of x (one input vector per row, in nondet call order)."""
    return ProgramRunner(program).run(x)


def evaluate_nodes(
    nodes: Sequence[Node], env: dict[int, np.ndarray], size: int, leaves: Iterable[Node] = ()
) -> list[np.ndarray]:
    """Values of `nodes` given arrays for `leaves` (inputs or any other nodes) in `env`."""
    evaluator = Evaluator(nodes, leaves)
    values = evaluator.evaluate(env, size, keep=nodes)
    return [values[node.id] for node in nodes]


class RealRunner:
    """`run(x)` like ProgramRunner, but float operations in exact real arithmetic (Fractions):
    the program of --semantics real. Scalar and slow; used to confirm candidates only."""

    def __init__(self, program: ssa.Program) -> None:
        self.program = program
        self.order = ssa.topological(program.roots())

    def run(self, x: np.ndarray, chunk: int = 0) -> Outcome:
        x = np.atleast_2d(x)
        status = np.full(len(x), HOLDS, dtype=np.int8)
        violated = np.full(len(x), -1, dtype=np.int64)
        for row_index, row in enumerate(x):
            status[row_index], violated[row_index] = self._run_row(row)
        return Outcome(status, violated)

    def _run_row(self, row: np.ndarray) -> tuple[int, int]:
        from fractions import Fraction

        values: dict[int, object] = {}
        for node in self.order:
            values[node.id] = _real_value(node, values, row, Fraction, semantics)
        assert_index = 0
        for step in self.program.steps:
            holds = bool(values[step.cond.id])
            if isinstance(step, ssa.Assume):
                if not holds:
                    return ASSUME_FAILED, -1
            else:
                if not holds:
                    return VIOLATED, assert_index
                assert_index += 1
        return HOLDS, -1


def _real_value(node: Node, values: dict, row: np.ndarray, Fraction, sem):
    ty = node.ty
    if isinstance(node, Const):
        return Fraction(node.value) if ty.is_float else int(node.value)
    if isinstance(node, Input):
        value = row[node.index]
        return Fraction(float(value)) if ty.is_float else sem.wrap(ty, int(value))
    if isinstance(node, Compare):
        return sem.compare(node.op, values[node.a.id], values[node.b.id])
    if isinstance(node, Ite):
        return values[node.a.id] if values[node.c.id] else values[node.b.id]
    if isinstance(node, Unary):
        a = values[node.a.id]
        if node.op == "lnot":
            return not a
        if ty.is_float:
            return -a
        return sem.unary(node.op, ty, a)
    if isinstance(node, Binary):
        a, b = values[node.a.id], values[node.b.id]
        if node.op == "land":
            return bool(a) and bool(b)
        if node.op == "lor":
            return bool(a) or bool(b)
        if ty.is_float:
            if node.op == "add":
                return a + b
            if node.op == "sub":
                return a - b
            if node.op == "mul":
                return a * b
            if node.op == "div":
                return a / b if b != 0 else Fraction(0)
            if node.op == "max":
                return max(a, b)
            if node.op == "min":
                return min(a, b)
        return sem.binary(node.op, ty, int(a), int(b), node.b.ty)
    if isinstance(node, Cast):
        a = values[node.a.id]
        if ty.is_bool:
            return a != 0
        if ty.is_float:
            return Fraction(a) if not isinstance(a, bool) else Fraction(int(a))
        if node.a.ty.is_float:
            return sem.wrap(ty, int(a))  # int(Fraction) truncates toward zero
        return sem.wrap(ty, int(a))
    if isinstance(node, Read):
        index = min(max(int(values[node.index.id]), 0), len(node.table.values) - 1)
        value = node.table.values[index]
        return Fraction(value) if ty.is_float else value
    if isinstance(node, Step):
        return sem.step_value(int(values[node.a.id]), node.starts, node.values)
    raise InternalError(f"real evaluator: unknown node kind {type(node).__name__}")
