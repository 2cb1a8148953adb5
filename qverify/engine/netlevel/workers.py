"""Network level: worker processes that process branch-and-bound nodes, so that a search uses every core.

The search keeps the frontier (its best-first heap) in its own process and hands batches of nodes to
`jobs` workers; each worker is a fork of the search made once its setup, attack and root node are
done, so the model, the query and the root's bounds are shared copy-on-write and only the nodes
(their boxes, phases and parent bounds) and the verdicts travel through pipes. A worker runs the
same `process_batch` as a serial search, so a node's verdict does not depend on where it ran: SAFE
still needs every node closed and UNSAFE one exactly confirmed point; only the order in which the
nodes finish, and so which counterexample is found first and how far a timeout got, can differ.

Each task reports the time and counts its worker's recorder gained, so the search's record adds up
over the processes. Workers die with the search (PR_SET_PDEATHSIG) and are killed by their pids
when it ends; they never start a process of their own except HiGHS's in-process solves.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Self

from qverify.interrupts import die_with_parent


@dataclass(slots=True)
class TaskResult:
    """What one task returned: its value (or the text of the exception it raised), and what the
    worker's recorder gained meanwhile."""

    value: Any = None
    error: str = ""
    exception: BaseException | None = None  # an exception the caller may handle (e.g. Undecidable)
    times: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def _serve(
    connection: Connection, work: Callable[[Any], Any], snapshot: Callable[[], tuple], parent: int
) -> None:
    """A worker's loop: receive a task, run `work` on it, send the TaskResult; stop on None."""
    die_with_parent(signal.SIGKILL, parent)
    while True:
        try:
            task = connection.recv()
        except (EOFError, OSError):
            break
        if task is None:
            break
        times_before, counts_before = snapshot()
        result = TaskResult()
        try:
            result.value = work(task)
        except Exception as error:  # noqa: BLE001 - reported to the search, which decides
            result.exception = error
            result.error = "".join(traceback.format_exception_only(type(error), error)).strip()
            result.error += "\n" + traceback.format_exc()
        times_after, counts_after = snapshot()
        result.times = _gained(times_before, times_after)
        result.counts = _gained(counts_before, counts_after)
        try:
            connection.send(result)
        except (pickle.PicklingError, TypeError, AttributeError) as error:  # its text only
            connection.send(
                TaskResult(error=result.error or str(error), times=result.times, counts=result.counts)
            )
    connection.close()
    os._exit(0)


def _gained(before: dict, after: dict) -> dict:
    return {key: value - before.get(key, 0) for key, value in after.items() if value != before.get(key, 0)}


class Workers:
    """`jobs` forked processes running `work(task)` (module docstring). `snapshot()` returns the
    worker's (times, counts) so that each result carries what its recorder gained."""

    def __init__(self, jobs: int, work: Callable[[Any], Any], snapshot: Callable[[], tuple]) -> None:
        context = multiprocessing.get_context("fork")
        parent = os.getpid()
        self.connections: list[Connection] = []
        self.processes = []
        for _ in range(jobs):
            mine, theirs = context.Pipe(duplex=True)
            process = context.Process(target=_serve, args=(theirs, work, snapshot, parent), daemon=True)
            process.start()
            theirs.close()
            self.connections.append(mine)
            self.processes.append(process)
        self.busy: dict[int, Any] = {}  # worker index -> the tag of its task

    @property
    def idle(self) -> list[int]:
        return [i for i in range(len(self.connections)) if i not in self.busy]

    def submit(self, worker: int, task: Any, tag: Any = None) -> None:
        self.connections[worker].send(task)
        self.busy[worker] = tag

    def results(self, timeout: float | None) -> Sequence[tuple[Any, TaskResult]]:
        """The (tag, result) of every task that finished within `timeout` seconds (none: wait)."""
        pending = {self.connections[i]: i for i in self.busy}
        if not pending:
            return []
        finished = []
        for connection in wait(list(pending), timeout):
            worker = pending[connection]  # type: ignore[index]
            tag = self.busy.pop(worker)
            try:
                result = connection.recv()  # type: ignore[union-attr]
            except (EOFError, OSError):
                result = TaskResult(error="a worker process died (out of memory?)")
            finished.append((tag, result))
        return finished

    def close(self) -> None:
        """Stop every worker now (a running task is not waited for)."""
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGKILL)
        for process in self.processes:
            process.join(timeout=5)
        for connection in self.connections:
            connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
