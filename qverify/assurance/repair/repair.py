"""QNNRepair on a qverify implementation: split the repair set, localise faults in one layer, solve
a MILP per metric for the most suspicious neurons, and measure every repair with the simulator.

Steps (docs/repair.md has the definitions and the departures from the paper):

1. Run the float64 reference and the quantized implementation (the bit-exact simulator, with its
   per-layer trace) on the repair set; split it into passing and failing tests (`spectra`).
2. The activation spectrum of the chosen layer and, per metric, a ranking of its neurons
   (`metrics`); the random baseline draws `random_runs` random sets.
3. Per distinct set of top-N neurons: the MILP over integer changes of their weights and biases
   (`milp`, goals from `goals`), on a subset of the repair set when it is larger than `max_tests`
   (all encodable failing tests first, then the passing tests closest to changing their label).
4. The changes applied in the format's integer domain (`target`), checked exactly representable
   (re-quantizing the repaired network gives exactly the intended words or codes), and the repaired
   implementation run by the simulator on the repair and validation sets: the accuracies reported
   are the simulator's. Every goal the MILP promised is re-checked on the simulator's exact layer
   values; per-op fixed point re-solves where a partial sum saturated (`repair_neurons`), and a
   promise still contradicted is counted (`disagreements`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from qverify.assurance.implementations import REAL, Implementation, make_implementation
from qverify.assurance.repair.goals import GoalSet, goal_holds, label_goals, status_goals
from qverify.assurance.repair.journal import journal_key, outcome_from_record, outcome_record
from qverify.assurance.repair.metrics import RANDOM, random_ranking, ranking, suspiciousness
from qverify.assurance.repair.milp import MilpSolution, solve_repair
from qverify.assurance.repair.records import (
    Accuracy,
    RepairOutcome,
    RepairReport,
    RepairSettings,
    RepairStudy,
    WeightChange,
)
from qverify.assurance.repair.spectra import activation_spectrum, split_tests
from qverify.assurance.repair.target import (
    RepairTarget,
    layer_data,
    layer_inputs,
    layer_outputs,
    quantized_activity,
    repaired_network,
)
from qverify.errors import InputError, InternalError
from qverify.network import Network, apply_layer, gather_inputs

if TYPE_CHECKING:
    from qverify.suites.journal import Journal

MAX_ROUNDS = 4


# ------------------------------------------------------------------------------------------- study


def _accuracy(implementation: Implementation, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(implementation.predict(x) == y))


def reference_preactivation(net: Network, x_norm: np.ndarray, index: int) -> np.ndarray:
    """The float64 reference's layer `index` values before its activation (batch, n_out)."""
    x = np.atleast_2d(np.asarray(x_norm, dtype=np.float64))
    outputs: list[np.ndarray] = []
    for k, layer in enumerate(net.layers[:index]):
        outputs.append(apply_layer(layer, gather_inputs(net.wiring, k, x, outputs)))
    layer = net.layers[index]
    values = gather_inputs(net.wiring, index, x, outputs)
    return values @ layer.matrix.T + layer.expanded_bias()  # type: ignore[union-attr]


def check_layers_match(float_net: Network, quantized: Network) -> None:
    """The float network and a separately given quantized model must have the same layers."""
    ours = [(type(layer).__name__, layer.n_in, layer.n_out) for layer in float_net.layers]
    theirs = [(type(layer).__name__, layer.n_in, layer.n_out) for layer in quantized.layers]
    if ours != theirs or float_net.wiring != quantized.wiring:
        raise InputError(
            f"the float network {float_net.name} and the quantized model {quantized.name} have different "
            f"layers: {[f'{k} {i}->{o}' for k, i, o in ours]} vs {[f'{k} {i}->{o}' for k, i, o in theirs]}"
        )


