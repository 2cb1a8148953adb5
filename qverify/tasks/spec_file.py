"""qverify's own spec file: one verification task in TOML (`qverify verify --spec task.toml`).

A spec names the network, the property, how the network is implemented and how to verify it.
Paths are relative to the spec file. The full reference, with every key and default, is
`docs/spec-format.md`; in short:

    name = "acas-1-1-phi1"                  # optional (default: the spec file's stem)
    network = "../acasxu/nnet/ACASXU_run2a_1_1_batch_2000.nnet"
    image_shape = [5, 5]                    # optional: counterexample pictures; product = n_inputs

    [property]                              # exactly one of `vnnlib` and `kind`
    vnnlib = "prop_1.vnnlib"
    units = "normalised"                    # or "raw" (NNet units; converted exactly on reading)
    # kind = "robustness" (eps) | "hyperrectangle" (percent) | "hypercube" (side)
    # center = [0.1, 0.2, ...] or "center.txt"; label = 3; target = 5 (optional)
    # domain = "network" (default) | "none" | [[lo, ...], [hi, ...]]

    [implementation]                        # optional; these are the defaults
    format = "16.16"                        # "K.L" fixed point, or "float" / "double"
    rounding = "nearest"                    # floor        (fixed point only)
    overflow = "saturate"                   # wrap | detect (fixed point only)
    accumulate = "per-op"                   # wide
    layout = "sequential"                   # balanced
    lut_res = 2                             # or lut_eps = 0.01; lut_range = 6 (optional)

    [verify]                                # optional; passed to the back end, validated here
    backend = "internal"                    # esbmc
    timeout = 60                            # seconds
    memory_mb = 4096
    intervals = "auto"                      # framac | builtin | none
    solver = "milp"                         # bitwuzla | z3
    certify = false
    esbmc = "/path/to/esbmc"                # optional (relative paths: to the spec file)
    esbmc_args = []

`Spec.property` is always in normalised units (a raw property is converted with
`to_normalised`), so later stages never see raw numbers. Every problem is an InputError of the
form `spec.toml: [section] key: what is wrong`.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

from qverify.errors import InputError, QverifyError
from qverify.input_limits import check_file, check_numerals
from qverify.invariants import IntervalMethod
from qverify.io import load_network
from qverify.network.model import Network
from qverify.properties.builders import (
    domain_in_units,
    exact,
    hyper_rectangle,
    hypercube,
    read_center,
    robustness,
    to_normalised,
)
from qverify.properties.model import Property, PropertyCases, Units
from qverify.properties.vnnlib import read_vnnlib_cases
from qverify.quant import (
    FORMAT_HELP,
    Accumulation,
    ImplementationOptions,
    Layout,
    Overflow,
    Rounding,
    parse_number_format,
)
from qverify.tasks.model import (
    Backend,
    Origin,
    Solver,
    TaskOptions,
    check_fixed_only,
    memory_problem,
    resolve_options,
    timeout_problem,
)
from qverify.vocabulary import choices

__all__ = ["Spec", "read_spec"]

_TOP_KEYS = ("name", "network", "image_shape", "property", "implementation", "verify")
_RADIUS_KEY = {"robustness": "eps", "hyperrectangle": "percent", "hypercube": "side"}
_BUILDERS = {"robustness": robustness, "hyperrectangle": hyper_rectangle, "hypercube": hypercube}
_BUILDER_KEYS = ("kind", "center", "label", "target", "units", "domain")
_IMPLEMENTATION_KEYS = (
    "format",
    "rounding",
    "overflow",
    "accumulate",
    "layout",
    "lut_res",
    "lut_eps",
    "lut_range",
)


@dataclass(frozen=True, slots=True)
class Spec:
    """One verification task, read and validated from a spec file."""

    name: str
    network_path: Path
    property: Property | PropertyCases  # always normalised units
    implementation: ImplementationOptions
    given: Mapping[str, Any] = field(default_factory=dict)  # TaskOptions fields the spec sets
    image_shape: tuple[int, ...] | None = None
    source: str = ""  # the spec file

    @property
    def options(self) -> TaskOptions:
        """The spec's options over the defaults (the command line may override them)."""
        return resolve_options((Origin.SPEC, self.given)).options


