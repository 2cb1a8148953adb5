"""The suite journal: one JSON line per finished task, flushed and fsynced, so nothing is lost.

A killed run restarts with `--resume`: tasks whose key is in the journal are not run again. A last
line cut short by the kill is ignored (it was not finished, so its task runs again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from qverify.errors import InputError


class Journal:
    """Append-only JSONL of {"key": ..., "spec": {...}, "record": {...}}."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[dict[str, Any]]:
        """Entries of finished tasks (the last entry per key wins; a torn last line is skipped)."""
        if not self.path.is_file():
            return []
        entries: dict[str, dict[str, Any]] = {}
        lines = self.path.read_text().splitlines()
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines):
                    continue  # the write in progress when the run was killed
                raise InputError(f"{self.path}:{number}: corrupt journal line") from None
            entries[entry["key"]] = entry
        return list(entries.values())

    def append(self, entry: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def reset(self) -> None:
        if self.path.exists():
            self.path.unlink()
