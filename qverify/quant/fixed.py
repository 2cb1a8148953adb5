"""Fixed-point formats `<k,l>` and their integer arithmetic (the contract of ARCHITECTURE.md).

Every function here has a C twin in `models_c/fxp.h`; if one changes, the other must change too
(tests compare them bit for bit through the generated C).

A word `q` of format <k,l> is an integer in [-2^(w-1), 2^(w-1) - 1], w = k + l, meaning q * 2^-l.
Operations work on numpy int64 arrays (vectorised over a batch) and return, with the result, a
boolean mask of the elements that overflowed (used by `Overflow.DETECT`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from qverify.errors import InputError, RangeError
from qverify.vocabulary import MAX_WORD_BITS, MIN_WORD_BITS, Overflow, Rounding

_FORMAT_TEXT = re.compile(r"^\s*(-?\d+)\s*\.\s*(-?\d+)\s*$")  # example: "8.8", "28.4"


@dataclass(frozen=True, slots=True)
class FixedFormat:
    """A fixed-point format <k,l>: `int_bits` k (sign included) and `frac_bits` l."""

    int_bits: int
    frac_bits: int
    rounding: Rounding = Rounding.NEAREST
    overflow: Overflow = Overflow.SATURATE

    def __post_init__(self) -> None:
        if self.int_bits < 1:
            raise InputError(
                f"format <{self.int_bits},{self.frac_bits}>: needs at least 1 integer bit (the sign)"
            )
        if self.frac_bits < 0:
            raise InputError(f"format <{self.int_bits},{self.frac_bits}>: fractional bits must be >= 0")
        if not MIN_WORD_BITS <= self.word_bits <= MAX_WORD_BITS:
            raise InputError(
                f"format <{self.int_bits},{self.frac_bits}>: word length {self.word_bits} is outside "
                f"{MIN_WORD_BITS}..{MAX_WORD_BITS}"
            )

    @classmethod
    def parse(
        cls,
        text: str,
        rounding: Rounding = Rounding.NEAREST,
        overflow: Overflow = Overflow.SATURATE,
    ) -> FixedFormat:
        """`"K.L"` (e.g. `"8.8"`, `"28.4"`) to a format; anything else is an InputError."""
        match = _FORMAT_TEXT.match(text)
        if match is None:
            raise InputError(f"bad format '{text}': expected K.L with integers K >= 1, L >= 0 (e.g. 8.8)")
        return cls(int(match.group(1)), int(match.group(2)), rounding, overflow)

    @property
    def word_bits(self) -> int:
        return self.int_bits + self.frac_bits

    @property
    def min_q(self) -> int:
        return -(1 << (self.word_bits - 1))

    @property
    def max_q(self) -> int:
        return (1 << (self.word_bits - 1)) - 1

    @property
    def scale(self) -> int:
        """2^l: the code of the real value 1."""
        return 1 << self.frac_bits

    @property
    def resolution(self) -> Fraction:
        return Fraction(1, self.scale)

    def __str__(self) -> str:
        return f"<{self.int_bits},{self.frac_bits}>"

    @property
    def label(self) -> str:
        """The `K.L` spelling used on the command line and in file names."""
        return f"{self.int_bits}.{self.frac_bits}"

    def to_real(self, q: int) -> Fraction:
        return Fraction(int(q), self.scale)


# ---------------------------------------------------------------- integer primitives


def round_shift(values: np.ndarray, shift: int, rounding: Rounding) -> np.ndarray:
    """values / 2^shift rounded to an integer (int64 in, int64 out), as `fxp_shift` in fxp.h.

    nearest: ties away from zero, computed on the magnitude so no negative value is shifted.
    floor: floor division, i.e. what an arithmetic right shift gives.
    """
    values = np.asarray(values, dtype=np.int64)
    if shift == 0:
        return values.copy()
    magnitude = np.abs(values)
    if rounding is Rounding.NEAREST:
        rounded = (magnitude + (1 << (shift - 1))) >> shift
    else:
        rounded = np.where(values >= 0, magnitude >> shift, (magnitude + ((1 << shift) - 1)) >> shift)
    return np.where(values >= 0, rounded, -rounded)


def apply_overflow(values: np.ndarray, fmt: FixedFormat) -> tuple[np.ndarray, np.ndarray]:
    """Bring int64 values into the word range per the overflow mode.

    Returns (words, overflowed). Under DETECT the words are clamped (they are never used after a
    detected overflow: the C stops at the failed assertion) and `overflowed` marks the elements.
    """
    values = np.asarray(values, dtype=np.int64)
    overflowed = (values < fmt.min_q) | (values > fmt.max_q)
    if fmt.overflow is Overflow.WRAP:
        mask = (1 << fmt.word_bits) - 1
        sign = 1 << (fmt.word_bits - 1)
        words = ((values & mask) ^ sign) - sign
    else:
        words = np.clip(values, fmt.min_q, fmt.max_q)
    return words, overflowed


def add(a: np.ndarray, b: np.ndarray, fmt: FixedFormat) -> tuple[np.ndarray, np.ndarray]:
    """fxp_add: O(a + b)."""
    return apply_overflow(np.asarray(a, dtype=np.int64) + np.asarray(b, dtype=np.int64), fmt)


def mult(a: np.ndarray, b: np.ndarray, fmt: FixedFormat) -> tuple[np.ndarray, np.ndarray]:
    """fxp_mult: O(R(a * b / 2^l)); the product of two words fits int64 exactly."""
    product = np.asarray(a, dtype=np.int64) * np.asarray(b, dtype=np.int64)
    return apply_overflow(round_shift(product, fmt.frac_bits, fmt.rounding), fmt)


def round_real_to_int(scaled: np.ndarray, rounding: Rounding) -> np.ndarray:
    """Exact rounding of float64 values to integer-valued float64 (C: `round()` / `floor()`).

    `round` in C99 rounds halfway cases away from zero, exactly; numpy's `round` does not
    (ties to even), hence this function.
    """
    scaled = np.asarray(scaled, dtype=np.float64)
    down = np.floor(scaled)
    if rounding is Rounding.FLOOR:
        return down
    up = np.ceil(scaled)
    below = scaled - down  # exact: |scaled| and floor(scaled) share their binade or below
    above = up - scaled
    nearer_up = np.where(scaled >= 0, below >= 0.5, above < 0.5)
    return np.where(nearer_up, up, down)


def quantize_real(values: np.ndarray, fmt: FixedFormat) -> tuple[np.ndarray, np.ndarray]:
    """Real (float64) values to words: R(x * 2^l), then the overflow mode (C: `fxp_from_double`).

    x * 2^l is exact in float64; the wrap of an out-of-range integer uses fmod, which is exact too,
    so the result is defined for every finite input. NaN or infinite inputs are an InputError.
    """
    values = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise InputError("cannot quantise a NaN or infinite value")
    integral = round_real_to_int(np.ldexp(values, fmt.frac_bits), fmt.rounding)
    overflowed = (integral < fmt.min_q) | (integral > fmt.max_q)
    if fmt.overflow is Overflow.WRAP:
        integral = np.fmod(integral, float(1 << fmt.word_bits))  # exact, |result| < 2^w
    else:
        integral = np.clip(integral, fmt.min_q, fmt.max_q)
    words, _ = apply_overflow(integral.astype(np.int64), fmt)
    return words, overflowed


def quantize_constants(values: np.ndarray, fmt: FixedFormat, what: str) -> np.ndarray:
    """Quantise weights/biases/table entries at generation time.

    Out-of-range constants follow the overflow mode (wrap/saturate are semantics); under DETECT
    there is no run-time check to fail, so an out-of-range constant is a RangeError naming it.
    """
    words, overflowed = quantize_real(values, fmt)
    if fmt.overflow is Overflow.DETECT and np.any(overflowed):
        index = tuple(int(i) for i in np.argwhere(overflowed)[0])
        value = float(np.asarray(values)[index])
        raise RangeError(
            f"{what} {index} = {value!r} does not fit {fmt} (range "
            f"[{float(fmt.to_real(fmt.min_q))}, {float(fmt.to_real(fmt.max_q))}]); "
            "detect mode cannot represent it: use more integer bits"
        )
    return words
