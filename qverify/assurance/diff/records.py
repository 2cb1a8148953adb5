"""Typed results of `qverify diff`: disagreement-inducing inputs (DIIs), what one method found on one
seed, the metrics per method, proof-mode verdicts per region, and their JSON form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Dii:
    """One disagreement-inducing input (raw units) with both implementations' outputs and, for the
    distortion search, the parameter vector that made it from its seed (DiverGet's transformation
    vector); `query` is its index among the seed's generated inputs (0-based)."""

    seed_index: int
    query: int
    x: np.ndarray
    reference: np.ndarray
    candidate: np.ndarray
    params: np.ndarray | None = None

    @property
    def labels(self) -> tuple[int, int]:
        return int(np.argmax(self.reference)), int(np.argmax(self.candidate))

    def to_json(self) -> dict:
        """Exact: arrays as float.hex strings (a resumed run must find the very same inputs)."""
        data = {"seed_index": self.seed_index, "query": self.query}
        for key in ("x", "reference", "candidate", "params"):
            value = getattr(self, key)
            if value is not None:
                data[key] = [float(v).hex() for v in np.asarray(value, dtype=np.float64)]
        return data

    @classmethod
    def from_json(cls, data: dict) -> Dii:
        arrays = {
            key: np.array([float.fromhex(v) for v in data[key]], dtype=np.float64)
            for key in ("x", "reference", "candidate", "params")
            if key in data
        }
        return cls(int(data["seed_index"]), int(data["query"]), **arrays)


@dataclass(frozen=True, slots=True)
class SeedOutcome:
    """One method on one seed: inputs generated, distinct DIIs found, when the first came (seconds and
    queries; None when none did), how many generated inputs were valid (PSNR at least the threshold),
    and the first DIIs kept (at most `keep` of them)."""

    seed_index: int
    queries: int
    dii: int
    first_s: float | None
    first_query: int | None
    valid: int
    kept: tuple[Dii, ...] = ()
    seconds: float = 0.0  # spent on this seed

    @property
    def success(self) -> bool:
        return self.dii > 0

    @property
    def rate(self) -> float:
        return self.dii / self.queries if self.queries else 0.0

    def to_json(self) -> dict:
        data = {
            k: getattr(self, k) for k in ("seed_index", "queries", "dii", "first_s", "first_query", "valid")
        }
        return data | {"seconds": self.seconds, "kept": [dii.to_json() for dii in self.kept]}

    @classmethod
    def from_json(cls, data: dict) -> SeedOutcome:
        kept = tuple(Dii.from_json(item) for item in data["kept"])
        fields = ("seed_index", "queries", "dii", "first_s", "first_query", "valid", "seconds")
        return cls(**{key: data[key] for key in fields}, kept=kept)


@dataclass(frozen=True, slots=True)
class MethodSummary:
    """The papers' metrics of one method over every seed: #DII (distinct), DiR (mean over seeds of
    DIIs / generated inputs), SR (share of seeds with a DII), time and queries to the first DII (median
    over the seeds that had one), diversity (mean pairwise RMS distance between a seed's kept DIIs, as a
    fraction of the input range, averaged over seeds with two or more), distinct (reference, candidate)
    label pairs, VR (share of generated inputs with PSNR > the threshold), and the wall time."""

    method: str
    seeds: int
    queries: int
    dii: int
    dir: float
    sr: float
    first_s: float | None
    first_queries: float | None
    diversity: float | None
    label_pairs: int
    vr: float
    wall_s: float

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class MethodRun:
    summary: MethodSummary
    outcomes: tuple[SeedOutcome, ...]
    family: str | None = None  # a distortion search restricted to one family


@dataclass(frozen=True, slots=True)
class RegionVerdict:
    """Proof mode on one region: SAFE / UNSAFE / UNKNOWN / ERROR, the back end, its time, the replayed
    disagreement (raw input and both implementations' outputs from the compiled C) for UNSAFE."""

    index: int
    seed_index: int
    region: str
    status: str
    backend: str
    seconds: float
    reason: str = ""
    x: np.ndarray | None = None
    reference: np.ndarray | None = None
    candidate: np.ndarray | None = None
    method: str = ""  # what decided: sampling, bisection, stability, pair harness

    @classmethod
    def from_json(cls, data: dict) -> RegionVerdict:
        arrays = {
            key: np.array(data[key], dtype=np.float64)
            for key in ("x", "reference", "candidate")
            if key in data
        }
        fields = ("index", "seed_index", "region", "status", "backend", "seconds", "reason", "method")
        return cls(**{key: data[key] for key in fields if key in data}, **arrays)

    def to_json(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if not isinstance(v, np.ndarray) and v is not None}
        for key in ("x", "reference", "candidate"):
            value = getattr(self, key)
            if value is not None:
                data[key] = [float(v) for v in value]
        return data


@dataclass(frozen=True, slots=True)
class DiffStudy:
    """Everything one `qverify diff` run found."""

    pair: str
    criterion: str
    domain: tuple[float, float]
    image_shape: tuple[int, ...] | None
    seeds: np.ndarray  # raw seeds (count, features)
    seed_labels: np.ndarray  # the label both implementations give each seed
    settings: dict
    runs: tuple[MethodRun, ...] = ()
    regions: tuple[RegionVerdict, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    input_box: tuple[np.ndarray, np.ndarray] | None = None  # unit coordinates: x_raw = min + u (max - min)

    def to_raw(self, x: np.ndarray) -> np.ndarray:
        if self.input_box is None:
            return np.asarray(x, dtype=np.float64)
        return self.input_box[0] + np.asarray(x, dtype=np.float64) * (self.input_box[1] - self.input_box[0])

    def to_json(self) -> dict:
        return {
            "pair": self.pair,
            "criterion": self.criterion,
            "domain": list(self.domain),
            "image_shape": list(self.image_shape) if self.image_shape else None,
            "seeds": len(self.seeds),
            "settings": self.settings,
            "methods": [
                {**run.summary.to_json(), "family": run.family,
                 "per_seed": [{"seed": o.seed_index, "queries": o.queries, "dii": o.dii, "first_s": o.first_s,
                               "first_query": o.first_query, "valid": o.valid, "seconds": o.seconds}
                              for o in run.outcomes]}
                for run in self.runs
            ],
            "regions": [region.to_json() for region in self.regions],
            "notes": list(self.notes),
        }  # fmt: skip
