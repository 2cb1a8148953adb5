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
in int64: p = w v, R(p) as `quant.fixed.round_shift` rounds it (`error_numerators`), the error
(R(p) 2^l - p) 2^-2l exact in float64), within `OPERAND_TABLE_VALUES` entries a layer; wider operands keep the per-product
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

An input layer too wide for a table is read the same way, without one, where it pays: at an open
root of the search, each input's errors computed when read and only over the words that can hold a
row's minimum (`StreamedInput`; digits784 at <16,16>: the root's margin -3.31 -> +1.28)."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np

from qverify.engine.netlevel.roundoff import TINY, U64, gamma
from qverify.vocabulary import Rounding

OPERAND_RANGE_MAX = 4096  # words of one operand enumerated at most
OPERAND_TABLE_VALUES = 1 << 22  # (words x consumers) entries of one layer's table at most
ENUMERATED_SHARE = 0.5  # a layer's table is built when it covers at least this share of its live products


@dataclass(frozen=True, slots=True, eq=False)
class RoundingTable:
    """One layer's product roundings per operand (module docstring). `entries`: per enumerated
    operand, its consumers and the errors (words, consumers) in real units; `generic`: per neuron,
    how many of its live products keep the interval [d_lo, d_hi] (operands not enumerated)."""

    entries: tuple[tuple[np.ndarray, np.ndarray], ...]
    generic: np.ndarray  # (n_out,) live products per neuron read through the interval
    d_lo: float
    d_hi: float
    widest: int  # the most consumers of one enumerated operand (the dot products' length)
    operands: np.ndarray  # per entry: the operand's index
    words: tuple[np.ndarray, ...]  # per entry: the operand's words (its real values / unit)

    def lower(self, lam: np.ndarray) -> np.ndarray:
        """A sound lower bound of lam . e for every row of lam (..., R, n_out) (the float64
        rounding of the dot products, the minima's sum and the interval part charged)."""
        shape = lam.shape[:-1]
        rows = lam.reshape(-1, lam.shape[-1])
        total = np.zeros(len(rows))
        reach = np.zeros(len(rows))  # sum of |lam_o| |d| over the dot products
        minima = np.zeros(len(rows))  # sum of |min_i|
        bound = max(abs(self.d_lo), abs(self.d_hi))
        for consumers, errors in self.entries:
            part = rows[:, consumers]
            values = errors @ part.T  # (words, rows)
            least = values.min(axis=0)
            total += least
            minima += np.abs(least)
            reach += np.abs(part).sum(axis=1) * bound
        interval = np.minimum(rows * self.d_lo, rows * self.d_hi) * self.generic
        total += interval.sum(axis=1)
        charge = gamma(self.widest + 2) * reach + gamma(len(self.entries) + 4) * (
            minima + np.abs(interval).sum(axis=1)
        )
        return (total - charge - TINY).reshape(shape)

    def joint_lower(
        self, lam: np.ndarray, mu: np.ndarray, unit: float, lo: np.ndarray, hi: np.ndarray
    ) -> np.ndarray:
        """For a layer that reads the network's input alone: a sound lower bound per row of
        mu . x + lam . e over the box [lo, hi] (real units), mu the rows' input coefficients
        (lam W): each enumerated input's min over its words v of mu_i v unit + D_i(v) together
        (where the linear part pins v, D_i is read there, not at its own worst word), the other
        inputs' linear minimum, the interval part as in `lower`; float64 rounding charged."""
        shape = lam.shape[:-1]
        rows = lam.reshape(-1, lam.shape[-1])
        mu = mu.reshape(-1, mu.shape[-1])
        total = np.zeros(len(rows))
        reach = np.zeros(len(rows))
        minima = np.zeros(len(rows))
        bound = max(abs(self.d_lo), abs(self.d_hi))
        rest = np.ones(mu.shape[-1], dtype=bool)
        for (consumers, errors), operand, words in zip(self.entries, self.operands, self.words):
            rest[operand] = False
            part = rows[:, consumers]
            reals = words * unit  # (exact: words below 2^31 times a power of two)
            values = errors @ part.T + reals[:, None] * mu[None, :, operand]
            least = values.min(axis=0)
            total += least
            minima += np.abs(least)
            reach += np.abs(part).sum(axis=1) * bound + np.abs(mu[:, operand]) * np.abs(reals).max()
        linear = np.minimum(mu[:, rest] * lo[rest], mu[:, rest] * hi[rest])
        interval = np.minimum(rows * self.d_lo, rows * self.d_hi) * self.generic
        total += linear.sum(axis=1) + interval.sum(axis=1)
        charge = gamma(self.widest + 3) * reach + gamma(len(self.entries) + mu.shape[-1] + 4) * (
            minima + np.abs(interval).sum(axis=1) + np.abs(linear).sum(axis=1)
        )
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
    entries, operands, operand_words = [], [], []
    widest = 0
    for i in np.flatnonzero(enumerated):
        start, end = columns.indptr[i], columns.indptr[i + 1]
        consumers = columns.indices[start:end]
        weights = np.rint(columns.data[start:end] / unit).astype(np.int64)  # words (exact: 2^-l scaling)
        values = np.arange(int(low[i]), int(high[i]) + 1, dtype=np.int64)
        numerator = error_numerators(values, weights, frac_bits, rounding)
        entries.append((consumers, numerator.astype(np.float64) * (unit * unit)))
        operands.append(int(i))
        operand_words.append(values.astype(np.float64))
        widest = max(widest, len(consumers))
    return RoundingTable(
        tuple(entries),
        generic,
        model.round_lo,
        model.round_hi,
        widest,
        np.array(operands, dtype=np.int64),
        tuple(operand_words),
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


U32 = 2.0**-24  # float32 unit roundoff: the streamed reading's dot products
STREAM_FLOAT32_FRAC_BITS = 23  # up to here every error numerator (|n| <= 2^l) is a float32 integer
STREAM_WINDOW_MAX = 256  # words of one input read at most per row (the rest: linear part less reach)
STREAM_CACHE_VALUES = 1 << 27  # errors a `StreamedInput` keeps between readings (512 MB in float32)
STREAM_DEADLINE_INPUTS = 64  # inputs read between two looks at the deadline
SPAN_BLOCK = 16  # `SpanReader`: words read one by one from a range's end, then per block of this many


class StreamedInput:
    """`RoundingTable.joint_lower` for an input layer too wide for a table (784 inputs of ~2,000
    words at <16,16>: 4 x 10^8 entries), on one box: the same exact reading, each input's errors
    computed when first read and only over the words that can hold a row's minimum.

    Per input and row (input coefficient m, the row's errors D(v) = sum over the input's consumers
    of lam_o d_o(v), |D| <= reach = sum |lam_o| max|d|): the row's part m v unit + D(v) is least at
    some word within |m| |v - v0| unit <= D(v0) + reach of the word v0 where the linear part is
    least (every other word's part exceeds v0's), so each row reads that window from its own end
    of the range; rows are read in buckets of windows of 2^k words, one matrix product each. The
    dot products run in float32 on the error numerators (integers of at most 2^l: exact there up to
    `STREAM_FLOAT32_FRAC_BITS`; lam rounded to float32), their rounding charged as gamma32_(n+2) of
    the reach, the rest as in `joint_lower`. The numerators read are kept for the next reading on
    the same box (the root reads every hidden layer's rows, then the atoms'), up to
    `STREAM_CACHE_VALUES`. Past `deadline` (time.monotonic()) a reading gives up: its rows read
    -inf (the caller keeps its interval reading)."""

    def __init__(
        self, model, layer_index: int, lo: np.ndarray, hi: np.ndarray, deadline: float = float("inf")
    ) -> None:
        self.deadline = deadline
        self.unit = model.unit
        self.columns, _, self.weighted, _ = _columns(model.layers[layer_index].op, self.unit)
        self.frac_bits = model.qnet.number.frac_bits
        self.rounding = model.qnet.number.rounding
        self.dtype = np.float32 if self.frac_bits <= STREAM_FLOAT32_FRAC_BITS else np.float64
        self.dot_unit = U32 if self.dtype is np.float32 else U64
        self.low = np.ceil(np.asarray(lo, dtype=np.float64) / self.unit).astype(np.int64)
        self.high = np.floor(np.asarray(hi, dtype=np.float64) / self.unit).astype(np.int64)
        self.bound = max(abs(model.round_lo), abs(model.round_hi))
        self.cache: dict[tuple[int, bool], np.ndarray] = {}
        self.cached = 0

    def numerators(self, i: int, from_high: bool, count: int) -> np.ndarray:
        """Input i's product error numerators (words, consumers; the errors / unit^2) in `dtype`,
        its first `count` words from its low end (or from its high end, downwards)."""
        found = self.cache.get((i, from_high))
        if found is not None and len(found) >= count:
            return found[:count]
        # (every window a reading can ask for, at once: a row's window starts with one word)
        asked = count
        count = max(count, min(int(self.high[i] - self.low[i] + 1), STREAM_WINDOW_MAX))
        start, end = self.columns.indptr[i], self.columns.indptr[i + 1]
        weights = np.rint(self.columns.data[start:end][self.weighted[start:end]] / self.unit).astype(np.int64)
        v = self.high[i] - np.arange(count) if from_high else self.low[i] + np.arange(count)
        made = error_numerators(v, weights, self.frac_bits, self.rounding).astype(self.dtype)
        grown = made.size - (0 if found is None else found.size)
        if self.cached + grown <= STREAM_CACHE_VALUES:
            self.cache[(i, from_high)] = made
            self.cached += grown
        return made[:asked]

    def joint_lower(self, lam: np.ndarray, mu: np.ndarray) -> np.ndarray:
        """A sound lower bound per row of mu . x + lam . e over the box (`RoundingTable.joint_lower`
        with every input enumerated)."""
        unit, columns = self.unit, self.columns
        scale = unit * unit  # (a numerator's error in real units: exact, a power of two)
        rows = lam.reshape(-1, lam.shape[-1])
        mu = mu.reshape(-1, mu.shape[-1])
        rows_low = rows.astype(self.dtype)
        total = np.zeros(len(rows))
        reach_sum = np.zeros(len(rows))  # the dot products' magnitudes
        magnitude = np.zeros(len(rows))  # |least| and the linear parts (the float64 sums)
        widest = 1
        for i in range(len(self.low)):
            if i % STREAM_DEADLINE_INPUTS == 0 and time.monotonic() > self.deadline:
                return np.full(lam.shape[:-1], -np.inf)
            start, end = columns.indptr[i], columns.indptr[i + 1]
            consumers = columns.indices[start:end][self.weighted[start:end]]
            m = mu[:, i]
            words = int(self.high[i] - self.low[i] + 1)
            part = rows_low[:, consumers]
            reach = np.abs(rows[:, consumers]).sum(axis=1) * self.bound
            widest = max(widest, len(consumers))
            least = np.empty(len(rows))
            for from_high in (False, True):
                side = (m < 0) if from_high else (m >= 0)
                if not side.any():
                    continue
                members = np.flatnonzero(side)
                if words <= 2 or not len(consumers):  # (every word, or no rounding: the ends)
                    count = np.full(len(members), min(words, 2))
                else:  # each row's window (its D(v0) read first, with its rounding's charge)
                    first = self.numerators(i, from_high, 1)
                    at_v0 = (first @ part[members].T)[0].astype(np.float64) * scale
                    slack = 2 * gamma(len(consumers) + 2, self.dot_unit) * reach[members]
                    allowed = (at_v0 + reach[members] + slack) * (1 + 1e-6)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        span = np.where(m[members] != 0, allowed / (np.abs(m[members]) * unit), np.inf)
                    window = np.minimum(np.floor(np.minimum(span, words)) + 2, words).astype(np.int64)
                    # each row's bucket: the least power of two at or above its window (or every word)
                    count = np.minimum(1 << np.ceil(np.log2(window)).astype(np.int64), words)
                    count = np.minimum(count, STREAM_WINDOW_MAX)
                numerators = self.numerators(i, from_high, int(count.max()))
                v = (
                    self.high[i] - np.arange(len(numerators) + 1)
                    if from_high
                    else self.low[i] + np.arange(len(numerators) + 1)
                )
                reals = v * unit
                for size in np.unique(count):
                    chosen = members[count == size]
                    dots = (numerators[:size] @ part[chosen].T).astype(np.float64) * scale
                    least[chosen] = (dots + reals[:size, None] * m[None, chosen]).min(axis=0)
                    if size < words:  # the words past the window: their linear part less the reach
                        beyond = reals[size] * m[chosen] - reach[chosen] * (1 + 1e-6)
                        least[chosen] = np.minimum(least[chosen], beyond)
            total += least
            reach_sum += reach
            magnitude += np.abs(least) + np.abs(m) * max(abs(self.low[i]), abs(self.high[i])) * unit
        charge = (
            gamma(widest + 2, self.dot_unit) * reach_sum * (1 + 1e-6)
            + gamma(widest + 3) * reach_sum
            + gamma(len(self.low) + 4) * magnitude
        )
        return total - charge - TINY


class SpanReader:
    """`StreamedInput`'s exact reading carried to the nodes of a ReLU-splitting search on the root's
    box, at a cost a node can pay. A node's atom row lam differs from the same atom's row at the root
    (its basis row b) by its splits' multipliers and slopes, so it is read as c b plus a residual:

        lam . e = sum_i c G_i(x_i) + (lam - c b) . e,   G_i(v) = sum over input i's consumers o of b_o d_oi(v),

    with c the projection of lam on b weighted by each neuron's error interval (what the interval
    reading charges), the first part minimised jointly with the input's linear part word by word,
    the residual by its interval. G is computed once, at the root, for each input's first
    `STREAM_WINDOW_MAX` words from either end of its range (the end where a row's linear part is
    least; float32 products of the error numerators with b rounded to float32, which is then the
    basis), and kept as its first `SPAN_BLOCK` words and the least and greatest of each block of
    `SPAN_BLOCK` words after them: a word in block k is read as its block's extreme plus the linear
    part at the block's first word (sound, short of the exact minimum by at most the linear part's
    rise over one block), the words past the window as `StreamedInput` reads them. A node then reads
    ~32 numbers per input and row, not ~256 words by the layer's 256 consumers."""

    def __init__(
        self, reader: StreamedInput, basis: np.ndarray, err_lo: np.ndarray, err_hi: np.ndarray
    ) -> None:
        basis32 = np.asarray(basis, dtype=np.float32)
        self.basis = basis32.astype(np.float64)  # (K, n_out): exactly the float32 basis
        self.unit, self.dot_unit = reader.unit, reader.dot_unit
        self.low, self.high = reader.low, reader.high
        self.words = self.high - self.low + 1
        columns, weighted = reader.columns, reader.weighted
        n_inputs, count = len(self.low), len(self.basis)
        size = int(min(self.words.max(), STREAM_WINDOW_MAX))
        blocks = -(-size // SPAN_BLOCK)
        scale = self.unit * self.unit
        self.first = np.zeros((n_inputs, 2, count, SPAN_BLOCK))  # G's first words from either end
        self.block_lo = np.full((n_inputs, 2, count, blocks), np.inf)  # per block: least G ...
        self.block_hi = np.full((n_inputs, 2, count, blocks), -np.inf)  # ... and greatest
        self.basis_reach = np.zeros((count, n_inputs))  # per basis row and input: sum |b_o| max|d|
        self.widest = 1
        for i in range(n_inputs):
            start, end = columns.indptr[i], columns.indptr[i + 1]
            consumers = columns.indices[start:end][weighted[start:end]]
            self.widest = max(self.widest, len(consumers))
            part = basis32[:, consumers].T.astype(reader.dtype)
            read = int(min(self.words[i], size))
            padded = np.full((blocks * SPAN_BLOCK, count), np.nan)
            for from_high in (False, True):
                padded[:read] = (reader.numerators(i, from_high, read) @ part).astype(np.float64) * scale
                table = padded.T.reshape(count, blocks, SPAN_BLOCK)
                self.first[i, int(from_high), :, : min(read, SPAN_BLOCK)] = table[
                    :, 0, : min(read, SPAN_BLOCK)
                ]
                with np.errstate(invalid="ignore"):
                    self.block_lo[i, int(from_high)] = np.fmin.reduce(table, axis=2, initial=np.inf)
                    self.block_hi[i, int(from_high)] = np.fmax.reduce(table, axis=2, initial=-np.inf)
            self.basis_reach[:, i] = np.abs(self.basis[:, consumers]).sum(axis=1) * reader.bound
        self.size = size
        self.weights = np.square(np.maximum(np.asarray(err_hi, float) - np.asarray(err_lo, float), 0.0))

    def joint_lower(
        self, lam: np.ndarray, mu: np.ndarray, own: np.ndarray, err_lo: np.ndarray, err_hi: np.ndarray
    ) -> np.ndarray:
        """A sound lower bound per row of mu . x + lam . e over the root's box: rows lam (M, n_out)
        and mu (M, n), each row's basis row `own` (M,), the layer's error intervals on each row's
        box (M, n_out)."""
        b = self.basis[own]
        weighted = b * self.weights[None, :]
        with np.errstate(divide="ignore", invalid="ignore"):
            c = np.nan_to_num((lam * weighted).sum(axis=1) / (b * weighted).sum(axis=1))
        residual = lam - c[:, None] * b
        # the residual's interval reading, and the float64 residual's error (|delta|) charged
        terms = np.minimum(residual * err_lo, residual * err_hi)
        term = terms.sum(axis=1)
        magnitude = np.abs(terms).sum(axis=1)
        delta = 2 * U64 * (np.abs(lam) + np.abs(c[:, None] * b))
        term = term - (delta * np.maximum(np.abs(err_lo), np.abs(err_hi))).sum(axis=1)
        reach = np.abs(c)[:, None] * self.basis_reach[own]  # (M, n): |c G_i| <= reach
        least = self.least(c, own, mu, reach)
        extent = np.maximum(np.abs(self.low), np.abs(self.high)) * self.unit
        # (each value: the linear part at a word, at most 3 |mu_i| extent_i, plus c G_i(v))
        magnitude += np.abs(least).sum(axis=1) + 3 * (np.abs(mu) @ extent) + reach.sum(axis=1)
        # G's float32 products (gamma32 of the basis row's reach, times |c|), c G's product and the
        # float64 sums
        charge = (gamma(self.widest + 2, self.dot_unit) + 2 * U64) * reach.sum(axis=1) * (1 + 1e-6)
        charge = charge + gamma(len(self.low) + lam.shape[1] + SPAN_BLOCK + 8) * magnitude
        return term + least.sum(axis=1) - charge - TINY

    @np.errstate(invalid="ignore")
    def least(self, c: np.ndarray, own: np.ndarray, mu: np.ndarray, reach: np.ndarray) -> np.ndarray:
        """Per row m and input i, a lower bound of mu_mi v unit + c_m G_i(v) over the input's words
        (class docstring): its first words exactly, then block by block, then past the window."""
        inputs = np.arange(len(self.low))[None, :]
        ends = (mu < 0).astype(np.int64)
        rows = own[:, None]
        # the linear part at the word that ends the range from where it is least, and its rise a word
        start = np.where(mu < 0, self.high[None, :], self.low[None, :]) * self.unit * mu
        rise = np.abs(mu) * self.unit
        steps = np.arange(SPAN_BLOCK)  # (past a narrow input's words: +inf, and 0 x inf below)
        first = c[:, None, None] * self.first[inputs, ends, rows] + start[..., None] + rise[..., None] * steps
        first = np.where(steps < self.words[None, :, None], first, np.inf)
        least = first.min(axis=2)
        extreme = np.where(
            (c >= 0)[:, None, None], self.block_lo[inputs, ends, rows], self.block_hi[inputs, ends, rows]
        )
        blocks = np.arange(1, extreme.shape[2])
        if len(blocks):
            at = blocks * SPAN_BLOCK
            values = c[:, None, None] * extreme[..., 1:] + start[..., None] + rise[..., None] * at
            values = np.where(at < np.minimum(self.words, self.size)[None, :, None], values, np.inf)
            least = np.minimum(least, values.min(axis=2))
        beyond = start + rise * self.size - reach * (1 + 1e-6)
        return np.where(self.words[None, :] > self.size, np.minimum(least, beyond), least)


def error_numerators(v: np.ndarray, weights: np.ndarray, frac_bits: int, rounding) -> np.ndarray:
    """R(p) 2^l - p for the products p = w v of each word v (rows) and weight w (columns; both
    words), int64, in closed form (`quant.fixed.round_shift`'s roundings: to nearest with ties away
    from zero, or down); times unit^2 it is the product's rounding error in real units."""
    products = np.asarray(v, dtype=np.int64)[:, None] * np.asarray(weights, dtype=np.int64)[None, :]
    mask = (1 << frac_bits) - 1
    if rounding is Rounding.NEAREST:  # |n| = half - ((|p| + half) & mask), with p's sign
        half = 1 << (frac_bits - 1)
        numerator = half - ((np.abs(products) + half) & mask)
        return np.where(products >= 0, numerator, -numerator)
    return -(products & mask)  # floor: R(p) 2^l = p - (p & mask) (two's complement)
