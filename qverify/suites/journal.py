"""The suite journal and the lock on its output folder.

The journal holds one JSON line per finished task. Each record is appended whole: one `write` of
the complete newline-terminated line to a file opened with O_APPEND, then fsync, so a crash (kill -9,
power loss, a full disk) can only leave an incomplete *last* line. `--resume` cuts that fragment off
(with a warning: its task runs again) before appending anything, so a record is never glued onto it;
every other line must be a whole record, else the journal is refused with its line number.

The lock (`.qverify.lock` in the output folder, an flock held for the whole run) makes a second run
into the same folder, or a `--resume` next to a live run, refuse with the holder's pid instead of
running every task twice. Taking it is also the check that the folder is writable, before any work.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any, Self

from qverify.errors import InputError

LOCK_NAME = ".qverify.lock"


class Journal:
    """Append-only JSONL of {"key": ..., "suite": ..., "task": ..., "format": ..., "record": {...}}."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> tuple[list[dict[str, Any]], str]:
        """Entries of finished tasks (the last entry per key wins), and a warning ("" if none).

        An incomplete last line (no newline: the write the crash interrupted) is cut off the file.

        :raises InputError: a complete line that is not a journal record (`file:line: why`).
        """
        if not self.path.is_file():
            return [], ""
        data = self.path.read_bytes()
        whole, _, fragment = data.rpartition(b"\n")
        warning = ""
        if fragment:
            with self.path.open("r+b") as handle:
                handle.truncate(len(data) - len(fragment))
                os.fsync(handle.fileno())
            warning = (
                f"{self.path}: dropped an incomplete last line ({len(fragment)} bytes, a write cut short "
                "by a crash); its task runs again"
            )
        entries: dict[str, dict[str, Any]] = {}
        for number, line in enumerate(whole.split(b"\n") if whole else [], start=1):
            if line.strip():
                entry = _record(line, f"{self.path}:{number}")
                entries[entry["key"]] = entry
        return list(entries.values()), warning

    def count(self, keys: Collection[str]) -> int:
        """How many of the tasks `keys` the file holds (complete lines), without changing it: what an
        interrupted run reports (its own count can miss the record written as the signal came)."""
        if not self.path.is_file():
            return 0
        whole, _, _ = self.path.read_bytes().rpartition(b"\n")
        found = set()
        for line in whole.split(b"\n") if whole else []:
            try:
                found.add(json.loads(line)["key"])
            except (ValueError, TypeError, KeyError):
                continue
        return len(found & set(keys))

    def resume(self) -> list[dict[str, Any]]:
        """`load` for a run that resumes: the entries, the warning (if any) as one stderr line."""
        entries, warning = self.load()
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
        return entries

    def append(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(descriptor, line)
            if written != len(line):  # a full disk: leave a fragment that the next load cuts off
                raise OSError(f"wrote {written} of {len(line)} bytes of a journal record")
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def reset(self) -> None:
        if self.path.exists():
            self.path.unlink()


def _record(line: bytes, where: str) -> dict[str, Any]:
    try:
        entry = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(f"{where}: corrupt journal line (not JSON)") from None
    if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
        raise InputError(f"{where}: not a journal record (expected an object with a 'key')")
    if not isinstance(entry.get("record"), dict) or not isinstance(entry["record"].get("status"), str):
        raise InputError(f"{where}: not a journal record (no 'record' with a 'status')")
    return entry


class FolderLock:
    """An exclusive flock on `folder/.qverify.lock` holding the owner's pid; released on close or
    when the process dies (the kernel drops flocks of dead processes, so no stale lock survives)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_NAME
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self.descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise InputError(f"output folder {folder} is not writable: {error.strerror}") from None
        try:
            fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.descriptor)
            raise InputError(
                f"output folder {folder} is in use by another qverify run (pid {holder}); wait for it "
                "or give another --out"
            ) from None
        os.ftruncate(self.descriptor, 0)
        os.pwrite(self.descriptor, f"{os.getpid()}\n".encode(), 0)
        probe = folder / f".qverify-write-test-{os.getpid()}"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            self.close()
            raise InputError(f"output folder {folder} is not writable: {error.strerror}") from None

    def close(self) -> None:
        if self.descriptor >= 0:
            fcntl.flock(self.descriptor, fcntl.LOCK_UN)
            os.close(self.descriptor)
            self.descriptor = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
