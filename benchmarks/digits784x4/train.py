"""Train the second image-size frontier network `digits784x4.onnx` and write its instances
(deterministic): benchmarks/digits784/train.py's procedure (data, training, ONNX, properties, attack
report) with four hidden layers of 256 ReLUs and its own radii.

    python benchmarks/digits784x4/train.py

README.md says how the radii were chosen (between what is proved in 10 s and what the attack
falsifies) and what qverify decides there.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_SPEC = importlib.util.spec_from_file_location("digits784_train", HERE.parent / "digits784" / "train.py")
assert _SPEC is not None and _SPEC.loader is not None
base = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault(_SPEC.name, base)  # (its dataclasses look their module up)
_SPEC.loader.exec_module(base)

DESIGN = base.Design("digits784x4", HERE, (256,) * 4, ("0.01", "0.02", "0.03"), timeout_s=60)
NETWORK_FILE = DESIGN.network_file
EPSILONS = DESIGN.epsilons
TIMEOUT_S = DESIGN.timeout_s
dataset = base.dataset


def chosen_images(net, x, y, test_idx, design=DESIGN):
    return base.chosen_images(net, x, y, test_idx, design)


def properties(x, y, chosen, epsilons=EPSILONS):
    return base.properties(x, y, chosen, epsilons)


if __name__ == "__main__":
    raise SystemExit(base.main(DESIGN))
