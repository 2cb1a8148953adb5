"""Read and write the NNet text format (Kyle Julian, Stanford 2016) as a `Network`.

The format, as in `benchmarks/DATA_SOURCES.md` (example values from ACAS Xu 1_1):

    // any number of leading comment lines
    7,5,5,50,                               numLayers, numInputs, numOutputs, maxLayerSize
    5,50,50,50,50,50,50,5,                  numLayers + 1 layer sizes, input first
    0,                                      an unused flag
    0.0,-3.141593,...,                      numInputs input minimums
    60760.0,3.141593,...,                   numInputs input maximums
    19791.091,0.0,...,7.5188840201,         numInputs input means, then one output mean
    60261.0,6.28318530718,...,373.94992,    numInputs input ranges, then one output range
    then per layer k: size[k] lines of size[k-1] weights (line i = weights into neuron i),
    then size[k] lines of one bias each.

Semantics: clip to [min, max], x' = (x - mean) / range, ReLU after every layer but the last (identity),
y = y' * range_out + mean_out. Every malformed file raises `InputError("path:line: what")`.

No clipping is written as +-`NO_CLIP_BOUND` (the largest finite double, a number every NNet parser reads)
and read back as +-inf; an input normalisation that is then the identity (no clipping, mean 0, range 1)
and an output normalisation with mean 0 and range 1 are read as `None`. The same identity rule is in
`qverify.io.onnx_reader`: if it changes, change both.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qverify.errors import InputError, UnsupportedError
from qverify.input_limits import check_file, check_literal
from qverify.io.files import file_stem, read_bytes
from qverify.network.model import (
    Activation,
    Dense,
    InputNormalisation,
    Network,
    OutputNormalisation,
)

__all__ = ["NO_CLIP_BOUND", "read_nnet", "write_nnet"]

NO_CLIP_BOUND = sys.float_info.max  # 1.7976931348623157e+308: stands for "no clipping" in NNet files

# example: "-1.12374e+00", "0.0", "5", "inf", "-Infinity", "nan" (non-finite values are checked later)
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf(inity)?|nan)", re.IGNORECASE)
_INTEGER = re.compile(r"[+-]?\d+")


@dataclass(frozen=True, slots=True)
class _Line:
    """One data line of an NNet file: its 1-based number and its comma-separated tokens."""

    number: int
    tokens: tuple[str, ...]


class _Cursor:
    """Walks the data lines of an NNet file, so every error can name `path:line`."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        raw_lines = text.split("\n")
        start = 0
        while start < len(raw_lines) and (
            raw_lines[start].lstrip().startswith("//") or not raw_lines[start].strip()
        ):
            start += 1
        end = len(raw_lines)
        while end > start and not raw_lines[end - 1].strip():
            end -= 1
        self._lines = [_Line(n + 1, _split(raw_lines[n])) for n in range(start, end)]
        self._next = 0
        self._end_line = end + 1

    def error(self, line: int, what: str) -> InputError:
        return InputError(f"{self.path}:{line}: {what}")

    def take(self, count: int | None, what: str) -> _Line:
        """The next data line, which must hold exactly `count` values (None: at least one)."""
        if self._next >= len(self._lines):
            raise self.error(self._end_line, f"unexpected end of file, expected {what}")
        line = self._lines[self._next]
        self._next += 1
        if count is None and not line.tokens:
            raise self.error(line.number, f"expected {what}, found a blank line")
        if count is not None and len(line.tokens) != count:
            found = "a blank line" if not line.tokens else f"{len(line.tokens)}"
            raise self.error(line.number, f"expected {count} value(s) ({what}), found {found}")
        return line

    def floats(self, count: int, what: str, finite: bool = True) -> tuple[int, np.ndarray]:
        """The next line's `count` numbers as float64; NaN always, inf unless allowed, is an error."""
        line = self.take(count, what)
        values = np.empty(count, dtype=np.float64)
        for index, token in enumerate(line.tokens):
            if not _NUMBER.fullmatch(token):
                raise self.error(line.number, f"'{token}' is not a number ({what})")
            values[index] = float(token)
            if np.isnan(values[index]) or (finite and np.isinf(values[index])):
                raise self.error(line.number, f"non-finite value '{token}' ({what})")
        return line.number, values

    def ints(self, count: int | None, what: str) -> tuple[int, list[int]]:
        """The next line's integers; `count=None` accepts any positive number of them."""
        line = self.take(count, what)
        for token in line.tokens:
            check_literal(token, f"{self.path}:{line.number}")
            if not _INTEGER.fullmatch(token):
                raise self.error(line.number, f"'{token}' is not an integer ({what})")
        return line.number, [int(token) for token in line.tokens]

    def is_empty(self) -> bool:
        """Does the file hold no data line at all (only comments and blank lines)?"""
        return not self._lines

    def finish(self) -> None:
        """Reject data after the last bias (trailing blank lines were dropped already)."""
        if self._next < len(self._lines):
            line = self._lines[self._next]
            raise self.error(line.number, "unexpected data after the last bias line")


