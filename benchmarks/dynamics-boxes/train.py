"""Train the dynamics-boxes networks and write their instances (deterministic): small ReLU networks
of low-dimensional dynamical systems and controllers, wide input boxes, unsafe sets that are
conjunctions of output bounds (an output box) -- the shape of VNN-COMP 2022's reach_prob_density,
issue 45's item 4.

    python benchmarks/dynamics-boxes/train.py            # networks, VNN-LIB files, instances.csv
    python benchmarks/dynamics-boxes/train.py --label    # and expected.csv (qverify, minutes)

Each system is simulated in numpy (fourth-order Runge-Kutta) and a scikit-learn MLPRegressor (ReLU)
learns its map; the network is written as ONNX (float32) by qverify. Properties: the input box is
the system's whole operating range; the unsafe set a box of the outputs (every output between two
bounds, or a half-open box for the controller). Each box is centred beyond the outputs the network
reaches and sized from the distance an attack reaches (`reach_radius`: the least largest
deviation from the centre that sign-gradient descent finds over many starts, in units of each
output's spread): 0.15 and 0.3 of it beyond are UNSAFE (the attack's point is inside), 0.1 and
0.25 short of it as near SAFE as the attack can tell -- `--label` runs qverify on every instance
(real arithmetic, a long timeout) and writes what it decides as expected.csv (bench_marabou.py
compares the tools).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import sklearn
from sklearn.neural_network import MLPRegressor
from threadpoolctl import threadpool_limits

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parent))

from training_tools import sklearn_network

from qverify.io import load_network, write_onnx
from qverify.network import Activation, Network, evaluate
from qverify.properties import Atom, Box, Clause, OutputCondition, Property, Relation, format_vnnlib

TIMEOUT_S = 60
LABEL_TIMEOUT_S = 600
DIGITS = 4  # decimals of every bound written (exact in the VNN-LIB text)
# a box's half-width (in the outputs' spreads) is the attack's reach r plus these multiples of
# max(|r|, MIN_UNIT): above r the attack's point is inside (UNSAFE), below it as near SAFE as the
# attack can tell (a controller's half-open box may start inside what is reached: r < 0)
UNSAFE_STEPS = (0.3, 0.15)
NEAR_STEPS = (-0.1, -0.25)
MIN_UNIT = 0.1
GAP = (0.2, 0.6)  # how far beyond the sampled outputs a box's centre lies (in the outputs' spreads)


@dataclass(frozen=True)
class System:
    """A simulated system, the network that learns it and where its properties look."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    lo: tuple[float, ...]  # the input box: the operating range
    hi: tuple[float, ...]
    hidden: tuple[int, ...]
    samples: int
    half_open: bool = False  # controller: unsafe when each output passes one bound (not a box)


def rk4(field, state: np.ndarray, dt: float, steps: int) -> np.ndarray:
    """`steps` fourth-order Runge-Kutta steps of dx/dt = field(x) from every row of `state`."""
    x = state.astype(np.float64)
    for _ in range(steps):
        k1 = field(x)
        k2 = field(x + dt / 2 * k1)
        k3 = field(x + dt / 2 * k2)
        k4 = field(x + dt * k3)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


def flow(field, start: np.ndarray, horizon: np.ndarray, dt: float = 0.01) -> np.ndarray:
    """The state at time horizon[i] from start[i] (each row integrated to its own time)."""
    steps = np.rint(horizon / dt).astype(int)
    out = np.empty_like(start)
    x = start.astype(np.float64).copy()
    for step in range(int(steps.max()) + 1):
        done = steps == step
        out[done] = x[done]
        x = rk4(field, x, dt, 1)
    return out


def van_der_pol(x: np.ndarray) -> np.ndarray:
    return np.column_stack([x[:, 1], (1 - x[:, 0] ** 2) * x[:, 1] - x[:, 0]])


def pendulum_pd(x: np.ndarray) -> np.ndarray:
    """A damped pendulum under a saturated PD controller towards upright-down 0 (torque limit 2)."""
    torque = np.clip(-3.0 * x[:, 0] - 1.5 * x[:, 1], -2.0, 2.0)
    return np.column_stack([x[:, 1], -9.81 * np.sin(x[:, 0]) - 0.2 * x[:, 1] + torque])


