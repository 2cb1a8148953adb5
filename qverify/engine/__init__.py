"""qverify's built-in checker for the C that qverify generates (and hand-written C in its style).

Two paths, and `api.check_file` chooses between them (docs/engine.md, "Two paths"):
- `engine.netlevel` -- the network level: `netlevel.lift` reads a harness of the generated shape
  back as layers (`netlevel.query.NetworkQuery`), `netlevel.search` decides it layer by layer
  (attack, bounds, branch and bound, LP/MILP);
- `engine.scalar` -- the scalar path: a bounded model checker over the C itself (symbolic
  execution to SSA, simplification, attack, relaxation, splitting, MILP, SMT), for C the network
  level cannot lift.
What both use sits beside them: `cfront` and `c_types` (reading C), `solvers` (the decision
procedure interface, HiGHS and its MILP record), `result` (options, results, the stage record).

    >>> from qverify.engine import check_file, EngineOptions
    >>> result = check_file(Path("harness.c"), [Path("models_c")], EngineOptions(timeout_s=60))
    >>> result.status, result.decided_by
"""

from qverify.engine.api import check_file
from qverify.engine.result import EngineOptions, EngineResult, EngineStatus, Recorder

__all__ = ["EngineOptions", "EngineResult", "EngineStatus", "Recorder", "check_file"]
