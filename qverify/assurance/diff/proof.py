"""Proof mode: one C program holding both implementations of the network on the same nondet input,
asserting that they agree, over a region around a seed; decided by the internal engine or ESBMC.

The program (templates/diff_harness.c.j2). Each implementation's network C is the shared partial
`_network.c.j2` rendered as for `qverify codegen`, with the symbols it defines (`qv_num`, `qv_w0`,
`qv_relu`, `qv_network`, ...) given a prefix per implementation (`qa_`, `qb_`), so the two live in
one translation unit; the verification models (fxp.h, half.h, verifier.h) are shared.

The input. The nondet values are the networks' *normalised* inputs as doubles (what `Implementation.run`
takes), `x[i]`, then -- for a fixed-point side -- its input words `q[i]`, tied to `x[i]` by an assume
that states the format's rounding exactly in double arithmetic (x * 2^l is exact, so is q +- 1/2):
nearest (ties away from zero) or floor. A float, double or half side takes `(T)x[i]` (one rounding,
as numpy's). An int8 side's input codes `c[i]` are nondet codes tied to `x[i]` exactly: QuantizeLinear
(float32 division, rounding half to even, zero point, saturation) is a non-decreasing step function
of the double x, so `c >= k <=> x >= T_k` with T_k the step's exact double (`codes.py`); the harness
assumes that for every step inside the region's code range -- comparisons of x with constants only.

Regions. `linf`: a box per input, the seed's L-inf ball (search coordinates, clipped to the canvas)
mapped to normalised units (the normalisations are increasing per input, so corners map to corners;
the box holds every image of the ball). `brightness/contrast`: two nondet parameters in a box, and the
input computed from the seed in C with the registry's own formulas in the same operation order --
contrast, clip, brightness, clip, then the normalisation -- so the C and numpy give the same doubles.
Only distortions affine in their parameter can be stated this way; rotation, zoom, shear, translation
and blur resample the image (interpolation weights depend on the parameter non-linearly), noise and
occlusions draw random numbers, so proof mode does not range over them.

Before the harness (cheapest first, `_decide`): SAMPLES seeded points of the region (the seed, uniform,
vertices) run through the simulators, and a bisection between differently classified ones
(`boundary.py`; `--no-sampling` turns both off); then the two stability proofs, one single-network
property per side through the verification pipeline (`stability.py`; `--no-stability`); then the
harness with the time left. A disagreement found by any of them is a counterexample like a back end's
and goes through the same replay. UNSAFE is reported only after the disagreement replays: the
harness itself (gcc, QV_REPLAY) prints VIOLATED, each implementation's own network.c (gcc) gives
outputs on which the criterion holds, and the bit-exact simulators give the same outputs. A
counterexample that does not replay leaves the region UNKNOWN with the reason; a compiled network and
its simulator differing is an ERROR.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from qverify import __version__
from qverify.assurance.diff.boundary import differently_classified, find_disagreement_between
from qverify.assurance.diff.codes import code_thresholds
from qverify.assurance.diff.criteria import Criterion
from qverify.assurance.diff.inputs import SeedSource
from qverify.assurance.diff.records import RegionVerdict
from qverify.assurance.diff.stability import leaves_class, predicts_class, prove_side, side_box
from qverify.assurance.implementations import Implementation, ImplementationPair
from qverify.backends import HarnessJob, InternalBackend, Limits, Status
from qverify.codegen import CompiledNetwork, compile_replay, render_network, run_lines
from qverify.codegen.context import network_context
from qverify.codegen.harness import range_condition
from qverify.codegen.literals import c_string
from qverify.codegen.render import CProgram, render_template
from qverify.data.transforms import FAMILIES
from qverify.errors import InputError, QverifyError
from qverify.network.qparams import CodeType
from qverify.quant import FixedFormat
from qverify.quant.fixed import Rounding

PREFIXES = ("qa_", "qb_")
ROLES = ("reference", "candidate")
HARNESS_FILE = "diff_harness.c"
JOURNAL_FILE = "verdict.json"
SAMPLES = 2000  # points of a region run through the simulators before the back end
MIN_PAIR_S = 2.0  # the least time worth giving a stability proof or the two-network harness
STRATEGY = "sampling, bisection, stability (candidate: the rest, no harness after it), pair harness"  # in the journal key: a verdict of another is redone
# what the rendered partial defines at file scope: typedefs, tables, functions (renamed per side)
_DEFINED = re.compile(
    r"^(?:typedef\s+[\w ]+?\s+|static\s+(?:const\s+|inline\s+)*[\w ]+?\s+|void\s+)(qv_\w+)", re.MULTILINE
)


@dataclass(frozen=True, slots=True)
class ProofSettings:
    """Back end, seconds per region, the L-inf radius (fraction of the range) or the brightness /
    contrast box (fractions of the range; factors) of a region."""

    backend: str = "internal"
    timeout_s: float = 60.0
    radius: float = 0.01
    brightness: tuple[float, float] | None = None
    contrast: tuple[float, float] | None = None
    sample: bool = True  # try SAMPLES points of the region on the simulators (and bisect) before the back end
    stability: bool = True  # try the two single-network stability proofs before the two-network harness

    def __post_init__(self) -> None:
        if self.backend not in ("internal", "esbmc"):
            raise InputError(f"--backend {self.backend}: expected internal or esbmc")
        if not self.timeout_s > 0:
            raise InputError(f"--timeout {self.timeout_s}: must be positive")
        if not 0 <= self.radius <= 1:
            raise InputError(f"--radius {self.radius}: must lie in [0, 1] (a fraction of the input range)")
        for name, box in (("brightness", self.brightness), ("contrast", self.contrast)):
            if box is not None:
                FAMILIES[name].check(box[0]), FAMILIES[name].check(box[1])
                if box[0] > box[1]:
                    raise InputError(f"--{name} {box[0]:g},{box[1]:g}: LO must not exceed HI")

    @property
    def distorted(self) -> bool:
        return self.brightness is not None or self.contrast is not None


def literal(value: float) -> str:
    """An exact C double literal (hexadecimal)."""
    value = float(value)
    if not np.isfinite(value):
        raise InputError(f"cannot state {value} in C")
    return value.hex()


def prefixed_network(implementation: Implementation, prefix: str) -> str:
    """The network partial of `implementation` with every symbol it defines renamed `qv_` -> prefix."""
    text = render_template("_network.c.j2", network_context(implementation.qnet, None))  # type: ignore[arg-type]
    names = sorted(set(_DEFINED.findall(text)), key=len, reverse=True)
    if not names:
        return text
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return pattern.sub(lambda m: prefix + m.group(1)[3:], text)


def check_provable(pair: ImplementationPair) -> None:
    """A clear error for a pair proof mode cannot decide: a side without C."""
    for implementation in (pair.reference, pair.candidate):
        if implementation.qnet is None:
            what = (
                "onnxruntime's run of the file"
                if implementation.label == "onnxruntime"
                else "the float64 network"
            )
            raise InputError(
                f"proof mode needs C for both sides: {implementation.label} ({what}) has none; "
                "use --reference float or double"
            )


def shared_program_obstacle(pair: ImplementationPair) -> str | None:
    """Why the two sides cannot live in one C program, or None: two different fixed-point formats
    (fxp.h is compiled for one). Such a pair is decided without the two-network harness."""
    fixed = [
        side.qnet.number
        for side in (pair.reference, pair.candidate)
        if side.qnet is not None and side.qnet.is_fixed
    ]
    if len(fixed) == 2 and fixed[0] != fixed[1]:
        return f"one C program holds one fixed-point format (fxp.h is compiled for one): {fixed[0]} and {fixed[1]}"
    return None


def _conversion(
    implementation: Implementation, prefix: str, lo: np.ndarray, hi: np.ndarray, computed: bool
) -> tuple[list[str], str]:
    """C lines giving the side's inputs `{prefix}x[i]` from `x[i]`, and the nondet calls they add;
    `computed`: x is computed in C (a distortion), not assumed in [lo, hi]."""
    qnet = implementation.qnet
    n = implementation.n_inputs
    if qnet.is_int8:  # type: ignore[union-attr]
        return _int8_conversion(implementation, prefix, lo, hi, computed)
    if not qnet.is_fixed:  # type: ignore[union-attr]
        return [f"{prefix}x[{i}] = ({prefix}num)x[{i}];" for i in range(n)], ""
    number: FixedFormat = qnet.number  # type: ignore[assignment,union-attr]
    words_lo, words_hi = implementation.inputs(lo[None, :])[0], implementation.inputs(hi[None, :])[0]
    scaled_lo, scaled_hi = np.ldexp(lo, number.frac_bits), np.ldexp(hi, number.frac_bits)
    if np.any(scaled_lo < number.min_q - 0.5) or np.any(scaled_hi > number.max_q + 0.5):
        raise InputError(
            f"the region leaves the input word range of {number}: proof mode states in-range rounding only"
        )
    scale = literal(2.0**number.frac_bits)
    lines = []
    for i in range(n):
        q, s = f"(double){prefix}x[{i}]", f"(x[{i}] * {scale})"
        if number.rounding is Rounding.FLOOR:
            link = f"{q} <= {s} && {s} < {q} + 1.0"
        else:  # nearest, ties away from zero
            link = (f"(x[{i}] >= 0.0 && {q} - 0.5 <= {s} && {s} < {q} + 0.5) || "
                    f"(x[{i}] < 0.0 && {q} - 0.5 < {s} && {s} <= {q} + 0.5)")  # fmt: skip
        lines += [f"{prefix}x[{i}] = nondet_int();",
                  f"__ESBMC_assume({int(words_lo[i])} <= {prefix}x[{i}] && {prefix}x[{i}] <= {int(words_hi[i])});",
                  f"__ESBMC_assume({link});"]  # fmt: skip
    return lines, f"nondet_int() for {prefix}x[0..{n - 1}] (input words, tied to x)"


def _int8_conversion(
    implementation: Implementation, prefix: str, lo: np.ndarray, hi: np.ndarray, computed: bool
) -> tuple[list[str], str]:
    """C lines tying the side's nondet input codes `{prefix}x[i]` to `x[i]` exactly as QuantizeLinear
    maps one to the other: the code lies in [Q(lo), Q(hi)] and, for each step k inside, `c >= k` holds
    iff `x >= T_k` (module docstring; saturation is the code range's own ends). When x is computed in C
    (a distortion) the code range takes one more code each side, so that a last-bit difference between
    the C's x and numpy's reach box cannot exclude the true code (which would make SAFE unsound)."""
    quant = implementation.qnet.input_quant  # type: ignore[union-attr]
    thresholds = code_thresholds(quant)
    codes_lo, codes_hi = implementation.inputs(lo[None, :])[0], implementation.inputs(hi[None, :])[0]
    kind = "char" if quant.code is CodeType.INT8 else "uchar"
    lines = []
    for i in range(implementation.n_inputs):
        c = f"{prefix}x[{i}]"
        low, high = int(codes_lo[i]), int(codes_hi[i])
        if computed:
            low, high = max(low - 1, quant.code.qmin), min(high + 1, quant.code.qmax)
        in_range = range_condition(c, str(low), str(high), (quant.code.qmin, quant.code.qmax))
        lines += [f"{c} = nondet_{kind}();", f"__ESBMC_assume({in_range});"]
        for k in range(low + 1, high + 1):
            t = literal(thresholds[k])
            lines.append(f"__ESBMC_assume(({c} >= {k} && x[{i}] >= {t}) || ({c} < {k} && x[{i}] < {t}));")
    return lines, f"nondet_{kind}() for {prefix}x[0..{implementation.n_inputs - 1}] (input codes, tied to x)"


def _real_output(implementation: Implementation, prefix: str, j: int) -> str:
    qnet = implementation.qnet
    if qnet.is_int8:  # type: ignore[union-attr]
        out = qnet.output_quant  # type: ignore[union-attr]
        return f"(((double){prefix}y[{j}] - {out.zero_point}.0) * {literal(out.scale)})"
    if qnet.is_fixed:  # type: ignore[union-attr]
        return f"((double){prefix}y[{j}] * {literal(1.0 / qnet.number.scale)})"  # type: ignore[union-attr]
    return f"(double){prefix}y[{j}]"


def _criterion_lines(pair: ImplementationPair, criterion: Criterion) -> list[str]:
    a, b = PREFIXES
    m = pair.reference.n_outputs
    if criterion.kind == "distance":
        lines = ["{", "    double d;"]
        message = c_string(f"disagreement: max |y_ref - y_cand| > {criterion.delta!r}")
        for j in range(m):
            lines += [f"    d = {_real_output(pair.reference, a, j)} - {_real_output(pair.candidate, b, j)};",
                      f'    __ESBMC_assert(d <= {literal(criterion.delta)} && -d <= {literal(criterion.delta)}, "{message}");']  # type: ignore[arg-type]  # fmt: skip
        return [*lines, "}"]
    lines = ["{", "    int j, ra = 0, rb = 0;", f"    for (j = 1; j < {m}; j++) {{",
             f"        if ({a}y[j] > {a}y[ra]) {{", "            ra = j;", "        }",
             f"        if ({b}y[j] > {b}y[rb]) {{", "            rb = j;", "        }", "    }"]  # fmt: skip
    if criterion.kind == "targeted":
        message = c_string(
            f"disagreement: the candidate predicts class {criterion.target}, the reference does not"
        )
        lines.append(
            f'    __ESBMC_assert(!(rb == {criterion.target} && ra != {criterion.target}), "{message}");'
        )
    else:
        lines.append('    __ESBMC_assert(ra == rb, "disagreement: the top-1 classes differ");')
    return [*lines, "}"]


@dataclass(frozen=True, slots=True)
class Region:
    """One proof region: the seed (search coordinates), and either the normalised box (L-inf) or the
    brightness/contrast box."""

    index: int
    seed_index: int
    seed: np.ndarray
    lo: np.ndarray  # normalised box (L-inf), or the box of the distorted inputs' reach (distortions)
    hi: np.ndarray
    brightness: tuple[float, float] | None = None
    contrast: tuple[float, float] | None = None

    def describe(self, radius_text: str) -> str:
        if self.brightness is None and self.contrast is None:
            return f"seed {self.seed_index}, L-inf {radius_text}"
        parts = [f"brightness [{self.brightness[0]:g}, {self.brightness[1]:g}]" if self.brightness else "",
                 f"contrast [{self.contrast[0]:g}, {self.contrast[1]:g}]" if self.contrast else ""]  # fmt: skip
        return f"seed {self.seed_index}, " + ", ".join(p for p in parts if p)


def _distortion_lines(region: Region, source: SeedSource, network_norm) -> tuple[list[str], str]:
    """C computing x from the nondet brightness and contrast, as the registry and the normalisation do."""
    canvas = source.canvas
    lines, calls = ["double p[2];", "double t;"], []
    for index, (name, box) in enumerate((("brightness", region.brightness), ("contrast", region.contrast))):
        neutral = FAMILIES[name].neutral
        low, high = box if box is not None else (neutral, neutral)
        lines += [f"p[{index}] = nondet_double();",
                  f"__ESBMC_assume({literal(low)} <= p[{index}] && p[{index}] <= {literal(high)});"]  # fmt: skip
        calls.append(name)
    lo, hi, mid, width = (literal(v) for v in (canvas.lo, canvas.hi, canvas.middle, canvas.width))

    def clip(variable: str, low: str, high: str) -> str:
        return f"{variable} = {variable} < {low} ? {low} : ({variable} > {high} ? {high} : {variable});"

    for i, value in enumerate(region.seed):
        lines.append(f"t = {mid} + p[1] * ({literal(value)} - {mid});")
        lines.append(clip("t", lo, hi))
        lines.append(f"t = t + p[0] * {width};")
        lines.append(clip("t", lo, hi))
        if source.input_box is not None:
            low, high = source.input_box
            lines.append(f"t = {literal(low[i])} + t * {literal(high[i] - low[i])};")
        if network_norm is not None:
            lines.append(clip("t", literal(network_norm.minimum[i]), literal(network_norm.maximum[i])))
            lines.append(f"t = (t - {literal(network_norm.mean[i])}) / {literal(network_norm.range[i])};")
        lines.append(f"x[{i}] = t;")
    return lines, f"nondet_double() for p[0..1] ({', '.join(calls)})"


def render_diff_harness(pair: ImplementationPair, criterion: Criterion, region: Region, source: SeedSource,
                        region_text: str) -> CProgram:  # fmt: skip
    """The two-implementation harness of one region."""
    check_provable(pair)
    obstacle = shared_program_obstacle(pair)
    if obstacle is not None:
        raise InputError(f"no two-network harness: {obstacle}")
    sides = (pair.reference, pair.candidate)
    n = pair.reference.n_inputs
    declarations = [
        f"{p}num {p}{v}[QV_N_{'INPUTS' if v == 'x' else 'OUTPUTS'}];" for p in PREFIXES for v in "xy"
    ]
    linf = region.brightness is None and region.contrast is None
    if linf:
        body = []
        for i in range(n):
            body += [f"x[{i}] = nondet_double();",
                     f"__ESBMC_assume({literal(region.lo[i])} <= x[{i}] && x[{i}] <= {literal(region.hi[i])});"]  # fmt: skip
        calls = [f"nondet_double() for x[0..{n - 1}] (normalised inputs)"]
    else:
        body, call = _distortion_lines(region, source, pair.reference.network.input_norm)
        calls = [call]
    for side, prefix in zip(sides, PREFIXES):
        lines, call = _conversion(side, prefix, region.lo, region.hi, not linf)
        body += lines
        calls += [call] if call else []
    body += [f"{p}network({p}x, {p}y);" for p in PREFIXES]
    body += _criterion_lines(pair, criterion)
    context = {
        "version": __version__,
        "name": pair.describe(),
        "networks": [
            {
                "role": role,
                "describe": f"{side.label} ({side.network.name})",
                "prefix": prefix,
                "code": prefixed_network(side, prefix),
            }
            for role, side, prefix in zip(ROLES, sides, PREFIXES)
        ],
        "region": region_text,
        "criterion": f"not ({criterion.describe()})",
        "nondet_calls": "; ".join(calls),
        "file_name": HARNESS_FILE,
        "declarations": declarations,
        "body": body,
    }
    return CProgram(HARNESS_FILE, render_template("diff_harness.c.j2", context))


def make_regions(source: SeedSource, seeds: np.ndarray, settings: ProofSettings) -> list[Region]:
    """One region per seed: its L-inf ball in normalised units, or its brightness/contrast box (with
    the box of every input the distortions can reach, for the fixed-point word bounds)."""
    canvas = source.canvas
    regions = []
    for index, seed in enumerate(seeds):
        if settings.distorted:
            corners = []
            for b in settings.brightness or (0.0, 0.0):
                for c in settings.contrast or (1.0, 1.0):
                    y = canvas.clip(canvas.middle + c * (seed - canvas.middle))
                    corners.append(canvas.clip(y + b * canvas.width))
            reach_lo, reach_hi = (
                np.min(corners, axis=0),
                np.max(corners, axis=0),
            )  # affine per input: corners bound it
            lo, hi = source.normalise(reach_lo[None, :])[0], source.normalise(reach_hi[None, :])[0]
            regions.append(Region(index, index, seed, lo, hi, settings.brightness, settings.contrast))
        else:
            radius = settings.radius * canvas.width
            low, high = np.maximum(seed - radius, canvas.lo), np.minimum(seed + radius, canvas.hi)
            lo, hi = source.normalise(low[None, :])[0], source.normalise(high[None, :])[0]
            regions.append(Region(index, index, seed, lo, hi))
    return regions


class Replayer:
    """Each implementation's own network.c, compiled once; replays a normalised input on both."""

    def __init__(self, pair: ImplementationPair, workdir: Path) -> None:
        self.sides = (pair.reference, pair.candidate)
        self.compiled = [
            CompiledNetwork(render_network(side.qnet), workdir / f"{role}_network", side.qnet.is_integer)  # type: ignore[arg-type]
            for side, role in zip(self.sides, ROLES)
        ]

    def outputs(self, x_norm: np.ndarray) -> list[np.ndarray]:
        """Both sides' real outputs from their compiled C; an error unless the simulators agree bit for bit."""
        results = []
        for side, compiled in zip(self.sides, self.compiled):
            qnet = side.qnet
            raw_inputs = side.inputs(x_norm[None, :]) if qnet.is_integer else x_norm[None, :]  # type: ignore[union-attr]
            run = compiled.run(raw_inputs, raw=True)
            if run.overflowed[0]:
                raise InputError(
                    f"{side.label}: the compiled network reports an overflow on the counterexample"
                )
            simulated = side.run(x_norm[None, :])
            if not np.array_equal(
                np.asarray(run.outputs, dtype=np.float64), np.asarray(simulated.raw, dtype=np.float64)
            ):
                raise InputError(
                    f"{side.label}: the compiled C and the simulator differ on the counterexample"
                )
            results.append(side.real_outputs(run.outputs)[0])
        return results


def _x_from_values(
    region: Region, source: SeedSource, values: Sequence[float], n: int
) -> tuple[np.ndarray, np.ndarray]:
    """(search-coordinate input, normalised input) of a counterexample's nondet values."""
    if region.brightness is None and region.contrast is None:
        x_norm = np.array(values[:n], dtype=np.float64)
        return _search_coordinates(x_norm, source), x_norm
    x = _distorted(region, source, float(values[0]), float(values[1]))
    return x, source.normalise(x[None, :])[0]


def _distorted(region: Region, source: SeedSource, brightness: float, contrast: float) -> np.ndarray:
    """The seed under contrast then brightness, by the registry (the order the harness computes)."""
    x = FAMILIES["contrast"](region.seed[None, :], contrast, np.random.default_rng(0), source.canvas)
    return FAMILIES["brightness"](x, brightness, np.random.default_rng(0), source.canvas)[0]


def _search_coordinates(x_norm: np.ndarray, source: SeedSource) -> np.ndarray:
    """The search-coordinate input of a normalised one (the normalisations are affine per input on the
    canvas), for pictures and the .npz; the normalised input is what the proof is about."""
    canvas = source.canvas
    n = x_norm.size
    a, b = source.normalise(np.stack([np.full(n, canvas.lo), np.full(n, canvas.hi)]))
    slope = (b - a) / canvas.width
    return canvas.lo + (x_norm - a) / np.where(slope == 0, 1.0, slope)


def _backend(settings: ProofSettings):
    if settings.backend == "internal":
        return InternalBackend()
    from qverify.backends.esbmc import EsbmcBackend, EsbmcOptions, find_esbmc

    options = EsbmcOptions()
    find_esbmc(options)
    return EsbmcBackend(options)


def _journalled(journal: Path) -> dict:
    """A region's journalled verdict, or {} when there is none or it is not a whole record."""
    try:
        done = json.loads(journal.read_text())
    except (OSError, ValueError):
        return {}
    return done if isinstance(done, dict) and isinstance(done.get("verdict"), dict) else {}


def prove_region(pair: ImplementationPair, criterion: Criterion, source: SeedSource, region: Region,
                 settings: ProofSettings, workdir: Path, replayer: Replayer) -> RegionVerdict:  # fmt: skip
    """Decide one region; UNSAFE only after the replay (module docstring)."""
    started = time.perf_counter()
    text = region.describe(f"radius {settings.radius:g} of the range")
    folder = workdir / f"region{region.index:03d}"

    def verdict(status: str, reason: str = "", **found) -> RegionVerdict:
        return RegionVerdict(region.index, region.seed_index, text, status, settings.backend,
                             round(time.perf_counter() - started, 3), reason, **found)  # fmt: skip

    try:
        obstacle = shared_program_obstacle(pair)
        program = None if obstacle else render_diff_harness(pair, criterion, region, source, text)
        journal = folder / JOURNAL_FILE
        what = program.text if program is not None else _pair_text(pair, criterion, region)
        key = {"harness_sha256": hashlib.sha256(what.encode()).hexdigest(), "backend": settings.backend,
               "timeout_s": settings.timeout_s, "sample": settings.sample, "stability": settings.stability,
               "strategy": STRATEGY}  # fmt: skip
        done = _journalled(journal)
        if done.get("key") == key:  # the same harness decided before with the same back end and limit
            return RegionVerdict.from_json(done["verdict"])
        folder.mkdir(parents=True, exist_ok=True)
        harness = program.write(folder) if program is not None else None
        found = _decide(
            pair, criterion, source, region, settings, folder, harness, obstacle, replayer, verdict
        )
        partial = journal.with_suffix(".part")  # whole or not at all: a crash mid-write leaves no verdict
        partial.write_text(json.dumps({"key": key, "verdict": found.to_json()}) + "\n")
        os.replace(partial, journal)
        return found
    except QverifyError as error:
        return verdict("ERROR", str(error))


def _pair_text(pair: ImplementationPair, criterion: Criterion, region: Region) -> str:
    """What a region's verdict depends on when there is no two-network harness to key it by: both
    networks' C, the region and the criterion."""
    parts = [
        prefixed_network(side, prefix) for side, prefix in zip((pair.reference, pair.candidate), PREFIXES)
    ]
    parts += [" ".join(literal(v) for v in region.lo), " ".join(literal(v) for v in region.hi)]
    parts += [repr(region.brightness), repr(region.contrast), criterion.describe()]
    return "\n".join(parts)


def _decide(pair: ImplementationPair, criterion: Criterion, source: SeedSource, region: Region,
            settings: ProofSettings, folder: Path, harness: Path | None, obstacle: str | None, replayer: Replayer,
            verdict) -> RegionVerdict:  # fmt: skip
    """Cheapest first, each answer replayed before it counts (module docstring): sampling, bisection
    between differently classified points, the two stability proofs, the two-network harness (none
    when the sides cannot share one program: `obstacle`)."""
    deadline = time.perf_counter() + settings.timeout_s
    n_doubles = 2 if settings.distorted else pair.reference.n_inputs

    def confirm(values: Sequence[float], origin: str, method: str) -> RegionVerdict:
        found = _confirm(
            pair, criterion, source, region, harness, replayer, values, n_doubles, origin, verdict
        )
        return replace(found, method=method)

    to_inputs = _inputs_of(region, source)
    anchor = _anchor(region, source)
    if settings.sample:
        values, classes, hit = _sample_region(pair, criterion, region, to_inputs, anchor)
        if hit is not None:
            found = confirm(values[hit], "sampling", "sampling")
            if found.status == "UNSAFE":
                return found
        for other in differently_classified(values, classes):
            point = find_disagreement_between(pair, criterion, to_inputs, anchor, other)
            if point is not None:
                found = confirm(point, "bisection between differently classified points", "bisection")
                if found.status == "UNSAFE":
                    return found
    notes: list[str] = []
    if settings.stability and criterion.kind != "distance":
        decided, harness_needed = _by_stability(pair, criterion, region, settings, folder, to_inputs,
                                                anchor, deadline, confirm, verdict, notes)  # fmt: skip
        if decided is not None:
            return decided
        if not harness_needed:
            return replace(verdict("UNKNOWN", "; ".join(notes)), method="stability")
    if harness is None:
        return replace(verdict("UNKNOWN", "; ".join([*notes, f"no two-network harness: {obstacle}"])),
                       method="stability" if notes else "")  # fmt: skip
    remaining = deadline - time.perf_counter()
    if remaining < MIN_PAIR_S:
        return replace(verdict("UNKNOWN", "; ".join(notes) or "timeout"), method="stability" if notes else "")
    job = HarnessJob(harness, harness.parent, True, n_doubles)
    answer = _backend(settings).check(job, Limits(timeout_s=remaining))
    prefix = "; ".join(notes) + "; pair harness: " if notes else ""
    if answer.status is not Status.UNSAFE:
        return replace(verdict(answer.status.value, prefix + answer.reason), method="pair harness")
    values = answer.counterexample
    if values is None or len(values) < n_doubles:
        return verdict("ERROR", f"{answer.backend} reported UNSAFE without the nondet values")
    return confirm(values, answer.backend, "pair harness")


def _by_stability(pair: ImplementationPair, criterion: Criterion, region: Region, settings: ProofSettings,
                  folder: Path, to_inputs, anchor: np.ndarray, deadline: float, confirm, verdict,
                  notes: list[str]) -> tuple[RegionVerdict | None, bool]:  # fmt: skip
    """SAFE when both sides keep the anchor's class (top-1) or the candidate never predicts the target
    (targeted) over the region; UNSAFE when a side's counterexample leads to a replayed disagreement;
    else None (with what was learnt in `notes`) and whether the two-network harness can still help --
    not once the reference is proved to keep the class: the harness would ask the question the
    candidate's proof just left open. `stability.py` says why this is sound."""
    linf = not settings.distorted
    n_out = pair.reference.n_outputs
    if criterion.kind == "targeted":
        plan = [(pair.candidate, "candidate", predicts_class(criterion.target, n_out), f"never-{criterion.target}")]  # type: ignore[arg-type]  # fmt: skip
        shares = (0.6,)
        claim = f"the candidate predicts class {criterion.target} nowhere in the region"
    else:
        label = int(pair.reference.predict(to_inputs(anchor[None, :]))[0])
        unsafe = leaves_class(label, n_out)
        plan = [(pair.reference, "reference", unsafe, f"class-{label}"), (pair.candidate, "candidate", unsafe, f"class-{label}")]  # fmt: skip
        # once the reference is proved to keep c, "the pair disagrees" is "the candidate leaves c":
        # the two-network harness would ask the same question, harder, so the candidate gets all the time
        shares = (0.4, 0.95)  # (the margin: the pipeline around the engine, replay included)
        claim = f"both implementations predict class {label} everywhere in the region"
    proofs = []
    for (side, role, unsafe, what), share in zip(plan, shares):
        box = side_box(side, region.lo, region.hi, widen=not linf)
        if box is None:
            notes.append(
                f"{role}: its input set is not a box of the harness generator's (no stability proof)"
            )
            return None, True
        budget = share * (deadline - time.perf_counter())
        if budget < MIN_PAIR_S:
            return None, True
        proof = prove_side(side, role, box, unsafe, what, settings.backend, budget, region.lo, region.hi,
                           folder / f"stability-{role}")  # fmt: skip
        notes.append(f"stability: {proof.describe()}")
        if proof.status == "UNSAFE" and linf and proof.example is not None:
            point = find_disagreement_between(pair, criterion, to_inputs, anchor, proof.example)
            if point is not None:
                found = confirm(point, f"the {role}'s stability counterexample", "stability")
                if found.status == "UNSAFE":
                    return found, False
        if proof.status != "SAFE":
            return None, not (role == "candidate" and criterion.kind == "top1")
        proofs.append(proof)
    safe = verdict("SAFE", f"{claim} ({'; '.join(p.describe() for p in proofs)})")
    return replace(safe, method="stability"), False


def _confirm(pair: ImplementationPair, criterion: Criterion, source: SeedSource, region: Region,
             harness: Path | None, replayer: Replayer, values: Sequence[float], n_doubles: int, origin: str,
             verdict) -> RegionVerdict:  # fmt: skip
    """UNSAFE if the nondet values replay: VIOLATED in the harness (when there is one), a disagreement
    of the compiled networks, the simulators bit-exact with them. A counterexample that does not replay
    leaves the region UNKNOWN, saying why (never UNSAFE); C and simulator differing on it is an ERROR."""
    x, x_norm = _x_from_values(region, source, values, pair.reference.n_inputs)
    if harness is not None:
        replayed = run_lines(compile_replay(harness), [_harness_line(pair, x_norm, values, n_doubles)])
        if not replayed[0].startswith("VIOLATED"):
            return verdict(
                "UNKNOWN", f"the counterexample of {origin} does not replay in the harness: {replayed[0]}"
            )
    reference, candidate = replayer.outputs(x_norm)
    if not criterion.disagrees(reference[None, :], candidate[None, :])[0]:
        return verdict(
            "UNKNOWN", f"the counterexample of {origin} does not make the compiled networks disagree"
        )
    labels = f"reference {int(np.argmax(reference))}, candidate {int(np.argmax(candidate))}"
    return verdict(
        "UNSAFE", f"found by {origin}, replayed: {labels}", x=x, reference=reference, candidate=candidate
    )


def _inputs_of(region: Region, source: SeedSource):
    """A function from a batch of the region's nondet values to normalised inputs: the values
    themselves (L-inf), or the seed distorted by each (brightness, contrast) pair."""
    if region.brightness is None and region.contrast is None:
        return lambda values: np.asarray(values, dtype=np.float64)
    return lambda values: source.normalise(np.array([_distorted(region, source, b, c) for b, c in values]))


def _anchor(region: Region, source: SeedSource) -> np.ndarray:
    """The region's nondet values of the seed itself: its normalised input (L-inf), or the neutral
    distortion (clipped into the parameter box)."""
    if region.brightness is None and region.contrast is None:
        return np.clip(source.normalise(region.seed[None, :])[0], region.lo, region.hi)
    low, high = _parameter_box(region)
    neutral = np.array([FAMILIES["brightness"].neutral, FAMILIES["contrast"].neutral])
    return np.clip(neutral, low, high)


def _parameter_box(region: Region) -> tuple[np.ndarray, np.ndarray]:
    """The (brightness, contrast) box of a distortion region; a distortion not asked for is pinned
    to its neutral value (offset 0, factor 1)."""
    boxes = (region.brightness or (0.0, 0.0), region.contrast or (1.0, 1.0))
    return np.array([b[0] for b in boxes]), np.array([b[1] for b in boxes])


def _sample_region(pair: ImplementationPair, criterion: Criterion, region: Region, to_inputs,
                   anchor: np.ndarray) -> tuple[np.ndarray, np.ndarray, int | None]:  # fmt: skip
    """SAMPLES seeded nondet values of the region (the anchor first, then half uniform, half vertices
    of the box), the reference's top-1 class of each (for the bisection), and the index of the first
    that makes the simulators disagree, if any -- the cheap refutation the search does, confirmed by
    the same replay as a back end's."""
    rng = np.random.default_rng([region.index, 17])
    if region.brightness is None and region.contrast is None:
        low, high = region.lo, region.hi
    else:
        low, high = _parameter_box(region)
    span = high - low
    uniform = low + rng.random((SAMPLES // 2, span.size)) * span
    vertices = np.where(rng.random((SAMPLES // 2, span.size)) < 0.5, low, high)
    values = np.concatenate([anchor[None, :], uniform, vertices])
    reference, candidate = pair.run(to_inputs(values))
    hits = np.flatnonzero(criterion.disagrees(reference.outputs, candidate.outputs))
    return values, np.argmax(reference.outputs, axis=1), (int(hits[0]) if len(hits) else None)


def _harness_line(
    pair: ImplementationPair, x_norm: np.ndarray, values: Sequence[float], n_doubles: int
) -> str:
    """The harness' nondet values as a replay line: the doubles (exact, hexadecimal), then each
    fixed-point side's input words / int8 side's input codes of x (from its simulator)."""
    parts = [float(v).hex() for v in values[:n_doubles]]
    for side in (pair.reference, pair.candidate):
        if side.qnet.is_integer:  # type: ignore[union-attr]
            parts += [str(int(w)) for w in side.inputs(x_norm[None, :])[0]]
    return " ".join(parts)


def prove_regions(pair: ImplementationPair, criterion: Criterion, source: SeedSource, seeds: np.ndarray,
                  settings: ProofSettings, workdir: Path, progress: bool = True) -> list[RegionVerdict]:  # fmt: skip
    """Every seed's region, in turn; each verdict is journalled beside its harness (`verdict.json`, keyed
    by the harness text, back end and timeout), so an interrupted run resumes where it stopped."""
    check_provable(pair)
    criterion.check(pair.reference.n_outputs)
    replayer = Replayer(pair, workdir)
    results = []
    for region in tqdm(make_regions(source, seeds, settings), desc="diff proof", unit="region",
                       disable=not progress, file=sys.stderr, dynamic_ncols=True):  # fmt: skip
        results.append(prove_region(pair, criterion, source, region, settings, workdir, replayer))
    return results
