"""`check_file`, the engine's one door: it chooses the path that decides a harness, with a deadline
through every stage.

Two paths decide a harness. The network level first: `engine.netlevel.lift` reads a harness of the
generated shape back as layers (a `NetworkQuery`, in a fraction of a second) and
`engine.netlevel.search` decides it layer by layer. Whatever it does not cover goes down the scalar
path (`cfront` -> `scalar.symex` -> `scalar.passes.simplify` -> `scalar.strategy.Strategy`), which
executes the C one operation at a time: C the lifter does not recognise, networks the
network-level strategy does not support (`netlevel.model.unsupported_reason`), `--certify` (its
exact SMT re-check needs the scalar program), and queries the network-level strategy gives up on
while time remains, when the network is small enough for the scalar path's exact procedures
(`SCALAR_FALLBACK_MACS`, counting the products the C computes); on such
fixed-point networks the network level gets `NETWORK_LEVEL_SHARE` of the budget, the scalar path the
rest. The record says which path decided (`decided_by`, `front_end` in the counts: 1 lifted, 0
scalar) and why a harness was not lifted (a note).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from qverify.engine.result import EngineOptions, EngineResult, EngineStatus, Recorder
from qverify.errors import InputError, InternalError, ResourceLimitError, ToolMissingError, UnsupportedError

if TYPE_CHECKING:  # the stages are imported where they run (see check_file)
    from qverify.engine.cfront import TranslationUnit
    from qverify.engine.netlevel.lift.frontend import ParsedHarness
    from qverify.engine.netlevel.query import NetworkQuery


def smt_factory(name: str, narrow: bool = True):
    """A fresh SMT decision procedure by name (each module imports its own library); `narrow=False`
    encodes every integer at its C width (no interval reasoning: what --certify uses)."""
    if name == "bitwuzla":
        from qverify.engine.scalar.smt.bitwuzla import BitwuzlaSolver

        return BitwuzlaSolver(narrow)
    if name == "z3":
        from qverify.engine.scalar.smt.z3 import Z3Solver

        return Z3Solver(narrow)
    raise ToolMissingError(f"no SMT solver named {name}")


# The scalar path unrolls every multiply-add into SSA nodes (~20 us each, plus memory): past this many
# per network it cannot finish where the network-level strategy gave up (ACAS Xu: 12,300).
SCALAR_FALLBACK_MACS = 100_000
FALLBACK_MIN_SECONDS = 2.0  # left on the clock for the scalar path to be worth starting
NETWORK_LEVEL_SHARE = 0.3  # of the budget, for fixed-point networks the scalar path can also decide


def _multiply_adds(query: NetworkQuery) -> int:
    """The products the C computes (a convolution's taps, a pool's window elements), what the
    scalar path would unroll."""
    from qverify.network.operators import operator_of

    return sum(operator_of(layer.source).products(layer.source) for layer in query.qnet.layers)


def _lifted(
    path: Path, include_dirs: Sequence[Path], options: EngineOptions, recorder: Recorder
) -> tuple[NetworkQuery | None, ParsedHarness | None]:
    """The harness as a NetworkQuery in the engine's semantics, or None (the reason is noted); and
    the lifter's parse of it when there is one (the scalar front end takes it when the query is
    None or the network level leaves it)."""
    from qverify.engine.netlevel.lift import lift_file
    from qverify.engine.netlevel.query import Arithmetic

    with recorder.timer("lift"):
        lifted = lift_file(path, include_dirs, Arithmetic.IMPLEMENTATION)
    for stage, seconds in lifted.times_s.items():
        recorder.add_time(f"lift.{stage}", seconds)
    if lifted.query is None:
        recorder.note(f"scalar front end: {lifted.reason}")
        return None, lifted.parsed
    query = lifted.query
    if options.semantics == "real" and query.qnet.is_float:  # ideal arithmetic on the C's constants
        query = replace(query, arithmetic=Arithmetic.REAL)
    return query, lifted.parsed


def _scalar_unit(path: Path, include_dirs: Sequence[Path], parsed: ParsedHarness | None) -> TranslationUnit:
    """The translation unit of the scalar path: from the lifter's parse when it declined the
    harness after parsing it (one preprocessor run and one parse, not two), else from the file."""
    from qverify.engine import cfront

    if parsed is not None:
        return cfront.build_unit(parsed.tree(), str(path))
    return cfront.parse_file(Path(path), [Path(d) for d in include_dirs])


def _network_level(query: NetworkQuery, options: EngineOptions, deadline: float, recorder: Recorder):
    """The network-level verdict, or None when the scalar path should decide instead."""
    from qverify.engine.netlevel.model import unsupported_reason
    from qverify.engine.netlevel.search import decide

    unsupported = unsupported_reason(query)
    if unsupported is not None:  # the scalar path covers it
        recorder.note(f"scalar strategy: {unsupported}")
        return None
    small = _multiply_adds(query) <= SCALAR_FALLBACK_MACS
    own_deadline = deadline
    if small and query.qnet.is_integer:
        # fixed point: the scalar path reasons about each rounding exactly (integer quotients, not
        # error terms) and decides queries the network level leaves open (ACAS Xu <16,16> 1_7 phi2:
        # scalar 12 s, network level open at 60 s): it keeps the larger share of the time
        own_deadline = time.monotonic() + NETWORK_LEVEL_SHARE * max(deadline - time.monotonic(), 0.0)
    result = decide(query, options, own_deadline, recorder)
    if result.status is not EngineStatus.UNKNOWN:
        return result
    if small and deadline - time.monotonic() >= FALLBACK_MIN_SECONDS:
        recorder.note(f"network level: {result.reason}; the scalar path continues with the time left")
        return None
    return result


def check_file(
    path: Path, include_dirs: Sequence[Path] = (), options: EngineOptions | None = None
) -> EngineResult:
    """Decide the C harness at `path`: SAFE, UNSAFE (with a counterexample the evaluator confirmed),
    UNKNOWN (with the reason) or ERROR (`file:line: what` for C the engine does not handle).

    Never raises for a verdict-worthy failure; stops itself within `options.timeout_s`.
    """
    options = options or EngineOptions()
    start = time.monotonic()
    # stop early enough to report: solver time limits and the last evaluation overrun a little
    safety = min(max(0.05 * options.timeout_s, 0.3), 3.0)
    deadline = start + options.timeout_s - safety
    recorder = Recorder()

    def finish(status: EngineStatus, reason: str, decided_by: str = "") -> EngineResult:
        return _with_record(EngineResult(status, reason=reason, decided_by=decided_by), recorder, start)

    parsed = None
    try:
        if options.enabled("lift") and not options.certify:
            query, parsed = _lifted(Path(path), include_dirs, options, recorder)
            if query is not None:
                recorder.add("front_end", 1)
                recorder.peak("inputs", query.n_inputs)  # the scalar path may count them again
                result = _network_level(query, options, deadline, recorder)
                if result is not None:
                    return _with_record(result, recorder, start)
        # the engine's stages are imported where they run, not with the package: `qverify verify`
        # imports qverify.engine.result for its option names only, and a harness the network level
        # decides never needs the scalar path's modules (the engine host imports them after it
        # said ready, qverify.backends.engine_process: ~70 ms of a small query's start otherwise)
        from qverify.engine.scalar import ssa, symex
        from qverify.engine.scalar.passes.simplify import simplify
        from qverify.engine.scalar.strategy import Strategy

        with recorder.timer("parse"):
            unit = _scalar_unit(Path(path), include_dirs, parsed)
        with recorder.timer("symex"):
            manager = ssa.NodeManager()
            program = symex.execute(unit, manager, deadline)
        recorder.peak("inputs", len(program.inputs))
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
    return _with_record(result, recorder, start)


def _with_record(result: EngineResult, recorder: Recorder, start: float) -> EngineResult:
    """The result with every stage's time and count the run recorded, and its total time."""
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
        notes=recorder.notes + tuple(n for n in result.notes if n not in recorder.notes),
    )
