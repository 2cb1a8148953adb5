"""The network IR (`Network` and its layers) and its float64 reference evaluation."""

from qverify.network.evaluate import apply_activation, apply_layer, evaluate, evaluate_core
from qverify.network.model import (
    Activation,
    Dense,
    InputNormalisation,
    Network,
    OutputNormalisation,
)
from qverify.network.qparams import (
    AffineQuantization,
    CodeFunction,
    CodeLookup,
    CodeType,
    MacQuant,
    PoolQuant,
    QuantForm,
    TensorQuant,
)
from qverify.network.spatial import AveragePool2D, Conv2D, MaxPool2D, Pool2D
from qverify.network.taps import Taps

Layer = Dense | Conv2D | MaxPool2D | AveragePool2D
MacLayer = Dense | Conv2D

__all__ = [
    "Activation",
    "AffineQuantization",
    "AveragePool2D",
    "CodeFunction",
    "CodeLookup",
    "CodeType",
    "Conv2D",
    "Dense",
    "InputNormalisation",
    "Layer",
    "MacLayer",
    "MacQuant",
    "MaxPool2D",
    "Network",
    "OutputNormalisation",
    "Pool2D",
    "PoolQuant",
    "QuantForm",
    "Taps",
    "TensorQuant",
    "apply_activation",
    "apply_layer",
    "evaluate",
    "evaluate_core",
]
