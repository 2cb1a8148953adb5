"""Bounded reading of a TensorFlow Lite flatbuffer into plain records (the `tflite` schema package).

A `.tflite` file is a FlatBuffer of the TFLite schema (`schema.fbs`, file identifier `TFL3`). The
`tflite` package (PyPI: the schema compiled by `flatc` for Python, no TensorFlow) knows its tables
and fields, but its accessors trust the file: an offset past the end raises deep inside
`struct`, a vector may declare four billion entries, a 2 GB buffer is taken at its word. So the
structure is walked here, every table, vector and string checked against the file's size *before*
it is read (the checks of FlatBuffers' own verifier, which the LiteRT interpreter runs before it
builds a model): a table's vtable lies inside the file and within its own size, every field the
vtable names lies inside the table, every vector's declared length fits in the bytes after it.
Scalar fields are then read through the package's generated accessors on tables so checked.

What comes out is `TfliteModel`: the first subgraph's tensors (shape, type, quantization, the
bytes of a constant), operators (builtin code, inputs, outputs, options table) and graph inputs
and outputs; every index checked against what it indexes. Anything malformed is an `InputError`
naming the file and what is wrong; nothing is allocated that the file declares before the file's
size confirms it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.errors import InputError
from qverify.input_limits import check_file, check_tensor
from qverify.io.files import read_bytes

MAGIC = b"TFL3"
_U16, _I32, _U32 = struct.Struct("<H"), struct.Struct("<i"), struct.Struct("<I")

# vtable slots (4 + 2 * field id, schema.fbs) of the vector and table fields walked here; scalar
# fields are read by the `tflite` package's accessors
_MODEL_OPERATOR_CODES, _MODEL_SUBGRAPHS, _MODEL_BUFFERS = 6, 8, 12
_SUBGRAPH_TENSORS, _SUBGRAPH_INPUTS, _SUBGRAPH_OUTPUTS, _SUBGRAPH_OPERATORS = 4, 6, 8, 10
_TENSOR_SHAPE, _TENSOR_NAME, _TENSOR_QUANTIZATION, _TENSOR_SPARSITY = 4, 10, 12, 16
_QUANT_SCALE, _QUANT_ZERO_POINT, _QUANT_DETAILS = 8, 10, 14
_OPERATOR_INPUTS, _OPERATOR_OUTPUTS, _OPERATOR_OPTIONS = 6, 8, 12
_OPCODE_CUSTOM = 6
_BUFFER_DATA = 4
_RESHAPE_NEW_SHAPE = 4

# numpy types of the tensor types a quantized model holds (schema.fbs TensorType)
TENSOR_DTYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 7: np.int16, 9: np.int8}


@dataclass(frozen=True, slots=True)
class QuantParams:
    """A tensor's affine quantization as the file states it: one scale and zero point per tensor,
    or per slice along `axis` (the file's `quantized_dimension`)."""

    scales: np.ndarray  # float32
    zero_points: np.ndarray  # int64
    axis: int


@dataclass(frozen=True, slots=True, eq=False)
class TfliteTensor:
    """One tensor of the subgraph. `data`: the bytes of a constant (None for an activation),
    `data_offset` where they start in the file (-1: none)."""

    index: int
    name: str
    type: int  # schema.fbs TensorType
    shape: tuple[int, ...]
    buffer: int
    quant: QuantParams | None
    data: bytes | None
    data_offset: int

    @property
    def type_name(self) -> str:
        return _type_names().get(self.type, f"type {self.type}")

    def values(self, where: str) -> np.ndarray:
        """The constant's values in its shape (InputError when its bytes do not fill the shape)."""
        dtype = TENSOR_DTYPES.get(self.type)
        if self.data is None or dtype is None:
            raise InputError(f"{where}: tensor {self.index} '{self.name}' holds no {self.type_name} constant")
        count = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        expected = count * np.dtype(dtype).itemsize
        if len(self.data) != expected:
            raise InputError(
                f"{where}: tensor {self.index} '{self.name}' of shape {list(self.shape)} ({self.type_name}) needs "
                f"{expected} bytes; its buffer {self.buffer} holds {len(self.data)}"
            )
        return np.frombuffer(self.data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(self.shape).copy()


@dataclass(frozen=True, slots=True, eq=False)
class TfliteOperator:
    """One operator: its builtin code (schema.fbs BuiltinOperator; `custom` names a custom one),
    the tensors it reads (-1: an omitted optional input) and writes, its options table (the
    `tflite` package's class of `options_type`, on a checked table) or None."""

    index: int
    code: int
    version: int
    custom: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options_type: int
    options: object | None

    @property
    def name(self) -> str:
        if self.custom:
            return f"CUSTOM '{self.custom}'"
        return _operator_names().get(self.code, f"operator code {self.code}")


@dataclass(frozen=True, slots=True, eq=False)
class TfliteModel:
    """The first subgraph of a TFLite file, checked (module docstring)."""

    where: str
    version: int
    tensors: tuple[TfliteTensor, ...]
    operators: tuple[TfliteOperator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    subgraphs: int
    size: int  # bytes of the file


def _operator_names() -> dict[int, str]:
    import tflite

    return {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


def _type_names() -> dict[int, str]:
    import tflite

    return {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}


class _Bounded:
    """A FlatBuffer whose every read is checked against its size first."""

    def __init__(self, buf: bytes, where: str) -> None:
        self.buf, self.size, self.where = buf, len(buf), where

    def malformed(self, what: str) -> InputError:
        return InputError(f"{self.where}: not a valid TFLite flatbuffer: {what}")

    def unpack(self, layout: struct.Struct, at: int, what: str) -> int:
        if at < 0 or at + layout.size > self.size:
            raise self.malformed(f"{what} at byte {at} lies outside the file's {self.size} bytes")
        return layout.unpack_from(self.buf, at)[0]

    def table(self, cls: type, pos: int, what: str):
        """An instance of the generated class `cls` on the table at `pos`, after checking the table
        and its vtable (FlatBuffers' verifier: `VerifyTableStart`)."""
        if pos % 4:
            raise self.malformed(f"{what} at byte {pos} is not aligned")
        vtable = pos - self.unpack(_I32, pos, what)
        vsize = self.unpack(_U16, vtable, f"{what}'s vtable")
        tsize = self.unpack(_U16, vtable + 2, f"{what}'s vtable")
        if vsize < 4 or vsize % 2 or vtable + vsize > self.size:
            raise self.malformed(f"{what}'s vtable at byte {vtable} declares {vsize} bytes")
        if tsize < 4 or pos + tsize > self.size:
            raise self.malformed(f"{what} at byte {pos} declares {tsize} bytes, past the end of the file")
        for slot in range(4, vsize, 2):
            field = self.unpack(_U16, vtable + slot, f"{what}'s vtable")
            if field and not 4 <= field < tsize:
                raise self.malformed(
                    f"{what}: field {slot // 2 - 2} at offset {field} lies outside its {tsize} bytes"
                )
        obj = cls()
        obj.Init(self.buf, pos)
        return obj

    def field(self, parent, slot: int) -> int:
        """The absolute position of a field of a checked table (0: absent)."""
        tab = parent._tab
        offset = tab.Offset(slot)
        return tab.Pos + offset if offset else 0

    def target(self, parent, slot: int, what: str) -> int:
        """Where an offset field points (0: absent)."""
        at = self.field(parent, slot)
        return at + self.unpack(_U32, at, what) if at else 0

    def child(self, parent, slot: int, cls: type, what: str):
        at = self.target(parent, slot, what)
        return self.table(cls, at, what) if at else None

    def vector(self, parent, slot: int, item: int, what: str) -> tuple[int, int]:
        """(start, length) of a vector field, its declared length checked against the bytes after it."""
        at = self.target(parent, slot, what)
        if not at:
            return 0, 0
        length = self.unpack(_U32, at, f"{what}'s length")
        start = at + 4
        if length * item > self.size - start:
            raise self.malformed(
                f"{what} declares {length} entries ({length * item} bytes) at byte {start}; the file has "
                f"{max(self.size - start, 0)} bytes after it"
            )
        return start, length

    def tables(self, parent, slot: int, cls: type, what: str) -> list:
        start, length = self.vector(parent, slot, 4, what)
        return [
            self.table(cls, start + 4 * i + self.unpack(_U32, start + 4 * i, what), f"{what} {i}")
            for i in range(length)
        ]

    def numbers(self, parent, slot: int, dtype, what: str) -> np.ndarray:
        dtype = np.dtype(dtype).newbyteorder("<")
        start, length = self.vector(parent, slot, dtype.itemsize, what)
        return (
            np.frombuffer(self.buf, dtype=dtype, count=length, offset=start).copy()
            if length
            else np.zeros(0, dtype)
        )

    def string(self, parent, slot: int, what: str) -> str:
        start, length = self.vector(parent, slot, 1, what)
        return self.buf[start : start + length].decode("utf-8", errors="replace")


def _buffers(bounded: _Bounded, model) -> list[tuple[bytes | None, int]]:
    """Each buffer's bytes and where they start: inline (`data`) or, in files over 2 GB, at an
    `offset` and `size` after the flatbuffer; both checked against the file's size."""
    import tflite

    found = []
    for index, buffer in enumerate(bounded.tables(model, _MODEL_BUFFERS, tflite.Buffer, "buffer")):
        start, length = bounded.vector(buffer, _BUFFER_DATA, 1, f"buffer {index}'s data")
        offset, size = int(buffer.Offset()), int(buffer.Size())
        if offset > 1 or size:
            if offset + size > bounded.size:
                raise bounded.malformed(
                    f"buffer {index} declares {size} bytes at byte {offset}; the file has {bounded.size} bytes"
                )
            found.append((bounded.buf[offset : offset + size], offset))
        elif length:
            found.append((bounded.buf[start : start + length], start))
        else:
            found.append((None, -1))
    return found


def _quant(bounded: _Bounded, tensor, what: str) -> QuantParams | None:
    import tflite

    params = bounded.child(
        tensor, _TENSOR_QUANTIZATION, tflite.QuantizationParameters, f"{what}'s quantization"
    )
    if params is None:
        return None
    if params.DetailsType() != 0:
        raise InputError(
            f"{bounded.where}: {what} has custom quantization details, which qverify does not read"
        )
    scales = bounded.numbers(params, _QUANT_SCALE, np.float32, f"{what}'s scales")
    zeros = bounded.numbers(params, _QUANT_ZERO_POINT, np.int64, f"{what}'s zero points")
    if not scales.size and not zeros.size:
        return None
    return QuantParams(scales, zeros.astype(np.int64), int(params.QuantizedDimension()))


def _tensor(bounded: _Bounded, index: int, tensor, buffers) -> TfliteTensor:

    name = bounded.string(tensor, _TENSOR_NAME, f"tensor {index}'s name")
    what = f"tensor {index} '{name}'"
    if bounded.field(tensor, _TENSOR_SPARSITY):
        raise InputError(f"{bounded.where}: {what} is stored sparse, which qverify does not read")
    shape = tuple(int(v) for v in bounded.numbers(tensor, _TENSOR_SHAPE, np.int32, f"{what}'s shape"))
    if any(dim < 0 for dim in shape):
        raise InputError(f"{bounded.where}: {what} has a shape {list(shape)} with an unknown dimension")
    kind = int(tensor.Type())
    dtype = TENSOR_DTYPES.get(kind)
    check_tensor(shape, np.dtype(dtype).itemsize if dtype else 1, f"{bounded.where}: {what}")
    buffer = int(tensor.Buffer())
    if buffer >= len(buffers):
        raise InputError(
            f"{bounded.where}: {what} names buffer {buffer}; the file has {len(buffers)} buffers"
        )
    data, offset = buffers[buffer]
    quant = _quant(bounded, tensor, what)
    if quant is not None:
        _check_quant(quant, shape, f"{bounded.where}: tensor {index}", name)
    return TfliteTensor(index, name, kind, shape, buffer, quant, data, offset)


def _check_quant(quant: QuantParams, shape: tuple[int, ...], where: str, name: str) -> None:
    """The interpreter's checks of a tensor's affine quantization when it loads the model (as its
    messages state them): one scale, or one per slice along `quantized_dimension`; as many zero
    points as scales."""
    count = quant.scales.size
    if count > 1:
        if not 0 <= quant.axis < len(shape):
            raise InputError(
                f"{where} '{name}' has invalid quantization parameters: quantized_dimension {quant.axis} is "
                f"outside its shape {list(shape)}"
            )
        if shape[quant.axis] != count:
            raise InputError(
                f"{where} '{name}' has invalid quantization parameters: num_scales must be 1 for per-layer "
                f"quantization, or {shape[quant.axis]} for per-axis quantization, but got {count}"
            )
    if quant.zero_points.size != count:
        raise InputError(
            f"{where} '{name}' has invalid quantization parameters: {quant.zero_points.size} zero points for "
            f"{count} scales"
        )


def _indices(bounded: _Bounded, parent, slot: int, count: int, what: str, optional: bool) -> tuple[int, ...]:
    values = tuple(int(v) for v in bounded.numbers(parent, slot, np.int32, what))
    for value in values:
        if not (0 <= value < count or (optional and value == -1)):
            raise InputError(
                f"{bounded.where}: {what} names tensor {value}; the subgraph has {count} tensors"
            )
    return values


def _options(bounded: _Bounded, operator, what: str) -> tuple[int, object | None]:
    import tflite

    kind = int(operator.BuiltinOptionsType())
    if not kind:
        return 0, None
    names = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
    cls = getattr(tflite, names.get(kind, ""), None)
    if cls is None:
        return kind, None
    return kind, bounded.child(operator, _OPERATOR_OPTIONS, cls, f"{what}'s options")


def parse_tflite(buf: bytes, where: str) -> TfliteModel:
    """The checked records of a TFLite flatbuffer held in `buf` (module docstring)."""
    import tflite

    if len(buf) < 8:
        raise InputError(f"{where}: not a TFLite model ({len(buf)} bytes: too short for a flatbuffer)")
    if buf[4:8] != MAGIC:
        raise InputError(
            f"{where}: not a TFLite model (file identifier {bytes(buf[4:8])!r}, a .tflite file has {MAGIC!r})"
        )
    bounded = _Bounded(buf, where)
    try:
        model = bounded.table(tflite.Model, bounded.unpack(_U32, 0, "the root offset"), "the model")
        version = int(model.Version())
        subgraphs = bounded.tables(model, _MODEL_SUBGRAPHS, tflite.SubGraph, "subgraph")
        if not subgraphs:
            raise InputError(f"{where}: the TFLite model has no subgraph")
        codes = bounded.tables(model, _MODEL_OPERATOR_CODES, tflite.OperatorCode, "operator code")
        buffers = _buffers(bounded, model)
        graph = subgraphs[0]
        raw_tensors = bounded.tables(graph, _SUBGRAPH_TENSORS, tflite.Tensor, "tensor")
        tensors = tuple(_tensor(bounded, i, t, buffers) for i, t in enumerate(raw_tensors))
        count = len(tensors)
        operators = []
        for index, operator in enumerate(
            bounded.tables(graph, _SUBGRAPH_OPERATORS, tflite.Operator, "operator")
        ):
            what = f"operator {index}"
            opcode = int(operator.OpcodeIndex())
            if opcode >= len(codes):
                raise InputError(f"{where}: {what} names operator code {opcode}; the file has {len(codes)}")
            code = codes[opcode]
            builtin = max(int(code.BuiltinCode()), int(code.DeprecatedBuiltinCode()))
            custom = bounded.string(code, _OPCODE_CUSTOM, "a custom code") if builtin == 32 else ""
            kind, options = _options(bounded, operator, what)
            operators.append(
                TfliteOperator(
                    index,
                    builtin,
                    int(code.Version()),
                    custom,
                    _indices(bounded, operator, _OPERATOR_INPUTS, count, f"{what}'s inputs", True),
                    _indices(bounded, operator, _OPERATOR_OUTPUTS, count, f"{what}'s outputs", False),
                    kind,
                    options,
                )
            )
        inputs = _indices(bounded, graph, _SUBGRAPH_INPUTS, count, "the subgraph's inputs", False)
        outputs = _indices(bounded, graph, _SUBGRAPH_OUTPUTS, count, "the subgraph's outputs", False)
    except (struct.error, IndexError, OverflowError, ValueError) as error:
        if isinstance(error, InputError):
            raise
        raise bounded.malformed(str(error)) from None
    return TfliteModel(where, version, tensors, tuple(operators), inputs, outputs, len(subgraphs), len(buf))


def reshape_target(bounded_model: TfliteModel, operator: TfliteOperator) -> tuple[int, ...] | None:
    """RESHAPE's `new_shape` option (None when absent): read from the file's bytes again, checked."""
    if operator.options is None:
        return None
    bounded = _Bounded(operator.options._tab.Bytes, bounded_model.where)
    values = bounded.numbers(operator.options, _RESHAPE_NEW_SHAPE, np.int32, "RESHAPE's new_shape")
    return tuple(int(v) for v in values) if values.size else None


def read_tflite_file(path: str | Path) -> TfliteModel:
    """Read and check a `.tflite` file, or a gzipped `.tflite.gz` (its size against the input limit
    first; a compressed file decompressed within it)."""
    check_file(path)
    try:
        buf = read_bytes(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    return parse_tflite(buf, str(path))
