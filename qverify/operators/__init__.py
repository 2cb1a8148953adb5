"""What each operator kind of the network IR means, in one place per kind (auto_LiRPA's design,
docs/STYLE.md §j): one class per kind of node -- `Dense`, `Conv2D`, `MaxPool2D`, `AveragePool2D`,
`Add`, `Concat`, `Permute` -- holding, for every stage of the pipeline, what that node does there:
its constants in a number format and its int8 tables (`quant.network`), its real bounds in the
float reference's interval analysis, its value in the bit-exact simulator and in that
simulator's interval propagation (`quant.simulate`, `quant.intervals`), the C template's context
(`codegen.context`), its statement at the network level -- linear operation (whose `backward` is
the back-substitution step), activation, int8 staircase (`engine.netlevel.model`) -- and its
exact rationals (`engine.netlevel.exact`).

The stages ask `qverify.network.operators.operator_of(node).method(...)` and never switch on a
node's class; adding an operator kind is its class here (registered below), its reader
(`qverify.io`) and its C template.

Import order: this package sits above the stages whose helpers its classes use (`qverify.quant`
at module level; `qverify.codegen` and `qverify.engine` inside the methods that use them, so that
quantizing a network imports neither Jinja's templates nor the engine's scipy). The stages reach
the classes through the registry in `qverify.network.operators`, which imports this package on
its first lookup (docs/ARCHITECTURE.md, "Operators").
"""

from qverify.network import Add, AveragePool2D, Concat, Conv2D, Dense, MaxPool2D, Permute
from qverify.network.operators import operator_of, register_operator
from qverify.operators.add import AddOperator
from qverify.operators.avgpool import AveragePoolOperator
from qverify.operators.base import Operator
from qverify.operators.concat import ConcatOperator
from qverify.operators.conv import ConvOperator
from qverify.operators.dense import DenseOperator
from qverify.operators.maxpool import MaxPoolOperator
from qverify.operators.permute import PermuteOperator

for _node_class, _operator in (
    (Dense, DenseOperator()),
    (Conv2D, ConvOperator()),
    (MaxPool2D, MaxPoolOperator()),
    (AveragePool2D, AveragePoolOperator()),
    (Add, AddOperator()),
    (Concat, ConcatOperator()),
    (Permute, PermuteOperator()),
):
    register_operator(_node_class, _operator)

__all__ = ["Operator", "operator_of"]
