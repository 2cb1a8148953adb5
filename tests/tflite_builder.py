"""Small TFLite models written with the flatbuffers builder and the `tflite` schema package (no
TensorFlow): the tests' own int8 graphs, run in the LiteRT interpreter and read by qverify.

`ModelBuilder` collects tensors (activations, and constants with their bytes) and operators with
their options, then `finish()` writes the flatbuffer (file identifier TFL3, schema version 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import flatbuffers
import numpy as np
import tflite

INT8, INT32, FLOAT32 = tflite.TensorType.INT8, tflite.TensorType.INT32, tflite.TensorType.FLOAT32
_DTYPES = {INT8: np.int8, INT32: np.int32, FLOAT32: np.float32}


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    type: int
    scales: tuple[float, ...] = ()
    zero_points: tuple[int, ...] = ()
    axis: int = 0
    data: bytes | None = None


@dataclass
class _Operator:
    code: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options_type: int = 0
    options: dict = field(default_factory=dict)


class ModelBuilder:
    def __init__(self) -> None:
        self.tensors: list[_Tensor] = []
        self.operators: list[_Operator] = []
        self.inputs: tuple[int, ...] = ()
        self.outputs: tuple[int, ...] = ()

    def tensor(self, shape, type_=INT8, scale=None, zero_point=0, name=None) -> int:
        scales = tuple(np.atleast_1d(scale).astype(np.float32).tolist()) if scale is not None else ()
        zeros = tuple(np.broadcast_to(np.atleast_1d(zero_point), (len(scales),)).tolist()) if scales else ()
        self.tensors.append(_Tensor(name or f"t{len(self.tensors)}", tuple(shape), type_, scales, zeros))
        return len(self.tensors) - 1

    def constant(self, values: np.ndarray, type_=INT8, scale=None, zero_point=0, axis=0, name=None) -> int:
        values = np.asarray(values, dtype=_DTYPES[type_])
        index = self.tensor(values.shape, type_, scale, zero_point, name)
        self.tensors[index].axis = axis
        self.tensors[index].data = values.tobytes()
        return index

    def op(self, code: int, inputs, outputs, options_type: int = 0, **options) -> None:
        self.operators.append(_Operator(code, tuple(inputs), tuple(outputs), options_type, options))

    # -- writing -----------------------------------------------------------------------------------

    def _options(self, b: flatbuffers.Builder, operator: _Operator) -> int:
        names = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
        name = names[operator.options_type]
        module = getattr(tflite, name)
        vectors = {}
        for key, value in operator.options.items():
            if isinstance(value, (list, tuple)):
                vectors[key] = b.CreateNumpyVector(np.asarray(value, dtype=np.int32))
        getattr(tflite, f"{name}Start")(b)
        for key, value in operator.options.items():
            adder = getattr(tflite, f"{name}Add{key}")
            adder(b, vectors.get(key, value))
        del module
        return getattr(tflite, f"{name}End")(b)

    def finish(self) -> bytes:
        b = flatbuffers.Builder(4096)
        codes = sorted({op.code for op in self.operators})
        code_index = {code: i for i, code in enumerate(codes)}
        # buffers: 0 is the empty sentinel; each constant gets its own
        buffer_of, blobs = {}, [None]
        for index, tensor in enumerate(self.tensors):
            if tensor.data is not None:
                buffer_of[index] = len(blobs)
                blobs.append(tensor.data)
        buffer_offsets = []
        for blob in blobs:
            data = b.CreateNumpyVector(np.frombuffer(blob, dtype=np.uint8)) if blob else None
            tflite.BufferStart(b)
            if data is not None:
                tflite.BufferAddData(b, data)
            buffer_offsets.append(tflite.BufferEnd(b))
        tensor_offsets = []
        for index, tensor in enumerate(self.tensors):
            name = b.CreateString(tensor.name)
            shape = b.CreateNumpyVector(np.asarray(tensor.shape, dtype=np.int32))
            quant = None
            if tensor.scales:
                scales = b.CreateNumpyVector(np.asarray(tensor.scales, dtype=np.float32))
                zeros = b.CreateNumpyVector(np.asarray(tensor.zero_points, dtype=np.int64))
                tflite.QuantizationParametersStart(b)
                tflite.QuantizationParametersAddScale(b, scales)
                tflite.QuantizationParametersAddZeroPoint(b, zeros)
                tflite.QuantizationParametersAddQuantizedDimension(b, tensor.axis)
                quant = tflite.QuantizationParametersEnd(b)
            tflite.TensorStart(b)
            tflite.TensorAddShape(b, shape)
            tflite.TensorAddType(b, tensor.type)
            tflite.TensorAddBuffer(b, buffer_of.get(index, 0))
            tflite.TensorAddName(b, name)
            if quant is not None:
                tflite.TensorAddQuantization(b, quant)
            tensor_offsets.append(tflite.TensorEnd(b))
        operator_offsets = []
        for operator in self.operators:
            inputs = b.CreateNumpyVector(np.asarray(operator.inputs, dtype=np.int32))
            outputs = b.CreateNumpyVector(np.asarray(operator.outputs, dtype=np.int32))
            options = self._options(b, operator) if operator.options_type else None
            tflite.OperatorStart(b)
            tflite.OperatorAddOpcodeIndex(b, code_index[operator.code])
            tflite.OperatorAddInputs(b, inputs)
            tflite.OperatorAddOutputs(b, outputs)
            if options is not None:
                tflite.OperatorAddBuiltinOptionsType(b, operator.options_type)
                tflite.OperatorAddBuiltinOptions(b, options)
            operator_offsets.append(tflite.OperatorEnd(b))
        code_offsets = []
        for code in codes:
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddVersion(b, 1)
            code_offsets.append(tflite.OperatorCodeEnd(b))

        def table_vector(offsets):
            b.StartVector(4, len(offsets), 4)
            for offset in reversed(offsets):
                b.PrependUOffsetTRelative(offset)
            return b.EndVector()

        tensors_vector = table_vector(tensor_offsets)
        operators_vector = table_vector(operator_offsets)
        graph_inputs = b.CreateNumpyVector(np.asarray(self.inputs, dtype=np.int32))
        graph_outputs = b.CreateNumpyVector(np.asarray(self.outputs, dtype=np.int32))
        graph_name = b.CreateString("main")
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tensors_vector)
        tflite.SubGraphAddInputs(b, graph_inputs)
        tflite.SubGraphAddOutputs(b, graph_outputs)
        tflite.SubGraphAddOperators(b, operators_vector)
        tflite.SubGraphAddName(b, graph_name)
        subgraph = tflite.SubGraphEnd(b)
        subgraphs = table_vector([subgraph])
        codes_vector = table_vector(code_offsets)
        buffers_vector = table_vector(buffer_offsets)
        description = b.CreateString("qverify test model")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, codes_vector)
        tflite.ModelAddSubgraphs(b, subgraphs)
        tflite.ModelAddDescription(b, description)
        tflite.ModelAddBuffers(b, buffers_vector)
        model = tflite.ModelEnd(b)
        b.Finish(model, file_identifier=b"TFL3")
        return bytes(b.Output())


# -- the operators' option tables (schema.fbs) --------------------------------------------------------

OP = tflite.BuiltinOperator
OPTIONS = tflite.BuiltinOptions
ACT = tflite.ActivationFunctionType
SAME, VALID = tflite.Padding.SAME, tflite.Padding.VALID


def conv(m: ModelBuilder, x: int, weights, scales, bias, out: int, stride=1, padding=SAME, act=ACT.NONE):
    w = m.constant(weights, INT8, scales, 0, axis=0)
    in_scale = m.tensors[x].scales[0]
    bias_t = m.constant(bias, INT32, np.float32(in_scale) * np.asarray(scales, np.float32), 0, axis=0)
    m.op(
        OP.CONV_2D,
        (x, w, bias_t),
        (out,),
        OPTIONS.Conv2DOptions,
        Padding=padding,
        StrideW=stride,
        StrideH=stride,
        FusedActivationFunction=act,
        DilationWFactor=1,
        DilationHFactor=1,
    )


def conv_op(m: ModelBuilder, x: int, weights: int, bias: int, out: int, stride=1, padding=SAME, act=ACT.NONE):
    m.op(
        OP.CONV_2D,
        (x, weights, bias),
        (out,),
        OPTIONS.Conv2DOptions,
        Padding=padding,
        StrideW=stride,
        StrideH=stride,
        FusedActivationFunction=act,
        DilationWFactor=1,
        DilationHFactor=1,
    )


def depthwise(m: ModelBuilder, x: int, weights, scales, bias, out: int, stride=1, padding=SAME, act=ACT.NONE):
    w = m.constant(weights, INT8, scales, 0, axis=3)
    in_scale = m.tensors[x].scales[0]
    bias_t = m.constant(bias, INT32, np.float32(in_scale) * np.asarray(scales, np.float32), 0, axis=0)
    m.op(
        OP.DEPTHWISE_CONV_2D,
        (x, w, bias_t),
        (out,),
        OPTIONS.DepthwiseConv2DOptions,
        Padding=padding,
        StrideW=stride,
        StrideH=stride,
        DepthMultiplier=weights.shape[3] // m.tensors[x].shape[3],
        FusedActivationFunction=act,
        DilationWFactor=1,
        DilationHFactor=1,
    )


def dense(m: ModelBuilder, x: int, weights, scales, bias, out: int, act=ACT.NONE):
    w = m.constant(weights, INT8, scales, 0, axis=0)
    in_scale = m.tensors[x].scales[0]
    bias_t = m.constant(bias, INT32, np.float32(in_scale) * np.asarray(scales, np.float32), 0, axis=0)
    m.op(
        OP.FULLY_CONNECTED, (x, w, bias_t), (out,), OPTIONS.FullyConnectedOptions, FusedActivationFunction=act
    )


def add(m: ModelBuilder, a: int, b: int, out: int, act=ACT.NONE):
    m.op(OP.ADD, (a, b), (out,), OPTIONS.AddOptions, FusedActivationFunction=act)


def pool(m: ModelBuilder, code: int, x: int, out: int, size=2, stride=2, padding=VALID):
    m.op(
        code,
        (x,),
        (out,),
        OPTIONS.Pool2DOptions,
        Padding=padding,
        StrideW=stride,
        StrideH=stride,
        FilterWidth=size,
        FilterHeight=size,
        FusedActivationFunction=ACT.NONE,
    )


def mean(m: ModelBuilder, x: int, out: int, keep_dims=True):
    axes = m.constant(np.array([1, 2], dtype=np.int32), INT32)
    m.op(OP.MEAN, (x, axes), (out,), OPTIONS.ReducerOptions, KeepDims=keep_dims)


def pad(m: ModelBuilder, x: int, amounts, out: int):
    paddings = m.constant(np.asarray(amounts, dtype=np.int32), INT32)
    m.op(OP.PAD, (x, paddings), (out,), OPTIONS.PadOptions)


def reshape(m: ModelBuilder, x: int, out: int):
    shape = m.constant(np.asarray(m.tensors[out].shape, dtype=np.int32), INT32)
    m.op(OP.RESHAPE, (x, shape), (out,), OPTIONS.ReshapeOptions)


def transpose(m: ModelBuilder, x: int, perm, out: int):
    permutation = m.constant(np.asarray(perm, dtype=np.int32), INT32)
    m.op(OP.TRANSPOSE, (x, permutation), (out,), OPTIONS.TransposeOptions)


def concat(m: ModelBuilder, inputs, out: int, axis=3):
    m.op(
        OP.CONCATENATION,
        tuple(inputs),
        (out,),
        OPTIONS.ConcatenationOptions,
        Axis=axis,
        FusedActivationFunction=ACT.NONE,
    )
