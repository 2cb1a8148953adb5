"""Hostile input, tried as a user would (issues 20 and 31): malformed or edge-case NNet, ONNX, VNN-LIB,
spec and suite files, command-line values and journals, for `verify` and for the commands that came
after it (`quantize`, `diff`, `impact`, `repair`, `vnncomp`: every numeric option at nan, infinities,
negatives, zero, huge and non-numbers; data files that are text, complex, decompression bombs or
carry labels that wrap; output folders that hold a run). Every case asserts its exit code, that a
refusal is exactly one `error:` line on stderr (no traceback, no exit 3), and a bound on its time
far above what it takes (a hang, not a speed, is what it catches).

The generated cases run `qverify.cli.main` in this process (the real CLI code path; a subprocess per
case would cost a second of interpreter start-up each); the findings about process behaviour
(argparse noise, the spec precedence) also run as real subprocesses. A larger randomized variant
(seeded mutations of valid files) is marked slow.
"""

from __future__ import annotations

import io
import json
import random
import resource
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from qverify.cli import main
from qverify.errors import InputError
from tests.conftest import ROOT
from tests.test_cli_basics import qverify

TINY = ROOT / "benchmarks" / "tiny"
NNET = TINY / "relu2.nnet"
VNNLIB = TINY / "relu2-y0-bound.vnnlib"
CASE_SECONDS = 60.0  # a refusal takes well under a second; this catches hangs, on a busy machine too
PEAK_MB = 3000  # a 1e9-element input used to allocate 7.7 GB before refusing
HUGE = "1" + "0" * 5000  # beyond Python's int-string limit (4300 digits)


@dataclass(frozen=True)
class Case:
    """One hostile input: the command line (with {dir} for the case's folder), files to write there
    first, the exit code expected and a phrase the one error line must hold."""

    id: str
    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    exit_code: int = 2
    phrase: str = ""


def run_case(case: Case, folder: Path, capsys) -> tuple[int, str, str, float]:
    for name, data in case.files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    argv = [part.replace("{dir}", str(folder)) for part in case.argv]
    started = time.monotonic()
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse
        code = exit_.code if isinstance(exit_.code, int) else 2
    elapsed = time.monotonic() - started
    captured = capsys.readouterr()
    return code, captured.out, captured.err, elapsed


