"""Where suite tasks run: in this process, in local worker processes, or on a Dask cluster.

All three share one interface, `map_unordered(function, items)`, yielding (item, result) pairs as
tasks finish, so the runner has one code path. The in-process executor serves `--jobs 1` and tests.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Protocol

from qverify.errors import EXIT_INTERRUPTED, InputError, ToolMissingError
from qverify.interrupts import running_task, worker_setup


class Executor(Protocol):
    name: str

    def map_unordered(
        self, function: Callable[[Any], Any], items: Iterable[Any]
    ) -> Iterator[tuple[Any, Any]]: ...

    def close(self) -> None: ...


class InProcessExecutor:
    name = "in-process"

    def map_unordered(self, function, items):
        for item in items:
            yield item, function(item)

    def close(self) -> None:
        pass


def _in_worker(function: Callable[[Any], Any], item: Any) -> Any:
    """Run one task in a pool worker; an interruption ends the worker once `finally` blocks ran.

    SIGTERM reaches a worker when the suite run stops it or dies (even by SIGKILL: the worker's
    parent-death signal, qverify.interrupts.worker_setup). Returning the KeyboardInterrupt to the
    pool would leave the worker waiting for the next queued task of a parent that is gone.
    """
    try:
        with running_task():
            return function(item)
    except KeyboardInterrupt:
        os._exit(EXIT_INTERRUPTED)


class LocalExecutor:
    """A pool of `jobs` worker processes (spawned: no inherited threads or locks)."""

    name = "local"

    def __init__(self, jobs: int) -> None:
        self.pool = ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=worker_setup,
        )
        self.jobs = jobs
        self.running: dict = {}  # futures submitted and not yet yielded

    def map_unordered(self, function, items):
        pending_items = iter(items)
        running: dict = {}
        self.running = running

        def refill() -> None:
            while len(running) < 2 * self.jobs:
                item = next(pending_items, None)
                if item is None:
                    return
                running[self.pool.submit(_in_worker, function, item)] = item

        refill()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                yield running.pop(future), future.result()
            refill()

    def close(self) -> None:
        """Cancel what has not started and stop the workers: after an interruption their running
        tasks' results would be lost anyway (they are not journaled), and SIGTERM makes each
        worker kill its verifier's process group (qverify.interrupts)."""
        if not any(not future.done() for future in self.running):
            self.pool.shutdown(wait=True)
            return
        # no public accessor in 3.11; None once the pool was shut down (a second close, after an
        # interruption: the runner's and run_suite's `finally` both close)
        workers = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        for worker in workers:
            worker.join(timeout=10)


class DaskExecutor:
    """Tasks submitted to a `dask.distributed` Client: a scheduler address, or a LocalCluster."""

    name = "dask"

    def __init__(self, jobs: int, scheduler: str | None = None) -> None:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise ToolMissingError(
                "dask[distributed] is not installed (pip install 'dask[distributed]')"
            ) from None
        self.cluster = None
        try:
            if scheduler:
                self.client = Client(scheduler, timeout="20s")
            else:
                self.cluster = LocalCluster(
                    n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None
                )
                self.client = Client(self.cluster)
        except OSError as error:
            raise InputError(f"cannot reach the Dask scheduler {scheduler}: {error}") from None

    def map_unordered(self, function, items):
        from dask.distributed import as_completed

        futures = {}
        for item in items:
            futures[self.client.submit(function, item, pure=False)] = item
        for future in as_completed(futures):
            yield futures[future], future.result()

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def make_executor(kind: str, jobs: int, scheduler: str | None = None) -> Executor:
    if kind == "dask":
        return DaskExecutor(jobs, scheduler)
    if kind != "local":
        raise InputError(f"unknown executor '{kind}' (local | dask)")
    return InProcessExecutor() if jobs <= 1 else LocalExecutor(jobs)
