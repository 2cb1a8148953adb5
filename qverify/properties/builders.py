"""Properties built from a centre point, and unit conversion.

- `robustness`: the L-inf ball [c - eps, c + eps] (clipped to a domain); unsafe = some other class
  scores at least as high as the label (`Y_j - Y_label >= 0`: a tie is a violation, because a
  correct classification must be strict), or, targeted, the target class does.
- `hyper_rectangle` (the thesis' R_s): input i in c_i +- s% * (hi_i - lo_i) / 2, i.e. a box whose
  width is s% of the input's range, centred on c and clipped to the domain.
- `hypercube` (the thesis' L_s): every input in c_i +- side/2, clipped to the domain.
- `to_normalised`: a property stated in raw NNet units, converted exactly to the normalised units
  the network core and the generated C use.

All bounds are exact `Fraction`s. Floats are converted with `Fraction(float)`, i.e. their exact
binary value (0.1 is 3602879701896397/2^55): a float centre is a point of the float grid, and that
point, not the decimal the user typed, is what the box is built around.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from numbers import Rational
from pathlib import Path
from typing import overload

import numpy as np

from qverify.errors import InputError
from qverify.input_limits import check_file, check_literal
from qverify.network.model import Network
from qverify.properties.model import (
    Atom,
    Box,
    Clause,
    OutputCondition,
    Property,
    PropertyCases,
    Relation,
    RobustnessInfo,
    Units,
)

__all__ = [
    "default_domain",
    "exact",
    "hyper_rectangle",
    "hypercube",
    "read_center",
    "robustness",
    "to_normalised",
    "to_raw",
]

Number = float | int | Fraction | np.floating | np.integer
Vector = Sequence[Number] | np.ndarray
Domain = tuple[Vector, Vector]

# example: "0.5", "-1e-3", "3.", ".25", "1/255" (a decimal or a ratio, read exactly)
_NUMBER_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,3})?(/\d+)?$")
# example separators: "0.1, 0.2 0.3;0.4" -> four values
_SEPARATORS = re.compile(r"[,\s;]+")


_FLOAT64_MAX = Fraction(np.finfo(np.float64).max)


def exact(value: Number | str, what: str = "value") -> Fraction:
    """The exact rational value: Fractions and ints as they are, floats by their binary value,
    strings by their decimal text ("0.1" -> 1/10, "1/255" -> 1/255).

    :raises InputError: not a finite real number.
    """
    if isinstance(value, bool):
        raise InputError(f"{what}: expected a number, got a boolean")
    if isinstance(value, Rational):
        return Fraction(value)
    if isinstance(value, str):
        text = value.strip()
        check_literal(text, what)
        if not _NUMBER_TEXT.match(text) or text.endswith("/0"):
            raise InputError(f"{what}: '{value}' is not a number")
        result = Fraction(text)
        if abs(result) > _FLOAT64_MAX:  # every later stage computes with it in float64: inf there
            raise InputError(
                f"{what}: '{value}' is beyond float64's range (about 1.8e308): it would be infinite"
            )
        return result
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            raise InputError(f"{what}: {value} is not finite")
        return Fraction(float(value))
    if isinstance(value, np.integer):
        return Fraction(int(value))
    raise InputError(f"{what}: expected a number, got {type(value).__name__}")


def _vector(values: Vector, what: str, size: int | None = None) -> tuple[Fraction, ...]:
    flat = values.reshape(-1) if isinstance(values, np.ndarray) else list(values)
    result = tuple(exact(v, f"{what}[{i}]") for i, v in enumerate(flat))
    if size is not None and len(result) != size:
        raise InputError(f"{what} has {len(result)} values, expected {size}")
    return result


def _domain(domain: Domain | None, size: int) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]] | None:
    if domain is None:
        return None
    if len(domain) != 2:
        raise InputError("domain: expected a pair (lo, hi) of vectors")
    lo, hi = _vector(domain[0], "domain lo", size), _vector(domain[1], "domain hi", size)
    for index, (low, high) in enumerate(zip(lo, hi)):
        if low > high:
            raise InputError(f"domain: input {index} has lo {float(low)} > hi {float(high)}")
    return lo, hi


def _clipped_box(
    center: tuple[Fraction, ...],
    half_widths: Sequence[Fraction],
    domain: tuple[tuple[Fraction, ...], tuple[Fraction, ...]] | None,
) -> Box:
    """[c - h, c + h] intersected with the domain; a centre outside the domain can make it empty."""
    lo = [c - h for c, h in zip(center, half_widths)]
    hi = [c + h for c, h in zip(center, half_widths)]
    if domain is not None:
        lo = [max(value, bound) for value, bound in zip(lo, domain[0])]
        hi = [min(value, bound) for value, bound in zip(hi, domain[1])]
    for index, (low, high) in enumerate(zip(lo, hi)):
        if low > high:
            raise InputError(
                f"input {index}: centre {float(center[index])} is farther than the radius from the "
                f"domain [{float(domain[0][index])}, {float(domain[1][index])}]: the clipped box is empty"
            )
    return Box(tuple(lo), tuple(hi))


def _misclassification(label: int, n_outputs: int, target: int | None) -> OutputCondition:
    """Unsafe: Y_j - Y_label >= 0 for some j != label (or j = target only)."""
    if not isinstance(n_outputs, int) or n_outputs < 1:
        raise InputError(f"n_outputs must be a positive integer, got {n_outputs!r}")
    for what, value in (("label", label), ("target", target)):
        if value is not None and (not isinstance(value, (int, np.integer)) or not 0 <= value < n_outputs):
            raise InputError(f"{what} {value!r} is not an output index 0..{n_outputs - 1}")
    if target is not None and target == label:
        raise InputError(f"target {target} equals the label: a targeted attack needs another class")
    others = [int(target)] if target is not None else [j for j in range(n_outputs) if j != label]
    return OutputCondition(
        tuple(
            Clause(
                (
                    Atom(
                        tuple(sorted([(j, Fraction(1)), (int(label), Fraction(-1))])),
                        Fraction(0),
                        Relation.GE,
                    ),
                )
            )
            for j in others
        )
    )


def _text(value: Number | str) -> str:
    """How a radius was given, for names and RobustnessInfo: 0.05 -> "0.05", Fraction(1, 3) -> "1/3"."""
    return repr(float(value)) if isinstance(value, (float, np.floating)) else str(value)


def _build(
    kind: str,
    half_widths: Sequence[Fraction],
    radius: str,
    label: int,
    n_outputs: int,
    domain: tuple[tuple[Fraction, ...], tuple[Fraction, ...]] | None,
    target: int | None,
    name: str | None,
    units: Units,
    center_exact: tuple[Fraction, ...],
) -> Property:
    unsafe = _misclassification(label, n_outputs, target)
    box = _clipped_box(center_exact, half_widths, domain)
    attack = f"-target{target}" if target is not None else ""
    return Property(
        name=name or f"{kind}-label{label}{attack}-{radius.replace(' ', '-')}",
        boxes=(box,),
        unsafe=unsafe,
        units=units,
        robustness=RobustnessInfo(tuple(float(c) for c in center_exact), int(label), target, radius),
        source=kind,
    )


def robustness(
    center: Vector,
    eps: Number | str,
    label: int,
    n_outputs: int,
    domain: Domain | None = None,
    target: int | None = None,
    name: str | None = None,
    units: Units = Units.NORMALISED,
) -> Property:
    """Local robustness in the L-inf ball of radius `eps` around `center`, clipped to `domain`.

    >>> p = robustness([0.5, 0.0], 0.25, label=1, n_outputs=3, domain=([0, 0], [1, 1]))
    >>> p.boxes[0].lo, [c.text() for c in p.unsafe.clauses]
    ((Fraction(1, 4), Fraction(0, 1)), ['(Y_0 - Y_1 >= 0)', '(-Y_1 + Y_2 >= 0)'])

    :raises InputError: negative eps, label/target out of range, target == label, wrong sizes, or a
        centre so far outside the domain that the clipped box is empty.
    """
    center_exact = _vector(center, "center")
    radius = exact(eps, "eps")
    if radius < 0:
        raise InputError(f"eps {float(radius)} is negative")
    bounds = _domain(domain, len(center_exact))
    half = [radius] * len(center_exact)
    return _build(
        "robustness",
        half,
        f"linf eps={_text(eps)}",
        label,
        n_outputs,
        bounds,
        target,
        name,
        units,
        center_exact,
    )


def hyper_rectangle(
    center: Vector,
    percent: Number | str,
    label: int,
    n_outputs: int,
    domain: Domain,
    target: int | None = None,
    name: str | None = None,
    units: Units = Units.NORMALISED,
) -> Property:
    """The thesis' R_s: input i in [c_i - s%*r_i/2, c_i + s%*r_i/2], r_i = hi_i - lo_i of `domain`.

    The box's total width is s% of each input's range, centred on c, then clipped to the domain:
    10% of [0, 1] around 0.5 is [0.45, 0.55].

    :raises InputError: as `robustness`, and a percentage outside [0, 100].
    """
    center_exact = _vector(center, "center")
    share = exact(percent, "percent")
    if not 0 <= share <= 100:
        raise InputError(f"percent {float(share)} is outside [0, 100]")
    bounds = _domain(domain, len(center_exact))
    if bounds is None:
        raise InputError("hyper_rectangle needs a domain: its widths are a share of each input's range")
    half = [share / 100 * (high - low) / 2 for low, high in zip(*bounds)]
    return _build(
        "hyperrectangle",
        half,
        f"R_s s={_text(percent)}%",
        label,
        n_outputs,
        bounds,
        target,
        name,
        units,
        center_exact,
    )


def hypercube(
    center: Vector,
    side: Number | str,
    label: int,
    n_outputs: int,
    domain: Domain | None = None,
    target: int | None = None,
    name: str | None = None,
    units: Units = Units.NORMALISED,
) -> Property:
    """The thesis' L_s: every input in [c_i - side/2, c_i + side/2] (side in the centre's units,
    e.g. pixel levels for a raw image), clipped to `domain`.

    :raises InputError: as `robustness`, and a negative side.
    """
    center_exact = _vector(center, "center")
    width = exact(side, "side")
    if width < 0:
        raise InputError(f"side {float(width)} is negative")
    bounds = _domain(domain, len(center_exact))
    half = [width / 2] * len(center_exact)
    return _build(
        "hypercube",
        half,
        f"L_s side={_text(side)}",
        label,
        n_outputs,
        bounds,
        target,
        name,
        units,
        center_exact,
    )


# ---------------------------------------------------------------- units


def raw_domain(net: Network) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]] | None:
    """The net's input clip box [min, max] in raw units, exactly, or None when a bound is infinite
    (or the net has no input normalisation): the one test of "has a finite input domain"."""
    norm = net.input_norm
    if norm is None or not (np.all(np.isfinite(norm.minimum)) and np.all(np.isfinite(norm.maximum))):
        return None
    return tuple(Fraction(float(v)) for v in norm.minimum), tuple(Fraction(float(v)) for v in norm.maximum)


def domain_in_units(net: Network, units: Units) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]] | None:
    """The input domain a built property is clipped to, in the property's units."""
    return raw_domain(net) if units is Units.RAW else default_domain(net)


