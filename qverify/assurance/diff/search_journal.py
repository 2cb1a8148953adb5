"""The search's journal: each finished (method, seed) outcome appended whole to `search.jsonl`, so
an interrupted `qverify diff` run resumes where it stopped instead of searching every seed again.

A line is {"key": ..., "record": SeedOutcome JSON with a "status" (`found`: a DII, or `none`)},
the shape of every qverify journal record. The key digests everything the outcome depends
on: the pair, the criterion, the settings (budget, population, radius, seed, whether a seed stops at
its first DII, ...), the search space
(the L-inf radius, distortion families and their ranges), the method (with its family), the seed's
index and its exact values. A line whose key matches is reused; anything changed runs again. With a
query budget the search is deterministic (search module docstring), so a resumed run reports what
an uninterrupted one would; with a time budget it reuses what was found. Writes go through the
suites' `Journal` (one O_APPEND write per record, fsync; an incomplete last line is dropped with a
warning).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from qverify.assurance.diff.records import SeedOutcome
from qverify.errors import InputError
from qverify.suites.journal import Journal

JOURNAL_FILE = "search.jsonl"


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def run_identity(pair: str, criterion: str, settings: object, radius: float, space: object | None) -> str:
    """What every outcome of one search run depends on besides its method and seed."""
    space_text = None
    if space is not None:
        space_text = (
            list(space.names),
            [float(v).hex() for v in space.low],
            [float(v).hex() for v in space.high],
        )  # type: ignore[attr-defined]
    fields = asdict(settings)  # type: ignore[call-overload]
    if not fields.get("first_dii", True):  # off: the keys of journals written before the option existed
        del fields["first_dii"]
    return _digest(pair, criterion, fields, float(radius).hex(), space_text)


class SearchJournal:
    """Finished seed outcomes of this run (loaded when the file exists), and appending new ones."""

    def __init__(self, folder: Path, identity: str) -> None:
        self.journal = Journal(folder / JOURNAL_FILE)
        self.identity = identity
        self.done: dict[str, SeedOutcome] = {}
        self.reused = 0
        for entry in self.journal.resume():
            try:
                self.done[entry["key"]] = SeedOutcome.from_json(entry["record"])
            except (KeyError, TypeError, ValueError) as error:
                raise InputError(f"{self.journal.path}: a record is not a search outcome ({error})") from None

    def key(self, method: str, seed_index: int, seed: np.ndarray) -> str:
        values = [float(v).hex() for v in np.asarray(seed, dtype=np.float64).ravel()]
        return _digest(self.identity, method, seed_index, values)

    def get(self, key: str) -> SeedOutcome | None:
        outcome = self.done.get(key)
        if outcome is not None:
            self.reused += 1
        return outcome

    def add(self, key: str, outcome: SeedOutcome) -> None:
        status = "found" if outcome.success else "none"
        self.journal.append({"key": key, "record": {"status": status, **outcome.to_json()}})
        self.done[key] = outcome
