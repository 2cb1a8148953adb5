"""The gradient attack's whole rounds (`gradient_attack(whole_rounds=...)`): the open root's first
round runs all its steps even past its deadline, because a round cut short confirms points barely
descended (cifar10-resnet4b int8: one round outlasted the attack's 6 s under load, and a
counterexample one whole round finds was missed).

The query: 40 inputs in [0, 1], Y0 = sum(x) - 39.5, unsafe Y0 >= 0, a corner no uniform sample or
the centre reaches (sum 20 +- 2) and that sign-gradient descent reaches in a few steps. No
assertion depends on the machine's speed: the deadlines are either long past or far away.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from qverify.engine.netlevel.query import NO_VIOLATION, Arithmetic, query_for
from qverify.network import Activation, Dense, Network
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation
from qverify.quant import FloatFormat, FloatKind, ImplementationOptions, quantize_network
from tests.test_netlevel_conjunctions import _attack

INPUTS = 40


def _corner_query():
    weights = np.vstack([np.ones(INPUTS), np.zeros(INPUTS)])
    net = Network((Dense(weights, np.array([-39.5, 0.0]), Activation.IDENTITY),), name="corner")
    box = Box(tuple([Fraction(0)] * INPUTS), tuple([Fraction(1)] * INPUTS))
    unsafe = OutputCondition((Clause((Atom(((0, Fraction(1)),), Fraction(0), Relation.GE),)),))
    prop = Property("corner", (box,), unsafe)
    return query_for(
        quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT))), prop, Arithmetic.REAL
    )


def test_a_whole_round_descends_past_its_deadline():
    query = _corner_query()
    _, found = _attack(query, time.monotonic() - 1.0, whole_rounds=1)
    assert found is not None
    assert query.violation(found.point) != NO_VIOLATION


def test_a_round_past_its_deadline_takes_no_step():
    """What the test above guards: without a whole round, a deadline already past leaves the
    starting points (the centre and uniform samples) undescended, and none of them is unsafe."""
    _, found = _attack(_corner_query(), time.monotonic() - 1.0, whole_rounds=0)
    assert found is None
