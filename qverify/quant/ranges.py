"""Range analysis: how many integer bits a network needs, and which neurons can overflow.

The thesis' rule picks the smallest k such that no value of the network can leave the word range.
qverify starts from the real network's bounds (neurons, weights, biases, inputs) and then confirms
the choice on the implemented arithmetic itself (partial sums in the layout's order, rounding of
each product, the tables): k grows until the implementation bounds prove that nothing overflows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from qverify.errors import RangeError
from qverify.network import Network
from qverify.network.operators import operator_of
from qverify.quant.fixed import MAX_WORD_BITS, FixedFormat, Overflow, quantize_real, round_real_to_int
from qverify.quant.intervals import implementation_bounds, real_bounds
from qverify.quant.network import ImplementationOptions, QuantizedNetwork, quantize_network
from qverify.quant.simulate import neuron_name


@dataclass(frozen=True, slots=True)
class IntBitsProposal:
    """The smallest safe k for a given l, with the value that needs it."""

    int_bits: int
    frac_bits: int
    real_int_bits: int  # what the real network's bounds alone require
    max_magnitude: float  # the largest |value| of the real network over the box
    binding: str  # where that value occurs, e.g. "layer 3, neuron 17 (pre-activation)"


def bits_for_magnitude(magnitude: float, frac_bits: int) -> int:
    """Smallest k such that [-magnitude, magnitude] fits <k,l> (sign bit included)."""
    k = 1
    while magnitude > (1 << (k - 1)) - 2.0**-frac_bits and k < 64:
        k += 1
    return k


def largest_real_value(net: Network, lo: np.ndarray, hi: np.ndarray) -> tuple[float, str]:
    """max |value| over inputs, weights, biases and every neuron's bounds, and where it occurs."""
    candidates = [(float(np.max(np.abs(np.concatenate([lo, hi])))), "input box")]
    for index, (layer, bounds) in enumerate(zip(net.layers, real_bounds(net, lo, hi)), start=1):
        for values, what in operator_of(layer).constants(layer):  # (an average pool's: its reciprocals)
            candidates.append((float(np.max(np.abs(values))), f"layer {index} {what}"))
        for kind, values in (
            ("pre-activation", (bounds.pre_lo, bounds.pre_hi)),
            ("post-activation", (bounds.post_lo, bounds.post_hi)),
        ):
            magnitude = np.maximum(np.abs(values[0]), np.abs(values[1]))
            neuron = int(np.argmax(magnitude))
            candidates.append((float(magnitude[neuron]), f"layer {index}, neuron {neuron} ({kind})"))
    return max(candidates, key=lambda item: item[0])


def input_box_words(lo: np.ndarray, hi: np.ndarray, fmt: FixedFormat) -> tuple[np.ndarray, np.ndarray]:
    """The words the input stage gives for the float64 box [lo, hi] (`qverify.quant.inputs`: the
    format's rounding of x * 2^l, exact for a float64 x), cut to the word range: never empty for
    lo <= hi."""
    lo_q = round_real_to_int(np.ldexp(np.asarray(lo, dtype=np.float64), fmt.frac_bits), fmt.rounding)
    hi_q = round_real_to_int(np.ldexp(np.asarray(hi, dtype=np.float64), fmt.frac_bits), fmt.rounding)
    return (
        np.clip(lo_q, fmt.min_q, fmt.max_q).astype(np.int64),
        np.clip(hi_q, fmt.min_q, fmt.max_q).astype(np.int64),
    )


def overflow_sites(qnet: QuantizedNetwork, lo_q: np.ndarray, hi_q: np.ndarray) -> list[str]:
    """Names of the neurons whose computation may overflow for inputs in the integer box."""
    sites, offset = [], 0
    for bounds in implementation_bounds(qnet, lo_q, hi_q):
        sites.extend(neuron_name(qnet, offset + int(j)) for j in np.flatnonzero(bounds.may_overflow))
        offset += bounds.may_overflow.size
    return sites


SHOWN_SITES = 3  # neurons named in the overflow warning


# what the generated C does where a result leaves the word range (`models_c/fxp.h`), and what that
# means for a verdict, which is about that C (the engine and ESBMC decide the C as it computes)
OVERFLOW_IN_C = {
    Overflow.SATURATE: "where one does, the C saturates it to the word range",
    Overflow.WRAP: "where one does, the C wraps it around (two's complement)",
    Overflow.DETECT: "where one does, the C's overflow assertion fails",
}
OVERFLOW_IN_VERDICT = {
    Overflow.SATURATE: "the verdict is about that C, saturation included",
    Overflow.WRAP: "the verdict is about that C, wrap-around included",
    Overflow.DETECT: "an overflow is a violation: SAFE means none occurs in the box, UNSAFE names it",
}


