"""Network level: `lift_file`: a C harness to a `NetworkQuery`, or the reason it is not recognised.

Stages (each timed in `LiftResult.times_s`):
- read: the file, bounded by `qverify.input_limits`;
- arrays: every `static const` initialiser cut out and read by `lift.arrays` (regex + numpy);
- parse: one `gcc -E -dD` of the rest (`lift.preprocess`) and pycparser on the small skeleton;
- match: the skeleton checked against the generated structure (`lift.layers`, `lift.harness`) and
  the `NetworkQuery` built from the arrays.

A harness declined after the parse (a lookup-table activation, say) keeps what was read
(`LiftResult.parsed`): the scalar front end takes that tree instead of preprocessing and parsing
the file a second time.
"""

from __future__ import annotations

import copy
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pycparser import c_ast, c_generator

from qverify.engine.cfront import parse_text
from qverify.engine.netlevel.lift.arrays import ConstArray, extract_arrays, initialiser
from qverify.engine.netlevel.lift.cnodes import fail, index_ref, integer_constant, type_names
from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.engine.netlevel.lift.harness import InputDomain, match_main
from qverify.engine.netlevel.lift.inputs import MARKER, InputBlock, extract_inputs
from qverify.engine.netlevel.lift.int8 import CODE_TYPES, check_int8_arrays, int8_network, match_int8_layer
from qverify.engine.netlevel.lift.joins import (
    JoinLoop,
    is_concat_part,
    is_join,
    match_add,
    match_concat,
    match_permute,
)
from qverify.engine.netlevel.lift.joins8 import (
    is_int8_add,
    is_int8_concat_part,
    match_int8_add,
    match_int8_concat,
)
from qverify.engine.netlevel.lift.layers import Arith, LayerLoop, fresh, match_layer
from qverify.engine.netlevel.lift.lut import LUT_ACTIVATIONS, check_tables, match_lut
from qverify.engine.netlevel.lift.preprocess import Preprocessed, preprocess_skeleton
from qverify.engine.netlevel.lift.spatial import SpatialLoop, is_spatial, match_spatial
from qverify.engine.netlevel.query import Arithmetic, InputRegion, NetworkQuery
from qverify.errors import InputError, RangeError
from qverify.input_limits import check_file
from qverify.network import NETWORK_INPUT, Dense, Network
from qverify.quant import (
    Accumulation,
    FixedFormat,
    FloatFormat,
    FloatKind,
    ImplementationOptions,
    Int8Format,
    LayerBounds,
    Layout,
    Lut,
    Overflow,
    QuantizedLayer,
    QuantizedNetwork,
    Rounding,
)
from qverify.quant.network import check_wide_accumulator

_ROUNDING = {"QV_ROUND_NEAREST": Rounding.NEAREST, "QV_ROUND_FLOOR": Rounding.FLOOR}
_OVERFLOW = {
    "QV_OVERFLOW_WRAP": Overflow.WRAP,
    "QV_OVERFLOW_SATURATE": Overflow.SATURATE,
    "QV_OVERFLOW_DETECT": Overflow.DETECT,
}
_INTEGER_MACROS = ("QV_K", "QV_L", "QV_N_INPUTS", "QV_N_OUTPUTS", "QV_HARNESS")
_NUMBER_TYPES = {("float",): FloatKind.FLOAT, ("double",): FloatKind.DOUBLE, ("qv_half",): FloatKind.HALF}
_RELU_TEXT = "inline static qv_num qv_relu(qv_num x)\n{\n  return (x < 0) ? (0) : (x);\n}\n\n"
_RELU6_TEXT = re.compile(
    r"inline static qv_num qv_relu6\(qv_num x\)\n\{\n  return \(x < 0\) \? \(0\) : "
    r"\(\(x > ([0-9A-Fa-fx.p+\-]+f?)\) \? \(([0-9A-Fa-fx.p+\-]+f?)\) : \(x\)\);\n\}\n\n"
)
INT32_RANGE = (-(1 << 31), (1 << 31) - 1)


