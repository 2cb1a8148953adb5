"""VNN-LIB 1.0 (the VNN-COMP dialect) to `Property`, and back.

A VNN-LIB file declares the network's normalised inputs `X_i` and outputs `Y_j` and asserts
constraints whose conjunction is the *counterexample*: the property holds iff no input satisfies
them all. The PyPI `vnnlib` package only reads VNN-LIB 2.0, hence this small hand-written reader:

    text --_tokenize--> tokens --_top_level--> s-expressions --_Reader--> formulas --> Property (or PropertyCases)

Accepted (everything VNN-COMP's benchmarks use, and a little more):
- `(declare-const X_3 Real)`, `(declare-const Y_0 Real)`; comments from `;` to the end of a line.
- `(assert F)` where F is a comparison `(<= a b)`, `(>= a b)`, `(< a b)`, `(> a b)`, `(= a b)` (also
  chained, `(<= a b c)` = a <= b and b <= c), `(and F ...)`, `(or F ...)`.
- Terms a, b: declared variables, numbers (`0.6`, `-0.5`, `1e-3`, `3.`), `(- t)`, `(+ t ...)`,
  `(- t t ...)`, `(* number t)`, `(/ t number)` (so `(/ 1 3)` is the exact rational 1/3).
- Numbers become exact `Fraction`s of their decimal text, never floats.

Semantics (ARCHITECTURE.md: X/Y are the *normalised* inputs/outputs unless `units` says otherwise):
- All asserts are conjoined. A top-level conjunct that mentions only X variables belongs to the input
  region, one that mentions only Y variables to the unsafe set.
- A conjunct that mixes them is the *case form* VNN-COMP uses for properties over many input regions
  (nn4sys): `(assert (or (and (>= X_0 a) (<= X_0 b) (>= Y_0 c)) (and ...)))`, each disjunct an input
  box with its own output condition. Its DNF gives cases (box, unsafe clause); cases with the same
  box share it (their unsafe sets are united), then cases with the same unsafe set share it (their
  boxes are united). One case left is an ordinary `Property`; several are a `PropertyCases`, which
  holds iff every case holds (`parse_vnnlib_cases`; `parse_vnnlib` refuses it, naming the reader
  that takes it, so that no caller reads one case of it as the whole).
- The X part is turned into disjunctive normal form; each disjunct must be a conjunction of
  single-variable bounds (`(<= X_0 0.5)`, `(>= (* 2 X_1) -1)`) and becomes one `Box` (several bounds
  on one input intersect: the largest lower and smallest upper bound count). A strict input bound
  `<`/`>` is relaxed to its closure `<=`/`>=` (a box is closed) and a note says so; a disjunct whose
  box is empty is dropped with a note when others remain, and is an error when it is the only one.
- The Y part is turned into DNF as well: its clauses are `Property.unsafe`, atoms keep strict
  relations exactly. With no Y assertion at all every output is unsafe (one empty clause), as the
  VNN-LIB semantics says; `(or)` is false (nothing is unsafe) and `(and)` is true.
Errors are `InputError` (malformed text) or `UnsupportedError` (well-formed but outside this
fragment), always prefixed `path:line:`. A caller that knows the network passes its numbers of
inputs and outputs (`n_inputs`, `n_outputs`): a declaration beyond them is an error as soon as it is
read, before the rest of the file is parsed (a file declaring 10^6 inputs for a 16-input network
took 24 s and 800 MB to be refused after parsing).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import NoReturn

from qverify.errors import InputError, UnsupportedError
from qverify.input_limits import check_assert_count, check_file, check_literal, read_gzip
from qverify.properties.model import (
    Atom,
    Box,
    Clause,
    OutputCondition,
    Property,
    PropertyCases,
    Relation,
    Units,
)

__all__ = ["format_vnnlib", "parse_vnnlib", "parse_vnnlib_cases", "read_vnnlib", "read_vnnlib_cases"]

# example: "0.6", "-0.5", "1e-3", "3.", ".5", "+2", "1E+2" (not "0x1p3", "inf", "1/2")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE]([+-]?\d+))?$")
# example: "X_0", "Y_12"
_VARIABLE = re.compile(r"^([XY])_(\d+)$")
# example tokens: "(", ")", "declare-const", "X_0", "-0.5", "<="
_TOKEN = re.compile(r"\(|\)|[^\s()]+")

MAX_EXPONENT = 400  # |e| in "1e<e>": larger exponents are certainly typos, and 10^e gets slow
MAX_DEPTH = 64  # parenthesis nesting; keeps the recursive passes far from Python's recursion limit
# DNF size guard: (and (or a b) (or c d) ...) multiplies out; VNN-COMP 2022's nn4sys lindex_60000
# writes 120,000 disjuncts of the case form
MAX_CLAUSES = 500_000

_COMPARISONS = {"<=": Relation.LE, ">=": Relation.GE, "<": Relation.LT, ">": Relation.GT}
_CLOSURE = {Relation.LT: Relation.LE, Relation.GT: Relation.GE}
_FLIPPED = {
    Relation.LE: Relation.GE,
    Relation.GE: Relation.LE,
    Relation.LT: Relation.GT,
    Relation.GT: Relation.LT,
}
_IGNORED_COMMANDS = {"set-logic", "set-info", "set-option", "check-sat", "get-model", "exit"}
_UNSUPPORTED_OPERATORS = {"not", "=>", "xor", "ite", "distinct", "abs", "div", "mod", "to_real", "let"}

Variable = tuple[str, int]  # ("X", 3) for X_3


# ---------------------------------------------------------------- tokens and s-expressions


@dataclass(frozen=True, slots=True)
class _Symbol:
    """A token that is not a parenthesis: a name, an operator or a number."""

    text: str
    line: int


@dataclass(frozen=True, slots=True)
class _List:
    """A parenthesised list; `line` is where its '(' is."""

    items: tuple[_Symbol | _List, ...]
    line: int


SExpr = _Symbol | _List


def _error(source: str, line: int, message: str) -> InputError:
    return InputError(f"{source}:{line}: {message}")


def _unsupported(source: str, line: int, message: str) -> UnsupportedError:
    return UnsupportedError(f"{source}:{line}: {message}")


def _tokenize(text: str) -> Iterator[_Symbol]:
    """Tokens with their line numbers; `;` starts a comment (VNN-LIB has no string literals)."""
    for number, line in enumerate(text.splitlines(), start=1):
        for token in _TOKEN.findall(line.split(";", 1)[0]):
            yield _Symbol(token, number)


def _top_level(text: str, source: str) -> Iterator[SExpr]:
    """The top-level s-expressions of `text`, each as soon as it is closed (a caller can refuse a
    declaration before the rest is read); unbalanced parentheses are an InputError."""
    stack: list[tuple[int, list[SExpr]]] = []  # (line of the '(', items so far)
    for token in _tokenize(text):
        if token.text == "(":
            if len(stack) >= MAX_DEPTH:
                raise _error(source, token.line, f"parentheses nested deeper than {MAX_DEPTH} levels")
            stack.append((token.line, []))
        elif token.text == ")":
            if not stack:
                raise _error(source, token.line, "unbalanced parentheses: ')' without a matching '('")
            line, items = stack.pop()
            if stack:
                stack[-1][1].append(_List(tuple(items), line))
            else:
                yield _List(tuple(items), line)
        elif stack:
            stack[-1][1].append(token)
        else:
            yield token
    if stack:
        line = stack[0][0]
        raise _error(source, line, f"unbalanced parentheses: the '(' opened on line {line} is never closed")


@functools.lru_cache(maxsize=4096)
def _parse_number(text: str) -> Fraction | None:
    """The exact value of a decimal numeral ("1e-3" -> 1/1000), or None if `text` is not one
    (cached: VNN-COMP's box files repeat a few numerals, 0.0 and 1.0, hundreds of thousands of times)."""
    match = _NUMBER.match(text)
    if match is None:
        return None
    if match.group(3) is not None and abs(int(match.group(3))) > MAX_EXPONENT:
        return None
    return Fraction(text)


# ---------------------------------------------------------------- formulas


@dataclass(slots=True)
class _Linear:
    """sum(coefficient * variable) + constant, exact."""

    coefficients: dict[Variable, Fraction] = field(default_factory=dict)
    constant: Fraction = Fraction(0)

    def scaled(self, factor: Fraction) -> _Linear:
        return _Linear({v: c * factor for v, c in self.coefficients.items()}, self.constant * factor)

    def plus(self, other: _Linear) -> _Linear:
        total = dict(self.coefficients)
        for variable, coefficient in other.coefficients.items():
            total[variable] = total.get(variable, Fraction(0)) + coefficient
        return _Linear({v: c for v, c in total.items() if c != 0}, self.constant + other.constant)

    def kinds(self) -> set[str]:
        return {kind for kind, _ in self.coefficients}


@dataclass(frozen=True, slots=True)
class _Comparison:
    """`linear (relation) 0` over variables of one kind ("X" or "Y")."""

    linear: _Linear
    relation: Relation
    kind: str
    line: int


@dataclass(frozen=True, slots=True)
class _Junction:
    """(and ...) when `is_and`, else (or ...)."""

    is_and: bool
    children: tuple[_Formula, ...]
    line: int


_Formula = _Comparison | _Junction


def _kinds(formula: _Formula) -> set[str]:
    if isinstance(formula, _Comparison):
        return {formula.kind}
    return set().union(*(_kinds(child) for child in formula.children))


def _conjuncts(formula: _Formula) -> Iterator[_Formula]:
    """Top-level conjuncts: (and a (and b c)) gives a, b, c."""
    if isinstance(formula, _Junction) and formula.is_and:
        for child in formula.children:
            yield from _conjuncts(child)
    else:
        yield formula


def _dnf(formula: _Formula, source: str) -> list[tuple[_Comparison, ...]]:
    """Disjunctive normal form: a list of conjunctions (the empty list is false, [()] is true)."""
    if isinstance(formula, _Comparison):
        return [(formula,)]
    parts = [_dnf(child, source) for child in formula.children]
    size = math.prod(len(part) for part in parts) if formula.is_and else sum(len(part) for part in parts)
    if size > MAX_CLAUSES:
        raise _unsupported(
            source, formula.line, f"the disjunctive normal form has more than {MAX_CLAUSES} clauses"
        )
    if not formula.is_and:
        return [clause for part in parts for clause in part]
    return [tuple(c for clause in combo for c in clause) for combo in itertools.product(*parts)]


class _Reader:
    """Turns s-expressions into declarations and formulas, checking as it goes."""

    def __init__(self, source: str, n_inputs: int | None = None, n_outputs: int | None = None) -> None:
        self.source = source
        self.declared: dict[Variable, int] = {}  # variable -> line of its declare-const
        self.asserts: list[_Formula] = []
        self.expected = {"X": n_inputs, "Y": n_outputs}  # the network's, when the caller knows it

    # -- commands

    def command(self, node: SExpr) -> None:
        if not isinstance(node, _List) or not node.items or not isinstance(node.items[0], _Symbol):
            shown = node.text if isinstance(node, _Symbol) else "(...)"
            raise _error(self.source, node.line, f"expected a command like (assert ...), got '{shown}'")
        head = node.items[0].text
        if head == "declare-const":
            self.declare(node)
        elif head == "assert":
            self.arity(node, 1, 1)
            self.asserts.append(self.formula(node.items[1]))
        elif head not in _IGNORED_COMMANDS:
            raise _error(
                self.source, node.line, f"unknown command '{head}' (expected declare-const or assert)"
            )

    def declare(self, node: _List) -> None:
        self.arity(node, 2, 2)
        name, sort = node.items[1], node.items[2]
        match = _VARIABLE.match(name.text) if isinstance(name, _Symbol) else None
        if match is None:
            shown = name.text if isinstance(name, _Symbol) else "(...)"
            raise _error(
                self.source, node.line, f"declare-const: expected a name X_<i> or Y_<j>, got '{shown}'"
            )
        if not isinstance(sort, _Symbol) or sort.text != "Real":
            raise _unsupported(
                self.source, node.line, f"declare-const {name.text}: only sort Real is supported"
            )
        variable = (match.group(1), int(match.group(2)))
        expected = self.expected[variable[0]]
        if expected is not None and variable[1] >= expected:
            what = "inputs" if variable[0] == "X" else "outputs"
            raise _error(
                self.source,
                node.line,
                f"declares {name.text}, but the network has {expected} {what} "
                f"({variable[0]}_0 .. {variable[0]}_{expected - 1})",
            )
        if variable in self.declared:
            raise _error(
                self.source,
                node.line,
                f"{name.text} is declared twice (first on line {self.declared[variable]})",
            )
        self.declared[variable] = node.line

    def arity(self, node: _List, least: int, most: int | None) -> None:
        count = len(node.items) - 1
        if count < least or (most is not None and count > most):
            wanted = (
                f"{least}" if least == most else f"at least {least}" if most is None else f"{least}..{most}"
            )
            head = node.items[0].text if isinstance(node.items[0], _Symbol) else "(...)"
            raise _error(self.source, node.line, f"'{head}' takes {wanted} argument(s), got {count}")

    # -- formulas

    def head(self, node: _List, what: str) -> str:
        if not node.items or not isinstance(node.items[0], _Symbol):
            raise _error(self.source, node.line, f"expected {what}, got a list without an operator")
        return node.items[0].text

    def formula(self, node: SExpr) -> _Formula:
        if isinstance(node, _Symbol):
            raise _error(self.source, node.line, f"expected a comparison, 'and' or 'or', got '{node.text}'")
        head = self.head(node, "a comparison, 'and' or 'or'")
        if head in ("and", "or"):
            children = tuple(self.formula(child) for child in node.items[1:])
            return _Junction(head == "and", children, node.line)
        if head in _COMPARISONS or head == "=":
            return self.comparison(node, head)
        return self.unknown_operator(node, head, "a comparison, 'and' or 'or'")

    def unknown_operator(self, node: _List, head: str, expected: str) -> NoReturn:
        if head in _UNSUPPORTED_OPERATORS:
            raise _unsupported(
                self.source, node.line, f"operator '{head}' is not supported in VNN-LIB 1.0 properties"
            )
        raise _error(self.source, node.line, f"unknown operator '{head}' (expected {expected})")

    def comparison(self, node: _List, head: str) -> _Formula:
        """(<= a b c) is a <= b and b <= c; (= a b) is a <= b and a >= b."""
        if head != "=" and len(node.items) == 3:
            simple = self.simple_bound(node, _COMPARISONS[head])
            if simple is not None:
                return simple
        self.arity(node, 2, None)
        terms = [self.term(item) for item in node.items[1:]]
        relations = [Relation.LE, Relation.GE] if head == "=" else [_COMPARISONS[head]]
        parts = tuple(
            self.atom(left.plus(right.scaled(Fraction(-1))), relation, node.line)
            for left, right in itertools.pairwise(terms)
            for relation in relations
        )
        return parts[0] if len(parts) == 1 else _Junction(True, parts, node.line)

    def simple_bound(self, node: _List, relation: Relation) -> _Comparison | None:
        """`(<= X_3 0.5)` or `(>= 0.5 Y_0)` without the general term arithmetic (the bulk of every
        VNN-COMP file: 0.6 of an nn4sys file's parse time); None for anything else."""
        left, right = node.items[1], node.items[2]
        if not (isinstance(left, _Symbol) and isinstance(right, _Symbol)):
            return None
        left_variable, right_variable = _VARIABLE.match(left.text), _VARIABLE.match(right.text)
        if (left_variable is None) == (right_variable is None):
            return None
        variable, number, sign = (left, right, 1) if left_variable else (right, left, -1)
        value = self.leaf(number).constant
        term = self.leaf(variable)  # checks the declaration
        ((kind, _),) = term.coefficients
        return _Comparison(
            _Linear({key: Fraction(sign) for key in term.coefficients}, -sign * value),
            relation,
            kind,
            node.line,
        )

    def atom(self, linear: _Linear, relation: Relation, line: int) -> _Comparison:
        kinds = linear.kinds()
        if len(kinds) > 1:
            names = ", ".join(f"{k}_{i}" for k, i in sorted(linear.coefficients))
            raise _unsupported(
                self.source, line, f"a constraint mixes input (X) and output (Y) variables ({names})"
            )
        if not kinds:
            raise _unsupported(
                self.source, line, "a comparison between constants (no variable) is not supported"
            )
        return _Comparison(linear, relation, kinds.pop(), line)

    # -- terms

    def term(self, node: SExpr) -> _Linear:
        if isinstance(node, _Symbol):
            return self.leaf(node)
        head = self.head(node, "a number, a variable or an arithmetic term")
        args = node.items[1:]
        if head == "+":
            self.arity(node, 1, None)
            total = _Linear()
            for arg in args:
                total = total.plus(self.term(arg))
            return total
        if head == "-":
            self.arity(node, 1, None)
            first = self.term(args[0])
            if len(args) == 1:
                return first.scaled(Fraction(-1))
            for arg in args[1:]:
                first = first.plus(self.term(arg).scaled(Fraction(-1)))
            return first
        if head == "*":
            return self.product(node)
        if head == "/":
            self.arity(node, 2, None)
            quotient = self.term(args[0])
            for arg in args[1:]:
                quotient = quotient.scaled(1 / self.constant(arg, "a divisor"))
            return quotient
        if head in ("and", "or", "=", *_COMPARISONS):
            raise _error(self.source, node.line, f"'{head}' is a formula, expected a number or a term here")
        self.unknown_operator(node, head, "a number, a variable, +, -, * or /")

    def product(self, node: _List) -> _Linear:
        """(* c t): at most one factor may mention a variable (linear arithmetic only)."""
        self.arity(node, 2, None)
        factors = [self.term(arg) for arg in node.items[1:]]
        variable_factors = [f for f in factors if f.coefficients]
        if len(variable_factors) > 1:
            raise _unsupported(self.source, node.line, "a product of two variables is not linear")
        result = variable_factors[0] if variable_factors else _Linear(constant=Fraction(1))
        for factor in factors:
            if not factor.coefficients:
                result = result.scaled(factor.constant)
        return result

    def constant(self, node: SExpr, what: str) -> Fraction:
        value = self.term(node)
        if value.coefficients:
            raise _unsupported(self.source, node.line, f"{what} must be a constant (linear arithmetic only)")
        if what == "a divisor" and value.constant == 0:
            raise _error(self.source, node.line, "division by zero")
        return value.constant

    def leaf(self, symbol: _Symbol) -> _Linear:
        check_literal(symbol.text, f"{self.source}:{symbol.line}: literal")
        number = _parse_number(symbol.text)
        if number is not None:
            return _Linear(constant=number)
        match = _VARIABLE.match(symbol.text)
        if match is None:
            raise _error(
                self.source, symbol.line, f"expected a number or a declared variable, got '{symbol.text}'"
            )
        variable = (match.group(1), int(match.group(2)))
        if variable not in self.declared:
            raise _error(
                self.source,
                symbol.line,
                f"unknown variable '{symbol.text}': not declared (add (declare-const {symbol.text} Real))",
            )
        return _Linear({variable: Fraction(1)})


# ---------------------------------------------------------------- formulas to a Property


@dataclass(slots=True)
class _Bounds:
    """The bounds found so far for one input, with the lines they came from."""

    lo: Fraction | None = None
    lo_line: int = 0
    hi: Fraction | None = None
    hi_line: int = 0


def _bound(comparison: _Comparison, source: str) -> tuple[int, Relation, Fraction]:
    """a*X_i + c (rel) 0 as X_i (rel') -c/a; anything else is not a simple bound."""
    if len(comparison.linear.coefficients) != 1:
        names = " and ".join(f"X_{i}" for _, i in sorted(comparison.linear.coefficients))
        raise _unsupported(
            source, comparison.line, f"input constraint over {names} is not a simple bound on one X variable"
        )
    (((_, index), coefficient),) = comparison.linear.coefficients.items()
    relation = comparison.relation if coefficient > 0 else _FLIPPED[comparison.relation]
    return index, relation, -comparison.linear.constant / coefficient


@dataclass(frozen=True, slots=True)
class _EmptyBox:
    """A DNF clause of the input region whose bounds contradict each other."""

    message: str
    line: int


def _box(
    clause: tuple[_Comparison, ...], n_inputs: int, reader: _Reader, label: str, notes: list[str]
) -> Box | _EmptyBox:
    """One DNF clause of the input region as a Box; strict bounds are relaxed and noted in `notes`."""
    bounds = [_Bounds() for _ in range(n_inputs)]
    for comparison in clause:
        index, relation, value = _bound(comparison, reader.source)
        if relation in _CLOSURE:
            notes.append(
                f"line {comparison.line}: strict bound on X_{index} relaxed to {_CLOSURE[relation].value}"
            )
            relation = _CLOSURE[relation]
        entry = bounds[index]
        if relation is Relation.GE and (entry.lo is None or value > entry.lo):
            entry.lo, entry.lo_line = value, comparison.line
        if relation is Relation.LE and (entry.hi is None or value < entry.hi):
            entry.hi, entry.hi_line = value, comparison.line
    for index, entry in enumerate(bounds):
        for side, value in (("lower", entry.lo), ("upper", entry.hi)):
            if value is None:
                line = reader.declared[("X", index)]
                raise _error(
                    reader.source, line, f"X_{index} has no {side} bound{label}: every input needs both"
                )
    for index, entry in enumerate(bounds):
        if entry.lo > entry.hi:
            return _EmptyBox(
                f"empty input box{label}: X_{index} >= {float(entry.lo):.17g} (line {entry.lo_line}) "
                f"and X_{index} <= {float(entry.hi):.17g} (line {entry.hi_line})",
                max(entry.lo_line, entry.hi_line),
            )
    return Box(tuple(b.lo for b in bounds), tuple(b.hi for b in bounds))


def _input_count(reader: _Reader) -> int:
    """The number of inputs declared, checked to be X_0 .. X_{n-1}."""
    source = reader.source
    indices = sorted(i for kind, i in reader.declared if kind == "X")
    if not indices:
        raise _error(source, 1, "no input variable declared (expected (declare-const X_0 Real) ...)")
    for position, index in enumerate(indices):
        if index != position:
            raise _error(
                source, reader.declared[("X", index)], f"X_{index} is declared but X_{position} is not"
            )
    return len(indices)


def _boxes(
    clauses: list[tuple[_Comparison, ...]], n_inputs: int, reader: _Reader, where: str, notes: list[str]
) -> tuple[list[Box], list[_EmptyBox]]:
    """The boxes of the DNF clauses of an input region, and the clauses whose bounds contradict."""
    boxes: list[Box] = []
    empty: list[_EmptyBox] = []
    for number, clause in enumerate(clauses, start=1):
        label = f"input box {number} of {len(clauses)}" if len(clauses) > 1 else ""
        label = ", ".join(part for part in (label, where) if part)
        box = _box(clause, n_inputs, reader, f" ({label})" if label else "", notes)
        (empty if isinstance(box, _EmptyBox) else boxes).append(box)
    return boxes, empty


def _input_boxes(formulas: list[_Formula], reader: _Reader) -> tuple[tuple[Box, ...], list[str]]:
    """The union of boxes described by the X conjuncts (see the module docstring)."""
    source = reader.source
    n_inputs = _input_count(reader)
    clauses = _dnf(_Junction(True, tuple(formulas), 1), source)
    if not clauses:
        raise _error(source, 1, "the input region is empty: a disjunction over X has no disjuncts")
    notes: list[str] = []
    boxes, empty = _boxes(clauses, n_inputs, reader, "", notes)
    if not boxes:
        raise _error(source, empty[0].line, empty[0].message)
    notes.extend(f"{box.message}: dropped" for box in empty)
    return tuple(boxes), list(dict.fromkeys(notes))


def _clause(comparisons: tuple[_Comparison, ...]) -> Clause:
    """A conjunction of output comparisons as canonical atoms (terms sorted by output)."""
    return Clause(
        tuple(
            Atom(
                tuple((i, c) for (_, i), c in sorted(comparison.linear.coefficients.items())),
                comparison.linear.constant,
                comparison.relation,
            )
            for comparison in comparisons
        )
    )


def _output_condition(formulas: list[_Formula], source: str) -> OutputCondition:
    """The unsafe set: the DNF of the Y conjuncts."""
    return OutputCondition(
        tuple(_clause(clause) for clause in _dnf(_Junction(True, tuple(formulas), 1), source))
    )


@dataclass(slots=True)
class _Case:
    """Boxes and unsafe clauses that belong together, and the lines of the disjuncts they came from."""

    boxes: list[Box]
    clauses: list[Clause]
    lines: list[int]

    def add(self, boxes: list[Box], clauses: list[Clause], lines: list[int]) -> None:
        self.boxes.extend(box for box in boxes if box not in self.boxes)
        self.clauses.extend(clause for clause in clauses if clause not in self.clauses)
        self.lines.extend(lines)


def _lines_text(lines: list[int]) -> str:
    """`line 9`, `lines 9, 10`, `lines 9, 10, ..., 208 (100 disjuncts)`."""
    lines = sorted(set(lines))
    if len(lines) == 1:
        return f"line {lines[0]}"
    if len(lines) <= 4:
        return "lines " + ", ".join(map(str, lines))
    return f"lines {lines[0]}, {lines[1]}, ..., {lines[-1]} ({len(lines)} lines)"


def _cases(
    inputs: list[_Formula], outputs: list[_Formula], mixed: list[_Formula], reader: _Reader
) -> tuple[list[_Case], list[str]]:
    """The case form (module docstring): one (boxes, unsafe clauses) per DNF disjunct of the mixed
    conjuncts, conjoined with the X-only and Y-only ones; grouped by box, then by unsafe set."""
    source = reader.source
    n_inputs = _input_count(reader)
    region = _dnf(_Junction(True, tuple(inputs), 1), source)
    unsafe = _dnf(_Junction(True, tuple(outputs), 1), source)
    disjuncts = _dnf(_Junction(True, tuple(mixed), mixed[0].line), source)
    if len(disjuncts) * max(len(region), 1) * max(len(unsafe), 1) > MAX_CLAUSES:
        raise _unsupported(
            source, mixed[0].line, f"the disjunctive normal form has more than {MAX_CLAUSES} clauses"
        )
    notes: list[str] = []
    by_box: dict[tuple[Box, ...], _Case] = {}
    empty: list[_EmptyBox] = []
    for number, disjunct in enumerate(disjuncts, start=1):
        bounds = tuple(c for c in disjunct if c.kind == "X")
        where = f"disjunct {number} of {len(disjuncts)}" if len(disjuncts) > 1 else ""
        boxes, contradictions = _boxes([c + bounds for c in region], n_inputs, reader, where, notes)
        empty.extend(contradictions)
        if not boxes:
            continue
        atoms = tuple(c for c in disjunct if c.kind == "Y")
        clauses = [_clause(c + atoms) for c in unsafe]
        lines = [c.line for c in disjunct] or [mixed[0].line]
        by_box.setdefault(tuple(boxes), _Case([], [], [])).add(boxes, clauses, lines)
    if not by_box:
        raise _error(source, empty[0].line, empty[0].message)
    notes.extend(f"{box.message}: dropped" for box in empty)
    by_unsafe: dict[tuple[Clause, ...], _Case] = {}
    for case in by_box.values():
        by_unsafe.setdefault(tuple(case.clauses), _Case([], [], [])).add(case.boxes, case.clauses, case.lines)
    return list(by_unsafe.values()), list(dict.fromkeys(notes))


def _split(reader: _Reader) -> tuple[list[_Formula], list[_Formula], list[_Formula]]:
    """The top-level conjuncts of every assert: over X only, over Y only, and mixed."""
    inputs: list[_Formula] = []
    outputs: list[_Formula] = []
    mixed: list[_Formula] = []
    for formula in reader.asserts:
        for conjunct in _conjuncts(formula):
            kinds = _kinds(conjunct)
            (mixed if len(kinds) > 1 else inputs if kinds == {"X"} else outputs).append(conjunct)
    return inputs, outputs, mixed


def _read(text: str, source: str, n_inputs: int | None, n_outputs: int | None) -> _Reader:
    """Every command of the text read and checked (declarations against the network's counts first)."""
    check_assert_count(text, source)
    reader = _Reader(source, n_inputs, n_outputs)
    last = None
    for node in _top_level(text, source):
        reader.command(node)
        last = node
    if last is None:
        raise _error(source, 1, "empty file: no declare-const or assert")
    if not reader.asserts:
        raise _error(source, last.line, "no (assert ...) in the file: there is no property to check")
    return reader


def parse_vnnlib_cases(
    text: str,
    source: str = "<string>",
    name: str | None = None,
    units: Units = Units.NORMALISED,
    n_inputs: int | None = None,
    n_outputs: int | None = None,
) -> Property | PropertyCases:
    """Parse VNN-LIB 1.0 text, the case form included (module docstring): a `Property`, or a
    `PropertyCases` when its disjuncts give input boxes output conditions of their own.

    `source` prefixes every error message (`source:line: ...`) and is recorded in the property;
    `name` defaults to the stem of `source` ("prop_1" for ".../prop_1.vnnlib"); `n_inputs` and
    `n_outputs`, when given, are the network's: a declaration beyond them is refused as it is read.

    :raises InputError: malformed text (unbalanced parentheses, unknown variable or operator, wrong
        arity, a value that is not a number, a missing input bound, an empty box, no assert, a
        variable beyond the network's inputs or outputs).
    :raises UnsupportedError: constraints outside the fragment (mixed X/Y atoms, X constraints that
        are not bounds, nonlinear terms, `not`/`=>`/`ite`).
    """
    return _parse(text, source, name, units, n_inputs, n_outputs)[0]


def _parse(
    text: str, source: str, name: str | None, units: Units, n_inputs: int | None, n_outputs: int | None
) -> tuple[Property | PropertyCases, int]:
    """`parse_vnnlib_cases`, and the line of the first assert in the case form (0 if none)."""
    reader = _read(text, source, n_inputs, n_outputs)
    inputs, outputs, mixed = _split(reader)
    name = _stem(source) if name is None else name
    declared_outputs = sum(1 for kind, _ in reader.declared if kind == "Y") or None
    if not mixed:
        boxes, notes = _input_boxes(inputs, reader)
        plain = Property(
            name=name,
            boxes=boxes,
            unsafe=_output_condition(outputs, source),
            units=units,
            source=source,
            notes=tuple(notes),
            declared_outputs=declared_outputs,
        )
        return plain, 0
    cases, notes = _cases(inputs, outputs, mixed, reader)
    properties = [
        Property(
            name=name if len(cases) == 1 else f"{name}.case{number}",
            boxes=tuple(case.boxes),
            unsafe=OutputCondition(tuple(case.clauses)),
            units=units,
            source=source,
            notes=tuple(notes),
            declared_outputs=declared_outputs,
        )
        for number, case in enumerate(cases, start=1)
    ]
    if len(properties) == 1:
        return properties[0], mixed[0].line
    cases_property = PropertyCases(
        name=name,
        cases=tuple(properties),
        labels=tuple(_lines_text(case.lines) for case in cases),
        units=units,
        source=source,
        notes=tuple(notes),
        declared_outputs=declared_outputs,
    )
    return cases_property, mixed[0].line


def parse_vnnlib(
    text: str,
    source: str = "<string>",
    name: str | None = None,
    units: Units = Units.NORMALISED,
    n_inputs: int | None = None,
    n_outputs: int | None = None,
) -> Property:
    """Parse VNN-LIB 1.0 text into one `Property` (see `parse_vnnlib_cases` for the arguments).

    >>> p = parse_vnnlib("(declare-const X_0 Real)(declare-const Y_0 Real)"
    ...                  "(assert (>= X_0 0))(assert (<= X_0 0.5))(assert (>= Y_0 1e-3))")
    >>> p.boxes[0].hi, p.unsafe.clauses[0].atoms[0].text
    ((Fraction(1, 2),), 'Y_0 >= 0.001')

    :raises UnsupportedError: besides `parse_vnnlib_cases`' errors, a file in the case form that
        has several cases (they are not one input region with one unsafe set).
    """
    prop, line = _parse(text, source, name, units, n_inputs, n_outputs)
    if isinstance(prop, PropertyCases):
        raise _unsupported(
            source,
            line,
            f"its disjuncts give {len(prop.cases)} input boxes output conditions of their own (VNN-COMP's "
            "case form): this command takes one input region with one unsafe set (`qverify verify`, "
            "`qverify vnncomp` and suites verify every case)",
        )
    return prop


def _stem(source: str) -> str:
    """ "bench/prop_1.vnnlib.gz" -> "prop_1"; "<string>" -> "property"."""
    if source.startswith("<"):
        return "property"
    name = Path(source).name
    for suffix in (".gz", ".vnnlib"):
        name = name.removesuffix(suffix)
    return name or "property"


def _read_text(path: str | Path) -> str:
    """A `.vnnlib` file's text, or a `.vnnlib.gz` file's decompressed within the file-size limit."""
    source = str(path)
    check_file(path)
    try:
        if source.endswith(".gz"):
            return read_gzip(path).decode("utf-8")
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise InputError(f"{source}: cannot read: {error}") from None


def read_vnnlib(
    path: str | Path,
    name: str | None = None,
    units: Units = Units.NORMALISED,
    n_inputs: int | None = None,
    n_outputs: int | None = None,
) -> Property:
    """Read a `.vnnlib` (or gzip-compressed `.vnnlib.gz`) file; name = file stem, source = path.

    :raises InputError: the file cannot be read or is malformed (messages are `path:line: ...`).
    :raises UnsupportedError: see `parse_vnnlib` (a file of several cases among them).
    """
    return parse_vnnlib(_read_text(path), str(path), name, units, n_inputs, n_outputs)


def read_vnnlib_cases(
    path: str | Path,
    name: str | None = None,
    units: Units = Units.NORMALISED,
    n_inputs: int | None = None,
    n_outputs: int | None = None,
) -> Property | PropertyCases:
    """`read_vnnlib` for the callers that verify a property of cases too (`parse_vnnlib_cases`)."""
    return parse_vnnlib_cases(_read_text(path), str(path), name, units, n_inputs, n_outputs)


# ---------------------------------------------------------------- writer


def format_number(value: Fraction) -> str:
    """An exact VNN-LIB numeral: a finite decimal when there is one, else `(/ p q)`.

    Examples: 1/2 -> "0.5", -3 -> "-3.0", 3991125645861615/10^15 -> "3.991125645861615",
    1/3 -> "(/ 1 3)", -2/3 -> "(/ -2 3)".
    """
    value = Fraction(value)
    denominator = value.denominator
    twos = fives = 0
    while denominator % 2 == 0:
        denominator //= 2
        twos += 1
    while denominator % 5 == 0:
        denominator //= 5
        fives += 1
    if denominator != 1:
        return f"(/ {value.numerator} {value.denominator})"
    places = max(twos, fives)
    scaled = value.numerator * 10**places // value.denominator  # exact: 10^places is a multiple
    digits = str(abs(scaled)).rjust(places + 1, "0")
    sign = "-" if scaled < 0 else ""
    if places == 0:
        return f"{sign}{digits}.0"
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def _side(terms: list[tuple[int, Fraction]], constant: Fraction | None) -> str:
    """A sum of positive-coefficient output terms plus a constant: "Y_0", "(+ Y_1 (* 2.0 Y_2) 0.5)"."""
    parts = [f"Y_{i}" if c == 1 else f"(* {format_number(c)} Y_{i})" for i, c in terms]
    if constant is not None and (constant != 0 or not parts):
        parts.append(format_number(constant))
    return parts[0] if len(parts) == 1 else f"(+ {' '.join(parts)})"


def _format_atom(atom: Atom) -> str:
    """sum a_i Y_i + c (rel) 0 with positive terms left, negative terms and -c right: `(<= Y_1 Y_0)`."""
    left = [(i, c) for i, c in atom.terms if c > 0]
    right = [(i, -c) for i, c in atom.terms if c < 0]
    if right:
        right_text = _side(right, -atom.constant if atom.constant else None)
    else:
        right_text = format_number(-atom.constant)
    left_text = _side(left, None) if left else format_number(Fraction(0))
    return f"({atom.relation.value} {left_text} {right_text})"


def _box_bounds(box: Box) -> list[str]:
    return [
        text
        for index, (lo, hi) in enumerate(zip(box.lo, box.hi))
        for text in (f"(<= X_{index} {format_number(hi)})", f"(>= X_{index} {format_number(lo)})")
    ]


def _disjunction(clauses: list[list[str]]) -> str:
    body = "\n".join(f"    (and {' '.join(clause)})" for clause in clauses)
    return f"(assert (or\n{body}\n))" if clauses else "(assert (or))"


def format_vnnlib(prop: Property | PropertyCases, n_outputs: int | None = None) -> str:
    """VNN-LIB 1.0 text for `prop`; `parse_vnnlib(format_vnnlib(p), p.source, p.name, p.units) == p`
    for properties read from VNN-LIB (notes and robustness details become comments only), and
    `parse_vnnlib_cases` gives a property of cases its cases back.

    Declares X_0..X_{n-1} and Y_0..Y_{m-1}, m = `n_outputs` or one past the largest output used.
    One box is written as plain bounds, several as `(assert (or (and ...) ...))`; an unsafe set of
    one clause as one assert per atom, several clauses as `(or (and ...) ...)`. Numbers are exact.
    A property of cases is one `(assert (or ...))` of a disjunct per box and unsafe clause of each
    case (a case with an empty unsafe set holds and has none).
    """
    if isinstance(prop, PropertyCases):
        return _format_cases(prop, n_outputs)
    lines = [f"; {prop.name}", "; written by qverify (VNN-LIB 1.0); the asserts describe the unsafe inputs"]
    if prop.units is Units.RAW:
        lines.append("; units: raw (not normalised): read it back with units=raw")
    if prop.robustness is not None:
        info = prop.robustness
        lines.append(f"; robustness: label {info.label}, target {info.target}, {info.radius}")
    lines.extend(f"; note: {note}" for note in prop.notes)
    outputs = n_outputs if n_outputs is not None else prop.unsafe.max_output_index() + 1
    lines.append("")
    lines.extend(f"(declare-const X_{i} Real)" for i in range(prop.n_inputs))
    lines.extend(f"(declare-const Y_{j} Real)" for j in range(outputs))
    lines.append("")
    if len(prop.boxes) == 1:
        lines.extend(f"(assert {bound})" for bound in _box_bounds(prop.boxes[0]))
    else:
        lines.append(_disjunction([_box_bounds(box) for box in prop.boxes]))
    lines.append("")
    clauses = prop.unsafe.clauses
    if len(clauses) == 1:
        lines.extend(f"(assert {_format_atom(atom)})" for atom in clauses[0].atoms)
    else:
        lines.append(_disjunction([[_format_atom(atom) for atom in clause.atoms] for clause in clauses]))
    return "\n".join(lines) + "\n"


def _format_cases(prop: PropertyCases, n_outputs: int | None) -> str:
    """`format_vnnlib` of a property of cases: the case form, one disjunct per (box, clause)."""
    lines = [
        f"; {prop.name}: {len(prop.cases)} cases, each input box with its own output condition",
        "; written by qverify (VNN-LIB 1.0); the asserts describe the unsafe inputs",
    ]
    if prop.units is Units.RAW:
        lines.append("; units: raw (not normalised): read it back with units=raw")
    lines.extend(f"; note: {note}" for note in prop.notes)
    used = max(case.unsafe.max_output_index() for case in prop.cases) + 1
    outputs = n_outputs if n_outputs is not None else max(used, prop.declared_outputs or 0)
    lines.append("")
    lines.extend(f"(declare-const X_{i} Real)" for i in range(prop.n_inputs))
    lines.extend(f"(declare-const Y_{j} Real)" for j in range(outputs))
    lines.append("")
    disjuncts = [
        _box_bounds(box) + [_format_atom(atom) for atom in clause.atoms]
        for case in prop.cases
        for box in case.boxes
        for clause in case.unsafe.clauses
    ]
    lines.append(_disjunction(disjuncts))
    return "\n".join(lines) + "\n"
