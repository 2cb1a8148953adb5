"""Network level: which ReLU to split: a cheap score picks candidates, a batch of back-substitutions
chooses among them (FSB, filtered smart branching, De Palma et al. 2021).

BaBSR's score (|the open atoms' coefficient on the neuron's output| x its triangle's intercept)
estimates what a split saves at that one neuron and favours the last hidden layer, whose
coefficients are largest, although a split there helps no other neuron. FSB takes the best
`CANDIDATES` neurons by that score over all layers and bounds both children of each: one
back-substitution of the open clauses' bottleneck atoms with the node's optimised lower slopes and
bound multipliers and the candidate's phase fixed (its relaxation exact: h = z or h = 0), every
candidate and phase as one batch. The neuron whose worse child is best wins. The children's bounds
here are estimates that choose a split (no rounding charged, intermediate bounds not recomputed),
never a verdict: the node's children are bounded soundly by the search.
"""

from __future__ import annotations

import numpy as np

from qverify.engine.netlevel.activations import relu_relaxation
from qverify.engine.netlevel.bounds import Bounds
from qverify.engine.netlevel.model import NetModel

CANDIDATES = 6  # neurons by BaBSR's score whose children are bounded
PER_LAYER = 2  # and the best of each layer by that score


def babsr_scores(
    model: NetModel,
    bounds: Bounds,
    phases: list[np.ndarray],
    lam_post: dict[int, np.ndarray],
    rows: list[int],
) -> dict[int, np.ndarray]:
    """Per hidden ReLU layer, BaBSR's score of every open, unsplit neuron (-1 elsewhere)."""
    scores = {}
    for k, layer in enumerate(model.layers):
        if not layer.relu or k not in lam_post:
            continue
        lo, hi = bounds.pre_lo[k], bounds.pre_hi[k]
        unstable = (lo < 0) & (hi > 0) & (phases[k] == 0)
        if not unstable.any():
            continue
        intercept = np.where(unstable, -lo * hi / np.where(unstable, hi - lo, 1.0), 0.0)
        score = np.abs(lam_post[k][rows]).sum(axis=0) * intercept
        scores[k] = np.where(unstable, score + 1e-30, -1.0)
    return scores


def choose_relu(
    model: NetModel,
    bounds: Bounds,
    phases: list[np.ndarray],
    lam_post: dict[int, np.ndarray],
    rows: list[int],
    coefficients: np.ndarray,
    constants: np.ndarray,
    xl: np.ndarray,
    xu: np.ndarray,
    alphas: dict[int, np.ndarray] | None,
    nus: dict[int, np.ndarray] | None,
) -> tuple[int, int] | None:
    """The (layer, neuron) to split (module docstring), or None when every phase is fixed. `rows`:
    the open clauses' bottleneck atoms (their `coefficients` on the outputs and `constants`);
    `alphas`/`nus`: the node's optimised parameters per atom row (all atoms), when it has them."""
    scores = babsr_scores(model, bounds, phases, lam_post, rows)
    if not scores:
        return None
    flat = [(float(score[j]), k, int(j)) for k, score in scores.items() for j in np.flatnonzero(score > 0)]
    flat.sort(reverse=True)
    candidates = [(k, j) for _, k, j in flat[:CANDIDATES]]
    for k, score in scores.items():  # and each layer's best few: BaBSR undervalues early layers
        for j in np.argsort(-score)[:PER_LAYER]:
            if score[j] > 0 and (k, int(j)) not in candidates:
                candidates.append((k, int(j)))
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    children = _children_bounds(model, bounds, candidates, rows, coefficients, constants, xl, xu, alphas, nus)
    worse = np.minimum(children[0::2], children[1::2])
    return candidates[int(np.argmax(worse))]


