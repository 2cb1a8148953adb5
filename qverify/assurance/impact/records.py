"""The typed records of an impact study, and their JSON form (`impact.json`).

A study is a list of cells (one family at one intensity, plus the clean data set); each cell holds
the reference's scores and one comparison per candidate implementation. Every number is an
`Estimate`: the value on the whole data set and a bootstrap confidence interval.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any

CLEAN = "clean"


@dataclass(frozen=True, slots=True)
class Estimate:
    """A metric on the whole data set and its bootstrap confidence interval [low, high]."""

    value: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class Scores:
    """One implementation's quality on one cell (top-5 is None with fewer than 5 classes)."""

    top1: Estimate
    top5: Estimate | None
    f1: Estimate


@dataclass(frozen=True, slots=True)
class Comparison:
    """A candidate implementation against the reference on one cell.

    kl: mean over images of KL(P_reference || P_candidate); kl_reverse: KL(P_candidate ||
    P_reference); flip_rate: share of images whose top-1 classes differ; top1_drop: reference top-1
    minus candidate top-1 (paired). `nonfinite`: images whose outputs (either side) hold an infinity
    or NaN (a half overflow): left out of the KL means."""

    candidate: str
    scores: Scores
    kl: Estimate
    kl_reverse: Estimate
    flip_rate: Estimate
    top1_drop: Estimate
    nonfinite: int = 0


@dataclass(frozen=True, slots=True)
class Cell:
    """One family at one intensity (`family` "clean", `intensity` None: the data set as given)."""

    family: str
    intensity: float | None
    reference: Scores
    comparisons: tuple[Comparison, ...]


@dataclass(frozen=True, slots=True)
class FamilyGridInfo:
    name: str
    parameter: str
    unit: str
    neutral: float
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class ImplementationInfo:
    label: str
    network: str  # the model file (or the network's name)


@dataclass(frozen=True, slots=True)
class Throughput:
    """Images simulated per second by one implementation (simulation only: no perturbation, no metrics)."""

    label: str
    images: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else math.inf


@dataclass(frozen=True, slots=True)
class ImpactStudy:
    """Everything `impact.json` holds: the setting, the cells, the throughput and the wall time."""

    reference: ImplementationInfo
    candidates: tuple[ImplementationInfo, ...]
    dataset: str
    images: int
    classes: int
    domain: tuple[float, float]
    image_shape: tuple[int, ...] | None
    seed: int
    resamples: int
    confidence: float
    temperature: float
    families: tuple[FamilyGridInfo, ...]
    cells: tuple[Cell, ...]
    throughput: tuple[Throughput, ...]
    wall_s: float

    def cell(self, family: str, intensity: float | None) -> Cell:
        for cell in self.cells:
            if cell.family == family and cell.intensity == intensity:
                return cell
        raise KeyError((family, intensity))

    def family_cells(self, family: str) -> list[Cell]:
        return [cell for cell in self.cells if cell.family == family]


def plain(value: Any) -> Any:
    """JSON-ready: dataclasses to dicts, tuples to lists, NaN and infinities to None."""
    if dataclasses.is_dataclass(value):
        out = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, Throughput):
            out["per_second"] = plain(value.per_second)
        return out
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def study_json(study: ImpactStudy) -> str:
    """The study as JSON text (NaN and infinities as null, so any JSON reader takes it)."""
    return json.dumps(plain(study), indent=1, allow_nan=False) + "\n"
