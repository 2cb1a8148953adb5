"""Checked, read-only arrays for the IR's frozen layer records."""

from __future__ import annotations

import numpy as np

from qverify.errors import InputError


def frozen_array(values: object, dtype: type = np.float64, ndim: int | None = None) -> np.ndarray:
    """A read-only copy of `values`, so frozen dataclasses really are immutable."""
    array = np.array(values, dtype=dtype, copy=True)
    if ndim is not None and array.ndim != ndim:
        raise InputError(f"expected a {ndim}-dimensional array, got shape {array.shape}")
    array.flags.writeable = False
    return array


def require_finite(array: np.ndarray, what: str) -> None:
    if not np.all(np.isfinite(array)):
        bad = np.argwhere(~np.isfinite(array))[0]
        raise InputError(f"{what} holds a non-finite value at index {tuple(int(i) for i in bad)}")
