"""Network level: the float64 rounding the network level charges to every bound it computes (one definition
for the model, the bounds, the staircases and the search; shared with the built-in invariants through
`qverify.quant.roundoff`)."""

from __future__ import annotations

from qverify.quant.roundoff import TINY, U64, gamma

__all__ = ["TINY", "U64", "gamma"]