@dataclass(frozen=True, slots=True, eq=False)
class ParsedHarness:
    """A harness as the lifter parsed it: pycparser's tree of the skeleton (the text without its
    array initialisers and with its run of input lines replaced by one marker statement), the
    arrays as read and the input lines as written."""

    ast: c_ast.FileAST
    arrays: dict[str, ConstArray]
    inputs: InputBlock | None

    def tree(self) -> c_ast.FileAST:
        """The whole file's tree, as pycparser parses the file: each array declaration with its
        initialiser (`lift.arrays.initialiser`), the input lines in place of the marker (parsed
        alone, at their lines). The skeleton's tree is not changed."""
        items = []
        for ext in self.ast.ext:
            if isinstance(ext, c_ast.Decl) and ext.init is None and ext.name in self.arrays:
                declared = copy.copy(ext)
                declared.init = initialiser(self.arrays[ext.name], ext.coord)
                items.append(declared)
            elif isinstance(ext, c_ast.FuncDef) and self.inputs is not None and _marker_in(ext):
                items.append(_with_input_lines(ext, self.inputs))
            else:
                items.append(ext)
        return c_ast.FileAST(items, self.ast.coord)


def _is_marker(node: c_ast.Node) -> bool:
    return isinstance(node, c_ast.FuncCall) and isinstance(node.name, c_ast.ID) and node.name.name == MARKER


def _marker_in(function: c_ast.FuncDef) -> bool:
    return any(_is_marker(node) for node in _walk(function))


def _walk(node: c_ast.Node):
    yield node
    for _, child in node.children():
        yield from _walk(child)


def _with_input_lines(function: c_ast.FuncDef, inputs: InputBlock) -> c_ast.FuncDef:
    """A copy of `function` with its marker statement replaced by the input lines' statements."""
    function = copy.deepcopy(function)
    for node in _walk(function):
        if isinstance(node, c_ast.Compound) and any(_is_marker(item) for item in node.block_items or ()):
            marker = next(item for item in node.block_items if _is_marker(item))
            coord = marker.coord
            text = f'void {MARKER}_lines(void) {{\n# {coord.line} "{coord.file}"\n{inputs.text}}}\n'
            lines = parse_text(text, coord.file).ext[0].body.block_items or []
            at = node.block_items.index(marker)
            node.block_items[at : at + 1] = lines
            break
    return function


@dataclass(frozen=True, slots=True, eq=False)
class LiftResult:
    """Either `query` (the harness lifted) or `reason` (why not: the caller falls back to the scalar
    front end), and the seconds spent per stage (read, arrays, parse, match); `parsed`, when the
    harness was parsed, is its tree for the scalar front end (which takes it when the lifter
    declined, and when the network level does not cover what was lifted)."""

    query: NetworkQuery | None
    reason: str
    times_s: dict[str, float] = field(default_factory=dict)
    parsed: ParsedHarness | None = None

    @property
    def lifted(self) -> bool:
        return self.query is not None


@dataclass(frozen=True, slots=True, eq=False)
class _Skeleton:
    """The harness file's own top-level pieces, by kind."""

    number_type: tuple[str, ...]
    arrays: dict[str, c_ast.Decl]
    functions: dict[str, c_ast.FuncDef]


def _macros(pre: Preprocessed, harness: str) -> dict[str, str]:
    """The harness's own macros: only the ones the templates write, each defined once."""
    values: dict[str, str] = {}
    for event in pre.macros:
        where = f"{harness}:{event.line}"
        if event.kind != "define" or event.name in values:
            raise NotRecognised(
                f"{where}: #{event.kind} {event.name} (only single definitions are recognised)"
            )
        allowed = (
            (event.name in _INTEGER_MACROS and integer_text(event.value))
            or (event.name == "QV_ROUNDING" and event.value in _ROUNDING)
            or (event.name == "QV_OVERFLOW" and event.value in _OVERFLOW)
        )
        if not allowed:
            raise NotRecognised(f"{where}: macro {event.name} {event.value!r} not recognised")
        values[event.name] = event.value
    return values


def integer_text(text: str) -> bool:
    return text.isdigit() and (text == "0" or not text.startswith("0"))


