"""Re-verification: the given properties verified on the quantized implementation before and after
the repair, and every verdict that changed (what QNNRepair lacks: a repair judged by accuracy alone
can break a proven property, e.g. a robustness region around a test image).

Properties come from a suite (its tasks' properties; a name such as `digits`, a folder or a suite
file), a spec file (`.toml` with a [property] table) or a VNN-LIB file. Both sides are verified with
the same implementation options and verification options; an UNSAFE carries the counterexample
replayed through the compiled C, as every qverify UNSAFE does.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from qverify.errors import InputError
from qverify.network import Network
from qverify.properties import Property, read_vnnlib
from qverify.quant import ImplementationOptions
from qverify.stage_times import pipeline_seconds
from qverify.suites.suite_file import read_suite, suite_path
from qverify.tasks.spec_file import read_spec
from qverify.verification import VerificationRecord, VerifyOptions, verify_property


@dataclass(frozen=True, slots=True)
class NamedProperty:
    name: str
    property: Property


@dataclass(frozen=True, slots=True)
class VerdictChange:
    """One property's verdict before and after the repair."""

    name: str
    before: VerificationRecord
    after: VerificationRecord

    @property
    def changed(self) -> bool:
        return self.before.status != self.after.status

    @property
    def broken(self) -> bool:
        """A proven property that the repair made false: the prominent case."""
        return self.before.status.value == "SAFE" and self.after.status.value == "UNSAFE"

    @property
    def unproven(self) -> bool:
        """A proven property that is no longer proven (UNKNOWN or ERROR after the repair)."""
        return self.before.status.value == "SAFE" and self.after.status.value not in ("SAFE", "UNSAFE")

    @property
    def time_s(self) -> float:
        return pipeline_seconds(self.before.times_s) + pipeline_seconds(self.after.times_s)


def _is_suite(path: Path) -> bool:
    if path.is_dir():
        return True
    if path.suffix.lower() != ".toml":
        return False
    try:
        return "task" in tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise InputError(f"--properties {path}: not a readable TOML file: {error}") from None


def load_properties(entries: Sequence[str], n_inputs: int, n_outputs: int) -> list[NamedProperty]:
    """Every property the entries name, checked to fit the network.

    :raises InputError: an entry that is no suite, spec or VNN-LIB file, or a property of another
        network's shape."""
    found: list[NamedProperty] = []
    for entry in entries:
        path = Path(entry)
        if path.suffix.lower() in (".vnnlib", ".gz") and path.is_file():
            found.append(NamedProperty(path.stem, read_vnnlib(path)))
        elif path.is_file() and not _is_suite(path):
            spec = read_spec(path)
            found.append(NamedProperty(spec.name, spec.property))
        else:
            suite = read_suite(suite_path(entry))
            found.extend(NamedProperty(task.name, task.property) for task in suite.tasks)
    for named in found:
        try:
            named.property.check_against(n_inputs, n_outputs)
        except InputError as error:
            raise InputError(f"--properties: {error}") from None
    if not found:
        raise InputError(f"--properties {' '.join(entries)}: no property found")
    return found


def reverify(
    original: Network,
    repaired: Network,
    implementation: ImplementationOptions,
    properties: Sequence[NamedProperty],
    options: VerifyOptions,
    progress: bool = True,
) -> list[VerdictChange]:
    """Verify every property on both networks in the same implementation."""
    changes = []
    for named in tqdm(properties, desc="re-verify", unit="property", disable=not progress, leave=False):
        before = verify_property(original, named.property, implementation, options, f"{named.name}-before")
        after = verify_property(repaired, named.property, implementation, options, f"{named.name}-after")
        changes.append(VerdictChange(named.name, before, after))
    return changes
