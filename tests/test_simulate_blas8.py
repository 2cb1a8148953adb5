"""The int8 simulator's fast paths compute what its general path computes, bit for bit.

`qverify.quant.blas8` sums convolutions and dense layers through float BLAS (im2col) and reads
the threshold tables through `qverify.quant.buckets`; an int8 Add reads a table of all code pairs.
Each is checked here against the general path (gathered int64 products, `searchsorted` over the
thresholds, the Add's staircase) on the CIFAR-10 zoo's int8 models -- strides, padding, depthwise
groups, 1x1 shortcuts, average pools as convolutions, dense layers, per-channel tables -- on input
codes of real images and on random codes over the whole code range (the sums' extremes).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pytest

from qverify.assurance import make_implementation
from qverify.assurance.implementations import CHUNK, chunk_samples, simulate_in_chunks
from qverify.io import load_network
from qverify.quant import affine, blas8, buckets
from qverify.quant.join8 import all_pairs

simulate_module = importlib.import_module("qverify.quant.simulate")
MODELS = Path(__file__).resolve().parent.parent / "benchmarks" / "cifar10" / "models"


def _implementation(family: str, label: str = "int8"):
    return make_implementation(load_network(MODELS / f"{family}.int8-qop.onnx"), label)


def _layer_inputs(qnet, codes: np.ndarray) -> list[np.ndarray]:
    """Every node's input codes on `codes` (the network's inputs), from one traced run."""
    result = simulate_module.simulate(qnet, codes, trace=True)
    outputs = [trace.post for trace in result.layers]
    return [qnet.node_inputs(index, codes, outputs) for index in range(len(qnet.layers))]


def _random_codes(qnet, index: int, n: int, rng: np.random.Generator) -> np.ndarray:
    code = qnet.layers[index].int8.quant.input.code
    return rng.integers(code.qmin, code.qmax + 1, (n, qnet.layers[index].n_in))


@pytest.mark.parametrize("family", ["mbv2s", "resnet2b", "squeeze", "resnet4b"])
def test_blas_layers_equal_the_gathered_products(family):
    qnet = _implementation(family).qnet
    rng = np.random.default_rng(0)
    images = rng.integers(qnet.input_quant.code.qmin, qnet.input_quant.code.qmax + 1, (6, qnet.n_inputs))
    checked = 0
    for index, inputs in enumerate(_layer_inputs(qnet, images)):
        layer = qnet.layers[index]
        dtype = blas8.blas_dtype(layer) if layer.int8 is not None else None
        if dtype is None:
            continue
        for codes in (inputs, _random_codes(qnet, index, 5, rng)):
            expected = simulate_module.gathered_int8_codes(layer, codes)
            for kind in {dtype, np.float64}:  # float32 where exact, and float64 always
                assert np.array_equal(blas8.blas_layer_codes(layer, codes, kind), expected), (index, kind)
        checked += 1
    assert checked >= 4


def test_the_widest_network_equals_the_general_path_and_blocks_change_nothing(monkeypatch):
    """ResNet-20's 23 MAC layers and 9 Adds, in blocks of one image and of many."""
    implementation = _implementation("resnet20")
    qnet = implementation.qnet
    rng = np.random.default_rng(1)
    images = rng.integers(qnet.input_quant.code.qmin, qnet.input_quant.code.qmax + 1, (3, qnet.n_inputs))
    fast = simulate_module.simulate(qnet, images).outputs
    monkeypatch.setattr(simulate_module, "blas_dtype", lambda layer: None)
    assert np.array_equal(simulate_module.simulate(qnet, images).outputs, fast)
    monkeypatch.undo()
    monkeypatch.setattr(blas8, "BLOCK_VALUES", 1)  # one image per matrix product
    assert np.array_equal(simulate_module.simulate(qnet, images).outputs, fast)


def _table_cases(rng: np.random.Generator) -> list[np.ndarray]:
    """Threshold tables as `affine.thresholds` makes them: rows nearly evenly spaced (one code per
    accumulator step .. wide steps), repeated thresholds (skipped codes), sentinels."""
    tables = []
    for spacing in (1, 3, 200, 5000):
        jitter = rng.uniform(-0.4, 0.4, (3, 255))
        start = rng.integers(-300, 300, (3, 1)) * spacing
        tables.append(np.sort(np.round((np.arange(255) - 100 + jitter) * spacing) + start, axis=1))
    steps = np.arange(85) * 60 + rng.integers(-20, 20, (2, 85))  # a code step of 1/3 accumulator unit
    tables.append(np.repeat(steps, 3, axis=1))
    sentinels = np.sort(rng.integers(-500, 500, (2, 255)), axis=1)
    sentinels[:, :7], sentinels[:, -9:] = affine.INT32_MIN, affine.INT32_MAX  # reached always / never
    tables.append(sentinels)
    tables.append(np.vstack([sentinels[:1], np.full(255, affine.INT32_MAX)]))  # a row none reaches
    return [table.astype(np.int64) for table in tables]


