"""Network level: a fixed-point layer's product roundings bounded per operand, from the operand's own words
(issue 45, item 1).

Per operation, a neuron's sum is z_o = b_o + sum_i R(w_oi h_i) (no partial sum leaving the word range:
`NetModel.error_terms`' related neurons), and the statement z = W h + b + e charges e_o as n_o
independent roundings of [d_lo, d_hi] each. A back-substitution row with coefficients lam on z reads

    lam . e = sum_i D_i(h_i),    D_i(v) = sum_o lam_o d_oi(v),    d_oi(v) = R(w_oi v) - w_oi v,

a sum of functions of one operand each: every consumer of operand i rounds a product of the same
word v. So lam . e >= sum_i min over the words v that h_i can take of D_i(v), exactly, where the
independent reading takes every product's worst rounding at once (measured on the 8x8 digits network
at <5,11>, `benchmarks/rounding_charge.py`: the first layer's charge on a margin 0.080 -> 0.027,
the second's 0.030 -> 0.014; a single product's worst case stays: the last layer's 0.007). The
rounding of a product of a word v known to be 0 (an inactive ReLU) is 0, of a product whose rounded
value cannot change over v's range it is exact there, and both fall out of the enumeration.

A table per layer and node (`rounding_table`) holds, for each operand whose range has at most
`OPERAND_RANGE_MAX` words, the exact rounding errors of its products with every consumer (integers
in int64: p = w v, R(p) by `quant.fixed.round_shift`, the error (R(p) 2^l - p) 2^-2l exact in
float64), within `OPERAND_TABLE_VALUES` entries a layer; wider operands keep the per-product
interval, and a layer whose table would cover less than `ENUMERATED_SHARE` of its live products
gets none (a 784-256 layer at <16,16>, operands of ~2,000 words: 8 of 784 operands fit, at the cost
of 4 million multiply-adds per row). `RoundingTable.lower` gives a sound lower bound of lam . e per row, the float64 dot
products' rounding charged (gamma_n of the magnitudes). Used by `bounds.backsubstitute` in
fixed-point implementation arithmetic, one node at a time, per-operation sums, dense and
convolution layers; elsewhere (wide sums round once, average pools, floats) the statement stays.

The layer that alone reads the network's input goes further (`RoundingTable.joint_lower`): there
h = x, and the row's whole dependence on an enumerated input, mu_i x_i + D_i(x_i) (mu = the rows'
input coefficients), is one function of one word, minimised over the input's own words -- D_i read
where the linear part pins x_i, not at its own worst word. For the input layer's own neurons that
is their exact minimum over the box (tests/test_rounding_charge.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.roundoff import TINY, gamma
from qverify.quant.fixed import round_shift

OPERAND_RANGE_MAX = 4096  # words of one operand enumerated at most
OPERAND_TABLE_VALUES = 1 << 22  # (words x consumers) entries of one layer's table at most
ENUMERATED_SHARE = 0.5  # a layer's table is built when it covers at least this share of its live products


CHUNK_VALUES = 1 << 22  # (rows x operands x words) products of one batched step at most


@dataclass(frozen=True, slots=True, eq=False)
class OperandGroup:
    """Enumerated operands with the same number of words and of consumers, stacked so that one
    batched product serves them all (a convolution's input pixels mostly share both)."""

    consumers: np.ndarray  # int64 (operands, consumers): each operand's consumer neurons
    errors: np.ndarray  # float64 (operands, words, consumers): the products' rounding errors, real units
    operands: np.ndarray  # int64 (operands,): each operand's index
    words: np.ndarray  # float64 (operands, words): each operand's words (its values / unit)

    def chunks(self, rows: int):
        """Slices of the operands such that a step's (rows, operands, words) stays within CHUNK_VALUES."""
        count, words = self.errors.shape[:2]
        step = max(1, CHUNK_VALUES // max(1, rows * words))
        return (slice(start, min(start + step, count)) for start in range(0, count, step))


@dataclass(frozen=True, slots=True, eq=False)
class RoundingTable:
    """One layer's product roundings per operand (module docstring). `groups`: the enumerated
    operands, their consumers and errors (words, consumers) in real units; `generic`: per neuron,
    how many of its live products keep the interval [d_lo, d_hi] (operands not enumerated)."""

    groups: tuple[OperandGroup, ...]
    generic: np.ndarray  # (n_out,) live products per neuron read through the interval
    d_lo: float
    d_hi: float
    widest: int  # the most consumers of one enumerated operand (the dot products' length)
    count: int  # enumerated operands

    def lower(self, lam: np.ndarray) -> np.ndarray:
        """A sound lower bound of lam . e for every row of lam (..., R, n_out) (the float64
        rounding of the dot products, the minima's sum and the interval part charged)."""
        return self._lower(lam)

    def joint_lower(
        self, lam: np.ndarray, mu: np.ndarray, unit: float, lo: np.ndarray, hi: np.ndarray
    ) -> np.ndarray:
        """For a layer that reads the network's input alone: a sound lower bound per row of
        mu . x + lam . e over the box [lo, hi] (real units), mu the rows' input coefficients
        (lam W): each enumerated input's min over its words v of mu_i v unit + D_i(v) together
        (where the linear part pins v, D_i is read there, not at its own worst word), the other
        inputs' linear minimum, the interval part as in `lower`; float64 rounding charged."""
        return self._lower(lam, (mu.reshape(-1, mu.shape[-1]), unit, lo, hi))

    def _lower(self, lam: np.ndarray, joint: tuple | None = None) -> np.ndarray:
        """`lower` (`joint` None) and `joint_lower` (`joint` = (mu, unit, lo, hi)) in one pass over
        the groups: per enumerated operand the minimum over its words of D_i(v) (+ mu_i v unit), a
        batched product per chunk of a group."""
        mu, unit, lo, hi = joint if joint is not None else (None, 0.0, None, None)
        shape = lam.shape[:-1]
        rows = lam.reshape(-1, lam.shape[-1])
        total = np.zeros(len(rows))
        reach = np.zeros(len(rows))  # sum of |lam_o| |d| (+ |mu_i| max|v|) over the dot products
        minima = np.zeros(len(rows))  # sum of |min_i|
        bound = max(abs(self.d_lo), abs(self.d_hi))
        columns = np.ascontiguousarray(rows.T)  # (n_out, rows): a gather of consumers is contiguous
        for group in self.groups:
            for part_of in group.chunks(len(rows)):
                part = columns[group.consumers[part_of]]  # (operands, consumers, rows)
                values = np.matmul(group.errors[part_of], part)  # (operands, words, rows)
                reach += np.abs(part).sum(axis=(0, 1)) * bound
                if mu is not None:
                    linear = mu[:, group.operands[part_of]].T  # (operands, rows)
                    reals = group.words[part_of] * unit  # (exact: words below 2^31 times a power of two)
                    values += reals[:, :, None] * linear[:, None, :]
                    reach += (np.abs(linear) * np.abs(reals).max(axis=1)[:, None]).sum(axis=0)
                least = values.min(axis=1)  # (operands, rows)
                total += least.sum(axis=0)
                minima += np.abs(least).sum(axis=0)
        interval = np.minimum(rows * self.d_lo, rows * self.d_hi) * self.generic
        total += interval.sum(axis=1)
        terms = self.count + 4
        rest_sum = np.zeros(len(rows))
        if mu is not None:
            rest = np.ones(mu.shape[-1], dtype=bool)
            for group in self.groups:
                rest[group.operands] = False
            linear_rest = np.minimum(mu[:, rest] * lo[rest], mu[:, rest] * hi[rest])
            total += linear_rest.sum(axis=1)
            rest_sum = np.abs(linear_rest).sum(axis=1)
            terms += mu.shape[-1]
        dots = self.widest + (3 if mu is not None else 2)
        charge = gamma(dots) * reach + gamma(terms) * (minima + np.abs(interval).sum(axis=1) + rest_sum)
        return (total - charge - TINY).reshape(shape)


def applies(model, layer_index: int) -> bool:
    """Does layer `layer_index`'s statement have per-operation product roundings this module can
    enumerate (fixed-point implementation, per-operation sums, a dense or convolution layer)?"""
    if not model.is_fixed or model.real or model.wide or model.stepped:
        return False
    return model.layers[layer_index].op.forms_products


def rounding_table(model, layer_index: int, h_lo: np.ndarray, h_hi: np.ndarray) -> RoundingTable | None:
    """The table of layer `layer_index` over operands in [h_lo, h_hi] (real units, one node),
    or None when no operand is narrow enough to enumerate (the statement's interval then).

    Which operands are enumerated, and whether the table is kept at all (`ENUMERATED_SHARE`), is
    decided from the operands' word counts alone before any product is rounded: a ReLU-split node
    asks for the tables of every layer after its split, and at <16,16> on a 784-256x4 network every
    one of them is refused (operands of thousands of words), which used to cost 2.5-35 ms a layer
    (the products of every narrow operand rounded first; 62 % of a node's time: issue 45 item 3)."""
    layer = model.layers[layer_index]
    unit = model.unit
    columns, owner, weighted, weighted_count = _columns(layer.op, unit)
    low = np.ceil(np.asarray(h_lo, dtype=np.float64) / unit)
    high = np.floor(np.asarray(h_hi, dtype=np.float64) / unit)
    words = high - low + 1
    live = (h_lo < 0) | (h_hi > 0)  # (a product of an input that is exactly 0 is exact)
    counts = np.diff(columns.indptr)
    read = live & (counts > 0)
    candidate = read & (words <= OPERAND_RANGE_MAX) & (words >= 1)
    sizes = np.where(candidate, words, 0.0) * counts
    if sizes.sum() <= OPERAND_TABLE_VALUES:
        enumerated = candidate  # (the budget binds nowhere)
    else:  # in operand order, while the budget lasts (an operand that does not fit is skipped)
        enumerated = np.zeros_like(candidate)
        budget = OPERAND_TABLE_VALUES
        for i in np.flatnonzero(candidate):
            if sizes[i] <= budget:
                enumerated[i] = True
                budget -= sizes[i]
    # the live products by operands not enumerated (their words' weights not zero), per operand first
    covered = float(counts[enumerated].sum())
    if covered < ENUMERATED_SHARE * (covered + weighted_count[read & ~enumerated].sum()):
        return None  # (too few of the layer's products to pay for the rows' products with it)
    kept = (read & ~enumerated)[owner] & weighted
    generic = np.bincount(columns.indices[kept], minlength=layer.n_out).astype(np.float64)
    frac_bits = model.qnet.number.frac_bits
    rounding = model.qnet.number.rounding
    stacks: dict[tuple[int, int], list[tuple[np.ndarray, np.ndarray, int, np.ndarray]]] = {}
    widest = 0
    for i in np.flatnonzero(enumerated):
        start, end = columns.indptr[i], columns.indptr[i + 1]
        consumers = columns.indices[start:end]
        weights = np.rint(columns.data[start:end] / unit).astype(np.int64)  # words (exact: 2^-l scaling)
        values = np.arange(int(low[i]), int(high[i]) + 1, dtype=np.int64)
        products = values[:, None] * weights[None, :]
        numerator = round_shift(products, frac_bits, rounding) * (1 << frac_bits) - products
        errors = numerator.astype(np.float64) * (unit * unit)
        stacks.setdefault((len(values), len(consumers)), []).append((consumers, errors, int(i), values))
        widest = max(widest, len(consumers))
    groups = tuple(
        OperandGroup(
            np.stack([entry[0] for entry in stack]).astype(np.int64),
            np.stack([entry[1] for entry in stack]),
            np.array([entry[2] for entry in stack], dtype=np.int64),
            np.stack([entry[3] for entry in stack]).astype(np.float64),
        )
        for stack in stacks.values()
    )
    return RoundingTable(
        groups, generic, model.round_lo, model.round_hi, widest, sum(len(g.operands) for g in groups)
    )


@functools.lru_cache(maxsize=64)
def _columns(op, unit: float):
    """The operation's weights by column (its operands), built once per operation: the matrix, each
    entry's column, which entries' words are not zero, and how many per column."""
    columns = op.rows().tocsc()
    counts = np.diff(columns.indptr)
    owner = np.repeat(np.arange(len(counts)), counts)
    weighted = np.rint(columns.data / unit) != 0
    return columns, owner, weighted, np.bincount(owner[weighted], minlength=len(counts))


@dataclass(frozen=True, slots=True, eq=False)
class BoxTables:
    """Per box of a batch of ReLU-split nodes, its own `RoundingTable` (or None: the statement's
    interval), read box by box with the same bounds one node's table gives. A box without a table
    reads -inf here: `bounds.backsubstitute` takes the larger of this and the interval reading."""

    tables: tuple[RoundingTable | None, ...]

    @staticmethod
    def of(model, layer_index: int, h_lo: np.ndarray, h_hi: np.ndarray) -> BoxTables | None:
        """Each box's `rounding_table` (h_lo, h_hi (B, n)); None when no box has one."""
        tables = tuple(rounding_table(model, layer_index, lo, hi) for lo, hi in zip(h_lo, h_hi))
        return None if all(table is None for table in tables) else BoxTables(tables)

    def lower(self, lam: np.ndarray) -> np.ndarray:
        """`RoundingTable.lower` per box (lam (B, R, n_out) -> (B, R))."""
        found = np.full(lam.shape[:-1], -np.inf)
        for b, table in enumerate(self.tables):
            if table is not None:
                found[b] = table.lower(lam[b])
        return found

    def joint_lower(self, lam: np.ndarray, mu: np.ndarray, unit: float, lo: np.ndarray, hi: np.ndarray):
        """`RoundingTable.joint_lower` per box (lam, mu (B, R, .), the boxes (B, n))."""
        found = np.full(lam.shape[:-1], -np.inf)
        for b, table in enumerate(self.tables):
            if table is not None:
                found[b] = table.joint_lower(lam[b], mu[b], unit, lo[b], hi[b])
        return found
