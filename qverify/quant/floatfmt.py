"""IEEE floating-point number formats: float, double and half (binary16) implementations of a network.

Half precision is C's `_Float16` (gcc on x86-64; `__extension__` keeps -pedantic quiet). The
generated C casts the result of every half operation back to `_Float16`, so each operation is
rounded once to binary16 whatever the compiler's excess-precision setting (gcc computes `_Float16`
arithmetic in float and rounds on assignment and cast; a float result of two halves' +, -, * is
either exact or correctly rounded, and rounding it again to half equals rounding the exact value
once, because 24 >= 2 * 11 + 2). numpy's float16 arithmetic is that same per-operation rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qverify.vocabulary import FloatKind

_DTYPES = {FloatKind.FLOAT: np.float32, FloatKind.DOUBLE: np.float64, FloatKind.HALF: np.float16}
_C_TYPES = {FloatKind.FLOAT: "float", FloatKind.DOUBLE: "double", FloatKind.HALF: "_Float16"}
_BITS = {FloatKind.FLOAT: 32, FloatKind.DOUBLE: 64, FloatKind.HALF: 16}


@dataclass(frozen=True, slots=True)
class FloatFormat:
    """A C floating-point type: every operation rounds to nearest-even in that type."""

    kind: FloatKind = FloatKind.FLOAT

    @property
    def dtype(self) -> type[np.floating]:
        return _DTYPES[self.kind]

    @property
    def c_type(self) -> str:
        return _C_TYPES[self.kind]

    @property
    def is_half(self) -> bool:
        return self.kind is FloatKind.HALF

    @property
    def label(self) -> str:
        return self.kind.value

    @property
    def word_bits(self) -> int:
        return _BITS[self.kind]

    def __str__(self) -> str:
        return self.kind.value

    def round(self, values: np.ndarray) -> np.ndarray:
        """Round float64 values to this type (returned as this type's numpy dtype)."""
        return np.asarray(values, dtype=np.float64).astype(self.dtype)
