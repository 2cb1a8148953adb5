"""Tests for `qverify.io.nnet`: the benchmark files, a hand-checked fixture, round trips, bad files."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qverify.errors import InputError, UnsupportedError
from qverify.io import load_network, read_nnet, save_network, write_nnet
from qverify.io.nnet import NO_CLIP_BOUND
from qverify.network import (
    Activation,
    Dense,
    InputNormalisation,
    Network,
    OutputNormalisation,
    evaluate,
)

ROOT = Path(__file__).resolve().parents[1]
ACAS_NNET = sorted((ROOT / "benchmarks" / "acasxu" / "nnet").glob("*.nnet"))
TEST_NETWORK = ROOT / "benchmarks" / "nnet-examples" / "TestNetwork.nnet"
TINY = ROOT / "tests" / "fixtures" / "tiny.nnet"


def assert_networks_equal(left: Network, right: Network) -> None:
    """Same layers, activations and normalisations, bit for bit (None only equals None)."""
    assert left.sizes == right.sizes
    for a, b in zip(left.layers, right.layers, strict=True):
        assert a.activation is b.activation
        assert np.array_equal(a.weights, b.weights)
        assert np.array_equal(a.bias, b.bias)
    assert (left.input_norm is None) == (right.input_norm is None)
    if left.input_norm is not None:
        for name in ("minimum", "maximum", "mean", "range"):
            assert np.array_equal(getattr(left.input_norm, name), getattr(right.input_norm, name)), name
    assert (left.output_norm is None) == (right.output_norm is None)
    if left.output_norm is not None:
        assert np.array_equal(left.output_norm.mean, right.output_norm.mean)
        assert np.array_equal(left.output_norm.range, right.output_norm.range)


# -- the benchmark files -----------------------------------------------------------------------


def test_there_are_45_acas_networks() -> None:
    assert len(ACAS_NNET) == 45


@pytest.mark.parametrize("path", ACAS_NNET, ids=lambda p: p.stem)
def test_acas_nnet_loads(path: Path) -> None:
    net = read_nnet(path)
    assert net.n_inputs == 5 and net.n_outputs == 5
    assert net.sizes == (5,) + (50,) * 6 + (5,)
    assert [layer.activation for layer in net.layers] == [Activation.RELU] * 6 + [Activation.IDENTITY]
    assert net.name == path.stem and net.source == str(path)
    assert np.array_equal(net.input_norm.minimum, [0.0, -3.141593, -3.141593, 100.0, 0.0])
    assert np.array_equal(net.input_norm.range, [60261.0, 6.28318530718, 6.28318530718, 1100.0, 1200.0])
    assert np.array_equal(net.output_norm.mean, np.full(5, 7.5188840201005975))
    assert np.array_equal(net.output_norm.range, np.full(5, 373.94992))


def test_acas_first_weights_are_the_file_text() -> None:
    net = read_nnet(ACAS_NNET[0])
    assert net.layers[0].weights[0, :2].tolist() == [5.40062e-02, -2.61092e00]
    assert net.layers[0].weights[1, 0] == -1.12374


def test_test_network_equals_acas_1_1() -> None:
    sisl = read_nnet(TEST_NETWORK)
    acas = read_nnet(ROOT / "benchmarks" / "acasxu" / "nnet" / "ACASXU_run2a_1_1_batch_2000.nnet")
    assert sisl.name == "TestNetwork"
    for a, b in zip(sisl.layers, acas.layers, strict=True):
        assert np.array_equal(a.weights, b.weights) and np.array_equal(a.bias, b.bias)
    assert np.array_equal(sisl.input_norm.minimum, acas.input_norm.minimum)
    assert np.array_equal(sisl.input_norm.range, acas.input_norm.range)
    assert sisl.output_norm.mean[0] == 7.5188840201  # written with fewer digits in sisl's copy


# -- the hand-checked fixture ------------------------------------------------------------------


def test_tiny_network_values() -> None:
    net = read_nnet(TINY)
    assert net.sizes == (2, 3, 1)
    assert net.layers[0].weights.tolist() == [[1.0, -1.0], [0.5, 0.25], [-2.0, 0.0]]
    assert net.layers[0].bias.tolist() == [0.0, 1.0, -1.0]
    assert net.layers[1].weights.tolist() == [[1.0, 2.0, -3.0]]
    # x = (0, 5): normalised (0, 0); hidden relu(0, 1, -1) = (0, 1, 0); out 2.5; raw 2.5*4 + 0.5
    # x = (2, 15): clipped (1, 10), normalised (0.5, 0.5); hidden (0, 1.375, 0); out 3.25; raw 13.5
    assert evaluate(net, np.array([[0.0, 5.0], [2.0, 15.0]])).tolist() == [[10.5], [13.5]]


def test_tolerant_layout_reads_the_same(tmp_path: Path) -> None:
    """No trailing commas, spaces, CRLF, more comments and trailing blank lines change nothing."""
    lines = TINY.read_text().splitlines()
    relaxed = ["// another comment", "//"] + [
        line if line.startswith("//") else " , ".join(line.rstrip(",").split(",")) for line in lines
    ]
    path = tmp_path / "relaxed.nnet"
    path.write_bytes(("\r\n".join(relaxed) + "\r\n\r\n  \n").encode())
    assert_networks_equal(read_nnet(path), read_nnet(TINY))


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*ACAS_NNET[::4], TEST_NETWORK], ids=lambda p: p.stem)
def test_write_read_round_trip_is_exact(path: Path, tmp_path: Path) -> None:
    original = read_nnet(path)
    copy = tmp_path / "copy.nnet"
    write_nnet(original, copy)
    assert_networks_equal(read_nnet(copy), original)
    assert f"'{original.name}'" in copy.read_text().splitlines()[0]


def test_missing_normalisation_round_trips_as_none(tmp_path: Path) -> None:
    net = Network((Dense([[1.0, 2.0]], [0.5], Activation.IDENTITY),), name="bare")
    write_nnet(net, tmp_path / "bare.nnet")
    text = (tmp_path / "bare.nnet").read_text()
    assert f"{-NO_CLIP_BOUND!r},{-NO_CLIP_BOUND!r}," in text
    back = read_nnet(tmp_path / "bare.nnet")
    assert back.input_norm is None and back.output_norm is None
    assert_networks_equal(back, net)


def test_infinite_clip_bounds_round_trip(tmp_path: Path) -> None:
    norm = InputNormalisation([-np.inf, 0.0], [1.0, np.inf], [0.5, 0.0], [2.0, 1.0])
    net = Network((Dense([[1.0, 2.0]], [0.5], Activation.IDENTITY),), input_norm=norm)
    write_nnet(net, tmp_path / "half.nnet")
    assert_networks_equal(read_nnet(tmp_path / "half.nnet"), net)


def _networks() -> st.SearchStrategy[Network]:
    """Small NNet-expressible networks with arbitrary finite doubles (subnormal, huge, -0.0)."""
    value = st.floats(allow_nan=False, allow_infinity=False)
    positive = value.filter(lambda v: v > 0)  # NNet ranges are positive scales

    @st.composite
    def build(draw: st.DrawFn) -> Network:
        sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=4))
        layers = []
        for k in range(1, len(sizes)):
            weights = draw(
                st.lists(
                    st.lists(value, min_size=sizes[k - 1], max_size=sizes[k - 1]),
                    min_size=sizes[k],
                    max_size=sizes[k],
                )
            )
            bias = draw(st.lists(value, min_size=sizes[k], max_size=sizes[k]))
            last = k == len(sizes) - 1
            layers.append(Dense(weights, bias, Activation.IDENTITY if last else Activation.RELU))
        n_in, n_out = sizes[0], sizes[-1]
        lows = draw(st.lists(st.floats(-1e6, 0), min_size=n_in, max_size=n_in))
        input_norm = InputNormalisation(
            lows,
            [low + draw(st.floats(0, 1e6)) for low in lows],
            draw(st.lists(value, min_size=n_in, max_size=n_in)),
            draw(st.lists(positive, min_size=n_in, max_size=n_in)),
        )
        # range 1 with mean 0 is the identity, which the reader returns as None
        output_norm = OutputNormalisation(
            [draw(value)] * n_out, [draw(positive.filter(lambda v: v != 1))] * n_out
        )
        return Network(tuple(layers), input_norm, output_norm, name="random")

    return build()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(net=_networks())
def test_random_networks_round_trip_exactly(net: Network, tmp_path: Path) -> None:
    write_nnet(net, tmp_path / "random.nnet")
    assert_networks_equal(read_nnet(tmp_path / "random.nnet"), net)


def test_save_and_load_network_dispatch_on_suffix(tmp_path: Path) -> None:
    net = read_nnet(TINY)
    save_network(net, tmp_path / "copy.NNET")
    loaded = load_network(str(tmp_path / "copy.NNET"))
    assert loaded.name == "copy" and loaded.source == str(tmp_path / "copy.NNET")
    assert_networks_equal(loaded, net)


# -- what NNet cannot express ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("activations", "phrase"),
    [
        ((Activation.SIGMOID, Activation.IDENTITY), "layer 1 of network 'odd' has activation sigmoid"),
        ((Activation.RELU, Activation.RELU), "layer 2 of network 'odd' has activation relu"),
        ((Activation.RELU, Activation.TANH), "NNet allows only identity on the last layer"),
    ],
)
def test_write_rejects_other_activations(activations: tuple, phrase: str, tmp_path: Path) -> None:
    layers = (Dense([[1.0]], [0.0], activations[0]), Dense([[1.0]], [0.0], activations[1]))
    with pytest.raises(UnsupportedError, match=phrase):
        write_nnet(Network(layers, name="odd"), tmp_path / "odd.nnet")
    assert not (tmp_path / "odd.nnet").exists()


def test_write_rejects_per_output_normalisation(tmp_path: Path) -> None:
    layer = Dense([[1.0], [2.0]], [0.0, 0.0], Activation.IDENTITY)
    net = Network((layer,), output_norm=OutputNormalisation([0.0, 1.0], [1.0, 1.0]))
    with pytest.raises(UnsupportedError, match="one output mean and range"):
        write_nnet(net, tmp_path / "out.nnet")


# -- malformed files ---------------------------------------------------------------------------


def _edited(tmp_path: Path, edits: dict[int, str | None]) -> Path:
    """A copy of tiny.nnet with 1-based lines replaced (None deletes the line)."""
    lines = TINY.read_text().splitlines()
    for number in sorted(edits, reverse=True):
        if edits[number] is None:
            del lines[number - 1]
        else:
            lines[number - 1] = edits[number]
    path = tmp_path / "bad.nnet"
    path.write_text("\n".join(lines) + "\n")
    return path


MALFORMED = [
    # (id, {line: replacement or None to delete}, key phrase of the message)
    ("truncated", {17: None}, "bad.nnet:17: unexpected end of file, expected bias of layer 2, neuron 0"),
    (
        "short-weight-line",
        {11: "0.5,"},
        "bad.nnet:11: expected 2 value(s) (weights of layer 1, neuron 1), found 1",
    ),
    ("long-bias-line", {14: "1.0,2.0,"}, "bad.nnet:14: expected 1 value(s)"),
    ("not-a-number", {12: "-2.0,abc,"}, "bad.nnet:12: 'abc' is not a number"),
    ("python-underscore", {12: "-2.0,1_0,"}, "'1_0' is not a number"),
    ("empty-token", {6: "-1.0,,"}, "bad.nnet:6: '' is not a number"),
    ("nan-weight", {10: "nan,-1.0,"}, "bad.nnet:10: non-finite value 'nan' (weights of layer 1, neuron 0)"),
    ("inf-bias", {17: "inf,"}, "bad.nnet:17: non-finite value 'inf' (bias of layer 2, neuron 0)"),
    ("nan-minimum", {6: "nan,0.0,"}, "bad.nnet:6: non-finite value 'nan' (input minimums)"),
    ("inf-mean", {8: "0.0,inf,0.5,"}, "bad.nnet:8: non-finite value 'inf'"),
    ("zero-range", {9: "2.0,0.0,4.0,"}, "bad.nnet:9: range 1 is zero"),
    ("negative-range", {9: "2.0,-1.0,4.0,"}, "bad.nnet:9: range 1 is negative: ranges must be positive"),
    ("zero-output-range", {9: "2.0,10.0,0,"}, "bad.nnet:9: range 2 is zero"),
    ("min-above-max", {6: "-1.0,20.0,"}, "bad.nnet:7: input 1: maximum 10.0 < minimum 20.0"),
    ("sizes-count", {4: "2,3,3,1,"}, "bad.nnet:4: expected 3 layer sizes (numLayers + 1), found 4"),
    ("inputs-mismatch", {4: "3,3,1,"}, "bad.nnet:4: first layer size 3 != numInputs 2"),
    ("outputs-mismatch", {3: "2,2,2,3,"}, "bad.nnet:4: last layer size 1 != numOutputs 2"),
    ("max-size-too-small", {3: "2,2,1,2,"}, "bad.nnet:3: maxLayerSize 2 < largest layer size 3"),
    ("header-not-integer", {3: "2,2.5,1,3,"}, "bad.nnet:3: '2.5' is not an integer"),
    ("header-short", {3: "2,2,1,"}, "bad.nnet:3: expected 4 value(s)"),
    ("header-zero", {3: "0,2,1,3,"}, "bad.nnet:3: header values must be positive"),
    ("missing-flag", {5: None}, "bad.nnet:5: expected 1 value(s) (the unused flag line), found 2"),
    (
        "blank-line-inside",
        {13: ""},
        "bad.nnet:13: expected 1 value(s) (bias of layer 1, neuron 0), found a blank line",
    ),
    ("trailing-data", {17: "0.5,\n1.0,"}, "bad.nnet:18: unexpected data after the last bias line"),
    ("comment-inside", {13: "// late comment"}, "'// late comment' is not a number"),
]


@pytest.mark.parametrize(("edits", "phrase"), [case[1:] for case in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_nnet_is_an_input_error(edits: dict, phrase: str, tmp_path: Path) -> None:
    path = _edited(tmp_path, edits)
    with pytest.raises(InputError) as caught:
        read_nnet(path)
    assert phrase in str(caught.value)
    assert str(caught.value).startswith(str(path))


@pytest.mark.parametrize(
    "text", ["", "\n\n", "// only a comment\n// and another\n"], ids=["empty", "blank", "comments"]
)
def test_empty_nnet_is_an_input_error(text: str, tmp_path: Path) -> None:
    path = tmp_path / "empty.nnet"
    path.write_text(text)
    with pytest.raises(InputError, match="empty file"):
        read_nnet(path)


def test_binary_and_missing_files_are_input_errors(tmp_path: Path) -> None:
    binary = tmp_path / "binary.nnet"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(InputError, match="not a text file"):
        read_nnet(binary)
    with pytest.raises(InputError, match="no such file"):
        read_nnet(tmp_path / "missing.nnet")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_files_raise_only_input_errors(data: st.DataObject, tmp_path: Path) -> None:
    """Cut, drop or corrupt characters anywhere: the reader either parses or raises InputError."""
    text = TINY.read_text()
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 8)))
    insert = data.draw(st.text(alphabet="0123456789.,-+eE \nnaif/x", max_size=4))
    path = tmp_path / "damaged.nnet"
    path.write_text(text[:start] + insert + text[end:])
    with contextlib.suppress(InputError):
        read_nnet(path)
