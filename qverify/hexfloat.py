"""Hexadecimal floating literals for whole arrays at once: the codegen's writer and the lifter's check.

A 784-input float network has half a million weights. Written one by one with `float.hex` they
cost ~0.4 s of CPU (most of a real-mode harness's generation), and read back through a regular
expression and `float.fromhex` ~0.5 s (most of its lift). Here numpy does both on the IEEE bits:

- `hex_literals_text` writes, for every double of an array, exactly the text `float.hex` writes
  (`[-]0x1.<13 hex digits>p<+|-><exponent>`; `0x0.0p+0` for zero; `0x0.<13 digits>p-1022` for a
  subnormal), each followed by a suffix and a separator, in one string.
- `read_canonical_hex` reads such a list back. It proposes the values by gathering the digits at
  the places the canonical form puts them, then writes them again with `hex_literals_text` and
  accepts only if the text is byte for byte what was read. The acceptance rests on the writer
  alone (its text is `float.hex`'s, which C reads as the same double), not on the reader: a reader
  mistake, or any text not in the canonical form (upper-case digits, short mantissas, spaces, a
  hostile list), is a refusal (None), never a wrong value; the caller then reads the text the slow,
  general way. Every step is a fixed number of passes over the bytes: no backtracking, no hang.
"""

from __future__ import annotations

import numpy as np

_MANTISSA_DIGITS = 13  # 52 bits
_FILLER = 0  # a byte the text never holds: cells left empty, dropped when the cells are joined
_LOWEST_EXPONENT = -1022  # of normal and subnormal doubles alike (float.hex writes 0x0.<...>p-1022)
_HIGHEST_EXPONENT = 1023
_EXPONENT_WIDTH = 8  # p, sign, up to four digits, FILLER (8 bytes: one uint64 per row of the table)
_MANTISSA_MASK = np.uint64((1 << 52) - 1)


def _exponent_table() -> np.ndarray:
    """Row e - LOWEST_EXPONENT: `p+e` (or `p-|e|`) in EXPONENT_WIDTH bytes, FILLER after."""
    table = np.zeros((_HIGHEST_EXPONENT - _LOWEST_EXPONENT + 1, _EXPONENT_WIDTH), dtype=np.uint8)
    for row, exponent in enumerate(range(_LOWEST_EXPONENT, _HIGHEST_EXPONENT + 1)):
        text = f"p{exponent:+d}".encode("ascii")
        table[row, : len(text)] = np.frombuffer(text, dtype=np.uint8)
    return table


_EXPONENTS = _exponent_table()
_EXPONENT_ROWS = _EXPONENTS.view(np.uint64).ravel()  # gathered one word per value, not byte by byte
_EXPONENT_LENGTHS = np.count_nonzero(_EXPONENTS, axis=1)
# byte -> its two lower-case hex digits, as one uint16 (native order, as the text is read back)
_BYTE_HEX = np.frombuffer(b"".join(f"{byte:02x}".encode("ascii") for byte in range(256)), np.uint16)
# two bytes (one native uint16) -> the byte their hex digits spell ('.' spelling a 0 digit; any
# other pair -> 0: the check by writing again refuses what was read wrong)
_PAIR = np.zeros(1 << 16, dtype=np.uint8)
_PAIR[_BYTE_HEX] = np.arange(256, dtype=np.uint8)
_DOT_DIGITS = b"".join(f".{digit:x}".encode("ascii") for digit in range(16))
_PAIR[np.frombuffer(_DOT_DIGITS, np.uint16)] = np.arange(16)
_DECIMAL = np.zeros(256, dtype=np.int64)  # decimal digit -> its value, any other byte -> 0
_DECIMAL[np.frombuffer(b"0123456789", dtype=np.uint8)] = np.arange(10, dtype=np.int64)