def _skeleton(ast: c_ast.FileAST, harness: str, extracted: dict[str, ConstArray]) -> _Skeleton:
    number_type: tuple[str, ...] | None = None
    arrays: dict[str, c_ast.Decl] = {}
    functions: dict[str, c_ast.FuncDef] = {}
    for ext in ast.ext:
        if ext.coord is None or ext.coord.file != harness:
            continue  # the shipped headers (checked byte for byte)
        if isinstance(ext, c_ast.Typedef) and ext.name == "qv_num" and number_type is None:
            number_type = type_names(ext.type)
            if number_type is None:
                raise fail(ext, "qv_num is not a scalar type")
        elif isinstance(ext, c_ast.Decl) and ext.name in extracted and ext.init is None:
            if ext.storage != ["static"] or "const" not in (ext.quals or []):
                raise fail(ext, f"{ext.name} is not a static const array")
            arrays[ext.name] = ext
        elif isinstance(ext, c_ast.FuncDef) and ext.decl.name in (
            "qv_relu",
            "qv_relu6",
            "qv_network",
            "main",
            *LUT_ACTIVATIONS,
        ):
            if ext.decl.name in functions:
                raise fail(ext, f"{ext.decl.name} defined twice")
            functions[ext.decl.name] = ext
        else:
            name = getattr(ext, "name", None) or getattr(getattr(ext, "decl", None), "name", "?")
            raise fail(ext, f"top-level declaration of {name} not recognised")
    if number_type is None:
        raise NotRecognised(f"{harness}: no typedef of qv_num")
    for name in ("qv_network", "main"):
        if name not in functions:
            raise NotRecognised(f"{harness}: no function {name}")
    if "qv_relu" in functions:
        text = c_generator.CGenerator().visit(functions["qv_relu"])
        if text != _RELU_TEXT:
            raise fail(functions["qv_relu"], "qv_relu is not the template's `return x < 0 ? 0 : x;`")
    return _Skeleton(number_type, arrays, functions)


def _check_relu6(function: c_ast.FuncDef | None, number, network: c_ast.Node) -> None:
    """qv_relu6 is the template's `x < 0 ? 0 : (x > TOP ? TOP : x)` with TOP 6 in the format's units
    (a word 6 * 2^l in fixed point, the float literal 6 otherwise)."""
    if function is None:
        raise fail(network, "qv_relu6 is called but not defined in the harness")
    found = _RELU6_TEXT.fullmatch(c_generator.CGenerator().visit(function))
    if found is None or found.group(1) != found.group(2):
        raise fail(function, "qv_relu6 is not the template's `return x < 0 ? 0 : (x > TOP ? TOP : x);`")
    literal = found.group(1)
    try:
        value = (
            int(literal) / number.scale
            if isinstance(number, FixedFormat)
            else float.fromhex(literal.rstrip("fF"))
        )
    except ValueError:
        raise fail(function, f"qv_relu6's top {literal} is not a number literal") from None
    if value != 6.0:
        raise fail(function, f"qv_relu6 clamps at {value:g}, not 6")


def _options(
    skeleton: _Skeleton, pre: Preprocessed, macros: dict[str, str], where: str
) -> ImplementationOptions:
    """The number format from qv_num's type, the headers included and the fxp.h macros."""
    number_type = skeleton.number_type
    if "int8.h" in pre.headers or number_type in CODE_TYPES:
        if number_type not in CODE_TYPES or pre.headers != {"int8.h", "verifier.h"}:
            raise NotRecognised(
                f"{where}: int8 harness with qv_num {number_type}, headers {sorted(pre.headers)}"
            )
        return ImplementationOptions(Int8Format())  # (the tables are read; the mode only made them)
    if number_type == ("fxp_t",):
        if pre.headers != {"fxp.h", "verifier.h"}:
            raise NotRecognised(f"{where}: fixed-point harness with headers {sorted(pre.headers)}")
        try:
            number = FixedFormat(
                int(macros["QV_K"]),
                int(macros["QV_L"]),
                _ROUNDING[macros["QV_ROUNDING"]],
                _OVERFLOW[macros["QV_OVERFLOW"]],
            )
        except KeyError as error:
            raise NotRecognised(f"{where}: fixed-point macro {error} missing") from error
        return ImplementationOptions(number)
    kind = _NUMBER_TYPES.get(number_type)
    expected = {"half.h", "verifier.h"} if kind is FloatKind.HALF else {"verifier.h"}
    if kind is None or pre.headers != expected:
        raise NotRecognised(f"{where}: qv_num is {' '.join(number_type)} with headers {sorted(pre.headers)}")
    return ImplementationOptions(FloatFormat(kind))