def prepare_study(
    float_net: Network,
    target: RepairTarget,
    repair_x: np.ndarray,
    repair_y: np.ndarray,
    validation_x: np.ndarray,
    validation_y: np.ndarray,
) -> RepairStudy:
    """Steps 1-2 of the module docstring, on normalised inputs and integer labels.

    :raises InputError: no failing test in the repair set (nothing to repair).
    """
    start = time.perf_counter()
    implementation = target.implementation
    check_layers_match(float_net, implementation.network)
    reference = make_implementation(float_net, REAL)
    run = implementation.run(repair_x, trace=True)
    simulation = run.simulation
    assert simulation is not None
    final = np.asarray(simulation.outputs, dtype=np.int64)
    quant_pred = np.argmax(run.outputs, axis=1)
    float_pred = reference.predict(repair_x)
    split = split_tests(repair_y, float_pred, quant_pred)
    if split.failing.size == 0:
        raise InputError(
            f"nothing to repair: no failing test in the repair set ({split.describe()}; a failing test is a "
            "sample the quantized model gets wrong and the float model right)"
        )
    float_active = reference_preactivation(float_net, repair_x, target.index) > 0
    spectrum = activation_spectrum(float_active, quantized_activity(target, simulation), split)
    float_accuracy = Accuracy(
        float(np.mean(float_pred == repair_y)), _accuracy(reference, validation_x, validation_y)
    )
    before = Accuracy(
        float(np.mean(quant_pred == repair_y)), _accuracy(implementation, validation_x, validation_y)
    )
    return RepairStudy(
        target=target,
        reference=reference,
        repair_x=repair_x,
        repair_y=repair_y,
        validation_x=validation_x,
        validation_y=validation_y,
        split=split,
        spectrum=spectrum,
        float_accuracy=float_accuracy,
        before=before,
        inputs=layer_inputs(target, implementation.inputs(repair_x), simulation),
        outputs=layer_outputs(target, simulation),
        final=final,
        float_active=float_active,
        prepare_s=time.perf_counter() - start,
    )


# ------------------------------------------------------------------------------------------- one repair