def unicycle(x: np.ndarray) -> np.ndarray:
    """A unicycle steered to the origin by a polar feedback law (speed and turn rate saturated)."""
    rho = np.hypot(x[:, 0], x[:, 1])
    bearing = np.arctan2(-x[:, 1], -x[:, 0]) - x[:, 2]
    bearing = (bearing + np.pi) % (2 * np.pi) - np.pi
    speed = np.clip(0.8 * rho, 0.0, 1.0)
    turn = np.clip(2.0 * bearing, -1.5, 1.5)
    return np.column_stack([speed * np.cos(x[:, 2]), speed * np.sin(x[:, 2]), turn])


def quadrotor_thrusts(state: np.ndarray) -> np.ndarray:
    """A planar quadrotor's two rotor thrusts from its hover controller (LQR-like gains, hover
    thrust 4.905 each, saturated at [0, 9]): (y, z, phi, vy, vz, phidot) -> (u_left, u_right)."""
    y, z, phi, vy, vz, rate = state.T
    total = 9.81 - 2.0 * z - 1.6 * vz
    moment = 0.9 * y + 1.1 * vy - 6.0 * phi - 1.2 * rate
    left = np.clip(total / 2 - moment / 2, 0.0, 9.0)
    right = np.clip(total / 2 + moment / 2, 0.0, 9.0)
    return np.column_stack([left, right])


SYSTEMS = (
    System(
        "vanderpol",
        ("x1", "x2", "t"),
        ("x1(t)", "x2(t)"),
        (-2.0, -2.0, 0.0),
        (2.0, 2.0, 1.5),
        (32, 32),
        20000,
    ),
    System(
        "pendulum",
        ("theta", "omega", "t"),
        ("theta(t)", "omega(t)"),
        (-1.2, -2.0, 0.0),
        (1.2, 2.0, 2.0),
        (32, 32),
        20000,
    ),
    System(
        "unicycle",
        ("x", "y", "heading", "t"),
        ("x(t)", "y(t)", "heading(t)"),
        (-2.0, -2.0, -1.5, 0.0),
        (2.0, 2.0, 1.5, 2.0),
        (48, 48, 48),
        30000,
    ),
    System(
        "quadrotor",
        ("y", "z", "phi", "vy", "vz", "phidot"),
        ("u_left", "u_right"),
        (-1.0, -1.0, -0.5, -1.0, -1.0, -1.0),
        (1.0, 1.0, 0.5, 1.0, 1.0, 1.0),
        (32, 32),
        20000,
        half_open=True,
    ),
)


def simulate_system(system: System, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, outputs) of `count` uniform points of the system's input box."""
    lo, hi = np.array(system.lo), np.array(system.hi)
    x = rng.uniform(lo, hi, (count, len(lo)))
    if system.name == "vanderpol":
        y = flow(van_der_pol, x[:, :2], x[:, 2])
    elif system.name == "pendulum":
        y = flow(pendulum_pd, x[:, :2], x[:, 2])
    elif system.name == "unicycle":
        y = flow(unicycle, x[:, :3], x[:, 3])
    else:
        y = quadrotor_thrusts(x)
    return x, y


def train(system: System, seed: int = 0) -> tuple[Network, float]:
    """The fitted network (raw inputs and outputs) and its test R^2."""
    rng = np.random.default_rng(seed)
    x, y = simulate_system(system, rng, system.samples)
    split = int(0.9 * len(x))
    model = MLPRegressor(
        hidden_layer_sizes=system.hidden,
        activation="relu",
        solver="adam",
        alpha=1e-5,
        batch_size=128,
        learning_rate_init=2e-3,
        max_iter=150,
        n_iter_no_change=150,
        random_state=seed,
    )
    with threadpool_limits(limits=1):
        model.fit(x[:split], y[:split])
    score = float(model.score(x[split:], y[split:]))
    return sklearn_network(
        model, Activation.RELU, system.name, source="benchmarks/dynamics-boxes/train.py"
    ), score