def _array_dims(decl: c_ast.Decl) -> tuple[tuple[int, ...], tuple[str, ...] | None]:
    dims = []
    node = decl.type
    while isinstance(node, c_ast.ArrayDecl):
        dims.append(integer_constant(node.dim) if node.dim is not None else -1)
        node = node.type
    return tuple(dims), type_names(node)


def _network_locals(function: c_ast.FuncDef) -> tuple[dict[str, int], set[str], list[c_ast.Node], tuple]:
    """qv_network's parameters, local arrays and loop variables, and its loops."""
    result = function.decl.type.type
    if type_names(result) != ("void",) or function.param_decls:
        raise fail(function, "qv_network is not `void qv_network(const qv_num x[..], qv_num y[..])`")
    params = function.decl.type.args.params if function.decl.type.args else []
    if len(params) != 2:
        raise fail(function, "qv_network does not take (x, y)")
    arrays: dict[str, int] = {}
    for param in params:
        dims, names = _array_dims(param)
        if len(dims) != 1 or names != ("qv_num",) or dims[0] is None or dims[0] <= 0:
            raise fail(param, "qv_network parameter is not a qv_num array")
        arrays[param.name] = dims[0]
    x_const = "const" in (params[0].type.type.quals or [])
    if not x_const or "const" in (params[1].type.type.quals or []):
        raise fail(function, "qv_network's input must be const, its output not")
    loop_vars: set[str] = set()
    items = list(function.body.block_items or [])
    position = 0
    while position < len(items) and isinstance(items[position], c_ast.Decl):
        decl = items[position]
        if decl.init is not None or decl.storage or decl.name in arrays or decl.name in loop_vars:
            raise fail(decl, f"local {decl.name} of qv_network not recognised")
        dims, names = _array_dims(decl)
        if dims and len(dims) == 1 and names == ("qv_num",) and dims[0] is not None and dims[0] > 0:
            arrays[decl.name] = dims[0]
        elif not dims and names == ("int",):
            loop_vars.add(decl.name)
        else:
            raise fail(decl, f"local {decl.name} of qv_network not recognised")
        position += 1
    return arrays, loop_vars, items[position:], (params[0].name, params[1].name)


def _values(array: ConstArray, options: ImplementationOptions, where: str) -> np.ndarray:
    """An array's values in the implementation's domain, checked against qv_num's range."""
    number = options.number
    if isinstance(number, Int8Format):
        if not array.integer or array.values.min() < INT32_RANGE[0] or array.values.max() > INT32_RANGE[1]:
            raise NotRecognised(f"{where}: {array.name} holds a constant that is not an int32 integer")
        return array.values
    if isinstance(number, FixedFormat):
        if not array.integer:
            raise NotRecognised(f"{where}: {array.name} holds floating literals in a fixed-point harness")
        if array.values.min() < number.min_q or array.values.max() > number.max_q:
            raise NotRecognised(f"{where}: {array.name} holds a constant outside the words of {number}")
        return array.values
    dtype = number.dtype
    if array.integer:
        raise NotRecognised(f"{where}: {array.name} holds integer literals in a float harness")
    converted = array.values.astype(dtype)
    if not np.array_equal(converted.astype(np.float64), array.values):
        raise NotRecognised(
            f"{where}: {array.name} holds a literal that {number.c_type} does not hold exactly"
        )
    return converted


def _layer_bounds(
    loops: list[LayerLoop], arrays: dict[str, np.ndarray], fixed: bool, where: str
) -> tuple[LayerBounds, ...] | None:
    present = [loop.pre_bounds is not None and loop.out_bounds is not None for loop in loops]
    if not any(present) and all(loop.pre_bounds is None and loop.out_bounds is None for loop in loops):
        return None
    if not all(present):
        raise NotRecognised(f"{where}: invariants assumed for some layers or sides only")
    result = []
    for loop in loops:
        names = (*loop.pre_bounds, *loop.out_bounds)  # type: ignore[misc]
        vectors = [arrays[name] for name in names]
        if any(vector.shape != (loop.n_out,) for vector in vectors):
            raise NotRecognised(f"{loop.line}: invariant arrays are not of length {loop.n_out}")
        may_overflow = np.full(loop.n_out, fixed)  # not stated by the C: unknown, so "may" for fixed point
        result.append(LayerBounds(*vectors, may_overflow))
    return tuple(result)


