"""C literals that mean exactly the values qverify computed (no decimal rounding on the way)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from qverify.hexfloat import hex_literals_text

INT32_MIN = -(1 << 31)


def int_literal(value: int) -> str:
    """An integer literal; INT32_MIN is written as an expression (2147483648 has type long)."""
    value = int(value)
    if value == INT32_MIN:
        return "(-2147483647 - 1)"
    return str(value)


FLOAT_C_TYPES = ("float", "double", "_Float16")


def float_literal(value: float, c_type: str) -> str:
    """A hexadecimal floating literal (C99): exact, e.g. 0x1.8p+1f for 3.0f.

    The value is first rounded to `c_type`; a `_Float16` value is written as a float literal (C99
    has no half literals; every half value is a float value, and the conversion is exact)."""
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"cannot write {value} as a C literal")
    if c_type == "_Float16":
        value = float(np.float16(value))
        if not np.isfinite(value):
            raise ValueError(f"{value} overflows half precision")
        return value.hex() + "f"
    if c_type == "float":
        value = float(np.float32(value))
        return value.hex() + "f"
    return value.hex()


def number_literal(value: float, c_type: str) -> str:
    if c_type in FLOAT_C_TYPES:
        return float_literal(value, c_type)
    return int_literal(int(value))


_ROUNDED = {"_Float16": np.float16, "float": np.float32, "double": np.float64}


def _float_text(values: np.ndarray, c_type: str, separator: str) -> tuple[str, np.ndarray]:
    """Every value (flattened) rounded to `c_type` and written as `float_literal` writes it, each
    followed by `separator`, in one string; and where each piece ends (`hex_literals_text`)."""
    doubles = np.asarray(values).astype(np.float64).ravel()
    if not np.isfinite(doubles).all():
        raise ValueError(f"cannot write {doubles[~np.isfinite(doubles)][0]} as a C literal")
    with np.errstate(over="ignore"):
        rounded = doubles.astype(_ROUNDED[c_type]).astype(np.float64)
    if c_type == "_Float16" and not np.isfinite(rounded).all():
        raise ValueError(f"{rounded[~np.isfinite(rounded)][0]} overflows half precision")
    return hex_literals_text(rounded, "" if c_type == "double" else "f", separator)


def number_literals(values: np.ndarray, c_type: str) -> list[str]:
    """`number_literal` of every value (flattened), the rounding and the writing done by numpy for
    the whole array (`qverify.hexfloat`): the same text, ~3x faster than `float.hex` one by one (a
    784-input float network has half a million weights)."""
    array = np.asarray(values)
    if c_type not in FLOAT_C_TYPES:
        return [int_literal(v) if v == INT32_MIN else str(v) for v in array.astype(np.int64).ravel().tolist()]
    return _float_text(array, c_type, ",")[0].split(",")[:-1]


def _joined_runs(values: np.ndarray, c_type: str, run: int) -> list[str]:
    """The literals of `values` (flattened) joined by ", " in runs of `run` (the last may be short)."""
    if c_type not in FLOAT_C_TYPES:
        literals = number_literals(values, c_type)
        return [", ".join(literals[i : i + run]) for i in range(0, len(literals), run)]
    text, ends = _float_text(values, c_type, ", ")
    last = np.append(ends[run - 1 :: run], ends[-1]) if ends.size % run else ends[run - 1 :: run]
    first = np.concatenate(([0], last[:-1]))
    return [text[start : end - 2] for start, end in zip(first.tolist(), last.tolist(), strict=True)]


def tensor_rows(values: np.ndarray, c_type: str) -> list[str]:
    """One nested `{...}` initialiser per entry of the first axis of an array of any rank."""
    array = np.asarray(values)
    literals = iter(number_literals(array, c_type))

    def nested(shape: tuple[int, ...]) -> str:
        if len(shape) == 1:
            return "{" + ", ".join(next(literals) for _ in range(shape[0])) + "}"
        return "{" + ", ".join(nested(shape[1:]) for _ in range(shape[0])) + "}"

    return [nested(array.shape[1:]) for _ in range(array.shape[0])]


def array_rows(values: np.ndarray, c_type: str, per_line: int = 8) -> list[str]:
    """The initialiser lines of a 1-D array, `per_line` values to a line."""
    if np.asarray(values).size == 0:
        return []
    return _joined_runs(values, c_type, per_line)


def matrix_rows(values: np.ndarray, c_type: str) -> list[str]:
    """One `{...}` initialiser per row of a 2-D array."""
    array = np.asarray(values)
    if array.ndim != 2 or array.shape[1] == 0:
        return ["{}" for _ in range(array.shape[0])]
    return ["{" + row + "}" for row in _joined_runs(array, c_type, array.shape[1])]


def join_lines(lines: Iterable[str], indent: str = "    ") -> str:
    return (",\n" + indent).join(lines)


def c_string(text: str) -> str:
    """A C string literal body (escaped), for assertion messages."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def comment_safe(text: str) -> str:
    """Text that cannot end a C block comment early."""
    return text.replace("*/", "* /")


def describe_vector(values: Sequence[float]) -> str:
    return " ".join(f"{float(v):.9g}" for v in values)
