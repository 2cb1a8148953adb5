"""The float64 rounding charged to every bound computed in float64 (one definition for the built-in
symbolic invariants, `qverify.invariants.symbolic`, and the network level, `qverify.engine.netlevel`)."""

from __future__ import annotations

U64 = 2.0**-53  # float64 unit roundoff: every bound computation is charged with it
TINY = 1e-290  # covers underflow in the float64 bound computations (far below every real margin)


def gamma(n: int, unit: float = U64) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of an n-term float dot product."""
    nu = n * unit
    if nu >= 0.5:
        return float("inf")
    return nu / (1.0 - nu) * (1.0 + 1e-12)