def _loops(
    nodes: list[c_ast.Node],
    arith: Arith,
    loop_vars: set[str],
    forbidden: set[str],
    readable: set[str],
    int_arrays: set[str],
) -> list:
    """qv_network's statements as layer and join loops (a concatenation spans several)."""
    loops: list = []
    position = 0
    while position < len(nodes):
        node = nodes[position]
        if is_concat_part(node):
            loop, taken = match_concat(nodes[position:], loop_vars, forbidden)
            loops.append(loop)
            position += taken
            continue
        if is_join(node, readable):
            if _reads_through_table(node):
                loops.append(match_permute(node, loop_vars, forbidden, int_arrays))
            else:
                loops.append(match_add(node, arith, loop_vars, forbidden, {}))
        elif is_spatial(node):
            loops.append(match_spatial(node, arith, loop_vars, forbidden))
        else:
            loops.append(match_layer(node, arith, loop_vars, forbidden))
        position += 1
    return loops


def _int8_loops(
    nodes: list[c_ast.Node],
    loop_vars: set[str],
    forbidden: set[str],
    readable: set[str],
    int_arrays: set[str],
) -> list:
    """An int8 qv_network's statements as layer and join loops: MAC layers and pools
    (`lift.int8`, `lift.spatial`), joins that requantize (`lift.joins8`) and joins that copy codes
    (`lift.joins`)."""
    loops: list = []
    position = 0
    while position < len(nodes):
        node = nodes[position]
        for is_part, match in ((is_int8_concat_part, match_int8_concat), (is_concat_part, match_concat)):
            if is_part(node):
                loop, taken = match(nodes[position:], loop_vars, forbidden)
                loops.append(loop)
                position += taken
                break
        else:
            if is_int8_add(node):
                loops.append(match_int8_add(node, loop_vars, forbidden))
            elif is_join(node, readable) and _reads_through_table(node):
                loops.append(match_permute(node, loop_vars, forbidden, int_arrays))
            elif is_spatial(node):
                loops.append(match_spatial(node, Arith("int8"), loop_vars, forbidden))
            else:
                loops.append(match_int8_layer(node, loop_vars, forbidden))
            position += 1
    return loops


def _reads_through_table(node: c_ast.For) -> bool:
    """Does the join loop start from IN[P[j]] (a permutation) rather than A[j]?"""
    first = node.stmt.block_items[0] if isinstance(node.stmt, c_ast.Compound) else node.stmt
    ref = index_ref(first.init) if isinstance(first, c_ast.Decl) and first.init is not None else None
    return ref is not None and len(ref[1]) == 1 and isinstance(ref[1][0], c_ast.ArrayRef)


def _network(
    path: Path,
    loops: list,
    arrays: dict[str, np.ndarray],
    options: ImplementationOptions,
    luts: tuple[Lut, ...] = (),
    wiring: tuple[tuple[int, ...], ...] = (),
) -> QuantizedNetwork:
    layers = []
    sources = []
    scale = options.number.scale if isinstance(options.number, FixedFormat) else 1
    for loop in loops:
        if isinstance(loop, JoinLoop):
            source = loop.source(arrays)
            empty = np.zeros(0)
            sources.append(source)
            layers.append(QuantizedLayer(empty, empty, source.activation, source))
            continue
        if isinstance(loop, SpatialLoop):
            layer = loop.layer(arrays, scale)
            sources.append(layer.source)
            layers.append(layer)
            continue
        weights, bias = arrays[loop.weights], arrays[loop.bias]
        if weights.shape != (loop.n_out, loop.n_in) or bias.shape != (loop.n_out,):
            raise NotRecognised(
                f"{loop.line}: {loop.weights} {list(weights.shape)} / {loop.bias} {list(bias.shape)} do not "
                f"match the loops ({loop.n_out} neurons, {loop.n_in} inputs)"
            )
        source = Dense(weights.astype(np.float64) / scale, bias.astype(np.float64) / scale, loop.activation)
        sources.append(source)
        layers.append(QuantizedLayer(weights, bias, loop.activation, source))
    try:
        net = Network(tuple(sources), name=f"lifted {path.name}", source=str(path), wiring=wiring)
    except InputError as error:
        raise NotRecognised(f"{path}: the layers do not form a network ({error})") from error
    return QuantizedNetwork(source=net, options=options, layers=tuple(layers), luts=luts)


