"""Proof by stability: two single-network proofs that together rule out every disagreement of a region.

Top-1: if the reference predicts class c at every input of the region and so does the candidate, no
input makes them disagree. Targeted (class T): if the candidate predicts T nowhere in the region, no
input makes it predict T while the reference does not. Each of these is one ordinary property of one
network -- an input box and an unsafe output condition -- so it goes through `verify_property` like any
`qverify verify` task: its own harness, the array-level front end and the network-level bounds and
branch and bound of the internal engine (issue 16) where the network allows, the scalar path otherwise,
ESBMC when asked. The two-network harness executes both networks one scalar at a time; a
stability proof reasons about one network at a time on whole layers, which is why it decides regions
the pair harness cannot (ACAS Xu: the pair's front end alone took 23 s).

The box of each side is the set of inputs *that side* receives from the region, in its own domain,
so that SAFE covers exactly what the two-network harness would: the fixed-point words
[round(lo), round(hi)] (rounding is monotone, every word between is reached), the floats/halves
[fl(lo), fl(hi)], the int8 codes [Q(lo), Q(hi)]. Each is stated as a box of normalised reals whose
conversion by the harness generator (`codegen.conditions.implementation_box`) is checked to give
exactly that set; a side where it does not is not attempted. For brightness/contrast regions the box
is the hull of every input the distortions reach, widened by one word, code or value each side (x is
computed in C there; a last-bit difference from numpy's hull must not exclude an input).

The class c is the reference's at the seed. "Not c" is the exact negation of the C's argmax scan
(first maximum wins): Y_j >= Y_c for some j < c, or Y_j > Y_c for some j > c.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from qverify.assurance.implementations import Implementation
from qverify.backends import Limits
from qverify.codegen.conditions import implementation_box
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation, Units


@dataclass(frozen=True, slots=True)
class SideProof:
    """One side's single-network proof: its status, time, what decided it, and -- when UNSAFE -- the
    replayed input (normalised, inside the region) where the side does what the proof excluded."""

    role: str
    status: str  # SAFE / UNSAFE / UNKNOWN / ERROR, as the verification record says
    seconds: float
    decided_by: str
    reason: str
    example: np.ndarray | None = None

    def describe(self) -> str:
        how = f" by {self.decided_by}" if self.decided_by else ""
        why = f" ({self.reason[:200]})" if self.reason and self.status in ("UNKNOWN", "ERROR") else ""
        return f"{self.role} {self.status}{how} in {self.seconds:.1f} s{why}"


def leaves_class(label: int, n_outputs: int) -> OutputCondition:
    """Unsafe: the argmax scan (first maximum wins) returns another class than `label`."""
    clauses = []
    for j in range(n_outputs):
        if j != label:
            relation = Relation.GE if j < label else Relation.GT
            clauses.append(Clause((Atom(((j, Fraction(1)), (label, Fraction(-1))), Fraction(0), relation),)))
    return OutputCondition(tuple(clauses))


def predicts_class(label: int, n_outputs: int) -> OutputCondition:
    """Unsafe: the argmax scan returns `label` (one clause: Y_label beats every other output, strictly
    those before it)."""
    atoms = tuple(
        Atom(
            ((label, Fraction(1)), (j, Fraction(-1))), Fraction(0), Relation.GT if j < label else Relation.GE
        )
        for j in range(n_outputs)
        if j != label
    )
    return OutputCondition((Clause(atoms),))


def side_box(side: Implementation, lo: np.ndarray, hi: np.ndarray, widen: bool) -> Box | None:
    """The box of normalised reals whose implementation-domain conversion is exactly the set of inputs
    the side receives from [lo, hi] (module docstring); None when the conversion does not give it."""
    qnet = side.qnet
    assert qnet is not None, "proof mode checks both sides have C (check_provable)"
    low, high = side.inputs(np.stack([lo, hi]))
    if qnet.is_fixed:
        number = qnet.number
        if widen:
            low, high = np.maximum(low - 1, number.min_q), np.minimum(high + 1, number.max_q)  # type: ignore[union-attr]
        box = Box(tuple(Fraction(int(w), number.scale) for w in low), tuple(Fraction(int(w), number.scale) for w in high))  # type: ignore[union-attr]  # fmt: skip
    elif qnet.is_int8:
        quant = qnet.input_quant
        if widen:
            low, high = np.maximum(low - 1, quant.code.qmin), np.minimum(high + 1, quant.code.qmax)
        # each code's centre: QuantizeLinear gives it back (the code's edges are half a scale away)
        low_reals = (np.asarray(low, dtype=np.float64) - quant.zero_point) * float(quant.scale)
        high_reals = (np.asarray(high, dtype=np.float64) - quant.zero_point) * float(quant.scale)
        box = Box(tuple(map(Fraction, low_reals)), tuple(map(Fraction, high_reals)))
    else:
        dtype = qnet.number.dtype  # type: ignore[union-attr]
        low, high = low.astype(dtype), high.astype(dtype)
        if widen:
            low, high = np.nextafter(low, dtype(-np.inf)), np.nextafter(high, dtype(np.inf))
        box = Box(tuple(Fraction(float(v)) for v in low), tuple(Fraction(float(v)) for v in high))
    # the harness generator's own conversion must give back exactly [low, high] (words, codes, values)
    converted = implementation_box(qnet, box)
    read = int if qnet.is_integer else (lambda text: float.fromhex(text.rstrip("f")))
    same = all(
        read(text) == float(value)
        for texts, values in ((converted.lo, low), (converted.hi, high))
        for text, value in zip(texts, values)
    )
    return box if same else None


def prove_side(
    side: Implementation,
    role: str,
    box: Box,
    unsafe: OutputCondition,
    what: str,
    backend: str,
    timeout_s: float,
    region_lo: np.ndarray,
    region_hi: np.ndarray,
    workdir: Path,
) -> SideProof:
    """Check one side's property with the verification pipeline (its own harness and replay); an UNSAFE
    example comes back as a normalised input clipped into the region (the side receives the same
    words/codes/values there: rounding is monotone and the example lies in [round(lo), round(hi)])."""
    from qverify.verification import VerifyOptions, verify_property

    started = time.perf_counter()
    prop = Property(name=f"{role}-{what}", boxes=(box,), unsafe=unsafe, units=Units.NORMALISED, source="diff stability")  # fmt: skip
    esbmc = None
    if backend == "esbmc":
        from qverify.backends.esbmc import EsbmcOptions

        esbmc = EsbmcOptions()
    options = VerifyOptions(backend=backend, limits=Limits(timeout_s=timeout_s), esbmc=esbmc, workdir=workdir)
    record = verify_property(side.qnet.source, prop, side.qnet.options, options, name=prop.name)  # type: ignore[union-attr]
    example = None
    if record.counterexample is not None:
        example = np.clip(np.array(record.counterexample.inputs_real, dtype=np.float64), region_lo, region_hi)
    decided_by = record.verdict.decided_by if record.verdict is not None else ""
    return SideProof(role, record.status.value, round(time.perf_counter() - started, 3), decided_by, record.reason, example)  # fmt: skip