def overflow_warnings(
    qnet: QuantizedNetwork, lo: np.ndarray, hi: np.ndarray, verdict: bool = False
) -> list[str]:
    """The warnings of a fixed-point network over the real input box [lo, hi]: inputs beyond the
    word range, and one line counting the neurons that can overflow (naming the first few: interval
    bounds over a whole box flag many, and a line each buried the verdict), saying what the C does
    then and, with `verdict` (a verification's warning, next to its SAFE or UNSAFE), whether the
    verdict accounts for it: it does, in every overflow mode."""
    if not qnet.is_fixed:
        return []
    fmt: FixedFormat = qnet.number  # type: ignore[assignment]
    messages = []
    _, outside = quantize_real(np.concatenate([lo, hi]), replace(fmt, overflow=Overflow.SATURATE))
    if outside.any():
        messages.append(f"the input box exceeds the range of {fmt}; inputs are limited to the word range")
    lo_q, hi_q = input_box_words(lo, hi, fmt)
    sites = overflow_sites(qnet, lo_q, hi_q)
    if sites:  # one line, however many: interval bounds over a whole box flag many neurons
        shown = "; ".join(sites[:SHOWN_SITES]) + ("; ..." if len(sites) > SHOWN_SITES else "")
        count = f"{len(sites)} neurons" if len(sites) > 1 else "1 neuron"
        consequence = OVERFLOW_IN_C[fmt.overflow] + (
            f"; {OVERFLOW_IN_VERDICT[fmt.overflow]}" if verdict else ""
        )
        messages.append(
            f"{count} can overflow {fmt} by interval bounds over the input box (which may overestimate): "
            f"{shown}; {consequence}"
        )
    return messages


def propose_int_bits(
    net: Network, lo: np.ndarray, hi: np.ndarray, frac_bits: int, options: ImplementationOptions | None = None
) -> IntBitsProposal:
    """The smallest k such that <k, frac_bits> cannot overflow anywhere for inputs in [lo, hi].

    Raises RangeError if even a 32-bit word cannot hold the network at this l.
    """
    magnitude, where = largest_real_value(net, np.asarray(lo, float), np.asarray(hi, float))
    real_k = bits_for_magnitude(magnitude, frac_bits)
    options = options or ImplementationOptions()
    base = options.number if isinstance(options.number, FixedFormat) else FixedFormat(16, 16)
    for k in range(max(1, real_k - 1), MAX_WORD_BITS - frac_bits + 1):
        if k + frac_bits < 2:
            continue
        fmt = FixedFormat(k, frac_bits, base.rounding, Overflow.DETECT)
        try:
            qnet = quantize_network(net, replace(options, number=fmt))
        except RangeError:
            continue  # a constant does not fit yet
        lo_q, hi_q = input_box_words(lo, hi, fmt)
        if not overflow_sites(qnet, lo_q, hi_q):
            return IntBitsProposal(k, frac_bits, real_k, magnitude, where)
    raise RangeError(
        f"no format with {frac_bits} fractional bits and at most {MAX_WORD_BITS} bits holds this network "
        f"({where} reaches |{magnitude:.6g}|, needing {real_k} integer bits)"
    )


def choose_format(
    net: Network, word_bits: int, lo: np.ndarray, hi: np.ndarray, options: ImplementationOptions | None = None
) -> tuple[FixedFormat, str]:
    """The `word_bits`-bit format with the most fractional bits that cannot overflow on [lo, hi].

    This is the thesis' rule ("integer bits from the range analysis") for a given word length. When
    no split of the word is overflow-free, the integer bits are those the real network needs, capped
    at word_bits - 1, and the returned note says that overflow handling will apply.
    Rounding and overflow mode come from `options.number` when it is fixed point.
    """
    options = options or ImplementationOptions()
    base = options.number if isinstance(options.number, FixedFormat) else FixedFormat(16, 16)
    for frac_bits in range(word_bits - 1, -1, -1):
        try:
            proposal = propose_int_bits(net, lo, hi, frac_bits, options)
        except RangeError:
            continue
        if proposal.int_bits + frac_bits <= word_bits:
            return FixedFormat(word_bits - frac_bits, frac_bits, base.rounding, base.overflow), ""
    magnitude, where = largest_real_value(net, np.asarray(lo, float), np.asarray(hi, float))
    int_bits = min(bits_for_magnitude(magnitude, 0), word_bits - 1)
    fmt = FixedFormat(int_bits, word_bits - int_bits, base.rounding, base.overflow)
    return fmt, (
        f"no {word_bits}-bit format avoids overflow ({where} reaches |{magnitude:.6g}|): "
        f"using {fmt}, where {base.overflow.value} applies"
    )


def resolve_word_length(
    net: Network, word_bits: int, options: ImplementationOptions
) -> tuple[ImplementationOptions, str]:
    """`options` at the `word_bits`-bit format `choose_format` picks over the network's whole input
    domain (not a property's box: every property of a network then runs on the same C, as a device
    would ship it), and the note `choose_format` gives when no split avoids overflow."""
    lo, hi = net.default_input_box()
    fixed, note = choose_format(net, word_bits, lo, hi, options)
    return replace(options, number=fixed), note


__all__ = [
    "IntBitsProposal",
    "bits_for_magnitude",
    "choose_format",
    "input_box_words",
    "largest_real_value",
    "overflow_sites",
    "overflow_warnings",
    "propose_int_bits",
    "resolve_word_length",
]