def _luts(
    skeleton: _Skeleton,
    loops: list,
    arrays: dict[str, np.ndarray],
    number: FixedFormat | FloatFormat,
    where: str,
) -> tuple[Lut, ...]:
    """The tables of the activations the layers apply (in `quantize_network`'s order), read back."""
    used = {loop.activation for loop in loops if f"qv_{loop.activation.value}" in LUT_ACTIVATIONS}
    check_tables(skeleton.functions, used, where)
    luts = []
    for activation in sorted(used, key=str):
        name = f"qv_{activation.value}"
        if f"{name}_table" not in arrays:
            raise NotRecognised(f"{where}: {name} has no table {name}_table")
        luts.append(match_lut(skeleton.functions[name], arrays[f"{name}_table"], number))
    return tuple(luts)


@dataclass(frozen=True, slots=True, eq=False)
class _Read:
    """The harness parsed: its arrays, its run of input assumes read as text (None: none was taken
    out of the skeleton), the preprocessor's findings and the skeleton's tree."""

    arrays: dict[str, ConstArray]
    inputs: InputBlock | None
    pre: Preprocessed
    ast: c_ast.FileAST


def _read(path: Path, include_dirs: Sequence[Path], times: dict[str, float]) -> _Read:
    start = time.perf_counter()
    check_file(path)
    try:
        text = path.read_text()
    except FileNotFoundError as error:
        raise InputError(f"{path}: no such file") from error
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot be read as text ({error})") from error
    if "??" in text:
        raise NotRecognised(f"{path}: '??' (a trigraph under -std=c99) is not recognised")
    times["read"] = time.perf_counter() - start

    start = time.perf_counter()
    extraction = extract_arrays(text, str(path))
    skeleton, inputs = extract_inputs(extraction.skeleton)
    times["arrays"] = time.perf_counter() - start

    start = time.perf_counter()
    pre = preprocess_skeleton(skeleton, path, include_dirs)
    ast = parse_text(pre.text, str(path))
    times["parse"] = time.perf_counter() - start
    return _Read(extraction.arrays, inputs, pre, ast)


