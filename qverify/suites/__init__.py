"""Benchmark suites: suite files, task scheduling (in-process, local processes, Dask), the journal,
reports, and quantization sweeps."""

from qverify.suites.executors import DaskExecutor, InProcessExecutor, LocalExecutor, make_executor
from qverify.suites.journal import Journal
from qverify.suites.runner import SuiteRunResult, run_suite
from qverify.suites.suite_file import Suite, SuiteTask, read_suite, suite_path
from qverify.suites.tasks import TaskSpec, expand, run_task

__all__ = [
    "DaskExecutor",
    "InProcessExecutor",
    "Journal",
    "LocalExecutor",
    "Suite",
    "SuiteRunResult",
    "SuiteTask",
    "TaskSpec",
    "expand",
    "make_executor",
    "read_suite",
    "run_suite",
    "run_task",
    "suite_path",
]
