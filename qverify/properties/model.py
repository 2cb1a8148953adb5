"""Safety properties: `x in H  =>  f(x) not in U`, with exact rational constants.

- The input region H is a union of boxes (VNN-LIB's prop_6 has two); bounds are `Fraction`s.
- The output condition is the *unsafe* set U, as VNN-LIB states it: a disjunction of clauses, each a
  conjunction of linear atoms `sum_i a_i * Y_i + c  (>=|>|<=|<)  0`. The property holds iff no input
  of H gives outputs in U.
- A VNN-LIB file in the *case form* (each disjunct an input box with its own output condition) is a
  `PropertyCases`: several such properties over one network, which holds iff every case holds.
- Units: `normalised` (what the network core and the generated C compute on; VNN-LIB's X/Y) or
  `raw` (the NNet's physical units); `to_normalised` converts exactly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from qverify.errors import InputError
from qverify.vocabulary import Units


class Relation(enum.Enum):
    GE = ">="
    GT = ">"
    LE = "<="
    LT = "<"

    def holds(self, value: Fraction | float) -> bool | np.ndarray:
        """Does `value (relation) 0` hold?"""
        if self is Relation.GE:
            return value >= 0
        if self is Relation.GT:
            return value > 0
        if self is Relation.LE:
            return value <= 0
        return value < 0


@dataclass(frozen=True, slots=True)
class Box:
    """An axis-aligned box: lo[i] <= x_i <= hi[i] (inclusive), exact rationals."""

    lo: tuple[Fraction, ...]
    hi: tuple[Fraction, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "lo", tuple(Fraction(v) for v in self.lo))
        object.__setattr__(self, "hi", tuple(Fraction(v) for v in self.hi))
        if len(self.lo) != len(self.hi):
            raise InputError("box bounds have different lengths")
        for index, (low, high) in enumerate(zip(self.lo, self.hi)):
            if low > high:
                raise InputError(
                    f"empty input box: X_{index} has lower bound {float(low)} > upper bound {float(high)}"
                )

    @property
    def dimension(self) -> int:
        return len(self.lo)

    def lo_array(self) -> np.ndarray:
        return np.array([float(v) for v in self.lo])

    def hi_array(self) -> np.ndarray:
        return np.array([float(v) for v in self.hi])

    def contains(self, x: np.ndarray) -> np.ndarray:
        """Rows of x (float) inside the box (compared in float64, for sampling and tests)."""
        x = np.atleast_2d(x)
        return np.all((x >= self.lo_array()) & (x <= self.hi_array()), axis=1)


@dataclass(frozen=True, slots=True)
class Atom:
    """sum(coefficient * Y_index) + constant  (relation)  0."""

    terms: tuple[tuple[int, Fraction], ...]
    constant: Fraction
    relation: Relation
    text: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", tuple((int(i), Fraction(c)) for i, c in self.terms if c != 0))
        object.__setattr__(self, "constant", Fraction(self.constant))
        if not self.text:
            object.__setattr__(self, "text", self.describe())

    def describe(self) -> str:
        parts = []
        for index, coefficient in self.terms:
            if coefficient == 1:
                parts.append(f"Y_{index}")
            elif coefficient == -1:
                parts.append(f"-Y_{index}")
            else:
                parts.append(f"{float(coefficient):.17g}*Y_{index}")
        left = " + ".join(parts).replace("+ -", "- ") or "0"
        return f"{left} {self.relation.value} {float(-self.constant):.17g}"

    def value(self, outputs: np.ndarray) -> np.ndarray:
        """The left-hand side on real outputs (batch, n_out), in float64."""
        outputs = np.atleast_2d(np.asarray(outputs, dtype=np.float64))
        total = np.full(outputs.shape[0], float(self.constant))
        for index, coefficient in self.terms:
            total = total + float(coefficient) * outputs[:, index]
        return total

    def holds(self, outputs: np.ndarray) -> np.ndarray:
        return self.relation.holds(self.value(outputs))

    def holds_exact(self, outputs: list[Fraction]) -> bool:
        """Exact evaluation on rational outputs (e.g. fixed-point words / 2^l)."""
        total = self.constant + sum(coefficient * outputs[index] for index, coefficient in self.terms)
        return bool(self.relation.holds(total))


@dataclass(frozen=True, slots=True)
class Clause:
    """A conjunction of atoms: one way to be unsafe."""

    atoms: tuple[Atom, ...]

    def text(self) -> str:
        return " and ".join(f"({atom.text})" for atom in self.atoms) or "true"


@dataclass(frozen=True, slots=True)
class OutputCondition:
    """The unsafe set U: a disjunction of clauses (an empty disjunction is never unsafe)."""

    clauses: tuple[Clause, ...]

    def violated_clause(self, outputs: np.ndarray) -> np.ndarray:
        """Per row: the index of the first clause whose atoms all hold (-1 when safe), in float64."""
        outputs = np.atleast_2d(outputs)
        first = np.full(outputs.shape[0], -1)
        for index in reversed(range(len(self.clauses))):
            holds = np.ones(outputs.shape[0], dtype=bool)
            for atom in self.clauses[index].atoms:
                holds &= atom.holds(outputs)
            first = np.where(holds, index, first)
        return first

    def violated_clause_exact(self, outputs: list[Fraction]) -> int:
        for index, clause in enumerate(self.clauses):
            if all(atom.holds_exact(outputs) for atom in clause.atoms):
                return index
        return -1

    def max_output_index(self) -> int:
        return max((i for clause in self.clauses for atom in clause.atoms for i, _ in atom.terms), default=-1)


@dataclass(frozen=True, slots=True)
class RobustnessInfo:
    """Where a robustness property came from: its centre (normalised), label, target and radius."""

    center: tuple[float, ...]
    label: int
    target: int | None = None
    radius: str = ""


@dataclass(frozen=True, slots=True)
class Property:
    """x in (union of boxes)  =>  outputs not in `unsafe`."""

    name: str
    boxes: tuple[Box, ...]
    unsafe: OutputCondition
    units: Units = Units.NORMALISED
    robustness: RobustnessInfo | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    declared_outputs: int | None = field(default=None, compare=False)  # Y_j a VNN-LIB file declares

    def __post_init__(self) -> None:
        if not self.boxes:
            raise InputError(f"property {self.name}: no input box")
        dimensions = {box.dimension for box in self.boxes}
        if len(dimensions) != 1:
            raise InputError(f"property {self.name}: input boxes of different dimensions")

    @property
    def n_inputs(self) -> int:
        return self.boxes[0].dimension

    def check_against(self, n_inputs: int, n_outputs: int) -> None:
        """InputError unless the property talks about a network of this shape."""
        if self.n_inputs != n_inputs:
            raise InputError(f"property {self.name} has {self.n_inputs} inputs, the network {n_inputs}")
        if self.declared_outputs is not None and self.declared_outputs != n_outputs:
            raise InputError(
                f"property {self.name} declares {self.declared_outputs} outputs, the network has {n_outputs}"
            )
        if self.unsafe.max_output_index() >= n_outputs:
            raise InputError(
                f"property {self.name} refers to Y_{self.unsafe.max_output_index()}, "
                f"the network has {n_outputs} outputs"
            )

    def violated_by(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """Per row (float64 evaluation): is x in a box and are the outputs unsafe?"""
        inside = np.zeros(np.atleast_2d(x).shape[0], dtype=bool)
        for box in self.boxes:
            inside |= box.contains(x)
        return inside & (self.unsafe.violated_clause(outputs) >= 0)


@dataclass(frozen=True, slots=True)
class PropertyCases:
    """x in H_k  =>  f(x) not in U_k, for every case k: VNN-LIB's disjunction of input boxes, each
    with its own output condition (VNN-COMP's nn4sys). It holds iff every case holds, and is
    violated iff some case is; each case is an ordinary `Property` (named `<name>.case<k>`), so
    verifying a case is verifying a property. `labels[k]` says where case k comes from (its
    disjuncts' lines), for messages and counterexamples."""

    name: str
    cases: tuple[Property, ...]
    labels: tuple[str, ...]
    units: Units = Units.NORMALISED
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    declared_outputs: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if len(self.cases) < 2:
            raise InputError(f"property {self.name}: a property of cases needs two or more cases")
        if len(self.labels) != len(self.cases):
            raise InputError(f"property {self.name}: {len(self.labels)} labels for {len(self.cases)} cases")
        if len({case.n_inputs for case in self.cases}) != 1:
            raise InputError(f"property {self.name}: cases over different numbers of inputs")

    @property
    def n_inputs(self) -> int:
        return self.cases[0].n_inputs

    @property
    def boxes(self) -> tuple[Box, ...]:
        """Every case's input boxes: the whole input region the property talks about."""
        return tuple(box for case in self.cases for box in case.boxes)

    def check_against(self, n_inputs: int, n_outputs: int) -> None:
        """InputError unless every case talks about a network of this shape."""
        for case in self.cases:
            case.check_against(n_inputs, n_outputs)

    def violated_by(self, x: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """Per row (float64 evaluation): does some case's box hold x and its unsafe set the outputs?"""
        violated = np.zeros(np.atleast_2d(x).shape[0], dtype=bool)
        for case in self.cases:
            violated |= case.violated_by(x, outputs)
        return violated

    def describe(self, index: int) -> str:
        """`case 3 of 100 (lines 9-10)`: case `index` (from 0) as messages name it."""
        return f"case {index + 1} of {len(self.cases)} ({self.labels[index]})"


AnyProperty = Property | PropertyCases  # what a VNN-LIB file says: one property, or its cases
