"""The operator interface (`qverify.operators`) and what the families of kinds share: MAC layers
(dense, convolution: products of weights and inputs summed from a bias), pools (a window per
output) and joins (several tensors added, concatenated or moved).

Every method is a stage's question about one node; the stage passes what it holds (the IR node,
its `QuantizedLayer`, the quantized network, the batch). A method a kind does not support raises
`UnsupportedError` naming the node, so a stage never reaches a kind it cannot handle silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from qverify.errors import UnsupportedError
from qverify.network import Activation
from qverify.quant.affine import Int8Kernel, RequantMode, accumulator_bounds, apply_thresholds, thresholds
from qverify.quant.intervals import EPS64
from qverify.quant.network import Int8Tables, QuantizedLayer, check_lookup, quantize_values

if TYPE_CHECKING:
    from qverify.engine.netlevel.model import NetLayer
    from qverify.engine.netlevel.operations import LinearOperation
    from qverify.quant.network import NumberFormat, QuantizedNetwork


class Operator:
    """What one kind of IR node means at every stage (module docstring). Stateless: one instance
    per kind (registered in `qverify.network.operators`), the node passed to each method."""

    kind: str = ""  # the C template's name of the kind (`templates/_network.c.j2`)
    is_mac = False  # products of weights and inputs summed from a bias (dense, convolution)
    is_pool = False  # a window per output neuron (max, average)
    is_join = False  # several tensors added, concatenated or moved (`qverify.network.joins`)
    is_dense = False  # a dense matrix (what NNet files and the balanced MAC layout express)

    def _refuse(self, node: Any, what: str) -> UnsupportedError:
        return UnsupportedError(f"{node.describe()}: {what} is not supported")

    # -- the input's image layout (`qverify.network.input_layout`) ---------------------------------

    def input_image(self, node: Any) -> tuple[tuple[int, ...], np.ndarray] | None:
        """When the node alone reads the network's input: the image (C, H, W) the input is and
        where its values are (`InputImage.order`: the image's CHW value i is input value order[i]);
        None: the node gives the input no image order (a dense layer)."""
        return None

    # -- quantization (`qverify.quant.network`) --------------------------------------------------

    def quantize(self, index: int, node: Any, number: NumberFormat) -> QuantizedLayer:
        """The node's constants in a fixed-point or float format (none: a node without constants)."""
        empty = np.zeros(0)
        return QuantizedLayer(empty, empty, node.activation, node)

    def quantize_int8(
        self, index: int, node: Any, quant: Any, mode: RequantMode, kernel: Int8Kernel
    ) -> QuantizedLayer:
        """The node in an int8 model: its integers and requantization table (`Int8Tables`)."""
        raise self._refuse(node, "int8 quantization")

    def expanded_bias(self, layer: QuantizedLayer) -> np.ndarray:
        """The bias of every output neuron (its quantized constants)."""
        return layer.bias

    def constants(self, node: Any) -> list[tuple[np.ndarray, str]]:
        """The real constants the C holds (what range analysis must fit in the format), named."""
        return []

    # -- the float reference (`qverify.network.evaluate`, `qverify.quant.intervals.real_bounds`) ----

    def forward(self, node: Any, values: np.ndarray) -> np.ndarray:
        """The node's real pre-activation values on a batch (batch, n_in), in float64."""
        raise self._refuse(node, "the float reference")

    def real_bounds(self, node: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of the exact real pre-activation values for inputs in [lo, hi] (float64, outward)."""
        raise self._refuse(node, "the real interval analysis")

    # -- the bit-exact simulator and its interval analysis (`qverify.quant.simulate`, `.intervals`) --

    def simulate(self, layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork, log, offset: int):
        """Pre-activation values of a batch in a fixed-point or float format, as the C computes them;
        overflows recorded in `log` (`simulate._OverflowLog`) from global neuron `offset`."""
        values, overflowed = self.implemented_values(layer, x, qnet)
        log.record(overflowed, offset)
        return values

    def implemented_values(
        self, layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork
    ) -> tuple[np.ndarray, np.ndarray]:
        """A pool's or a join's values on a batch in a fixed-point or float format, and which neurons
        overflowed (what the interval analysis runs on each bound: these nodes are monotone)."""
        raise self._refuse(layer.source, "a value without products")

    def simulate_int8(self, layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
        """The node's output codes on a batch of input codes (int8)."""
        raise self._refuse(layer.source, "int8 simulation")

    def gathered_width(self, node: Any) -> int:
        """The values the simulator gathers per output neuron (products or a window; 0: none)."""
        return 0

    def products(self, node: Any) -> int:
        """How many multiply-adds (or window elements, or join inputs) the C computes."""
        return int(node.n_in)

    def interval(
        self, layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray, qnet: QuantizedNetwork
    ) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
        """Bounds of the pre-activation values for inputs in [lo, hi] (boxes, n_in) in a fixed-point
        or float format, and which may overflow."""
        raise self._refuse(layer.source, "interval analysis")

    def interval_int8(self, layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray) -> tuple:
        """int8: ((accumulator lo, hi), (code lo, hi)) for input codes in [lo, hi] (boxes, n_in)."""
        raise self._refuse(layer.source, "int8 interval analysis")

    # -- the C (`qverify.codegen.context`) -------------------------------------------------------

    def loop_variables(self, balanced: bool) -> set[str]:
        """The C loop variables the template's loop of this kind uses."""
        return {"j"}

    def c_context(self, qnet: QuantizedNetwork, index: int, layer: QuantizedLayer, names: list[str]) -> dict:
        """What the template's loop of this kind reads (`kind` and its constants), `names` the
        arrays of the node's producers."""
        raise self._refuse(layer.source, "C generation")

    # -- the network level (`qverify.engine.netlevel.model`) -------------------------------------

    def linear_operation(self, layer: QuantizedLayer, scale: float) -> tuple[LinearOperation, np.ndarray]:
        """The node's linear part with its constants read as reals (words * `scale`, or the float
        values with scale 1), and the bias of every neuron."""
        from qverify.engine.netlevel.operations import IdentityOperation

        return IdentityOperation(layer.n_in), np.zeros(layer.n_in)

    def net_layer(self, layer: QuantizedLayer, scale: float, tables: dict) -> NetLayer:
        """The node's statement at the network level: its linear operation and its activation
        (`tables`: sigmoid / tanh as the C's lookup table, a staircase)."""
        from qverify.engine.netlevel.activations import Clamp, Identity, Relu
        from qverify.engine.netlevel.model import NetLayer

        op, bias = self.linear_operation(layer, scale)
        if layer.activation in tables:
            return NetLayer(op, bias, tables[layer.activation])
        if layer.activation is Activation.RELU6:  # clamped at 6, exactly 6 in every format's real units
            return NetLayer(op, bias, Clamp(6.0))
        return NetLayer(op, bias, Relu() if layer.activation is Activation.RELU else Identity())

    def int8_net_layer(self, layer: QuantizedLayer) -> NetLayer:
        """The node's statement on int8 codes (exact integers; the module docstring of
        `engine.netlevel.model`)."""
        raise self._refuse(layer.source, "the int8 network level")

    # -- exact rationals (`qverify.engine.netlevel.exact`) -----------------------------------------

    def exact_layer(self, qnet: QuantizedNetwork, layer: QuantizedLayer, scale: int):
        """The node as `exact._DyadicLayer`: its constants as integers over a power of two."""
        raise self._refuse(layer.source, "exact real outputs")

    # -- the lifter (`qverify.engine.netlevel.lift`) and int8 range checks ------------------------

    def channel_reach(self, node: Any, weights: np.ndarray) -> np.ndarray:
        """Per output channel, the largest sum of |w| over one neuron's products (a padded
        convolution's border neurons have fewer): what `accumulator_bounds` multiplies by the codes'
        spread."""
        raise self._refuse(node, "an accumulator's range")


class MacOperator(Operator):
    """Dense and convolution layers: act(sum of w x over the node's taps + b)."""

    is_mac = True
    weight_shape = ""  # how error messages name a weight's indices

    def quantize(self, index: int, node: Any, number: NumberFormat) -> QuantizedLayer:
        weights = quantize_values(node.weights, number, f"layer {index} weight {self.weight_shape}")
        bias = quantize_values(node.bias, number, f"layer {index} bias")
        return QuantizedLayer(weights, bias, node.activation, node)

    def quantize_int8(
        self, index: int, node: Any, quant: Any, mode: RequantMode, kernel: Int8Kernel
    ) -> QuantizedLayer:
        """Integer weights and bias, and the requantization table of every channel (or one for all)."""
        if quant.lookup is not None:
            check_lookup(index, quant, mode)
        elif node.activation not in (Activation.IDENTITY, Activation.RELU, Activation.RELU6):
            raise UnsupportedError(
                f"layer {index}: {node.activation.value} activation is not supported in int8 (ReLU, fused as "
                "the requantization clamp, and identity are)"
            )
        acc_lo, acc_hi = accumulator_bounds(quant, self.channel_reach(node, quant.weights))
        if quant.per_channel:
            table = thresholds(quant, mode, acc_lo, acc_hi)
        else:  # one table valid for every channel: search over the union of their ranges
            lo, hi = np.array([acc_lo.min()]), np.array([acc_hi.max()])
            table = thresholds(
                quant, mode, np.broadcast_to(lo, acc_lo.shape), np.broadcast_to(hi, acc_hi.shape)
            )[:1]
        table.flags.writeable = False
        activation = Activation.RELU if quant.relu else Activation.IDENTITY
        # the x86 sum lies within the exact sum's range (saturation moves a pair sum towards 0, which
        # its range holds), so the tables above are valid for it too
        paired = self.paired_sums(node, quant, f"layer {index}") if kernel is Int8Kernel.X86 else None
        return QuantizedLayer(
            quant.weights, quant.bias, activation, node, Int8Tables(quant, table, acc_lo, acc_hi, paired)
        )

    def paired_sums(self, node: Any, quant: Any, what: str):
        """The layer's computation in onnxruntime's x86 kernels without AVX-VNNI when it can differ
        from the exact sum (`qverify.quant.x86.PairedSums`), else None."""
        raise NotImplementedError

    def can_saturate_pairs(self, weights: np.ndarray) -> bool:
        """Can a pair of these int8 weights saturate an int16 pair sum (`qverify.quant.x86`)?"""
        raise NotImplementedError

    def constants(self, node: Any) -> list[tuple[np.ndarray, str]]:
        return [(node.weights, "weights"), (node.bias, "biases")]

    def channel_reach(self, node: Any, weights: np.ndarray) -> np.ndarray:
        taps = node.taps()
        per_neuron = np.where(taps.valid, np.abs(weights.reshape(-1)[taps.weights]), 0).sum(axis=1)
        reach = np.zeros(weights.shape[0], dtype=np.int64)
        np.maximum.at(reach, node.channel_of(), per_neuron)
        return reach

    def forward(self, node: Any, values: np.ndarray) -> np.ndarray:
        return values @ node.matrix.T + node.expanded_bias()

    def real_bounds(self, node: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        weights, bias = node.matrix, node.expanded_bias()
        positive, negative = np.maximum(weights, 0), np.minimum(weights, 0)
        pre_hi = positive @ hi + negative @ lo + bias
        pre_lo = positive @ lo + negative @ hi + bias
        magnitude = np.abs(weights) @ np.maximum(np.abs(lo), np.abs(hi)) + np.abs(bias)
        slack = (node.n_in + 3) * EPS64 * magnitude + 1e-300  # float64 dot-product error bound
        return pre_lo - slack, pre_hi + slack

    def simulate(self, layer: QuantizedLayer, x: np.ndarray, qnet: QuantizedNetwork, log, offset: int):
        from qverify.quant.simulate import fixed_accumulate, float_accumulate

        if qnet.is_fixed:
            return fixed_accumulate(layer, x, qnet, log, offset)
        return float_accumulate(layer, x, qnet.number, qnet.options.layout)  # type: ignore[arg-type]

    def simulate_int8(self, layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
        """acc = bias + sum w (x - z_in), exact (int32 by construction), then the threshold table."""
        from qverify.quant.blas8 import blas_dtype, blas_layer_codes
        from qverify.quant.simulate import gathered_int8_codes

        dtype = blas_dtype(layer)
        if dtype is not None:  # exact sums through float BLAS (`qverify.quant.blas8`)
            return blas_layer_codes(layer, codes, dtype)
        return gathered_int8_codes(layer, codes)

    def gathered_width(self, node: Any) -> int:
        return int(node.taps().width)

    def interval(self, layer, lo, hi, qnet):
        from qverify.quant.intervals import fixed_mac_interval, float_mac_interval

        return (fixed_mac_interval if qnet.is_fixed else float_mac_interval)(layer, lo, hi, qnet)

    def interval_int8(self, layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray) -> tuple:
        from qverify.quant.intervals import int8_mac_interval

        return int8_mac_interval(layer, lo, hi)

    def loop_variables(self, balanced: bool) -> set[str]:
        return {"j", "oc", "oy", "ox", "ic", "ky", "kx", "iy", "ix"}

    def int8_net_layer(self, layer: QuantizedLayer) -> NetLayer:
        """z = acc = W x + (bias - z_in sum W) on input codes x (a convolution's sum over its valid
        taps: padding adds nothing), exact integers in float64 (|acc| < 2^31), and the requantization
        staircase of every neuron."""
        from qverify.engine.netlevel.activations import Stairs
        from qverify.engine.netlevel.model import NetLayer
        from qverify.engine.netlevel.staircase import Staircase

        tables = layer.int8
        assert tables is not None and tables.table is not None
        op, bias = self.linear_operation(layer, 1.0)
        weight_sums = layer.tap_weights().astype(np.int64).sum(axis=1)
        bias = np.asarray(layer.expanded_bias(), dtype=np.int64) - weight_sums * tables.input_zero
        rows = tables.table
        neuron_rows = (
            layer.source.channel_of() if rows.shape[0] > 1 else np.zeros(layer.n_out, dtype=np.int64)
        )  # type: ignore[union-attr]
        return NetLayer(
            op,
            bias.astype(np.float64),
            Stairs(Staircase.of(rows, neuron_rows, tables.code.qmin, tables.code.qmax)),
        )

    def exact_layer(self, qnet: QuantizedNetwork, layer: QuantizedLayer, scale: int):
        from qverify.engine.netlevel.exact import affine_layer

        return affine_layer(qnet, layer, scale, *self.exact_terms(layer))

    def exact_terms(self, layer: QuantizedLayer) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(weights, bias, inputs) in the implementation's numbers: a matrix (inputs None), or per
        neuron its terms in C order (0 past the neuron's count) and their inputs."""
        taps = layer.source.taps()  # type: ignore[union-attr]
        return layer.tap_weights(), np.asarray(layer.expanded_bias()), taps.inputs


class PoolOperator(Operator):
    """Max and average pools: one window of the input per output neuron."""

    is_pool = True

    def input_image(self, node: Any) -> tuple[tuple[int, ...], np.ndarray] | None:
        """A window reads a CHW image in its own order."""
        return chw_image(node)

    def gathered_width(self, node: Any) -> int:
        return int(node.windows().width)

    def products(self, node: Any) -> int:
        return int(node.windows().count.sum())

    def interval(self, layer, lo, hi, qnet):
        from qverify.quant.intervals import pool_interval

        with np.errstate(over="ignore", invalid="ignore"):
            return pool_interval(layer, lo, hi, qnet)

    def loop_variables(self, balanced: bool) -> set[str]:
        return {"j", "c", "oy", "ox", "ky", "kx", "iy", "ix"}

    def c_context(self, qnet: QuantizedNetwork, index: int, layer: QuantizedLayer, names: list[str]) -> dict:
        from qverify.codegen.context import geometry

        return {**geometry(layer), "kind": self.kind}


class JoinOperator(Operator):
    """Add, Concat, Permute: the node's input (its producers' values concatenated) added in parts,
    copied or moved; in int8 a copy of codes or an exact integer staircase (`qverify.quant.join8`)."""

    is_join = True
    copies_codes = True  # in int8, a copy when its inputs are quantized as its output

    def quantize_int8(
        self, index: int, node: Any, quant: Any, mode: RequantMode, kernel: Int8Kernel
    ) -> QuantizedLayer:
        """A join on codes: a copy (a Permute, a Concat of inputs quantized as its output), or an
        exact integer staircase (an Add; a Concat that requantizes): `qverify.quant.join8`."""
        empty = np.zeros(0, dtype=np.int64)
        if self.copies_codes and quant.copies:
            return QuantizedLayer(
                empty, empty, Activation.IDENTITY, node, Int8Tables(quant, None, None, None)
            )
        stairs = self.int8_staircase(node, quant, mode, f"layer {index} ({node.describe()})")
        stairs.table.flags.writeable = False
        return QuantizedLayer(
            stairs.weights,
            empty,
            Activation.IDENTITY,
            node,
            Int8Tables(quant, stairs.table, stairs.acc_lo, stairs.acc_hi),
        )

    def int8_staircase(self, node: Any, quant: Any, mode: RequantMode, where: str):
        """The join's requantization as onnxruntime's QLinear operator computes it (`join8.JoinStairs`)."""
        from qverify.quant.join8 import concat_staircase

        self._onnxruntime_only(node, quant, mode, where)
        return concat_staircase(quant)

    @staticmethod
    def _onnxruntime_only(node: Any, quant: Any, mode: RequantMode, where: str) -> None:
        if mode is not RequantMode.ONNXRUNTIME:
            raise UnsupportedError(
                f"{where}: an int8 {type(node).__name__} that requantizes is modelled as onnxruntime's "
                f"QLinear{type(node).__name__}; not with {mode.value} requantization (use --format int8)"
            )
        if quant.act_range is not None:
            raise UnsupportedError(f"{where}: a clamp of a fused activation is modelled in TFLite's ADD only")

    def interval(self, layer, lo, hi, qnet):
        from qverify.quant.intervals import join_interval

        with np.errstate(over="ignore", invalid="ignore"):
            return join_interval(layer, lo, hi, qnet)

    def interval_int8(self, layer: QuantizedLayer, lo: np.ndarray, hi: np.ndarray) -> tuple:
        """Monotone in every input code: the codes of the bounds (an Add's weights are positive)."""
        low, high = self.simulate_int8(layer, lo), self.simulate_int8(layer, hi)
        return (low, high), (low, high)

    def c_context(self, qnet: QuantizedNetwork, index: int, layer: QuantizedLayer, names: list[str]) -> dict:
        context = {"kind": self.kind, "requant": False, **self.join_context(layer, names)}
        if qnet.is_int8:
            context.update(self.int8_join_context(layer))
        return context

    def join_context(self, layer: QuantizedLayer, names: list[str]) -> dict:
        """The template's loop: what it reads besides the producers' arrays."""
        return {}

    def int8_join_context(self, layer: QuantizedLayer) -> dict:
        """An int8 join's staircase: its integer weights and table (None: the join copies codes)."""
        from qverify.codegen.literals import matrix_rows

        tables = layer.int8
        assert tables is not None
        if tables.table is None:
            return {"requant": False}
        return {
            "requant": True,
            "qmin": tables.code.qmin,
            "table_count": tables.table.shape[0],
            "table_rows": matrix_rows(tables.table, "int"),
            "join_weights": [str(int(w)) for w in layer.weights],
            "requant_note": self.requant_note(layer, tables.quant),
        }

    def requant_note(self, layer: QuantizedLayer, quant: Any) -> str:
        return f"QLinearConcat: each input's codes requantized to {quant.output.describe()}"

    def int8_net_layer(self, layer: QuantizedLayer) -> NetLayer:
        """A move or a copy of codes (exact), or its staircase: a requantizing Concat's z = the code
        through its input's row (`qverify.quant.join8`)."""
        from qverify.engine.netlevel.activations import Identity, Stairs
        from qverify.engine.netlevel.model import NetLayer
        from qverify.engine.netlevel.operations import IdentityOperation
        from qverify.engine.netlevel.staircase import Staircase

        tables = layer.int8
        assert tables is not None
        zeros = np.zeros(layer.n_out)
        if tables.table is None:
            return NetLayer(IdentityOperation(layer.n_in), zeros, Identity())
        op, rows = self.int8_statement(layer)
        return NetLayer(
            op, zeros, Stairs(Staircase.of(tables.table, rows, tables.code.qmin, tables.code.qmax))
        )

    def int8_statement(self, layer: QuantizedLayer) -> tuple[LinearOperation, np.ndarray]:
        """The requantizing join's accumulator (z = the input's code) and each neuron's table row
        (the row of the input it came from)."""
        from qverify.engine.netlevel.operations import IdentityOperation

        source = layer.source
        rows = np.repeat(np.arange(len(source.input_sizes)), source.input_sizes)  # type: ignore[union-attr]
        return IdentityOperation(layer.n_in), rows

    def exact_layer(self, qnet: QuantizedNetwork, layer: QuantizedLayer, scale: int):
        from qverify.engine.netlevel.exact import join_layer

        return join_layer(qnet, layer)

    def exact_values(self, node: Any, values: np.ndarray) -> np.ndarray:
        """The join on exact numerators (Python ints): its input is its output."""
        return values


def chw_image(node: Any) -> tuple[tuple[int, ...], np.ndarray]:
    """`Operator.input_image` of a spatial node (convolution, pool): it reads its input as the
    CHW image `node.input_shape`, in its own order."""
    return tuple(node.input_shape), np.arange(int(np.prod(node.input_shape)))


def requantized_rows(layer: QuantizedLayer, codes: np.ndarray) -> np.ndarray:
    """Codes through the table row of the input each came from (a requantizing Concat's codes)."""
    tables = layer.int8
    assert tables is not None
    source = layer.source
    rows = np.repeat(np.arange(len(source.input_sizes)), source.input_sizes)  # type: ignore[union-attr]
    return apply_thresholds(codes, tables.table[rows], tables.code.qmin)  # type: ignore[index]
