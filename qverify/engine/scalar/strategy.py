"""Scalar path: the decision strategy for one program: attack, then bounds, splitting, MILP and SMT per
query.

1. attack: the evaluator on box corners, random points and a local search. A violation (confirmed
   on the original program) ends the run: UNSAFE.
2. Each assertion p gives a query: "every assume before p holds and p fails". Its piecewise-linear
   lowering is split into conjunctions of literals (the DNF of the query); each is a *subquery*.
   Subqueries go through stages, cheapest first, all subqueries through a stage before any goes to
   the next, so an easy violation of a later assertion is not starved by a hard earlier one:
   a. bounds: symbolic bounds over the whole input box refute it (probes at the bounds' maximisers);
   b. split (few inputs): branch and bound on the input box; more inputs: the relaxed MILP
      (continuous inputs and rounding quotients: infeasible proves it, a solution is a candidate)
      for every subquery, then splitting for those still open;
   c. the exact MILP (HiGHS), or exact SMT (--solver bitwuzla|z3, float programs, or what the MILP
      cannot express); time is shared among the subqueries still open.
   Every candidate input is evaluated exactly; only a confirmed one makes the run UNSAFE.
3. Every subquery refuted: SAFE; --certify re-checks each assertion with exact SMT.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from qverify.engine.result import EngineOptions, EngineResult, EngineStatus, Recorder
from qverify.engine.scalar import milp as milp_encoding
from qverify.engine.scalar import ssa
from qverify.engine.scalar.attack import Attack, input_boxes
from qverify.engine.scalar.boxmilp import NODE_LIMIT as BOX_MILP_NODE_LIMIT
from qverify.engine.scalar.boxmilp import BoxMilp
from qverify.engine.scalar.branch import literal_rows, split
from qverify.engine.scalar.evaluate import VIOLATED, ProgramRunner, RealRunner
from qverify.engine.scalar.fasteval import LoweredEvaluator
from qverify.engine.scalar.fasteval import usable as fasteval_usable
from qverify.engine.scalar.linear import Conjunction, Lowering, conjunctions
from qverify.engine.scalar.passes.simplify import Simplified
from qverify.engine.scalar.relax import RelaxedModel, bounds
from qverify.engine.scalar.semantics import float_dtype
from qverify.engine.solvers.base import CheckStatus
from qverify.errors import QverifyError, ToolMissingError, UnsupportedError

SPLIT_MAX_INPUTS = 10
SPLIT_SHARE = 0.85  # of the remaining time, for splitting before the MILP takes over
MANY_SPLIT_SHARE = 0.8  # the same for more than SPLIT_MAX_INPUTS inputs, after the relaxed MILP
RELAXED_SHARE = 0.3  # of the remaining time, shared by the relaxed MILPs
ATTACK_SHARE = 0.05
LOCAL_SEARCH_S = 2.0  # around each spurious MILP solution
ATTACK_MAX_S = 10.0


@dataclass
class Subquery:
    p: int
    lowering: Lowering | None = None
    model: RelaxedModel | None = None
    conjunction: Conjunction | None = None
    rows: list = field(default_factory=list)
    senses: list = field(default_factory=list)
    literals: list = field(default_factory=list)  # behind the rows
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    integer: np.ndarray | None = None
    grid: np.ndarray | None = None  # per input: the bits of its float type, 0 for integers
    whole: object = None  # bounds over the whole box (its row fields: the rows before dropping)
    probe: Callable | None = None
    status: str = "open"  # open | proven | found
    by: str = ""
    note: str = ""
    smt_only: bool = False
    tried: set = field(default_factory=set)
    index: int = 0  # position among the query's conjunctions
    # the optimistic lowering's saturation/wrap checks not proved on the whole region: rows with
    # the interval their value must stay in (the model is exact only where they hold)
    checks: list = field(default_factory=list)
    check_lo: np.ndarray | None = None
    check_hi: np.ndarray | None = None

    def add_note(self, text: str) -> None:
        """Record why a step did not decide (kept in order, each text once)."""
        if text and text not in self.note:
            self.note = f"{self.note}; {text}" if self.note else text


class Found(Exception):
    """A confirmed counterexample: ends the run."""

    def __init__(self, x: np.ndarray, by: str, solver: str = "") -> None:
        super().__init__(by)
        self.x, self.by, self.solver = x, by, solver


class Strategy:
    def __init__(
        self,
        simplified: Simplified,
        options: EngineOptions,
        deadline: float,
        recorder: Recorder,
        smt_factory: Callable[..., object] | None = None,
    ) -> None:
        self.s = simplified
        self.program = simplified.program
        self.original = simplified.original
        self.options = options
        self.deadline = deadline
        self.rec = recorder
        self.real = options.semantics == "real"
        self.is_float = any(node.ty.is_float for node in self.original.inputs)
        self.uses_float = self.is_float or _uses_float(self.program)
        if self.real and self.uses_float:
            # exact rationals are scalar and slow (ACAS Xu: ~0.1 s a point, so probing thousands
            # of points outran the deadline): points are screened in IEEE arithmetic, and only
            # those the screen finds violating are confirmed exactly (docs/engine.md, Semantics)
            self.confirm = RealRunner(self.original)
            self.search = ProgramRunner(self.program)
        else:
            self.real = False
            self.confirm = ProgramRunner(self.original)
            self.search = ProgramRunner(self.program)
        self.exact_smt = options.solver != "milp" or (self.uses_float and not self.real)
        self.smt_factory = smt_factory
        self.boxes = None
        self.attack: Attack | None = None

    # -------------------------------------------------------------- helpers

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def until(self, seconds: float) -> float:
        """A deadline `seconds` from now, capped by the run's and the per-query limit."""
        limit = self.options.query_timeout_s
        seconds = seconds if limit is None else min(seconds, limit)
        return min(self.deadline, time.monotonic() + max(seconds, 0.0))

    def result(self, status: EngineStatus, **kwargs) -> EngineResult:
        return EngineResult(status, times_s=dict(self.rec.times), counts=dict(self.rec.counts), **kwargs)

    def unsafe(self, x: np.ndarray, by: str, solver: str = "") -> EngineResult:
        row = self._typed(np.atleast_2d(x))
        outcome = self.confirm.run(row)
        message = self.original.asserts[int(outcome.violated[0])].message
        values = tuple(
            float(v) if node.ty.is_float else int(v) for v, node in zip(row[0], self.original.inputs)
        )
        return self.result(
            EngineStatus.UNSAFE, counterexample=values, violated=message, decided_by=by, solver=solver
        )

    def confirmed(self, points: np.ndarray) -> np.ndarray | None:
        """The first row that violates on the original program, if any."""
        if len(points) == 0:
            return None
        points = self._typed(points)
        outcome = self.search.run(points)  # the simplified program: same outcomes, cheaper
        rows = np.flatnonzero(outcome.status == VIOLATED)
        if len(rows) == 0:
            return None
        candidates = points[rows[:64]]
        if self.search is not self.confirm:
            outcome = self.confirm.run(candidates)
            rows = np.flatnonzero(outcome.status == VIOLATED)
            if len(rows) == 0:
                return None
        return candidates[rows[0]]

    def _typed(self, points: np.ndarray) -> np.ndarray:
        points = np.atleast_2d(np.asarray(points, dtype=np.float64))
        if self.is_float:
            out = points.copy()
            for node in self.original.inputs:
                if node.ty.is_float:
                    out[:, node.index] = out[:, node.index].astype(float_dtype(node.ty)).astype(np.float64)
                else:
                    out[:, node.index] = np.round(out[:, node.index])
            return out
        return np.round(points).astype(np.int64)

    def _signed_zeros(self, points: np.ndarray) -> np.ndarray:
        """The points, and for each float input at zero a copy with the other zero: a box [-0, 0]
        is one point to splitting, but -0.0 and 0.0 are different inputs (1 / x)."""
        if not self.is_float:
            return points
        for node in self.original.inputs:
            if node.ty.is_float:
                zero = points[:, node.index] == 0
                if zero.any():
                    other = points[zero]
                    other[:, node.index] = np.where(np.signbit(other[:, node.index]), 0.0, -0.0)
                    points = np.vstack([points, other])
        return points

    def complete(self, partial: dict[int, float]) -> np.ndarray:
        """A full input vector from values for some inputs (others: the first box's midpoint)."""
        box = self.boxes[0]
        x = np.array([(float(lo) + float(hi)) / 2 for lo, hi in zip(box.lo, box.hi)])
        for index, value in partial.items():
            x[index] = value
        return x

    def neighbours(self, x: np.ndarray) -> np.ndarray:
        """x rounded, and its +-1 neighbours per integer input (MILP solutions are approximate)."""
        if self.is_float:
            return x[None]
        base = np.round(x)
        rows = [base, np.floor(x), np.ceil(x)]
        for i in range(len(x)):
            for delta in (-1, 1):
                row = base.copy()
                row[i] += delta
                rows.append(row)
        return np.array(rows)

    # -------------------------------------------------------------- the run

    def run(self) -> EngineResult:
        try:
            return self._run()
        except Found as found:
            return self.unsafe(found.x, found.by, found.solver)

    def _run(self) -> EngineResult:
        program = self.program
        self.rec.add("asserts", len(program.asserts))
        asserts = [p for p, step in enumerate(program.steps) if isinstance(step, ssa.Assert)]
        if not asserts:
            reason = "an assumption is false for every input" if self.s.vacuous else "no assertion can fail"
            return self.safe(reason, "bounds", "")
        self.boxes = input_boxes(program, self.s.getter(asserts[0]))
        if self.options.enabled("attack") and self.options.attack_samples > 0:
            with self.rec.timer("attack"):
                attack = self.attack = Attack(program, self.confirm, self.boxes, self.options.seed)
                budget = time.monotonic() + max(min(self.remaining() * ATTACK_SHARE, ATTACK_MAX_S), 0.05)
                found = attack.run(self.options.attack_samples, budget)
                self.rec.add("attack_points", found.evaluated)
            if found.counterexample is not None:
                return self.unsafe(found.counterexample, "attack")
        subqueries: list[Subquery] = []
        for p in asserts:
            if self.remaining() <= 0:
                break
            subqueries.extend(self.stage_bounds(p))
        open_ = [q for q in subqueries if q.status == "open"]
        if open_ and self.remaining() > 0:
            self.stage_middle(open_)
        open_ = [q for q in subqueries if q.status == "open"]
        if open_ and self.remaining() > 0:
            self.stage_exact(open_)
        open_ = [q for q in subqueries if q.status == "open"]
        decided_asserts = {q.p for q in subqueries}
        if open_ or len(decided_asserts) < len(asserts):
            notes = [f"{program.steps[q.p].message[:120]}: {q.note or 'undecided'}" for q in open_]
            missing = len(asserts) - len(decided_asserts)
            if missing:
                notes.append(f"{missing} assertion(s) not reached")
            reason = notes[0] if len(notes) == 1 else f"{notes[0]} (and {len(notes) - 1} more)"
            if missing or self.remaining() <= 0:
                reason = f"timeout after {self.options.timeout_s:g} s; {reason}"
            return self.result(EngineStatus.UNKNOWN, reason=reason)
        deciders = {q.by for q in subqueries}
        decided_by = next((name for name in ("smt", "milp", "split", "bounds") if name in deciders), "bounds")
        solver = {"milp": "highs", "smt": self.smt_solver_name()}.get(decided_by, "")
        return self.safe("", decided_by, solver)

    def safe(self, reason: str, decided_by: str, solver: str) -> EngineResult:
        """SAFE, or under --certify the certification's outcome (an UNSAFE should SMT find one)."""
        if self.options.certify:
            certified = self.certify()
            if isinstance(certified, EngineResult):
                return certified
            reason = f"{reason}; {certified}" if reason else certified
        return self.result(EngineStatus.SAFE, reason=reason, decided_by=decided_by, solver=solver)

    # -------------------------------------------------------------- stage a: bounds

    def stage_bounds(self, p: int) -> list[Subquery]:
        """Lower query p and try symbolic bounds on each of its conjunctions."""
        self.rec.add("queries", 1)
        try:
            with self.rec.timer("bounds"):
                lowering, alternatives, model = self.lower_optimistic(p)
        except UnsupportedError as error:
            return [Subquery(p, smt_only=True, note=f"not expressible as MILP ({error})")]
        if alternatives is None:
            return [Subquery(p, smt_only=True, note="too many disjuncts for the MILP")]
        self.rec.peak("variables", len(lowering.vars))
        self.rec.peak("relaxed_variables", model.n)
        result = []
        for index, conjunction in enumerate(alternatives):
            query = Subquery(p, lowering, model, conjunction, index=index)
            query.checks, query.check_lo, query.check_hi = self.unproved_checks(lowering, model)
            self.bounds_one(query)
            result.append(query)
        return result

    def unproved_checks(self, lowering: Lowering, model: RelaxedModel) -> tuple[list, np.ndarray, np.ndarray]:
        """The optimistic lowering's checks that symbolic bounds over the whole region do not prove."""
        if not lowering.checks:
            return [], np.zeros(0), np.zeros(0)
        cached = getattr(lowering, "_unproved", None)
        if cached is not None:
            return cached
        lo, hi, _ = self.model_box(model)
        rows = [model.row_of(expr) for _, expr, _, _ in lowering.checks]
        with self.rec.timer("bounds"):
            result = bounds(model, lo[None], hi[None], [], many=rows)
        low = np.array([float(c[2]) for c in lowering.checks])
        high = np.array([float(c[3]) for c in lowering.checks])
        open_ = np.flatnonzero((result.many_lb[0] < low) | (result.many_ub[0] > high))
        self.rec.add("saturation_checks", len(lowering.checks))
        self.rec.add("saturations_open", len(open_))
        unproved = ([rows[i] for i in open_], low[open_], high[open_])
        lowering._unproved = unproved  # type: ignore[attr-defined]
        return unproved

    def exact_lowering(self, q: Subquery) -> bool:
        """Make q's lowering exact for the MILP when the optimistic one has unproved checks:
        lower again with those saturations/wrap-arounds exact. False if that fails."""
        if not q.checks:
            return True
        lowering, alternatives, model = self.lower(q.p)
        if alternatives is None or len(alternatives) <= q.index:
            return False
        q.lowering, q.model, q.conjunction = lowering, model, alternatives[q.index]
        q.checks = []
        q.whole = None
        lo, hi, _ = self.model_box(model)
        q.rows, q.senses, q.lo, q.hi, q.literals = literal_rows(model, lowering, q.conjunction, lo, hi)
        if self.options.enabled("bounds") and q.rows and np.all(q.lo <= q.hi):
            with self.rec.timer("bounds"):
                q.whole = bounds(model, q.lo[None], q.hi[None], q.rows)
        return True

    def lower_optimistic(self, p: int) -> tuple[Lowering, list[Conjunction] | None, RelaxedModel | None]:
        """Lower query p with saturations and wrap-arounds as the identity (checks recorded)."""
        semantics = self.options.semantics if self.real else "ieee"
        conds = [(step.cond, True) for step in self.program.steps[:p] if isinstance(step, ssa.Assume)]
        conds.append((self.program.steps[p].cond, False))
        lowering = Lowering(self.s.getter(p), semantics, optimistic=True)
        alternatives = conjunctions(lowering, conds)
        if alternatives is None:
            return lowering, None, None
        return lowering, alternatives, RelaxedModel.build(lowering)

    def lower(self, p: int) -> tuple[Lowering, list[Conjunction] | None, RelaxedModel | None]:
        """Lower query p exactly: first optimistically (saturations and wrap-arounds as the
        identity), then prove with symbolic bounds over the whole input region that none of them
        acts; those not proved are lowered exactly in the next round (three rounds, then all)."""
        semantics = self.options.semantics if self.real else "ieee"
        conds = [(step.cond, True) for step in self.program.steps[:p] if isinstance(step, ssa.Assume)]
        conds.append((self.program.steps[p].cond, False))
        keep: frozenset[int] = frozenset()
        for _ in range(3):
            lowering = Lowering(self.s.getter(p), semantics, optimistic=True, keep=keep)
            alternatives = conjunctions(lowering, conds)
            if alternatives is None:
                return lowering, None, None
            model = RelaxedModel.build(lowering)
            if not lowering.checks:
                return lowering, alternatives, model
            lo, hi, _ = self.model_box(model)
            rows = [model.row_of(expr) for _, expr, _, _ in lowering.checks]
            result = bounds(model, lo[None], hi[None], [], many=rows)
            failing = {
                node
                for (node, _, low, high), row_lo, row_hi in zip(
                    lowering.checks, result.many_lb[0], result.many_ub[0]
                )
                if row_lo < low or row_hi > high
            }
            if not failing:
                return lowering, alternatives, model
            self.rec.add("saturations_kept", len(failing))
            keep = keep | failing
        lowering = Lowering(self.s.getter(p), semantics)
        alternatives = conjunctions(lowering, conds)
        return lowering, alternatives, RelaxedModel.build(lowering) if alternatives is not None else None

    def model_box(self, model: RelaxedModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        order = sorted(model.input_kept)
        lo = np.array([model.lo[model.input_kept[i]] for i in order], dtype=np.float64)
        hi = np.array([model.hi[model.input_kept[i]] for i in order], dtype=np.float64)
        integer = np.array([not self.original.inputs[i].ty.is_float for i in order], dtype=bool)
        return lo, hi, integer

    def probe_for(self, model: RelaxedModel, lowering: Lowering, conjunction: Conjunction):
        """Checks candidate points (model input order): screened on the lowering when it is exact
        and integer (fast), then confirmed on the program."""
        order = sorted(model.input_kept)
        fast = LoweredEvaluator(lowering) if fasteval_usable(lowering) and not self.is_float else None

        def probe(points: np.ndarray) -> np.ndarray | None:
            base = self.complete({})
            full = np.tile(base, (len(points), 1))
            full[:, order] = points
            full = self._signed_zeros(self._typed(full))
            self.rec.add("probes", len(full))
            if fast is not None:
                full = full[fast.holds(conjunction, full)]
            return self.confirmed(full)

        return probe

    def bounds_one(self, q: Subquery) -> None:
        model, lowering = q.model, q.lowering
        lo, hi, q.integer = self.model_box(model)
        q.grid = np.array(
            [
                self.original.inputs[i].ty.bits if not integer else 0
                for i, integer in zip(sorted(model.input_kept), q.integer)
            ]
        )
        with self.rec.timer("bounds"):
            q.rows, q.senses, q.lo, q.hi, q.literals = literal_rows(model, lowering, q.conjunction, lo, hi)
        if np.any(q.lo > q.hi):
            q.status, q.by = "proven", "bounds"
            return
        q.probe = self.probe_for(model, lowering, q.conjunction)
        centre = ((q.lo + q.hi) / 2)[None]
        if not q.rows:
            found = q.probe(centre)
            if found is not None:
                raise Found(found, "bounds")
            return
        if not self.options.enabled("bounds"):
            return
        with self.rec.timer("bounds"):
            q.whole = bounds(model, q.lo[None], q.hi[None], q.rows, many=q.checks or None)
            refuted = (q.whole.row_ub < 0) | (
                np.array([s == "eq" for s in q.senses])[None, :] & (q.whole.row_lb > 0)
            )
            if q.checks:
                hold = np.all(q.whole.many_lb[0] >= q.check_lo) and np.all(q.whole.many_ub[0] <= q.check_hi)
                refuted = refuted & hold
        if refuted.any():
            q.status, q.by = "proven", "bounds"
            return
        found = q.probe(np.concatenate([q.whole.row_argmax[0], centre]))
        if found is not None:
            raise Found(found, "bounds")
        self.drop_holding_rows(q)

    def drop_holding_rows(self, q: Subquery) -> None:
        """Keep for splitting only the literals that can cut a sub-box.

        Injected invariants (`lo <= acc && acc <= hi` per neuron) arrive as hundreds of assume
        literals on intermediate values; they hold in every execution, so they can refute no box,
        and bounding them on every sub-box multiplies the cost of splitting. Splitting keeps the
        violation's literals and the assumptions on inputs alone, less any literal the whole-box
        bounds already satisfy. Dropping a literal only weakens the query (more executions): a
        refutation stays sound, and every probe is still checked against the whole conjunction.
        """
        inputs = set(q.lowering.inputs.values())
        ge = np.array([s == "ge" for s in q.senses])
        holding = np.where(ge, q.whole.row_lb[0] >= 0, (q.whole.row_lb[0] == 0) & (q.whole.row_ub[0] == 0))
        deep = np.array([lit.assumed and not set(lit.expr.terms) <= inputs for lit in q.literals])
        dropped = holding | deep
        if dropped.all() or not dropped.any():
            return
        kept = np.flatnonzero(~dropped)
        q.rows = [q.rows[i] for i in kept]
        q.senses = [q.senses[i] for i in kept]
        q.literals = [q.literals[i] for i in kept]
        self.rec.add("literals_dropped", int(dropped.sum()))

    # -------------------------------------------------------------- stage b: split / relaxed MILP

    def stage_middle(self, queries: list[Subquery]) -> None:
        """Few inputs: splitting (complete for integer inputs). More inputs: the relaxed MILP for
        every query, then splitting for those still open, with most of the time left before the
        exact MILP. Splitting 64 inputs is hopeless on a large box but not on a robustness ball:
        the per-op digits queries (64 inputs, radius 0.5-1 grey levels) whose exact MILP did not
        finish in 240 s are refuted in 111-1,280 boxes (docs/engine.md)."""
        later = self.options.enabled("milp") or self.exact_smt
        many = []
        for position, q in enumerate(queries):
            if self.remaining() <= 0:
                return
            left = len(queries) - position
            if q.smt_only:
                continue
            can_split = self.options.enabled("split") and bool(q.rows)
            if can_split and len(q.lo) <= SPLIT_MAX_INPUTS:
                self.split_query(q, self.remaining() * (SPLIT_SHARE if later else 1.0) / left)
                continue
            if self.options.enabled("milp") and not self.exact_smt:
                share = self.remaining() * RELAXED_SHARE / left
                self.milp(q, "relaxed", self.until(max(share, 1.0)))
            if can_split:
                many.append(q)
        open_ = [q for q in many if q.status == "open"]
        for position, q in enumerate(open_):
            share = MANY_SPLIT_SHARE if later else 1.0
            self.split_query(q, self.remaining() * share / (len(open_) - position))

    def split_query(self, q: Subquery, seconds: float) -> None:
        """Branch and bound on q's input box for at most `seconds`."""
        if self.remaining() <= 0:
            return
        with self.rec.timer("split"):
            checks = (q.checks, q.check_lo, q.check_hi) if q.checks else None
            result = split(
                q.model,
                q.rows,
                q.senses,
                q.lo,
                q.hi,
                q.integer,
                q.probe,
                self.until(seconds),
                **({"max_boxes": self.options.max_nodes} if self.options.max_nodes is not None else {}),
                checks=checks,
                box_milp=self.box_milp(q),
                grid=q.grid,
            )
        self.rec.add("boxes", result.boxes)
        self.rec.add("box_milps", result.milps)
        self.rec.add("box_milps_refuted", result.milp_refuted)
        if result.status == "refuted":
            q.status, q.by = "proven", "split"
        elif result.status == "found":
            raise Found(result.counterexample, "split")
        else:
            q.add_note(result.reason)

    def box_milp(self, q: Subquery) -> BoxMilp | None:
        """The exact-ReLU MILP for splitting's boxes: integer (fixed-point) programs only, where
        every row's 0.5 slack is below one unit (float programs have no such scale), with the
        MILP enabled and HiGHS installed, and few inputs. With many inputs the relaxed MILP has
        already been asked about the whole query, and on the digits queries (64 inputs, first
        layer tabulated exactly for the bounds but not for the MILP) the box MILP refuted 25 of
        6,521 boxes and cost one decided query."""
        if self.uses_float or not self.options.enabled("milp") or len(q.lo) > SPLIT_MAX_INPUTS:
            return None
        from qverify.engine.solvers.highs import HighsSolver

        try:
            node_limit = BOX_MILP_NODE_LIMIT if self.options.max_nodes is not None else None
            return BoxMilp(q.model, q.rows, q.senses, HighsSolver(), node_limit)
        except ToolMissingError as error:
            q.add_note(str(error))
            return None

    # -------------------------------------------------------------- stage c: exact

    def stage_exact(self, queries: list[Subquery]) -> None:
        smt_done: set[int] = set()
        for position, q in enumerate(queries):
            if self.remaining() <= 0:
                q.add_note("timeout")
                continue
            share = self.remaining() / (len(queries) - position)
            if q.smt_only or self.exact_smt or not self.options.enabled("milp"):
                if q.p in smt_done:
                    continue
                smt_done.add(q.p)
                outcome = self.smt_query(q.p, share)
                if outcome == "proven":
                    for other in queries:
                        if other.p == q.p:
                            other.status, other.by = "proven", "smt"
                elif outcome:
                    for other in queries:
                        if other.p == q.p:
                            other.add_note(outcome)
                continue
            modes = [
                m for m in ("relaxed", "exact") if m not in q.tried and (m == "relaxed" or q.lowering.exact)
            ]
            if "exact" not in modes and not q.lowering.exact:
                q.add_note("the linear encoding is a relaxation here and its solutions do not replay")
            for mode in modes:
                if q.status != "open":
                    break
                self.milp(q, mode, self.until(share if mode == "exact" else share / 2))
            if q.status == "open" and self.options.enabled("smt") and self.remaining() > 0:
                outcome = self.smt_query(q.p, self.remaining() / (len(queries) - position))
                if outcome == "proven":
                    q.status, q.by = "proven", "smt"
                elif outcome:
                    q.add_note(outcome)

    # -------------------------------------------------------------- MILP

    def milp_bounds(self, q: Subquery) -> dict:
        """Variable and argument bounds for the MILP from the symbolic bounds over the whole box."""
        tightened: dict = {}
        model, lowering = q.model, q.lowering
        if q.whole is not None:
            kept_to_var = {kept: var for var, kept in model.plp_to_kept.items()}
            for level in model.levels:
                for kept in level.units:
                    var = kept_to_var[int(kept)]
                    lo, hi = q.whole.arg_lo[0, kept], q.whole.arg_hi[0, kept]
                    if math.isfinite(lo) and math.isfinite(hi):
                        tightened[("arg", var)] = (lo, hi)
        for column, index in enumerate(sorted(model.input_kept)):
            tightened[lowering.inputs[index]] = (q.lo[column], q.hi[column])
        return tightened

    def milp(self, q: Subquery, mode: str, deadline: float) -> None:
        from qverify.engine.solvers.highs import HighsSolver

        if q.checks:
            with self.rec.timer("bounds"):
                if not self.exact_lowering(q):
                    q.add_note("no exact lowering for the MILP")
                    return
        try:
            solver = HighsSolver()
        except ToolMissingError as error:
            q.add_note(str(error))
            return
        q.tried.add(mode)
        slack = 0.0 if self.uses_float else 0.5
        with self.rec.timer("milp"):
            encoded = milp_encoding.encode(q.lowering, q.conjunction, mode, slack, self.milp_bounds(q))
            self.rec.peak("milp_columns", encoded.n_cols)
            self.rec.peak("milp_rows", encoded.n_rows)
            self.rec.peak("milp_integers", int(sum(encoded.integer)))
            answer = solver.check(encoded, deadline)
            self.rec.add("milp_queries", 1)
        if answer.status is CheckStatus.UNSAT:
            q.status, q.by = "proven", "milp"
            return
        if answer.status is CheckStatus.UNKNOWN:
            q.add_note(answer.reason)
            return
        x = self.complete(dict(answer.inputs))
        found = self.confirmed(self.neighbours(x))
        if found is not None:
            raise Found(found, "milp", "highs")
        found = self.search_near(x)
        if found is not None:
            raise Found(found, "milp", "highs")
        q.add_note(f"the {mode} MILP's solution does not violate the assertion")

    def search_near(self, x: np.ndarray) -> np.ndarray | None:
        """A short local search from a (spurious) solution: violations are often nearby."""
        if self.attack is None or not self.options.enabled("attack"):
            return None
        box = next(
            (b for b in self.boxes if np.all(x >= b.lo.astype(float)) and np.all(x <= b.hi.astype(float))),
            self.boxes[0],
        )
        budget = min(LOCAL_SEARCH_S, max(self.remaining() * 0.05, 0.0))
        with self.rec.timer("attack"):
            starts = self.neighbours(x)
            return self.attack.local_search(starts, box, time.monotonic() + budget)

    # -------------------------------------------------------------- SMT

    def smt_solver_name(self) -> str:
        return self.options.solver if self.options.solver != "milp" else "bitwuzla"

    def smt_query(self, p: int, seconds: float) -> str:
        """'proven', or a note why not (raises Found on a confirmed violation)."""
        if not self.options.enabled("smt") or self.smt_factory is None:
            return "SMT disabled"
        if self.real:
            return "no exact SMT for --semantics real"
        name = self.smt_solver_name()
        try:
            solver = self.smt_factory(name)
        except ToolMissingError as error:
            if name != "bitwuzla":
                return str(error)
            try:
                solver, name = self.smt_factory("z3"), "z3"
            except ToolMissingError:
                return str(error)
        with self.rec.timer("smt"):
            try:
                answer = solver.check_query(self.s, p, self.until(seconds))
            except QverifyError as error:
                return f"{name}: {error}"
            finally:
                solver.close()
            self.rec.add("smt_queries", 1)
        if answer.status is CheckStatus.UNSAT:
            return "proven"
        if answer.status is CheckStatus.SAT:
            found = self.confirmed(self.neighbours(self.complete(answer.inputs)))
            if found is not None:
                raise Found(found, "smt", name)
            return f"{name} model does not replay (an encoding bug: please report)"
        return f"{name}: {answer.reason}"

    def certify(self) -> EngineResult | str:
        """Re-check every assertion of the program *as symbolic execution produced it* with exact
        SMT at full C widths: the certificate rests on neither the simplifier's rewriting nor any
        interval, bound or MILP argument. A text for the record, or UNSAFE."""
        if self.smt_factory is None or self.real:
            return "certify: no exact SMT for this run"
        name = self.smt_solver_name()
        plain = Simplified(self.original, self.original, {})
        asserts = [p for p, step in enumerate(self.original.steps) if isinstance(step, ssa.Assert)]
        start = time.monotonic()
        statuses = []
        for p in asserts:
            try:
                solver = self.smt_factory(name, narrow=False)
            except ToolMissingError as error:
                return f"certify: {error}"
            try:
                answer = solver.check_query(plain, p, self.deadline)
            finally:
                solver.close()
            if answer.status is CheckStatus.SAT:
                found = self.confirmed(self.neighbours(self.complete(answer.inputs)))
                if found is not None:
                    result = self.unsafe(found, "smt", name)
                    return EngineResult(
                        result.status,
                        reason="certify: SMT found a violation the earlier steps had refuted",
                        counterexample=result.counterexample,
                        violated=result.violated,
                        decided_by="smt",
                        solver=name,
                        times_s=result.times_s,
                        counts=result.counts,
                    )
            statuses.append(answer.status)
        elapsed = time.monotonic() - start
        self.rec.add_time("certify", elapsed)
        if all(status is CheckStatus.UNSAT for status in statuses):
            return f"certified by {name} in {elapsed:.2f} s"
        unknown = sum(status is not CheckStatus.UNSAT for status in statuses)
        return f"certify: {name} did not finish {unknown} of {len(statuses)} queries in {elapsed:.2f} s"


def _uses_float(program: ssa.Program) -> bool:
    return any(node.ty.is_float for node in ssa.topological(program.roots()))