def _label_margins(final: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per sample: the label's output minus the best other output (negative: misclassified)."""
    rows = np.arange(final.shape[0])
    others = final.astype(np.float64).copy()
    others[rows, labels] = -np.inf
    return final[rows, labels] - others.max(axis=1)


def _subset(study: RepairStudy, max_tests: int) -> tuple[np.ndarray, np.ndarray]:
    """At most `max_tests` samples: failing tests closest to being fixed first (all of them when
    they fit), then the passing tests closest to changing their label (their constraints are the
    ones a change can break; far-away ones are the least likely to bind)."""
    margins = _label_margins(study.final, study.repair_y)
    failing = study.split.failing[np.argsort(-margins[study.split.failing], kind="stable")][:max_tests]
    room = max_tests - failing.size
    passing = study.split.passing[np.argsort(margins[study.split.passing], kind="stable")][: max(room, 0)]
    return np.sort(passing), np.sort(failing)


def _goals(study: RepairStudy, chosen: np.ndarray, settings: RepairSettings) -> GoalSet:
    passing, failing = _subset(study, settings.max_tests)
    if study.target.is_output:
        return label_goals(study.outputs, study.repair_y, chosen, passing, failing, settings.margin)
    return status_goals(
        study.outputs, study.float_active, study.target.zero, chosen, passing, failing, settings.margin
    )


def _changes(
    study: RepairStudy, chosen: np.ndarray, weight_delta: np.ndarray, bias_delta: np.ndarray
) -> tuple[WeightChange, ...]:
    target = study.target
    qlayer = target.qlayer
    if target.is_int8:
        quant = qlayer.int8.quant  # type: ignore[union-attr]
        weights, bias = quant.weights, quant.bias
        w_unit = quant.channel_scales()
        b_unit = w_unit * quant.input.scale
    else:
        weights, bias = qlayer.weights, qlayer.bias
        w_unit = b_unit = np.full(target.n_neurons, 1.0 / target.fixed.scale)
    changes = []
    for k, neuron in enumerate(int(n) for n in chosen):
        for i in np.flatnonzero(weight_delta[k]):
            old = int(weights[neuron, i])
            delta = int(weight_delta[k, i])
            changes.append(WeightChange(neuron, int(i), old, old + delta, delta * float(w_unit[neuron])))
        if bias_delta[k]:
            old, delta = int(bias[neuron]), int(bias_delta[k])
            changes.append(WeightChange(neuron, -1, old, old + delta, delta * float(b_unit[neuron])))
    return tuple(changes)


def _check_representable(
    study: RepairStudy,
    repaired: Implementation,
    chosen: np.ndarray,
    weight_delta: np.ndarray,
    bias_delta: np.ndarray,
) -> None:
    """Re-quantizing the repaired network must give exactly the intended integers, everywhere."""
    target = study.target
    original = target.implementation.qnet.layers  # type: ignore[union-attr]
    for index, (old, new) in enumerate(zip(original, repaired.qnet.layers)):  # type: ignore[union-attr]
        old_w, old_b = (
            (old.int8.quant.weights, old.int8.quant.bias)
            if target.is_int8 and old.is_mac
            else (old.weights, old.bias)
        )
        new_w, new_b = (
            (new.int8.quant.weights, new.int8.quant.bias)
            if target.is_int8 and new.is_mac
            else (new.weights, new.bias)
        )
        want_w, want_b = np.array(old_w, dtype=np.int64), np.array(old_b, dtype=np.int64)
        if index == target.index:
            want_w[chosen] += weight_delta
            want_b[chosen] += bias_delta
        if not (
            np.array_equal(want_w, np.asarray(new_w, dtype=np.int64))
            and np.array_equal(want_b, np.asarray(new_b, dtype=np.int64))
        ):
            raise InternalError(
                f"repair: layer {index + 1} of the repaired network does not re-quantize to the intended values"
            )


def _broken_promises(
    study: RepairStudy, goal_set: GoalSet, met: np.ndarray, chosen: np.ndarray, implementation: Implementation
) -> np.ndarray:
    """Positions of the encoded tests on which a goal the MILP's solution meets does not hold in the
    repaired implementation's exact layer values (the simulator's)."""
    run = implementation.run(study.repair_x[goal_set.tests], trace=True)
    values = np.asarray(run.simulation.layers[study.target.index].pre, dtype=np.int64)  # type: ignore[union-attr]
    broken = {
        goal.test
        for goal, kept in zip(goal_set.goals, met)
        if kept and not goal_holds(goal, values[goal.test], chosen)
    }
    return np.array(sorted(broken), dtype=np.int64)


def _repaired_implementation(
    study: RepairStudy, chosen: np.ndarray, solution: MilpSolution
) -> tuple[Network, Implementation]:
    target = study.target
    network = repaired_network(target, chosen, solution.weight_delta, solution.bias_delta)
    implementation = make_implementation(
        network,
        target.implementation.label,
        target.implementation.qnet.options,  # type: ignore[union-attr]
    )
    _check_representable(study, implementation, chosen, solution.weight_delta, solution.bias_delta)
    return network, implementation


def repair_neurons(
    study: RepairStudy, chosen: np.ndarray, metric: str, settings: RepairSettings
) -> RepairOutcome:
    """Steps 3-4 of the module docstring for one set of neurons.

    Per-op fixed point: the MILP describes a neuron's final word by its exact sum, which holds while
    no partial sum of the C's loop saturates. A solution whose promises the simulator contradicts on
    some tests is solved again with those tests' partial sums constrained to stay words
    (`milp.LayerData.prefix_tests`), at most `MAX_ROUNDS` times; what remains is counted
    (`disagreements`)."""
    start = time.perf_counter()
    target = study.target
    chosen = np.asarray(chosen, dtype=np.int64)
    goal_set = _goals(study, chosen, settings)
    data = layer_data(
        target, study.inputs[goal_set.tests], study.outputs[goal_set.tests], chosen, settings.max_delta
    )
    soft = np.array([goal.soft for goal in goal_set.goals], dtype=bool)
    prefix: set[int] = set()
    milp_time, rounds = 0.0, 0
    network = implementation = None
    broken = np.zeros(0, dtype=np.int64)
    while True:
        rounds += 1
        solution = solve_repair(
            replace(data, prefix_tests=frozenset(prefix)), goal_set.goals, settings.time_limit_s
        )
        milp_time += solution.optimum.time_s
        if not (solution.weight_delta.any() or solution.bias_delta.any()):
            network = implementation = None
            broken = np.zeros(0, dtype=np.int64)
            break
        network, implementation = _repaired_implementation(study, chosen, solution)
        broken = _broken_promises(study, goal_set, solution.met, chosen, implementation)
        fresh = {int(t) for t in broken} - prefix
        if not data.per_op or not fresh or rounds >= MAX_ROUNDS:
            break
        prefix |= fresh
    changes = _changes(study, chosen, solution.weight_delta, solution.bias_delta)
    accuracy = study.before
    if implementation is not None:
        accuracy = Accuracy(
            _accuracy(implementation, study.repair_x, study.repair_y),
            _accuracy(implementation, study.validation_x, study.validation_y),
        )
    return RepairOutcome(
        metric=metric,
        neurons=tuple(int(n) for n in chosen),
        status=solution.status.value,
        highs_status=solution.optimum.highs_status,
        milp_time_s=milp_time,
        milp_size=(solution.n_rows, solution.n_cols, solution.n_integer),
        milp_rounds=rounds,
        tests_encoded=int(goal_set.tests.size),
        failing_encoded=int(np.isin(goal_set.tests, study.split.failing).sum()),
        soft_goals=int(soft.sum()),
        soft_met=int((solution.met & soft).sum()),
        fallback_pairs=solution.fallback_pairs,
        disagreements=int(broken.size),
        changes=changes,
        accuracy=accuracy,
        time_s=time.perf_counter() - start,
        network=network,
    )


# ------------------------------------------------------------------------------------------- all metrics


def neuron_sets(study: RepairStudy, settings: RepairSettings) -> list[tuple[str, np.ndarray]]:
    """(label, neurons) per metric and per random draw, in the order of `settings.metrics`."""
    count = min(settings.neurons, study.target.n_neurons)
    rng = np.random.default_rng(settings.seed)
    sets = []
    for metric in settings.metrics:
        if metric == RANDOM:
            for run in range(settings.random_runs):
                sets.append(
                    (f"{RANDOM}#{run + 1}", np.sort(random_ranking(study.target.n_neurons, rng)[:count]))
                )
        else:
            sets.append((metric, np.sort(ranking(suspiciousness(metric, study.spectrum))[:count])))
    return sets


def _select(outcomes: list[RepairOutcome], before: Accuracy) -> RepairOutcome | None:
    """The repair to write: the best repair-set accuracy among the metrics' repairs (the validation
    set takes no part in the choice), then the least change, then the metrics' order; random draws
    only when no metric's repair helps. A repair that does not raise the repair-set accuracy is
    never written (a time-limited MILP can return one that lowers it)."""
    improving = [o for o in outcomes if o.changed and o.accuracy.repair > before.repair]
    candidates = [o for o in improving if not o.metric.startswith(RANDOM)] or improving
    if not candidates:
        return None
    return min(candidates, key=lambda o: (-o.accuracy.repair, o.total_change, outcomes.index(o)))


def run_repair(
    study: RepairStudy, settings: RepairSettings, progress: bool = True, journal: Journal | None = None
) -> RepairReport:
    """Every metric's repair (and the random draws); identical neuron sets are solved once. With a
    journal, every solved set is appended to it, and sets it already holds are not solved again."""
    start = time.perf_counter()
    sets = neuron_sets(study, settings)
    finished = {entry["key"]: entry["record"] for entry in journal.resume()} if journal else {}
    solved: dict[tuple[int, ...], RepairOutcome] = {}
    outcomes, resumed = [], 0
    for label, chosen in tqdm(sets, desc="repair", unit="MILP", disable=not progress, leave=False):
        key = tuple(int(n) for n in chosen)
        if key not in solved:
            entry_key = journal_key(study, settings, chosen)
            if entry_key in finished:
                solved[key] = replace(outcome_from_record(study, finished[entry_key]), metric=label)
                resumed += 1
            else:
                solved[key] = repair_neurons(study, chosen, label, settings)
                if journal is not None:
                    journal.append({"key": entry_key, "record": outcome_record(solved[key])})
        outcome = solved[key]
        outcomes.append(outcome if outcome.metric == label else _relabelled(outcome, label))
    notes = [f"{resumed} MILPs taken from the journal (--resume)"] if resumed else []
    return RepairReport(
        study,
        settings,
        tuple(outcomes),
        _select(outcomes, study.before),
        time.perf_counter() - start,
        tuple(notes),
    )


def _relabelled(outcome: RepairOutcome, metric: str) -> RepairOutcome:
    return replace(outcome, metric=metric, same_as=outcome.metric)