def check(case: Case, folder: Path, capsys) -> None:
    code, out, err, elapsed = run_case(case, folder, capsys)
    assert "Traceback" not in err and "internal error" not in err, err
    assert code == case.exit_code, (code, out, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err
        assert case.phrase in lines[0], err
    assert elapsed < CASE_SECONDS, f"{case.id} took {elapsed:.1f} s"
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this process: every case so far
    assert peak_mb < PEAK_MB, f"{case.id}: peak resident set {peak_mb:.0f} MB"


# ---------------------------------------------------------------- the inputs the cases vary


def nnet_text() -> str:
    return NNET.read_text()


def nnet_lines() -> list[str]:
    return nnet_text().splitlines(keepends=True)


def vnnlib(*asserts: str, declare: int = 2, outputs: int = 2) -> bytes:
    lines = [f"(declare-const X_{i} Real)" for i in range(declare)]
    lines += [f"(declare-const Y_{i} Real)" for i in range(outputs)]
    lines += [
        "(assert (>= X_0 0.0))",
        "(assert (<= X_0 1.0))",
        "(assert (>= X_1 0.0))",
        "(assert (<= X_1 1.0))",
    ]
    return ("\n".join(lines + list(asserts)) + "\n").encode()


def gemm_model(
    input_type: int = TensorProto.FLOAT, shape: tuple[int, ...] = (1, 2), opset: int = 13
) -> bytes:
    """A one-Gemm ONNX network 2 -> 2, with the input's element type, shape and opset varied."""
    weights = helper.make_tensor("W", TensorProto.FLOAT, (2, 2), [1.0, 0.0, 0.0, 1.0])
    bias = helper.make_tensor("B", TensorProto.FLOAT, (2,), [0.0, 0.0])
    node = helper.make_node("Gemm", ["x", "W", "B"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", input_type, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 2))],
        [weights, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def conv_model() -> bytes:
    """Conv 1x3x3 -> 1x2x2 (ReLU), Flatten, Gemm 4 -> 2: a network NNet cannot hold."""
    kernel = helper.make_tensor("K", TensorProto.FLOAT, (1, 1, 2, 2), [1.0, -1.0, 0.5, 0.25])
    weights = helper.make_tensor("W", TensorProto.FLOAT, (4, 2), [1.0, 0.0] * 4)
    bias = helper.make_tensor("B", TensorProto.FLOAT, (2,), [0.0, 0.0])
    nodes = [
        helper.make_node("Conv", ["x", "K"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "W", "B"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 1, 3, 3))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 2))],
        [kernel, weights, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def spec(body: str, network: str = str(NNET), prop: str = f'[property]\nvnnlib = "{VNNLIB}"\n') -> bytes:
    return (f'network = "{network}"\n{prop}{body}').encode()


def suite(body: str, task: bool = True) -> bytes:
    text = 'name = "h"\nformats = ["float"]\n' + body
    if task:
        text += f'[[task]]\nname = "t"\nnetwork = "{NNET}"\n[task.property]\nvnnlib = "{VNNLIB}"\n'
    return text.encode()


VERIFY = ("verify", str(NNET), "--property", str(VNNLIB))


def cli_option_cases() -> list[Case]:
    cases = []
    for value in ("nan", "inf", "-inf", "1e308", "-1", "0", "x", "", "1e400", "NaN", "+inf", "-0"):
        cases.append(Case(f"timeout={value}", (*VERIFY, "--timeout", value), phrase="timeout"))
    for value in ("0", "-1", "1", "63", str(10**20), "x", "1.5", ""):
        cases.append(Case(f"memory={value}", (*VERIFY, "--memory", value), phrase="memory"))
    for value in (
        "",
        " ",
        "x",
        "0",
        "1",
        "33",
        "8.",
        ".8",
        "0.8",
        "40.40",
        "8.-1",
        "8.8.8",
        "int4",
        "floaty",
        "1e3.2",
        "8,8",
    ):
        cases.append(Case(f"format={value!r}", (*VERIFY, "--format", value), phrase="format"))
    built = ("verify", str(NNET), "--center", "0.5,0.5", "--label", "0")
    for value in (HUGE, "nan", "inf", "-1", "x", "1/0", "", "1e99999", "0x10", "1e-99999", "--", "1..2"):
        cases.append(Case(f"eps={value[:12]}", (*built, f"--eps={value}"), phrase="eps"))
    for value in ("2", "0", "-1", "nan", "inf", "x"):
        cases.append(Case(f"lut-eps={value}", (*VERIFY, "--lut-eps", value), phrase="lut-eps"))
    for value in ("9", "-1", "x", "1.5"):
        cases.append(Case(f"lut-res={value}", (*VERIFY, "--lut-res", value), phrase="lut-res"))
    for value in ("0", "100", "-1", "nan", "x"):
        cases.append(Case(f"lut-range={value}", (*VERIFY, "--lut-range", value), phrase="lut-range"))
    for value in ("99", "-1", "2", "x"):
        cases.append(Case(f"label={value}", (*built[:-1], value, "--eps", "0.1")))
    for value in ("0.5", "x,y", "", "0.5,0.5,0.5", HUGE + ",0", "nan,0", "inf,0"):
        cases.append(
            Case(
                f"center={value[:12]}",
                ("verify", str(NNET), "--center", value, "--label", "0", "--eps", "0.1"),
            )
        )
    for value in ("0x0", "3x3", "x", "2x-1", ""):
        cases.append(Case(f"image-shape={value}", (*VERIFY, "--image-shape", value), phrase="image-shape"))
    for flag in (
        "--backend",
        "--solver",
        "--intervals",
        "--semantics",
        "--rounding",
        "--overflow",
        "--accumulate",
        "--layout",
        "--esbmc-solver",
    ):
        cases.append(Case(f"{flag}=bogus", (*VERIFY, flag, "bogus"), phrase=flag))
    for value in ("1000", "-1", "32", "x"):
        cases.append(
            Case(
                f"frac-bits={value}",
                ("info", str(NNET), "--ranges", "--frac-bits", value),
                phrase="frac-bits",
            )
        )
    for value in ("0", "-1", "x"):
        cases.append(Case(f"suite-jobs={value}", ("suite", "run", "tiny", "--jobs", value), phrase="jobs"))
        cases.append(Case(f"sweep-jobs={value}", ("sweep", str(NNET), "--jobs", value), phrase="jobs"))
    for value in ("-1", "nan", "inf", "0"):
        cases.append(
            Case(f"suite-timeout={value}", ("suite", "run", "tiny", "--timeout", value), phrase="timeout")
        )
    cases += [
        Case("no-command-args", ("verify",), phrase="give a network"),
        Case("unknown-command", ("bogus",), phrase="invalid choice"),
        Case("unknown-flag", (*VERIFY, "--bogus"), phrase="unrecognized"),
        Case("property-and-center", (*VERIFY, "--center", "0,0", "--label", "0"), phrase="either --property"),
        Case("no-property", ("verify", str(NNET)), phrase="no property"),
        Case(
            "center-without-radius", ("verify", str(NNET), "--center", "0,0", "--label", "0"), phrase="--eps"
        ),
        Case("float-and-format", (*VERIFY, "--float", "--format", "8.8"), phrase="not allowed"),
        Case("format-word-length", (*VERIFY, "--format", "8"), exit_code=0),  # as suites: W bits
        Case("semantics-real-fixed", (*VERIFY, "--semantics", "real"), phrase="not floating point"),
        Case(
            "semantics-real-int8-esbmc",
            (*VERIFY, "--float", "--semantics", "real", "--backend", "esbmc"),
            phrase="ESBMC",
        ),
        Case("seed-negative", (*VERIFY, "--seed", "-1"), phrase="--seed"),
        Case("lut-eps-and-res", (*VERIFY, "--lut-eps", "0.1", "--lut-res", "2"), phrase="not allowed"),
        Case("wide-float", (*VERIFY, "--float", "--accumulate", "wide"), phrase="fixed-point"),
        Case(
            "network-missing",
            ("verify", "{dir}/missing.nnet", "--property", str(VNNLIB)),
            phrase="no such file",
        ),
        Case("network-directory", ("verify", "{dir}", "--property", str(VNNLIB)), phrase="is a directory"),
        Case("property-directory", ("verify", str(NNET), "--property", "{dir}"), phrase="is a directory"),
        Case("suffix", ("info", "{dir}/n.txt"), (("n.txt", b"x"),), phrase="unsupported network file suffix"),
        Case("harness-no-output", ("harness", str(NNET), "--property", str(VNNLIB)), phrase="required"),
    ]
    return cases


def nnet_cases() -> list[Case]:
    cases = []
    lines = nnet_lines()
    for cut in range(2, len(lines)):
        cases.append(
            Case(
                f"nnet-truncated-{cut}",
                ("info", "{dir}/n.nnet"),
                (("n.nnet", "".join(lines[:cut]).encode()),),
            )
        )
    for number in range(2, len(lines)):
        for token in ("nan", "inf", "x", "1e999", HUGE, ""):
            mutated = list(lines)
            mutated[number] = token + "," + ",".join(lines[number].split(",")[1:])
            if mutated[number].strip() == lines[number].strip():
                continue
            data = "".join(mutated).encode()
            # min/max lines: an infinite bound is legal (no clipping): a reading or a clean refusal
            legal = -1 if number in (5, 6) and token in ("inf", "1e999", HUGE) else 2
            cases.append(
                Case(f"nnet-line{number}-{token[:6]}", ("info", "{dir}/n.nnet"), (("n.nnet", data),), legal)
            )
    ranges = lines.index("1.0,1.0,1.0,\n")
    for value in ("-1.0", "0.0", "-0.0"):
        mutated = list(lines)
        mutated[ranges] = f"{value},1.0,1.0,\n"
        cases.append(
            Case(
                f"nnet-range-{value}",
                ("info", "{dir}/n.nnet"),
                (("n.nnet", "".join(mutated).encode()),),
                phrase="range",
            )
        )
    cases += [
        Case("nnet-empty", ("info", "{dir}/n.nnet"), (("n.nnet", b""),)),
        Case(
            "nnet-binary",
            ("info", "{dir}/n.nnet"),
            (("n.nnet", bytes(range(256)) * 4),),
            phrase="not a text file",
        ),
        Case(
            "nnet-bom",
            ("info", "{dir}/n.nnet"),
            (("n.nnet", b"\xef\xbb\xbf" + NNET.read_bytes()),),
            exit_code=0,
        ),
        Case("nnet-trailing", ("info", "{dir}/n.nnet"), (("n.nnet", NNET.read_bytes() + b"1.0,\n"),)),
    ]
    return cases


def onnx_cases() -> list[Case]:
    valid = gemm_model()
    cases = [
        Case("onnx-valid", ("info", "{dir}/n.onnx"), (("n.onnx", valid),), exit_code=0),
        Case(
            "onnx-int64-input",
            ("info", "{dir}/n.onnx"),
            (("n.onnx", gemm_model(TensorProto.INT64)),),
            phrase="INT64",
        ),
        Case(
            "onnx-int8-input",
            ("info", "{dir}/n.onnx"),
            (("n.onnx", gemm_model(TensorProto.INT8)),),
            phrase="INT8",
        ),
        Case(
            "onnx-rank3-gemm",
            ("info", "{dir}/n.onnx"),
            (("n.onnx", gemm_model(shape=(1, 1, 2))),),
            phrase="rank-3",
        ),
        Case(
            "onnx-dim-1e9",
            ("info", "{dir}/n.onnx"),
            (("n.onnx", gemm_model(shape=(1, 10**9))),),
            phrase="QVERIFY_MAX_TENSOR_MB",
        ),
        Case(
            "onnx-dim-1e11",
            ("info", "{dir}/n.onnx"),
            (("n.onnx", gemm_model(shape=(1, 10**11))),),
            phrase="tensor size",
        ),
        Case(
            "onnx-dims-product",
            ("info", "{dir}/n.onnx"),
            (("n.onnx", gemm_model(shape=(1, 10**5, 10**5))),),
            phrase="tensor size",
        ),
        Case("onnx-empty", ("info", "{dir}/n.onnx"), (("n.onnx", b""),)),
        Case(
            "onnx-opset-99", ("info", "{dir}/n.onnx"), (("n.onnx", gemm_model(opset=99)),), phrase="opset 99"
        ),
        Case("onnx-opset-8", ("info", "{dir}/n.onnx"), (("n.onnx", gemm_model(opset=8)),), exit_code=0),
        Case(
            "convert-conv-to-nnet",
            ("convert", "{dir}/c.onnx", "{dir}/c.nnet"),
            (("c.onnx", conv_model()),),
            phrase="NNet holds dense layers only",
        ),
        Case(
            "convert-conv-to-onnx",
            ("convert", "{dir}/c.onnx", "{dir}/d.onnx"),
            (("c.onnx", conv_model()),),
            0,
        ),
        Case(
            "convert-int8-to-nnet",
            ("convert", str(ROOT / "benchmarks" / "digits-cnn" / "digits_cnn.int8.onnx"), "{dir}/q.nnet"),
            phrase="NNet",
        ),
        Case("onnx-garbage", ("info", "{dir}/n.onnx"), (("n.onnx", b"\x08\x07garbage" * 50),)),
    ]
    for cut in (1, 5, 10, 20, 40, 60, 80, 100, len(valid) - 1):
        cases.append(Case(f"onnx-truncated-{cut}", ("info", "{dir}/n.onnx"), (("n.onnx", valid[:cut]),)))
    for position in range(0, len(valid), max(1, len(valid) // 12)):
        flipped = bytearray(valid)
        flipped[position] ^= 0xFF
        cases.append(
            Case(
                f"onnx-flip-{position}", ("info", "{dir}/n.onnx"), (("n.onnx", bytes(flipped)),), exit_code=-1
            )
        )
    return cases


def vnnlib_cases() -> list[Case]:
    run = ("verify", str(NNET), "--property", "{dir}/p.vnnlib", "--float", "--timeout", "120")
    bad = {
        "unbalanced": vnnlib("(assert (>= Y_0 1.0)"),
        "extra-close": vnnlib("(assert (>= Y_0 1.0)))"),
        "unknown-command": vnnlib("(check-sat-bogus)"),
        "undeclared": vnnlib("(assert (>= Y_7 1.0))"),
        "huge-literal": vnnlib(f"(assert (>= Y_0 {HUGE}))"),
        "huge-literal-input": vnnlib(f"(assert (<= X_0 0.{HUGE}))"),
        "huge-exponent": vnnlib("(assert (>= Y_0 1e100000000))"),
        "division-by-zero": vnnlib("(assert (>= Y_0 (/ 1 0)))"),
        "nonlinear": vnnlib("(assert (>= (* Y_0 Y_1) 1))"),
        "empty": b"",
        "comment-only": b"; nothing\n",
        "not-utf8": b"(declare-const X_0 Real)\n\xff\xfe\n",
        "deep": vnnlib("(assert " + "(and " * 200 + "(>= Y_0 1)" + ")" * 200 + ")"),
        "wrong-inputs": vnnlib("(assert (>= Y_0 1.0))", declare=3),
        "wrong-outputs": vnnlib("(assert (>= Y_0 1.0))", outputs=5),
        "bad-relation": vnnlib("(assert (!= Y_0 1.0))"),
        "string": vnnlib('(assert (>= Y_0 "1"))'),
        "nan": vnnlib("(assert (>= Y_0 nan))"),
        "declare-twice": vnnlib("(declare-const X_0 Real)", "(assert (>= Y_0 1.0))"),
        "declare-int": b"(declare-const X_0 Int)\n",
        "inverted-box": vnnlib("(assert (>= X_0 2.0))", "(assert (>= Y_0 1.0))"),
    }
    cases = [Case(f"vnnlib-{name}", run, (("p.vnnlib", data),)) for name, data in bad.items()]
    for index in range(1, 20):  # unbalanced at many depths
        cases.append(
            Case(
                f"vnnlib-open-{index}",
                run,
                (("p.vnnlib", vnnlib("(assert " + "(and " * index + "(>= Y_0 1)")),),
            )
        )
    # by meaning: an empty conjunction is true (every input unsafe), an empty disjunction false
    cases += [
        Case("vnnlib-empty-and", run, (("p.vnnlib", vnnlib("(assert (and))")),), exit_code=10),
        Case("vnnlib-no-output-constraint", run, (("p.vnnlib", vnnlib()),), exit_code=10),
        Case("vnnlib-empty-or", run, (("p.vnnlib", vnnlib("(assert (or))")),), exit_code=0),
        Case(
            "harness-empty-and",
            ("harness", str(NNET), "--property", "{dir}/p.vnnlib", "-o", "{dir}/h"),
            (("p.vnnlib", vnnlib("(assert (and))")),),
            exit_code=0,
        ),
    ]
    return cases


def spec_cases() -> list[Case]:
    run = ("verify", "--spec", "{dir}/s.toml", "--timeout", "120")
    bad = {
        "timeout-neg": "[verify]\ntimeout = -1\n",
        "timeout-inf": "[verify]\ntimeout = inf\n",
        "timeout-nan": "[verify]\ntimeout = nan\n",
        "timeout-string": '[verify]\ntimeout = "60"\n',
        "memory-small": "[verify]\nmemory_mb = 1\n",
        "memory-float": "[verify]\nmemory_mb = 1.5\n",
        "backend": '[verify]\nbackend = "bogus"\n',
        "solver": '[verify]\nsolver = "cplex"\n',
        "unknown-verify": "[verify]\nbogus = 1\n",
        "unknown-top": "bogus = 1\n",
        "format-empty": '[implementation]\nformat = ""\n',
        "format-int": "[implementation]\nformat = 16\n",
        "format-bad": '[implementation]\nformat = "40.40"\n',
        "rounding-float": '[implementation]\nformat = "float"\nrounding = "floor"\n',
        "lut-eps": "[implementation]\nlut_eps = 2.0\n",
        "lut-res": "[implementation]\nlut_res = 9\n",
        "lut-both": "[implementation]\nlut_eps = 0.1\nlut_res = 2\n",
        "wide-float": '[implementation]\nformat = "half"\naccumulate = "wide"\n',
        "syntax": "[verify\n",
        "image-shape": "image_shape = [3, 3]\n",
    }
    cases = [Case(f"spec-{name}", run, (("s.toml", spec(body)),)) for name, body in bad.items()]
    lut_phrases = {"spec-lut-eps": "[implementation] lut_eps", "spec-lut-res": "[implementation] lut_res"}
    cases = [Case(c.id, c.argv, c.files, c.exit_code, lut_phrases.get(c.id, "")) for c in cases]
    built = '[property]\nkind = "robustness"\ncenter = [0.5, 0.5]\nlabel = 0\n'
    for name, value in (("huge", f'"{HUGE}"'), ("nan", "nan"), ("neg", "-1"), ("bool", "true")):
        cases.append(Case(f"spec-eps-{name}", run, (("s.toml", spec("", prop=built + f"eps = {value}\n")),)))
        cases.append(
            Case(
                f"spec-center-{name}",
                run,
                (("s.toml", spec("", prop=built.replace("[0.5, 0.5]", f"[{value}, 0.5]") + "eps = 0.1\n")),),
            )
        )
    numeral = "1" * 20_000  # unquoted: tomllib converts it whole (10^8 digits peaked at 5.3 GB)
    cases += [
        Case(
            "spec-unquoted-huge-center",
            run,
            (("s.toml", spec("", prop=built.replace("[0.5, 0.5]", f"[{numeral}.5, 0.5]") + "eps = 0.1\n")),),
            phrase="QVERIFY_MAX_LITERAL_CHARS",
        ),
        Case(
            "spec-unquoted-huge-timeout",
            run,
            (("s.toml", spec(f"[verify]\ntimeout = {numeral}\n")),),
            phrase="QVERIFY_MAX_LITERAL_CHARS",
        ),
        Case("spec-network-directory", run, (("s.toml", spec("", network="{dir}")),)),
        Case("spec-not-utf8", run, (("s.toml", b'name = "\xff"\n'),)),
        Case("spec-missing", ("verify", "--spec", "{dir}/missing.toml"), phrase="no such file"),
        Case("spec-directory", ("verify", "--spec", "{dir}"), phrase="is a directory"),
        Case(
            "spec-other-network",
            ("verify", str(TINY / "tanh3.onnx"), "--spec", "{dir}/s.toml"),
            (("s.toml", spec("")),),
            phrase="names network",
        ),
    ]
    return cases


def suite_cases() -> list[Case]:
    run = ("suite", "run", "{dir}/suite.toml", "--out", "{dir}/out", "--no-progress")
    bad = {
        "not-utf8": b'name = "\xff"\n',
        "timeout-neg": suite("timeout = -1\n"),
        "timeout-nan": suite("timeout = nan\n"),
        "timeout-string": suite('timeout = "x"\n'),
        "task-timeout": suite("").replace(b'name = "t"\n', b'name = "t"\ntimeout = -5\n'),
        "unknown": suite("bogus = 1\n"),
        "no-tasks": suite("", task=False),
        "format": suite("").replace(b'["float"]', b'["bogus"]'),
        "format-empty": suite("").replace(b'["float"]', b'[""]'),
        "syntax": b"[[task\n",
        "network-missing": suite("").replace(str(NNET).encode(), b"/nonexistent.nnet"),
        "image-shape": suite("image_shape = [0]\n"),
        "unquoted-huge-timeout": suite(f"timeout = {'9' * 20_000}\n"),
    }
    cases = [Case(f"suite-{name}", run, (("suite.toml", data),)) for name, data in bad.items()]
    journal_lines = {
        "array": b"[1, 2]\n",
        "no-key": b'{"record": {"status": "SAFE"}}\n',
        "no-record": b'{"key": "k"}\n',
        "garbage": b"{not json\n",
        "binary": b"\xff\xfe\n",
        "number": b"42\n",
    }
    for name, line in journal_lines.items():
        files = (("suite.toml", suite("")), ("out/journal.jsonl", line))
        cases.append(Case(f"journal-{name}", (*run, "--resume"), files, phrase="journal"))
    cases += [
        Case(
            "suite-out-is-file",
            ("suite", "run", "{dir}/suite.toml", "--out", "{dir}/f/x"),
            (("suite.toml", suite("")), ("f", b"")),
            phrase="not writable",
        ),
        Case("suite-exists", run, (("suite.toml", suite("")), ("out/journal.jsonl", b"")), phrase="--resume"),
        Case("suite-unknown-name", ("suite", "run", "no-such-suite"), phrase="no suite"),
    ]
    return cases


# ---------------------------------------------------------------- the commands after verify


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def npz_bomb(shape: tuple[int, ...] = (100_000, 100_000)) -> bytes:
    """An .npz of a few hundred bytes whose array x declares `shape` (numpy would allocate it whole)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": shape})
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive,
        archive.open("x.npy", "w", force_zip64=True) as member,
    ):
        member.write(header.getvalue() + bytes(1000))
    return buffer.getvalue()


X = np.random.default_rng(31).random((12, 2))
Y = np.arange(12) % 2
DATA = (("d.npz", npz(x=X, y=Y)),)
BAD_DATA = {  # name -> (file bytes, the phrase of the one error line)
    "text": (b"x,y\n0.5,1\n", "not an .npz archive"),
    "complex": (npz(x=X * (1 + 2j), y=Y), "not real numbers"),
    "labels-inf": (npz(x=X, y=np.where(Y == 1, np.inf, 0.0)), "labels must be integers"),
    "labels-uint64": (npz(x=X, y=np.full(12, 2**63 + 5, dtype=np.uint64)), "not a class index"),
    "labels-negative": (npz(x=X, y=Y - 1), "labels must be >= 0"),
    "labels-fraction": (npz(x=X, y=Y + 0.5), "labels must be integers"),
    "bomb": (npz_bomb(), "QVERIFY_MAX_TENSOR_MB"),
    "no-x": (npz(y=Y), "no array 'x'"),
    "empty": (npz(x=np.zeros((0, 2)), y=np.zeros(0, dtype=int)), "no samples"),
    "wide": (npz(x=np.ones((12, 3)), y=Y), "3 values per sample"),
    "nan": (npz(x=np.where(X > 0.9, np.nan, X), y=Y), "NaN"),
}
NUMBERS = ("nan", "inf", "-inf", "-1", "0", "x", "", "1e308")


def numeric_cases(
    command: str, base: tuple[str, ...], options: dict[str, tuple[str, ...]], files=()
) -> list[Case]:
    """Every bad value of every numeric option of a command: one error line naming the option."""
    cases = []
    for option, values in options.items():
        for value in values:
            cases.append(
                Case(f"{command}{option}={value[:12]}", (*base, option, value), files, phrase=option)
            )
    return cases


def data_cases(command: str, argv: tuple[str, ...], others=()) -> list[Case]:
    """Each bad data file, at the place of {data} in `argv`."""
    cases = []
    for name, (data, phrase) in BAD_DATA.items():
        files = ((f"{name}.npz", data), *others)
        line = tuple(part.replace("{data}", f"{{dir}}/{name}.npz") for part in argv)
        cases.append(Case(f"{command}-data-{name}", line, files, phrase=phrase))
    missing = tuple(part.replace("{data}", "{dir}/missing.npz") for part in argv)
    folder = tuple(part.replace("{data}", "{dir}") for part in argv)
    suffix = tuple(part.replace("{data}", "{dir}/d.txt") for part in argv)
    cases += [
        Case(f"{command}-data-missing", missing, others, phrase="no such"),
        Case(f"{command}-data-directory", folder, others),
        Case(f"{command}-data-suffix", suffix, (("d.txt", b"1,2\n"), *others), phrase="d.txt"),
    ]
    return cases


def output_cases(command: str, argv: tuple[str, ...], files=()) -> list[Case]:
    """-o DIR that holds someone's file (refused without --overwrite), and -o a file."""
    return [
        Case(
            f"{command}-out-not-empty",
            (*argv, "-o", "{dir}/o"),
            (*files, ("o/mine.txt", b"mine")),
            phrase="is not empty",
        ),
        Case(f"{command}-out-file", (*argv, "-o", "{dir}/f"), (*files, ("f", b"")), phrase="f"),
    ]


def quantize_cases() -> list[Case]:
    base = ("quantize", str(NNET), "--calibration", "uniform", "-o", "{dir}/q.onnx")
    cases = numeric_cases("quantize", base, {
        "--samples": ("0", "-1", "x", "", "1.5", "nan", str(10**12)), "--seed": ("-1", "x", "", "1.5"),
    })  # fmt: skip
    calibration = ("quantize", str(NNET), "--calibration", "{data}", "-o", "{dir}/q.onnx")
    cases += data_cases("quantize", calibration)
    cases += [
        Case(  # an ONNX network without normalisation (an NNet's min/max would clip the values)
            "quantize-float32-overflow",
            ("quantize", "{dir}/g.onnx", "--calibration", "{dir}/big.npz", "-o", "{dir}/q.onnx"),
            (("big.npz", npz(x=np.full((4, 2), 1e39))), ("g.onnx", gemm_model())),
            phrase="float32",
        ),
        Case("quantize-out-nnet", (*base[:4], "-o", "{dir}/q.nnet"), phrase="ONNX"),
        Case("quantize-out-directory", (*base[:4], "-o", "{dir}"), phrase="ONNX"),
        Case("quantize-format", (*base, "--format", "bogus"), phrase="--format"),
        Case("quantize-activations", (*base, "--activations", "int4"), phrase="--activations"),
        Case("quantize-network-missing", ("quantize", "{dir}/n.onnx", *base[2:]), phrase="no such file"),
        Case("quantize-calibration-builtin-split", (*base[:3], "digits:dev", *base[4:]), phrase="split"),
    ]
    return cases


def diff_cases() -> list[Case]:
    base = ("diff", str(NNET), "--candidate", "8.8", "--seeds", "2", "--budget", "20", "--no-progress",
            "-o", "{dir}/o")  # fmt: skip
    cases = numeric_cases("diff", base, {
        "--seeds": ("0", "-1", "x", str(10**12)),
        "--budget": ("0", "-1", "x"),
        "--time-budget": ("0", "-1", "nan", "x"),
        "--population": ("0", "1", str(10**9), "x"),
        "--epsilon": ("0", "nan", "2", "-1", "x"),
        "--mutation-rate": ("nan", "2", "-1"),
        "--k": ("0", "2", "100", "-1", "x"),
        "--keep": ("-1", "x"),
        "--min-psnr": ("nan", "-1"),
        "--seed": ("-1", "x"),
        "--domain": ("x", "1", "nan,0", "inf,1", "1,0", "5,10"),
        "--range": ("x", "brightness=x", "brightness=nan,1"),
    })  # fmt: skip
    prove = (*base, "--methods", "none", "--prove")
    cases += numeric_cases("diff-prove", prove, {
        "--regions": ("0", "-1", "x"),
        "--radius": ("nan", "2", "-1"),
        "--timeout": ("nan", "inf", "0", "-1", "1e308", "x"),
        "--brightness": ("x", "1", "nan,1", "0.5,0.1"),
        "--contrast": ("x", "inf,1"),
    })  # fmt: skip
    data = ("diff", str(NNET), "--candidate", "8.8", "--data", "{data}", "--no-progress", "-o", "{dir}/o")
    cases += data_cases("diff", data)
    cases += output_cases("diff", base[:-2])
    cases += [
        Case("diff-methods", (*base, "--methods", "dance"), phrase="unknown search method"),
        Case("diff-families", (*base, "--families", "twirl"), phrase="twirl"),
        Case("diff-criterion", (*base, "--criterion", "bogus"), phrase="--criterion"),
        Case("diff-target", (*base, "--criterion", "targeted", "--target", "9"), phrase="--target"),
        Case("diff-delta", (*base, "--criterion", "distance", "--delta", "nan"), phrase="delta"),
        Case("diff-candidate", (*base[:2], "--candidate", "9.x", *base[4:]), phrase="format"),
        Case("diff-candidate-int8", (*base[:2], "--candidate", "int8", *base[4:]), phrase="int8"),
        Case("diff-reference", (*base, "--reference", "bogus"), phrase="format"),
        Case("diff-image-shape", (*base, "--image-shape", "3x3"), phrase="image-shape"),
        Case("diff-overwrite-and-resume", (*base, "--overwrite", "--resume"), phrase="exclude each other"),
    ]
    return cases


def impact_cases() -> list[Case]:
    base = ("impact", str(NNET), "--candidate", "8.8", "--data", "{dir}/d.npz", "--families", "awgn",
            "--no-progress", "-o", "{dir}/o")  # fmt: skip
    cases = numeric_cases("impact", base, {
        "--samples": ("0", "-1", "x"),
        "--seed": ("-1", "x"),
        "--resamples": ("-1", "x", str(10**12)),
        "--confidence": ("0", "1", "nan", "2", "x"),
        "--temperature": ("0", "-1", "nan", "inf", "x"),
        "--domain": ("x", "nan,0", "1,0", "inf,1"),
    }, DATA)  # fmt: skip
    for value in ("awgn=x", "awgn=", "awgn=nan", "awgn=-1", "x"):
        cases.append(Case(f"impact--grid={value}", (*base, "--families", "awgn", "--grid", value), DATA))
    data = ("impact", str(NNET), "--candidate", "8.8", "--data", "{data}", "--families", "awgn", "--no-progress",
            "-o", "{dir}/o")  # fmt: skip
    cases += data_cases("impact", data)
    cases += output_cases("impact", base[:-2], DATA)
    cases += [
        Case("impact-families", (*base, "--families", "fog"), DATA, phrase="fog"),
        Case("impact-candidate", (*base[:2], "--candidate", "int9", *base[4:]), DATA, phrase="format"),
        Case("impact-reference", (*base, "--reference", "bogus"), DATA, phrase="format"),
        Case("impact-image-shape", (*base, "--image-shape", "0x0"), DATA, phrase="image-shape"),
        Case("impact-no-data", base[:4], DATA, phrase="--data"),
    ]
    return cases


def repair_cases() -> list[Case]:
    base = ("repair", str(NNET), "--format", "4.4", "--repair-set", "{dir}/d.npz", "--validation",
            "{dir}/d.npz", "--no-progress", "-o", "{dir}/o")  # fmt: skip
    cases = numeric_cases("repair", base, {
        "--layer": ("0", "99", "-1", "x"),
        "--neurons": ("0", "-1", "x"),
        "--random-runs": ("-1", "x"),
        "--random-seed": ("-1", "x", "1.5"),
        "--margin": ("-1", "x"),
        "--max-tests": ("0", "-1", "x"),
        "--max-delta": ("-1", "x"),
        "--time-limit": NUMBERS,
    }, DATA)  # fmt: skip
    data = ("repair", str(NNET), "--format", "4.4", "--repair-set", "{data}", "--validation", "{dir}/d.npz",
            "--no-progress", "-o", "{dir}/o")  # fmt: skip
    cases += data_cases("repair", data, DATA)
    cases += output_cases("repair", base[:-2], DATA)
    cases += [
        Case("repair-metrics", (*base, "--metrics", "nope"), DATA, phrase="unknown metric"),
        Case("repair-format-half", (*base[:2], "--format", "half", *base[4:]), DATA, phrase="fixed-point"),
        Case("repair-format-bogus", (*base[:2], "--format", "bogus", *base[4:]), DATA, phrase="format"),
        Case("repair-no-format", (*base[:2], *base[4:]), DATA, phrase="--format"),
        Case("repair-quantized-missing", (*base, "--quantized", "{dir}/q.nnet"), DATA, phrase="no such file"),
        Case("repair-properties-missing", (*base, "--properties", "{dir}/p.vnnlib"), DATA, phrase="p.vnnlib"),
        Case("repair-overwrite-and-resume", (*base, "--overwrite", "--resume"), DATA, phrase="exclude"),
    ]
    return cases


ACAS_ONNX = ROOT / "benchmarks" / "acasxu" / "onnx" / "ACASXU_run2a_1_1_batch_2000.onnx"
ACAS_PROP = ROOT / "benchmarks" / "acasxu" / "vnnlib" / "prop_1.vnnlib"
VNNCOMP_RUN = ("vnncomp", "run", "v1", "acasxu", str(ACAS_ONNX), str(ACAS_PROP), "{dir}/out.txt")


def vnncomp_cases() -> list[Case]:
    """`qverify vnncomp run` (what run_instance.sh calls): each also leaves out.txt saying error
    (test_vnncomp_run_writes_error_on_bad_arguments)."""
    cases = [Case(f"vnncomp-timeout={value[:12]}", (*VNNCOMP_RUN, value), phrase="TIMEOUT")
             for value in (*NUMBERS, "abc", "1e400")]  # fmt: skip
    cases += [
        Case("vnncomp-semantics", (*VNNCOMP_RUN, "60", "--semantics", "bogus"), phrase="QVERIFY_SEMANTICS"),
        Case(
            "vnncomp-format",
            (*VNNCOMP_RUN, "60", "--semantics", "quantized", "--format", "40.40"),
            phrase="format",
        ),
        Case("vnncomp-version", ("vnncomp", "run", "v2", *VNNCOMP_RUN[3:], "60"), phrase="v1"),
        Case(
            "vnncomp-onnx-missing",
            (*VNNCOMP_RUN[:4], "{dir}/n.onnx", *VNNCOMP_RUN[5:], "60"),
            phrase="no such file",
        ),
        Case(
            "vnncomp-vnnlib-garbage",
            (*VNNCOMP_RUN[:5], "{dir}/p.vnnlib", VNNCOMP_RUN[6], "60"),
            (("p.vnnlib", b"(assert (>= Y_0"),),
        ),
        Case(
            "vnncomp-prepare-version",
            ("vnncomp", "prepare", "v0", "acasxu", str(ACAS_ONNX), str(ACAS_PROP)),
            phrase="v1",
        ),
        Case("vnncomp-prepare-mismatch", ("vnncomp", "prepare", "v1", "tiny", str(NNET), str(ACAS_PROP))),
    ]
    return cases


NEW_COMMAND_CASES = quantize_cases() + diff_cases() + impact_cases() + repair_cases() + vnncomp_cases()


# ---------------------------------------------------------------- issue 43's corpus (the 11 cases)


def graph_model(nodes, initializers, input_shape, output_shape=None) -> bytes:
    """A float ONNX model of `nodes` from input x to output y (opset 13)."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, input_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def one_conv(kernel: np.ndarray, input_shape, **attributes) -> bytes:
    """Conv (with the attributes) then Flatten: the smallest network around one convolution."""
    nodes = [
        helper.make_node("Conv", ["x", "K"], ["c"], **attributes),
        helper.make_node("Flatten", ["c"], ["y"]),
    ]
    return graph_model(nodes, [numpy_helper.from_array(kernel.astype(np.float32), "K")], input_shape)


def repeated_name_model() -> bytes:
    """Gemm x -> c, then `Relu c -> c` (onnxruntime: "Duplicate definition of name"), Gemm c -> y."""
    weights = numpy_helper.from_array(np.eye(2, dtype=np.float32), "W")
    bias = numpy_helper.from_array(np.zeros(2, np.float32), "B")
    nodes = [
        helper.make_node("Gemm", ["x", "W", "B"], ["c"]),
        helper.make_node("Relu", ["c"], ["c"]),
        helper.make_node("Gemm", ["c", "W", "B"], ["y"]),
    ]
    return graph_model(nodes, [weights, bias], (1, 2), (1, 2))


def declarations(count: int) -> bytes:
    """A VNN-LIB file declaring `count` inputs (a box on X_0 only, one output bound)."""
    lines = [f"(declare-const X_{i} Real)" for i in range(count)]
    lines += ["(declare-const Y_0 Real)", "(assert (>= X_0 0))", "(assert (<= X_0 1))", "(assert (>= Y_0 1))"]
    return "\n".join(lines).encode()


def issue43_cases() -> list[Case]:
    """Issue 43's hostile corpus: each case exits 2 with one error line naming the node or value
    (the 300x300 convolution's `info` answers, without a verdict; `--jobs`: test_jobs_are_capped_*;
    the int8 model with a huge input scale: tests/test_int8_hostile.py)."""
    sixteen = graph_model(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [numpy_helper.from_array(np.ones((16, 1), np.float32), "W")],
        (1, 16),
        (1, 1),
    )
    variant = suite(f'[variants.int8]\nformat = "int8"\n[variants.int8.networks]\n"{NNET}" = "{NNET}"\n')
    return [
        Case(
            "issue43-conv-0-channels",
            ("verify", "{dir}/n.onnx", "--center", "0,0,0,0,0,0,0,0,0", "--label", "0", "--eps", "0.1"),
            (("n.onnx", one_conv(np.zeros((0, 1, 2, 2)), (1, 1, 3, 3))),),
            phrase="(0, 1, 2, 2)",
        ),
        Case(
            "issue43-conv-1x1-300x300-info",
            ("info", "{dir}/n.onnx"),
            (("n.onnx", one_conv(np.ones((1, 1, 1, 1)), (1, 1, 300, 300))),),
            exit_code=0,
        ),
        Case(
            "issue43-conv-pads-8e10-outputs",
            ("info", "{dir}/n.onnx"),
            (("n.onnx", one_conv(np.ones((1, 1, 1, 1)), (1, 1, 3, 3), pads=[141000] * 4)),),
            phrase="282003",
        ),
        Case(
            "issue43-auto-pad-with-pads",
            ("info", "{dir}/n.onnx"),
            (
                (
                    "n.onnx",
                    one_conv(np.ones((1, 1, 2, 2)), (1, 1, 3, 3), auto_pad="SAME_LOWER", pads=[1, 1, 0, 0]),
                ),
            ),
            phrase="auto_pad SAME_LOWER",
        ),
        Case(
            "issue43-repeated-tensor-name",
            ("verify", "{dir}/n.onnx", "--center", "0,0", "--label", "0", "--eps", "0.1"),
            (("n.onnx", repeated_name_model()),),
            phrase="defines 'c'",
        ),
        Case(
            "issue43-vnnlib-1e6-inputs",
            ("verify", "{dir}/n.onnx", "--property", "{dir}/p.vnnlib", "--timeout", "20"),
            (("n.onnx", sixteen), ("p.vnnlib", declarations(10**6))),
            phrase="X_16",
        ),
        Case(
            "issue43-vnncomp-int8-format-float-model",
            (*VNNCOMP_RUN, "60", "--semantics", "quantized", "--format", "int8-x86"),
            phrase="no int8 quantization",
        ),
        Case(
            "issue43-suite-int8-variant-float-model",
            ("suite", "run", "{dir}/suite.toml", "--out", "{dir}/out", "--format", "int8", "--no-progress"),
            (("suite.toml", variant),),
            phrase="a float model",
        ),
        Case(
            "issue43-eps-1e999",
            (*VERIFY[:2], "--center", "0.5,0.5", "--label", "0", "--eps", "1e999"),
            phrase="1e999",
        ),
    ]


CASES = (
    cli_option_cases() + nnet_cases() + onnx_cases() + vnnlib_cases() + spec_cases() + suite_cases()
    + NEW_COMMAND_CASES + issue43_cases()
)  # fmt: skip


def test_there_are_at_least_300_cases():
    assert len(CASES) >= 300 and len({case.id for case in CASES}) == len(CASES)


def test_every_new_command_has_cases_of_every_class():
    """quantize, diff, impact, repair, vnncomp: numeric values, data files, output folders."""
    for command in ("quantize", "diff", "impact", "repair"):
        ids = [case.id for case in NEW_COMMAND_CASES if case.id.startswith(command)]
        assert any("=nan" in i or "=-1" in i for i in ids) and any("-data-" in i for i in ids), command
    assert {"vnncomp-timeout=nan", "vnncomp-semantics", "vnncomp-version"} <= {c.id for c in CASES}


@pytest.mark.parametrize("value", ["abc", "nan", "-1", "1e400"])
def test_vnncomp_run_writes_error_on_bad_arguments(value, tmp_path, capsys):
    """The result file says `error` whatever the command line got wrong, TIMEOUT and
    QVERIFY_SEMANTICS included (they used to end in argparse, writing nothing)."""
    case = Case(f"timeout-{value}", (*VNNCOMP_RUN, value), phrase="TIMEOUT")
    check(case, tmp_path, capsys)
    assert (tmp_path / "out.txt").read_text() == "error\n"
    (tmp_path / "out.txt").unlink()
    check(Case("semantics", (*VNNCOMP_RUN, "60", "--semantics", "bogus")), tmp_path, capsys)
    assert (tmp_path / "out.txt").read_text() == "error\n"


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_hostile_input(case: Case, tmp_path: Path, capsys) -> None:
    if case.exit_code == -1:  # e.g. a flipped byte may or may not leave a valid model: 0 or a clean 2
        code, _, err, elapsed = run_case(case, tmp_path, capsys)
        assert code in (0, 2) and "Traceback" not in err and "internal error" not in err, err
        assert code == 0 or len(err.strip().splitlines()) == 1
        assert elapsed < CASE_SECONDS
        return
    check(case, tmp_path, capsys)


def test_harness_of_an_empty_conjunction_is_valid_c(tmp_path, capsys):
    case = next(c for c in CASES if c.id == "harness-empty-and")
    check(case, tmp_path, capsys)
    harness = tmp_path / "h" / "harness.c"
    assert "__ESBMC_assert(!(1" in harness.read_text()
    subprocess.run(["gcc", "-fsyntax-only", "-I", str(harness.parent), str(harness)], check=True)


# ---------------------------------------------------------------- as real processes


def test_argparse_errors_are_one_line_with_a_usage_hint():
    result = qverify("verify", str(NNET), "--timeout", "x")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: argument --timeout: invalid float value: 'x' (see `qverify verify --help`)"
    ]


def test_error_verdicts_say_so_on_stderr(tmp_path):
    """An ERROR verdict (here: esbmc missing at the given path) has its `error:` line on stderr."""
    result = qverify(*VERIFY, "--backend", "esbmc", "--esbmc", str(tmp_path / "no-esbmc"))
    assert result.returncode == 2
    assert result.stdout.startswith("ERROR: ")
    assert [line for line in result.stderr.splitlines() if line.startswith("error: ")], result.stderr


def write_spec(folder: Path, body: str = "") -> Path:
    """A spec of relu2.nnet; its timeout (and the one the command line gives over it) far above what
    the query takes, so that a busy machine only makes it slower (the tests check which applies)."""
    path = folder / "s.toml"
    path.write_bytes(spec('[implementation]\nformat = "16.16"\n[verify]\ntimeout = 300\n' + body))
    return path


def test_spec_and_a_different_network_is_an_error(tmp_path):
    result = qverify("verify", str(TINY / "tanh3.onnx"), "--spec", str(write_spec(tmp_path)))
    assert result.returncode == 2
    assert "names network" in result.stderr and str(NNET) in result.stderr
    assert not result.stdout  # nothing was verified


def test_command_line_overrides_the_spec_and_the_record_says_where_from(tmp_path):
    record = tmp_path / "r.json"
    spec_path = write_spec(tmp_path)
    result = qverify(
        "verify",
        str(NNET),
        "--spec",
        str(spec_path),
        "--format",
        "8.8",
        "--timeout",
        "600",
        "--json",
        str(record),
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(record.read_text())
    assert data["format"] == "<8,8>" and "timeout=600-" in data["options"]
    assert data["origins"] == {
        "network": "spec",
        "property": "spec",
        "format": "command line",
        "timeout": "command line",
    }
    alone = qverify("verify", "--spec", str(spec_path), "--json", str(record))
    assert alone.returncode == 0, alone.stderr
    data = json.loads(record.read_text())
    assert data["format"] == "<16,16>" and "timeout=300-" in data["options"]
    assert data["origins"] == {"network": "spec", "property": "spec", "format": "spec", "timeout": "spec"}


def big_vnnlib(path: Path, disjuncts: int) -> Path:
    body = " ".join(f"(and (>= Y_0 {i}.5) (<= Y_1 -{i}.25))" for i in range(disjuncts))
    path.write_bytes(vnnlib(f"(assert (or {body}))"))
    return path


def test_parsing_runs_under_the_timeout_and_memory_limits(tmp_path):
    """A large VNN-LIB file is read under --timeout and --memory: UNKNOWN with the reason, at the
    limit (it used to run for minutes and take gigabytes whatever the limits said)."""
    path = big_vnnlib(tmp_path / "big.vnnlib", 200_000)  # 9 MB, ~5 s to read
    started = time.monotonic()
    result = qverify("verify", str(NNET), "--property", str(path), "--timeout", "1")
    assert time.monotonic() - started < 12
    assert result.returncode == 20, result.stderr
    assert result.stdout.startswith("UNKNOWN: timeout: 1 s reached while reading the inputs")
    result = qverify("verify", str(NNET), "--property", str(path), "--memory", "64")
    assert result.returncode == 20, result.stderr
    assert result.stdout.startswith("UNKNOWN: memory: reading the inputs took more than the limit of 64 MB")


# ---------------------------------------------------------------- randomized (slow)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random edit: delete, duplicate or replace a span, or insert a hostile token."""
    if not data:
        return b"x"
    start = rng.randrange(len(data))
    end = min(len(data), start + rng.randint(1, 20))
    choice = rng.randrange(4)
    if choice == 0:
        return data[:start] + data[end:]
    if choice == 1:
        return data[:end] + data[start:end] + data[end:]
    if choice == 2:
        return data[:start] + bytes(rng.randrange(256) for _ in range(end - start)) + data[end:]
    token = rng.choice([b"nan", b"inf", b"-1", b"1e999", HUGE.encode(), b"(", b")", b",", b"\n", b"\xff"])
    return data[:start] + token + data[start:]


@pytest.mark.slow
def test_randomized_mutations_never_crash(tmp_path, capsys):
    rng = random.Random(20)
    sources = {
        "n.nnet": (NNET.read_bytes(), ("info", "{dir}/n.nnet")),
        "p.vnnlib": (
            VNNLIB.read_bytes(),
            ("verify", str(NNET), "--property", "{dir}/p.vnnlib", "--float", "--timeout", "10"),
        ),
        "n.onnx": (gemm_model(), ("info", "{dir}/n.onnx")),
        "s.toml": (spec("[verify]\ntimeout = 10\n"), ("verify", "--spec", "{dir}/s.toml")),
    }
    counts = {name: 0 for name in sources}
    for index in range(400):
        name = rng.choice(sorted(sources))
        data, argv = sources[name]
        for _ in range(rng.randint(1, 3)):
            data = mutate(data, rng)
        folder = tmp_path / str(index)
        folder.mkdir()
        code, _, err, elapsed = run_case(Case(f"random-{index}", argv, ((name, data),)), folder, capsys)
        assert "Traceback" not in err and "internal error" not in err, (name, data[:200], err)
        assert code in (0, 2, 10, 20), (name, code, err)
        assert code != 2 or len(err.strip().splitlines()) == 1, err
        assert elapsed < CASE_SECONDS
        counts[name] += 1
    assert all(counts.values())


def test_limits_are_named_and_overridable(tmp_path, monkeypatch, capsys):
    from qverify.input_limits import ALL_LIMITS

    assert {limit.variable for limit in ALL_LIMITS} == {
        "QVERIFY_MAX_FILE_MB",
        "QVERIFY_MAX_LITERAL_CHARS",
        "QVERIFY_MAX_TENSOR_MB",
        "QVERIFY_MAX_ASSERTS",
    }
    big = tmp_path / "big.vnnlib"
    big.write_bytes(vnnlib("(assert (>= Y_0 1.0))") + b"; padding\n" * 120_000)  # 1.2 MB
    monkeypatch.setenv("QVERIFY_MAX_FILE_MB", "1")
    case = Case("file-size", ("verify", str(NNET), "--property", str(big)), phrase="QVERIFY_MAX_FILE_MB")
    check(case, tmp_path, capsys)
    monkeypatch.setenv("QVERIFY_MAX_FILE_MB", "2")
    check(Case("file-size-raised", case.argv, exit_code=10), tmp_path, capsys)
    literal = "0." + "0" * 1200 + "1"
    monkeypatch.setenv("QVERIFY_MAX_LITERAL_CHARS", "2000")
    built = ("verify", str(NNET), "--center", "0.5,0.5", "--label", "0", "--eps", literal, "--float")
    check(Case("literal-raised", built, exit_code=10), tmp_path, capsys)  # label 1 wins at the centre
    many = tmp_path / "many.vnnlib"
    many.write_bytes(vnnlib("(assert (>= Y_0 1.0))") + b"(assert (>= X_0 0.0))\n" * 30)
    monkeypatch.setenv("QVERIFY_MAX_ASSERTS", "20")
    check(
        Case("assert-count", ("verify", str(NNET), "--property", str(many)), phrase="QVERIFY_MAX_ASSERTS"),
        tmp_path,
        capsys,
    )
    monkeypatch.setenv("QVERIFY_MAX_ASSERTS", "100")
    check(
        Case("assert-count-raised", ("verify", str(NNET), "--property", str(many)), exit_code=10),
        tmp_path,
        capsys,
    )
    monkeypatch.setenv("QVERIFY_MAX_LITERAL_CHARS", "bogus")
    check(Case("limit-bogus", built, phrase="QVERIFY_MAX_LITERAL_CHARS"), tmp_path, capsys)


def test_the_300x300_convolution_builds_no_dense_matrix(tmp_path):
    """Issue 43: `info` of a 1x1 convolution on a 300x300 image answers (exit 0, no verdict) without the
    65 GB dense matrix: reading it builds the taps only (90,000), the matrix is built on first use and
    refused past the tensor-size limit, and `info` stays under 200 MB in a process of its own."""
    from qverify.io import load_network

    path = tmp_path / "n.onnx"
    path.write_bytes(one_conv(np.ones((1, 1, 1, 1)), (1, 1, 300, 300)))
    layer = load_network(path).layers[0]
    assert layer._matrix is None and layer.taps().inputs.shape == (90_000, 1)
    with pytest.raises(InputError, match=r"its dense matrix: shape \[90000, 90000\].*QVERIFY_MAX_TENSOR_MB"):
        _ = layer.matrix
    peak = (  # VmHWM: this process's own peak (ru_maxrss would count the forking test process's)
        "import re, sys\nfrom qverify.cli import main\ncode = main(sys.argv[1:])\n"
        "status = open('/proc/self/status').read()\n"
        "print(re.search(r'VmHWM:\\s*(\\d+)', status).group(1), file=sys.stderr)\nsys.exit(code)"
    )
    command = [sys.executable, "-c", peak, "info", str(path)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "conv 1x300x300 -> 1x300x300" in done.stdout, done.stderr
    assert "UNKNOWN" not in done.stdout and int(done.stderr.split()[-1]) < 200 * 1024, done.stderr


def test_jobs_are_capped_at_the_usable_cores_with_a_note(tmp_path, capsys):
    """Issue 43: `suite run --jobs 10000` runs as many jobs as this process has cores, and says so."""
    from qverify.backends.internal import usable_cores

    (tmp_path / "suite.toml").write_bytes(suite(""))
    argv = ("suite", "run", "{dir}/suite.toml", "--out", "{dir}/out", "--jobs", "10000", "--no-progress")
    code, out, err, _ = run_case(Case("jobs", argv), tmp_path, capsys)
    assert code == 0 and "SAFE 1" in out, (out, err)
    assert f"note: --jobs 10000 is more than the {usable_cores()} cores this process may use" in err


def test_info_out_of_memory_is_an_error_not_a_verdict(tmp_path, capsys, monkeypatch):
    """Issue 43: past a raised tensor-size limit, the ~8e10-output convolution's taps do not fit in
    memory; `info` has no verdict to give, so it says so in one error line (it answered UNKNOWN)."""
    monkeypatch.setenv("QVERIFY_MAX_TENSOR_MB", str(10**9))
    files = (("n.onnx", one_conv(np.ones((1, 1, 1, 1)), (1, 1, 3, 3), pads=[141000] * 4)),)
    code, out, err, _ = run_case(Case("oom", ("info", "{dir}/n.onnx"), files), tmp_path, capsys)
    assert (
        code == 2 and out == "" and err == "error: out of memory (a larger input than this machine holds)\n"
    )