class _Table:
    """One TOML table with its place in the spec, for typed look-ups and `file: [section] key:` errors."""

    def __init__(self, spec: str, section: str, values: Mapping[str, Any]) -> None:
        self.spec = spec
        self.section = section
        self.values = values

    def error(self, key: str, message: str) -> InputError:
        where = f"[{self.section}] {key}" if self.section else key
        return InputError(f"{self.spec}: {where}: {message}")

    def check_keys(self, allowed: tuple[str, ...], context: str = "") -> None:
        for key in self.values:
            if key not in allowed:
                raise self.error(key, f"unknown key{context} (allowed: {', '.join(allowed)})")

    def get(self, key: str, kind: type | tuple[type, ...], what: str, default: Any = None) -> Any:
        """The value of `key` if it has the TOML type `kind` (booleans are never numbers)."""
        if key not in self.values:
            return default
        value = self.values[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise self.error(key, f"expected {what}, got {_show(value)}")
        return value

    def require(self, key: str, kind: type | tuple[type, ...], what: str) -> Any:
        if key not in self.values:
            raise self.error(key, f"missing: expected {what}")
        return self.get(key, kind, what)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.get(key, str, "one of " + " | ".join(choices), default)
        if value not in choices:
            raise self.error(key, f"'{value}' is not one of {' | '.join(choices)}")
        return value

    def number(self, key: str, default: Any = None, required: bool = False) -> Fraction | None:
        """An int, float or exact decimal string ("1/255", "0.1") as a Fraction."""
        what = 'a number (or an exact decimal string like "0.1")'
        value = (
            self.require(key, (int, float, str), what) if required else self.get(key, (int, float, str), what)
        )
        if value is None:
            return default
        try:
            return exact(value, key)
        except InputError as error:
            raise self.error(key, str(error).removeprefix(f"{key}: ")) from None

    def table(self, key: str) -> _Table:
        values = self.get(key, dict, f"a table [{key}]", {})
        return _Table(self.spec, key, values)

    def path(self, key: str, base: Path) -> Path:
        """A file named relative to the spec file; it must exist."""
        text = self.require(key, str, "a file path (relative to the spec file)")
        path = Path(text).expanduser()
        path = (path if path.is_absolute() else base / path).resolve()
        if not path.is_file():
            raise self.error(key, f"no such file: {path}")
        return path


def _show(value: Any) -> str:
    """A value and its TOML type for messages: `0.8 (float)`."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array", dict: "table"}
    return f"{value!r} ({names.get(type(value), type(value).__name__)})"


def _wrapped(table: _Table, key: str, error: QverifyError) -> QverifyError:
    """The same error type, prefixed with where in the spec it came from."""
    return type(error)(str(table.error(key, str(error))))


# ---------------------------------------------------------------- top level


def read_spec(path: str | Path) -> Spec:
    """Read, validate and build a spec (the network is loaded to check shapes and size builders).

    :raises InputError: unreadable file, TOML syntax error (with tomllib's line and column), an
        unknown key, a value of the wrong type or outside its choices, a missing file, a property
        that does not fit the network. Messages read `spec.toml: [section] key: what is wrong`.
    :raises UnsupportedError: the network or property uses constructs qverify does not handle.
    """
    spec = str(path)
    check_file(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
        check_numerals(text, spec)
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise InputError(f"{spec}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{spec}: cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{spec}: TOML syntax error: {error}") from None
    top = _Table(spec, "", data)
    top.check_keys(_TOP_KEYS)
    base = Path(path).resolve().parent
    name = top.get("name", str, "a string", Path(path).stem)
    network_path = top.path("network", base)
    try:
        net = load_network(network_path)
    except QverifyError as error:
        raise _wrapped(top, "network", error) from None
    if "property" not in data:
        raise top.error("property", "missing: expected a [property] table with `vnnlib` or `kind`")
    prop = _property(top.table("property"), net, base)
    implementation_table = top.table("implementation")
    implementation = _implementation_values(implementation_table)
    return Spec(
        name=name,
        network_path=network_path,
        property=prop,
        implementation=_implementation_of(implementation_table, implementation),
        given=MappingProxyType(implementation | _verify_values(top.table("verify"), base)),
        image_shape=_image_shape(top, net),
        source=spec,
    )


def _image_shape(top: _Table, net: Network) -> tuple[int, ...] | None:
    shape = top.get("image_shape", list, "an array of positive integers, e.g. [28, 28]")
    if shape is None:
        return None
    if not shape or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in shape):
        raise top.error("image_shape", f"expected an array of positive integers, got {shape!r}")
    if math.prod(shape) != net.n_inputs:
        raise top.error(
            "image_shape", f"{shape} holds {math.prod(shape)} pixels, the network has {net.n_inputs} inputs"
        )
    return tuple(shape)


# ---------------------------------------------------------------- [property]


def _property(table: _Table, net: Network, base: Path) -> Property | PropertyCases:
    """A VNN-LIB file or a builder, checked against the network, in normalised units."""
    if ("vnnlib" in table.values) == ("kind" in table.values):
        raise table.error(
            "vnnlib, kind",
            "give exactly one of 'vnnlib' (a VNN-LIB file) and 'kind' (robustness | hyperrectangle | hypercube)",
        )
    units = Units(table.choice("units", tuple(u.value for u in Units), Units.NORMALISED.value))
    if "vnnlib" in table.values:
        table.check_keys(("vnnlib", "units"), " with vnnlib")
        vnnlib_path = table.path("vnnlib", base)
        try:
            prop = read_vnnlib_cases(vnnlib_path, units=units, n_inputs=net.n_inputs, n_outputs=net.n_outputs)
        except QverifyError as error:
            raise _wrapped(table, "vnnlib", error) from None
    else:
        prop = _built_property(table, net, base, units)
    try:
        prop.check_against(net.n_inputs, net.n_outputs)
        return to_normalised(prop, net)
    except InputError as error:
        raise table.error("vnnlib" if "vnnlib" in table.values else "kind", str(error)) from None


def _built_property(table: _Table, net: Network, base: Path, units: Units) -> Property:
    kind = table.choice("kind", tuple(_BUILDERS), "robustness")
    radius_key = _RADIUS_KEY[kind]
    table.check_keys(_BUILDER_KEYS + (radius_key,), f" for kind '{kind}'")
    center = _center(table, net, base)
    label = table.require("label", int, "an output index (integer)")
    target = table.get("target", int, "an output index (integer)")
    radius = table.number(radius_key, required=True)
    domain = _builder_domain(table, net, units)
    try:
        return _BUILDERS[kind](
            center, radius, label, net.n_outputs, domain=domain, target=target, name=None, units=units
        )
    except InputError as error:
        raise table.error(
            _key_of(str(error), (radius_key, "label", "target", "domain", "center")), str(error)
        ) from None


def _key_of(message: str, keys: tuple[str, ...]) -> str:
    """The key a builder's message is about: "eps -1 is negative" -> "eps"; "input 3: centre ..." -> "center"."""
    for key in keys:
        if message.startswith(key):
            return key
    return "center" if message.startswith("input") else "kind"


def _center(table: _Table, net: Network, base: Path) -> tuple[Fraction, ...]:
    """`center = [..]` inline, or `center = "file"` (.txt/.csv/.npy, relative to the spec)."""
    value = table.require("center", (list, str), "an array of numbers or a file name")
    try:
        if isinstance(value, str):
            return read_center(table.path("center", base), net.n_inputs)
        if not all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value):
            raise InputError("expected numbers only")
        center = tuple(exact(v, f"value {i}") for i, v in enumerate(value))
    except InputError as error:
        raise table.error("center", str(error)) from None
    if len(center) != net.n_inputs:
        raise table.error("center", f"{len(center)} values, the network has {net.n_inputs} inputs")
    return center


def _builder_domain(table: _Table, net: Network, units: Units) -> tuple[tuple, tuple] | None:
    """ "network" (default): the net's input domain in the property's units; "none": no clipping;
    or explicit [[lo...], [hi...]]."""
    value = table.get("domain", (str, list), '"network", "none" or [[lo, ...], [hi, ...]]', "network")
    if isinstance(value, list):
        if len(value) != 2 or not all(isinstance(row, list) and len(row) == net.n_inputs for row in value):
            raise table.error("domain", f"expected [[lo, ...], [hi, ...]] with {net.n_inputs} values each")
        try:
            return tuple(tuple(exact(v, "domain") for v in row) for row in value)  # type: ignore[return-value]
        except InputError as error:
            raise table.error("domain", str(error)) from None
    if value not in ("network", "none"):
        raise table.error("domain", f"'{value}' is not one of network | none | [[lo, ...], [hi, ...]]")
    if value == "none":
        return None
    return domain_in_units(net, units)


# ---------------------------------------------------------------- [implementation]


def _implementation_values(table: _Table) -> dict[str, Any]:
    """The `TaskOptions` implementation fields the table gives, validated and typed."""
    table.check_keys(_IMPLEMENTATION_KEYS)
    values: dict[str, Any] = {}
    if "format" in table.values:
        text = table.get("format", str, f"a string: {FORMAT_HELP}")
        try:
            parse_number_format(text)
        except InputError as error:
            message = str(error) if f"'{text}'" in str(error) else f"'{text}': {error}"
            raise table.error("format", message) from None
        values["format"] = text
    for key, kind in (
        ("rounding", Rounding),
        ("overflow", Overflow),
        ("accumulate", Accumulation),
        ("layout", Layout),
    ):
        if key in table.values:
            values[key] = kind(table.choice(key, choices(kind), ""))
    fixed_only = check_fixed_only(values)
    if fixed_only is not None:
        raise table.error(fixed_only, f"applies to fixed-point formats only, not '{values['format']}'")
    if "lut_res" in table.values and "lut_eps" in table.values:
        raise table.error("lut_res, lut_eps", "give at most one of lut_res and lut_eps")
    for key, kind, what in (
        ("lut_res", int, "an integer number of decimal places (0..5)"),
        ("lut_eps", (int, float), "a number in (0, 1)"),
        ("lut_range", (int, float), "a number in (0, 64]"),
    ):
        value = table.get(key, kind, what)
        if value is not None:
            values[key] = value if key == "lut_res" else float(value)
    _implementation_of(table, values)  # every error now, with its key
    return values


_FLAG_KEYS = {
    "--lut-eps": "lut_eps",
    "--lut-res": "lut_res",
    "--lut-range": "lut_range",
    "--accumulate": "accumulate",
}


def _implementation_of(table: _Table, values: Mapping[str, Any]) -> ImplementationOptions:
    """ImplementationOptions of validated values; an inconsistency is reported at the key it is about."""
    try:
        return resolve_options((Origin.SPEC, values)).options.implementation()
    except InputError as error:
        message = str(error)
        key = next((k for flag, k in _FLAG_KEYS.items() if message.startswith(flag)), "format")
        for flag in _FLAG_KEYS:
            message = message.removeprefix(flag + " ").removeprefix(flag)
        raise table.error(key, message.strip()) from None


def _implementation(table: _Table) -> ImplementationOptions:
    return _implementation_of(table, _implementation_values(table))


# ---------------------------------------------------------------- [verify]

_VERIFY_KEYS = ("backend", "timeout", "memory_mb", "intervals", "solver", "certify", "esbmc", "esbmc_args")


def _verify_values(table: _Table, base: Path) -> dict[str, Any]:
    """The `TaskOptions` verification fields the table gives, validated and typed."""
    table.check_keys(_VERIFY_KEYS)
    values: dict[str, Any] = {}
    for key, kind in (("backend", Backend), ("intervals", IntervalMethod), ("solver", Solver)):
        if key in table.values:
            values[key] = kind(table.choice(key, choices(kind), ""))
    if "timeout" in table.values:
        timeout = table.get("timeout", (int, float), "a number of seconds")
        if timeout_problem(timeout):
            raise table.error("timeout", timeout_problem(timeout))
        values["timeout"] = float(timeout)
    if "memory_mb" in table.values:
        memory = table.get("memory_mb", int, "an integer number of MiB")
        if memory_problem(memory):
            raise table.error("memory_mb", memory_problem(memory))
        values["memory_mb"] = memory
    if "certify" in table.values:
        values["certify"] = table.get("certify", bool, "true or false")
    esbmc = table.get("esbmc", str, "a path or command name")
    if esbmc is not None:
        if "/" in esbmc and not Path(esbmc).expanduser().is_absolute():
            esbmc = str(base / esbmc)
        values["esbmc"] = esbmc
    if "esbmc_args" in table.values:
        arguments = table.get("esbmc_args", list, "an array of strings")
        if not all(isinstance(argument, str) for argument in arguments):
            raise table.error("esbmc_args", f"expected an array of strings, got {arguments!r}")
        values["esbmc_args"] = tuple(arguments)
    return values


# ---------------------------------------------------------------- shared with suite files


def property_from_table(
    values: Mapping[str, Any], net: Network, base: Path, source: str, section: str = "property"
) -> Property | PropertyCases:
    """A `[property]`-style table (spec files, suite files' tasks) as a normalised Property (or the
    cases of a VNN-LIB file in the case form).

    :raises InputError: as `read_spec`, with `source: [section] key:` messages.
    """
    return _property(_Table(source, section, values), net, base)


def implementation_from_table(
    values: Mapping[str, Any], source: str, section: str = "implementation"
) -> ImplementationOptions:
    """An `[implementation]` table as ImplementationOptions (same keys and checks as spec files)."""
    return _implementation(_Table(source, section, values))


def implementation_values_from_table(
    values: Mapping[str, Any], source: str, section: str = "implementation"
) -> dict[str, Any]:
    """The `TaskOptions` fields an `[implementation]` table gives (suite files lay them under the
    command line's)."""
    return _implementation_values(_Table(source, section, values))
