"""`check_file`: front end, simplification and strategy, with a deadline through every stage."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from qverify.engine.result import EngineOptions, EngineResult, EngineStatus
from qverify.errors import InputError, InternalError, ResourceLimitError, ToolMissingError, UnsupportedError


def smt_factory(name: str, narrow: bool = True):
    """A fresh SMT decision procedure by name (each module imports its own library); `narrow=False`
    encodes every integer at its C width (no interval reasoning: what --certify uses)."""
    if name == "bitwuzla":
        from qverify.engine.solvers.bitwuzla import BitwuzlaSolver

        return BitwuzlaSolver(narrow)
    if name == "z3":
        from qverify.engine.solvers.z3 import Z3Solver

        return Z3Solver(narrow)
    raise ToolMissingError(f"no SMT solver named {name}")


def check_file(
    path: Path, include_dirs: Sequence[Path] = (), options: EngineOptions | None = None
) -> EngineResult:
    """Decide the C harness at `path`: SAFE, UNSAFE (with a counterexample the evaluator confirmed),
    UNKNOWN (with the reason) or ERROR (`file:line: what` for C the engine does not handle).

    Never raises for a verdict-worthy failure; stops itself within `options.timeout_s`.
    """
    # the engine's stages are imported here, not with the package: `qverify verify` imports
    # qverify.engine.result for its option names and runs the engine in a child process, so the
    # parent never needs them (pycparser, the SSA and every strategy module: ~0.15 s)
    from qverify.engine import cfront, ssa, symex
    from qverify.engine.passes.simplify import simplify
    from qverify.engine.strategy import Recorder, Strategy

    options = options or EngineOptions()
    start = time.monotonic()
    # stop early enough to report: solver time limits and the last evaluation overrun a little
    safety = min(max(0.05 * options.timeout_s, 0.3), 3.0)
    deadline = start + options.timeout_s - safety
    recorder = Recorder()

    def finish(status: EngineStatus, reason: str, decided_by: str = "") -> EngineResult:
        recorder.add_time("total", time.monotonic() - start)
        return EngineResult(
            status,
            reason=reason,
            decided_by=decided_by,
            times_s=dict(recorder.times),
            counts=dict(recorder.counts),
        )

    try:
        with recorder.timer("parse"):
            unit = cfront.parse_file(Path(path), [Path(d) for d in include_dirs])
        with recorder.timer("symex"):
            manager = ssa.NodeManager()
            program = symex.execute(unit, manager, deadline)
        recorder.add("inputs", len(program.inputs))
        recorder.add("nodes_symex", ssa.count_nodes(program.roots()))
        with recorder.timer("simplify"):
            simplified = simplify(program, deadline)
        recorder.add("nodes", ssa.count_nodes(simplified.program.roots()))
        recorder.add("steps", len(simplified.program.steps))
        result = Strategy(simplified, options, deadline, recorder, smt_factory).run()
    except (InputError, UnsupportedError) as error:
        return finish(EngineStatus.ERROR, str(error), "front-end")
    except ResourceLimitError as error:
        return finish(EngineStatus.UNKNOWN, str(error))
    except ToolMissingError as error:
        return finish(EngineStatus.ERROR, str(error))
    except InternalError as error:
        return finish(EngineStatus.ERROR, f"internal error: {error}")
    except MemoryError:
        return finish(EngineStatus.UNKNOWN, "out of memory")
    recorder.times.update(result.times_s)
    recorder.add_time("total", time.monotonic() - start)
    return EngineResult(
        result.status,
        reason=result.reason,
        counterexample=result.counterexample,
        violated=result.violated,
        decided_by=result.decided_by,
        solver=result.solver,
        times_s=dict(recorder.times),
        counts={**recorder.counts, **result.counts},
    )
