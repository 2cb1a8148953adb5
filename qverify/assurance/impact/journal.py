"""The impact journal: one JSON line per finished cell (`qverify.suites.journal.Journal`), so a
study stopped mid-grid (a CIFAR-10 grid is hours of simulation) resumes with `--resume` without
running again the cells it finished.

A cell's numbers depend on the seed, the data, the implementations and the bootstrap settings, and
on nothing else in the run (`study` module docstring), so the key is exactly those: every
implementation's label and network digest, a digest of the data set, the canvas (domain, image
shape), seed, resamples, confidence, temperature, and the cell's family and intensity. An entry
holds the cell as `impact.json` prints it (NaN and infinities as null) and is read back into the
typed record.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from qverify.assurance.impact.records import Cell, Comparison, Estimate, Scores, plain
from qverify.assurance.implementations import Implementation
from qverify.data import Dataset
from qverify.data.transforms import Canvas


def setting_key(
    implementations: Sequence[Implementation],
    data: Dataset,
    canvas: Canvas,
    seed: int,
    resamples: int,
    confidence: float,
    temperature: float,
) -> str:
    """What every cell of one study shares in its key."""
    sha = hashlib.sha256()
    sha.update(np.ascontiguousarray(data.x).tobytes())
    sha.update(np.ascontiguousarray(data.y).tobytes())
    sides = ",".join(f"{side.label}:{side.network.digest()}" for side in implementations)
    return (
        f"{sides}|data={sha.hexdigest()[:16]}|domain={canvas.lo!r},{canvas.hi!r}|shape={canvas.shape}"
        f"|seed={seed}|resamples={resamples}|confidence={confidence!r}|temperature={temperature!r}"
    )


def cell_key(setting: str, family: str, intensity: float | None) -> str:
    return f"{setting}|{family}={None if intensity is None else repr(float(intensity))}"


def cell_record(cell: Cell) -> dict[str, Any]:
    """The cell as JSON values, with the `status` every journal record carries."""
    return {**json.loads(json.dumps(plain(cell), allow_nan=False)), "status": "finished"}


def _number(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _estimate(record: dict[str, Any] | None) -> Estimate | None:
    if record is None:
        return None
    return Estimate(_number(record["value"]), _number(record["low"]), _number(record["high"]))


def _scores(record: dict[str, Any]) -> Scores:
    return Scores(_estimate(record["top1"]), _estimate(record["top5"]), _estimate(record["f1"]))  # type: ignore[arg-type]


def cell_from_record(record: dict[str, Any]) -> Cell:
    """The journalled cell as the typed record (None back to NaN where a number was not finite)."""
    comparisons = tuple(
        Comparison(
            candidate=entry["candidate"],
            scores=_scores(entry["scores"]),
            kl=_estimate(entry["kl"]),  # type: ignore[arg-type]
            kl_reverse=_estimate(entry["kl_reverse"]),  # type: ignore[arg-type]
            flip_rate=_estimate(entry["flip_rate"]),  # type: ignore[arg-type]
            top1_drop=_estimate(entry["top1_drop"]),  # type: ignore[arg-type]
            nonfinite=int(entry["nonfinite"]),
        )
        for entry in record["comparisons"]
    )
    intensity = record["intensity"]
    return Cell(
        record["family"],
        None if intensity is None else float(intensity),
        _scores(record["reference"]),
        comparisons,
    )