def _children_bounds(
    model, bounds, candidates, rows, coefficients, constants, xl, xu, alphas, nus
) -> np.ndarray:
    """Per candidate and phase (active, inactive, interleaved), the worst of the rows' bounds with
    that phase fixed: a batch of back-substitutions in plain float32 (an estimate that only
    chooses: half the memory traffic and products of float64, 1e-7 relative where the candidates'
    scores differ by far more).

    Above a candidate's layer its children's back-substitution is the node's own (nothing fixed
    yet), so it is computed once: a base entry walks the whole network, and each candidate's two
    children join the batch at its layer as copies of the base's state there (coefficients pending
    per producer, on the input, the constant). A walk costs the layers from the candidate's down,
    where each child copied the whole walk before (FSB's candidates sit in every layer: BaBSR's best
    mostly in the last hidden one, `PER_LAYER` in each)."""
    last = len(model.layers) - 1
    by_layer: dict[int, list[tuple[int, int]]] = {}
    for index, (k, j) in enumerate(candidates):
        by_layer.setdefault(k, []).append((index, j))
    # entry 0: the base; entry e > 0: candidate owner[e] // 2, phase owner[e] % 2 (0 active, 1 inactive)
    owner = [-1]
    f32 = np.float32
    lam = coefficients[rows][None].astype(f32)  # (entries, rows, outputs)
    const = np.zeros((1, len(rows)), dtype=f32)
    pending: dict[int, np.ndarray] = {}  # post-activation coefficients per node (the wiring's sums)
    lam_input = np.zeros((1, len(rows), len(xl)), dtype=f32)
    for depth in range(last, -1, -1):
        if depth != last:
            if depth not in pending:
                continue
            lam = pending.pop(depth)
            if model.layers[depth].relu:
                joining = by_layer.get(depth, ())
                first = len(owner)  # the joining children's first entry
                if joining:  # copies of the base (entry 0) for each joining child
                    base = np.zeros(2 * len(joining), dtype=np.intp)
                    lam = np.concatenate([lam, lam[base]])
                    pending = {key: np.concatenate([part, part[base]]) for key, part in pending.items()}
                    lam_input = np.concatenate([lam_input, lam_input[base]])
                    const = np.concatenate([const, const[base]])
                    owner.extend(2 * index + phase for index, _ in joining for phase in (0, 1))
                count = len(owner)
                lo = np.broadcast_to(bounds.pre_lo[depth].astype(f32), (count, 1, len(bounds.pre_lo[depth])))
                lo = lo.copy()
                hi = np.broadcast_to(bounds.pre_hi[depth].astype(f32), lo.shape).copy()
                for position, (_, j) in enumerate(joining):
                    lo[first + 2 * position, 0, j] = 0.0  # active: z >= 0, h = z
                    hi[first + 2 * position + 1, 0, j] = 0.0  # inactive: z <= 0, h = 0
                alpha = None
                if alphas is not None and depth in alphas:
                    alpha = alphas[depth][rows][None].astype(f32)
                a, s, t = relu_relaxation(lo, hi, alpha)
                positive, negative = np.maximum(lam, 0.0), np.minimum(lam, 0.0)
                const = const + (negative * t).sum(axis=-1)
                lam = positive * a + negative * s
        layer = model.layers[depth]
        if nus is not None and depth in nus:
            nu = nus[depth][rows][None].astype(f32)
            lo, hi = bounds.pre_lo[depth].astype(f32), bounds.pre_hi[depth].astype(f32)
            const = const - (np.maximum(nu, 0.0) * hi - np.maximum(-nu, 0.0) * lo).sum(axis=-1)
            lam = lam + nu
        centre = (layer.bias + (bounds.err_lo[depth] + bounds.err_hi[depth]) / 2).astype(f32)
        radius = ((bounds.err_hi[depth] - bounds.err_lo[depth]) / 2).astype(f32)
        const = const + lam @ centre - np.abs(lam) @ radius
        lam = layer.op.backward_estimate(lam)
        for producer, part in model.split(depth, lam):
            if producer < 0:
                lam_input = lam_input + part
            else:
                pending[producer] = pending[producer] + part if producer in pending else part
    xl, xu = np.asarray(xl, dtype=f32), np.asarray(xu, dtype=f32)
    lower = (np.maximum(lam_input, 0.0) * xl).sum(axis=-1) + (np.minimum(lam_input, 0.0) * xu).sum(axis=-1)
    worst = (lower + const + constants[rows]).min(axis=1)
    children = np.full(2 * len(candidates), worst[0])  # (a layer no walk reached: the node's own)
    children[owner[1:]] = worst[1:]
    return children