def default_domain(net: Network) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
    """The net's normalised default input box, exactly: ((min - mean)/range, (max - mean)/range)
    from the float normalisation values when all are finite, else [0, 1] per input (as
    `Network.default_input_box`, computed here without float rounding)."""
    norm = net.input_norm
    if norm is None or raw_domain(net) is None:
        return (Fraction(0),) * net.n_inputs, (Fraction(1),) * net.n_inputs
    images = [
        sorted(
            (Fraction(float(bound)) - Fraction(float(mean))) / Fraction(float(scale)) for bound in (low, high)
        )
        for low, high, mean, scale in zip(norm.minimum, norm.maximum, norm.mean, norm.range)
    ]
    return tuple(image[0] for image in images), tuple(image[1] for image in images)


def _normalised_box(box: Box, net: Network) -> Box:
    """x_norm = (clip(x, min, max) - mean) / range per bound; clipping first is NNet semantics, so a
    box entirely outside [min, max] collapses onto the clipped boundary."""
    norm = net.input_norm
    if norm is None:
        return box
    lo, hi = [], []
    for index, (low, high) in enumerate(zip(box.lo, box.hi)):
        images = []
        for value in (low, high):
            if np.isfinite(norm.minimum[index]):
                value = max(value, Fraction(float(norm.minimum[index])))
            if np.isfinite(norm.maximum[index]):
                value = min(value, Fraction(float(norm.maximum[index])))
            images.append((value - Fraction(float(norm.mean[index]))) / Fraction(float(norm.range[index])))
        lo.append(min(images))
        hi.append(max(images))
    return Box(tuple(lo), tuple(hi))


