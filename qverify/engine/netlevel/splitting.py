"""Network level: which input to bisect: the one that moves the open atoms' bounds most, relaxation included.

Bisecting input i of a box helps an atom's lower bound in two ways: the bound's own linear term
shrinks (|coefficient_i| x width_i), and the unstable ReLUs that input i drives become stable or
get tighter triangles, so the relaxation error the bound paid at them shrinks. The first term alone
(what a plain "largest coefficient x width" rule sees) ignores the second, which dominates on deep
networks: on ACAS Xu 1_4 phi1 at <16,16> it is the difference between ~100 and >10,000 boxes (the
scalar engine's `branch` measured the same; this is its rule at network level).

The relaxation error of an unstable ReLU j of layer k, as the atoms pay it, is its triangle's
intercept (-lo hi / (hi - lo)) times |the atoms' coefficient on its output|; it is shared among the
inputs in proportion to their influence on that neuron's pre-activation over the box:
|W_k| ... |W_1| through the units that are not dead (slope 0 once inactive), times each input's
width. Scores only choose a split, so their arithmetic need not be sound.
"""

from __future__ import annotations

import numpy as np

from qverify.engine.netlevel.model import NetModel


def input_split_scores(
    model: NetModel,
    pre_lo: list[np.ndarray],
    pre_hi: list[np.ndarray],
    phases: list[np.ndarray],
    lam_input: np.ndarray,
    lam_post: dict[int, np.ndarray],
    atoms: np.ndarray,
    width: np.ndarray,
) -> np.ndarray:
    """Per box and input, the estimated gain of bisecting that input for the open atoms' bounds
    (module docstring). Every array has a leading batch axis (B boxes): pre_lo[k] (B, n_k), lam_input
    (B, R, n), lam_post[k] (B, R, n_k), atoms (B, R) the weight of each atom (1 for the open
    clauses' bottleneck atoms, else 0), width (B, n); a box without open atoms scores its widths."""
    score = (np.abs(lam_input) * atoms[:, :, None]).sum(axis=1) * width
    if not any(layer.relu for layer in model.layers):
        # no ReLU phase (int8's staircases, identity layers): the relaxation term below is zero;
        # its influence arrays (B, neurons, inputs) were 150 MB at digits28-maxpool int8's first layer
        return np.where(atoms.any(axis=1)[:, None], score, width)
    inputs = width.shape[1]
    # per node (B, neurons, inputs): each input's reach into the node's neurons, starting from
    # diag(width) at the input (|W_1| diag(width) at a first layer); a node's input joins its
    # producers' reaches (a node's array is dropped after its last reader)
    reach_of_input = np.eye(inputs)[None] * width[:, None, :]
    last_reader = {p: k for k in range(len(model.layers)) for p in model.producers(k)}
    influences: dict[int, np.ndarray] = {}
    for k, layer in enumerate(model.layers):
        parts = [reach_of_input if p < 0 else influences[p] for p in model.producers(k)]
        incoming = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        for p in model.producers(k):
            if p >= 0 and last_reader[p] == k:
                del influences[p]
        influence = layer.op.magnitude(incoming.transpose(0, 2, 1)).transpose(0, 2, 1)
        if not model.reads_input_only(k):
            peak = influence.max(axis=(1, 2), keepdims=True)
            influence = influence / np.where(peak > 0, peak, 1.0)  # only the shares of each row matter
        if not layer.activation.elementwise:
            influence = _pooled(layer, influence)
        if not layer.relu:
            influences[k] = influence
            continue
        lo, hi = pre_lo[k], pre_hi[k]
        unstable = (lo < 0) & (hi > 0) & (phases[k] == 0)
        if unstable.any() and k in lam_post:
            intercept = np.where(unstable, -lo * hi / np.where(unstable, hi - lo, 1.0), 0.0)
            error = (np.abs(lam_post[k]) * atoms[:, :, None]).sum(axis=1) * intercept
            totals = influence.sum(axis=2, keepdims=True)
            shares = np.divide(influence, totals, out=np.zeros_like(influence), where=totals > 0)
            score = score + (error[:, None, :] @ shares)[:, 0, :]
        alive = (hi > 0) & (phases[k] >= 0)
        influence = influence * alive[:, :, None]
        influences[k] = influence
    return np.where(atoms.any(axis=1)[:, None], score, width)


def _pooled(layer, influence: np.ndarray) -> np.ndarray:
    """Influence on a pool's outputs: the largest of its window's."""
    return layer.activation.forward(influence.transpose(0, 2, 1)).transpose(0, 2, 1)
