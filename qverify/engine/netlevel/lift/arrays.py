"""Network level: the constant arrays of a C harness, read with regular expressions and numpy, not a C
parser.

A generated harness is mostly initialisers (`static const qv_num qv_w1[50][5] = { {...}, ... };`):
hundreds of thousands of literals that pycparser would turn into as many AST nodes. Each such
declaration is cut out of the text here, its literals read in one pass, and replaced by the same
declaration without initialiser (padded with the newlines it held, so every later line keeps its
number); the rest of the file, the small skeleton, goes to the C parser.

Only what can be read exactly is taken: decimal integers without leading zeros (and the INT32_MIN
expression `(-2147483647 - 1)` the codegen writes) or C99 hexadecimal floating literals that are
exact doubles; braces that nest exactly as the declared shape (no brace elision, no partial
initialisation); as many literals as the shape holds. Anything else is `NotRecognised` (the caller
then uses the scalar front end, which reads every C initialiser).

The way back, `initialiser`, makes of an array read here the initialiser pycparser would have made
of its text (the same values, types and nesting; hexadecimal literals written in Python's canonical
form): when the lifter declines a harness it has parsed, the scalar front end takes the skeleton's
tree with these initialisers instead of parsing the whole file again (a lookup table's thousand
literals were most of a small query's parse).
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass

import numpy as np
from pycparser import c_ast

from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.hexfloat import read_canonical_hex
from qverify.input_limits import check_tensor

_DECLARATION = re.compile(
    r"^[ \t]*static[ \t]+const[ \t]+(?P<type>[A-Za-z_]\w*(?:[ \t]+[A-Za-z_]\w*)*)[ \t]+(?P<name>[A-Za-z_]\w*)"
    r"(?P<dims>(?:[ \t]*\[[ \t]*\d+[ \t]*\])+)[ \t]*=[ \t\n]*\{",
    re.MULTILINE,
)
_DIMENSION = re.compile(r"\[\s*(\d+)\s*\]")
# exact doubles: <= 53 significant bits, binary exponent in [-1022, 9999] (leading digit 0 or 1)
HEX_FLOAT = r"-?0x[01]\.[0-9a-f]{1,13}p(?:\+\d{1,4}|-(?:\d{1,3}|10[01]\d|102[0-2]))f?"
_HEX_FLOATS = re.compile(rf"{HEX_FLOAT}(?:,{HEX_FLOAT})*")
_INT32_MIN_BYTES = b"(-2147483647-1)"
_WHITESPACE = b" \t\n\r\v\f"
_VALUE_CHARACTERS = b"0123456789abcdefABCDEFxXpP.+-"
_INTEGER_CHARACTERS = b"0123456789-,"


@dataclass(frozen=True, slots=True, eq=False)
class ConstArray:
    """One `static const` array of the harness: its declared element type (as written), shape and
    values (int64 for integer literals; float64 for hexadecimal floats, with `suffixed` telling
    whether the literals carried the `f` suffix: every one did, or none did)."""

    name: str
    type_text: str
    shape: tuple[int, ...]
    values: np.ndarray
    integer: bool
    suffixed: bool
    line: int


@dataclass(frozen=True, slots=True, eq=False)
class Extraction:
    """The harness text without initialisers, and the arrays taken out of it, by name."""

    skeleton: str
    arrays: dict[str, ConstArray]


def _expected_structure(shape: tuple[int, ...]) -> str:
    """The braces and commas of a fully braced initialiser of this shape, values left out."""
    structure = "{" + "," * (shape[-1] - 1) + "}"
    for size in reversed(shape[:-1]):
        structure = "{" + ",".join([structure] * size) + "}"
    return structure


def _integers(text: str, count: int, where: str) -> np.ndarray:
    """Comma-separated decimal integers, each written canonically (no leading zero, no sign but a
    leading minus), all below 10^10 in magnitude: read by numpy, then checked to be exactly the
    canonical text of the values read (so nothing was skipped, merged or overflowed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            values = np.fromstring(text, dtype=np.int64, sep=",")
        except (ValueError, DeprecationWarning) as error:
            raise NotRecognised(f"{where}: an integer literal could not be read") from error
    if values.size != count or (values.size and np.abs(values).max() >= 10**10):
        raise NotRecognised(f"{where}: integer literals not read exactly")
    magnitude = np.abs(values)
    digits = count + sum(int(np.count_nonzero(magnitude >= 10**k)) for k in range(1, 10))
    canonical = digits + int(np.count_nonzero(values < 0)) + count - 1
    if canonical != len(text):
        raise NotRecognised(f"{where}: an integer literal is not written canonically (leading zero, sign)")
    return values


def _float32_exact(values: np.ndarray, suffixed: bool, where: str) -> np.ndarray:
    if suffixed and not np.array_equal(values.astype(np.float32), values):
        raise NotRecognised(f"{where}: a float literal (suffix f) that float32 does not hold exactly")
    return values


def _hex_floats(text: str, count: int, where: str) -> np.ndarray:
    """Comma-separated hexadecimal floats matching `HEX_FLOAT`: at most 13 hex digits after a
    leading 0 or 1 and a binary exponent of at least -1022, so each is an exact double (overflow is
    an error of `float.fromhex`); all with the `f` suffix (float literals, then also exact floats)
    or none."""
    suffixed = text.count("f,") + text.endswith("f")  # hex digits come before the `p`, never last
    if suffixed not in (0, count):
        raise NotRecognised(f"{where}: float and double literals mixed in one initialiser")
    plain = text.replace("f,", ",").removesuffix("f") if suffixed else text
    try:
        values = np.fromiter(map(float.fromhex, plain.split(",")), dtype=np.float64, count=count)
    except (OverflowError, ValueError) as error:
        raise NotRecognised(f"{where}: a floating literal out of range") from error
    return _float32_exact(values, bool(suffixed), where)


def _parse_values(body: str, shape: tuple[int, ...], where: str) -> tuple[np.ndarray, bool, bool]:
    """The literals of a braced initialiser body (outer braces included) as a flat array. The text
    is handled as bytes (bytes.translate deletes through a table, faster than str.translate's
    mapping on the megabytes of a float harness). Hexadecimal floats in the form the codegen writes
    (`float.hex`) are read by numpy (`read_canonical_hex`, 2-5x faster); any other form by the
    regular expression and `float.fromhex`."""
    try:
        data = body.encode("ascii")
    except UnicodeEncodeError as error:
        raise NotRecognised(f"{where}: initialiser holds a character that is not ASCII") from error
    compact = data.translate(None, _WHITESPACE).replace(b",}", b"}").replace(_INT32_MIN_BYTES, b"-2147483648")
    if compact.translate(None, _VALUE_CHARACTERS) != _expected_structure(shape).encode():
        raise NotRecognised(f"{where}: initialiser braces do not nest as the shape {list(shape)}")
    literals = compact.translate(None, b"{}")
    count = math.prod(shape)
    if b"x" not in literals and not literals.translate(None, _INTEGER_CHARACTERS):  # x: no copy of floats
        return _integers(literals.decode("ascii"), count, where), True, False
    suffixed = literals.endswith(b"f")
    canonical = read_canonical_hex(literals, count, b"f" if suffixed else b"")
    if canonical is not None:
        return _float32_exact(canonical, suffixed, where), False, suffixed
    text = literals.decode("ascii")
    if _HEX_FLOATS.fullmatch(text):
        return _hex_floats(text, count, where), False, text.endswith("f")
    raise NotRecognised(
        f"{where}: initialiser literals are not all decimal integers or exact hexadecimal floats"
    )


def extract_arrays(text: str, filename: str) -> Extraction:
    """Cut every `static const T NAME[..]..[..] = {...};` out of the harness text."""
    arrays: dict[str, ConstArray] = {}
    pieces: list[str] = []
    position = 0
    line, counted = 1, 0
    while match := _DECLARATION.search(text, position):  # from the end of the last one: not through its body
        line += text.count("\n", counted, match.start())
        counted = match.start()
        where = f"{filename}:{line}"
        name = match.group("name")
        shape = tuple(int(size) for size in _DIMENSION.findall(match.group("dims")))
        if any(size == 0 for size in shape):
            raise NotRecognised(f"{where}: array {name} has a zero dimension")
        check_tensor(shape, 8, f"{where}: array {name}")
        brace = match.end() - 1
        end = text.find(";", brace)
        if end < 0 or not text[brace:end].rstrip().endswith("}"):
            raise NotRecognised(f"{where}: initialiser of {name} does not end with '}};'")
        if name in arrays:
            raise NotRecognised(f"{where}: array {name} is defined twice")
        body = text[brace:end].rstrip()
        values, integer, suffixed = _parse_values(body, shape, where)
        arrays[name] = ConstArray(
            name, " ".join(match.group("type").split()), shape, values.reshape(shape), integer, suffixed, line
        )
        declaration_end = match.start("dims") + len(match.group("dims"))
        pieces.append(text[position:declaration_end])
        pieces.append("\n" * text.count("\n", declaration_end, end))
        position = end
    pieces.append(text[position:])
    return Extraction("".join(pieces), arrays)


INT32_MIN = -(2**31)


def _literal(value: float, integer: bool, suffixed: bool, coord: c_ast.Coord | None) -> c_ast.Node:
    """pycparser's node of one literal as the codegen writes it (a minus is a unary operator)."""
    if integer:
        if value == INT32_MIN:  # `(-2147483647 - 1)`
            minimum = c_ast.UnaryOp("-", c_ast.Constant("int", "2147483647", coord), coord)
            return c_ast.BinaryOp("-", minimum, c_ast.Constant("int", "1", coord), coord)
        magnitude, negative = str(abs(int(value))), value < 0
        constant = c_ast.Constant("int", magnitude, coord)
    else:
        negative = math.copysign(1.0, value) < 0  # -0.0 is written with its minus
        text = float.hex(abs(float(value))) + ("f" if suffixed else "")
        constant = c_ast.Constant("float" if suffixed else "double", text, coord)
    return c_ast.UnaryOp("-", constant, coord) if negative else constant


def initialiser(array: ConstArray, coord: c_ast.Coord | None) -> c_ast.InitList:
    """The fully braced initialiser of `array` as pycparser's nodes (`coord` on each)."""

    def braced(values: np.ndarray) -> c_ast.InitList:
        if values.ndim == 1:
            items = [_literal(value, array.integer, array.suffixed, coord) for value in values.tolist()]
            return c_ast.InitList(items, coord)
        return c_ast.InitList([braced(row) for row in values], coord)

    return braced(array.values)