def _normalised_atom(atom: Atom, net: Network) -> Atom:
    """y_raw = y_norm * range + mean: coefficient a_i -> a_i * range_i, constant += a_i * mean_i."""
    norm = net.output_norm
    if norm is None:
        return atom
    means = np.broadcast_to(norm.mean, (net.n_outputs,))
    ranges = np.broadcast_to(norm.range, (net.n_outputs,))
    terms = tuple((i, c * Fraction(float(ranges[i]))) for i, c in atom.terms)
    constant = atom.constant + sum((c * Fraction(float(means[i])) for i, c in atom.terms), Fraction(0))
    return Atom(terms, constant, atom.relation)


def _conversion_note(net: Network) -> str:
    if net.input_norm is None and net.output_norm is None:
        return f"raw units are normalised units for {net.name} (it has no normalisation)"
    return f"converted from raw units with the normalisation of {net.name}"


def _raw_box(box: Box, net: Network) -> Box:
    """x = x_norm * range + mean per bound (the inverse of `_normalised_box` inside [min, max])."""
    norm = net.input_norm
    if norm is None:
        return box
    scale = [(Fraction(float(r)), Fraction(float(m))) for r, m in zip(norm.range, norm.mean)]
    return Box(
        tuple(v * r + m for v, (r, m) in zip(box.lo, scale)),
        tuple(v * r + m for v, (r, m) in zip(box.hi, scale)),
    )


