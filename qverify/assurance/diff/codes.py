"""Where QuantizeLinear changes code: the exact double thresholds of an int8 model's input quantization.

onnxruntime quantizes a real input x to the code Q(x) = clamp(rint_even(float32(x) / scale) + zero
point) (`TensorQuant.quantize`, the C replay's `nearbyintf((float)x / scale)`). Each step is
non-decreasing in x -- the conversion to float32, the correctly rounded division by a positive
scale, rounding to an integer, the clamp -- so Q is a non-decreasing step function of the double x,
and for every code k above the minimum there is one smallest double T_k with Q(T_k) >= k:

    Q(x) >= k  <=>  x >= T_k        (for every double x)

Proof mode states exactly this in the harness (`proof._int8_conversion`): no rounding is modelled, only
comparisons of the shared double input with constants found here by bisection over the doubles
themselves (ordered by their bit patterns), each checked against `TensorQuant.quantize` on both
sides of the step.
"""

from __future__ import annotations

import numpy as np

from qverify.errors import QverifyError
from qverify.network.qparams import TensorQuant

_SIGN = np.int64(-(2**63))
_MAGNITUDE = np.int64(2**63 - 1)


def _keys(x: np.ndarray) -> np.ndarray:
    """Doubles as int64 keys in the doubles' order (-0.0 and +0.0 both 0)."""
    bits = np.asarray(x, dtype=np.float64).view(np.int64)
    return np.where(bits < 0, -(bits & _MAGNITUDE), bits)


def _doubles(keys: np.ndarray) -> np.ndarray:
    keys = np.asarray(keys, dtype=np.int64)
    bits = np.where(keys < 0, (-keys) | _SIGN, keys)
    return bits.view(np.float64)


def code_thresholds(quant: TensorQuant) -> dict[int, float]:
    """T_k for every code k in (qmin, qmax]: the smallest double x with quant.quantize(x) >= k."""
    codes = np.arange(quant.code.qmin + 1, quant.code.qmax + 1, dtype=np.int64)
    below = np.nextafter((codes - quant.zero_point - 1.5) * quant.scale, -np.inf)  # Q < k here
    above = np.nextafter((codes - quant.zero_point + 0.5) * quant.scale, np.inf)  # Q >= k here
    if np.any(quant.quantize(below) >= codes) or np.any(quant.quantize(above) < codes):
        raise QverifyError(f"QuantizeLinear with {quant.describe()}: a code step lies outside its bracket")
    lo, hi = _keys(below), _keys(above)  # invariant: Q(lo) < k <= Q(hi)
    while np.any(hi - lo > 1):
        mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)  # floor((lo + hi) / 2) without overflow
        reached = quant.quantize(_doubles(mid)) >= codes
        hi, lo = np.where(reached, mid, hi), np.where(reached, lo, mid)
    thresholds = _doubles(hi)
    if np.any(quant.quantize(thresholds) < codes) or np.any(quant.quantize(_doubles(hi - 1)) >= codes):
        raise QverifyError(f"QuantizeLinear with {quant.describe()}: bisection left a code step unresolved")
    return {int(k): float(t) for k, t in zip(codes, thresholds)}
