"""Hexadecimal literals of whole arrays (`qverify.hexfloat`): the writer gives `float.hex`'s text for
every double (zeros of both signs, subnormals, extremes, random bit patterns), the reader gives back
the same bits, and any other text is refused (None), never read as a wrong value; then the
lifter's initialisers with such literals: read exactly, non-canonical exact literals still read the
slow way, malformed or oversized lists declined with a reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qverify.engine.netlevel.lift.arrays import extract_arrays
from qverify.engine.netlevel.lift.errors import NotRecognised
from qverify.errors import InputError
from qverify.hexfloat import hex_literals_text, read_canonical_hex

SMALLEST_SUBNORMAL = math.ulp(0.0)
SMALLEST_NORMAL = 2.0**-1022
SPECIAL = np.array(
    [
        0.0,
        -0.0,
        SMALLEST_SUBNORMAL,
        -SMALLEST_SUBNORMAL,
        SMALLEST_NORMAL - SMALLEST_SUBNORMAL,  # the largest subnormal
        SMALLEST_NORMAL,
        -SMALLEST_NORMAL,
        1.7976931348623157e308,
        -1.7976931348623157e308,
        1.0,
        -1.0,
        0.5,
        1.5,
        2.0**-149,  # float32's smallest subnormal (a normal double)
        2.0**-126,
        float(np.finfo(np.float32).max),
        2.0**-24,  # half's smallest subnormal
        65504.0,
        1e-310,
        123.456,
        2.0**1023,
        10.0,
        1000.0,
        2.0**-1000,
        2.0**-100,
        2.0**-10,
    ]
)


def _random_doubles(count: int, seed: int) -> np.ndarray:
    bits = np.random.default_rng(seed).integers(0, 2**64, count, dtype=np.uint64, endpoint=False)
    values = bits.view(np.float64)
    return values[np.isfinite(values)]


def _random_floats(count: int, seed: int) -> np.ndarray:
    bits = np.random.default_rng(seed).integers(0, 2**32, count, dtype=np.uint32, endpoint=False)
    values = bits.view(np.float32)
    return values[np.isfinite(values)].astype(np.float64)


def _random_halves(seed: int) -> np.ndarray:
    values = np.arange(2**16, dtype=np.uint16).view(np.float16)
    return np.random.default_rng(seed).permutation(values[np.isfinite(values)].astype(np.float64))


CASES = {
    "special": SPECIAL,
    "doubles": _random_doubles(20_000, 1),
    "floats": _random_floats(20_000, 2),
    "every-half": _random_halves(3),
}


def _reference(values: np.ndarray, suffix: str, separator: str) -> str:
    return "".join(value.hex() + suffix + separator for value in values.tolist())


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("suffix", "separator"), [("", ","), ("f", ","), ("f", ", "), ("", ";\n")])
def test_writer_gives_float_hex_text(case, suffix, separator):
    values = CASES[case]
    text, ends = hex_literals_text(values, suffix, separator)
    assert text == _reference(values, suffix, separator)
    lengths = [len(value.hex() + suffix + separator) for value in values.tolist()]
    assert ends.tolist() == np.cumsum(lengths).tolist()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("suffix", ["", "f"])
def test_reader_gives_back_the_same_bits(case, suffix):
    values = CASES[case]
    text = _reference(values, suffix, ",")[:-1].encode("ascii")
    read = read_canonical_hex(text, values.size, suffix.encode("ascii"))
    assert read is not None
    assert np.array_equal(read.view(np.uint64), values.view(np.uint64))  # -0.0 included
    for value in values[:300].tolist():  # and one by one, as the first and the last of a list
        single = read_canonical_hex(value.hex().encode("ascii") + suffix.encode("ascii"), 1, suffix.encode())
        assert single is not None and single.view(np.uint64)[0] == np.float64(value).view(np.uint64)


def test_writer_refuses_what_c_cannot_write():
    for value in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match="C literal"):
            hex_literals_text(np.array([1.0, value]))
    with pytest.raises(ValueError, match="NUL"):
        hex_literals_text(np.array([1.0]), separator="\0")


NOT_CANONICAL = [
    b"0x1.8p+1",  # a short mantissa (exact, but not float.hex's text)
    b"0X1.8000000000000p+1",
    b"0x1.8000000000000P+1",
    b"0x1.8000000000000p1",
    b"0x1.8000000000000p+01",
    b"0x1.8000000000000p+1 ",
    b" 0x1.8000000000000p+1",
    b"+0x1.8000000000000p+1",
    b"0x1.8000000000000p+1f",  # a suffix not asked for
    b"0x1.A000000000000p+1",
    b"0x2.0000000000000p+1",
    b"0x0.0000000000000p+0",  # zero is 0x0.0p+0
    b"0x0.0p-1022",
    b"0x1.0000000000000p+1024",  # beyond the largest double
    b"0x1.0000000000000p-1023",  # a subnormal written as normal
    b"0x1.0000000000000p+99999999",
    b"0x1.00000000000000p+0",  # 14 digits
    b"0x1.000000000000p+0",  # 12 digits
    b"0x1.0000000000000p+",
    b"0x1.0000000000000",
    b"p",
    b"-",
    b"0x1.0000000000000p+1\x00",
    b"\xff\xfe0x1.0000000000000p+1",
    b"0x1.0000000000000p+1e",
]


@pytest.mark.parametrize("literal", NOT_CANONICAL)
def test_reader_refuses_other_text(literal):
    good = b"0x1.8000000000000p+1"
    for text in (literal, good + b"," + literal, literal + b"," + good):
        assert read_canonical_hex(text, text.count(b",") + 1) is None


def test_reader_refuses_wrong_counts_and_separators():
    good = b"0x1.8000000000000p+1"
    assert read_canonical_hex(good + b"," + good, 3) is None
    assert read_canonical_hex(good + b"," + good, 1) is None
    assert read_canonical_hex(good + b",," + good, 3) is None
    assert read_canonical_hex(good + b"," + good + b",", 3) is None
    assert read_canonical_hex(good + good, 2) is None
    assert read_canonical_hex(b"", 1) is None
    assert read_canonical_hex(good, 0) is None
    assert read_canonical_hex(good + b"f", 1, b"f") is not None
    assert read_canonical_hex(good + b"f," + good, 2, b"f") is None  # a suffix on some only


def test_reader_of_random_bytes_refuses_and_returns():
    """Hostile lists (random bytes with the right number of commas and exponent marks; a long run
    of one literal with a few bytes overwritten) are refused after a fixed number of passes."""
    rng = np.random.default_rng(7)
    alphabet = np.frombuffer(b"0123456789abcdefxp.+-,f", dtype=np.uint8)
    for _ in range(200):
        text = alphabet[rng.integers(0, alphabet.size, rng.integers(1, 60))].tobytes()
        read = read_canonical_hex(text, text.count(b",") + 1)
        if read is not None:  # only ever a text that is float.hex's own
            assert hex_literals_text(read)[0][:-1].encode() == text
    big = np.frombuffer(b",".join([b"0x1.8000000000000p+1"] * 200_000), dtype=np.uint8).copy()
    big[rng.integers(0, big.size, 50)] = ord("g")
    assert read_canonical_hex(big.tobytes(), 200_000) is None


def _declaration(literals: list[str], c_type: str = "float") -> str:
    return (
        f"static const {c_type} qv_w1[2][{len(literals) // 2}] = {{\n"
        f"    {{{', '.join(literals[: len(literals) // 2])}}},\n"
        f"    {{{', '.join(literals[len(literals) // 2 :])}}}\n}};\nint main(void) {{ return 0; }}\n"
    )


def test_initialiser_of_float_literals_is_read_exactly():
    values = np.concatenate([CASES["floats"][:998], [0.0, -0.0]])
    literals = [value.hex() + "f" for value in values.tolist()]
    extraction = extract_arrays(_declaration(literals), "h.c")
    array = extraction.arrays["qv_w1"]
    assert array.suffixed and not array.integer and array.shape == (2, 500)
    assert np.array_equal(array.values.ravel().view(np.uint64), values.view(np.uint64))
    assert extraction.skeleton.count("\n") == _declaration(literals).count("\n")


def test_initialiser_of_short_exact_literals_is_read_the_general_way():
    """`0x1.8p+1f` is exact but not float.hex's text: the regular expression reads it."""
    literals = ["0x1.8p+1f", "-0x1.0p-3f", "0x1.000002p+0f", "0x0.0p+0f"]
    array = extract_arrays(_declaration(literals), "h.c").arrays["qv_w1"]
    assert array.values.ravel().tolist() == [3.0, -0.125, float.fromhex("0x1.000002p+0"), 0.0]


