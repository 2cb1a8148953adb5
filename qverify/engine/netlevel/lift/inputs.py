"""Network level: the input lines of a harness's `main`, read as text like the arrays (`lift.arrays`).

An image-size harness has one pair of lines per input,

    x[k] = nondet_int();
    __ESBMC_assume(LO <= x[k] && x[k] <= HI);

which pycparser would parse statement by statement (most of the parse time of a 784-input query).
The longest run of such pairs for k = 0, 1, 2, ... is read here with regular expressions and
replaced by one statement `__qv_lifted_inputs();` (padded to the same number of lines), which
`lift.harness.match_main` then takes for those assignments and assumes. Only what is read exactly
is taken (decimal integers, exact hexadecimal floats, the comparisons `LO <= x[k]`, `x[k] <= HI` or
the constant 1); a run that is not is left in the text for the C parser. Should the run sit in a
comment or an excluded `#if` branch, so does the marker, and `main` then lacks its inputs: declined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from qverify.engine.netlevel.lift.arrays import HEX_FLOAT

MARKER = "__qv_lifted_inputs"
_PAIR = re.compile(
    r"^(?P<indent>[ \t]*)(?P<x>[A-Za-z_]\w*)\[(?P<k>0|[1-9]\d*)\] = (?P<nondet>nondet_[a-z]+)\(\);\n"
    r"(?P=indent)__ESBMC_assume\((?P<cond>[^;\n]*)\);\n",
    re.MULTILINE,
)
_LITERAL = rf"(?P<int>-?(?:0|[1-9]\d{{0,17}}))|(?P<float>{HEX_FLOAT})"  # < 2^63: signed long long
_LOWER = re.compile(rf"(?:{_LITERAL}) <= (?P<x>\w+)\[(?P<k>0|[1-9]\d*)\]")
_UPPER = re.compile(rf"(?P<x>\w+)\[(?P<k>0|[1-9]\d*)\] <= (?:{_LITERAL})")


@dataclass(frozen=True, slots=True)
class InputBound:
    """One side of one input's assume: `side` lo or hi, the literal's exact value, integer or not."""

    k: int
    side: str
    value: Fraction
    integer: bool


@dataclass(frozen=True, slots=True, eq=False)
class InputBlock:
    """The run of input lines taken out of `main`: the array, the nondet function, the bounds, and
    the lines as written (the scalar front end parses them when the lifter declines the harness)."""

    x: str
    nondet: str
    count: int
    bounds: tuple[InputBound, ...]
    text: str = ""


def _literal(match: re.Match) -> tuple[Fraction, bool] | None:
    if match.group("int") is not None:
        return Fraction(int(match.group("int"))), True
    text = match.group("float")
    value = float.fromhex(text.removesuffix("f"))  # exact: the grammar of HEX_FLOAT
    if text.endswith("f") and float(np.float32(value)) != value:
        return None  # a float literal that float32 rounds: left to the C parser
    return Fraction(value), False


def _bounds(cond: str, x: str, k: int) -> list[InputBound] | None:
    """The bounds `LO <= x[k]` / `x[k] <= HI` of one assume (at most one of each, or `1`)."""
    if cond == "1":
        return []
    parts = cond.split(" && ")
    if len(parts) > 2:
        return None
    bounds = []
    for part in parts:
        for pattern, side in ((_LOWER, "lo"), (_UPPER, "hi")):
            match = pattern.fullmatch(part)
            if match is not None:
                break
        else:
            return None
        literal = _literal(match)
        if match.group("x") != x or int(match.group("k")) != k or literal is None:
            return None
        bounds.append(InputBound(k, side, *literal))
    return bounds


def _run(text: str, first: re.Match) -> tuple[int, InputBlock] | None:
    """The run of input line pairs x[0], x[1], ... starting at `first`: (its end, the block)."""
    x, nondet = first.group("x"), first.group("nondet")
    bounds: list[InputBound] = []
    count, end, current = 0, first.start(), first
    while (
        current is not None
        and current.start() == end
        and current.group("x") == x
        and current.group("nondet") == nondet
        and int(current.group("k")) == count
    ):
        read = _bounds(current.group("cond"), x, count)
        if read is None:
            break
        bounds += read
        count += 1
        end = current.end()
        current = _PAIR.match(text, end)
    return (end, InputBlock(x, nondet, count, tuple(bounds))) if count else None


def extract_inputs(text: str) -> tuple[str, InputBlock | None]:
    """The text with the longest run of input lines from x[0] replaced by the marker, and the run."""
    if MARKER in text:
        return text, None
    best: tuple[re.Match, int, InputBlock] | None = None
    for match in _PAIR.finditer(text):
        if match.group("k") != "0":
            continue
        run = _run(text, match)
        if run is not None and (best is None or run[1].count > best[2].count):
            best = (match, *run)
    if best is None:
        return text, None
    first, end, block = best
    block = replace(block, text=text[first.start() : end])
    lines = text.count("\n", first.start(), end)
    marker = f"{first.group('indent')}{MARKER}();" + "\n" * lines
    return text[: first.start()] + marker + text[end:], block
