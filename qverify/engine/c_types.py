"""Shared by both paths: the C types and source coordinates the engine reads C with (`cfront`, the
network level's lifter and the scalar path's SSA all speak of `I32`, `F16`, ...).

A type is a scalar C type as gcc implements it on x86-64: integers of 1..64 bits (signed or not),
IEEE binary16 (`_Float16`), binary32 and binary64, and booleans.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qverify.errors import InternalError


@dataclass(frozen=True, slots=True)
class Type:
    """A scalar C type: `kind` int/float/bool, `bits`, `signed` (ints)."""

    kind: str
    bits: int
    signed: bool = True
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.bits, self.signed)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def min(self) -> int:
        if self.kind == "bool":
            return 0
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def max(self) -> int:
        if self.kind == "bool":
            return 1
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    def __str__(self) -> str:
        if self.kind == "bool":
            return "bool"
        if self.kind == "float":
            return {16: "half", 32: "float"}.get(self.bits, "double")
        return f"{'i' if self.signed else 'u'}{self.bits}"


BOOL = Type("bool", 1, False)
I8, I16, I32, I64 = (Type("int", b) for b in (8, 16, 32, 64))
U8, U16, U32, U64 = (Type("int", b, False) for b in (8, 16, 32, 64))
F16 = Type("float", 16)  # IEEE binary16, C's _Float16
F32 = Type("float", 32)
F64 = Type("float", 64)


def int_type(bits: int, signed: bool = True) -> Type:
    """The integer type of `bits` bits (1..64)."""
    if not 1 <= bits <= 64:
        raise InternalError(f"integer width {bits} out of 1..64")
    return Type("int", bits, signed)


@dataclass(frozen=True, slots=True)
class Coord:
    """Where a node came from in C: `file:line`."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"
