"""Scalar path: bitwuzla as the exact SMT procedure (bit-vectors, floating point); the only bitwuzla
importer."""

from __future__ import annotations

import time

from qverify.engine.scalar.smt.bitvec import (
    FP_FORMATS,
    SmtEncoder,
    float_bits,
    float_from_bits,
    query_conditions,
    signed_value,
)
from qverify.engine.solvers.base import CheckResult, CheckStatus, SmtProcedure
from qverify.errors import ToolMissingError

try:
    import bitwuzla as bw
except ImportError as error:  # pragma: no cover - bitwuzla is a dependency
    bw = None
    _IMPORT_ERROR = error
else:
    _IMPORT_ERROR = None


class _Builder:
    """The `TermBuilder` of qverify.engine.scalar.smt.bitvec over a bitwuzla TermManager."""

    def __init__(self, tm) -> None:
        self.tm = tm
        self.rne = tm.mk_rm_value(bw.RoundingMode.RNE)
        self.rtz = tm.mk_rm_value(bw.RoundingMode.RTZ)
        self._sorts: dict = {}
        K = bw.Kind
        self.kinds = {
            "add": K.BV_ADD,
            "sub": K.BV_SUB,
            "mul": K.BV_MUL,
            "neg": K.BV_NEG,
            "shl": K.BV_SHL,
            "ashr": K.BV_ASHR,
            "sdiv": K.BV_SDIV,
            "srem": K.BV_SREM,
            "slt": K.BV_SLT,
            "sle": K.BV_SLE,
            "sgt": K.BV_SGT,
            "sge": K.BV_SGE,
            "eq": K.EQUAL,
            "iff": K.EQUAL,
            "ite": K.ITE,
            "fp_add": K.FP_ADD,
            "fp_sub": K.FP_SUB,
            "fp_mul": K.FP_MUL,
            "fp_div": K.FP_DIV,
            "fp_neg": K.FP_NEG,
            "fp_lt": K.FP_LT,
            "fp_le": K.FP_LEQ,
            "fp_gt": K.FP_GT,
            "fp_ge": K.FP_GEQ,
            "fp_eq": K.FP_EQUAL,
        }

    def bv_sort(self, width: int):
        sort = self._sorts.get(width)
        if sort is None:
            sort = self._sorts[width] = self.tm.mk_bv_sort(width)
        return sort

    def fp_sort(self, bits: int):
        key = ("fp", bits)
        sort = self._sorts.get(key)
        if sort is None:
            sort = self._sorts[key] = self.tm.mk_fp_sort(*FP_FORMATS[bits])
        return sort

    def bv_const(self, value: int, width: int):
        return self.tm.mk_bv_value(self.bv_sort(width), str(value % (1 << width)), 10)

    def bv_var(self, name: str, width: int):
        return self.tm.mk_const(self.bv_sort(width), name)

    def fp_var(self, name: str, bits: int):
        return self.tm.mk_const(self.fp_sort(bits), name)

    def fp_const(self, value: float, bits: int):
        sign, exponent, significand = float_bits(value, bits)
        e, s = FP_FORMATS[bits]
        return self.tm.mk_fp_value(
            self.bv_const(sign, 1), self.bv_const(exponent, e), self.bv_const(significand, s - 1)
        )

    def true(self):
        return self.tm.mk_true()

    def false(self):
        return self.tm.mk_false()

    def op(self, name: str, *args):
        K = bw.Kind
        if name in ("and", "or", "xor", "not"):
            bv = args[0].sort().is_bv()
            kind = {
                ("and", True): K.BV_AND,
                ("or", True): K.BV_OR,
                ("xor", True): K.BV_XOR,
                ("not", True): K.BV_NOT,
                ("and", False): K.AND,
                ("or", False): K.OR,
                ("xor", False): K.XOR,
                ("not", False): K.NOT,
            }[(name, bv)]
            return self.tm.mk_term(kind, list(args))
        if name in ("fp_add", "fp_sub", "fp_mul", "fp_div"):
            return self.tm.mk_term(self.kinds[name], [self.rne, *args])
        return self.tm.mk_term(self.kinds[name], list(args))

    def extract(self, term, high: int, low: int):
        return self.tm.mk_term(bw.Kind.BV_EXTRACT, [term], [high, low])

    def sext(self, term, extra: int):
        return self.tm.mk_term(bw.Kind.BV_SIGN_EXTEND, [term], [extra])

    def zext(self, term, extra: int):
        return self.tm.mk_term(bw.Kind.BV_ZERO_EXTEND, [term], [extra])

    def fp_from_sbv(self, term, bits: int):
        return self.tm.mk_term(bw.Kind.FP_TO_FP_FROM_SBV, [self.rne, term], list(FP_FORMATS[bits]))

    def fp_to_sbv(self, term, width: int):
        return self.tm.mk_term(bw.Kind.FP_TO_SBV, [self.rtz, term], [width])

    def fp_convert(self, term, bits: int):
        return self.tm.mk_term(bw.Kind.FP_TO_FP_FROM_FP, [self.rne, term], list(FP_FORMATS[bits]))


class BitwuzlaSolver(SmtProcedure):
    name = "bitwuzla"

    def __init__(self, narrow: bool = True) -> None:
        if bw is None:
            raise ToolMissingError(f"bitwuzla is not installed ({_IMPORT_ERROR})")
        super().__init__(narrow)

    def _check(self, simplified, p: int, deadline: float) -> CheckResult:
        start = time.monotonic()
        if deadline - start <= 0.05:
            return CheckResult(CheckStatus.UNKNOWN, "timeout before the SMT query")
        tm = bw.TermManager()
        options = bw.Options()
        options.set(bw.Option.PRODUCE_MODELS, True)
        solver = bw.Bitwuzla(tm, options)
        solver.configure_terminator(lambda: time.monotonic() > deadline)
        builder = _Builder(tm)
        encoder = SmtEncoder(builder, simplified.getter(p), self.narrow)
        for cond, positive in query_conditions(simplified, p):
            term = encoder.term(cond)
            solver.assert_formula(term if positive else tm.mk_term(bw.Kind.NOT, [term]))
        answer = solver.check_sat()
        elapsed = time.monotonic() - start
        stats = {"smt_input_bits": encoder.bits_total}
        if answer == bw.Result.UNSAT:
            return CheckResult(CheckStatus.UNSAT, "unsat", time_s=elapsed, stats=stats)
        if answer == bw.Result.SAT:
            inputs = {}
            for index, (node, term) in encoder.inputs.items():
                value = solver.get_value(term)
                if node.ty.is_float:
                    sign, exponent, significand = value.value()
                    inputs[index] = float_from_bits(
                        int(sign, 2), int(exponent, 2), int(significand, 2), node.ty.bits
                    )
                else:
                    raw = value.value()
                    inputs[index] = signed_value(int(raw, 2), len(raw))
            return CheckResult(CheckStatus.SAT, "", inputs, elapsed, stats)
        reason = "timeout" if time.monotonic() > deadline else "bitwuzla gave up"
        return CheckResult(CheckStatus.UNKNOWN, reason, time_s=elapsed, stats=stats)
