"""Run an impact study: every family at every intensity, the same perturbed images through the
reference and each candidate implementation, metrics per cell, throughput per implementation.

Determinism: the perturbation of a cell draws from a generator keyed by (seed, family name,
intensity) and its bootstrap from another keyed the same way, so a cell's numbers depend on the
seed and on nothing else in the run (adding a family or a grid point changes no other cell), and
every implementation sees the same perturbed images and the same resamples.
"""

from __future__ import annotations

import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from qverify.assurance.impact.inputs import FamilyGrid
from qverify.assurance.impact.journal import cell_from_record, cell_key, cell_record, setting_key
from qverify.assurance.impact.metrics import Bootstrap, compare, scores
from qverify.assurance.impact.records import (
    CLEAN,
    Cell,
    ImpactStudy,
    ImplementationInfo,
    Throughput,
)
from qverify.assurance.implementations import Implementation, ImplementationPair
from qverify.data import Dataset
from qverify.data.transforms import Canvas
from qverify.errors import InputError
from qverify.suites.journal import Journal

PERTURBATION_STREAM, BOOTSTRAP_STREAM = 0, 1
BATCH_IMAGES = 8192  # cells are simulated together up to this many images (fewer calls, same outputs)
SLICE_IMAGES = 2048  # and go through the implementations this many at a time (the bar moves within a cell)


@dataclass(frozen=True, slots=True)
class StudySettings:
    """How the study samples and summarises: seed, bootstrap resamples and confidence, softmax
    temperature, and whether to show a progress bar."""

    seed: int = 0
    resamples: int = 1000
    confidence: float = 0.95
    temperature: float = 1.0
    progress: bool = True

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise InputError(f"--seed {self.seed}: must be >= 0")
        if self.resamples < 0:
            raise InputError(f"--resamples {self.resamples}: must be >= 0")
        if not 0.0 < self.confidence < 1.0:
            raise InputError(f"--confidence {self.confidence}: must lie strictly between 0 and 1")
        if not (self.temperature > 0 and np.isfinite(self.temperature)):
            raise InputError(f"--temperature {self.temperature}: must be a positive number")


def cell_rng(seed: int, family: str, intensity: float | None, stream: int) -> np.random.Generator:
    """The generator of one cell and stream (perturbation or bootstrap)."""
    key = zlib.crc32(repr(None if intensity is None else float(intensity)).encode())
    return np.random.default_rng([seed, zlib.crc32(family.encode()), key, stream])


def _describe(implementation: Implementation) -> ImplementationInfo:
    net = implementation.network
    return ImplementationInfo(implementation.label, net.source or net.name)


class _Timed:
    """Runs implementations and keeps the simulation time and image count of each."""

    def __init__(self, implementations: Sequence[Implementation], to_logits: Callable) -> None:
        self.implementations = implementations
        self.to_logits = to_logits
        self.seconds = [0.0] * len(implementations)
        self.images = 0

    def run(
        self, x_norm: np.ndarray, progress: Callable[[int], None] = lambda done: None
    ) -> list[np.ndarray]:
        """Every implementation's logits on `x_norm`, SLICE_IMAGES at a time (`progress(images
        done)` after each slice: a CIFAR-10 cell of 10,000 images takes minutes)."""
        outputs: list[list[np.ndarray]] = [[] for _ in self.implementations]
        for first in range(0, len(x_norm), SLICE_IMAGES):
            part = x_norm[first : first + SLICE_IMAGES]
            for index, implementation in enumerate(self.implementations):
                start = time.perf_counter()
                outputs[index].append(self.to_logits(implementation.run(part).outputs))
                self.seconds[index] += time.perf_counter() - start
            self.images += len(part)
            progress(first + len(part))
        return [np.concatenate(parts) for parts in outputs]

    def throughput(self) -> tuple[Throughput, ...]:
        return tuple(
            Throughput(implementation.label, self.images, seconds)
            for implementation, seconds in zip(self.implementations, self.seconds)
        )


def _cell_name(grid: FamilyGrid | None, value: float | None) -> str:
    return CLEAN if grid is None else f"{grid.family.name} {value:g}"


def _family_value(grid: FamilyGrid | None, value: float | None) -> tuple[str, float | None]:
    return (CLEAN, None) if grid is None else (grid.family.name, value)


def _journalled(journal: Journal | None, keys: Sequence[str]) -> dict[str, Cell]:
    """The cells among `keys` that the journal holds (a resumed study), by key."""
    finished = {entry["key"]: entry["record"] for entry in journal.resume()} if journal else {}
    return {key: cell_from_record(finished[key]) for key in keys if key in finished}


def _cells_named(group: Sequence[tuple[FamilyGrid | None, float | None]]) -> str:
    """The cells of a batch, for the progress bar: `awgn 0.1` or `awgn 0.1 .. blur 1.5` (in order)."""
    first, last = _cell_name(*group[0]), _cell_name(*group[-1])
    return first if len(group) == 1 else f"{first} .. {last} ({len(group)} cells)"


