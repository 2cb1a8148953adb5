"""Scalar path: Z3 as the exact SMT procedure (bit-vectors, floating point); the only z3 importer."""

from __future__ import annotations

import time

from qverify.engine.scalar.smt.bitvec import (
    FP_FORMATS,
    SmtEncoder,
    float_from_bits,
    query_conditions,
    signed_value,
)
from qverify.engine.solvers.base import CheckResult, CheckStatus, SmtProcedure
from qverify.errors import ToolMissingError

try:
    import z3
except ImportError as error:  # pragma: no cover - z3-solver is a dependency
    z3 = None
    _IMPORT_ERROR = error
else:
    _IMPORT_ERROR = None


class _Builder:
    """The `TermBuilder` of qverify.engine.scalar.smt.bitvec over a z3 Context."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.rne = z3.RNE(ctx)
        self.rtz = z3.RTZ(ctx)

    def fp_sort(self, bits: int):
        return z3.FPSort(*FP_FORMATS[bits], ctx=self.ctx)

    def bv_const(self, value: int, width: int):
        return z3.BitVecVal(value % (1 << width), width, ctx=self.ctx)

    def bv_var(self, name: str, width: int):
        return z3.BitVec(name, width, ctx=self.ctx)

    def fp_var(self, name: str, bits: int):
        return z3.FP(name, self.fp_sort(bits), ctx=self.ctx)

    def fp_const(self, value: float, bits: int):
        return z3.FPVal(value, None, self.fp_sort(bits), ctx=self.ctx)

    def true(self):
        return z3.BoolVal(True, ctx=self.ctx)

    def false(self):
        return z3.BoolVal(False, ctx=self.ctx)

    def op(self, name: str, *args):
        """`name` applied to terms; z3's fp* functions (and If) are given the context explicitly:
        without it they build their term in z3's main context (a crash or "Context mismatch")."""
        a, ctx = args, self.ctx
        if name in ("and", "or", "xor", "not"):
            if z3.is_bv(a[0]):
                return {
                    "and": lambda: a[0] & a[1],
                    "or": lambda: a[0] | a[1],
                    "xor": lambda: a[0] ^ a[1],
                    "not": lambda: ~a[0],
                }[name]()
            return {
                "and": lambda: z3.And(a[0], a[1]),
                "or": lambda: z3.Or(a[0], a[1]),
                "xor": lambda: z3.Xor(a[0], a[1]),
                "not": lambda: z3.Not(a[0]),
            }[name]()
        table = {
            "add": lambda: a[0] + a[1],
            "sub": lambda: a[0] - a[1],
            "mul": lambda: a[0] * a[1],
            "neg": lambda: -a[0],
            "shl": lambda: a[0] << a[1],
            "ashr": lambda: a[0] >> a[1],
            "sdiv": lambda: a[0] / a[1],
            "srem": lambda: z3.SRem(a[0], a[1]),
            "slt": lambda: a[0] < a[1],
            "sle": lambda: a[0] <= a[1],
            "sgt": lambda: a[0] > a[1],
            "sge": lambda: a[0] >= a[1],
            "eq": lambda: a[0] == a[1],
            "iff": lambda: a[0] == a[1],
            "ite": lambda: z3.If(a[0], a[1], a[2], ctx=ctx),
            "fp_add": lambda: z3.fpAdd(self.rne, a[0], a[1], ctx=ctx),
            "fp_sub": lambda: z3.fpSub(self.rne, a[0], a[1], ctx=ctx),
            "fp_mul": lambda: z3.fpMul(self.rne, a[0], a[1], ctx=ctx),
            "fp_div": lambda: z3.fpDiv(self.rne, a[0], a[1], ctx=ctx),
            "fp_neg": lambda: z3.fpNeg(a[0], ctx=ctx),
            "fp_lt": lambda: z3.fpLT(a[0], a[1], ctx=ctx),
            "fp_le": lambda: z3.fpLEQ(a[0], a[1], ctx=ctx),
            "fp_gt": lambda: z3.fpGT(a[0], a[1], ctx=ctx),
            "fp_ge": lambda: z3.fpGEQ(a[0], a[1], ctx=ctx),
            "fp_eq": lambda: z3.fpEQ(a[0], a[1], ctx=ctx),
        }
        return table[name]()

    def extract(self, term, high: int, low: int):
        return z3.Extract(high, low, term)

    def sext(self, term, extra: int):
        return z3.SignExt(extra, term)

    def zext(self, term, extra: int):
        return z3.ZeroExt(extra, term)

    def fp_from_sbv(self, term, bits: int):
        return z3.fpSignedToFP(self.rne, term, self.fp_sort(bits), ctx=self.ctx)

    def fp_to_sbv(self, term, width: int):
        return z3.fpToSBV(self.rtz, term, z3.BitVecSort(width, ctx=self.ctx), ctx=self.ctx)

    def fp_convert(self, term, bits: int):
        return z3.fpFPToFP(self.rne, term, self.fp_sort(bits), ctx=self.ctx)


class Z3Solver(SmtProcedure):
    name = "z3"

    def __init__(self, narrow: bool = True) -> None:
        if z3 is None:
            raise ToolMissingError(f"z3-solver is not installed ({_IMPORT_ERROR})")
        super().__init__(narrow)

    def _check(self, simplified, p: int, deadline: float) -> CheckResult:
        start = time.monotonic()
        remaining = deadline - start
        if remaining <= 0.05:
            return CheckResult(CheckStatus.UNKNOWN, "timeout before the SMT query")
        ctx = z3.Context()
        solver = z3.Solver(ctx=ctx)
        solver.set("timeout", max(int(remaining * 1000), 1))
        encoder = SmtEncoder(_Builder(ctx), simplified.getter(p), self.narrow)
        for cond, positive in query_conditions(simplified, p):
            term = encoder.term(cond)
            solver.add(term if positive else z3.Not(term))
        answer = solver.check()
        elapsed = time.monotonic() - start
        if answer == z3.unsat:
            return CheckResult(CheckStatus.UNSAT, "unsat", time_s=elapsed)
        if answer == z3.sat:
            model = solver.model()
            inputs = {}
            for index, (node, term) in encoder.inputs.items():
                value = model.eval(term, model_completion=True)
                if node.ty.is_float:
                    bits = node.ty.bits
                    raw = model.eval(z3.fpToIEEEBV(term), model_completion=True).as_long()
                    e, s = FP_FORMATS[bits]
                    inputs[index] = float_from_bits(
                        raw >> (bits - 1), (raw >> (s - 1)) & ((1 << e) - 1), raw & ((1 << (s - 1)) - 1), bits
                    )
                else:
                    width = term.size()
                    inputs[index] = signed_value(value.as_long(), width)
            return CheckResult(CheckStatus.SAT, "", inputs, elapsed)
        return CheckResult(CheckStatus.UNKNOWN, f"z3: {solver.reason_unknown()}", time_s=elapsed)