def _bound(value: float, upward: bool) -> Fraction:
    """`value` rounded outward to DIGITS decimals (exact in the VNN-LIB text)."""
    scaled = value * 10**DIGITS
    return Fraction(int(np.ceil(scaled) if upward else np.floor(scaled)), 10**DIGITS)


def box_property(system: System, name: str, centre: np.ndarray, half_width: np.ndarray) -> Property:
    """Unsafe: every output within half_width of the centre (the controller: left thrust at least
    centre - half_width and right thrust at most centre + half_width: an asymmetric push)."""
    atoms = []
    for output, (c, w) in enumerate(zip(centre, half_width)):
        upper, lower = _bound(c + w, True), _bound(c - w, False)
        if system.half_open:
            if output == 0:
                atoms.append(Atom(((output, Fraction(1)),), -lower, Relation.GE))
            else:
                atoms.append(Atom(((output, Fraction(1)),), -upper, Relation.LE))
            continue
        atoms.append(Atom(((output, Fraction(1)),), -upper, Relation.LE))
        atoms.append(Atom(((output, Fraction(1)),), -lower, Relation.GE))
    box = Box(tuple(Fraction(v) for v in system.lo), tuple(Fraction(v) for v in system.hi))
    notes = (f"{system.name}: inputs {', '.join(system.inputs)}; outputs {', '.join(system.outputs)}",)
    return Property(name, (box,), OutputCondition((Clause(tuple(atoms)),)), notes=notes)


