"""qverify's built-in checker for the C that qverify generates (and hand-written C in its style).

Stages (one module each): `cfront` (gcc -E + pycparser) -> `symex` (inline, unroll: SSA of `ssa`)
-> `passes.simplify` (folding, hash-consing, intervals, pattern rules, tabulated lookups) ->
`strategy` (attack with the bit-exact `evaluate`, symbolic bounds `relax`, input splitting `branch`,
exact MILP `encode.milp` + `solvers.highs`, exact SMT `solvers.bitwuzla` / `solvers.z3`).
See docs/engine.md.

    >>> from qverify.engine import check_file, EngineOptions
    >>> result = check_file(Path("harness.c"), [Path("models_c")], EngineOptions(timeout_s=60))
    >>> result.status, result.decided_by
"""

from qverify.engine.api import check_file
from qverify.engine.result import EngineOptions, EngineResult, EngineStatus

__all__ = ["EngineOptions", "EngineResult", "EngineStatus", "check_file"]
