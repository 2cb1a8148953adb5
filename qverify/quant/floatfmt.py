"""IEEE floating-point number formats for float and double implementations of a network."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class FloatKind(enum.Enum):
    FLOAT = "float"
    DOUBLE = "double"


@dataclass(frozen=True, slots=True)
class FloatFormat:
    """A C floating-point type: every operation rounds to nearest-even in that type."""

    kind: FloatKind = FloatKind.FLOAT

    @property
    def dtype(self) -> type[np.floating]:
        return np.float32 if self.kind is FloatKind.FLOAT else np.float64

    @property
    def c_type(self) -> str:
        return self.kind.value

    @property
    def label(self) -> str:
        return self.kind.value

    @property
    def word_bits(self) -> int:
        return 32 if self.kind is FloatKind.FLOAT else 64

    def __str__(self) -> str:
        return self.kind.value

    def round(self, values: np.ndarray) -> np.ndarray:
        """Round float64 values to this type (returned as this type's numpy dtype)."""
        return np.asarray(values, dtype=np.float64).astype(self.dtype)
