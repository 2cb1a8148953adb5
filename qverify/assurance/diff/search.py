"""Search mode: look for disagreement-inducing inputs around each seed with the bit-exact simulators.

Methods (every one spends the same budget per seed, in queries -- inputs run through both
implementations -- and optionally in seconds):

- `ga`: DiffChaser's genetic algorithm. Chromosomes are inputs within an L-inf distance of the seed
  (initial population: uniform noise in the ball), tournament selection, uniform crossover of values,
  mutation of each value with a fixed rate to a uniform value of the ball; the fittest chromosome is
  kept (elitism); fitness `Criterion.fitness` (k-uncertainty on the reference's logits).
- `distortion`: DiverGet's search over distortion vectors (`space.DistortionSpace`) with particle
  swarm optimisation (or a real-coded GA, `--optimizer ga`), fitness the Jensen-Shannon divergence of
  the two implementations' softmax outputs (top-1 criterion; the criterion's own fitness otherwise).
- `random`: uniform inputs in the same L-inf ball (DiffChaser's baseline space), and
  `random-distortion`: uniform distortion vectors (DiverGet's random search).

Validity (DiverGet's VR): an input whose PSNR against its seed is below `min_psnr` dB (peak = the
input range) is no test of the same input: it counts as generated, never as a DII, and ranks below
every valid input (nearer to valid first), so every method searches the same valid neighbourhood. `--min-psnr 0` turns this off.

By default a search does not stop at the first DII: it spends its whole budget and counts every
distinct DII, so #DII and DiR compare methods at equal cost (time to the first DII is kept). With
`first_dii` (`--first-dii`) every method stops a seed at its first DII, DiffChaser's protocol: the
seed's outcome holds that one DII, its queries are the inputs generated up to and including it (a
generation is run as one batch; the rows after the DII are discarded uncounted), its time what the
search spent until then. With a query budget the stopped search is the prefix of the full one: the
same first DII at the same query.

Determinism: each (method, seed) draws from a generator keyed by (run seed, method, seed index), and
each distortion query's own randomness (noise, occlusion slots) from one keyed by (run seed, seed
index, query): with a query budget the whole run is a function of the seed.
"""

from __future__ import annotations

import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from qverify.assurance.diff.criteria import Criterion
from qverify.assurance.diff.metrics import psnr, summarise
from qverify.assurance.diff.records import Dii, MethodRun, SeedOutcome
from qverify.assurance.diff.search_journal import SearchJournal
from qverify.assurance.diff.space import DistortionSpace, LinfBall
from qverify.assurance.implementations import ImplementationPair
from qverify.errors import InputError

METHODS = ("ga", "distortion", "random", "random-distortion")
OPTIMIZERS = ("pso", "ga")
TOURNAMENT = 3
INVALID_FITNESS = 1e6  # plus the PSNR shortfall: invalid inputs rank below every valid one, nearer ones first
PSO_INERTIA, PSO_COGNITIVE, PSO_SOCIAL = 0.7, 1.5, 1.5


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """Budget per seed (queries, optionally seconds), population, the L-inf radius of GA and random
    search (fraction of the input range), mutation rate, the k of k-uncertainty fitness, the optimizer
    of the distortion search, DIIs kept per seed, PSNR threshold (dB) of a valid input, and the seed."""

    budget: int = 1000
    time_budget_s: float | None = None
    population: int = 20
    epsilon: float = 0.1
    mutation_rate: float = 0.05
    k: int = 1
    optimizer: str = "pso"
    keep: int = 50
    min_psnr: float = 20.0
    seed: int = 0
    first_dii: bool = False  # stop a seed at its first DII (DiffChaser's protocol)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise InputError(f"--budget {self.budget}: must be at least 1 query per seed")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise InputError(f"--time-budget {self.time_budget_s}: must be positive")
        if self.population < 2:
            raise InputError(f"--population {self.population}: must be at least 2")
        if not 0 < self.epsilon <= 1:
            raise InputError(f"--epsilon {self.epsilon}: must lie in (0, 1] (a fraction of the input range)")
        if not 0 <= self.mutation_rate <= 1:
            raise InputError(f"--mutation-rate {self.mutation_rate}: must lie in [0, 1]")
        if self.k < 1:
            raise InputError(f"--k {self.k}: must be at least 1")
        if self.optimizer not in OPTIMIZERS:
            raise InputError(f"--optimizer {self.optimizer}: expected {' or '.join(OPTIMIZERS)}")
        if not self.min_psnr >= 0:
            raise InputError(f"--min-psnr {self.min_psnr}: must be >= 0 dB")
        if self.seed < 0:
            raise InputError(f"--seed {self.seed}: must be >= 0")


