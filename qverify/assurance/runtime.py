"""A model file run by its own runtime: the `onnxruntime` implementation label.

A float ONNX model *means* what onnxruntime computes on it (float32, its MLAS kernels, their
summation order). qverify's `float` simulator reproduces the generated C's sequential sums, one
rounding per addition in the C's order: bit-exact with the C, but ~2 images/s on a CIFAR-10 ResNet,
and not onnxruntime's order either. `real` (float64, no rounding) is fast but is not float32. The
`onnxruntime` label runs the file itself in onnxruntime -- the deployed float model's own arithmetic,
at the runtime's speed -- for the assurance commands that *measure* (impact); it has no C and no
simulator, so the commands that prove or repair refuse it (the implementation has no `qnet`).
The record names the label, so a study says which arithmetic its reference used.

The batch dimension of the file's input is made symbolic in an in-memory copy (exporters declare
batch 1); a graph whose shapes pin the batch (a Reshape to [1, ...]) runs one sample per call. A file
that ends in a Softmax, which qverify's readers drop (`Network.output_softmax`: the outputs are
logits), is read at the Softmax's input in that copy, so both sides of a pair compare logits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qverify.errors import InputError, ToolMissingError

ONNXRUNTIME = "onnxruntime"
BATCH_DIM = "batch"


def _logits_output(model: Any, path: Path) -> None:
    """Make the graph's output the input of its final Softmax (in place)."""
    import onnx

    output = model.graph.output[0].name
    final = [node for node in model.graph.node if output in node.output]
    if len(final) != 1 or final[0].op_type != "Softmax":
        raise InputError(f"{path}: qverify reads a final Softmax that its output {output} does not come from")
    del model.graph.output[:]
    model.graph.output.append(onnx.helper.make_empty_tensor_value_info(final[0].input[0]))


def _symbolic_batch(model: Any) -> bytes:
    """The model with the first dimension of its graph inputs and outputs named `batch`."""
    for value in [*model.graph.input, *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if len(dims) > 0:
            dims[0].Clear()
            dims[0].dim_param = BATCH_DIM
    return model.SerializeToString()


def _session(payload: bytes | str) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # a batched run that fails is retried one by one: no error logged
    options.intra_op_num_threads = min(2, len(os.sched_getaffinity(0)))
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(payload, options, providers=["CPUExecutionProvider"])


@dataclass(eq=False)
class OnnxRuntimeModel:
    """An ONNX file in an onnxruntime session; `outputs` maps flat samples (the network's input
    order: the input tensor's row-major order per sample) to the first output, flat per sample."""

    path: Path
    n_inputs: int
    logits: bool = False  # the network drops the file's final Softmax: read the file's logits too
    _session: Any = field(init=False, repr=False)
    _payload: bytes = field(init=False, repr=False)
    _sample_shape: tuple[int, ...] = field(init=False)
    _dtype: Any = field(init=False)
    _batched: bool = field(init=False)

    def __post_init__(self) -> None:
        try:
            import onnx
            import onnxruntime  # noqa: F401
        except ImportError:
            raise ToolMissingError(
                f"the {ONNXRUNTIME} implementation runs the model in onnxruntime, which is not installed "
                "(pip install onnxruntime, or `make setup`); or use --reference real / float"
            ) from None
        if self.path.suffix != ".onnx":
            raise InputError(f"{self.path}: the {ONNXRUNTIME} implementation runs .onnx files only")
        model = onnx.load(str(self.path))
        if self.logits:
            _logits_output(model, self.path)
        self._payload = model.SerializeToString()
        constants = {tensor.name for tensor in model.graph.initializer}
        if len([value for value in model.graph.input if value.name not in constants]) != 1:
            raise InputError(f"{self.path}: the {ONNXRUNTIME} implementation takes models with one input")
        try:
            self._session = _session(_symbolic_batch(model))
            self._batched = True
        except Exception:  # noqa: BLE001 -- onnxruntime's own exception types: the file as it is, one by one
            self._session = _session(self._payload)
            self._batched = False
        feed = self._session.get_inputs()[0]
        dims = feed.shape[1:]
        if not all(isinstance(d, int) and d > 0 for d in dims) or int(np.prod(dims)) != self.n_inputs:
            raise InputError(
                f"{self.path}: its input {feed.name} has shape {feed.shape}; the network reads "
                f"{self.n_inputs} values per sample"
            )
        self._sample_shape = tuple(dims)
        self._dtype = {"tensor(float)": np.float32, "tensor(double)": np.float64}.get(feed.type)
        if self._dtype is None:
            raise InputError(
                f"{self.path}: its input is {feed.type}; the {ONNXRUNTIME} implementation feeds float tensors"
            )

    def outputs(self, x: np.ndarray) -> np.ndarray:
        """The first output of the model on each sample of `x` (batch, n_inputs), float64."""
        feed = self._session.get_inputs()[0].name
        tensors = np.asarray(x).astype(self._dtype).reshape((len(x), *self._sample_shape))
        if self._batched:
            try:
                (first, *_) = self._session.run(None, {feed: tensors})
                return np.asarray(first, dtype=np.float64).reshape(len(x), -1)
            except Exception:  # noqa: BLE001 -- a shape pinned inside the graph: one sample per call from now
                self._session = _session(self._payload)
                self._batched = False
        rows = [self._session.run(None, {feed: tensor[None]})[0] for tensor in tensors]
        return np.asarray(rows, dtype=np.float64).reshape(len(x), -1)