def _split(line: str) -> tuple[str, ...]:
    """Comma-separated tokens; the trailing comma every NNet line carries is optional."""
    tokens = [token.strip() for token in line.split(",")]
    if tokens and tokens[-1] == "":
        tokens.pop()
    return tuple(tokens)


def _read_text(path: Path) -> str:
    check_file(path)
    try:
        return read_bytes(path).decode("utf-8-sig")  # -sig: a UTF-8 byte-order mark is not data
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (NNet files are UTF-8/ASCII text)") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None


def _read_sizes(cursor: _Cursor) -> list[int]:
    """The two header lines, checked against each other; returns the layer sizes, input first."""
    line, header = cursor.ints(4, "numLayers,numInputs,numOutputs,maxLayerSize")
    num_layers, num_inputs, num_outputs, max_size = header
    if min(header) < 1:
        raise cursor.error(line, f"header values must be positive, got {header}")
    sizes_line, sizes = cursor.ints(None, "layer sizes")
    if len(sizes) != num_layers + 1:
        raise cursor.error(
            sizes_line, f"expected {num_layers + 1} layer sizes (numLayers + 1), found {len(sizes)}"
        )
    if min(sizes) < 1:
        raise cursor.error(sizes_line, f"layer sizes must be positive, got {sizes}")
    if sizes[0] != num_inputs:
        raise cursor.error(sizes_line, f"first layer size {sizes[0]} != numInputs {num_inputs}")
    if sizes[-1] != num_outputs:
        raise cursor.error(sizes_line, f"last layer size {sizes[-1]} != numOutputs {num_outputs}")
    if max_size < max(sizes):
        raise cursor.error(line, f"maxLayerSize {max_size} < largest layer size {max(sizes)}")
    return sizes


def _read_input_normalisation(cursor: _Cursor, n_inputs: int) -> tuple[InputNormalisation, float, float]:
    """The flag, min, max, mean and range lines; returns the input normalisation and the scalar
    output mean and range (the last entries of the mean and range lines)."""
    cursor.ints(1, "the unused flag line")
    _, minimum = cursor.floats(n_inputs, "input minimums", finite=False)
    max_line, maximum = cursor.floats(n_inputs, "input maximums", finite=False)
    _, means = cursor.floats(n_inputs + 1, "input means and the output mean")
    range_line, ranges = cursor.floats(n_inputs + 1, "input ranges and the output range")
    if np.any(ranges <= 0):  # x' = (x - mean) / range: a range is a positive scale
        index = int(np.argmax(ranges <= 0))
        raise cursor.error(
            range_line,
            f"range {index} is {'zero' if ranges[index] == 0 else 'negative'}: ranges must be positive",
        )
    bad = np.flatnonzero(minimum > maximum)
    if bad.size:
        i = int(bad[0])
        raise cursor.error(
            max_line, f"input {i}: maximum {float(maximum[i])!r} < minimum {float(minimum[i])!r}"
        )
    minimum = np.where(minimum == -NO_CLIP_BOUND, -np.inf, minimum)
    maximum = np.where(maximum == NO_CLIP_BOUND, np.inf, maximum)
    input_norm = InputNormalisation(minimum, maximum, means[:n_inputs], ranges[:n_inputs])
    return input_norm, float(means[-1]), float(ranges[-1])


def _read_layers(cursor: _Cursor, sizes: Sequence[int]) -> list[Dense]:
    """Weights then biases of every layer; rows are collected as read, so a header announcing huge
    layers costs no memory before the file runs out."""
    layers = []
    for k in range(1, len(sizes)):
        n_in, n_out = sizes[k - 1], sizes[k]
        rows = [cursor.floats(n_in, f"weights of layer {k}, neuron {i}")[1] for i in range(n_out)]
        bias = [cursor.floats(1, f"bias of layer {k}, neuron {i}")[1][0] for i in range(n_out)]
        activation = Activation.IDENTITY if k == len(sizes) - 1 else Activation.RELU
        layers.append(Dense(np.array(rows), np.array(bias), activation))
    return layers


def _input_norm_or_none(norm: InputNormalisation) -> InputNormalisation | None:
    """None if `norm` changes nothing: no clipping, mean 0, range 1 (also in onnx_reader)."""
    if (
        np.all(norm.minimum == -np.inf)
        and np.all(norm.maximum == np.inf)
        and np.all(norm.mean == 0)
        and np.all(norm.range == 1)
    ):
        return None
    return norm


