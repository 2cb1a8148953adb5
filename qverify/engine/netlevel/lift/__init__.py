"""Network level: the array-level front end: a generated C harness read back as a `NetworkQuery`.

The scalar front end (`cfront` -> `symex` -> `passes`) executes the C one operation at a time,
~20 us per multiply-add before any reasoning. This package reads the same file as layers instead:
`lift_file(path, include_dirs, semantics)` returns a `LiftResult` holding either the query or the
reason it declined (the caller then uses the scalar path), with the time of each stage.

Recognised (the structure `templates/harness.c.j2` and `_network.c.j2` generate, and hand-written
C in the same style):
- the number format: `typedef fxp_t qv_num` with `QV_K`, `QV_L`, `QV_ROUNDING`, `QV_OVERFLOW`
  (every rounding and overflow mode), `float`, `double`, or `qv_half`;
- dense layers as neuron loops with constant bounds over constant arrays: per-operation sums in
  sequential or balanced (unrolled `reduce_terms` tree) order, the wide int64 sum rounded once,
  float/double/half per-operation rounding; ReLU (`qv_relu`) or identity (`lift.layers`);
- convolutions (padded, strided, grouped; per-operation or wide sums) and max/average pools as the
  template's loop nests (`lift.spatial`), products in `Conv2D.taps` order;
- int8 dense layers (`lift.int8`): the int32 accumulator with the input zero point, int8.h's
  `qv_requant` on a per-channel or per-tensor threshold table, int8 or uint8 codes; int8
  convolutions and max pools as the loop nests of `lift.spatial` with that accumulator and store;
  the lifted network carries the tables with every scale 1 and output zero point 0, so the unsafe
  atoms, which the C states over output codes, are read over codes exactly;
- lookup-table activations (`lift.lut`): `qv_sigmoid`/`qv_tanh` and their tables, exactly what
  `templates/_lut.c.j2` renders for the function's literals;
- the harness's per-layer invariant assumes (`qv_preK_*`, `qv_outK_*`) as `LayerBounds`;
- `main`: nondet inputs in order, assumes bounding them (one box, or a disjunction of boxes),
  `qv_network(x, y)`, one `__ESBMC_assert(!(clause), ...)` per unsafe clause (`lift.harness`; the
  run of one-line input assumes of an image-size harness is read as text, `lift.inputs`).
Not recognised (falls back, with the reason): an int8 average pool's loop over codes (codegen writes
int8 average pools as depthwise convolutions of ones, `qverify.quant.pool8`), and any other
statement, macro, header or helper function.

Why the lifted query is the C: every helper's semantics comes from a header that must be byte for
byte one of qverify's C models (`models_c/*.h`, whose semantics the bit-exact simulator implements
-- the codegen tests compile and compare them), as gcc's own line markers name every file it
included; the harness's macros are read from `gcc -E -dD` (only the template's, each defined once);
functions defined in the harness must be exactly the template's; every operand order, cast, loop
bound and array index of a layer is checked against the one form the simulator computes; every
constant is read exactly (integers, exact hexadecimal floats; anything else declines). The
comparisons of `main` become exact atoms (see `lift.harness`). Tests compare lifted queries with
`query_for` on the codegen's own inputs, with the compiled C on random inputs, and with the scalar
engine's evaluator.
"""

from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.engine.netlevel.lift.frontend import LiftResult, lift_file

__all__ = ["LiftResult", "NotRecognised", "lift_file"]
