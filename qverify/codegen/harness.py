"""Verification harnesses: nondet inputs, assumes for the input region, the network, asserts for
"not unsafe" -- the C program every back end checks and every counterexample is replayed on."""

from __future__ import annotations

from qverify.codegen.conditions import CAtom, CBox, fixed_atom, fixed_box, float_atom, float_box
from qverify.codegen.context import NeuronBounds, network_context
from qverify.codegen.literals import c_string
from qverify.codegen.render import CProgram, render_template
from qverify.errors import InputError
from qverify.properties import Property, Units
from qverify.quant import FixedFormat, QuantizedNetwork

VIOLATION_PREFIX = "unsafe clause"


def clause_message(index: int, text: str) -> str:
    """The assertion text of clause `index` (1-based): what ESBMC and the replay print."""
    return c_string(f"{VIOLATION_PREFIX} {index}: {text}")[:400]


def _boxes(qnet: QuantizedNetwork, prop: Property) -> list[CBox]:
    number = qnet.number
    if isinstance(number, FixedFormat):
        return [fixed_box(box, number) for box in prop.boxes]
    return [float_box(box, number) for box in prop.boxes]


def _atoms(qnet: QuantizedNetwork, clause) -> list[CAtom]:
    number = qnet.number
    if isinstance(number, FixedFormat):
        return [fixed_atom(atom, number) for atom in clause.atoms]
    return [float_atom(atom, number) for atom in clause.atoms]


def _hull(boxes: list[CBox], fixed: bool) -> tuple[list[str], list[str]]:
    """Per input, the loosest bounds over all boxes (the per-input assume before the disjunction)."""
    live = [box for box in boxes if not box.empty] or boxes
    if fixed:
        lo = [str(min(int(box.lo[i]) for box in live)) for i in range(len(live[0].lo))]
        hi = [str(max(int(box.hi[i]) for box in live)) for i in range(len(live[0].hi))]
        return lo, hi
    lo = [
        min((box.lo[i] for box in live), key=lambda t: float.fromhex(t.rstrip("f")))
        for i in range(len(live[0].lo))
    ]
    hi = [
        max((box.hi[i] for box in live), key=lambda t: float.fromhex(t.rstrip("f")))
        for i in range(len(live[0].hi))
    ]
    return lo, hi


def harness_context(qnet: QuantizedNetwork, prop: Property, bounds: NeuronBounds | None = None) -> dict:
    if prop.units is not Units.NORMALISED:
        raise InputError(f"property {prop.name} is in raw units: convert it with to_normalised first")
    prop.check_against(qnet.n_inputs, qnet.n_outputs)
    boxes = _boxes(qnet, prop)
    clauses = [
        {
            "text": clause.text(),
            "atoms": _atoms(qnet, clause),
            "message": clause_message(index, clause.text()),
        }
        for index, clause in enumerate(prop.unsafe.clauses, start=1)
    ]
    hull_lo, hull_hi = _hull(boxes, qnet.is_fixed)
    nondet = "int" if qnet.is_fixed else qnet.number.c_type  # type: ignore[union-attr]
    notes = (f"invariants: {bounds.origin}",) if bounds else ()
    context = network_context(qnet, bounds, notes)
    context.update(
        property_name=prop.name,
        property_source=prop.source,
        boxes=boxes,
        all_empty=all(box.empty for box in boxes),
        hull_lo=hull_lo,
        hull_hi=hull_hi,
        clauses=clauses,
        nondet=nondet,
        nondet_calls=f"nondet_{nondet}() for x[0..{qnet.n_inputs - 1}]",
    )
    return context


def render_harness(qnet: QuantizedNetwork, prop: Property, bounds: NeuronBounds | None = None) -> CProgram:
    """`harness.c` for a normalised property (see `qverify.properties.to_normalised`)."""
    return CProgram("harness.c", render_template("harness.c.j2", harness_context(qnet, prop, bounds)))
