"""`qverify impact NET --data DATA --candidate int8[=MODEL] ...`: quantization impact under
perturbation -- accuracy, F1 and KL divergence of a reference and quantized candidates on a labelled
data set under each perturbation family at a grid of intensities (docs/impact.md)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from qverify.cli.options import non_negative_int, parse_image_shape, positive_int
from qverify.cli.outputs import add_output_options, prepare_output_folder
from qverify.cli.pairs import ModelFiles, domain_of, implementation_of, paired_implementation
from qverify.cli.report import warn
from qverify.errors import InputError
from qverify.input_limits import check_tensor
from qverify.vocabulary import BUILT_IN, FAMILY_NAMES, IMPACT_DEFAULT, PAPER_FAMILIES

if TYPE_CHECKING:
    from qverify.assurance import Implementation
    from qverify.network import Network

DEFAULT_REFERENCE = "float"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "impact",
        help="accuracy, F1 and KL divergence of quantized implementations under input perturbations",
        description="Run a labelled data set, perturbed by each family (noise, occlusions, blur, ...) at a "
        "grid of intensities, through a reference implementation and quantized candidates of one network; "
        "report top-1/top-5 accuracy, macro-F1, KL divergence of the softmax outputs both ways and the "
        "flip rate, with bootstrap intervals: impact.csv, impact.json, a PNG per family, report.md, "
        "report.html.",
    )
    parser.add_argument("network", help="the network (.onnx or .nnet): the reference's model")
    parser.add_argument(
        "--data",
        required=True,
        metavar="DATA",
        help=f"labelled data in the network's raw input units: an .npz with arrays x and y, or a built-in "
        f"set ({', '.join(BUILT_IN)}, optionally :train / :test)",
    )
    parser.add_argument(
        "--reference",
        default=DEFAULT_REFERENCE,
        metavar="LABEL",
        help="the reference implementation of NET (default float: IEEE single as qverify's bit-exact "
        "simulator computes it; real: the float64 network; onnxruntime: the .onnx file run by onnxruntime "
        "itself, not simulated -- the fast reference at CIFAR-10 scale)",
    )
    parser.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="LABEL[=MODEL]",
        help="a candidate implementation: int8, int8-x86, int8-ort, int8-tflite, int8-xnnpack, half, float, double, K.L (fixed point), "
        "optionally of another model file (e.g. int8=cnn.int8.onnx); repeatable",
    )
    parser.add_argument(
        "--formats",
        metavar="L1,L2,...",
        help="several candidates in one run (each LABEL[=MODEL]), e.g. 6.4,8.8,half,int8=cnn.int8.onnx",
    )
    parser.add_argument(
        "--candidate-network",
        metavar="MODEL",
        help="the model file of candidates that name none (default NET); alone, it makes the candidate "
        "int8 when MODEL holds int8 parameters, else float",
    )
    parser.add_argument(
        "--domain",
        metavar="LO,HI",
        help="the clip range of inputs in raw units (default: the data set's, e.g. [0, 1] for digits and "
        "[0, 16] for digits-raw; else the network's NNet min/max; else the data's own range)",
    )
    parser.add_argument("--image-shape", metavar="HxW", help="image shape of the inputs (e.g. 8x8, 3x32x32)")
    parser.add_argument(
        "--families",
        metavar="F1,F2,...",
        help=f"families to study (default: {','.join(IMPACT_DEFAULT)}; 'paper': the paper's four; 'all'); "
        f"known: {', '.join(FAMILY_NAMES)}",
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="FAMILY=V1,V2,...",
        help="intensities of one family instead of its default grid; repeatable",
    )
    parser.add_argument(
        "--samples", type=positive_int, metavar="N", help="at most N images (a random subset)"
    )
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of perturbations and bootstrap (default 0)"
    )
    parser.add_argument(
        "--resamples",
        type=non_negative_int,
        default=1000,
        metavar="B",
        help="bootstrap resamples (default 1000; 0: none)",
    )
    parser.add_argument("--confidence", type=float, default=0.95, help="interval level (default 0.95)")
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="softmax temperature over the outputs (default 1)"
    )
    add_output_options(
        parser,
        "results/impact",
        resume="continue a previous run in the output folder: take the cells it finished from "
        "DIR/journal.jsonl (same networks, data, seed and bootstrap settings)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def _grids(entries: list[str]) -> dict[str, list[float]]:
    grids: dict[str, list[float]] = {}
    for entry in entries:
        name, sep, values = entry.partition("=")
        try:
            grids[name.strip()] = [float(v) for v in values.split(",")] if sep else []
        except ValueError:
            raise InputError(f"--grid '{entry}': expected FAMILY=V1,V2,... (numbers)") from None
        if not sep or not values.strip():
            raise InputError(f"--grid '{entry}': expected FAMILY=V1,V2,...")
    return grids


def _family_names(text: str | None, has_image: bool) -> list[str]:
    from qverify.data.transforms import FAMILIES

    if text is None:
        names = list(IMPACT_DEFAULT)
        if not has_image:
            skipped = [name for name in names if FAMILIES[name].spatial]
            warn(f"the inputs have no image shape: leaving out {', '.join(skipped)} (give --image-shape)")
            names = [name for name in names if not FAMILIES[name].spatial]
        return names
    if text == "all":
        return list(FAMILY_NAMES)
    if text == "paper":
        return list(PAPER_FAMILIES)
    return [name.strip() for name in text.split(",") if name.strip()]


def _candidates(args: argparse.Namespace, networks: ModelFiles, reference: Network) -> list[Implementation]:
    entries = list(args.candidate) + (
        [e for e in args.formats.split(",") if e.strip()] if args.formats else []
    )
    default_model = args.candidate_network or args.network
    if not entries:
        if args.candidate_network is None:
            raise InputError(
                "name the candidate implementation: --candidate LABEL[=MODEL] (int8, half, 8.8, ...), "
                "--formats L1,L2,... or --candidate-network MODEL"
            )
        quantization = networks(args.candidate_network).quantization
        entries = [quantization.model_format if quantization is not None else "float"]
    specs = []
    for entry in entries:
        label, _, model = entry.strip().partition("=")
        specs.append((label.strip(), model.strip() or default_model))
    labels = [label for label, _ in specs]
    candidates = []
    for label, model in specs:
        implementation = paired_implementation(reference, networks(model), label)
        if labels.count(label) > 1:  # the same format of two models: tell them apart
            implementation = replace(implementation, label=f"{label}@{Path(model).stem}")
        candidates.append(implementation)
    if len({c.label for c in candidates}) < len(candidates):
        raise InputError(f"a candidate is named twice: {', '.join(entries)}")
    return candidates


def _check_normalisations(reference: Implementation, candidates: list[Implementation]) -> None:
    """Inputs are normalised with the reference network's normalisation and every implementation
    runs its core; say so when a candidate's model carries a different normalisation."""
    import numpy as np

    ref = reference.network.input_norm
    for candidate in candidates:
        norm = candidate.network.input_norm
        if norm is None or candidate.network is reference.network:
            continue
        if ref is None or any(
            not np.array_equal(getattr(norm, name), getattr(ref, name)) for name in ("mean", "range")
        ):
            warn(
                f"{candidate.label} ({candidate.network.name}) normalises its inputs differently from the "
                f"reference; every implementation gets the reference's normalised inputs"
            )


