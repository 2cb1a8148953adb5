"""Suite files: many verification tasks (network x property) to run at several formats.

`benchmarks/<name>/suite.toml`:

    name = "iris"
    description = "Iris 4x7x3 (tanh), hyper-rectangles R_s around class medoids"
    formats = ["8", "16", "32", "float"]   # "W": a W-bit word, integer bits from the range analysis
                                           # (qverify.quant.choose_format); "K.L"; "float"; "double"
    timeout = 60                           # seconds per task (command line --timeout overrides)
    image_shape = [5, 5]                   # optional, for counterexample pictures
    instances = "instances.csv"            # optional: VNN-COMP list (network,property,timeout) rows

    [variants.int8-pc]                     # optional: a format label whose tasks use other model files
    format = "int8"                        #   the number format of this label
    networks = { "cnn.onnx" = "cnn.int8-pc.onnx" }   # task network -> the file used at this label

    [implementation]                       # optional defaults, keys as in a spec's [implementation]
    rounding = "nearest"

    [[task]]                               # any number of tasks
    name = "setosa-R1"
    network = "iris.onnx"
    [task.property]                        # keys as in a spec's [property] table
    kind = "hyperrectangle"
    ...

Paths are relative to the suite file. A suite is named by its folder under `benchmarks/` or by the
path of its suite file.
"""

from __future__ import annotations

import csv
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qverify.errors import InputError, QverifyError
from qverify.input_limits import check_file, check_numerals
from qverify.io import load_network
from qverify.io.files import file_stem
from qverify.network import Network
from qverify.properties import Property, PropertyCases, read_vnnlib_cases, to_normalised
from qverify.quant import (
    FORMAT_HELP,
    WORD_LENGTH_HELP,
    ImplementationOptions,
    Int8Format,
    parse_number_format,
    word_length,
)
from qverify.tasks.model import timeout_problem
from qverify.tasks.spec_file import implementation_from_table, property_from_table

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
_TOP_KEYS = (
    "name",
    "description",
    "formats",
    "timeout",
    "image_shape",
    "instances",
    "implementation",
    "task",
    "variants",
)
_TASK_KEYS = ("name", "network", "property", "timeout", "image_shape")
_VARIANT_KEYS = ("format", "networks")


@dataclass(frozen=True, slots=True)
class Variant:
    """A format label whose tasks run on other model files (e.g. a float network's int8 model)."""

    name: str
    format_label: str  # the number format: "int8", "half", "8.8", ...
    networks: Mapping[Path, Path]  # a task's network file -> the file used at this label

    def network_for(self, path: Path) -> Path:
        return self.networks.get(path, path)


@dataclass(frozen=True, slots=True)
class SuiteTask:
    """One network x property of a suite (the format is chosen when the suite runs)."""

    name: str
    network_path: Path
    property: Property | PropertyCases  # normalised units
    timeout_s: float
    image_shape: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class Suite:
    name: str
    description: str
    path: Path
    formats: tuple[str, ...]
    tasks: tuple[SuiteTask, ...]
    implementation: ImplementationOptions  # defaults; the number format is replaced per run
    timeout_s: float
    variants: Mapping[str, Variant] = field(default_factory=dict)
    int8_models: frozenset[Path] = frozenset()  # the network files (tasks', variants') that are int8 models

    def check_usable(self, label: str) -> None:
        """Refuse, before any task runs, a format label whose tasks cannot run: an int8 format (a
        variant's or the label itself) verifies an int8 model's integers, so every task's network at
        that label must be one (a float model gave each task an ERROR record).

        :raises InputError: naming the label, a task and its network file.
        """
        number = self.number_label(label)
        if word_length(number) is not None or not isinstance(parse_number_format(number), Int8Format):
            return
        for task in self.tasks:
            network = self.resolve(label, task)[1]
            if network not in self.int8_models:
                where = f"[variants.{label}]" if label in self.variants else f"format {label}"
                raise InputError(
                    f"{self.path}: {where}: task {task.name} runs on {network}, a float model: {number} "
                    "verifies an int8 model's integers (name its int8 model in the variant's networks, "
                    "or make one with `qverify quantize`)"
                )

    def check_format(self, label: str, source: str) -> str:
        """A label of `--format`/`formats`: a variant of this suite or any format label."""
        return label if label in self.variants else check_format_label(label, source)

    def number_label(self, label: str) -> str:
        """The number format a format label of this suite names (a variant's own format)."""
        variant = self.variants.get(label)
        return label if variant is None else variant.format_label

    def resolve(self, label: str, task: SuiteTask) -> tuple[str, Path]:
        """(number format label, network file) of `task` at the suite's format label."""
        variant = self.variants.get(label)
        if variant is None:
            return label, task.network_path
        return variant.format_label, variant.network_for(task.network_path)