def _match(
    path: Path,
    extracted: dict[str, ConstArray],
    inputs: InputBlock | None,
    pre: Preprocessed,
    ast: c_ast.FileAST,
    semantics: Arithmetic,
) -> NetworkQuery:
    where = str(path)
    macros = _macros(pre, where)
    skeleton = _skeleton(ast, where, extracted)
    options = _options(skeleton, pre, macros, where)
    number = options.number
    fixed = isinstance(number, FixedFormat)
    int8 = isinstance(number, Int8Format)
    arrays: dict[str, np.ndarray] = {}
    element_types: dict[str, tuple[str, ...] | None] = {}
    int_arrays: set[str] = set()  # index tables (a permutation's), kept as they are
    for name, decl in skeleton.arrays.items():
        dims, element = _array_dims(decl)
        array = extracted[name]
        if element == ("int",) and dims == array.shape and array.integer and len(dims) == 1:
            arrays[name] = array.values.astype(np.int64)
            int_arrays.add(name)
            element_types[name] = element
            continue
        if dims != array.shape or (element != ("qv_num",) and not int8):
            raise fail(decl, f"{name}: declaration does not match its initialiser")
        arrays[name] = _values(array, options, f"{where}:{array.line}")
        element_types[name] = element
    if set(arrays) != set(extracted):
        missing = sorted(set(extracted) - set(arrays))
        raise NotRecognised(f"{where}: arrays {missing} are not top-level declarations of the harness")

    network = skeleton.functions["qv_network"]
    local_arrays, loop_vars, loops_nodes, (x_name, y_name) = _network_locals(network)
    globals_ = set(arrays) | set(skeleton.functions)
    for name in (*local_arrays, *loop_vars):
        if not fresh(name, globals_):
            raise fail(network, f"local {name} of qv_network shadows a global or helper name")
    forbidden = globals_ | set(local_arrays)
    if int8:
        if "qv_sat16" in skeleton.functions:
            raise fail(
                skeleton.functions["qv_sat16"],
                "int8-x86 pair sums saturated at int16 (qv_sat16) are not lifted: the scalar path decides them",
            )
        check_tables(skeleton.functions, set(), where)
        loops8 = _int8_loops(loops_nodes, loop_vars, forbidden, {x_name, *local_arrays}, int_arrays)
        if not loops8:
            raise fail(network, "qv_network has no layer loop")
        wiring = _check_graph(loops8, local_arrays, x_name, y_name, arrays)
        check_int8_arrays(loops8, arrays, element_types)
        qnet = int8_network(path, loops8, arrays, CODE_TYPES[skeleton.number_type], wiring)
        invariants = _layer_bounds(loops8, arrays, False, where)  # type: ignore[arg-type]
        return _query(path, skeleton, inputs, qnet, local_arrays, (x_name, y_name), invariants, semantics)
    arith = Arith("fixed", number.frac_bits) if fixed else Arith("half" if number.is_half else "float")
    loops = _loops(loops_nodes, arith, loop_vars, forbidden, {x_name, *local_arrays}, int_arrays)
    if not loops:
        raise fail(network, "qv_network has no layer loop")
    wiring = _check_graph(loops, local_arrays, x_name, y_name, arrays)
    if "qv_relu" not in skeleton.functions and any(loop.activation.value == "relu" for loop in loops):
        raise fail(network, "qv_relu is called but not defined in the harness")
    if any(loop.activation.value == "relu6" for loop in loops):
        _check_relu6(skeleton.functions.get("qv_relu6"), number, network)
    accumulations = {loop.accumulation for loop in loops if loop.accumulation is not None}
    layouts = {loop.layout for loop in loops if loop.layout is not None}
    if len(accumulations) > 1 or len(layouts) > 1:
        raise fail(network, "layers mix accumulations or layouts (one implementation option for all)")
    accumulation = accumulations.pop() if accumulations else Accumulation.PER_OP
    options = ImplementationOptions(number, accumulation, layouts.pop() if layouts else Layout.SEQUENTIAL)
    luts = _luts(skeleton, loops, arrays, number, where)
    qnet = _network(path, loops, arrays, options, luts, wiring)
    if fixed and options.accumulation is Accumulation.WIDE:
        try:
            check_wide_accumulator(qnet.layers, number)
        except RangeError as error:
            raise NotRecognised(f"{where}: {error}") from error
    invariants = _layer_bounds(loops, arrays, fixed, where)
    return _query(path, skeleton, inputs, qnet, local_arrays, (x_name, y_name), invariants, semantics)


def _query(
    path: Path,
    skeleton: _Skeleton,
    inputs: InputBlock | None,
    qnet: QuantizedNetwork,
    local_arrays: dict[str, int],
    names: tuple[str, str],
    invariants: tuple[LayerBounds, ...] | None,
    semantics: Arithmetic,
) -> NetworkQuery:
    """The query of `main` (input boxes, unsafe clauses) on the lifted network."""
    x_name, y_name = names
    number = qnet.number
    fixed = isinstance(number, FixedFormat)
    if fixed:
        domain = InputDomain(True, *INT32_RANGE)
        nondet = "nondet_int"
        words: tuple[int, int] | None = (number.word_bits, number.frac_bits)
    elif isinstance(number, Int8Format):
        code = qnet.input_quant.code
        domain = InputDomain(True, code.qmin, code.qmax)
        nondet = "nondet_char" if code.qmin < 0 else "nondet_uchar"
        words = (9, 0)  # codes (|y| < 2^8) compared as they are: atoms over codes
    else:
        domain = InputDomain(False, dtype=number.dtype)
        nondet = "nondet_half" if number.is_half else f"nondet_{number.c_type}"
        words = None
    main = match_main(skeleton.functions["main"], nondet, domain, words, inputs)
    if main.n_inputs != qnet.n_inputs or main.n_outputs != qnet.n_outputs:
        raise fail(skeleton.functions["main"], "main's input/output arrays do not match the network's sizes")
    if main.n_inputs != local_arrays[x_name] or main.n_outputs != local_arrays[y_name]:
        raise fail(skeleton.functions["main"], "main's arrays and qv_network's parameters differ in length")
    regions = []
    for lo, hi in main.regions:
        if fixed and (lo.min() < number.min_q or hi.max() > number.max_q):
            raise fail(skeleton.functions["main"], f"an input can be outside the words of {number}")
        if isinstance(number, Int8Format) and (lo.min() < domain.lo or hi.max() > domain.hi):
            raise fail(skeleton.functions["main"], "an input bound lies outside the input codes")
        regions.append(InputRegion(lo, hi))
    return NetworkQuery(qnet, tuple(regions), main.unsafe, semantics, invariants, main.messages)


