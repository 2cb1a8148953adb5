"""`qverify diff NET --candidate LABEL[=MODEL] [--data DATA] [--prove]`: find -- or prove absent --
inputs on which a reference implementation and a quantized candidate disagree (docs/diff.md).

Search mode (default): DiffChaser's GA, DiverGet's distortion search and random baselines around seeds,
with #DII, DiR, SR, time to the first DII, diversity. Proof mode (`--prove`): one C program holding both
implementations on the same nondet input, checked by the internal engine or ESBMC over an L-inf region
or a brightness/contrast box around each seed; every UNSAFE replayed in both compiled C programs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from qverify.cli.options import non_negative_int, parse_image_shape, positive_int
from qverify.cli.outputs import add_output_options, prepare_output_folder
from qverify.cli.pairs import ModelFiles, domain_of, implementation_of, pair_of_floats, paired_implementation
from qverify.errors import InputError
from qverify.input_limits import check_tensor
from qverify.vocabulary import BUILT_IN

if TYPE_CHECKING:
    from qverify.network import Network

DEFAULT_METHODS = "ga,distortion,random,random-distortion"
MAX_POPULATION = 100_000  # DiffChaser's and DiverGet's populations are tens; a generation is one batch


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="find or prove absent disagreements between a network and its quantized implementation",
        description="Search for disagreement-inducing inputs (DiffChaser's GA, DiverGet's distortion search, "
        "random search) and/or prove that none exists in regions around seeds (--prove: a C harness with both "
        "implementations, internal engine or ESBMC). Writes diis.npz, diis.png, sr_dir.png, report.md, diff.json.",
    )
    parser.add_argument("network", help="the network (.onnx or .nnet): the reference's model")
    pair = parser.add_argument_group("the pair")
    pair.add_argument(
        "--reference",
        default="float",
        metavar="LABEL",
        help="reference implementation of NET (default float; real: the float64 network, search only)",
    )
    pair.add_argument(
        "--candidate",
        metavar="LABEL[=MODEL]",
        help="candidate implementation: K.L, half, float, double, int8, int8-x86, int8-ort, int8-tflite, int8-xnnpack, optionally of "
        "another model file (int8=model.int8.onnx)",
    )
    pair.add_argument(
        "--candidate-network",
        metavar="MODEL",
        help="the candidate's model file (alone: int8 when it holds int8 parameters, else float)",
    )
    pair.add_argument(
        "--criterion",
        default="top1",
        choices=("top1", "targeted", "distance"),
        help="top1 (default): different top-1 classes; targeted: the candidate predicts --target "
        "and the reference does not; distance: max |y_ref - y_cand| > --delta",
    )
    pair.add_argument("--target", type=int, help="class T of the targeted criterion")
    pair.add_argument("--delta", type=float, help="threshold of the distance criterion (normalised outputs)")
    inputs = parser.add_argument_group("seeds")
    inputs.add_argument(
        "--data",
        metavar="DATA",
        help=f"seed inputs in raw units: .npz (x, optional y) or built-in ({', '.join(BUILT_IN)}, "
        ":train/:test); without it, seeds are drawn uniformly in the network's input box",
    )
    inputs.add_argument(
        "--seeds",
        type=positive_int,
        default=20,
        metavar="N",
        help="seeds: inputs both implementations get right (default 20)",
    )
    inputs.add_argument("--domain", metavar="LO,HI", help="clip range of inputs in raw units")
    inputs.add_argument("--image-shape", metavar="HxW", help="image shape of the inputs (e.g. 8x8)")
    search = parser.add_argument_group("search mode")
    search.add_argument(
        "--methods",
        default=DEFAULT_METHODS,
        metavar="M1,M2",
        help=f"search methods (default {DEFAULT_METHODS}; 'none': proof mode only)",
    )
    search.add_argument(
        "--budget",
        type=int,
        default=1000,
        metavar="Q",
        help="queries per seed and method (default 1000)",
    )
    search.add_argument("--time-budget", type=float, metavar="S", help="also stop a seed after S seconds")
    search.add_argument(
        "--first-dii",
        action="store_true",
        help="stop each seed's search at its first DII (DiffChaser's protocol; every method): SR and the "
        "time to a DII at the least cost, no #DII/DiR comparison (default: spend the whole budget)",
    )
    search.add_argument(
        "--population",
        type=int,
        default=20,
        help=f"population / swarm size (default 20; 2..{MAX_POPULATION})",
    )
    search.add_argument(
        "--epsilon",
        type=float,
        default=0.1,
        help="L-inf radius of GA and random search, fraction of the input range (default 0.1)",
    )
    search.add_argument(
        "--mutation-rate", type=float, default=0.05, help="GA mutation rate per value (default 0.05)"
    )
    search.add_argument(
        "--k",
        type=positive_int,
        default=1,
        help="k of DiffChaser's k-uncertainty fitness: the k-th ranked logit (default 1; below the outputs)",
    )
    search.add_argument(
        "--optimizer", default="pso", choices=("pso", "ga"), help="distortion search optimizer"
    )
    search.add_argument(
        "--families",
        metavar="F1,F2",
        help="distortions searched (default: every label-preserving one that fits the inputs)",
    )
    search.add_argument(
        "--range",
        action="append",
        default=[],
        metavar="FAMILY=LO,HI",
        help="search range of one distortion; repeatable",
    )
    search.add_argument(
        "--per-family", action="store_true", help="also search each distortion alone (SR/DiR per distortion)"
    )
    search.add_argument(
        "--min-psnr",
        type=float,
        default=20.0,
        help="PSNR (dB) below which a generated input is invalid (default 20; 0: off)",
    )
    search.add_argument(
        "--keep",
        type=non_negative_int,
        default=50,
        help="DIIs kept per seed and method in diis.npz (default 50)",
    )
    proof = parser.add_argument_group("proof mode")
    proof.add_argument(
        "--prove", action="store_true", help="prove or refute disagreement in regions around seeds"
    )
    proof.add_argument("--regions", type=positive_int, metavar="N", help="regions (default: every seed)")
    proof.add_argument(
        "--radius",
        type=float,
        default=0.01,
        help="L-inf radius of a proof region, fraction of the input range (default 0.01)",
    )
    proof.add_argument(
        "--brightness",
        metavar="LO,HI",
        help="prove over a box of brightness offsets (fractions of the range) instead of an L-inf ball",
    )
    proof.add_argument(
        "--contrast", metavar="LO,HI", help="... and contrast factors (around the range's middle)"
    )
    proof.add_argument(
        "--backend", default="internal", choices=("internal", "esbmc"), help="back end (default internal)"
    )
    proof.add_argument(
        "--no-sampling",
        action="store_true",
        help="leave every region to the back end (default: first try 2,000 points of it on the simulators "
        "and bisect between differently classified ones)",
    )
    proof.add_argument(
        "--no-stability",
        action="store_true",
        help="skip the single-network stability proofs (default: prove both sides keep the seed's class "
        "before the two-network harness)",
    )
    proof.add_argument("--timeout", type=float, default=60.0, help="seconds per region (default 60)")
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of every random choice (default 0)"
    )
    add_output_options(
        parser,
        "results/diff",
        "continue a previous run in the output folder: reuse its journalled seed results and verdicts",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)  # fmt: skip


def _ranges(entries: list[str]) -> dict[str, tuple[float, float]]:
    ranges = {}
    for entry in entries:
        name, sep, values = entry.partition("=")
        if not sep:
            raise InputError(f"--range '{entry}': expected FAMILY=LO,HI")
        ranges[name.strip()] = pair_of_floats(values, f"--range {name.strip()}")
    return ranges


def _candidate(args: argparse.Namespace, networks: ModelFiles, reference: Network):
    if args.candidate is None:
        if args.candidate_network is None:
            raise InputError(
                "name the candidate: --candidate LABEL[=MODEL] (8.8, half, int8, ...) or --candidate-network MODEL"
            )
        model = networks(args.candidate_network)
        return paired_implementation(
            reference, model, model.quantization.model_format if model.quantization is not None else "float"
        )
    label, _, model = args.candidate.partition("=")
    path = model.strip() or args.candidate_network or args.network
    return paired_implementation(reference, networks(path), label.strip())


def _families(text: str | None, has_image: bool) -> list[str]:
    from qverify.assurance.diff.space import DEFAULT_FAMILIES
    from qverify.data.transforms import FAMILIES

    if text is not None:
        return [name.strip() for name in text.split(",") if name.strip()]
    return [name for name in DEFAULT_FAMILIES if has_image or not FAMILIES[name].spatial]


def run(args: argparse.Namespace) -> int:
    # here, not at the top: scipy and matplotlib would slow every `qverify` start-up
    from qverify.assurance import ImplementationPair
    from qverify.assurance.diff.criteria import Criterion
    from qverify.assurance.diff.inputs import DRAWN_PER_SEED, seed_source
    from qverify.assurance.diff.records import DiffStudy
    from qverify.assurance.diff.report import HARNESSES, OUTPUTS, summary_text, write_report
    from qverify.assurance.diff.search import METHODS, PairOracle, SearchSettings, run_search, select_seeds
    from qverify.assurance.diff.search_journal import SearchJournal, run_identity
    from qverify.assurance.diff.space import LinfBall, distortion_space

    networks = ModelFiles()
    net = networks(args.network)
    pair = ImplementationPair(implementation_of(net, args.reference), _candidate(args, networks, net))
    criterion = Criterion(args.criterion, args.target, args.delta)
    criterion.check(net.n_outputs)
    methods = (
        [] if args.methods.strip() == "none" else [m.strip() for m in args.methods.split(",") if m.strip()]
    )
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"unknown search method {', '.join(unknown)} (known: {', '.join(METHODS)}, or none)")
    if not methods and not args.prove:
        raise InputError("nothing to do: --methods none without --prove")
    _check_search_options(args, net)
    settings = SearchSettings(args.budget, args.time_budget, args.population, args.epsilon, args.mutation_rate,
                              args.k, args.optimizer, args.keep, args.min_psnr, args.seed,
                              args.first_dii)  # fmt: skip
    proof = _proof_settings(args) if args.prove else None
    domain = domain_of(args.domain) if args.domain else None
    if args.data is None:  # seeds drawn uniformly: DRAWN_PER_SEED per seed asked for
        check_tensor((args.seeds * DRAWN_PER_SEED, net.n_inputs), 8, "--seeds")
    source = seed_source(
        net, args.data, domain, parse_image_shape(args.image_shape, net.n_inputs), args.seeds, args.seed
    )
    out = Path(args.out)
    prepare_output_folder(out, OUTPUTS, args.overwrite, args.resume)
    oracle = PairOracle(pair, criterion, source.normalise)
    seeds, seed_labels = select_seeds(oracle, source.x, source.labels, args.seeds, args.seed)
    canvas = source.canvas
    ball = LinfBall(canvas, args.epsilon * canvas.width)
    distortions = [m for m in methods if "distortion" in m]
    space = (
        distortion_space(canvas, _families(args.families, canvas.shape is not None), _ranges(args.range))
        if distortions
        else None
    )
    runs: tuple = ()
    journalled: list[Path] = []
    if methods:
        identity = run_identity(pair.describe(), criterion.describe(), settings, ball.radius, space)
        journal = SearchJournal(out, identity)
        runs = run_search(oracle, seeds, ball, space, methods, settings, args.per_family, not args.no_progress,
                          journal)  # fmt: skip
        journalled.append(journal.journal.path)
        if journal.reused:
            print(f"diff: reused {journal.reused} seed results journalled in {journal.journal.path}")
    regions = ()
    if proof is not None:
        from qverify.assurance.diff.proof import prove_regions

        count = len(seeds) if args.regions is None else args.regions
        regions = prove_regions(pair, criterion, source, seeds[:count], proof, out / HARNESSES,
                                not args.no_progress)  # fmt: skip
        journalled.append(out / HARNESSES)
    study = DiffStudy(
        pair=pair.describe(),
        criterion=criterion.describe(),
        domain=(canvas.lo, canvas.hi),
        image_shape=canvas.shape,
        seeds=seeds,
        seed_labels=seed_labels,
        settings={"seed": args.seed, "budget": args.budget, "time_budget_s": args.time_budget,
                  "first_dii": args.first_dii,
                  "population": args.population, "epsilon": args.epsilon, "mutation_rate": args.mutation_rate,
                  "k": args.k, "optimizer": args.optimizer, "min_psnr": args.min_psnr,
                  "families": list(space.names) if space else [],
                  **({"backend": args.backend, "timeout_s": args.timeout, "radius": args.radius,
                      "brightness": args.brightness, "contrast": args.contrast,
                      "sampling": not args.no_sampling, "stability": not args.no_stability} if args.prove else {})},
        runs=runs,
        regions=tuple(regions),
        notes=source.notes,
        input_box=source.input_box,
    )  # fmt: skip
    written = write_report(study, out)
    print(f"diff: {pair.describe()}, {criterion.describe()}, {len(seeds)} seeds from {source.name}")
    print(summary_text(study))
    names = ", ".join(path.name + ("/" if path.is_dir() else "") for path in [*written, *journalled])
    print(f"wrote {len(written) + len(journalled)} files to {out}: {names}")
    return 0


def _check_search_options(args: argparse.Namespace, net) -> None:
    """What the search settings cannot check alone: against the network's outputs and inputs."""
    if args.k >= net.n_outputs:
        raise InputError(
            f"--k {args.k}: the k-th ranked output must exist (the network has {net.n_outputs}: k < {net.n_outputs})"
        )
    if not 2 <= args.population <= MAX_POPULATION:
        raise InputError(f"--population {args.population}: must lie in 2..{MAX_POPULATION}")
    check_tensor((args.population, net.n_inputs), 8, "--population")  # one generation, one batch


def _proof_settings(args: argparse.Namespace):
    from qverify.assurance.diff.proof import ProofSettings
    from qverify.tasks.model import timeout_problem

    if timeout_problem(args.timeout):
        raise InputError(f"--timeout: {timeout_problem(args.timeout)}")
    return ProofSettings(args.backend, args.timeout, args.radius,
                         pair_of_floats(args.brightness, "--brightness") if args.brightness else None,
                         pair_of_floats(args.contrast, "--contrast") if args.contrast else None,
                         not args.no_sampling, not args.no_stability)  # fmt: skip