def test_bucket_counts_equal_searchsorted():
    rng = np.random.default_rng(2)
    for table in _table_cases(rng):
        rows = len(table)
        acc = rng.integers(-(1 << 31) + 2, (1 << 31) - 2, (40, rows, 30))
        acc[:30] = rng.integers(-2_000_000, 2_000_000, (30, rows, 30))  # mostly among the thresholds
        acc[30:32] = table[None, :, :30]  # on thresholds exactly
        acc[32:34] = table[None, :, :30] - 1
        acc = np.clip(acc, affine.INT32_MIN + 1, affine.INT32_MAX - 1)
        expected = np.stack([affine.thresholds_reached(acc[:, :, p], table) for p in range(30)], axis=2)
        form = buckets.BucketTable.of(table)
        assert form is not None
        assert np.array_equal(form.counts(acc), expected)
        one = buckets.BucketTable.of(table[:1])
        assert np.array_equal(one.counts(acc[:, 0]), np.searchsorted(table[0], acc[:, 0], side="right"))


def test_uneven_rows_fall_back_to_the_search(monkeypatch):
    rng = np.random.default_rng(3)
    table = np.sort(rng.integers(-(1 << 30), 1 << 30, (2, 255)), axis=1)
    table[:, 1] = table[:, 0] + 1  # one gap of 1 among gaps of millions: too many buckets
    assert buckets.BucketTable.of(table) is None
    acc = rng.integers(-(1 << 30), 1 << 30, (4, 2, 3))
    codes = blas8.requantized(acc, table, -128)
    expected = -128 + np.stack([affine.thresholds_reached(acc[:, :, p], table) for p in range(3)], axis=2)
    assert np.array_equal(codes, expected)


def test_an_add_reads_the_pairs_of_its_staircase():
    qnet = _implementation("resnet2b").qnet
    rng = np.random.default_rng(4)
    adds = [layer for layer in qnet.layers if type(layer.source).__name__ == "Add"]
    assert adds
    for layer in adds:
        size = layer.source.size
        first, second = layer.int8.quant.inputs
        a, b = all_pairs(first, second)
        pick = rng.integers(0, a.size, size * 3)
        codes = np.concatenate([a[pick].reshape(3, size), b[pick].reshape(3, size)], axis=1)
        acc = layer.weights[0] * codes[:, :size] + layer.weights[1] * codes[:, size:]
        expected = affine.apply_thresholds(acc, layer.int8.table, layer.int8.code.qmin)
        assert np.array_equal(simulate_module.int8_join_codes(layer, codes), expected)


def test_exactness_bound_chooses_the_float_type():
    weights = np.full((2, 3, 3, 3), 127, dtype=np.int64)
    assert blas8.exactness_bound(weights, -128, -128, 127) == 27 * 127 * 255
    wide = np.full((1, 1200), 127, dtype=np.int64)
    assert blas8.exactness_bound(wide, 0, -128, 127) >= blas8.FLOAT32_EXACT  # float64 then
    qnet = _implementation("resnet20").qnet
    assert {blas8.blas_dtype(layer) for layer in qnet.layers if layer.is_mac} == {np.float32}


def test_chunks_bound_the_simulators_memory():
    net = load_network(MODELS / "resnet18.onnx")
    floating = make_implementation(net, "float").qnet  # gathered products: ~50 MB per image
    assert chunk_samples(floating) < 16
    assert 1000 < chunk_samples(_implementation("resnet2b").qnet) <= CHUNK  # small networks: thousands


def test_chunks_in_threads_give_the_outputs_of_one_run():
    qnet = _implementation("resnet2b").qnet
    rng = np.random.default_rng(5)
    codes = rng.integers(qnet.input_quant.code.qmin, qnet.input_quant.code.qmax + 1, (600, qnet.n_inputs))
    results = simulate_in_chunks(qnet, codes)
    assert len(results) >= min(2, len(os.sched_getaffinity(0)))  # (600 samples: shared by the threads)
    together = np.concatenate([result.outputs for result in results])
    assert np.array_equal(together, simulate_module.simulate(qnet, codes).outputs)


def test_the_bias_shift_keeps_thresholds_near_the_int32_ends_finite():
    """A table read by the sums (the bias taken off every threshold): a finite threshold that the
    shift moves past INT32_MAX stays a threshold, the sentinels stay sentinels."""
    top = affine.INT32_MAX - 2 - 300 * np.arange(253)[::-1]
    table = np.concatenate([[affine.INT32_MIN], top, [affine.INT32_MAX]]).astype(np.int64)[None, :]
    bias = np.array([-1000], dtype=np.int64)
    form = buckets.BucketTable.of(table, less=bias, base=-128)
    assert form is not None
    acc = np.array([[affine.INT32_MAX - 2, affine.INT32_MAX - 3, int(top[0]) - 1, 0]], dtype=np.int64)
    expected = -128 + np.searchsorted(table[0], acc[0], side="right")
    assert np.array_equal(form.counts(acc - bias[0]), expected[None])
