"""The repair journal: one JSON line per solved MILP (`qverify.suites.journal.Journal`), so a run
stopped during its MILPs resumes with `--resume` without solving again what it finished.

The key covers everything a MILP's answer depends on: both networks' digests, the implementation
options, the repaired layer, the chosen neurons, the settings that shape the MILP (margin, tests,
changes, time limit) and a digest of the repair set. An entry holds the outcome as the report
prints it, including every changed integer, from which the repaired network is rebuilt exactly.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

import numpy as np

from qverify.assurance.repair.records import (
    Accuracy,
    RepairOutcome,
    RepairSettings,
    RepairStudy,
    WeightChange,
)
from qverify.assurance.repair.target import repaired_network


def journal_key(study: RepairStudy, settings: RepairSettings, chosen: np.ndarray) -> str:
    implementation = study.target.implementation
    sha = hashlib.sha256()
    sha.update(np.ascontiguousarray(study.repair_x).tobytes())
    sha.update(np.ascontiguousarray(study.repair_y).tobytes())
    parts = [
        study.reference.network.digest(),
        implementation.network.digest(),
        implementation.qnet.options.key(),  # type: ignore[union-attr]
        str(study.target.index),
        ",".join(str(int(n)) for n in chosen),
        (
            f"margin={settings.margin} tests={settings.max_tests} delta={settings.max_delta} "
            f"limit={settings.time_limit_s:g}"
        ),
        sha.hexdigest()[:16],
    ]
    return "|".join(parts)


def outcome_record(outcome: RepairOutcome) -> dict[str, Any]:
    """Everything of an outcome but its network (rebuilt from the changes)."""
    record = {
        name: getattr(outcome, name) for name in RepairOutcome.__dataclass_fields__ if name != "network"
    }
    record["changes"] = [asdict(change) for change in outcome.changes]
    record["accuracy"] = asdict(outcome.accuracy)
    return json.loads(json.dumps(record))


def outcome_from_record(study: RepairStudy, record: dict[str, Any]) -> RepairOutcome:
    """The journalled outcome, with its repaired network rebuilt from the changed integers."""
    fields = dict(record)
    changes = tuple(WeightChange(**change) for change in fields.pop("changes"))
    accuracy = Accuracy(**fields.pop("accuracy"))
    neurons = tuple(int(n) for n in fields.pop("neurons"))
    milp_size = tuple(int(n) for n in fields.pop("milp_size"))
    network = None
    if changes:
        chosen = np.array(neurons, dtype=np.int64)
        n_in = study.target.qlayer.n_in
        weight_delta = np.zeros((chosen.size, n_in), dtype=np.int64)
        bias_delta = np.zeros(chosen.size, dtype=np.int64)
        position = {neuron: k for k, neuron in enumerate(neurons)}
        for change in changes:
            if change.input < 0:
                bias_delta[position[change.neuron]] = change.new - change.old
            else:
                weight_delta[position[change.neuron], change.input] = change.new - change.old
        network = repaired_network(study.target, chosen, weight_delta, bias_delta)
    return RepairOutcome(
        **fields, neurons=neurons, milp_size=milp_size, changes=changes, accuracy=accuracy, network=network
    )
