"""Where the seeds come from and in which coordinates the searches work.

With a data set, the searches work in its raw units (its canvas: clip range and image shape, as
`qverify impact` resolves them) and the seeds are its samples. Without one, seeds are drawn uniformly:
in `--domain` when given, else in the network's NNet input box -- then in *unit coordinates*
u in [0, 1]^n, x = min + u (max - min), because inputs such as ACAS Xu's have a different range each
and a canvas has one range; an L-inf radius or a brightness offset is then a fraction of each input's
own range.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qverify.assurance.impact.inputs import check_dataset, resolve_canvas
from qverify.assurance.implementations import normalised_inputs
from qverify.data import load_dataset
from qverify.data.transforms import Canvas
from qverify.errors import InputError
from qverify.network import Network

DRAWN_PER_SEED = 10  # uniform draws per seed asked for: seeds must be inputs both implementations agree on


@dataclass(frozen=True, slots=True, eq=False)
class SeedSource:
    """Candidate seeds (search coordinates), their labels if known, the canvas, the map from search
    coordinates to the networks' normalised inputs, and the input box of unit coordinates (else None)."""

    name: str
    x: np.ndarray
    labels: np.ndarray | None
    canvas: Canvas
    normalise: Callable[[np.ndarray], np.ndarray]
    input_box: tuple[np.ndarray, np.ndarray] | None = None
    notes: tuple[str, ...] = ()

    def to_raw(self, x: np.ndarray) -> np.ndarray:
        """Search coordinates to the network's raw input units."""
        if self.input_box is None:
            return np.asarray(x, dtype=np.float64)
        low, high = self.input_box
        return low + np.asarray(x, dtype=np.float64) * (high - low)


def _network_box(net: Network) -> tuple[np.ndarray, np.ndarray] | None:
    norm = net.input_norm
    if norm is None or not (np.all(np.isfinite(norm.minimum)) and np.all(np.isfinite(norm.maximum))):
        return None
    if np.any(norm.maximum <= norm.minimum):
        return None
    return np.asarray(norm.minimum, dtype=np.float64), np.asarray(norm.maximum, dtype=np.float64)


def _check_domain(net: Network, domain: tuple[float, float]) -> None:
    """A --domain to draw seeds in must lie in the network's input box when it has one: outside it
    the network clips every input to the boundary, so regions there would be proved for inputs the
    network never sees as such (a data set outside the box is refused the same way)."""
    low, high = float(domain[0]), float(domain[1])
    if not low < high:
        raise InputError(f"--domain {low:g},{high:g}: LO must be below HI")
    box = _network_box(net)
    if box is not None and (np.any(low < box[0]) or np.any(high > box[1])):
        raise InputError(
            f"--domain {low:g},{high:g} leaves the network's input box [{box[0].min():g}, {box[1].max():g}] "
            "(its input minimum/maximum, where it clips): give a --domain inside it"
        )


def seed_source(
    net: Network,
    data_spec: str | None,
    domain: tuple[float, float] | None,
    image_shape: tuple[int, ...] | None,
    count: int,
    seed: int,
) -> SeedSource:
    """The seeds of a run (module docstring)."""
    if data_spec is not None:
        data = load_dataset(data_spec)
        check_dataset(data, net.n_inputs, net.n_outputs) if data.y is not None else data.check_inputs(
            net.n_inputs
        )
        canvas, origin = resolve_canvas(data, net, domain, image_shape)
        return SeedSource(data.name, data.x, data.y, canvas, lambda x: normalised_inputs(net, x),
                          notes=(f"input domain from {origin}",))  # fmt: skip
    rng = np.random.default_rng([seed, 11])
    shape = image_shape or net.image_shape
    draws = count * DRAWN_PER_SEED
    if domain is not None:
        _check_domain(net, domain)
        canvas = Canvas(float(domain[0]), float(domain[1]), shape)
        x = canvas.lo + rng.random((draws, net.n_inputs)) * canvas.width
        return SeedSource(f"uniform in [{canvas.lo:g}, {canvas.hi:g}]", x, None, canvas,
                          lambda v: normalised_inputs(net, v), notes=("seeds drawn uniformly in --domain",))  # fmt: skip
    box = _network_box(net)
    if box is None:
        raise InputError(
            "no seeds: give --data (seed inputs) or --domain LO,HI (the network has no finite input box)"
        )
    low, high = box
    canvas = Canvas(0.0, 1.0, shape)
    return SeedSource(
        "uniform in the network's input box",
        rng.random((draws, net.n_inputs)),
        None,
        canvas,
        lambda u: normalised_inputs(net, low + np.asarray(u) * (high - low)),
        input_box=box,
        notes=(("seeds drawn uniformly in the network's input box; searches work in unit coordinates "
               "u in [0, 1] per input (x = min + u (max - min)); diis.npz holds both"),),
    )  # fmt: skip