def hex_literals_text(doubles: np.ndarray, suffix: str = "", separator: str = ",") -> tuple[str, np.ndarray]:
    """`float.hex(v) + suffix + separator` for every v of `doubles` (finite float64, any shape,
    read flat), concatenated; and the offset where each piece ends (so that callers can cut rows).

    :raises ValueError: a value is not finite (C has no literal for it).
    """
    values = np.ascontiguousarray(doubles, dtype=np.float64).ravel()
    if not np.isfinite(values).all():
        raise ValueError(f"cannot write {values[~np.isfinite(values)][0]} as a C literal")
    tail = (suffix + separator).encode("ascii")
    if b"\0" in tail:
        raise ValueError("a suffix or separator holding a NUL byte")
    bits = values.view(np.uint64)
    biased = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    mantissa = bits & _MANTISSA_MASK
    zero = (biased == 0) & (mantissa == 0)
    exponent = np.where(biased == 0, np.where(zero, 0, _LOWEST_EXPONENT), biased - 1023)
    width = 5 + _MANTISSA_DIGITS + _EXPONENT_WIDTH + len(tail)
    cells = np.empty((values.size, width), dtype=np.uint8)
    cells[:, 0] = np.where(values.view(np.int64) < 0, ord("-"), _FILLER)
    cells[:, 1:5] = np.frombuffer(b"0x1.", dtype=np.uint8)
    cells[biased == 0, 3] = ord("0")
    # the 52 mantissa bits are the low 6.5 bytes: 14 hex digits of 7 bytes, the first always 0
    mantissa_bytes = mantissa.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 1:]
    cells[:, 5 : 5 + _MANTISSA_DIGITS] = _BYTE_HEX[mantissa_bytes].view(np.uint8)[:, 1:]
    cells[zero, 6 : 5 + _MANTISSA_DIGITS] = _FILLER  # 0x0.0p+0
    after = 5 + _MANTISSA_DIGITS
    row = exponent - _LOWEST_EXPONENT
    cells[:, after : after + _EXPONENT_WIDTH] = _EXPONENT_ROWS[row, None].view(np.uint8)
    cells[:, after + _EXPONENT_WIDTH :] = np.frombuffer(tail, dtype=np.uint8)
    lengths = (values.view(np.int64) < 0) + np.where(zero, 5, 4 + _MANTISSA_DIGITS)
    ends = np.cumsum(lengths + _EXPONENT_LENGTHS[row] + len(tail))
    return cells[cells != _FILLER].tobytes().decode("ascii"), ends


def read_canonical_hex(text: bytes, count: int, suffix: bytes = b"") -> np.ndarray | None:
    """The doubles of `count` comma-separated literals, each `float.hex(v) + suffix`, or None when
    the text is anything else (see the module docstring: the answer is checked by writing it again).
    """
    if count <= 0 or not text:
        return None
    data = np.frombuffer(text + b"," + bytes(16), dtype=np.uint8)  # windows past the end read zeros
    ends = np.flatnonzero(data == ord(","))
    marks = np.flatnonzero(data == ord("p"))
    if ends.size != count or marks.size != count or not (marks < ends).all():
        return None
    starts = np.concatenate(([0], ends[:-1] + 1))
    negative = data[starts] == ord("-")
    digits_at = starts + negative + 4  # past [-]0x1.
    if (digits_at > marks).any():
        return None
    # [.][13 digits]: 14 bytes as 7 pairs -> 7 bytes, the '.' read as the digit 0
    windows = np.lib.stride_tricks.sliding_window_view(data, 16)
    pairs = np.ascontiguousarray(windows[digits_at - 1, :14]).view(np.uint16)
    mantissa_bytes = np.zeros((count, 8), dtype=np.uint8)
    mantissa_bytes[:, 1:] = _PAIR[pairs]
    mantissa = mantissa_bytes.view(">u8").ravel().astype(np.uint64)
    mantissa[marks - digits_at != _MANTISSA_DIGITS] = 0  # 0x0.0p+0: the one canonical short mantissa
    exponent_text = windows[marks + 2, :4]  # the digits after p+ or p-
    length = ends - len(suffix) - marks - 2
    magnitude = np.zeros(count, dtype=np.int64)
    for column in range(4):
        digit = _DECIMAL[exponent_text[:, column]]
        magnitude = np.where(column < length, magnitude * 10 + digit, magnitude)
    exponent = np.where(data[marks + 1] == ord("-"), -magnitude, magnitude)
    lead_one = data[digits_at - 2] == ord("1")
    biased = np.where(lead_one, np.clip(exponent + 1023, 1, 2046), 0).astype(np.uint64)
    bits = (negative.astype(np.uint64) << np.uint64(63)) | (biased << np.uint64(52)) | mantissa
    values = bits.view(np.float64)
    if not np.isfinite(values).all():
        return None
    written, _ = hex_literals_text(values, suffix.decode("ascii"), ",")
    return values if written.encode("ascii") == text + b"," else None