def run(args: argparse.Namespace) -> int:
    # here, not at the top: numpy, scikit-learn and scipy would slow `qverify impact --help`
    from qverify.assurance import normalised_inputs
    from qverify.assurance.impact import (
        JOURNAL,
        OUTPUTS,
        StudySettings,
        check_dataset,
        family_grids,
        resolve_canvas,
        run_study,
        write_report,
    )
    from qverify.assurance.impact.tables import SHORT_HEADER, aligned, rows, summary_cells
    from qverify.data import load_dataset
    from qverify.suites.journal import Journal

    networks = ModelFiles()
    net = networks(args.network)
    settings = StudySettings(
        args.seed, args.resamples, args.confidence, args.temperature, not args.no_progress
    )
    reference = implementation_of(net, args.reference)
    candidates = _candidates(args, networks, net)
    _check_normalisations(reference, candidates)
    data = load_dataset(args.data)
    check_dataset(data, net.n_inputs, net.n_outputs)
    if args.samples is not None:
        data = data.subset(args.samples, args.seed)
    check_tensor((args.resamples, data.size), 8, "--resamples")  # the bootstrap's indices, per cell
    domain = domain_of(args.domain) if args.domain else None
    canvas, domain_source = resolve_canvas(
        data, net, domain, parse_image_shape(args.image_shape, net.n_inputs)
    )
    grids = family_grids(_family_names(args.families, canvas.shape is not None), _grids(args.grid), canvas)
    out = Path(args.out)
    prepare_output_folder(out, OUTPUTS, args.overwrite, args.resume)
    study = run_study(
        reference, candidates, data, canvas, grids, settings, lambda x: normalised_inputs(net, x),
        Journal(out / JOURNAL),
    )  # fmt: skip
    if not args.no_progress:  # the plots take seconds more after the bar's last cell
        print(
            f"impact: writing the report ({len(grids)} plots, report.md, report.html) in {out}",
            file=sys.stderr,
        )
    written = write_report(study, out)
    names = ", ".join(f"{c.label} ({c.network.name})" for c in candidates)
    print(
        f"impact: {reference.label} ({net.name}) vs {names} on {data.name}: {data.size} images, "
        f"{net.n_outputs} classes, domain [{canvas.lo:g}, {canvas.hi:g}] (from {domain_source})"
    )
    print(aligned(SHORT_HEADER, [row.short for row in rows(study, summary_cells(study), intervals=False)]))
    rates = "; ".join(f"{t.label} {t.per_second:,.0f}" for t in study.throughput)
    print(f"throughput (images/s, simulation only): {rates}")
    print(f"wrote {len(written)} files to {args.out} (report.md, report.html, impact.csv, impact.json, "
          f"{len(grids)} plots) in {study.wall_s:.1f} s")  # fmt: skip
    return 0