def deviation(system: System, outputs: np.ndarray, centre: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """How far (in units of `scale`) each row's outputs are from being inside the centred box:
    the largest |y - c| / scale (the controller: the larger of c - y_left and y_right - c)."""
    if system.half_open:
        return np.maximum((centre[0] - outputs[:, 0]) / scale[0], (outputs[:, 1] - centre[1]) / scale[1])
    return (np.abs(outputs - centre) / scale).max(axis=1)


def reach_radius(net: Network, system: System, centre: np.ndarray, scale: np.ndarray, seed: int) -> float:
    """The least deviation from the centre (`deviation`) that projected gradient descent on the
    clause's largest deviation reaches over many starts: an upper bound of the true least one (a
    box of that size holds the point found)."""
    rng = np.random.default_rng(seed)
    lo, hi = np.array(system.lo), np.array(system.hi)
    best = np.inf
    for _ in range(8):
        x = rng.uniform(lo, hi, (256, len(lo)))
        step = (hi - lo) / 8
        for _ in range(150):
            value = deviation(system, evaluate(net, x), centre, scale)
            best = min(best, float(value.min()))
            gradient = np.zeros_like(x)
            for i in range(len(lo)):  # central differences: the network is tiny
                bump = np.zeros(len(lo))
                bump[i] = 1e-4 * (hi[i] - lo[i])
                up = deviation(system, evaluate(net, x + bump), centre, scale)
                down = deviation(system, evaluate(net, x - bump), centre, scale)
                gradient[:, i] = (up - down) / (2 * bump[i])
            x = np.clip(x - step * np.sign(gradient), lo, hi)
            step *= 0.97
    return best


def instances(net: Network, system: System, seed: int) -> list[tuple[str, Property, str]]:
    """Three box centres per network, each outside what the network reaches (in a random direction
    of the outputs scaled by their spread, GAP beyond the farthest of 20,000 sampled outputs;
    the controller's direction raises the left thrust and lowers the right one), and four sizes
    each: (name, property, how it was sized)."""
    rng = np.random.default_rng(1000 + seed)
    lo, hi = np.array(system.lo), np.array(system.hi)
    cloud = evaluate(net, rng.uniform(lo, hi, (20000, len(lo))))
    mean, scale = cloud.mean(axis=0), cloud.std(axis=0)
    made = []
    for box in range(3):
        direction = rng.normal(size=len(scale))
        if system.half_open:
            direction = np.abs(direction) * np.array([1.0, -1.0])
        direction /= np.abs(direction).max()
        support = float((((cloud - mean) / scale) @ direction).max()) / float(direction @ direction)
        centre = mean + (support + rng.uniform(*GAP)) * direction * scale
        radius = reach_radius(net, system, centre, scale, seed=10 * seed + box)
        unit = max(abs(radius), MIN_UNIT)
        for kind, step in [("unsafe", f) for f in UNSAFE_STEPS] + [("near", f) for f in NEAR_STEPS]:
            name = f"{system.name}-box{box}-{kind}{abs(step):g}"
            prop = box_property(system, name, centre, (radius + step * unit) * scale)
            made.append((name, prop, f"the attack's reach {radius:.4f} {step:+g} x {unit:.4f}"))
    return made


def suite_text(count: int) -> str:
    return (
        "\n".join(
            [
                "# Generated by benchmarks/dynamics-boxes/train.py: edit that script and rerun it, not this file.",
                'name = "dynamics-boxes"',
                (
                    'description = "low-dimensional dynamics and controller ReLU networks (van der Pol, '
                    "pendulum, unicycle: state after time t; planar quadrotor thrusts), wide input boxes, "
                    f'conjunctive unsafe output boxes; {count} VNN-LIB instances"'
                ),
                'formats = ["16.16"]',
                f"timeout = {TIMEOUT_S}",
                'instances = "instances.csv"',
            ]
        )
        + "\n"
    )


def label(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each instance decided by qverify's network level in real arithmetic (LABEL_TIMEOUT_S):
    (name, SAFE / UNSAFE / UNKNOWN)."""
    from qverify.engine.netlevel.query import Arithmetic, query_for
    from qverify.engine.netlevel.search import decide
    from qverify.engine.result import EngineOptions, Recorder
    from qverify.properties import read_vnnlib
    from qverify.quant import FloatFormat, FloatKind, ImplementationOptions, quantize_network

    verdicts = []
    for network, vnnlib in rows:
        net = load_network(HERE / network)
        qnet = quantize_network(net, ImplementationOptions(FloatFormat(FloatKind.FLOAT)))
        query = query_for(qnet, read_vnnlib(HERE / vnnlib), Arithmetic.REAL)
        start = time.monotonic()
        result = decide(query, EngineOptions(timeout_s=LABEL_TIMEOUT_S), start + LABEL_TIMEOUT_S, Recorder())
        name = Path(vnnlib).stem
        print(f"  {name}: {result.status.value} in {time.monotonic() - start:.1f} s {result.reason}")
        verdicts.append((name, result.status.value))
    return verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", action="store_true", help="decide every instance and write expected.csv")
    args = parser.parse_args()
    print(f"numpy {np.__version__}, scikit-learn {sklearn.__version__}")
    (HERE / "vnnlib").mkdir(exist_ok=True)
    rows, notes = [], []
    for seed, system in enumerate(SYSTEMS):
        net, score = train(system, seed)
        path = HERE / f"{system.name}.onnx"
        write_onnx(net, path, float32=True)
        net = load_network(path)  # what was written: float32 weights
        sizes = "-".join(str(n) for n in (len(system.inputs), *system.hidden, len(system.outputs)))
        print(f"{system.name}: {sizes} ReLU, test R^2 {score:.4f}")
        for name, prop, how in instances(net, system, seed):
            file_name = f"vnnlib/{name}.vnnlib"
            (HERE / file_name).write_text(
                format_vnnlib(prop, n_outputs=len(system.outputs)), encoding="utf-8"
            )
            rows.append((path.name, file_name))
            notes.append(f"  {name}: {how}")
    (HERE / "instances.csv").write_text("".join(f"{n},{v},{TIMEOUT_S}\n" for n, v in rows), encoding="utf-8")
    (HERE / "suite.toml").write_text(suite_text(len(rows)), encoding="utf-8")
    print("\n".join(notes))
    if args.label:
        verdicts = label(rows)
        text = "instance,expected\n" + "".join(f"{n},{v}\n" for n, v in verdicts)
        (HERE / "expected.csv").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
