"""Network level: counterexample search at network scale, and the one exact confirmation every UNSAFE goes
through.

Points are found in float64 on the real-valued surrogate of the network (batch evaluation of
corners and random points, then projected gradient descent with analytic gradients through the
layers' operations and activations), rounded to implementation inputs (words, or values of the input type)
inside the region, screened on the exact simulator's outputs (or the surrogate in REAL arithmetic)
with a tolerance, and only then confirmed by `NetworkQuery.violation` (exact: `simulate` and
rational arithmetic on its outputs, or `exact.real_outputs`). A float tolerance only decides which
points are worth the exact check, never a verdict.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from qverify.engine.netlevel.model import NetModel
from qverify.engine.netlevel.query import NO_VIOLATION, InputRegion, NetworkQuery
from qverify.engine.netlevel.roundoff import U64
from qverify.properties import Relation
from qverify.quant import simulate

EXACT_CHECKS = 64  # candidates confirmed exactly per batch, at most
SURROGATE_CHUNK_VALUES = 1 << 21  # values of one layer evaluated at once (16 MB of float64)
# conjunctions over at most this many inputs descend by LP steps (`box_descent`): an LP of a batch
# of points x (inputs + 1) columns per step
BOX_DESCENT_INPUTS = 256
BOX_DESCENT_STEPS = 12
LP_STEP_SECONDS = 0.2  # one step's LP at most (HiGHS's time limit)


@dataclass(frozen=True, slots=True)
class OnLattice:
    """int8: an atom's margin g takes only the values offset + k unit (k an integer: the exact
    coefficients on the output codes are integer multiples of `unit`), and `first` is the least k
    whose value refutes the atom (g > 0, or g >= 0 when strict). A lower bound L of g then refutes
    the atom once ceil((L - offset) / unit) >= first: the bound moved up to the next value g can
    take, up to an output code (a threshold between two codes' values, or a strict atom at 0)."""

    unit: float  # (rounded to float64; `refutes` allows for it)
    offset: float
    first: int

    def refutes(self, lower: np.ndarray) -> np.ndarray:
        """Lower bounds (float64, sound for the exact g) that refute the atom on the lattice: the
        quotient (L - offset) / unit is computed in float64 and allowed 1e-9 of its magnitude (far
        above its rounding), so that a quotient just below an integer never reads as above it."""
        quotient = (lower - self.offset) / self.unit
        margin = 1e-9 * (1.0 + np.abs(quotient) + abs(self.offset / self.unit))
        return quotient - margin > self.first - 1


@dataclass(frozen=True, slots=True)
class AtomForm:
    """An atom as a margin g: the atom holds iff g <= 0 (g < 0 when strict); g = coefficients . Y +
    constant, in float64 (the exact Fractions rounded: `rounding` bounds the error relative to
    sum |coefficient| |Y| + |constant|); `lattice` the values g can take (int8's output codes)."""

    clause: int
    coefficients: np.ndarray  # (n_outputs,)
    constant: float
    strict: bool
    lattice: OnLattice | None = None


def _lattice(exact: list[Fraction], constant: Fraction, strict: bool) -> OnLattice | None:
    """The values sum exact[i] q_i + constant takes over integer q (`OnLattice`), or None when
    every coefficient is 0."""
    nonzero = [abs(value) for value in exact if value]
    if not nonzero:
        return None
    denominator = math.lcm(*(value.denominator for value in nonzero))
    unit = Fraction(
        math.gcd(*(value.numerator * (denominator // value.denominator) for value in nonzero)), denominator
    )
    # the least k with constant + k unit > 0 (>= 0 when strict)
    first = math.floor(-constant / unit) + 1
    if strict and (first - 1) * unit + constant == 0:
        first -= 1
    return OnLattice(float(unit), float(constant), first)


def atom_forms(query: NetworkQuery) -> list[AtomForm]:
    """The unsafe atoms as margins over the model's outputs: the normalised outputs Y, or for int8
    the output codes q, with Y = (q - zero) * scale substituted exactly (in rationals) before the
    one rounding to float64."""
    forms = []
    n_out = query.qnet.n_outputs
    scale, zero = Fraction(1), 0
    if query.qnet.is_int8:
        scale, zero = Fraction(query.qnet.output_quant.scale), query.qnet.output_quant.zero_point
    for index, clause in enumerate(query.unsafe.clauses):
        for atom in clause.atoms:
            sign = 1 if atom.relation in (Relation.LE, Relation.LT) else -1
            exact = [Fraction(0)] * n_out
            constant = Fraction(atom.constant)
            for output, value in atom.terms:
                exact[output] += sign * Fraction(value) * scale
                constant -= Fraction(value) * scale * zero
            coefficients = np.array([float(v) for v in exact])
            strict = atom.relation in (Relation.LT, Relation.GT)
            lattice = _lattice(exact, sign * constant, strict) if query.qnet.is_int8 else None
            forms.append(AtomForm(index, coefficients, float(sign * constant), strict, lattice))
    return forms


@dataclass(frozen=True, slots=True)
class Counterexample:
    point: np.ndarray  # implementation inputs
    violated: int  # clause index or OVERFLOW_ASSERTION


class Confirmer:
    """Screens batches of implementation inputs and confirms the promising ones exactly."""

    def __init__(self, query: NetworkQuery, model: NetModel, forms: list[AtomForm]) -> None:
        self.query = query
        self.model = model
        self.forms = forms
        self.n_clauses = len(query.unsafe.clauses)
        self.checked = 0

    def outputs(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Real outputs (float64) of a batch and the rows already known to violate (detect)."""
        if self.model.real:
            return surrogate_outputs(self.model, self.model.input_reals(points)), np.zeros(len(points), bool)
        run = simulate(self.model.qnet, points)
        outputs = run.outputs.astype(np.float64)
        if self.model.is_fixed:
            outputs = outputs * self.model.unit
        return outputs, np.asarray(run.detected, dtype=bool)

    def screen(self, points: np.ndarray) -> np.ndarray:
        """Rows that may violate a clause: every atom within tolerance of holding."""
        outputs, detected = self.outputs(points)
        maybe = np.zeros(len(points), dtype=bool)
        by_clause: dict[int, np.ndarray] = {}
        for form in self.forms:
            value = outputs @ form.coefficients + form.constant
            magnitude = np.abs(outputs) @ np.abs(form.coefficients) + abs(form.constant)
            # float64 evaluation of n terms, and the atom's rationals rounded to float64: a bound
            # on |value - exact value|, so rows outside the tolerance are exactly safe
            terms = len(form.coefficients) + 2
            tolerance = (4 * terms * U64 + (1e-9 if self.model.real else 0.0)) * magnitude + 1e-300
            holds = value <= tolerance
            by_clause[form.clause] = by_clause.get(form.clause, np.ones(len(points), bool)) & holds
        for clause in range(self.n_clauses):
            maybe |= by_clause.get(clause, np.ones(len(points), bool))  # no atoms: always unsafe
        return maybe | detected

    def promising(self, points: np.ndarray, keep: int = 16) -> np.ndarray:
        """The rows worth a run of the simulator (which costs milliseconds a batch at ACAS Xu size):
        the `keep` lowest clause margins on the float64 surrogate, among those within a generous
        tolerance (rounding moves outputs by far less than 1e-3 of their scale at usable formats).
        For the attack only: exhaustive checks screen every row on the simulator itself."""
        outputs = surrogate_outputs(self.model, self.model.input_reals(points))
        scale = 1.0 + np.abs(outputs).max(axis=1)
        best = np.full(len(points), np.inf)
        for clause in range(self.n_clauses):
            forms = [form for form in self.forms if form.clause == clause]
            margin = np.full(len(points), -np.inf)
            for form in forms:
                margin = np.maximum(margin, outputs @ form.coefficients + form.constant)
            best = np.minimum(best, margin)
        rows = np.flatnonzero(best <= 1e-3 * scale + 4 * self.model.unit)
        return rows[np.argsort(best[rows])][:keep]

    def first(self, points: np.ndarray) -> Counterexample | None:
        """The first exactly confirmed violation among the rows of `points`, if any."""
        if len(points) == 0:
            return None
        if not self.model.real and not self.model.detect:
            points = points[self.promising(points)]
            if len(points) == 0:
                return None
        rows = np.flatnonzero(self.screen(points))
        for row in rows[:EXACT_CHECKS]:
            self.checked += 1
            violated = self.query.violation(points[row])
            if violated != NO_VIOLATION and self.respects_invariants(points[row]):
                return Counterexample(points[row].copy(), violated)
        return None

    def respects_invariants(self, point: np.ndarray) -> bool:
        """The harness assumes its invariants: an execution outside them is no counterexample."""
        invariants = self.query.invariants
        if invariants is None:
            return True
        run = simulate(self.model.qnet, point[None, :], trace=True)
        if run.detect_mode and bool(run.detected[0]):
            return True  # the overflow assertion fails before the invariants are read
        # int8: the invariants bound the accumulators, which the simulator's trace does not hold (its
        # `pre` is the code); the model's statement computes them exactly (integers below 2^31)
        accumulators = surrogate_forward(self.model, point[None, :])[1] if self.model.qnet.is_int8 else None
        for k, (bounds, trace) in enumerate(zip(invariants, run.layers)):
            # a max pool's trace and invariant hold its outputs; a requantizing Concat's accumulator
            # is its input's code (the model's identity before the staircase), not the trace's output
            pooled = not self.model.layers[k].activation.elementwise
            pre = trace.pre[0] if accumulators is None or pooled else accumulators[k][0]
            for values, lo, hi in (
                (pre, bounds.pre_lo, bounds.pre_hi),
                (trace.post[0], bounds.post_lo, bounds.post_hi),
            ):
                if np.any(values < lo) or np.any(values > hi):
                    return False
        return True


def to_implementation(model: NetModel, region: InputRegion, reals: np.ndarray) -> np.ndarray:
    """Real points (batch) to the nearest implementation inputs inside the region."""
    if model.is_fixed:
        words = np.rint(reals / model.unit)
        return np.clip(words, region.lo, region.hi).astype(np.int64)
    dtype = model.qnet.number.dtype  # type: ignore[union-attr]
    values = np.clip(reals, region.lo, region.hi).astype(dtype).astype(np.float64)
    return np.clip(values, region.lo, region.hi)


def surrogate_forward(model: NetModel, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The real-valued network in float64 on a batch; also every layer's pre-activation values."""
    x = np.atleast_2d(x)
    pres: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    for index, layer in enumerate(model.layers):
        pre = layer.op.forward(model.gather(index, x, outputs)) + layer.bias
        pres.append(pre)
        outputs.append(layer.activation.forward(pre))
    return outputs[-1], pres


def surrogate_outputs(model: NetModel, x: np.ndarray) -> np.ndarray:
    """`surrogate_forward`'s outputs alone, a chunk of rows at a time so that no layer's values
    exceed `SURROGATE_CHUNK_VALUES` at once: on digits28-maxpool int8 (23,328 staircase neurons)
    the sample attack's 1,025 points held every layer's values and the staircases' integer
    temporaries at once, 1.8 GB of the process's peak."""
    x = np.atleast_2d(x)
    widest = max(max(layer.n_out, layer.n_post) for layer in model.layers)
    rows = max(1, SURROGATE_CHUNK_VALUES // max(widest, 1))
    if len(x) <= rows:
        return surrogate_forward(model, x)[0]
    return np.vstack([surrogate_forward(model, x[i : i + rows])[0] for i in range(0, len(x), rows)])


def clause_choice(forms: list[AtomForm], values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of atom margins `values` (B, atoms): the clause closest to holding (the least of its
    atoms' largest margin), that margin (<= 0: unsafe) and the clause's atom furthest from holding."""
    clauses = np.array([form.clause for form in forms])
    rows = np.arange(len(values))
    best_value = np.full(len(values), np.inf)
    best_atom = np.zeros(len(values), dtype=np.int64)
    best_clause = np.zeros(len(values), dtype=np.int64)
    for clause in np.unique(clauses):
        members = np.flatnonzero(clauses == clause)
        worst = members[np.argmax(values[:, members], axis=1)]
        better = values[rows, worst] < best_value
        best_value = np.where(better, values[rows, worst], best_value)
        best_atom = np.where(better, worst, best_atom)
        best_clause = np.where(better, clause, best_clause)
    return best_value, best_clause, best_atom


def input_gradient(model: NetModel, pres: list[np.ndarray], coefficients: np.ndarray) -> np.ndarray:
    """The gradient in the input of coefficients[r] . outputs at the points whose pre-activation
    values are `pres` (row r of every array: one point, or one point's copy per coefficient row),
    back through every node's activation and operation and the wiring."""
    last = len(model.layers) - 1
    pending: dict[int, np.ndarray] = {last: coefficients}  # the gradient in each node's output
    grad_x = np.zeros((len(coefficients), model.n_inputs))
    for index in range(last, -1, -1):
        if index not in pending:
            continue
        layer = model.layers[index]
        grad = layer.op.backward(layer.activation.pullback(pending.pop(index), pres[index]))
        for producer, part in model.split(index, grad):
            if producer < 0:
                grad_x = grad_x + part
            else:
                pending[producer] = pending[producer] + part if producer in pending else part
    return grad_x


def unsafe_loss(model: NetModel, forms: list[AtomForm], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """min over clauses of (max over the clause's atoms of g) (<= 0 means unsafe), and its gradient
    in x, per row: the clause closest to holding and, in it, the atom furthest from holding."""
    x = np.atleast_2d(x)
    outputs, pres = surrogate_forward(model, x)
    matrix = np.stack([form.coefficients for form in forms])
    constants = np.array([form.constant for form in forms])
    best_value, _, best_atom = clause_choice(forms, outputs @ matrix.T + constants)
    return best_value, input_gradient(model, pres, matrix[best_atom])


def conjunctive(forms: list[AtomForm], n_inputs: int) -> bool:
    """Does the attack descend by LP steps (`box_descent`): a clause of several atoms, over few
    enough inputs for an LP per step?"""
    if n_inputs > BOX_DESCENT_INPUTS:
        return False
    counts = np.bincount([form.clause for form in forms]) if forms else np.zeros(0, dtype=np.int64)
    return bool((counts > 1).any())


def box_descent(
    model: NetModel,
    forms: list[AtomForm],
    xl: np.ndarray,
    xu: np.ndarray,
    x: np.ndarray,
    radius: np.ndarray,
    deadline: float,
    steps: int = BOX_DESCENT_STEPS,
) -> np.ndarray:
    """Sequential linear programming on the clause's whole output box: at each point the network is
    linearised (exact on the point's ReLU phases: a ReLU network is affine there), and one LP per
    step, over every point of the batch, moves each point within its trust region (a box of
    `radius` around it, inside [xl, xu]) to where the linearised clause's largest atom margin is
    least (min t subject to g_i + J_i dx <= t for every atom i of the point's clause). A step is
    kept where the network's own margin fell (the radius then doubles), else the radius halves.
    Sign-gradient descent on max_i g_i moves one atom at a time and zigzags between them: on
    VNN-COMP 2022's robot network it ended 0.03 above every counterexample, which these steps reach
    in a few LPs. One atom per clause makes the LP's step the sign-gradient step of the radius."""
    from qverify.engine.solvers.highs import HighsSolver

    matrix = np.stack([form.coefficients for form in forms])
    constants = np.array([form.constant for form in forms])
    clauses = np.array([form.clause for form in forms])
    members = {int(c): np.flatnonzero(clauses == c) for c in np.unique(clauses)}
    width = np.maximum(xu - xl, 0.0)
    x = np.clip(np.array(x, dtype=np.float64), xl, xu)
    radius = np.broadcast_to(radius, x.shape).copy()
    batch, n = x.shape
    outputs, pres = surrogate_forward(model, x)
    margin, clause, _ = clause_choice(forms, outputs @ matrix.T + constants)
    for _ in range(steps):
        if time.monotonic() > deadline or not np.any(radius > 0):
            break
        # the atoms of each point's clause, one linearisation row per (point, atom)
        owners = np.concatenate([np.full(len(members[int(c)]), b) for b, c in enumerate(clause)])
        atoms = np.concatenate([members[int(c)] for c in clause])
        gradients = input_gradient(model, [p[owners] for p in pres], matrix[atoms])
        values = np.einsum("ij,ij->i", outputs[owners], matrix[atoms]) + constants[atoms]
        # columns: per point its step dx (n) and t; rows: J dx - t <= -g
        per_point = n + 1
        columns = owners[:, None] * per_point + np.append(np.arange(n), n)[None, :]
        block = np.hstack([gradients, -np.ones((len(owners), 1))])
        lo = np.maximum(xl - x, -radius)
        hi = np.minimum(xu - x, radius)
        reach = np.abs(values) + np.abs(gradients) @ width + 1.0
        arrays = {
            "cost": np.tile(np.append(np.zeros(n), 1.0), batch),
            "col_lo": np.column_stack([lo, -reach.max() * np.ones(batch)]).ravel(),
            "col_hi": np.column_stack([hi, reach.max() * np.ones(batch)]).ravel(),
            "row_lo": np.full(len(owners), -np.inf),
            "row_hi": -values,
            "start": np.arange(len(owners) + 1, dtype=np.int64) * per_point,
            "index": columns.ravel().astype(np.int64),
            "value": block.ravel(),
        }
        # (HiGHS's own limit is only a net: a step's LP takes milliseconds, and the attack's slices
        # are shorter than the solver's least time)
        solved = HighsSolver().lower_bound(arrays, max(deadline, time.monotonic() + LP_STEP_SECONDS))
        if len(solved.values) != batch * per_point:
            break
        step = solved.values.reshape(batch, per_point)[:, :n]
        moved = np.clip(x + step, xl, xu)
        moved_outputs, moved_pres = surrogate_forward(model, moved)
        moved_margin, moved_clause, _ = clause_choice(forms, moved_outputs @ matrix.T + constants)
        better = moved_margin < margin
        x[better], margin[better], clause[better] = moved[better], moved_margin[better], moved_clause[better]
        outputs[better] = moved_outputs[better]
        for p, q in zip(pres, moved_pres):
            p[better] = q[better]
        radius = np.where(better[:, None], np.minimum(2 * radius, width), radius / 2)
        if np.any(margin <= 0):
            break
    return x


def gradient_attack(
    model: NetModel,
    confirmer: Confirmer,
    region: InputRegion,
    forms: list[AtomForm],
    rng: np.random.Generator,
    deadline: float,
    batch: int = 32,
    steps: int = 30,
    start: np.ndarray | None = None,
    whole_rounds: int = 0,
) -> Counterexample | None:
    """Projected (sign-)gradient descent on the unsafe margin from random starts (the centre first),
    each round's points rounded into the region and confirmed; stops at the deadline. With `start`
    (a point, e.g. an LP solution, or rows of points, e.g. the inputs that minimise the worst
    bounds of the branch and bound's open nodes), one round from them and points around them.
    A clause of several atoms (a conjunction: an output box) is descended by LP steps on the whole
    clause instead (`box_descent`), where the inputs are few enough. The first `whole_rounds` rounds
    run all their steps whatever the deadline (a round cut short confirms barely descended points)."""
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    width = xu - xl
    by_lp = conjunctive(forms, len(xl))
    starts = None if start is None else np.atleast_2d(start)
    for round_index in range(1 if starts is not None else 64):
        x = xl + rng.random((max(batch, 0 if starts is None else len(starts)), len(xl))) * width
        if starts is not None:
            around = starts[np.arange(len(x)) % len(starts)]
            x = np.clip(around + (x - (xl + xu) / 2) / 16, xl, xu)
            x[: len(starts)] = starts
        elif round_index == 0:
            x[0] = (xl + xu) / 2
        step = width / (64 if start is not None else 4)
        if by_lp:
            x = box_descent(model, forms, xl, xu, x, 4 * step, deadline)
        whole = round_index < whole_rounds
        for _ in range(0 if by_lp else steps):
            if time.monotonic() > deadline and not whole:
                break
            _, grad = unsafe_loss(model, forms, x)
            x = np.clip(x - step * np.sign(grad), xl, xu)
            step = step * 0.85
        found = confirmer.first(to_implementation(model, region, x))
        if found is not None or (time.monotonic() > deadline and round_index + 1 >= whole_rounds):
            return found
    return None


def sample_attack(
    model: NetModel, confirmer: Confirmer, region: InputRegion, rng: np.random.Generator, samples: int
) -> Counterexample | None:
    """Box corners (low dimensions), the centre and uniform random points, screened in one batch."""
    n = region.dimension
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    points = [(xl + xu) / 2]
    if n <= 10:
        corners = np.array(np.meshgrid(*[[0.0, 1.0]] * n, indexing="ij")).reshape(n, -1).T
        points.extend(xl + corners * (xu - xl))
    points = np.vstack([np.array(points), xl + rng.random((samples, n)) * (xu - xl)])
    return confirmer.first(to_implementation(model, region, points))