@dataclass(frozen=True, slots=True)
class PairOracle:
    """Both implementations on raw inputs: normalise, run, compare by the criterion."""

    pair: ImplementationPair
    criterion: Criterion
    normalise: Callable[[np.ndarray], np.ndarray]

    def __call__(self, x_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = self.normalise(x_raw)
        reference, candidate = self.pair.reference.run(x).outputs, self.pair.candidate.run(x).outputs
        return reference, candidate, self.criterion.disagrees(reference, candidate)

    def labels(self, x_raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        reference, candidate, _ = self(x_raw)
        return np.argmax(reference, axis=1), np.argmax(candidate, axis=1)


class SeedSearch:
    """One method on one seed: evaluates batches within the budget and keeps what it finds."""

    def __init__(self, oracle: PairOracle, seed_index: int, seed: np.ndarray, width: float,
                 settings: SearchSettings, jsd: bool) -> None:  # fmt: skip
        self.oracle, self.seed_index, self.seed, self.width = oracle, seed_index, seed, width
        self.settings, self.jsd = settings, jsd
        self.queries = self.dii = self.valid = 0
        self.seen: set[bytes] = set()
        self.kept: list[Dii] = []
        self.first_s: float | None = None
        self.first_query: int | None = None
        self.started = time.perf_counter()

    def exhausted(self) -> bool:
        if self.queries >= self.settings.budget or (self.settings.first_dii and self.dii > 0):
            return True
        limit = self.settings.time_budget_s
        return limit is not None and time.perf_counter() - self.started >= limit

    def evaluate(self, xs: np.ndarray, params: np.ndarray | None = None) -> np.ndarray:
        """Fitness of each row (to minimise); rows beyond the budget are not run (fitness +inf)."""
        fitness = np.full(len(xs), np.inf)
        count = min(len(xs), self.settings.budget - self.queries)
        if count <= 0 or self.exhausted():
            return fitness
        reference, candidate, disagree = self.oracle(xs[:count])
        quality = psnr(self.seed, xs[:count], self.width)
        valid = quality >= self.settings.min_psnr
        hits = np.flatnonzero(disagree & valid)
        if self.settings.first_dii and len(hits):  # no DII yet (else exhausted): the batch's first is new
            count = int(hits[0]) + 1
            valid = valid[:count]
        fitness[:count] = np.where(
            valid,
            self.oracle.criterion.fitness(reference[:count], candidate[:count], self.settings.k, self.jsd),
            INVALID_FITNESS + (self.settings.min_psnr - quality[:count]),
        )
        self.valid += int(np.sum(valid))
        for row in np.flatnonzero(disagree[:count] & valid):
            key = xs[row].tobytes()
            if key in self.seen:
                continue
            self.seen.add(key)
            self.dii += 1
            if self.first_query is None:
                self.first_query = self.queries + int(row)
                self.first_s = time.perf_counter() - self.started
            if len(self.kept) < self.settings.keep:
                self.kept.append(Dii(self.seed_index, self.queries + int(row), xs[row].copy(), reference[row],
                                     candidate[row], None if params is None else params[row].copy()))  # fmt: skip
        self.queries += count
        return fitness

    def outcome(self) -> SeedOutcome:
        return SeedOutcome(self.seed_index, self.queries, self.dii, self.first_s, self.first_query,
                           self.valid, tuple(self.kept), time.perf_counter() - self.started)  # fmt: skip


def _tournament(fitness: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` winners of tournaments of TOURNAMENT random entrants (lowest fitness wins)."""
    entrants = rng.integers(0, len(fitness), size=(count, TOURNAMENT))
    return entrants[np.arange(count), np.argmin(fitness[entrants], axis=1)]


def genetic_search(search: SeedSearch, ball: LinfBall, rng: np.random.Generator) -> None:
    """DiffChaser's GA over inputs in the L-inf ball around the seed."""
    settings = search.settings
    lo, hi = ball.bounds(search.seed)
    population = ball.sample(search.seed, settings.population, rng)
    fitness = search.evaluate(population)
    while not search.exhausted():
        best = int(np.argmin(fitness))
        others = np.array([i for i in range(len(population)) if i != best])
        first, second = _tournament(fitness, len(others), rng), _tournament(fitness, len(others), rng)
        crossover = rng.random((len(others), search.seed.size)) < 0.5
        children = np.where(crossover, population[first], population[second])
        mutate = rng.random(children.shape) < settings.mutation_rate
        children = np.where(mutate, lo + rng.random(children.shape) * (hi - lo), children)
        population[others], fitness[others] = children, search.evaluate(children)


def _distortion_batch(search: SeedSearch, space: DistortionSpace, params: np.ndarray) -> np.ndarray:
    """Distort the seed by each vector (a generator per query for the random families) and evaluate."""
    params = space.valid(params)
    settings = search.settings
    rngs = [np.random.default_rng([settings.seed, search.seed_index, search.queries + row])
            for row in range(len(params))]  # fmt: skip
    return search.evaluate(space.apply(search.seed, params, rngs), params)


def swarm_search(search: SeedSearch, space: DistortionSpace, rng: np.random.Generator) -> None:
    """Particle swarm optimisation over distortion vectors (DiverGet's PSO)."""
    position = space.sample(search.settings.population, rng)
    velocity = np.zeros_like(position)  # particles start sparse (few families) and move towards the best
    fitness = _distortion_batch(search, space, position)
    best_position, best_fitness = position.copy(), fitness.copy()
    while not search.exhausted():
        leader = best_position[int(np.argmin(best_fitness))]
        r1, r2 = rng.random(position.shape), rng.random(position.shape)
        velocity = (PSO_INERTIA * velocity + PSO_COGNITIVE * r1 * (best_position - position)
                    + PSO_SOCIAL * r2 * (leader - position))  # fmt: skip
        position = space.clip(position + velocity)
        fitness = _distortion_batch(search, space, position)
        better = fitness < best_fitness
        best_position[better], best_fitness[better] = position[better], fitness[better]


def evolve_distortions(search: SeedSearch, space: DistortionSpace, rng: np.random.Generator) -> None:
    """A real-coded GA over distortion vectors (DiverGet's GA): tournaments, blend crossover,
    Gaussian mutation of one parameter in `len(families)` on average, elitism."""
    span = space.high - space.low
    population = space.sample(search.settings.population, rng)
    fitness = _distortion_batch(search, space, population)
    while not search.exhausted():
        best = int(np.argmin(fitness))
        others = np.array([i for i in range(len(population)) if i != best])
        first, second = _tournament(fitness, len(others), rng), _tournament(fitness, len(others), rng)
        blend = rng.random((len(others), len(span)))
        children = population[first] + blend * (population[second] - population[first])
        mutate = rng.random(children.shape) < 1.0 / len(span)
        children = space.clip(children + mutate * rng.standard_normal(children.shape) * 0.1 * span)
        population[others], fitness[others] = children, _distortion_batch(search, space, children)


def random_search(search: SeedSearch, ball: LinfBall, rng: np.random.Generator) -> None:
    while not search.exhausted():
        search.evaluate(ball.sample(search.seed, search.settings.population, rng))


def random_distortions(search: SeedSearch, space: DistortionSpace, rng: np.random.Generator) -> None:
    while not search.exhausted():
        _distortion_batch(search, space, space.sample(search.settings.population, rng))


def method_rng(seed: int, method: str, seed_index: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(method.encode()), seed_index])


def run_method(
    method: str,
    oracle: PairOracle,
    seeds: np.ndarray,
    ball: LinfBall,
    space: DistortionSpace | None,
    settings: SearchSettings,
    bar: tqdm | None = None,
    family: str | None = None,
    journal: SearchJournal | None = None,
) -> MethodRun:
    """One method on every seed (a distortion method on `space`); outcomes the journal holds are
    reused, new ones appended as each seed finishes."""
    if method not in METHODS:
        raise InputError(f"unknown search method '{method}' (known: {', '.join(METHODS)})")
    if method in ("distortion", "random-distortion") and space is None:
        raise InputError(f"{method} needs distortions to search (--families)")
    outcomes = []
    jsd = method == "distortion" and oracle.criterion.kind == "top1"
    name = method if family is None else f"{method}:{family}"
    for index, seed in enumerate(seeds):
        key = journal.key(name, index, seed) if journal is not None else ""
        done = journal.get(key) if journal is not None else None
        if done is not None:
            outcomes.append(done)
            if bar is not None:
                bar.update()
            continue
        search = SeedSearch(oracle, index, seed, ball.canvas.width, settings, jsd)
        rng = method_rng(settings.seed, name, index)
        if method == "ga":
            genetic_search(search, ball, rng)
        elif method == "random":
            random_search(search, ball, rng)
        elif method == "random-distortion":
            random_distortions(search, space, rng)  # type: ignore[arg-type]
        elif settings.optimizer == "pso":
            swarm_search(search, space, rng)  # type: ignore[arg-type]
        else:
            evolve_distortions(search, space, rng)  # type: ignore[arg-type]
        outcome = search.outcome()
        if journal is not None:
            journal.add(key, outcome)
        outcomes.append(outcome)
        if bar is not None:
            bar.update()
    summary = summarise(name, outcomes, ball.canvas.width, sum(o.seconds for o in outcomes))
    return MethodRun(summary, tuple(outcomes), family)


def run_search(
    oracle: PairOracle,
    seeds: np.ndarray,
    ball: LinfBall,
    space: DistortionSpace | None,
    methods: Sequence[str],
    settings: SearchSettings,
    per_family: bool = False,
    progress: bool = True,
    journal: SearchJournal | None = None,
) -> tuple[MethodRun, ...]:
    """Every method on every seed; with `per_family`, also the distortion search on each family alone
    (SR and DiR per distortion). With a journal, finished seeds are kept and reused (search_journal)."""
    todo: list[tuple[str, DistortionSpace | None, str | None]] = [(m, space, None) for m in methods]
    if per_family and space is not None and "distortion" in methods:
        for index, name in enumerate(space.names):
            single = DistortionSpace(space.canvas, (space.families[index],), space.low[index : index + 1],
                                     space.high[index : index + 1])  # fmt: skip
            todo.append(("distortion", single, name))
    bar = tqdm(total=len(todo) * len(seeds), desc="diff search", unit="seed", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)  # fmt: skip
    try:
        return tuple(run_method(m, oracle, seeds, ball, s, settings, bar, f, journal) for m, s, f in todo)
    finally:
        bar.close()


def select_seeds(
    oracle: PairOracle, x_raw: np.ndarray, labels: np.ndarray | None, count: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Up to `count` seeds on which both implementations agree (and, with labels, are right; for a
    targeted criterion, do not already predict the target): a seeded random choice in data order.
    Returns the seeds and the label both give."""
    ref, cand = oracle.labels(x_raw)
    usable = ref == cand
    if labels is not None:
        usable &= ref == labels
    if oracle.criterion.kind == "targeted":
        usable &= ref != oracle.criterion.target
    if oracle.criterion.kind == "distance":
        usable &= ~oracle(x_raw)[2]
    candidates = np.flatnonzero(usable)
    if len(candidates) == 0:
        raise InputError(
            "no usable seed: the two implementations disagree (or are wrong) on every input given"
        )
    if len(candidates) > count:
        candidates = np.sort(np.random.default_rng([seed, 7]).choice(candidates, size=count, replace=False))
    return x_raw[candidates], ref[candidates]
