"""Verification harnesses: nondet inputs, assumes for the input region, the network, asserts for
"not unsafe" -- the C program every back end checks and every counterexample is replayed on."""

from __future__ import annotations

from qverify.codegen.conditions import CAtom, CBox, implementation_atom, implementation_box
from qverify.codegen.context import NeuronBounds, network_context
from qverify.codegen.literals import c_string
from qverify.codegen.render import CProgram, render_template
from qverify.errors import InputError
from qverify.network import CodeType
from qverify.properties import Property, Units
from qverify.quant import QuantizedNetwork

VIOLATION_PREFIX = "unsafe clause"


def clause_message(index: int, text: str) -> str:
    """The assertion text of clause `index` (1-based): what ESBMC and the replay print."""
    return c_string(f"{VIOLATION_PREFIX} {index}: {text}")[:400]


def _boxes(qnet: QuantizedNetwork, prop: Property) -> list[CBox]:
    return [implementation_box(qnet, box) for box in prop.boxes]


def _atoms(qnet: QuantizedNetwork, clause) -> list[CAtom]:
    return [implementation_atom(qnet, atom) for atom in clause.atoms]


def nondet_kind(qnet: QuantizedNetwork) -> str:
    """The suffix of the nondet_* function that supplies one input (int, schar, uchar, float, ...)."""
    if qnet.is_fixed:
        return "int"
    if qnet.is_int8:
        return "char" if qnet.input_quant.code is CodeType.INT8 else "uchar"
    return "half" if qnet.number.is_half else qnet.number.c_type  # type: ignore[union-attr]


def _hull(boxes: list[CBox], fixed: bool) -> tuple[list[str], list[str]]:
    """Per input, the loosest bounds over all boxes (the per-input assume before the disjunction)."""
    if fixed:
        lo = [str(min(int(box.lo[i]) for box in boxes)) for i in range(len(boxes[0].lo))]
        hi = [str(max(int(box.hi[i]) for box in boxes)) for i in range(len(boxes[0].hi))]
        return lo, hi
    lo = [
        min((box.lo[i] for box in boxes), key=lambda t: float.fromhex(t.rstrip("f")))
        for i in range(len(boxes[0].lo))
    ]
    hi = [
        max((box.hi[i] for box in boxes), key=lambda t: float.fromhex(t.rstrip("f")))
        for i in range(len(boxes[0].hi))
    ]
    return lo, hi


def _input_type_range(qnet: QuantizedNetwork) -> tuple[int, int] | None:
    """The range of the C type holding one input (integer formats), to leave out comparisons that
    always hold (gcc -Wtype-limits rejects them, and they say nothing)."""
    if qnet.is_int8:
        code = qnet.input_quant.code
        return code.qmin, code.qmax
    if qnet.is_fixed:
        return -(1 << 31), (1 << 31) - 1
    return None


def range_condition(variable: str, lo: str, hi: str, type_range: tuple[int, int] | None) -> str:
    """`lo <= v && v <= hi`, without the sides that the variable's type already guarantees."""
    parts = []
    if type_range is None or int(lo) > type_range[0]:
        parts.append(f"{lo} <= {variable}")
    if type_range is None or int(hi) < type_range[1]:
        parts.append(f"{variable} <= {hi}")
    return " && ".join(parts) or "1"


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
    hull_lo, hull_hi = _hull(boxes, qnet.is_integer)
    type_range = _input_type_range(qnet)
    single = boxes[0] if len(boxes) == 1 else None
    input_conditions = [
        range_condition(
            f"x[{i}]",
            single.lo[i] if single else hull_lo[i],
            single.hi[i] if single else hull_hi[i],
            type_range,
        )
        for i in range(qnet.n_inputs)
    ]
    box_conditions = [
        " && ".join(
            range_condition(f"x[{i}]", box.lo[i], box.hi[i], type_range) for i in range(qnet.n_inputs)
        )
        for box in boxes
    ]
    nondet = nondet_kind(qnet)
    notes = (f"invariants: {bounds.origin}",) if bounds else ()
    context = network_context(qnet, bounds, notes)
    context.update(
        property_name=prop.name,
        property_source=prop.source,
        boxes=boxes,
        input_conditions=input_conditions,
        box_conditions=box_conditions,
        clauses=clauses,
        nondet=nondet,
        nondet_calls=f"nondet_{nondet}() for x[0..{qnet.n_inputs - 1}]",
    )
    return context


def render_harness(qnet: QuantizedNetwork, prop: Property, bounds: NeuronBounds | None = None) -> CProgram:
    """`harness.c` for a normalised property (see `qverify.properties.to_normalised`)."""
    return CProgram("harness.c", render_template("harness.c.j2", harness_context(qnet, prop, bounds)))
