"""Shared fixtures: repository paths, the hypothesis profile, tiny networks, a query's root bounds."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from qverify.engine.result import EngineOptions
from qverify.network import Activation, Dense, Network

ROOT = Path(__file__).resolve().parents[1]
ACAS = ROOT / "benchmarks" / "acasxu"
ACAS_NNETS = sorted((ACAS / "nnet").glob("*.nnet"))
ACAS_ONNX = sorted((ACAS / "onnx").glob("*.onnx"))
ACAS_1_1 = ACAS / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet"
# A test that needs a decision gives the engine a budget of work (EngineOptions.max_nodes), never a
# tight wall-clock limit: this timeout only ends a hang, far above what any budgeted query takes on
# a machine kept busy by other jobs (load 7-9 on 2 cores stretched 10 s queries past their limit).
SAFETY_NET_S = 600.0
# boxes or nodes per query: far above what the tests' small queries need (the largest when written,
# ReLU splitting's hardest UNSAFE, 13,451), low enough that a regression fails in seconds, not hours
NODE_BUDGET = 20_000


def root_bounds(query):
    """(model, xl, xu, phases, bounds): a network query's model and the root node's bounds over its
    first region, every phase open (what a search's root starts from)."""
    from qverify.engine.netlevel.bounds import node_bounds
    from qverify.engine.netlevel.model import build_model

    model = build_model(query)
    region = query.regions[0]
    xl, xu = model.input_reals(region.lo), model.input_reals(region.hi)
    phases = [np.zeros(layer.n_out, dtype=np.int8) for layer in model.layers]
    words = (region.lo, region.hi) if model.is_fixed else None
    return model, xl, xu, phases, node_bounds(model, xl, xu, phases, region_words=words)


def budgeted(**options) -> EngineOptions:
    """EngineOptions that decide within a budget of work (`NODE_BUDGET`, `SAFETY_NET_S` only as a
    safety net); `options` add to them or override them."""
    return EngineOptions(**{"timeout_s": SAFETY_NET_S, "max_nodes": NODE_BUDGET, **options})


settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def random_network(
    rng: np.random.Generator, sizes: tuple[int, ...], hidden: Activation, scale: float = 1.0
) -> Network:
    """A dense network with `hidden` activations and an identity output layer."""
    layers = []
    for index, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        activation = hidden if index < len(sizes) - 2 else Activation.IDENTITY
        layers.append(Dense(rng.normal(0, scale, (n_out, n_in)), rng.normal(0, scale, n_out), activation))
    return Network(tuple(layers), name=f"random-{hidden.value}")


@pytest.fixture
def phase_splitting_above_8_inputs(monkeypatch):
    """The network level's input splitting pinned to at most 8 varying inputs (its default takes 16,
    issue 45: VNN-COMP 2022's 14-input gcas network), so that the tests' 9-16-input networks,
    small enough to enumerate, exercise ReLU, max-pool and table splitting, which the default
    runs from 17 varying inputs on."""
    from qverify.engine.netlevel import search

    monkeypatch.setattr(search, "INPUT_SPLIT_DIMENSIONS", 8)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261121)