def read_nnet(path: str | Path) -> Network:
    """Parse an NNet file into a `Network` named after the file stem, with `source` = `path`.

    :returns: hidden layers with ReLU, the last layer identity; the input normalisation (min, max,
        mean, range) and the output normalisation (the file's one mean/range, repeated per output);
        either is None when it is the identity (see the module docstring).
    :raises InputError: `path:line: what` for a missing, empty, truncated or inconsistent file, a line
        with the wrong number of values, a token that is not a number, a NaN/inf weight, bias, mean or
        range, a zero range, or data after the last bias.
    """
    file = Path(path)
    cursor = _Cursor(str(path), _read_text(file))
    if cursor.is_empty():
        raise InputError(f"{path}: empty file (no NNet header)")
    sizes = _read_sizes(cursor)
    input_norm, out_mean, out_range = _read_input_normalisation(cursor, sizes[0])
    layers = _read_layers(cursor, sizes)
    cursor.finish()
    output_norm = None
    if not (out_mean == 0 and out_range == 1):
        n_out = sizes[-1]
        output_norm = OutputNormalisation(np.full(n_out, out_mean), np.full(n_out, out_range))
    return Network(
        layers=tuple(layers),
        input_norm=_input_norm_or_none(input_norm),
        output_norm=output_norm,
        name=file_stem(file),
        source=str(path),
    )


def _format_row(values: np.ndarray) -> str:
    """repr() of a Python float is the shortest text that parses back to the same double."""
    return "".join(f"{value!r}," for value in np.asarray(values, dtype=np.float64).tolist())


def _check_expressible(net: Network) -> None:
    """NNet holds dense float layers, fixes the activations and has one output mean/range: refuse
    anything else (a convolution's kernel written as weight rows made a broken file)."""
    if net.quantization is not None:
        raise UnsupportedError(
            f"network '{net.name}' is an int8 model: NNet holds float weights only (keep it as .onnx)"
        )
    last = len(net.layers)
    for k, layer in enumerate(net.layers, start=1):
        if not isinstance(layer, Dense):
            raise UnsupportedError(
                f"layer {k} of network '{net.name}' is {layer.describe()}: NNet holds dense layers only "
                "(keep it as .onnx)"
            )
        wanted = Activation.IDENTITY if k == last else Activation.RELU
        if layer.activation is not wanted:
            where = "the last layer" if k == last else "hidden layers"
            raise UnsupportedError(
                f"layer {k} of network '{net.name}' has activation {layer.activation.value}; "
                f"NNet allows only {wanted.value} on {where}"
            )
    norm = net.output_norm
    if norm is not None and (np.unique(norm.mean).size > 1 or np.unique(norm.range).size > 1):
        raise UnsupportedError(
            f"network '{net.name}' has a different output mean/range per output; "
            "NNet stores one output mean and range for all outputs"
        )


def _normalisation_lines(net: Network) -> list[str]:
    """Min, max, mean and range lines; missing normalisation is written as the identity."""
    n_in = net.n_inputs
    if net.input_norm is None:
        minimum, maximum = np.full(n_in, -np.inf), np.full(n_in, np.inf)
        means, ranges = np.zeros(n_in), np.ones(n_in)
    else:
        norm = net.input_norm
        minimum, maximum, means, ranges = norm.minimum, norm.maximum, norm.mean, norm.range
    out_mean, out_range = 0.0, 1.0
    if net.output_norm is not None:
        out_mean, out_range = float(net.output_norm.mean[0]), float(net.output_norm.range[0])
    minimum = np.clip(minimum, -NO_CLIP_BOUND, NO_CLIP_BOUND)
    maximum = np.clip(maximum, -NO_CLIP_BOUND, NO_CLIP_BOUND)
    return [
        "0,",
        _format_row(minimum),
        _format_row(maximum),
        _format_row(np.append(means, out_mean)),
        _format_row(np.append(ranges, out_range)),
    ]


def write_nnet(net: Network, path: str | Path) -> None:
    """Write `net` as an NNet file that `read_nnet` reads back to the same float64 values.

    Numbers are written with `repr`, which round-trips every double exactly. Infinite clip bounds (and
    a missing input normalisation) become +-`NO_CLIP_BOUND`; a missing output normalisation becomes
    mean 0, range 1. The network's name is kept in a `//` comment (`read_nnet` names networks after
    the file stem).

    :raises UnsupportedError: a hidden layer that is not ReLU, a last layer that is not identity, or an
        output normalisation that differs between outputs.
    :raises InputError: the file cannot be written.
    """
    _check_expressible(net)
    sizes = net.sizes
    name = " ".join(net.name.split())
    lines = [
        f"// Network '{name}', written by qverify",
        f"// NNet format (Kyle Julian, Stanford 2016); +-{NO_CLIP_BOUND!r} means no clipping",
        f"{len(net.layers)},{net.n_inputs},{net.n_outputs},{max(sizes)},",
        "".join(f"{size}," for size in sizes),
        *_normalisation_lines(net),
    ]
    for layer in net.layers:
        lines.extend(_format_row(row) for row in layer.weights)
        lines.extend(_format_row(layer.bias[i : i + 1]) for i in range(layer.n_out))
    try:
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError as error:
        raise InputError(f"{path}: cannot write: {error.strerror or error}") from None