def suite_path(name_or_path: str | Path) -> Path:
    """`iris` -> benchmarks/iris/suite.toml; a folder -> its suite.toml; a file as given."""
    candidate = Path(name_or_path)
    if candidate.is_file():
        return candidate
    if candidate.is_dir() and (candidate / "suite.toml").is_file():
        return candidate / "suite.toml"
    named = BENCHMARKS / str(name_or_path) / "suite.toml"
    if named.is_file():
        return named
    known = sorted(p.parent.name for p in BENCHMARKS.glob("*/suite.toml"))
    raise InputError(f"no suite '{name_or_path}': give a suite file or one of {', '.join(known) or '(none)'}")


def check_format_label(label: str, source: str) -> str:
    """'8', '16.16', 'float', 'int8' ... (InputError otherwise)."""
    try:
        if word_length(label) is None:
            parse_number_format(label)
    except InputError:
        raise InputError(f"{source}: formats: '{label}' is not {WORD_LENGTH_HELP} or {FORMAT_HELP}") from None
    return label


class _NetworkCache:
    """Each network file is loaded once per suite."""

    def __init__(self) -> None:
        self.loaded: dict[Path, Network] = {}

    def get(self, path: Path, source: str) -> Network:
        if path not in self.loaded:
            try:
                self.loaded[path] = load_network(path)
            except QverifyError as error:
                raise type(error)(f"{source}: network {path}: {error}") from None
        return self.loaded[path]


def _image_shape(value: Any, source: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, int) and v > 0 for v in value):
        raise InputError(f"{source}: image_shape: expected an array of positive integers, got {value!r}")
    return tuple(value)


