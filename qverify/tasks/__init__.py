"""The task model: what one verification task is (its typed options and where each came from), and
the spec-file reader that produces one. Command-line flags (`qverify.cli.options`) and suite files
(`qverify.suites.suite_file`) are the other two readers; all three meet in `resolve_options`."""

from qverify.tasks.model import (
    Backend,
    EsbmcSolver,
    Origin,
    ResolvedOptions,
    Semantics,
    Solver,
    TaskOptions,
    check_same_network,
    float_view_note,
    for_network,
    resolve_options,
)
from qverify.tasks.spec_file import Spec, read_spec

__all__ = [
    "Backend",
    "EsbmcSolver",
    "Origin",
    "ResolvedOptions",
    "Semantics",
    "Solver",
    "Spec",
    "TaskOptions",
    "check_same_network",
    "float_view_note",
    "for_network",
    "read_spec",
    "resolve_options",
]
