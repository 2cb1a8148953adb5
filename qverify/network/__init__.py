"""The network IR (`Network`, `Dense`, `Activation`) and its float64 reference evaluation."""

from qverify.network.evaluate import apply_activation, evaluate, evaluate_core
from qverify.network.model import (
    Activation,
    Dense,
    InputNormalisation,
    Network,
    OutputNormalisation,
)

__all__ = [
    "Activation",
    "Dense",
    "InputNormalisation",
    "Network",
    "OutputNormalisation",
    "apply_activation",
    "evaluate",
    "evaluate_core",
]