def _timeout(value: Any, where: str) -> float:
    """A suite's or task's timeout: a finite positive number of seconds (as --timeout)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: timeout: expected a number of seconds, got {value!r}")
    if timeout_problem(value):
        raise InputError(f"{where}: timeout: {timeout_problem(value)}")
    return float(value)


def _resolve(base: Path, text: Any, source: str, key: str) -> Path:
    if not isinstance(text, str):
        raise InputError(f"{source}: {key}: expected a file path, got {text!r}")
    path = (base / text).resolve()
    if not path.is_file():
        raise InputError(f"{source}: {key}: no such file: {path}")
    return path


def _task(
    entry: Mapping[str, Any],
    index: int,
    base: Path,
    cache: _NetworkCache,
    source: str,
    timeout_s: float,
    shape: tuple[int, ...] | None,
) -> SuiteTask:
    where = f"{source}: [[task]] #{index}"
    unknown = sorted(set(entry) - set(_TASK_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]} (allowed: {', '.join(_TASK_KEYS)})")
    network_path = _resolve(base, entry.get("network"), where, "network")
    net = cache.get(network_path, where)
    prop = property_from_table(entry.get("property", {}), net, base, f"{where}", "task.property")
    name = entry.get("name") or f"{network_path.stem}-{prop.name}"
    task_shape = _image_shape(entry.get("image_shape"), where) or shape
    if task_shape is not None and math.prod(task_shape) != net.n_inputs:
        raise InputError(f"{where}: image_shape {task_shape} does not match {net.n_inputs} inputs")
    return SuiteTask(
        str(name), network_path, prop, _timeout(entry.get("timeout", timeout_s), where), task_shape
    )


def _instances(csv_path: Path, cache: _NetworkCache, source: str, shape) -> list[SuiteTask]:
    """VNN-COMP `instances.csv` rows: network, vnnlib property, timeout (seconds)."""
    tasks = []
    with csv_path.open(newline="") as handle:
        for line_number, row in enumerate(csv.reader(handle), start=1):
            if not row or row[0].startswith("#"):
                continue
            where = f"{csv_path}:{line_number}"
            if len(row) != 3:
                raise InputError(f"{where}: expected network,vnnlib,timeout")
            network_path = _resolve(csv_path.parent, row[0].strip(), where, "network")
            vnnlib_path = _resolve(csv_path.parent, row[1].strip(), where, "vnnlib")
            try:
                timeout_s = _timeout(float(row[2]), where)
            except ValueError:
                raise InputError(f"{where}: timeout '{row[2]}' is not a number") from None
            net = cache.get(network_path, where)
            prop = read_vnnlib_cases(vnnlib_path, n_inputs=net.n_inputs, n_outputs=net.n_outputs)
            prop = to_normalised(prop, net)
            prop.check_against(net.n_inputs, net.n_outputs)
            tasks.append(
                SuiteTask(f"{file_stem(network_path)}-{prop.name}", network_path, prop, timeout_s, shape)
            )
    return tasks


def _variants(data: Any, base: Path, cache: _NetworkCache, source: str) -> dict[str, Variant]:
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: variants: expected a table of [variants.NAME] tables")
    variants = {}
    for name, entry in data.items():
        where = f"{source}: [variants.{name}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{where}: expected a table with keys {', '.join(_VARIANT_KEYS)}")
        unknown = sorted(set(entry) - set(_VARIANT_KEYS))
        if unknown:
            raise InputError(f"{where}: unknown key {unknown[0]} (allowed: {', '.join(_VARIANT_KEYS)})")
        if "format" not in entry:
            raise InputError(f"{where}: missing key format")
        label = check_format_label(str(entry["format"]), where)
        networks = entry.get("networks", {})
        if not isinstance(networks, Mapping):
            raise InputError(f"{where}: networks: expected a table of task network = file")
        mapping = {}
        for original, replacement in networks.items():
            source_path = _resolve(base, original, where, "networks")
            target = _resolve(base, replacement, where, f"networks.{original}")
            first, second = cache.get(source_path, where), cache.get(target, where)
            if (first.n_inputs, first.n_outputs) != (second.n_inputs, second.n_outputs):
                raise InputError(
                    f"{where}: {target.name} has {second.n_inputs} inputs and {second.n_outputs} outputs, "
                    f"{source_path.name} {first.n_inputs} and {first.n_outputs}"
                )
            mapping[source_path] = target
        variants[str(name)] = Variant(str(name), label, mapping)
    return variants


@dataclass(frozen=True, slots=True)
class SuiteListing:
    """What `qverify suite list` shows of a suite: read from its TOML alone (no network loaded, no
    property parsed: the shipped suites list 588 VNN-LIB files, 25-48 s to read)."""

    name: str
    description: str
    formats: tuple[str, ...]
    tasks: int


def _toml(path: Path) -> dict[str, Any]:
    source = str(path)
    check_file(path)
    try:
        text = path.read_text(encoding="utf-8")
        check_numerals(text, source)
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{source}: TOML syntax error: {error}") from None
    except UnicodeDecodeError as error:
        raise InputError(f"{source}: not UTF-8 text (byte {error.start}): suite files are TOML") from None
    except OSError as error:
        raise InputError(f"{source}: cannot read: {error.strerror}") from None


def list_suite(path: Path) -> SuiteListing:
    """The listing of the suite file at `path` (tasks: its [[task]] tables and instances.csv rows)."""
    data = _toml(path)
    tasks = len(data.get("task", []))
    instances = data.get("instances")
    if isinstance(instances, str) and (path.parent / instances).is_file():
        with (path.parent / instances).open(newline="") as handle:
            tasks += sum(1 for row in csv.reader(handle) if row and not row[0].startswith("#"))
    formats = tuple(str(item) for item in data.get("formats", ["16"]))
    return SuiteListing(
        str(data.get("name", path.parent.name)), str(data.get("description", "")), formats, tasks
    )


def read_suite(name_or_path: str | Path) -> Suite:
    """Read and validate a suite (every network is loaded and every property built)."""
    path = suite_path(name_or_path)
    source = str(path)
    data = _toml(path)
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise InputError(f"{source}: unknown key {unknown[0]} (allowed: {', '.join(_TOP_KEYS)})")
    timeout_s = _timeout(data.get("timeout", 60), source)
    shape = _image_shape(data.get("image_shape"), source)
    implementation = implementation_from_table(data.get("implementation", {}), source)
    cache = _NetworkCache()
    base = path.parent
    variants = _variants(data.get("variants", {}), base, cache, source)
    formats = tuple(
        label if label in variants else check_format_label(label, source)
        for label in (str(item) for item in data.get("formats", ["16"]))
    )
    tasks = [
        _task(entry, index, base, cache, source, timeout_s, shape)
        for index, entry in enumerate(data.get("task", []), start=1)
    ]
    if "instances" in data:
        tasks += _instances(_resolve(base, data["instances"], source, "instances"), cache, source, shape)
    if not tasks:
        raise InputError(f"{source}: the suite has no tasks ([[task]] tables or instances)")
    names = [task.name for task in tasks]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate:
        raise InputError(f"{source}: two tasks are named '{duplicate}'")
    suite = Suite(
        str(data.get("name", path.parent.name)),
        str(data.get("description", "")),
        path,
        formats,
        tuple(tasks),
        implementation,
        timeout_s,
        variants,
        frozenset(file for file, net in cache.loaded.items() if net.quantization is not None),
    )
    for label in variants:  # a variant that cannot run is an error of the file, whether run or not
        suite.check_usable(label)
    return suite
