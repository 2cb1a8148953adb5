"""The papers' metrics from per-seed outcomes: #DII, DiR, SR, time to the first DII, diversity, VR."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from qverify.assurance.diff.records import MethodSummary, SeedOutcome


def psnr(seed: np.ndarray, xs: np.ndarray, width: float) -> np.ndarray:
    """Peak signal-to-noise ratio (dB) of each row of `xs` against the seed, peak = the range width
    (inf for an unchanged input)."""
    mse = np.mean((xs - seed[None, :]) ** 2, axis=1)
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(width**2 / mse)


def diversity(xs: np.ndarray, width: float) -> float | None:
    """Mean pairwise RMS distance between rows, as a fraction of the range (None below two rows)."""
    if len(xs) < 2:
        return None
    diff = xs[:, None, :] - xs[None, :, :]
    rms = np.sqrt(np.mean(diff**2, axis=2))
    upper = np.triu_indices(len(xs), k=1)
    return float(np.mean(rms[upper]) / width)


def summarise(method: str, outcomes: Sequence[SeedOutcome], width: float, wall_s: float) -> MethodSummary:
    queries = sum(o.queries for o in outcomes)
    successes = [o for o in outcomes if o.success]
    spreads = [d for o in outcomes if (d := diversity(np.array([k.x for k in o.kept]), width)) is not None]
    pairs = {k.labels for o in outcomes for k in o.kept}
    return MethodSummary(
        method=method,
        seeds=len(outcomes),
        queries=queries,
        dii=sum(o.dii for o in outcomes),
        dir=float(np.mean([o.rate for o in outcomes])) if outcomes else 0.0,
        sr=len(successes) / len(outcomes) if outcomes else 0.0,
        first_s=float(np.median([o.first_s for o in successes])) if successes else None,
        first_queries=float(np.median([o.first_query + 1 for o in successes])) if successes else None,  # type: ignore[operator]
        diversity=float(np.mean(spreads)) if spreads else None,
        label_pairs=len(pairs),
        vr=sum(o.valid for o in outcomes) / queries if queries else 0.0,
        wall_s=wall_s,
    )
