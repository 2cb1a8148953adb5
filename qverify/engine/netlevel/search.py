"""Network level: the network-level strategy: attack, sound bounds, branch and bound, LP/MILP, enumeration.

`decide(query, options, deadline, recorder)` answers a `NetworkQuery` without any per-scalar node
graph, cheapest step first:

1. attack: the centre, corners and random points in one batch, then projected gradient descent on
   the real-valued surrogate (briefly; high-dimensional queries attack longer once the root node
   stays open); every candidate is confirmed exactly (`attack.Confirmer`).
2. bounds (`bounds.node_bounds`): interval propagation and back-substitution, sound for float64 and
   for the implementation's rounding; an unsafe clause is refuted on a node when one of its atoms'
   margin is provably on the safe side, or a convex combination of the atoms' linear bounds is.
3. branch and bound, best first (the node whose bottleneck atom is furthest from refuted): input
   splitting for low-dimensional inputs (<= `INPUT_SPLIT_DIMENSIONS`, e.g. ACAS Xu's 5: the
   dimension with the largest |coefficient| x width in the bottleneck atom's bound), ReLU phase
   splitting otherwise (BaBSR-like score: |coefficient| x the triangle relaxation's intercept; the
   root's hidden-layer bounds are optimised by alpha-CROWN, a child keeps its parent's bounds up
   to the split layer, bounds the layers after it by intervals within its parent's bounds
   (`REBOUND_AFTER_SPLIT`) and its outputs with alpha-beta-CROWN, and keeps its parent's atom
   bounds and refuted clauses; once every phase is fixed, the box is split).
   Every node tries its bound's minimising vertex and its centre as counterexamples. Input
   splitting takes the best `BATCH_NODES` open nodes at a time and bounds them as one batch
   (`bounds.batch_bounds`: at ACAS Xu size Python's overhead per numpy call, not arithmetic, was
   the cost of a node), ReLU splitting the best `SPLIT_BATCH_NODES` (`batch.split_batch_bounds`
   and alpha-beta-CROWN over the batch: issue 45 item 3); the rest of a node's conclusion
   (LP/MILP, FSB's choice, children) stays per node.
4. exact last words on small sub-problems: a box with at most `ENUMERATION_LIMIT` inputs is
   enumerated through `simulate` (implementation arithmetic: exact, words or float values one by
   one; REAL: `REAL_ENUMERATION_LIMIT` points in exact rationals); LP then MILP over HiGHS per open
   clause (low dimensions: nodes with at most `LP_OPEN_RELUS` open ReLUs, in REAL arithmetic the
   MILP alone up to `REAL_MILP_OPEN_RELUS`; high dimensions: up to `LP_HIGH_INPUTS` inputs only,
   see `lp_affordable`); see `lp` for the tolerances. A node nothing above can close is abandoned
   and the answer is UNKNOWN.

SAFE needs every node closed; UNSAFE needs one confirmed point. Scope: dense ReLU/identity networks
in fixed point, float, double, half and int8 (requantization staircases: bounds, input splitting
and enumeration; in high dimensions the root's open clauses first by the MILP of `lp` whose first
layer's staircases are exact, `by_stepped_milp`; `model.unsupported_reason` names what falls back).
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from qverify.engine.netlevel import points
from qverify.engine.netlevel.attack import (
    AtomForm,
    Confirmer,
    Counterexample,
    atom_forms,
    gradient_attack,
    sample_attack,
    to_implementation,
)
from qverify.engine.netlevel.batch import split_batch_bounds, warm_start
from qverify.engine.netlevel.beta import optimise_output_bounds
from qverify.engine.netlevel.bounds import (
    Bounds,
    LinearBound,
    Undecidable,
    backsubstitute,
    batch_bounds,
    exact_input_lower,
    input_layer,
    linear_minimum,
    matvec,
    node_bounds,
    optimised_bound,
    span_input_lower,
    streams_input,
    tighten_intermediate,
    with_phase,
)
from qverify.engine.netlevel.branching import choose_relu
from qverify.engine.netlevel.lp import NodeSolution, solve_node
from qverify.engine.netlevel.model import NetModel, build_model, unsupported_reason
from qverify.engine.netlevel.operand_rounding import SpanReader, StreamedInput
from qverify.engine.netlevel.query import Arithmetic, InputRegion, NetworkQuery
from qverify.engine.netlevel.roundoff import U64, gamma
from qverify.engine.netlevel.splitting import input_split_scores
from qverify.engine.netlevel.staircase import Staircase, line_gap
from qverify.engine.netlevel.workers import Workers
from qverify.engine.result import EngineOptions, EngineResult, EngineStatus, Recorder
from qverify.engine.solvers.base import CheckStatus

INPUT_SPLIT_DIMENSIONS = 16
ENUMERATION_LIMIT = 1024  # inputs of a box enumerated through the simulator (implementation)
REAL_ENUMERATION_LIMIT = 16  # inputs checked one by one in exact rationals (REAL)
LP_OPEN_RELUS = 12  # low dimensions: a node with at most this many open ReLUs is tried as an LP / MILP
# REAL arithmetic, low dimensions: the MILP straight away, up to this many open ReLUs (the
# implementation's MILP, with rounding intervals on every row, took 5-10 times as long on ACAS Xu)
REAL_MILP_OPEN_RELUS = 24
MILP_OPEN_RELUS = 400  # high dimensions: the MILP's binaries at most (`lp_affordable` nodes try the LP)
MILP_SHARE = 0.3  # of the remaining time for one MILP
# int8, high dimensions: the root's MILP (`by_stepped_milp`) may take this share of the remaining
# time (the rest: the branch and bound's slices of attack)
STEPPED_MILP_SHARE = 0.8
# ... when every open clause's bound is this few output codes short (`within_codes`). With the
# staircases' own step schedule and warm starts the branch and bound closes roots 1.7 and 2.9 codes
# short in 14-24 s (digits32rgb-conv img05 eps 0.025, img07 eps 0.03), where the MILP first spent
# 37 s without closing them; it still closes those 0.2 and 0.5 codes short that the branch and bound
# leaves open at 60 s (digits32rgb-conv img00 eps 0.004, digits28-maxpool img00 eps 0.015)
STEPPED_MILP_CODES = 1.0
LP_SHARE = 0.05  # of the remaining time for one LP
LP_TIME_SHARE = 0.5  # the LPs' and MILPs' share of the search time, at most (`lp_affordable`) ...
LP_TIME_SHARE_MAX = 0.9  # ... in low dimensions, while they close more of the region per second
LP_RATES_AFTER_S = 5.0  # ... once the search has run this long
LP_HIGH_INPUTS = 256  # high dimensions: no LP/MILP beyond this many inputs (`lp_affordable`)
ATTACK_SHARE = 0.1  # of the budget for the gradient attack before branch and bound
ATTACK_SECONDS = 0.2  # high dimensions, before the root's bounds (at most)
# low dimensions: once a root's bounds leave it open, at most (ACAS Xu: 0.2 s up front was most of
# the time of the median SAFE query; 0.03 -> 0.01 s, paired whole processes on φ1-φ4 at <16,16>:
# quick SAFE -11/-25 ms, φ2 UNSAFE -20 ms, the same verdicts); not before the roots' bounds, which
# cost a few ms there and decide small SAFE boxes alone (an iris box: 0.03 s of attack was a fifth
# of the engine's task)
ATTACK_SECONDS_LOW = 0.01
ATTACK_SECONDS_HIGH = 6.0  # high dimensions: branch and bound nodes are few and dear
# during the branch and bound: slices of gradient attack, from the open nodes' leads (the inputs
# that minimise their worst bounds) and from random points, while the attack has had at most this
# share of the search's time
ATTACK_RUNNING_SHARE = 0.1
ATTACK_SLICE_SECONDS = 0.05
# ... and not in the search's first this many seconds (the first slice came at ~0.35 s when the
# attack at the open root took 0.03 s; with 0.01 s there it would come at ~0.1 s, on searches of
# 0.3-1 s that it rarely shortens)
ATTACK_RUNNING_AFTER_S = 0.3
LEADS = 8  # the open nodes' leads kept for the next slice
ALPHA_STEPS = 6  # alpha-CROWN steps on the atoms' bounds of a node they do not already refute
# ... at an int8 network's open root in high dimensions, once its hidden layers are tightened: the
# root's bound is every node's floor (digits32rgb-conv int8 img02 eps 0.04, the worst atom: -2.83
# after 6 steps, -2.15 after 20, -2.12 after 60; digits28-avgpool img06 eps 0.08: -0.30, -0.06,
# -0.03; 20 steps 1-2 s there)
ROOT_STAIR_ALPHA_STEPS = 20
# int8: a node's optimised staircase slopes are its children's start (float32) when there are at
# most this many (rows x 2 x staircase neurons: digits32rgb-conv 57,096, 0.2 MB a node;
# cifar10-resnet2b 221,364; digits28-avgpool 448,308, 1.8 MB: two children share their parent's,
# and these frontiers hold tens to hundreds of nodes)
WARM_SLOPES_MAX_VALUES = 1 << 19
# ReLU splitting: alpha-beta-CROWN steps on a node's open atoms (`beta.optimise_output_bounds`,
# warm-started from the parent's slopes and multipliers)
# (8 steps and FSB's 12 candidates: the same bounds within a few hundredths at 1.2-1.5 times the price of
# a node; digits784x4 img04 eps 0.02, real: 46.1 -> 35.3 CPU s to SAFE)
BETA_STEPS = 4
ALPHA_REACH = 0.25
# high dimensions: alpha-CROWN steps on the hidden layers' own bounds at the root (`tighten_intermediate`;
# digits784 img09 eps 0.015: 4 steps reach nearly all of 20 steps' gain, -6.91 vs -6.86, in a fourth
# of the time)
INTERMEDIATE_ALPHA_STEPS = 4
INTERMEDIATE_ALPHA_SHARE = 0.25  # of the remaining time, at most
# fixed point, high dimensions: an open root reads its input layer's product roundings exactly
# (`operand_rounding.StreamedInput`) on its hidden layers' and atoms' bounds, within this share of
# the remaining time (digits784 <16,16> img06 eps 0.015: the root -3.31 -> +1.28, 4 s) ...
EXACT_INPUT_SHARE = 0.25
# ... where the input layer's neurons sum at least this many roundings: their interval grows with
# the count, their exact minimum far more slowly (digits784: 779 a neuron; a 3x3 convolution's 9-27
# gain little for many rows: digits28-avgpool img00 eps 0.025 +0.002 in 28 s, digits32rgb-conv
# img00 eps 0.008 +0.02 in 4 s)
EXACT_INPUT_MIN_ROUNDINGS = 64
# ... and its split children read their atoms' input layer on the span of the root's atom rows
# (`operand_rounding.SpanReader`; False: the interval), where a row is open by at most SPAN_REACH
# times its interval term
SPAN_ROWS = True
SPAN_REACH = 2.0
COMBINATION_STEPS = 12  # supergradient steps choosing the weights of a clause's atoms
BATCH_NODES = 64  # input splitting: open nodes bounded in one batch (`bounds.batch_bounds`)
# ReLU splitting: open nodes bounded in one batch (`batch.split_batch_bounds`, alpha-beta-CROWN's
# "batch of domains"; the best-first order then expands this many nodes at a time)
SPLIT_BATCH_NODES = 32
# ... the layers after a child's split bounded by interval propagation and its parent's bounds only,
# not by back-substitution (alpha-beta-CROWN's fixed intermediate bounds: the split reaches the
# atoms through its multiplier). digits784x4 img04 eps 0.02, real, one process, CPU clock, load
# ~14: SAFE in 13.7 CPU s (3,017 nodes, 221 per CPU s) where back-substituting them took 19.1 s
# (1,701 nodes, 89 per CPU s); <16,16>, 60 CPU s: 6,975 nodes against 1,887, both open
REBOUND_AFTER_SPLIT = False
TABLE_SPLIT_MIN_POINTS = 1 << 20  # boxes with fewer inputs split the box, not a table neuron
REQUANT_SPLIT_CANDIDATES = 32  # int8 neurons per layer whose children's gaps are computed
# alpha-CROWN steps on a batch's atom bounds: off, 6 steps cost more than they saved (ACAS Xu phi2
# in real arithmetic, CPU seconds to decide: 3_3 61.0 -> 71.6, 4_2 74.9 -> 86.9)
BATCH_ALPHA_STEPS = 0
# with more than one job, worker processes take over the branch and bound once the search has run
# this long (an easy query never pays for the forks and the pipes)
PARALLEL_AFTER_S = 0.5


@dataclass(slots=True, eq=False)
class Node:
    region: int
    lo: np.ndarray  # implementation inputs
    hi: np.ndarray
    phases: list[np.ndarray]
    parent: Bounds | None
    start: int
    depth: int
    # (layer, neuron, phase, value) of a split child: a ReLU's phase (value None), or a max pool's
    # input at or above (phase 1) / at or below (-1) the value
    split: tuple[int, int, int, float | None] | None = None
    # the parent's atom lower bounds and refuted clauses: they hold on the child's subset too, and a
    # child's own bounds (DeepPoly slopes below the split) can be looser than its parent's
    inherited_lower: np.ndarray | None = None
    inherited_refuted: np.ndarray | None = None
    # ReLU splitting: the parent's optimised lower slopes and split multipliers per atom row
    # (`beta.optimise_output_bounds`' warm start; float32: only a starting point)
    alphas: dict[int, np.ndarray] | None = None
    betas: dict[int, np.ndarray] | None = None


@dataclass(slots=True)
class Frontier:
    """The open nodes, best first (the most negative priority first: the node whose bottleneck atom
    is furthest from refuted), how many were processed, and why one was abandoned (if one was)."""

    heap: list[tuple[float, int, Node]] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)
    nodes: int = 0
    abandoned: str = ""
    leads: list[tuple[float, int, int, np.ndarray]] = field(default_factory=list)  # (-priority, ., region, x)

    def push(self, priority: float, node: Node) -> None:
        heapq.heappush(self.heap, (priority, next(self.counter), node))

    def keep_lead(self, verdict: NodeVerdict) -> None:
        """Keep the LEADS leads of the open nodes furthest from closed (the heap's order)."""
        if verdict.lead is None:
            return
        entry = (verdict.priority, next(self.counter), verdict.region, verdict.lead)
        if len(self.leads) < LEADS:
            heapq.heappush(self.leads, entry)
        elif entry[0] > self.leads[0][0]:
            heapq.heapreplace(self.leads, entry)

    def take(self, count: int) -> list[Node]:
        return [heapq.heappop(self.heap)[2] for _ in range(min(len(self.heap), count))]

    def lend(self, count: int) -> tuple[list[Node], tuple[int, float]]:
        """`take` for a worker: the nodes, and (how many, the best priority among them) to count
        them as open while the worker holds them (`Search.timed_out`)."""
        best = self.heap[0][0] if self.heap else 0.0
        nodes = self.take(count)
        return nodes, (len(nodes), best)


@dataclass(slots=True)
class NodeVerdict:
    """What one node's analysis concluded: closed, a counterexample, or children / abandoned."""

    closed: bool = False
    counterexample: Counterexample | None = None
    children: tuple[Node, ...] = ()
    priority: float = 0.0
    abandoned: str = ""
    lead: np.ndarray | None = None  # open: the input (reals) minimising its worst open clause's bound
    region: int = 0
    by_lp: bool = False  # closed by the LP/MILP (`Search.closed_share`)
    by_attack: bool = False  # its counterexample came from the gradient attack (`open_root_attack`)


class Search:
    def __init__(
        self, query: NetworkQuery, options: EngineOptions, deadline: float, recorder: Recorder
    ) -> None:
        self.query = query
        self.options = options
        self.deadline = deadline
        self.rec = recorder
        self.model: NetModel = build_model(query)
        self.forms: list[AtomForm] = atom_forms(query)
        self.confirmer = Confirmer(query, self.model, self.forms)
        self.rng = np.random.default_rng(options.seed)
        self.by_clause = [[f for f in self.forms if f.clause == c] for c in range(len(query.unsafe.clauses))]
        self.clause_rows = [
            [i for i, f in enumerate(self.forms) if f.clause == c] for c in range(len(query.unsafe.clauses))
        ]
        self.real = query.arithmetic is Arithmetic.REAL
        self.enumeration_limit = REAL_ENUMERATION_LIMIT if self.real else ENUMERATION_LIMIT
        n_outputs = self.model.layers[-1].n_post
        self.atom_matrix = np.array([f.coefficients for f in self.forms]).reshape(len(self.forms), n_outputs)
        self.atom_constants = np.array([f.constant for f in self.forms])
        self.invariants = None if self.real else query.invariants
        # input splitting shrinks boxes quickly enough that DeepPoly's slopes do (measured on ACAS
        # Xu: alpha steps cost more time than the nodes they save); ReLU splitting needs them
        # the inputs a region lets vary (a property may pin most of a network's inputs: it is the
        # varying ones that input splitting bisects)
        self.varying_inputs = max(int(np.count_nonzero(r.hi > r.lo)) for r in query.regions)
        self.alpha_steps = 0 if not self.high_dimensional else ALPHA_STEPS
        self.intermediate_alpha_steps = 0 if not self.high_dimensional else INTERMEDIATE_ALPHA_STEPS
        self.batch_alpha_steps = BATCH_ALPHA_STEPS
        self.beta_steps = BETA_STEPS if self.high_dimensional and not self.model.stepped else 0
        self.milp_open_relus = REAL_MILP_OPEN_RELUS if self.real else LP_OPEN_RELUS
        self.jobs = max(1, options.jobs)
        self.attack_deferred = False  # the gradient attack waits for an open root (low dimensions)
        self.root_attack_seconds = 0.0  # high dimensions: the open root's longer attack so far
        self.started = time.monotonic()
        self.attack_before = recorder.times.get("netlevel.attack", 0.0)
        self.lp_seconds_before = recorder.times.get("netlevel.lp", 0.0)  # (a recorder may be shared)
        # low dimensions: the share of the regions the LP/MILP and the bounds (with enumeration)
        # have closed (`lp_affordable`; in each worker, what it closed itself)
        self.closed_share = {"lp": 0.0, "bounds": 0.0}
        # an open root that read its input layer exactly: its split children read theirs through
        # the span of its atom rows (`operand_rounding.SpanReader`), on its box
        self.span: SpanReader | None = None
        self.span_box: tuple[np.ndarray, np.ndarray] | None = None

    # ------------------------------------------------------------------ results

    def result(self, status: EngineStatus, **kwargs) -> EngineResult:
        return EngineResult(status, times_s=dict(self.rec.times), counts=dict(self.rec.counts), **kwargs)

    def unsafe(self, found: Counterexample, by: str) -> EngineResult:
        x = found.point
        values = tuple(int(v) for v in x) if self.query.qnet.is_integer else tuple(float(v) for v in x)
        self.rec.add("netlevel.exact_checks", self.confirmer.checked)
        return self.result(
            EngineStatus.UNSAFE,
            counterexample=values,
            violated=self.query.violation_message(found.violated),
            decided_by=by,
        )

    # ------------------------------------------------------------------ stages

    def attack(self) -> Counterexample | None:
        """Corners and random points, then a short gradient attack (in low dimensions, once the
        roots' bounds left one open: `absorb`)."""
        if not self.options.enabled("attack"):
            return None
        with self.rec.timer("netlevel.attack"):
            for region in self.query.regions:
                if self.enumerated(region):
                    continue  # its root tries every input of it (`process`): samples add nothing
                found = sample_attack(
                    self.model, self.confirmer, region, self.rng, min(self.options.attack_samples, 1024)
                )
                if found is not None:
                    return found
        if not self.high_dimensional and self.options.enabled("bounds"):
            self.attack_deferred = True  # to the first open root (`absorb`)
            return None
        return self.gradient(ATTACK_SECONDS)

    def enumerated(self, region: InputRegion) -> bool:
        """Will the branch and bound's root of `region` try each of its inputs (`process`)? (A small
        box: an iris box at `<8,8>`, where 1,024 random samples were most of the engine's task.)"""
        return self.options.enabled("bounds") and self.small_box(region.lo, region.hi) is not None

    def small_box(self, lo: np.ndarray, hi: np.ndarray) -> int | None:
        """How many inputs [lo, hi] holds, when few enough to try each of them
        (`enumeration_limit`); None for a larger box."""
        size = points.count(self.query.qnet, lo, hi)
        return size if size <= self.enumeration_limit else None

    def running_attack(self, frontier: Frontier) -> Counterexample | None:
        """During the branch and bound, while the attack has had at most ATTACK_RUNNING_SHARE of the
        search's time: a slice of gradient attack, first from the leads of the open nodes furthest
        from closed (their worst bounds' minimising inputs: where the relaxation says a
        counterexample would be), then from random points."""
        if not self.options.enabled("attack") or not self.forms:
            return None
        spent = self.rec.times.get("netlevel.attack", 0.0) - self.attack_before
        elapsed = time.monotonic() - self.started
        if spent > ATTACK_RUNNING_SHARE * elapsed or elapsed < ATTACK_RUNNING_AFTER_S:
            return None
        stop = min(self.deadline, time.monotonic() + ATTACK_SLICE_SECONDS)
        leads, frontier.leads = frontier.leads, []
        with self.rec.timer("netlevel.attack"):
            for index, region in enumerate(self.query.regions):
                starts = [x for _, _, owner, x in leads if owner == index]
                if starts:
                    self.rec.add("netlevel.lead_attacks", 1)
                    found = gradient_attack(
                        self.model, self.confirmer, region, self.forms, self.rng, stop, start=np.array(starts)
                    )
                    if found is not None:
                        return found
            return self.random_starts(stop)

    def gradient(self, seconds: float, whole_rounds: int = 0) -> Counterexample | None:
        """The gradient attack for at most `seconds` (and ATTACK_SHARE of what remains), its first
        `whole_rounds` rounds run to their end (`gradient_attack`)."""
        if not self.options.enabled("attack") or not self.forms:
            return None
        with self.rec.timer("netlevel.attack"):
            return self.random_starts(
                time.monotonic() + min(ATTACK_SHARE * (self.deadline - time.monotonic()), seconds),
                whole_rounds,
            )

    def random_starts(self, stop: float, whole_rounds: int = 0) -> Counterexample | None:
        """The gradient attack from random points of each region until `stop`."""
        for region in self.query.regions:
            if time.monotonic() < stop or whole_rounds:
                found = gradient_attack(
                    self.model, self.confirmer, region, self.forms, self.rng, stop, whole_rounds=whole_rounds
                )
                if found is not None:
                    return found
        return None

    def run(self) -> EngineResult:
        found = self.attack()
        if found is not None:
            return self.unsafe(found, "netlevel attack")
        if not self.options.enabled("bounds"):
            return self.result(EngineStatus.UNKNOWN, reason="netlevel: bounds disabled")
        frontier = Frontier()
        empty_phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in self.model.layers]
        for index, region in enumerate(self.query.regions):
            frontier.push(0.0, Node(index, region.lo.copy(), region.hi.copy(), empty_phases, None, 0, 0))
        try:
            while frontier.heap:
                if time.monotonic() > self.deadline:
                    return self.timed_out(frontier)
                if self.budget_spent(frontier):
                    return self.out_of_budget(frontier)
                if self.jobs > 1 and time.monotonic() - self.started > PARALLEL_AFTER_S:
                    return self.run_parallel(frontier)
                taken = frontier.take(self.batch_size)
                decided = self.absorb(frontier, self.process_batch(taken))
                if decided is not None:
                    return decided
                if not frontier.heap:  # every node closed: SAFE, no slice of attack to run first
                    break
                found = self.running_attack(frontier)
                if found is not None:
                    return self.closing(frontier, EngineStatus.UNSAFE, found=found)
        except Undecidable as error:
            return self.closing(frontier, EngineStatus.UNKNOWN, reason=str(error))
        return self.finished(frontier)

    def run_parallel(self, frontier: Frontier) -> EngineResult:
        """The rest of the branch and bound with `jobs` worker processes (`workers.py`): the best
        open nodes go to idle workers, their verdicts come back to the frontier here."""
        tasks = itertools.count()

        def work(task: tuple[int, list[Node]]) -> list[NodeVerdict]:
            self.rng = np.random.default_rng((self.options.seed, task[0]))  # (per task: reproducible)
            return self.process_batch(task[1])

        def snapshot() -> tuple[dict, dict]:
            counts = dict(self.rec.counts)
            counts["netlevel.exact_checks"] = counts.get("netlevel.exact_checks", 0) + self.confirmer.checked
            return dict(self.rec.times), counts

        self.rec.add("netlevel.workers", self.jobs)
        with self.rec.timer("netlevel.workers_start"):
            pool = Workers(self.jobs, work, snapshot)
        with pool:
            while frontier.heap or pool.busy:
                if time.monotonic() > self.deadline:
                    return self.timed_out(frontier, list(pool.busy.values()))
                if self.budget_spent(frontier):
                    return self.out_of_budget(frontier)
                idle = pool.idle
                for position, worker in enumerate(idle):
                    if not frontier.heap:
                        break
                    # the open nodes shared among the idle workers, at most a batch each
                    share = -(-len(frontier.heap) // (len(idle) - position))
                    nodes, lent = frontier.lend(min(self.batch_size, share))
                    pool.submit(worker, (next(tasks), nodes), lent)
                for _, result in pool.results(max(0.0, self.deadline - time.monotonic()) + 0.05):
                    for stage, seconds in result.times.items():
                        self.rec.add_time(stage, seconds)
                    for name, value in result.counts.items():
                        self.rec.add(name, value)
                    if isinstance(result.exception, Undecidable):
                        return self.closing(frontier, EngineStatus.UNKNOWN, reason=str(result.exception))
                    if result.error:
                        raise RuntimeError(f"netlevel worker failed: {result.error}")
                    decided = self.absorb(frontier, result.value)
                    if decided is not None:
                        return decided
                found = self.running_attack(frontier)  # (this process would wait for the workers)
                if found is not None:
                    return self.closing(frontier, EngineStatus.UNSAFE, found=found)
        return self.finished(frontier)

    @property
    def high_dimensional(self) -> bool:
        """More varying inputs than input splitting takes (`INPUT_SPLIT_DIMENSIONS`): ReLU phase
        splitting, alpha-beta-CROWN, FSB."""
        return self.varying_inputs > INPUT_SPLIT_DIMENSIONS

    @property
    def relu_only(self) -> bool:
        """Are ReLUs the only relaxed activations (no max pool, no lookup table)? FSB's estimates
        (`branching`) and its candidates read ReLU relaxations only; other networks split by
        `relu_to_split`'s scores, which also choose pool windows and table neurons."""
        return all(layer.relu or not layer.relaxed for layer in self.model.layers)

    @property
    def batch_size(self) -> int:
        """Nodes per call of `process_batch`: input splitting bounds the best BATCH_NODES together
        (`bounds.batch_bounds`), ReLU splitting the best SPLIT_BATCH_NODES (`split_batch`: ReLU
        networks with alpha-beta-CROWN's steps); otherwise one node at a time."""
        if not self.forms:
            return 1
        if not self.high_dimensional:
            return BATCH_NODES
        return SPLIT_BATCH_NODES if self.splits_in_batches else 1

    @property
    def splits_in_batches(self) -> bool:
        """Are ReLU-split nodes bounded in batches (`split_batch`)? ReLU networks whose nodes run
        alpha-beta-CROWN's steps (the batch optimises ReLU slopes and multipliers only)."""
        return self.high_dimensional and self.relu_only and bool(self.beta_steps) and bool(self.forms)

    def process_batch(self, nodes: list[Node]) -> list[NodeVerdict]:
        if self.batch_size == 1:
            verdicts = [self.process(node) for node in nodes]
        elif self.high_dimensional:
            verdicts = self.split_batch(nodes)
        else:
            verdicts = self.process_many(nodes)
        if not self.high_dimensional:
            for node, verdict in zip(nodes, verdicts):
                if verdict.closed:  # (an input-split node holds about 2^-depth of its region)
                    self.closed_share["lp" if verdict.by_lp else "bounds"] += 0.5**node.depth
        return verdicts

    def absorb(self, frontier: Frontier, verdicts: list[NodeVerdict]) -> EngineResult | None:
        """Take processed nodes' verdicts into the frontier: a result when one decides the query."""
        for verdict in verdicts:
            frontier.nodes += 1
            if verdict.counterexample is not None:
                self.rec.add("netlevel.nodes", frontier.nodes)
                by = "netlevel attack" if verdict.by_attack else "netlevel branch and bound"
                return self.unsafe(verdict.counterexample, by)
            if verdict.abandoned:
                frontier.abandoned = verdict.abandoned
                continue
            frontier.keep_lead(verdict)
            if verdict.children and self.attack_deferred:
                self.attack_deferred = False
                found = self.gradient(ATTACK_SECONDS_LOW)
                if found is not None:
                    self.rec.add("netlevel.nodes", frontier.nodes)
                    return self.unsafe(found, "netlevel attack")
            if frontier.nodes == 1 and verdict.children:
                found = self.open_root_attack(ATTACK_SECONDS_HIGH)
                if found is not None:
                    self.rec.add("netlevel.nodes", frontier.nodes)
                    return self.unsafe(found, "netlevel attack")
            for child in verdict.children:
                frontier.push(-verdict.priority, child)
        return None

    def timed_out(self, frontier: Frontier, lent: list[tuple[int, float]] = ()) -> EngineResult:
        """UNKNOWN at the deadline: the nodes processed, those still open (`lent`: the nodes the
        workers hold, their count and best priority per batch, are open too: a timeout with an
        empty heap is a timeout inside the workers' last batches) and the worst open bound."""
        held = sum(count for count, _ in lent)
        priorities = [frontier.heap[0][0]] if frontier.heap else []
        priorities += [priority for count, priority in lent if count]
        open_nodes = f"{len(frontier.heap) + held} open" + (
            f" ({held} of them in the workers' unfinished batches)" if held else ""
        )
        worst = f", the worst open bound {min(priorities):.4g}" if priorities else ""
        return self.closing(
            frontier,
            EngineStatus.UNKNOWN,
            reason=f"netlevel: timeout in branch and bound ({frontier.nodes} nodes, {open_nodes}{worst})",
        )

    def budget_spent(self, frontier: Frontier) -> bool:
        """Has the search processed its budget of nodes (`EngineOptions.max_nodes`)? (With workers,
        nodes already handed out still come back: a budget may be overrun by a batch per worker.)"""
        return self.options.max_nodes is not None and frontier.nodes >= self.options.max_nodes

    def out_of_budget(self, frontier: Frontier) -> EngineResult:
        return self.closing(
            frontier,
            EngineStatus.UNKNOWN,
            reason=(
                f"netlevel: node budget of {self.options.max_nodes} spent in branch and bound"
                f" ({len(frontier.heap)} open)"
            ),
        )

    def finished(self, frontier: Frontier) -> EngineResult:
        """Every node processed: SAFE unless one was abandoned."""
        if frontier.abandoned:
            return self.closing(frontier, EngineStatus.UNKNOWN, reason=frontier.abandoned)
        return self.closing(frontier, EngineStatus.SAFE, decided_by="netlevel bounds")

    def closing(
        self, frontier: Frontier, status: EngineStatus, found: Counterexample | None = None, **kwargs
    ) -> EngineResult:
        self.rec.add("netlevel.nodes", frontier.nodes)
        if found is not None:  # (`unsafe` counts the exact checks)
            return self.unsafe(found, "netlevel attack")
        self.rec.add("netlevel.exact_checks", self.confirmer.checked)
        return self.result(status, **kwargs)

    # ------------------------------------------------------------------ one node

    def process(self, node: Node) -> NodeVerdict:
        model = self.model
        # (a split child has its parent's box, which was not enumerated: no count; 2.7 ms a node
        # at 784 inputs)
        size = None if node.split is not None else self.small_box(node.lo, node.hi)
        if size is not None:  # the whole box: a superset of the node's executions
            with self.rec.timer("netlevel.enumerate"):
                self.rec.add("netlevel.enumerated", size)
                return NodeVerdict(closed=True, counterexample=self.confirmer_all(node))
        xl, xu = model.input_reals(node.lo), model.input_reals(node.hi)
        started = time.monotonic()
        with self.rec.timer("netlevel.bounds"):
            region_words = (node.lo, node.hi) if model.is_fixed else None
            if node.split is not None and node.parent is not None:
                bounds = with_phase(model, node.parent, *node.split)
                if bounds is not None:
                    # the layers after the split see the fixed phase: their bounds again (DeepPoly
                    # slopes, intersected with the parent's)
                    bounds = node_bounds(
                        model, xl, xu, node.phases, bounds, node.split[0] + 1, self.invariants, region_words
                    )
            else:
                bounds = node_bounds(
                    model, xl, xu, node.phases, node.parent, node.start, self.invariants, region_words
                )
            if bounds is None:
                return NodeVerdict(closed=True)
            lower, lam_input, lam_post, refuted = self.node_atoms(node, bounds, xl, xu)
        if node.parent is None and self.intermediate_alpha_steps and not refuted.all():
            found = self.open_root_attack(time.monotonic() - started)
            if found is not None:
                return NodeVerdict(counterexample=found, by_attack=True)
            # the root of ReLU splitting: every node inherits its intermediate bounds
            with self.rec.timer("netlevel.bounds"):
                with self.rec.timer("netlevel.intermediate_alpha"):
                    deadline = time.monotonic() + INTERMEDIATE_ALPHA_SHARE * (
                        self.deadline - time.monotonic()
                    )
                    bounds = self.tighten_root(node, bounds, xl, xu, deadline)
                if bounds is None:
                    return NodeVerdict(closed=True)
                steps = ROOT_STAIR_ALPHA_STEPS if model.stepped else None
                lower, lam_input, lam_post, refuted = self.node_atoms(node, bounds, xl, xu, steps)
            if not refuted.all() and self.reads_input_exactly(bounds, xl, xu):
                # the input layer's roundings read exactly: its every product's worst case at once
                # (779 a neuron on digits784) widened each hidden layer's bounds
                with self.rec.timer("netlevel.bounds"), self.rec.timer("netlevel.exact_input"):
                    deadline = time.monotonic() + EXACT_INPUT_SHARE * (self.deadline - time.monotonic())
                    reader = StreamedInput(model, input_layer(model), xl, xu, deadline)
                    bounds = self.tighten_root(node, bounds, xl, xu, deadline, reader)
                    if bounds is None:
                        return NodeVerdict(closed=True)
                    lower, lam_input, lam_post, refuted = self.node_atoms(
                        node, bounds, xl, xu, exact_input=reader
                    )
        verdict = self.conclude(node, bounds, xl, xu, lower, lam_input, lam_post, refuted)
        for child in verdict.children:
            child.inherited_lower, child.inherited_refuted = lower, refuted
            child.alphas, child.betas = node.alphas, node.betas
        return verdict

    def tighten_root(
        self, node: Node, bounds: Bounds, xl, xu, deadline: float, exact_input: StreamedInput | None = None
    ) -> Bounds | None:
        """The root's hidden layers by alpha-CROWN (`tighten_intermediate`), until `deadline`."""
        return tighten_intermediate(
            self.model, bounds, xl, xu, node.phases, self.intermediate_alpha_steps, deadline, exact_input
        )

    def open_root_attack(self, seconds: float) -> Counterexample | None:
        """High dimensions: the longer gradient attack (from the centre and random points) a root
        gets when its bounds leave it open, ATTACK_SECONDS_HIGH in all: its children are dear. Part
        of it goes before alpha-CROWN tightens the root's hidden layers, as long as the root's
        first bounds took (`process`), the rest once the root is open (`absorb`). All of it after
        the tightening came too late on a residual net: cifar10-resnet2b int8 img02 eps 0.0125 was
        UNSAFE at 26 s on an idle machine (17 s of tightening first) and UNKNOWN at the suite's
        60 s under load, where one round of the attack (1.1 s) finds the counterexample. Where the
        first bounds are cheap (an MLP), so is the attack before the tightening. Its first round
        runs to its end: a round cut short leaves its points barely descended, and one round of
        cifar10-resnet4b int8 (5.5-7.6 s under load) is longer than the attack's 6 s (img03 eps
        0.025: UNKNOWN at 60 s, where the whole round finds the counterexample)."""
        if not self.high_dimensional or self.root_attack_seconds >= ATTACK_SECONDS_HIGH:
            return None
        seconds = min(seconds, ATTACK_SECONDS_HIGH - self.root_attack_seconds)
        started = time.monotonic()
        found = self.gradient(seconds, whole_rounds=1 if not self.root_attack_seconds else 0)
        self.root_attack_seconds += time.monotonic() - started
        return found

    def reads_input_exactly(self, bounds: Bounds, xl: np.ndarray, xu: np.ndarray) -> bool:
        """Does an open root read its input layer's roundings exactly (`EXACT_INPUT_SHARE`)? Fixed
        point in its own arithmetic, high dimensions, one layer reading the input, whose products
        `operand_rounding` reads, whose neurons sum `EXACT_INPUT_MIN_ROUNDINGS` or more, and which
        has no table already (its operands too wide)."""
        if not self.high_dimensional or self.real or not self.model.is_fixed:
            return False
        model = self.model
        first = input_layer(model)
        if first is None or not streams_input(model, first):
            return False
        roundings = model.rounding_count(first, np.maximum(np.abs(xl), np.abs(xu)))
        return (
            roundings.max() >= EXACT_INPUT_MIN_ROUNDINGS
            and bounds.operand_table(model, first, xl, xu) is None
        )

    def optimised_atoms(self, bounds, rows, xl, xu, phases, warm_alphas, warm_betas):
        """alpha-beta-CROWN's bounds of the atoms `rows` (`beta.optimise_output_bounds`, the search's
        steps), warm-started from a parent's slopes and multipliers: one node, or a batch."""
        return optimise_output_bounds(
            self.model,
            bounds,
            self.atom_matrix[rows],
            xl,
            xu,
            phases,
            self.beta_steps,
            warm_alphas,
            warm_betas,
            input_statement=self.span is not None and np.ndim(xl) == 2,
        )

    def node_atoms(
        self,
        node: Node,
        bounds: Bounds,
        xl: np.ndarray,
        xu: np.ndarray,
        steps: int | None = None,
        exact_input: StreamedInput | None = None,
    ):
        """(lower, lam_input, lam_post, refuted) of one node: its atoms' bounds (`atom_bounds`, no
        lower than its parent's; `steps` of alpha-CROWN instead of the search's; with `exact_input`
        also alpha-CROWN's read with the input layer's roundings exact) and the clauses they
        refute, with its parent's refuted ones."""
        if self.beta_steps and self.forms:
            lower, lam_input, lam_post, offset = self.split_atom_bounds(node, bounds, xl, xu)
        elif self.model.stepped:
            # the staircases' slopes from the parent's, kept for the children (a copy: siblings
            # share their parent's) where they are few enough to carry
            warm = dict(node.alphas or {})
            lower, lam_input, lam_post, offset = self.atom_bounds(bounds, xl, xu, steps, warm)
            kept = sum(v.size for v in warm.values()) <= WARM_SLOPES_MAX_VALUES
            node.alphas = {k: v.astype(np.float32, copy=False) for k, v in warm.items()} if kept else None
        else:
            lower, lam_input, lam_post, offset = self.atom_bounds(bounds, xl, xu, steps)
        if exact_input is not None and self.forms:
            model = self.model
            steps = self.intermediate_alpha_steps if steps is None else steps
            linear = optimised_bound(model, bounds, self.atom_matrix, xl, xu, steps, input_statement=True)
            shift = self.atom_shift(*bounds.post(model, len(model.layers) - 1))
            lower = np.maximum(lower, exact_input_lower(linear, exact_input) + shift)
            if self.splits_in_batches and SPAN_ROWS and time.monotonic() < exact_input.deadline:
                with self.rec.timer("netlevel.span_setup"):
                    first = input_layer(model)
                    self.span = SpanReader(
                        exact_input, linear.input_rows, bounds.err_lo[first], bounds.err_hi[first]
                    )
                    self.span_box = (xl, xu)
        if node.inherited_lower is not None:
            lower = np.maximum(lower, node.inherited_lower)
        refuted = self.refuted_clauses(lower[None], lam_input[None], offset[None], xl[None], xu[None])[0]
        if node.inherited_refuted is not None:
            refuted |= node.inherited_refuted
        return lower, lam_input, lam_post, refuted

    def process_many(self, nodes: list[Node]) -> list[NodeVerdict]:
        """Input splitting: the nodes' bounds in one batch (`bounds.batch_bounds`), then each node's
        conclusion; nodes the batch does not cover (small boxes to enumerate, ReLU splits) go
        through `process`."""
        model = self.model
        verdicts: dict[int, NodeVerdict] = {}
        batched = []
        for position, node in enumerate(nodes):
            if node.split is not None or node.start > 0 or self.small_box(node.lo, node.hi) is not None:
                verdicts[position] = self.process(node)
            else:
                batched.append(position)
        if batched:
            members = [nodes[p] for p in batched]
            xl = np.stack([model.input_reals(node.lo) for node in members])
            xu = np.stack([model.input_reals(node.hi) for node in members])
            parent_lo = parent_hi = None
            if any(node.parent is not None for node in members):
                parent_lo, parent_hi = [], []
                for k, layer in enumerate(model.layers):
                    unknown = np.full(layer.n_out, np.inf)
                    parent_lo.append(
                        np.stack([-unknown if n.parent is None else n.parent.pre_lo[k] for n in members])
                    )
                    parent_hi.append(
                        np.stack([unknown if n.parent is None else n.parent.pre_hi[k] for n in members])
                    )
            region_words = None
            if model.is_fixed:
                region_words = (
                    np.stack([node.lo for node in members]),
                    np.stack([node.hi for node in members]),
                )
            with self.rec.timer("netlevel.bounds"):
                bounds = batch_bounds(model, xl, xu, parent_lo, parent_hi, self.invariants, region_words)
                lower, lam_input, lam_post, offset = self.batch_atom_bounds(bounds, xl, xu)
                refuted = self.refuted_clauses(lower, lam_input, offset, xl, xu)
            with self.rec.timer("netlevel.split_scores"):
                atoms = self.bottlenecks(lower, refuted)
                scores = input_split_scores(
                    model, bounds.pre_lo, bounds.pre_hi, nodes[0].phases, lam_input, lam_post, atoms, xu - xl
                )
            found = self.batch_candidates(members, bounds, refuted, atoms, lam_input, xl, xu)
            if found is not None:
                return [NodeVerdict(counterexample=found)]
            for b, position in enumerate(batched):
                if bounds.empty[b] or (refuted[b].all() and not bounds.overflow_possible[b]):
                    verdicts[position] = NodeVerdict(closed=True)
                else:
                    verdicts[position] = self.conclude(
                        nodes[position],
                        bounds.box(b),
                        xl[b],
                        xu[b],
                        lower[b],
                        lam_input[b],
                        {k: v[b] for k, v in lam_post.items()},
                        refuted[b],
                        scores[b],
                    )
        return [verdicts[position] for position in range(len(nodes))]

    def bottlenecks(self, lower: np.ndarray, refuted: np.ndarray) -> np.ndarray:
        """(B, atoms): 1 at each open clause's bottleneck atom (the one furthest from refuted, as
        in `conclude`) of every box, 0 elsewhere."""
        atoms = np.zeros(lower.shape)
        for clause, rows in enumerate(self.clause_rows):
            if rows:
                bottleneck = np.array(rows)[np.argmax(lower[:, rows], axis=1)]
                atoms[np.arange(len(lower)), bottleneck] = ~refuted[:, clause]
        return atoms

    def split_batch(self, nodes: list[Node]) -> list[NodeVerdict]:
        """ReLU splitting: the split children among `nodes` bounded as one batch (`batch`: their
        layers after the split, then alpha-beta-CROWN on the atoms their parents left open, each
        warm-started from its parent), their candidate points confirmed together, then each node's
        conclusion (FSB's choice of its split); a root goes through `process`."""
        model = self.model
        verdicts: dict[int, NodeVerdict] = {}
        split = [p for p, node in enumerate(nodes) if node.split is not None and node.parent is not None]
        for position in sorted(set(range(len(nodes))) - set(split)):
            verdicts[position] = self.process(nodes[position])
        if split:
            members = [nodes[p] for p in split]
            with self.rec.timer("netlevel.bounds"):
                found = split_batch_bounds(model, members, self.invariants, REBOUND_AFTER_SPLIT)
            for index in found.closed:
                verdicts[split[index]] = NodeVerdict(closed=True)
            if found.bounds is not None:
                members = [members[i] for i in found.members]
                positions = [split[i] for i in found.members]
                outcome = self.split_batch_atoms(members, found.bounds, found.xl, found.xu)
                lower, lam_input, _, refuted = outcome
                atoms = self.bottlenecks(lower, refuted)
                candidate = self.batch_candidates(
                    members, found.bounds, refuted, atoms, lam_input, found.xl, found.xu
                )
                if candidate is not None:
                    return [NodeVerdict(counterexample=candidate)]
                for b, (position, node) in enumerate(zip(positions, members)):
                    verdicts[position] = self.conclude_box(node, found.bounds, b, found.xl, found.xu, outcome)
        return [verdicts[position] for position in range(len(nodes))]

    def split_batch_atoms(self, members: list[Node], bounds: Bounds, xl: np.ndarray, xu: np.ndarray):
        """`split_atom_bounds` and `node_atoms` of a batch of ReLU-split nodes: alpha-beta-CROWN on
        the atoms any of them leaves open (a node's other rows read -inf, as alone), and the
        clauses refuted: (lower, lam_input, (the rows optimised, their lam_post), refuted) per box."""
        model, count = self.model, len(self.forms)
        inherited = np.array(
            [np.zeros(len(self.clause_rows), dtype=bool) if n.inherited_refuted is None else n.inherited_refuted
             for n in members]
        )  # fmt: skip
        clause_of = np.array([form.clause for form in self.forms])
        open_rows = ~inherited[:, clause_of]  # (B, atoms): the rows each node optimises alone
        rows = np.flatnonzero(open_rows.any(axis=0))
        batch = len(members)
        lower = np.full((batch, count), -np.inf)
        offset = np.full((batch, count), -np.inf)
        lam_input = np.zeros((batch, count, model.n_inputs))
        lam_post: dict[int, np.ndarray] = {}
        if len(rows):
            with self.rec.timer("netlevel.beta"):
                warm_alphas = warm_start(model, bounds, [n.alphas for n in members], rows, True)
                warm_betas = warm_start(model, bounds, [n.betas for n in members], rows, False)
                phases = [
                    np.stack([n.phases[k] for n in members])[:, None, :] for k in range(len(model.layers))
                ]
                found = self.optimised_atoms(bounds, rows, xl, xu, phases, warm_alphas, warm_betas)
            shift = self.atom_shift(*bounds.post(model, len(model.layers) - 1))[:, rows]
            mine = open_rows[:, rows]
            found_lower = found.bound.lower
            if found.bound.input_rows is not None:
                found_lower = self.span_lower(found.bound, bounds, xl, xu, mine, shift, rows)
            lower[:, rows] = np.where(mine, found_lower + shift, -np.inf)
            offset[:, rows] = np.where(mine, found.bound.offset + shift, -np.inf)
            lam_input[:, rows] = np.where(mine[..., None], found.bound.lam_input, 0.0)
            for b, node in enumerate(members):
                node.alphas = _scatter(node.alphas, {k: v[b] for k, v in found.alphas.items()}, rows, count)
                node.betas = _scatter(node.betas, {k: v[b] for k, v in found.betas.items()}, rows, count)
            lam_post = dict(found.bound.lam_post)
        for b, node in enumerate(members):
            if node.inherited_lower is not None:
                lower[b] = np.maximum(lower[b], node.inherited_lower)
        refuted = self.refuted_clauses(lower, lam_input, offset, xl, xu) | inherited
        return lower, lam_input, (rows, lam_post), refuted

    def span_lower(self, bound: LinearBound, bounds: Bounds, xl, xu, mine, shift, atoms) -> np.ndarray:
        """A batch's bounds of the atom rows `atoms` (before `shift`; `mine`: the rows each box
        optimised) with the input layer's roundings read on the root's rows (`SpanReader`) where
        that may refute the row: open on a box of the root's, by less than SPAN_REACH times its
        interval term (the joint reading gains at most about the term and the rounding's reach;
        past that, rows cost their reading and are seldom lifted to refuted)."""
        assert self.span is not None and self.span_box is not None
        on_root_box = np.all(xl == self.span_box[0], axis=1) & np.all(xu == self.span_box[1], axis=1)
        lower = bound.lower + shift
        chosen = mine & on_root_box[:, None] & (lower < 0) & (lower - SPAN_REACH * bound.input_term > 0)
        if not chosen.any():
            return bound.lower
        with self.rec.timer("netlevel.span"):
            self.rec.add("netlevel.span_rows", int(chosen.sum()))
            first = input_layer(self.model)
            return span_input_lower(
                bound, self.span, bounds.err_lo[first], bounds.err_hi[first], chosen, atoms
            )

    def conclude_box(self, node: Node, bounds: Bounds, b: int, xl, xu, atoms) -> NodeVerdict:
        """Box b of a ReLU-split batch concluded as `process` concludes one node (its candidate
        points already tried with the batch's)."""
        lower, lam_input, (rows, lam_post), refuted = atoms
        if refuted[b].all() and not bounds.overflow_possible[b]:
            return NodeVerdict(closed=True)
        post = {}
        for k, layer in enumerate(self.model.layers[:-1]):
            post[k] = np.zeros((len(self.forms), layer.n_post))
            if k in lam_post:
                post[k][rows] = lam_post[k][b]
        box = bounds.box(b)
        verdict = self.conclude(node, box, xl[b], xu[b], lower[b], lam_input[b], post, refuted[b], tried=True)
        for child in verdict.children:
            child.inherited_lower, child.inherited_refuted = lower[b], refuted[b]
            child.alphas, child.betas = node.alphas, node.betas
        return verdict

    def batch_candidates(self, members, bounds, refuted, atoms, lam_input, xl, xu) -> Counterexample | None:
        """`conclude`'s candidate points (the centre and each open clause's bottleneck vertex) of
        every open box of the batch, confirmed in one call per region."""
        live = ~bounds.empty & (~refuted.all(axis=1) | bounds.overflow_possible)
        boxes, rows = np.nonzero(atoms * live[:, None])
        vertices = np.where(lam_input[boxes, rows] > 0, xl[boxes], xu[boxes])
        centres = np.flatnonzero(live)
        points = np.vstack([(xl[centres] + xu[centres]) / 2, vertices])
        owners = np.concatenate([centres, boxes])
        regions = np.array([node.region for node in members])[owners]
        for index in np.unique(regions):
            chosen = points[regions == index]
            found = self.confirmer.first(to_implementation(self.model, self.query.regions[index], chosen))
            if found is not None:
                return found
        return None

    def refuted_clauses(self, lower, lam_input, offset, xl, xu) -> np.ndarray:
        """(B, clauses): which clauses each box's atom bounds refute (one atom's lower bound on
        the safe side -- int8: on the safe side once moved up to the next value the margin takes,
        `OnLattice` --, or a convex combination of them: `combination_refutes`). A clause without
        atoms is never refuted."""
        refuted = np.zeros((len(lower), len(self.by_clause)), dtype=bool)
        for clause, rows in enumerate(self.clause_rows):
            if not rows:
                continue
            strict = np.array([self.forms[i].strict for i in rows])
            bound = lower[:, rows]
            single = np.where(strict, bound >= 0, bound > 0)
            for position, i in enumerate(rows):  # int8: the next value the margin can take
                if self.forms[i].lattice is not None:
                    single[:, position] |= self.forms[i].lattice.refutes(bound[:, position])
            single = single.any(axis=1)
            if len(rows) > 1 and not single.all():
                left = np.flatnonzero(~single)
                single[left] = combination_refutes(
                    lam_input[left][:, rows], offset[left][:, rows], xl[left], xu[left]
                )
            refuted[:, clause] = single
        return refuted

    def conclude(
        self, node, bounds, xl, xu, lower, lam_input, lam_post, refuted, scores=None, tried: bool = False
    ) -> NodeVerdict:
        """The node's verdict from its bounds: closed, a counterexample among its candidate points,
        by LP/MILP, or its children. `scores`: the inputs' split scores a batch computed; `tried`
        (or `scores`): the batch tried the node's candidate points already (`batch_candidates`)."""
        model = self.model
        region = self.query.regions[node.region]
        open_clauses = []
        for clause, rows in enumerate(self.clause_rows):
            if not refuted[clause]:
                bottleneck = max(rows, key=lambda i: lower[i]) if rows else None
                open_clauses.append((clause, bottleneck))
        if not open_clauses and not bounds.overflow_possible:
            return NodeVerdict(closed=True)
        if scores is None and not tried:  # (a batch tries its boxes' candidates together)
            # candidates: each bottleneck bound's minimising vertex, and the centre
            candidates = [(xl + xu) / 2]
            for _, atom in open_clauses:
                if atom is not None:
                    candidates.append(np.where(lam_input[atom] > 0, xl, xu))
            found = self.confirmer.first(to_implementation(model, region, np.array(candidates)))
            if found is not None:
                return NodeVerdict(counterexample=found)
        priority = (
            max((-lower[a] if a is not None else np.inf) for _, a in open_clauses) if open_clauses else 0.0
        )
        open_relus = sum(
            int(((bounds.pre_lo[k] < 0) & (bounds.pre_hi[k] > 0)).sum())
            for k, layer in enumerate(model.layers)
            if layer.relu
        )
        high = self.high_dimensional
        if (
            open_clauses
            and model.stepped
            and high
            and node.parent is None
            and self.options.enabled("milp")
            and all(self.within_codes(lower, atom) for _, atom in open_clauses)
        ):
            verdict, open_clauses = self.by_stepped_milp(bounds, xl, xu, open_clauses, region)
            if verdict is not None:
                return verdict
        if (
            open_clauses
            and not bounds.overflow_possible
            and (high or open_relus <= self.milp_open_relus)
            and self.lp_affordable(node)
            and self.options.enabled("milp")
            and not model.stepped  # (int8: the root's MILP alone, in high dimensions: `by_stepped_milp`)
        ):
            # low dimensions: nodes are cheap, the LP and MILP pay only with few open ReLUs; high
            # dimensions: small networks only (`lp_affordable`), the MILP while its binaries are few
            milp = open_relus <= (MILP_OPEN_RELUS if high else self.milp_open_relus)
            verdict, open_clauses = self.by_lp(bounds, xl, xu, open_clauses, region, open_relus, milp)
            if verdict is not None:
                verdict.by_lp = verdict.closed
                return verdict
        verdict = self.branch(node, bounds, xl, xu, open_clauses, lam_input, lam_post, priority, scores)
        worst = max((a for _, a in open_clauses if a is not None), key=lambda a: -lower[a], default=None)
        if worst is not None and verdict.children:
            verdict.lead, verdict.region = np.where(lam_input[worst] > 0, xl, xu), node.region
        return verdict

    def lp_affordable(self, node: Node) -> bool:
        """Never beyond `LP_HIGH_INPUTS` inputs (digits784: HiGHS's presolve called every node LP
        tried infeasible, feasible as they were, and the LP's rigorous dual bound is then nothing,
        at seconds a call; alpha-beta-CROWN optimises the same relaxation's dual without a solver);
        below it the LP at the root, then at a node while the LPs and MILPs have taken at most
        `LP_TIME_SHARE` of the search's time (under a work budget: at every node). A 16-input
        convolutional network's MILP decides what its branch and bound takes minutes for.

        Low dimensions, beyond that share and up to `LP_TIME_SHARE_MAX`, once the search has run
        `LP_RATES_AFTER_S` (the bounds close boxes late, deep in the tree): while the LP/MILP
        close the region faster than the bounds do (the share of the region each closed per
        second of its own). A node's MILP can cost what a thousand input-split nodes cost (VNN-COMP 2022's
        van der Pol net, 24 open ReLUs: 0.3-1 CPU s against 0.2 ms): with no limit, all of a 60 s
        search went to MILPs (UNKNOWN) where input splitting alone decides in 0.8 CPU s; yet on
        ACAS Xu phi2 (3_3, 4_2, real arithmetic) the MILP is what closes nodes, ~93 % of the run."""
        if self.model.n_inputs > LP_HIGH_INPUTS:
            return False
        if node.parent is None or self.options.max_nodes is not None:  # (a work budget: no clock rules)
            return True
        spent = self.rec.times.get("netlevel.lp", 0.0) - self.lp_seconds_before
        elapsed = time.monotonic() - self.started
        if spent <= LP_TIME_SHARE * elapsed:
            return True
        if self.high_dimensional or spent > LP_TIME_SHARE_MAX * elapsed or elapsed < LP_RATES_AFTER_S:
            return False
        closed = self.closed_share
        return closed["lp"] > 0 and closed["lp"] * (elapsed - spent) >= closed["bounds"] * spent

    def confirmer_all(self, node: Node) -> Counterexample | None:
        """Every input of the (small) box, exactly: the first violation, or None (node closed)."""
        box = points.enumerate_box(self.query.qnet, node.lo, node.hi)
        if self.real:
            for row in box:
                self.confirmer.checked += 1
                violated = self.query.violation(row)
                if violated >= 0:
                    return Counterexample(row, violated)
            return None
        for start in range(0, len(box), 1024):
            chunk = box[start : start + 1024]
            found = self.exhaustive(chunk)
            if found is not None:
                return found
        return None

    def exhaustive(self, chunk: np.ndarray) -> Counterexample | None:
        """Confirm every screened row (the screen's tolerance is sound: rows it rejects are safe)."""
        rows = np.flatnonzero(self.confirmer.screen(chunk))
        for row in rows:
            self.confirmer.checked += 1
            violated = self.query.violation(chunk[row])
            if violated != -1 and self.confirmer.respects_invariants(chunk[row]):
                return Counterexample(chunk[row].copy(), violated)
        return None

    def atom_bounds(
        self,
        bounds: Bounds,
        xl: np.ndarray,
        xu: np.ndarray,
        steps: int | None = None,
        warm: dict[int, np.ndarray] | None = None,
    ):
        """Sound lower bounds of every atom's margin g over the node (with the conversion error of
        the property's rational constants to float64 charged), input coefficients, layer ones
        (`steps` of alpha-CROWN where it may pay; the search's `alpha_steps` by default; `warm`:
        the staircases' slopes to start from, `optimised_bound`'s)."""
        steps = self.alpha_steps if steps is None else steps
        if not self.forms:
            return np.zeros(0), np.zeros((0, len(xl))), {}, np.zeros(0)
        model = self.model
        last = len(model.layers) - 1
        matrix = self.atom_matrix
        linear = backsubstitute(model, bounds, matrix, last, True, xl, xu, keep=True)
        if steps:
            # alpha-CROWN where it may pay: rows not refuted, but within reach (the missing margin
            # is at most a quarter of how much the row's linear bound varies over the box)
            gap = -(linear.lower + self.atom_constants)
            reach = np.abs(linear.lam_input) @ (xu - xl)
            if np.any((gap >= 0) & (gap < ALPHA_REACH * reach)):
                linear = optimised_bound(model, bounds, matrix, xl, xu, steps, linear, warm=warm)
        shift = self.atom_shift(*bounds.post(model, last))
        return linear.lower + shift, linear.lam_input, linear.lam_post, linear.offset + shift

    def split_atom_bounds(self, node: Node, bounds: Bounds, xl: np.ndarray, xu: np.ndarray):
        """`atom_bounds` of a ReLU-splitting node: alpha-beta-CROWN on the atoms of the clauses its
        parent left open (`beta.optimise_output_bounds`, from the parent's slopes and multipliers);
        the optimised parameters are kept on the node for its children (`node.alphas`/`betas`).
        Rows not optimised read -inf (their clauses are refuted by inheritance)."""
        model, count = self.model, len(self.forms)
        rows = np.arange(count)
        if node.inherited_refuted is not None:
            rows = np.array(
                [i for i, f in enumerate(self.forms) if not node.inherited_refuted[f.clause]], dtype=int
            )
        n_inputs = model.n_inputs
        lower, offset = np.full(count, -np.inf), np.full(count, -np.inf)
        lam_input = np.zeros((count, n_inputs))
        lam_post = {k: np.zeros((count, layer.n_post)) for k, layer in enumerate(model.layers[:-1])}
        if not len(rows):
            return lower, lam_input, lam_post, offset
        warm_alphas = None if node.alphas is None else {k: v[rows] for k, v in node.alphas.items()}
        warm_betas = None if node.betas is None else {k: v[rows] for k, v in node.betas.items()}
        with self.rec.timer("netlevel.beta"):
            found = self.optimised_atoms(bounds, rows, xl, xu, node.phases, warm_alphas, warm_betas)
        node.alphas = _scatter(node.alphas, found.alphas, rows, count)
        node.betas = _scatter(node.betas, found.betas, rows, count)
        shift = self.atom_shift(*bounds.post(model, len(model.layers) - 1))[rows]
        lower[rows] = found.bound.lower + shift
        offset[rows] = found.bound.offset + shift
        lam_input[rows] = found.bound.lam_input
        for k, values in found.bound.lam_post.items():
            lam_post[k][rows] = values
        return lower, lam_input, lam_post, offset

    def batch_atom_bounds(self, bounds: Bounds, xl: np.ndarray, xu: np.ndarray):
        """`atom_bounds` of a batch of boxes (DeepPoly slopes: input splitting runs no alpha steps)."""
        last = len(self.model.layers) - 1
        linear = backsubstitute(self.model, bounds, self.atom_matrix, last, True, xl, xu, keep=True)
        if self.batch_alpha_steps:
            # as in `atom_bounds`: where a row is open but within reach
            gap = -(linear.lower + self.atom_constants)
            reach = (np.abs(linear.lam_input) * (xu - xl)[:, None, :]).sum(axis=2)
            if np.any((gap >= 0) & (gap < ALPHA_REACH * reach)):
                linear = optimised_bound(
                    self.model, bounds, self.atom_matrix, xl, xu, self.batch_alpha_steps, linear
                )
        shift = self.atom_shift(*bounds.post(self.model, last))
        return linear.lower + shift, linear.lam_input, linear.lam_post, linear.offset + shift

    def atom_shift(self, y_lo: np.ndarray, y_hi: np.ndarray) -> np.ndarray:
        """The atoms' constants minus the float64 rounding of g = coefficients . Y + constant and of
        the property's rationals (per box with a batch axis)."""
        y_max = np.maximum(np.abs(y_lo), np.abs(y_hi))
        rounding = 4 * U64 * (y_max @ np.abs(self.atom_matrix).T + np.abs(self.atom_constants)) + 1e-300
        return self.atom_constants - rounding

    def within_codes(self, lower: np.ndarray, atom: int | None) -> bool:
        """int8: is the atom's bound short of refuting it by at most STEPPED_MILP_CODES output codes
        (its largest coefficient is one code's worth)? The root's MILP pays only there: on
        digits32rgb-conv it closed clauses 0.75-2 codes short and none 3.8 or more while the int8
        branch and bound was weaker (now the branch and bound closes those more than a code short
        first: `STEPPED_MILP_CODES`); on digits28-maxpool the open roots 20-60 codes short are
        UNSAFE or decided by the branch and bound, which the MILP's time would take."""
        if atom is None:
            return False
        return bool(-lower[atom] <= STEPPED_MILP_CODES * np.abs(self.forms[atom].coefficients).max())

    def by_stepped_milp(self, bounds, xl, xu, open_clauses, region):
        """int8, high dimensions, the root: each open clause by the MILP whose first layer's and
        read outputs' staircases are exact (`lp`); (a verdict when the node is decided, the clauses
        still open). Input splitting makes no progress on an image's thousands of inputs, and
        staircase splits none on its thousands of open neurons (digits32rgb-conv int8 img00 eps
        0.004: root bound -0.16, the hull LP's -0.035, the MILP infeasible in 21.5 CPU s), so the
        MILP gets STEPPED_MILP_SHARE of the search's time, shared among the open clauses."""

        def solve(position: int, clause: int) -> NodeSolution:
            share = STEPPED_MILP_SHARE * (self.deadline - time.monotonic()) / (len(open_clauses) - position)
            solution = solve_node(
                self.model, bounds, xl, xu, self.by_clause[clause], True, time.monotonic() + share
            )
            self.rec.add("netlevel.milp", 1)
            return solution

        with self.rec.timer("netlevel.milp"):
            return self.close_clauses(open_clauses, region, solve)

    def close_clauses(self, open_clauses, region: InputRegion, solve) -> tuple[NodeVerdict | None, list]:
        """Each open clause by `solve(position, clause)` (an LP/MILP's `NodeSolution`, or a
        counterexample it found on the way): UNSAT closes the clause, a satisfying point confirmed on
        the implementation decides the node; (a verdict when the node is decided, the clauses still
        open)."""
        still_open = []
        for position, (clause, atom) in enumerate(open_clauses):
            outcome = solve(position, clause)
            found = outcome if isinstance(outcome, Counterexample) else None
            if found is None:
                if outcome.status is CheckStatus.UNSAT:
                    continue
                found = self.solution_counterexample(outcome, region)
            if found is not None:
                return NodeVerdict(counterexample=found), []
            still_open.append((clause, atom))
        if not still_open:
            return NodeVerdict(closed=True), []
        return None, still_open

    def solution_counterexample(self, solution: NodeSolution, region: InputRegion) -> Counterexample | None:
        """The LP/MILP's satisfying point confirmed on the implementation, if it is a counterexample
        (a relaxation's point often is not: the clause then stays open)."""
        if solution.status is not CheckStatus.SAT or solution.x is None:
            return None
        return self.confirmer.first(to_implementation(self.model, region, solution.x[None, :]))

    def by_lp(self, bounds, xl, xu, open_clauses, region, open_relus, milp: bool):
        """Close open clauses by LP (then MILP); (a verdict when the node is decided, the clauses
        still open)."""
        # (a lookup table's open neurons are MILP binaries too: `lp._exact_steps`)
        tables = any(
            layer.stairs is not None and layer.open_neurons(bounds.pre_lo[k], bounds.pre_hi[k]).any()
            for k, layer in enumerate(self.model.layers)
        )
        use_milp = milp and (open_relus > 0 or tables) and len(open_clauses) == 1

        def solve(_position: int, clause: int) -> NodeSolution | Counterexample:
            forms = self.by_clause[clause]
            # REAL, low dimensions: HiGHS's MILP on a few dozen binaries mostly ends at its
            # root (probing), at about three times its LP's cost, and closed every node its LP
            # left open on ACAS Xu phi2 (3_3, 4_2): the LP first only pays where the MILP is dear
            solution = NodeSolution(CheckStatus.UNKNOWN, None)
            if not (use_milp and self.real and not self.high_dimensional):
                lp_deadline = min(
                    self.deadline, time.monotonic() + LP_SHARE * (self.deadline - time.monotonic())
                )
                solution = solve_node(self.model, bounds, xl, xu, forms, False, lp_deadline)
                self.rec.add("netlevel.lp", 1)
                if (
                    solution.status is CheckStatus.SAT
                    and solution.x is not None
                    and self.options.enabled("attack")
                ):
                    # a point of the relaxation: often next to a real counterexample
                    found = gradient_attack(
                        self.model,
                        self.confirmer,
                        region,
                        forms,
                        self.rng,
                        time.monotonic() + 1.0,
                        start=solution.x,
                    )
                    if found is not None:
                        return found
            if solution.status is not CheckStatus.UNSAT and use_milp:
                budget = MILP_SHARE * (self.deadline - time.monotonic())
                solution = solve_node(
                    self.model, bounds, xl, xu, forms, True, min(self.deadline, time.monotonic() + budget)
                )
                self.rec.add("netlevel.milp", 1)
            return solution

        with self.rec.timer("netlevel.lp"):
            return self.close_clauses(open_clauses, region, solve)

    def branch(
        self, node, bounds, xl, xu, open_clauses, lam_input, lam_post, priority, scores=None
    ) -> NodeVerdict:
        """The node's children: input halves (low dimensions, int8, or once every ReLU phase is fixed;
        `scores` the inputs' split scores when the batch computed them) or the two phases of one
        ReLU."""
        model, qnet = self.model, self.query.qnet
        if not self.options.enabled("split"):
            return NodeVerdict(
                abandoned="netlevel: the bounds leave the query open and splitting is disabled"
            )
        atoms = [a for _, a in open_clauses if a is not None]
        # (int8: no ReLU phases; its requantizations' staircases are split at a threshold)
        if self.high_dimensional and atoms:
            with self.rec.timer("netlevel.branching"):
                if self.relu_only:  # FSB (`branching`): its estimates read ReLU relaxations only
                    chosen = choose_relu(
                        model,
                        bounds,
                        node.phases,
                        lam_post,
                        atoms,
                        self.atom_matrix,
                        self.atom_constants,
                        xl,
                        xu,
                        node.alphas,
                        node.betas,
                    )
                    best = None if chosen is None else (*chosen, None)
                else:
                    # a table neuron can be split again and again: on a box enumeration can soon
                    # finish, split the box instead
                    tables = points.count(qnet, node.lo, node.hi) > TABLE_SPLIT_MIN_POINTS
                    best = self.relu_to_split(node, bounds, lam_post, atoms, tables)
            if best is not None:
                k, j, at = best
                if at is not None:  # (a pool's input, a table's or requantization's neuron)
                    self.rec.add("netlevel.value_splits", 1)
                children = []
                for phase in (1, -1):
                    phases = node.phases
                    if not model.layers[
                        k
                    ].activation.repeat_splits:  # (a table's or clamp's neuron may be split again)
                        phases = [p.copy() if i == k else p for i, p in enumerate(node.phases)]
                        phases[k][j] = phase
                    split = (k, j, phase, at)
                    children.append(
                        Node(node.region, node.lo, node.hi, phases, bounds, k, node.depth + 1, split)
                    )
                return NodeVerdict(children=tuple(children), priority=priority)
            # every ReLU phase is fixed and the node stays open (rounding terms, relaxed atoms):
            # its box is split instead, down to boxes small enough to enumerate
        if scores is None:
            chosen = np.zeros((1, len(lam_input)))
            chosen[0, atoms] = 1.0
            scores = input_split_scores(
                model,
                [lo[None] for lo in bounds.pre_lo],
                [hi[None] for hi in bounds.pre_hi],
                node.phases,
                lam_input[None],
                {k: v[None] for k, v in lam_post.items()},
                chosen,
                (xu - xl)[None],
            )[0]
        score = scores + 1e-12 * (xu - xl)
        for dimension in np.argsort(-score):
            halves = points.split_at_value(
                qnet,
                node.lo,
                node.hi,
                int(dimension),
                float((xl[dimension] + xu[dimension]) / 2),
            )
            if halves is not None:
                children = tuple(
                    Node(node.region, lo, hi, node.phases, bounds, 0, node.depth + 1) for lo, hi in halves
                )
                return NodeVerdict(children=children, priority=priority)
        return NodeVerdict(abandoned="netlevel: a single input left open (internal)")

    def relu_to_split(
        self, node, bounds, lam_post, atoms, tables: bool = True
    ) -> tuple[int, int, float | None] | None:
        """The open ReLU (layer, neuron, None) with the best BaBSR-like score (|coefficient| in the
        open atoms' bounds x the triangle relaxation's intercept), or a max pool's window (layer,
        its input of the largest upper bound, the value to split that input at: `MaxPool.split_value`,
        scored by the chord's gap the same way), or None when every phase is fixed."""
        model = self.model
        best, best_score = None, 0.0
        last = len(model.layers) - 1
        for k, layer in enumerate(model.layers):
            # (int8's output codes are a staircase too: the atoms read them, with their coefficients)
            coefficients = lam_post[k][atoms] if k in lam_post and k < last else None
            if k == last and model.qnet.is_int8:
                coefficients = self.atom_matrix[atoms]
            if tables and layer.activation.repeat_splits and coefficients is not None:
                found = self._table_split(bounds, k, coefficients)
                if found is not None and found[0] > best_score:
                    best_score, best = found[0], (k, found[1], found[2])
            if not layer.activation.elementwise and k in lam_post:  # a max pool's window
                inputs, at, gap = layer.activation.split_value(bounds.pre_lo[k], bounds.pre_hi[k])
                usable = (gap > 0) & (node.phases[k][inputs] == 0)
                score = np.where(usable, np.abs(lam_post[k][atoms]).sum(axis=0) * gap + 1e-30, -1.0)
                o = int(np.argmax(score))
                if score[o] > best_score:
                    best, best_score = (k, int(inputs[o]), float(at[o])), float(score[o])
            if not layer.relu or k not in lam_post:
                continue
            lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
            unstable = (lo < 0) & (hi > 0) & (node.phases[k] == 0)
            if not unstable.any():
                continue
            intercept = np.where(unstable, -lo * hi / np.where(unstable, hi - lo, 1.0), 0.0)
            score = np.abs(lam_post[k][atoms]).sum(axis=0) * intercept
            score = np.where(unstable, score + 1e-30, -1.0)
            j = int(np.argmax(score))
            if score[j] > best_score:
                best, best_score = (k, j, None), float(score[j])
        return best

    def _table_split(self, bounds: Bounds, k: int, coefficients: np.ndarray):
        """A lookup table's neuron to split at the middle of its interval (on the word grid in
        fixed point), or a clamp's at a kink (`split_value`): (score, neuron, value), the score the
        coefficient in the open atoms' bounds times the relaxation's largest gap on the interval
        (upper line minus lower line at an end), or None when no neuron's interval can be split."""
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        relaxation = bounds.relaxation(self.model, k)
        gap = line_gap(relaxation.a, relaxation.c, relaxation.s, relaxation.t, lo, hi)
        layer = self.model.layers[k]
        weight = np.abs(coefficients).sum(axis=0)
        stairs = layer.stairs
        if stairs is not None and stairs.thresholds is not None:
            return self._requantization_split(stairs, lo, hi, weight * gap, weight)
        grid = stairs.grid if stairs is not None else self.model.unit
        at = layer.activation.split_value(lo, hi, grid)
        splittable = (at > lo) & (at < hi) & self.model.layers[k].open_neurons(lo, hi)
        score = np.where(splittable, weight * gap + 1e-30, -1.0)
        j = int(np.argmax(score))
        if score[j] <= 0:
            return None
        return float(score[j]), j, float(at[j])

    @staticmethod
    def _requantization_split(
        stairs: Staircase, lo: np.ndarray, hi: np.ndarray, estimate: np.ndarray, weight: np.ndarray
    ) -> tuple[float, int, float] | None:
        """int8: among the `REQUANT_SPLIT_CANDIDATES` open neurons of the best `estimate` (their
        coefficient x gap), the one whose split saves most (coefficient x `split_points`' saving:
        the parent's gap less the worse child's; where no split saves at once, the best estimate
        split at its middle step, scored far below any saving of another layer), (score, neuron,
        value), or None."""
        opened = np.flatnonzero(stairs.open(lo, hi))
        if not len(opened):
            return None
        chosen = opened[np.argsort(-estimate[opened], kind="stable")[:REQUANT_SPLIT_CANDIDATES]]
        part = stairs._neurons(chosen, len(lo))
        at, saving = part.split_points(lo[chosen], hi[chosen])
        score = weight[chosen] * saving
        if not score.max() > 0:  # no split saves at once: the best estimate, at its middle step
            score = estimate[chosen] * 1e-9
        best = int(np.argmax(score))
        if score[best] <= 0:
            return None
        return float(score[best]) + 1e-30, int(chosen[best]), float(at[best])


def _scatter(
    previous: dict[int, np.ndarray] | None, found: dict[int, np.ndarray], rows: np.ndarray, count: int
) -> dict[int, np.ndarray]:
    """Per layer, `found`'s rows written into a copy of `previous` (count rows, zeros where
    nothing was given), as float32: a warm start needs no more."""
    result = {}
    for k, values in found.items():
        given = None if previous is None else previous.get(k)
        full = np.zeros((count, values.shape[1]), dtype=np.float32) if given is None else given.copy()
        full[rows] = values
        result[k] = full
    return result


def combination_refutes(lam: np.ndarray, offset: np.ndarray, xl: np.ndarray, xu: np.ndarray) -> np.ndarray:
    """Per box b: do the atoms' linear lower bounds L_i(x) = lam[b, i] . x + offset[b, i] (valid on
    the box [xl[b], xu[b]]) exclude the clause together: is some convex combination sum l_i L_i
    positive on the whole box? (Then at every x some margin g_i >= L_i is positive: no atom set
    holds everywhere.) The weights come from projected supergradient ascent on the concave min over
    the box (all boxes at once, a box's weights frozen once they prove it); only the final check
    counts, and it is sound (`linear_minimum`)."""
    batch, m = offset.shape
    weights = np.full((batch, m), 1.0 / m)
    proved = np.zeros(batch, dtype=bool)
    for step in range(COMBINATION_STEPS):
        combined = (weights[:, None, :] @ lam)[:, 0, :]
        x = np.where(combined > 0, xl, xu)
        values = matvec(lam, x) + offset
        proved |= (weights * values).sum(axis=1) > 0
        if proved.all():
            break
        scale = np.abs(values).max(axis=1, keepdims=True) + 1e-300
        moved = weights + (0.5 / (1 + step)) * (values - values.mean(axis=1, keepdims=True)) / scale
        weights = np.where(proved[:, None], weights, _simplex(moved))
    combined = weights[:, None, :] @ lam
    combined_offset = (weights * offset).sum(axis=1)[:, None]
    # weights @ lam and weights @ offset are rounded: charge gamma_m of the magnitudes
    x_max = np.maximum(np.abs(xl), np.abs(xu))
    margin = gamma(m + 2) * (
        (weights * np.abs(offset)).sum(axis=1)
        + ((weights[:, None, :] @ np.abs(lam))[:, 0, :] * x_max).sum(axis=1)
    )
    return linear_minimum(combined, combined_offset, xl, xu)[:, 0] - margin > 0


def _simplex(values: np.ndarray) -> np.ndarray:
    """The Euclidean projection of every row onto the probability simplex."""
    ordered = -np.sort(-values, axis=1)
    cumulative = np.cumsum(ordered, axis=1) - 1.0
    index = np.arange(1, values.shape[1] + 1)
    rho = np.count_nonzero(ordered - cumulative / index > 0, axis=1) - 1  # the condition holds on a prefix
    theta = cumulative[np.arange(len(values)), rho] / (rho + 1)
    return np.maximum(values - theta[:, None], 0.0)


def decide(query: NetworkQuery, options: EngineOptions, deadline: float, recorder: Recorder) -> EngineResult:
    """Decide the query (SAFE, UNSAFE with the confirmed implementation input, or UNKNOWN with a
    reason: unsupported network, timeout, a node nothing could close)."""
    reason = unsupported_reason(query)
    if reason is not None:
        return EngineResult(
            EngineStatus.UNKNOWN, reason=reason, times_s=dict(recorder.times), counts=dict(recorder.counts)
        )
    if not query.regions:
        return EngineResult(EngineStatus.SAFE, reason="empty input region", decided_by="netlevel")
    # the products are small (ACAS Xu: 50 x 50; a 784-input network: a few rows by 256) and the
    # machine is shared: BLAS threads spinning on two cores made them up to 10x slower (measured)
    with threadpool_limits(limits=1, user_api="blas"):
        with recorder.timer("netlevel.setup"):
            search = Search(query, options, deadline, recorder)
        return search.run()
