"""Network level: one verification query at the level of layers: what the array-level front end produces and
the network-level strategy decides.

The scalar path (`cfront` -> `scalar.symex` -> `scalar.passes.simplify` -> `scalar.strategy`)
executes the C one operation at a time; at network scale that costs more than any decision. A
`NetworkQuery` says the same thing with one record per layer: the network *as implemented*
(`QuantizedNetwork`, whose exact semantics is `qverify.quant.simulate`, bit-exact with the generated
C by the codegen tests), the input region in the implementation's own domain (words, codes or float
values, as the harness's assumes bound the nondet inputs), the unsafe set over the exact output
values, and the invariants the harness assumes.

Two producers must agree: `qverify.engine.netlevel.lift` reads it back from a generated C harness (the C is
the contract), and `query_for` builds it from a network, a property and implementation options
(the same conversion the codegen applies). Tests compare the two.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.exact import real_outputs
from qverify.properties import OutputCondition, Property
from qverify.quant import LayerBounds, QuantizedNetwork, simulate

NO_VIOLATION = -1
OVERFLOW_ASSERTION = -2  # `--overflow detect`: the "fixed-point overflow" assertion of fxp.h fails
OVERFLOW_MESSAGE = "fixed-point overflow"


class Arithmetic(enum.Enum):
    """How the query's network computes: as the C does, or in exact real arithmetic."""

    IMPLEMENTATION = "implementation"  # the C's words/codes/floats, operation by operation
    REAL = "real"  # `--semantics real`: the C's constants read as exact rationals, no rounding


@dataclass(frozen=True, slots=True, eq=False)
class InputRegion:
    """One box of implementation inputs, inclusive: int64 words or codes for integer formats (every
    integer in [lo, hi] is an input), the float values of the input type for IEEE formats (every
    value of that type in [lo, hi])."""

    lo: np.ndarray
    hi: np.ndarray

    @property
    def dimension(self) -> int:
        return int(self.lo.shape[0])


@dataclass(frozen=True, slots=True, eq=False)
class NetworkQuery:
    """Is there an input in some region whose outputs are unsafe?

    `unsafe` is read on exact normalised outputs: `qnet.output_reals(outputs)` for a concrete run
    (words * 2^-l, (code - zero) * scale, the float values), so a candidate is confirmed by
    `violation` with no tolerance. `invariants` are the harness's assumed bounds per layer (in the
    implementation's units, or None when the harness assumes none): executions outside them do
    not count, so they may be used as constraints.
    """

    qnet: QuantizedNetwork
    regions: tuple[InputRegion, ...]
    unsafe: OutputCondition
    arithmetic: Arithmetic = Arithmetic.IMPLEMENTATION
    invariants: tuple[LayerBounds, ...] | None = None
    messages: tuple[str, ...] = ()  # the C's assertion message per unsafe clause (what a replay prints)

    def violation_message(self, violated: int) -> str:
        """What the C's replay prints after VIOLATED for this violation (`violation`'s value)."""
        if violated == OVERFLOW_ASSERTION:
            return OVERFLOW_MESSAGE
        if 0 <= violated < len(self.messages):
            return self.messages[violated]
        return f"unsafe clause {violated + 1}"

    @property
    def n_inputs(self) -> int:
        return self.qnet.n_inputs

    def violation(self, x: np.ndarray) -> int:
        """What the input x violates, exactly, in the query's arithmetic: the index of the unsafe
        clause its outputs reach, `OVERFLOW_ASSERTION` when a fixed-point operation leaves the word
        range under `--overflow detect` (the C asserts that before any output exists), or
        `NO_VIOLATION` (also for an x outside every region)."""
        x = np.asarray(x)
        if not any(np.all((x >= region.lo) & (x <= region.hi)) for region in self.regions):
            return NO_VIOLATION
        if self.arithmetic is Arithmetic.REAL:
            return self.unsafe.violated_clause_exact(real_outputs(self.qnet, x))
        run = simulate(self.qnet, x[None, :])
        if run.detect_mode and bool(run.detected[0]):
            return OVERFLOW_ASSERTION
        return self.unsafe.violated_clause_exact(self.qnet.output_reals(run.outputs[0]))


def _literal_value(text: str, integer: bool) -> int | float:
    """A bound written by `qverify.codegen.conditions` (an integer, or a C99 hex float literal)."""
    if integer:
        return int(text)
    return float.fromhex(text.removesuffix("f"))


def query_for(
    qnet: QuantizedNetwork,
    prop: Property,
    arithmetic: Arithmetic = Arithmetic.IMPLEMENTATION,
    invariants: tuple[LayerBounds, ...] | None = None,
) -> NetworkQuery:
    """The query the generated harness of (qnet, prop) states, built without any C: the boxes go
    through the codegen's own conversion to the implementation's domain, the unsafe set is the
    property's."""
    from qverify.codegen.conditions import implementation_box

    integer = qnet.is_integer
    dtype = np.int64 if integer else np.float64
    regions = []
    for box in prop.boxes:
        converted = implementation_box(qnet, box)
        lo = np.array([_literal_value(t, integer) for t in converted.lo], dtype=dtype)
        hi = np.array([_literal_value(t, integer) for t in converted.hi], dtype=dtype)
        regions.append(InputRegion(lo, hi))
    return NetworkQuery(qnet, tuple(regions), prop.unsafe, arithmetic, invariants)
