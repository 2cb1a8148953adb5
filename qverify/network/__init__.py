"""The network IR (`Network` and its layers) and its float64 reference evaluation."""

from qverify.network.evaluate import apply_activation, apply_layer, evaluate, evaluate_core
from qverify.network.joins import Add, Concat, Join, Permute
from qverify.network.model import (
    NETWORK_INPUT,
    Activation,
    Dense,
    InputNormalisation,
    Network,
    OutputNormalisation,
    chain_wiring,
    gather_inputs,
)
from qverify.network.qparams import (
    AffineQuantization,
    CodeFunction,
    CodeLookup,
    CodeType,
    JoinQuant,
    MacQuant,
    PoolQuant,
    QuantForm,
    TensorQuant,
)
from qverify.network.spatial import AveragePool2D, Conv2D, MaxPool2D, Pool2D
from qverify.network.taps import Taps

Layer = Dense | Conv2D | MaxPool2D | AveragePool2D | Add | Concat | Permute
MacLayer = Dense | Conv2D

__all__ = [
    "NETWORK_INPUT",
    "Activation",
    "Add",
    "AffineQuantization",
    "AveragePool2D",
    "CodeFunction",
    "CodeLookup",
    "CodeType",
    "Concat",
    "Conv2D",
    "Dense",
    "InputNormalisation",
    "Join",
    "JoinQuant",
    "Layer",
    "MacLayer",
    "MacQuant",
    "MaxPool2D",
    "Network",
    "OutputNormalisation",
    "Permute",
    "Pool2D",
    "PoolQuant",
    "QuantForm",
    "Taps",
    "TensorQuant",
    "apply_activation",
    "apply_layer",
    "chain_wiring",
    "evaluate",
    "evaluate_core",
    "gather_inputs",
]