def _perturbed(
    x: np.ndarray, grid: FamilyGrid | None, value: float | None, seed: int, canvas: Canvas
) -> np.ndarray:
    if grid is None:
        return x
    return grid.family(x, value, cell_rng(seed, grid.family.name, value, PERTURBATION_STREAM), canvas)


def _cell(
    grid: FamilyGrid | None,
    value: float | None,
    labels: np.ndarray,
    reference_logits: np.ndarray,
    candidates: Sequence[Implementation],
    candidate_logits: Sequence[np.ndarray],
    settings: StudySettings,
) -> Cell:
    """One cell's metrics from the outputs of the reference and of each candidate."""
    name = CLEAN if grid is None else grid.family.name
    boot = Bootstrap.draw(
        len(labels),
        settings.resamples,
        cell_rng(settings.seed, name, value, BOOTSTRAP_STREAM),
        settings.confidence,
    )
    comparisons = tuple(
        compare(candidate.label, labels, reference_logits, logits, boot, settings.temperature)
        for candidate, logits in zip(candidates, candidate_logits)
    )
    return Cell(name, value, scores(labels, reference_logits, boot), comparisons)


def run_study(
    reference: Implementation,
    candidates: Sequence[Implementation],
    data: Dataset,
    canvas: Canvas,
    grids: Sequence[FamilyGrid],
    settings: StudySettings,
    normalise: Callable[[np.ndarray], np.ndarray],
    journal: Journal | None = None,
) -> ImpactStudy:
    """The study of `candidates` against `reference` on `data` (raw units, labelled; checked by the
    caller). `normalise` maps raw inputs to the networks' normalised inputs; the outputs are read as
    logits after the reference network's output normalisation (if it has one). With a `journal`,
    every finished cell is appended to it and the cells it already holds (same implementations,
    data, seed and bootstrap: `journal.setting_key`) are taken from it, not run again; the
    throughput then counts the cells this run simulated."""
    for candidate in candidates:
        ImplementationPair(reference, candidate)  # they must fit together
    if not candidates:
        raise InputError("no candidate implementation to compare with the reference")
    started = time.perf_counter()
    output_norm = reference.network.output_norm
    to_logits = output_norm.apply if output_norm is not None else (lambda y: y)
    timed = _Timed([reference, *candidates], to_logits)
    labels = np.asarray(data.y)
    grid_cells: list[tuple[FamilyGrid | None, float | None]] = [(None, None)]
    grid_cells += [(grid, value) for grid in grids for value in grid.values]
    setting = setting_key(
        [reference, *candidates], data, canvas, settings.seed, settings.resamples, settings.confidence,
        settings.temperature,
    )  # fmt: skip
    order = [cell_key(setting, *_family_value(grid, value)) for grid, value in grid_cells]
    cells = _journalled(journal, order)
    todo = [(key, grid, value) for key, (grid, value) in zip(order, grid_cells) if key not in cells]
    per_batch = max(1, BATCH_IMAGES // data.size)
    bar = tqdm(total=len(order), initial=len(cells), desc="impact", unit="cell", disable=not settings.progress,
               file=sys.stderr, dynamic_ncols=True)  # fmt: skip
    try:
        for start in range(0, len(todo), per_batch):
            group = todo[start : start + per_batch]
            named = _cells_named([(grid, value) for _, grid, value in group])
            bar.set_postfix_str(f"perturbing {named}")
            batch = np.concatenate(
                [_perturbed(data.x, grid, value, settings.seed, canvas) for _, grid, value in group]
            )

            def simulated(done: int, named: str = named, total: int = len(batch)) -> None:
                bar.set_postfix_str(f"simulating {named}: {done:,}/{total:,} images")

            outputs = timed.run(normalise(batch), simulated)
            for index, (key, grid, value) in enumerate(group):
                bar.set_postfix_str(f"metrics of {_cell_name(grid, value)}")  # the bootstrap: the cell's time
                part = slice(index * data.size, (index + 1) * data.size)
                reference_logits, *candidate_logits = (logits[part] for logits in outputs)
                cell = _cell(grid, value, labels, reference_logits, candidates, candidate_logits, settings)
                cells[key] = cell
                if journal is not None:
                    journal.append({"key": key, "record": cell_record(cell)})
                bar.update()
    finally:
        bar.close()
    return ImpactStudy(
        reference=_describe(reference),
        candidates=tuple(_describe(candidate) for candidate in candidates),
        dataset=data.name,
        images=data.size,
        classes=reference.n_outputs,
        domain=(canvas.lo, canvas.hi),
        image_shape=canvas.shape,
        seed=settings.seed,
        resamples=settings.resamples,
        confidence=settings.confidence,
        temperature=settings.temperature,
        families=tuple(grid.info() for grid in grids),
        cells=tuple(cells[key] for key in order),
        throughput=timed.throughput(),
        wall_s=time.perf_counter() - started,
    )
