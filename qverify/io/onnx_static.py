"""Shape computations of float ONNX graphs folded into constants before the chain is read.

PyTorch exports `x.view(x.size(0), -1)` and `torch.flatten` of older versions as a side branch on the
dynamic tensor: `Shape` -> `Gather` -> `Unsqueeze` -> `Concat` -> the `Reshape`'s shape input. For
a network of batch 1 every value of that branch is known before any input arrives: `Shape` of a
tensor whose shape ONNX's shape inference states (the graph input's batch dimension taken as 1),
then small integer operators on constants. `fold_shape_computations` evaluates them (onnx's
reference evaluator, one node at a time, on inputs of at most `SMALL` elements, operators from a
fixed list that never create a tensor larger than their inputs) and adds their outputs to the
constants, so the sequential reader skips the branch as it skips a `Constant` node. A branch it
cannot evaluate stays, and the reader names its first node as not sequential.
"""

from __future__ import annotations

import numpy as np
import onnx

__all__ = ["fold_shape_computations"]

SMALL = 64  # elements of an input the folding evaluates (shapes and indices, never weights)
FOLDABLE = frozenset(
    {"Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Slice", "Mul", "Add", "Sub", "Div", "Identity",
     "Reshape", "Floor", "Ceil", "Neg", "Abs"}
)  # fmt: skip


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape that shape inference states with the batch dimension 1 (empty when
    inference fails: the graph is then read as it is)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        dims = value.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].Clear()
            dims[0].dim_value = 1
    try:
        inferred = onnx.shape_inference.infer_shapes(copy, strict_mode=False)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError, TypeError):
        return {}
    shapes = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(dim.HasField("dim_value") for dim in dims):
            shapes[value.name] = tuple(int(dim.dim_value) for dim in dims)
    return shapes


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    """`Shape`'s output (with opset 15's start and end)."""
    start, end = 0, len(shape)
    for attribute in node.attribute:
        if attribute.name == "start":
            start = int(attribute.i)
        elif attribute.name == "end":
            end = int(attribute.i)
    return np.array(shape[slice(start, end)], dtype=np.int64)


def fold_shape_computations(
    model: onnx.ModelProto, constants: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """`constants` and the values of the graph's shape computations (module docstring)."""
    graph = model.graph
    if not any(node.op_type == "Shape" for node in graph.node):
        return constants
    # here, not at the top: onnx's reference evaluator (~30 ms of every `qverify verify` of an ONNX
    # file) is only needed by graphs that compute shapes
    from onnx.reference import ReferenceEvaluator

    shapes = _static_shapes(model)
    folded = dict(constants)
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or not node.output:
            continue
        if node.op_type == "Shape" and len(node.input) == 1 and node.input[0] in shapes:
            folded[node.output[0]] = _shape_value(node, shapes[node.input[0]])
            continue
        inputs = [name for name in node.input if name]
        if node.op_type not in FOLDABLE or not inputs or any(name not in folded for name in inputs):
            continue
        if any(np.asarray(folded[name]).size > SMALL for name in inputs) or all(
            name in constants for name in inputs
        ):
            continue  # weights (or computations on weights only) are the reader's business
        try:
            values = ReferenceEvaluator(node).run(None, {name: np.asarray(folded[name]) for name in inputs})
        except (ValueError, TypeError, IndexError, KeyError, RuntimeError, NotImplementedError):
            continue  # left to the reader, which names the node
        folded.update(zip(node.output, (np.asarray(value) for value in values)))
    return folded