def _check_graph(
    loops: list,
    local_arrays: dict[str, int],
    x_name: str,
    y_name: str,
    constants: dict[str, np.ndarray],
) -> tuple[tuple[int, ...], ...]:
    """Every loop reads x or what an earlier loop wrote, writes a fresh local array (the last one,
    y), with the arrays' lengths; its wiring (`qverify.network.Network.wiring`)."""
    writer: dict[str, int] = {x_name: NETWORK_INPUT}
    wiring = []
    for index, loop in enumerate(loops):
        last = index == len(loops) - 1
        inputs = getattr(loop, "inputs", (loop.input,))
        sizes = getattr(loop, "input_sizes", (loop.n_in,))
        for name, size in zip(inputs, sizes):
            if name not in writer:
                raise NotRecognised(f"{loop.line}: layer reads {name}, which no earlier layer writes")
            if local_arrays[name] != size:
                raise NotRecognised(f"{loop.line}: array lengths do not match the loop bounds")
        if loop.output in writer or loop.output not in local_arrays:
            raise NotRecognised(f"{loop.line}: layer writes {loop.output}, not a fresh local array")
        if (loop.output == y_name) != last:
            raise NotRecognised(f"{loop.line}: only the last layer may write {y_name}")
        if local_arrays[loop.output] != loop.n_out:
            raise NotRecognised(f"{loop.line}: array lengths do not match the loop bounds")
        for name in loop.constant_names():
            if name not in constants:
                raise NotRecognised(f"{loop.line}: {name} is not a constant array of the harness")
        wiring.append(tuple(writer[name] for name in inputs))
        writer[loop.output] = index
    return tuple(wiring)


def lift_file(
    path: Path, include_dirs: Sequence[Path] = (), semantics: Arithmetic = Arithmetic.IMPLEMENTATION
) -> LiftResult:
    """The harness at `path` as a `NetworkQuery`, or the reason it is not recognised.

    Errors of the input itself (missing file, preprocessor failure, syntax error) are raised as
    `InputError`, as the scalar front end raises them; anything well-formed that is not the
    recognised structure is a `reason`.
    """
    times: dict[str, float] = {}
    path = Path(path)
    read: _Read | None = None
    try:
        read = _read(path, include_dirs, times)
        start = time.perf_counter()
        query = _match(path, read.arrays, read.inputs, read.pre, read.ast, semantics)
        times["match"] = time.perf_counter() - start
    except NotRecognised as reason:
        return LiftResult(None, str(reason), times, _reusable(read, path))
    except RecursionError:
        reason = f"{path}: an expression is nested too deeply to be matched"
        return LiftResult(None, reason, times, _reusable(read, path))
    return LiftResult(query, "", times, _reusable(read, path))


_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*")


def _reusable(read: _Read | None, path: Path) -> ParsedHarness | None:
    """What the scalar front end can take of a harness the lifter parsed: the parse, when
    the parts read as text (the arrays, the input lines) mean in the tree what they mean in the
    file. That holds when the harness defines no macro but the template's (no other can rename a
    declaration or a call), no macro of any header is named in the input lines (so nothing in them
    is expanded), and every array read goes back to exactly one declaration of its name."""
    if read is None:
        return None
    try:
        _macros(read.pre, str(path))
    except NotRecognised:
        return None
    if read.inputs is not None and set(_IDENTIFIER.findall(read.inputs.text)) & read.pre.defined:
        return None
    declared = Counter(ext.name for ext in read.ast.ext if isinstance(ext, c_ast.Decl) and ext.init is None)
    if any(declared[name] != 1 for name in read.arrays):
        return None
    return ParsedHarness(read.ast, read.arrays, read.inputs)