@pytest.mark.parametrize(
    ("literals", "reason"),
    [
        (["0x1.8000000000000p+1f", "0x1.8-00000000000p+1f"], "not all decimal integers or exact"),
        (["0x1.8000000000000p+1f", "0x1.0000000000000p+99999f"], "not all decimal integers or exact"),
        (["0x1.8000000000000p+1f", "0x1.0000000000001p+0f"], "float32 does not hold exactly"),
        (["0x1.8000000000000p+1f", "0x1.8000000000000p+1"], "mixed"),
        (["0x1.8000000000000p+1f", "0x1." + "0" * 5000 + "p+1f"], "not all decimal integers or exact"),
    ],
    ids=["garbage-digit", "huge-exponent", "not-a-float", "mixed-suffix", "huge-literal"],
)
def test_malformed_float_initialiser_is_declined_with_a_reason(literals, reason):
    with pytest.raises(NotRecognised, match=reason):
        extract_arrays(_declaration(literals), "h.c")


def test_literal_lists_of_the_wrong_length_are_declined():
    literals = ["0x1.8000000000000p+1f"] * 4
    text = _declaration(literals).replace("[2][2]", "[2][3]")
    with pytest.raises(NotRecognised, match="braces do not nest"):
        extract_arrays(text, "h.c")
    with pytest.raises(InputError, match="exceeds the tensor size limit"):  # before anything is read
        extract_arrays(_declaration(literals).replace("[2][2]", "[2][2000000000]"), "h.c")
