"""Lookup-table design: sizes from the theorem, and measured errors within the reported bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qverify.errors import InputError
from qverify.network import Activation, apply_activation
from qverify.quant import (
    FixedFormat,
    FloatFormat,
    FloatKind,
    LutDesign,
    Rounding,
    design_lut,
    measure_lut_error,
)
from qverify.quant.lut import LIPSCHITZ, lut_fixed

NUMBERS = [
    FixedFormat(4, 4),
    FixedFormat(2, 6, Rounding.FLOOR),
    FixedFormat(6, 10),
    FixedFormat(8, 24),
    FloatFormat(FloatKind.FLOAT),
    FloatFormat(FloatKind.DOUBLE),
]
DESIGNS = [
    LutDesign(),
    LutDesign(eps=0.01, resolution=None),
    LutDesign(eps=0.002, resolution=None),
    LutDesign(resolution=1),
    LutDesign(resolution=3),
]


def quantisation_step(number) -> float:
    return 1.0 / number.scale if isinstance(number, FixedFormat) else 0.0


@pytest.mark.parametrize("activation", [Activation.SIGMOID, Activation.TANH])
@pytest.mark.parametrize("number", NUMBERS, ids=str)
@pytest.mark.parametrize("design", DESIGNS, ids=LutDesign.describe)
def test_measured_error_within_bounds(activation, number, design):
    lut = design_lut(activation, design, number)
    measured = measure_lut_error(lut, number)
    assert measured <= lut.error_bound + 1e-12
    if design.eps is not None:
        assert measured <= design.eps + quantisation_step(number) + 1e-12
        assert lut.n_entries >= 1 + 2 * lut.half_range * LIPSCHITZ[activation] / design.eps


def test_resolution_tables_match_the_thesis():
    for places, entries in ((1, 121), (2, 1201), (3, 12001)):
        lut = design_lut(Activation.TANH, LutDesign(resolution=places), FixedFormat(6, 10))
        assert lut.n_entries == entries and lut.half_range == 6.0


def test_table_saturates_outside_and_indexes_by_rounding():
    fmt = FixedFormat(8, 8)
    lut = design_lut(Activation.TANH, LutDesign(resolution=1), fmt)  # step 0.1 over [-6, 6]
    words = np.array([-10 * 256, -6 * 256 - 1, -6 * 256, 0, 13, 12, 6 * 256, 6 * 256 + 1])
    values = lut_fixed(lut, words)
    assert values[0] == values[1] == -256 and values[-1] == 256
    assert values[2] == lut.table[0] and values[6] == lut.table[-1]
    assert values[3] == lut.table[60]  # tanh(0)
    # 13/256 = 0.0508 rounds to the sample 0.1; 12/256 = 0.0469 to 0.0
    assert values[4] == lut.table[61] and values[5] == lut.table[60]
    expected = np.round(np.tanh(0.1) * 256)
    assert values[4] == expected


def test_bad_designs():
    with pytest.raises(InputError):
        LutDesign(eps=0.01, resolution=2)
    with pytest.raises(InputError):
        LutDesign(eps=2.0, resolution=None)
    with pytest.raises(InputError):
        design_lut(Activation.TANH, LutDesign(eps=1e-9, resolution=None), FixedFormat(8, 24))


def test_tail_chosen_from_eps():
    lut = design_lut(Activation.SIGMOID, LutDesign(eps=0.01, resolution=None), FloatFormat())
    assert 1 - apply_activation(Activation.SIGMOID, np.array(lut.half_range)) <= 0.01
    assert lut.half_range == pytest.approx(math.log(99), abs=1 / 256)