def _raw_atom(atom: Atom, net: Network) -> Atom:
    """y_norm = (y_raw - mean) / range: coefficient a_i -> a_i / range_i, constant -= a_i mean_i / range_i."""
    norm = net.output_norm
    if norm is None:
        return atom
    means = np.broadcast_to(norm.mean, (net.n_outputs,))
    ranges = np.broadcast_to(norm.range, (net.n_outputs,))
    terms = tuple((i, c / Fraction(float(ranges[i]))) for i, c in atom.terms)
    constant = atom.constant - sum(
        (c * Fraction(float(means[i])) / Fraction(float(ranges[i])) for i, c in atom.terms), Fraction(0)
    )
    return Atom(terms, constant, atom.relation)


def to_raw(prop: Property | PropertyCases, net: Network) -> Property | PropertyCases:
    """A normalised `prop` in the raw units of the network's normalisation, exactly: what a VNN-LIB
    file about an ONNX graph that normalises must say (`to_normalised` reads it back to `prop`)."""
    if prop.units is Units.RAW:
        return prop
    if isinstance(prop, PropertyCases):
        return replace(prop, cases=tuple(to_raw(case, net) for case in prop.cases), units=Units.RAW)
    unsafe = OutputCondition(
        tuple(Clause(tuple(_raw_atom(atom, net) for atom in clause.atoms)) for clause in prop.unsafe.clauses)
    )
    return replace(
        prop, boxes=tuple(_raw_box(box, net) for box in prop.boxes), unsafe=unsafe, units=Units.RAW
    )


