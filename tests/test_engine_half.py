"""IEEE binary16 (`_Float16`) in the engine, against gcc (no mocks).

(a) The evaluator (and the constant folding of `semantics`) against gcc bit for bit on random
    half programs: per-operation casts, uncast arithmetic (which gcc evaluates in float), mixed
    int/float/double operands, comparisons, conversions with subnormals, overflow to inf and
    negative zero. Compiled with the strict flags qverify uses.
(b) An oracle: tiny random 2-4-2 ReLU networks in half, written in the C shape qverify generates,
    on input boxes small enough to run every half value of the box through the compiled C;
    thresholds on y[0] at the exact maximum (UNSAFE) and half an ulp or more above it (SAFE). The
    engine's verdict must equal the enumeration, and every UNSAFE counterexample must replay.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from qverify.engine import EngineOptions, EngineStatus, c_types, cfront, check_file
from qverify.engine.scalar import ssa, symex
from qverify.engine.scalar.evaluate import evaluate_nodes, input_env
from tests.conftest import budgeted

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")

STRICT_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off"]

# The replay: includes the harness with its main renamed, defines the nondet functions (values
# read per line with strtod: hexadecimal floats are exact), assume and assert, and prints per
# line HOLDS / ASSUME-FAILED / VIOLATED <message> (after whatever the harness prints itself).
REPLAY_DRIVER = r"""
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
__extension__ typedef _Float16 qv_replay_half;
void __ESBMC_assume(_Bool condition);
void __ESBMC_assert(_Bool condition, const char *message);
qv_replay_half nondet_half(void);
int nondet_int(void);
float nondet_float(void);
double nondet_double(void);
#define main qv_harness_main
#include HARNESS
#undef main
static jmp_buf qv_jump;
static double qv_values[64];
static int qv_next;
qv_replay_half nondet_half(void) { return (qv_replay_half)qv_values[qv_next++]; }
int nondet_int(void) { return (int)qv_values[qv_next++]; }
float nondet_float(void) { return (float)qv_values[qv_next++]; }
double nondet_double(void) { return qv_values[qv_next++]; }
void __ESBMC_assume(_Bool condition)
{
    if (!condition) {
        puts("ASSUME-FAILED");
        longjmp(qv_jump, 1);
    }
}
void __ESBMC_assert(_Bool condition, const char *message)
{
    if (!condition) {
        printf("VIOLATED %s\n", message);
        longjmp(qv_jump, 1);
    }
}
int main(void)
{
    static char line[1 << 16];
    while (fgets(line, sizeof line, stdin)) {
        char *position = line, *end;
        int count = 0;
        for (;;) {
            double value = strtod(position, &end);
            if (end == position || count == 64) {
                break;
            }
            qv_values[count++] = value;
            position = end;
        }
        qv_next = 0;
        if (!setjmp(qv_jump)) {
            qv_harness_main();
            puts("HOLDS");
        }
    }
    return 0;
}
"""

HARNESS_PRELUDE = """__extension__ typedef _Float16 qv_num;
qv_num nondet_half(void);
int nondet_int(void);
float nondet_float(void);
void __ESBMC_assume(_Bool condition);
void __ESBMC_assert(_Bool condition, const char *message);
"""


def build_replay(harness: Path) -> Path:
    """The harness compiled with the strict flags into a replay executable (REPLAY_DRIVER)."""
    driver = harness.with_name(harness.stem + "_replay.c")
    driver.write_text(REPLAY_DRIVER.replace("HARNESS", f'"{harness.name}"'))
    executable = harness.with_suffix("")
    completed = subprocess.run(
        ["gcc", *STRICT_FLAGS, str(driver), "-o", str(executable)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return executable


def replay(executable: Path, rows: list[str]) -> list[str]:
    """The replay's output lines for input lines `rows` (one line of values per run)."""
    completed = subprocess.run(
        [str(executable)],
        input="\n".join(rows) + "\n",
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return completed.stdout.splitlines()


def log_outcome(seed: int, condition: str, result, seconds: float) -> None:
    """One JSON line per engine run in the file named by QV_ORACLE_LOG, if set (for reporting)."""
    path = os.environ.get("QV_ORACLE_LOG")
    if path:
        record = {"seed": seed, "condition": condition, "status": result.status.value, "seconds": seconds}
        record["decided_by"] = result.decided_by
        with open(path, "a") as log:
            log.write(json.dumps(record) + "\n")


def c_float(value: float) -> str:
    """A C float literal of an exactly representable value (hexadecimal: no rounding)."""
    return f"{float(value).hex()}f"


def half_values(lo: float, hi: float) -> np.ndarray:
    """Every finite binary16 value in [lo, hi] (both zeros when 0 is inside), as float64."""
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    return every[np.isfinite(every) & (every >= lo) & (every <= hi)]


# ------------------------------------------------------------------------------ (a) evaluator vs gcc


class _Expressions:
    """Random C expressions over the inputs a b c d (_Float16), i (int) and f (float); every
    conversion to int is of a value that fits (no undefined behaviour)."""

    HALF_INPUTS = ("a", "b", "c", "d")

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def pick(self, options):
        return options[int(self.rng.integers(len(options)))]

    def literal(self) -> str:
        kind = self.rng.random()
        if kind < 0.5:
            value = float(np.float16(self.rng.normal(0, 4)))
        elif kind < 0.7:
            value = float(np.float16(self.rng.choice([2.0**-24, 2.0**-14, 65504.0, 0.5, 3.0, 1.0 / 3])))
        else:
            value = float(np.float32(self.rng.normal(0, 2)))  # not a half value: rounds in the cast
        return c_float(value)

    def half(self, depth: int) -> str:
        if depth <= 0 or self.rng.random() < 0.2:
            if self.rng.random() < 0.75:
                return self.pick(self.HALF_INPUTS)
            return f"(qv_num){self.literal()}"
        d, op = depth - 1, self.pick("+-*/")
        forms = [
            lambda: f"(qv_num)({self.half(d)} {op} {self.half(d)})",  # the generated C's shape
            lambda: f"(qv_num)({self.half(d)} {op} {self.literal()})",  # in float, then rounded
            lambda: f"(qv_num)({self.excess(d)} {op} {self.half(d)})",  # an uncast operand
            lambda: f"-({self.half(d)})",
            lambda: self.pick(["(qv_num)i", "(qv_num)f", "(qv_num)(i * 3)"]),
            lambda: f"(qv_num)((double){self.half(d)} {op} {self.rng.normal(0, 3)!r})",
            lambda: f"({self.half(d)} < {self.half(d)} ? {self.half(d)} : {self.half(d)})",
            lambda: f"({self.half(d)} < 0 ? 0 : {self.half(d)})",
            lambda: f"(qv_num)((float){self.half(d)} {op} f)",
        ]
        return self.pick(forms)()

    def excess(self, depth: int) -> str:
        """Uncast _Float16 arithmetic: gcc computes it in float."""
        d = depth - 1
        op = self.pick("+-*/")
        choice = int(self.rng.integers(4))
        if choice == 0:
            return f"({self.half(d)} {op} {self.half(d)})"
        if choice == 1:
            return f"({self.half(d)} {op} i)"
        if choice == 2 and depth > 1:
            return f"({self.excess(d)} {op} {self.half(d)})"
        return f"(-({self.half(d)}) {op} {self.half(d)})"

    def output(self, depth: int) -> str:
        choice = int(self.rng.integers(10))
        if choice <= 3:
            return self.half(depth)
        if choice == 4:
            return self.excess(depth)
        if choice == 5:
            return (
                f"({self.half(depth - 1)} {self.pick(['<', '<=', '==', '!=', '>'])} {self.excess(depth - 1)})"
            )
        if choice == 6:
            x, y = self.pick(self.HALF_INPUTS), self.pick(self.HALF_INPUTS)
            return self.pick(
                [
                    f"(int){x}",
                    f"(int)({x} + {y})",
                    f"(long long)({x} * {y})",
                    f"(int)({x} * (qv_num)0x1p-4f)",
                    f"(int)({x} - {y})",
                ]
            )
        if choice == 7:
            return f"({self.half(depth - 1)} {self.pick(['<', '>=', '=='])} i)"
        if choice == 8:  # with a float constant: compared on the half value (NodeManager)
            return (
                f"({self.half(depth - 1)} {self.pick(['<', '<=', '>', '>=', '==', '!='])} {self.literal()})"
            )
        return f"(float){self.half(depth)} * f"


def _random_program(rng: np.random.Generator, outputs: int) -> str:
    expressions = _Expressions(rng)
    body = [
        "int main(void)",
        "{",
        "    qv_num a = nondet_half(), b = nondet_half(), c = nondet_half(), d = nondet_half();",
        "    int i = nondet_int();",
        "    float f = nondet_float();",
        "    (void)a, (void)b, (void)c, (void)d, (void)i, (void)f;  /* some may be unused */",
        "    __ESBMC_assume(-70000 <= i && i <= 70000);",
    ]
    for k in range(outputs):
        body.append(f"    r[{k}] = (double)({expressions.output(int(rng.integers(1, 4)))});")
    body.append("#ifdef QV_PRINT")
    formats, arguments = " ".join(["%a"] * outputs), ", ".join(f"r[{k}]" for k in range(outputs))
    body.append(f'    printf("{formats}\\n", {arguments});')
    body.append("#endif")
    body += ["    return 0;", "}"]
    head = (
        "#ifdef QV_PRINT\n#include <stdio.h>\n#endif\n" + HARNESS_PRELUDE + f"static double r[{outputs}];\n"
    )
    return head + "\n".join(body) + "\n"


def _special_halves() -> np.ndarray:
    tiny, normal, top = 2.0**-24, 2.0**-14, 65504.0
    values = [0.0, -0.0, tiny, -tiny, 3 * tiny, normal, -normal, normal - tiny, top, -top, 1.0, -1.0, 2048.0]
    return np.array(values + [2047.0, 0.5, 1.5, 4096.0, 1023.5, 2.0**-20])


def _random_inputs(rng: np.random.Generator, rows: int) -> np.ndarray:
    """Rows a b c d i f: halves (random finite bit patterns, special values), ints around the
    half overflow and rounding boundaries, floats incl. half midpoints and out-of-range values."""
    bits = rng.integers(0, 1 << 16, size=(rows, 4)).astype(np.uint16)
    halves = bits.view(np.float16).astype(np.float64)
    halves = np.where(np.isfinite(halves), halves, 1.0)
    special = _special_halves()
    mask = rng.random((rows, 4)) < 0.3
    halves = np.where(mask, special[rng.integers(len(special), size=(rows, 4))], halves)
    small = rng.random((rows, 4)) < 0.3  # values of moderate size: fewer overflows
    halves = np.where(small, rng.normal(0, 8, (rows, 4)).astype(np.float16).astype(np.float64), halves)
    ints = rng.integers(-70000, 70001, size=rows)
    chosen = np.array([2049, 2051, -2049, 65519, 65520, -65520, 4097, 0, 1, -1, 70000])
    ints = np.where(rng.random(rows) < 0.4, chosen[rng.integers(len(chosen), size=rows)], ints)
    grid = rng.integers(0, 1 << 16, size=rows).astype(np.uint16).view(np.float16).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        neighbour = np.nextafter(grid.astype(np.float16), np.float16(np.inf)).astype(np.float64)
        midpoints = (grid + neighbour) / 2  # exact in float: ties of the half rounding
    floats = np.where(
        rng.random(rows) < 0.5, midpoints, rng.normal(0, 1, rows) * 10.0 ** rng.integers(-9, 7, rows)
    )
    floats = np.where(np.isfinite(floats), floats, 3.0).astype(np.float32).astype(np.float64)
    return np.column_stack([halves, ints, floats])


def _same(engine: np.ndarray, gcc: list[float]) -> np.ndarray:
    gcc_array = np.array(gcc)
    both_nan = np.isnan(engine) & np.isnan(gcc_array)
    equal = (engine == gcc_array) & (np.signbit(engine) == np.signbit(gcc_array))
    return both_nan | equal


def _parse_c_double(text: str) -> float:
    return float("nan") if "nan" in text else float.fromhex(text) if "0x" in text else float(text)


EVALUATOR_SEEDS = range(20)


@pytest.mark.parametrize("seed", EVALUATOR_SEEDS)
def test_evaluator_matches_gcc_bit_for_bit(tmp_path, seed):
    rng = np.random.default_rng(7000 + seed)
    outputs = 12
    source = _random_program(rng, outputs)
    harness = tmp_path / "prog.c"
    harness.write_text(source)
    printing = tmp_path / "prog_print.c"
    printing.write_text("#define QV_PRINT 1\n" + source)
    executable = build_replay(printing)
    x = _random_inputs(rng, 600)
    lines = replay(executable, [" ".join(v.hex() for v in row) for row in x])
    assert lines[1::2] == ["HOLDS"] * len(x)
    gcc = np.array([[_parse_c_double(t) for t in line.split()] for line in lines[0::2]])
    # the final SSA values of the global array r: the program's results as the engine reads them
    executor = symex.Executor(cfront.parse_file(harness), ssa.NodeManager())
    program = executor.run()
    nodes = executor.globals["r"].elems
    values = evaluate_nodes(nodes, input_env(program.inputs, x), len(x), leaves=program.inputs)
    for k, value in enumerate(values):
        engine = np.broadcast_to(value.astype(np.float64), (len(x),))
        bad = np.flatnonzero(~_same(engine, gcc[:, k]))
        text = next(line for line in source.splitlines() if f"r[{k}] =" in line)
        assert not len(bad), (text, x[bad[:3]].tolist(), engine[bad[:3]].tolist(), gcc[bad[:3], k].tolist())


def test_comparisons_with_float_constants_match_gcc(tmp_path):
    """x cmp c for a half x and float constants c that are not half values (C compares in float;
    the engine on x with c rounded the way that keeps the comparison), on the half values next to
    each c: the only inputs where the direction of the rounding matters."""
    constants = [0.1, -0.1, 1.0 / 3, 2.0**-25, -(2.0**-26), 3 * 2.0**-26, 65519.5, 65520.0, 1e5, -1e5, 2049.0]
    constants = [float(np.float32(c)) for c in constants]
    operators = ["<", "<=", ">", ">=", "==", "!="]
    pairs = [(c, op) for c in constants for op in operators]
    lines = [HARNESS_PRELUDE, f"static double r[{len(pairs)}];", "int main(void)", "{"]
    lines.append("    qv_num x = nondet_half();")
    lines += [f"    r[{k}] = (double)(x {op} {c_float(c)});" for k, (c, op) in enumerate(pairs)]
    lines += [
        "#ifdef QV_PRINT",
        f'    printf("{" ".join(["%a"] * len(pairs))}\\n", {", ".join(f"r[{k}]" for k in range(len(pairs)))});',
    ]
    lines += ["#endif", "    return 0;", "}"]
    source = "#ifdef QV_PRINT\n#include <stdio.h>\n#endif\n" + "\n".join(lines) + "\n"
    harness = tmp_path / "compare.c"
    harness.write_text(source)
    printing = tmp_path / "compare_print.c"
    printing.write_text("#define QV_PRINT 1\n" + source)
    near = []
    with np.errstate(over="ignore"):  # the neighbours of 65504 are inf
        for c in constants:
            down = np.float16(c) if np.float16(c) <= c else np.nextafter(np.float16(c), np.float16(-np.inf))
            for value in (down, np.nextafter(down, np.float16(np.inf))):
                near += [
                    value,
                    np.nextafter(value, np.float16(np.inf)),
                    np.nextafter(value, np.float16(-np.inf)),
                ]
    x = np.array(near + [0.0, -0.0, np.inf, -np.inf], dtype=np.float16).astype(np.float64)[:, None]
    lines = replay(build_replay(printing), [v.hex() for v in x[:, 0]])
    gcc = np.array([[_parse_c_double(t) for t in line.split()] for line in lines[0::2]])
    executor = symex.Executor(cfront.parse_file(harness), ssa.NodeManager())
    program = executor.run()
    values = evaluate_nodes(
        executor.globals["r"].elems, input_env(program.inputs, x), len(x), leaves=program.inputs
    )
    for k, value in enumerate(values):
        engine = np.broadcast_to(value.astype(np.float64), (len(x),))
        assert np.array_equal(engine, gcc[:, k]), (pairs[k], x[engine != gcc[:, k], 0])


def test_front_end_reads_half_declarations(tmp_path):
    """`__extension__ typedef _Float16`, half nondet inputs, half arrays and casts."""
    harness = tmp_path / "decl.c"
    harness.write_text(
        HARNESS_PRELUDE
        + """static const qv_num table[3] = { 0x1p-1f, 0x1.8p+0f, -0x1p-24f };
int main(void)
{
    qv_num x = nondet_half();
    _Float16 y = (qv_num)(x * table[1]);
    __ESBMC_assume(x >= 0x1p-1f && x <= 0x1p+0f);
    __ESBMC_assert(y < 0x1.8p+0f, "y");
    return 0;
}
"""
    )
    program = symex.execute(cfront.parse_file(harness))
    assert program.inputs[0].ty == c_types.F16
    kinds = {(type(node).__name__, str(node.ty)) for node in ssa.topological(program.roots())}
    assert ("Binary", "half") in kinds  # (half)(x * c) computed in float is a half product
    result = check_file(harness, [], budgeted())
    assert result.status is EngineStatus.UNSAFE
    assert result.counterexample == (1.0,)


# ------------------------------------------------------------------------------ (b) oracle


def _half_matrix(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    return rng.normal(0, scale, shape).astype(np.float16).astype(np.float64)


def _c_array(values: np.ndarray) -> str:
    if values.ndim == 1:
        return "{ " + ", ".join(c_float(v) for v in values) + " }"
    return "{ " + ", ".join(_c_array(row) for row in values) + " }"


# the sigmoid as qverify's lookup tables compute it in half: 64 entries over [-4, 4], the index
# (int)(half)((half)((half)(x + 4) * 7.875) + 0.5), saturating outside
SIGMOID_N, SIGMOID_A, SIGMOID_SCALE = 64, 4.0, 7.875
SIGMOID_TABLE = (1 / (1 + np.exp(SIGMOID_A - np.arange(SIGMOID_N) / SIGMOID_SCALE))).astype(np.float16)
SIGMOID_C = f"""static const qv_num qv_sigmoid_table[{SIGMOID_N}] = {{ {", ".join(c_float(v) for v in SIGMOID_TABLE)} }};
static qv_num qv_sigmoid(qv_num x)
{{
    int index;
    if (x < {c_float(-SIGMOID_A)}) {{
        return 0;
    }}
    if (x > {c_float(SIGMOID_A)}) {{
        return 1;
    }}
    index = (int)(qv_num)((qv_num)((qv_num)(x + {c_float(SIGMOID_A)}) * {c_float(SIGMOID_SCALE)}) + 0x1p-1f);
    if (index > {SIGMOID_N - 1}) {{
        index = {SIGMOID_N - 1};
    }}
    return qv_sigmoid_table[index];
}}
"""


def _sigmoid16(x: np.ndarray) -> np.ndarray:
    """numpy's twin of qv_sigmoid (float16 operations, one rounding each)."""
    scaled = (x + np.float16(SIGMOID_A)) * np.float16(SIGMOID_SCALE) + np.float16(0.5)
    index = np.minimum(np.trunc(np.nan_to_num(scaled.astype(np.float64))).astype(np.int64), SIGMOID_N - 1)
    inside = SIGMOID_TABLE[np.clip(index, 0, SIGMOID_N - 1)]
    return np.where(x < -SIGMOID_A, np.float16(0), np.where(x > SIGMOID_A, np.float16(1), inside))


def network_harness(
    weights: list[np.ndarray],
    biases: list[np.ndarray],
    lo: np.ndarray,
    hi: np.ndarray,
    condition: str,
    activation: str = "relu",
) -> str:
    """A dense network in half in qverify's C shape (every operation cast), hidden activation
    ReLU or a sigmoid lookup table, with the box as assumes and `assert(!(condition))` on the
    outputs y."""
    lines = [HARNESS_PRELUDE] + ([SIGMOID_C] if activation == "sigmoid" else [])
    for k, (w, b) in enumerate(zip(weights, biases), start=1):
        lines.append(f"static const qv_num qv_w{k}[{w.shape[0]}][{w.shape[1]}] = {_c_array(w)};")
        lines.append(f"static const qv_num qv_b{k}[{b.shape[0]}] = {_c_array(b)};")
    n_in, n_out = weights[0].shape[1], weights[-1].shape[0]
    lines.append(f"static void qv_forward(const qv_num x[{n_in}], qv_num y[{n_out}])")
    lines.append("{")
    for k, w in enumerate(weights, start=1):
        lines.append(f"    qv_num h{k}[{w.shape[0]}];")
    lines.append("    int i, j;")
    previous = "x"
    hidden = "acc < 0 ? 0 : acc" if activation == "relu" else "qv_sigmoid(acc)"
    for k, w in enumerate(weights, start=1):
        last = k == len(weights)
        target = f"h{k}"
        lines += [
            f"    for (j = 0; j < {w.shape[0]}; j++) {{",
            f"        qv_num acc = qv_b{k}[j];",
            f"        for (i = 0; i < {w.shape[1]}; i++) {{",
            f"            acc = (qv_num)(acc + (qv_num)(qv_w{k}[j][i] * {previous}[i]));",
            "        }",
            f"        {target}[j] = {'acc' if last else hidden};",
            "    }",
        ]
        previous = target
    lines += [f"    for (j = 0; j < {n_out}; j++) {{", f"        y[j] = {previous}[j];", "    }", "}"]
    lines += ["int main(void)", "{", f"    qv_num x[{n_in}], y[{n_out}];"]
    for i in range(n_in):
        lines.append(f"    x[{i}] = nondet_half();")
        lines.append(f"    __ESBMC_assume({c_float(lo[i])} <= x[{i}] && x[{i}] <= {c_float(hi[i])});")
    lines += [
        "    qv_forward(x, y);",
        "#ifdef QV_PRINT",
        '    printf("Y %a %a\\n", (double)y[0], (double)y[1]);',
        "#endif",
        f'    __ESBMC_assert(!({condition}), "property");',
        "    return 0;",
        "}",
    ]
    return "#ifdef QV_PRINT\n#include <stdio.h>\n#endif\n" + "\n".join(lines) + "\n"


def _half_box(rng: np.random.Generator, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Per input an interval of consecutive half values around a random value in [-2, 2] or
    [-16, 16] (some around 0: subnormals and both zeros)."""
    per_input = int(max_points**0.5)
    every = np.unique(half_values(-32.0, 32.0))  # sorted; -0.0 and 0.0 are one value here
    lo, hi = [], []
    for _ in range(2):
        count = int(rng.integers(per_input // 4, per_input + 1))
        kind = rng.random()
        value = 0.0 if kind < 0.15 else rng.uniform(-2.0, 2.0) if kind < 0.6 else rng.uniform(-16.0, 16.0)
        start = int(np.searchsorted(every, value)) - int(rng.integers(0, count))
        start = min(max(start, 0), len(every) - count)
        lo.append(every[start])
        hi.append(every[start + count - 1])
    return np.array(lo), np.array(hi)


@dataclass
class HalfInstance:
    seed: int
    weights: list
    biases: list
    lo: np.ndarray
    hi: np.ndarray
    points: np.ndarray  # every half input vector in the box
    y: np.ndarray  # the compiled C's outputs on them
    activation: str = "relu"

    def harness(self, condition: str) -> str:
        return network_harness(self.weights, self.biases, self.lo, self.hi, condition, self.activation)


def _simulate(
    weights: list[np.ndarray], biases: list[np.ndarray], points: np.ndarray, activation: str
) -> np.ndarray:
    """The network on the points in numpy float16, one rounding per operation as in the C."""
    h = points.astype(np.float16)
    for k, (w, b) in enumerate(zip(weights, biases)):
        w16, acc = w.astype(np.float16), np.tile(b.astype(np.float16), (len(h), 1))
        for i in range(w.shape[1]):
            acc = acc + w16[None, :, i] * h[:, i : i + 1]
        if k == len(weights) - 1:
            h = acc
        else:
            h = np.where(acc < 0, np.float16(0), acc) if activation == "relu" else _sigmoid16(acc)
    return h.astype(np.float64)


def make_half_instance(seed: int, directory: Path, max_points: int = 4096) -> HalfInstance:
    """A network and a box on which y[0] takes at least 8 values (in numpy, then through the C)."""
    rng = np.random.default_rng(9000 + seed)
    activation = "sigmoid" if seed % 4 == 3 else "relu"
    for _ in range(100):
        sizes = (2, int(rng.integers(2, 5)), 2)
        scale = float(rng.choice([0.5, 1.0, 2.0]))
        weights = [_half_matrix(rng, (b, a), scale) for a, b in itertools.pairwise(sizes)]
        biases = [_half_matrix(rng, (b,), 0.5) for b in sizes[1:]]
        lo, hi = _half_box(rng, max_points)
        points = np.array(list(itertools.product(*[half_values(lo[i], hi[i]) for i in range(2)])))
        with np.errstate(over="ignore", invalid="ignore"):
            simulated = _simulate(weights, biases, points, activation)
        if len(np.unique(simulated[:, 0])) >= 8 and np.isfinite(simulated).all():
            break
    instance = HalfInstance(seed, weights, biases, lo, hi, points, simulated, activation)
    printing = directory / f"net{seed}_print.c"
    printing.write_text("#define QV_PRINT 1\n" + instance.harness("0"))
    executable = build_replay(printing)
    lines = replay(executable, [" ".join(v.hex() for v in row) for row in points])
    y = np.array([[float.fromhex(t) for t in line.split()[1:]] for line in lines if line.startswith("Y ")])
    assert np.array_equal(y, simulated)  # numpy's float16 is the C's _Float16, op by op
    return instance


def _next_half(value: float) -> float:
    return float(np.nextafter(np.float16(value), np.float16(np.inf)))


def half_properties(instance: HalfInstance) -> list[tuple[str, np.ndarray]]:
    """(condition on y, where it holds on the enumerated points): y[0] >= its maximum (UNSAFE),
    >= half an ulp above it and > the maximum (SAFE), y[0] > y[1]."""
    y0, y1 = instance.y[:, 0], instance.y[:, 1]
    top = float(y0.max())
    above = _next_half(top)
    properties = [(f"y[0] >= {c_float(top)}", y0 >= top)]
    if np.isfinite(above):
        middle = (top + above) / 2  # half an ulp above: a float, not a half
        properties += [(f"y[0] >= {c_float(middle)}", y0 >= middle), (f"y[0] > {c_float(top)}", y0 > top)]
    properties.append(("y[0] > y[1]", y0 > y1))
    return properties


def check_half(
    instance: HalfInstance,
    directory: Path,
    options: EngineOptions,
    through_harness: bool = False,
) -> list[tuple[str, float, str]]:
    """Every property of the instance: the engine's verdict against the enumeration (the compiled
    C's outputs on every point; with `through_harness`, every point run through the property's
    own compiled harness); an UNSAFE counterexample must be a half vector the harness reports as
    violating. Returns (verdict, seconds, decided_by) per property."""
    outcomes = []
    for k, (condition, holds) in enumerate(half_properties(instance)):
        harness = directory / f"net{instance.seed}_{k}.c"
        harness.write_text(instance.harness(condition))
        truth = "UNSAFE" if holds.any() else "SAFE"
        executable = build_replay(harness) if through_harness else None
        if executable is not None:
            lines = replay(executable, [" ".join(v.hex() for v in row) for row in instance.points])
            assert truth == ("UNSAFE" if any(line.startswith("VIOLATED") for line in lines) else "SAFE")
        start = time.monotonic()
        result = check_file(harness, [], options)
        elapsed = time.monotonic() - start
        context = (instance.seed, condition, instance.lo.tolist(), instance.hi.tolist(), result.to_json())
        assert result.status.value == truth, context
        if options.certify and result.status is EngineStatus.SAFE:
            assert "certified by" in result.reason, context
        if result.status is EngineStatus.UNSAFE:
            values = np.array(result.counterexample, dtype=np.float64)
            assert np.array_equal(values.astype(np.float16).astype(np.float64), values), context
            executable = executable or build_replay(harness)
            (line,) = replay(executable, [" ".join(float(v).hex() for v in values)])
            assert line == "VIOLATED property", (context, line)
        outcomes.append((result.status.value, elapsed, result.decided_by))
        log_outcome(instance.seed, condition, result, elapsed)
    return outcomes


FAST_HALF_SEEDS = range(20)
SLOW_HALF_SEEDS = range(20, 120)


@pytest.fixture(scope="module")
def half_directory(tmp_path_factory):
    return tmp_path_factory.mktemp("half")


@pytest.mark.parametrize("seed", FAST_HALF_SEEDS)
def test_half_oracle(half_directory, seed):
    instance = make_half_instance(seed, half_directory, max_points=1024)
    check_half(instance, half_directory, budgeted())


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_HALF_SEEDS)
def test_half_oracle_slow(half_directory, seed):
    instance = make_half_instance(seed, half_directory, max_points=4096)
    check_half(instance, half_directory, budgeted(), through_harness=True)


def _smt_only(solver: str) -> EngineOptions:
    return budgeted(solver=solver, certify=True, disable=("attack", "bounds", "split"))


def test_half_oracle_smt_only(half_directory):
    """The exact SMT encoding alone (FloatingPoint (5, 11)), with --certify on the SAFE ones."""
    check_half(make_half_instance(2, half_directory, max_points=1024), half_directory, _smt_only("bitwuzla"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2, 8))
@pytest.mark.parametrize("solver", ["bitwuzla", "z3"])
def test_half_oracle_smt_only_slow(half_directory, seed, solver):
    check_half(make_half_instance(seed, half_directory, max_points=1024), half_directory, _smt_only(solver))


def test_half_real_semantics(half_directory):
    """--semantics real reads half operations as exact reals: an UNSAFE is confirmed in exact
    rational arithmetic, a property far above the outputs is SAFE."""
    from qverify.engine.scalar.evaluate import VIOLATED, RealRunner

    instance = make_half_instance(2, half_directory, max_points=1024)  # ReLU (a lookup table's
    # index flips between neighbours in real arithmetic: the real network is another function)
    low = c_float(np.quantile(instance.y[:, 0], 0.25))
    for condition, expected in [(f"y[0] >= {low}", "UNSAFE"), ("y[0] >= 0x1p+12f", "SAFE")]:
        harness = half_directory / "real.c"
        harness.write_text(instance.harness(condition))
        result = check_file(harness, [], budgeted(semantics="real"))
        assert result.status.value == expected, result.to_json()
        if expected == "UNSAFE":
            program = symex.execute(cfront.parse_file(harness))
            assert RealRunner(program).run(np.array([result.counterexample])).status[0] == VIOLATED