@overload
def to_normalised(prop: Property, net: Network) -> Property: ...


@overload
def to_normalised(prop: PropertyCases, net: Network) -> PropertyCases: ...


def to_normalised(prop: Property | PropertyCases, net: Network) -> Property | PropertyCases:
    """`prop` in normalised units: RAW properties are converted exactly with the net's NNet
    normalisation (Fractions of its float values); NORMALISED ones are returned unchanged. A
    property of cases is converted case by case.

    :raises InputError: the property does not fit the network's numbers of inputs/outputs.
    """
    if prop.units is Units.NORMALISED:
        return prop
    if isinstance(prop, PropertyCases):
        cases = tuple(to_normalised(case, net) for case in prop.cases)
        return replace(prop, cases=cases, units=Units.NORMALISED, notes=prop.notes + (_conversion_note(net),))
    prop.check_against(net.n_inputs, net.n_outputs)
    unsafe = OutputCondition(
        tuple(
            Clause(tuple(_normalised_atom(atom, net) for atom in clause.atoms))
            for clause in prop.unsafe.clauses
        )
    )
    robust = prop.robustness
    if robust is not None and net.input_norm is not None:
        center = net.input_norm.apply(np.array(robust.center))
        robust = replace(robust, center=tuple(float(v) for v in center))
    return replace(
        prop,
        boxes=tuple(_normalised_box(box, net) for box in prop.boxes),
        unsafe=unsafe,
        units=Units.NORMALISED,
        robustness=robust,
        notes=prop.notes + (_conversion_note(net),),
    )


# ---------------------------------------------------------------- centres from text and files


def _numbers_from_text(text: str, where: str) -> list[Fraction]:
    """Exact values from "0.1, 0.2 0.3" (commas, spaces, semicolons or newlines between)."""
    tokens = [token for token in _SEPARATORS.split(text.strip()) if token]
    return [exact(token, f"{where}: value {position}") for position, token in enumerate(tokens, start=1)]


def _numbers_from_file(path: Path) -> list[Fraction]:
    """A .npy array, or a .txt/.csv file with one or more numbers per line ('#' starts a comment)."""
    check_file(path)
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as error:
            raise InputError(f"{path}: cannot read as .npy: {error}") from None
        if array.dtype.kind not in "iuf":
            raise InputError(f"{path}: expected a numeric array, got dtype {array.dtype}")
        return [
            exact(v.item() if hasattr(v, "item") else v, f"{path}: value {i}")
            for i, v in enumerate(array.reshape(-1))
        ]
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None
    values: list[Fraction] = []
    for number, line in enumerate(text.splitlines(), start=1):
        values.extend(_numbers_from_text(line.split("#", 1)[0], f"{path}:{number}"))
    return values


def _is_file(text: str) -> bool:
    """Does `text` name an existing file? (False for "0.1, 0.2, ...", however long.)"""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long for the file system, or holding NUL
        return False


def read_center(text_or_path: str | Path, n_inputs: int) -> tuple[Fraction, ...]:
    """A centre point from "0.1,0.2,..." or from a file (.txt/.csv numbers, or .npy), exactly.

    A `Path`, or a string naming an existing file, is read as a file; any other string is parsed
    as numbers.

    :raises InputError: a value that is not a number, a missing file, or not `n_inputs` values.
    """
    if isinstance(text_or_path, Path) or _is_file(text_or_path):
        path = Path(text_or_path)
        if not path.is_file():
            raise InputError(f"{path}: no such file")
        values, where = _numbers_from_file(path), str(path)
    else:
        text = str(text_or_path)
        if re.search(r"\.(npy|txt|csv)$", text.strip(), re.IGNORECASE):
            raise InputError(f"{text}: no such file")
        values, where = _numbers_from_text(text, "center"), "center"
    if len(values) != n_inputs:
        raise InputError(f"{where}: {len(values)} values, the network has {n_inputs} inputs")
    return tuple(values)
