"""`qverify repair NET --format K.L|int8 --repair-set DATA [--validation DATA] [--properties ...]`:
QNNRepair on a quantized implementation -- fault localisation in one layer with seven spectrum
metrics (and a random baseline), a MILP over integer weight changes per metric, the repaired model
and its C, a table per metric, and re-verification of properties before and after (docs/repair.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from qverify.cli.options import (
    add_implementation_options,
    add_verify_options,
    implementation_from_args,
    non_negative_int,
    verify_options_from_args,
)
from qverify.cli.outputs import add_output_options, prepare_output_folder
from qverify.cli.report import warn
from qverify.errors import InputError
from qverify.vocabulary import BUILT_IN

if TYPE_CHECKING:
    from qverify.data.datasets import Dataset
    from qverify.network import Network


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "repair",
        help="repair a quantized network: fault localisation, MILP over integer weight changes, re-verification",
        description="Split a labelled repair set into passing tests (the quantized implementation is right) "
        "and failing ones (it is wrong where the float network is right); rank the neurons of one layer "
        "by seven spectrum-based suspiciousness metrics (tarantula, ochiai, dstar, jaccard, ample, euclid, "
        "wong3) and at random; per metric, solve a MILP (HiGHS) for integer changes of the top neurons' "
        "weights in the format's own domain; measure every repair with the bit-exact simulator on the "
        "repair and validation sets; write the best repair (model file and C), report.md, repair.png and repair.json; "
        "with --properties, verify the properties before and after and list every verdict that changed.",
    )
    parser.add_argument(
        "network", help="the float network (.nnet or .onnx): the reference the repair aims at"
    )
    parser.add_argument(
        "--quantized",
        metavar="MODEL",
        help="the quantized model when it is a separate file (an int8 ONNX model for --format int8); "
        "default: NET in the format --format names",
    )
    data_help = f"an .npz with arrays x and y in NET's raw input units, or a built-in set ({', '.join(BUILT_IN)}, :train / :test)"
    parser.add_argument(
        "--repair-set", required=True, metavar="DATA", help=f"labelled repair set: {data_help}"
    )
    parser.add_argument(
        "--validation",
        metavar="DATA",
        help="labelled validation set, not used for the repair (default: for a built-in X:train, X:test)",
    )
    group = parser.add_argument_group("repair")
    group.add_argument(
        "--layer", type=int, metavar="N", help="the layer to repair, 1-based (default: the output layer)"
    )
    group.add_argument(
        "--neurons", type=int, default=5, metavar="N", help="neurons to repair per metric (default 5)"
    )
    group.add_argument(
        "--metrics",
        metavar="M1,M2,...",
        help="metrics to run (default: all seven and random)",
    )
    group.add_argument(
        "--random-runs", type=int, default=5, metavar="R", help="random draws of neurons (default 5)"
    )
    group.add_argument(
        "--random-seed", type=non_negative_int, default=0, help="seed of the random baseline (default 0)"
    )
    group.add_argument(
        "--margin",
        type=int,
        default=1,
        metavar="STEPS",
        help="output steps a failing test must win by (default 1)",
    )
    group.add_argument(
        "--max-tests",
        type=int,
        default=400,
        metavar="N",
        help="tests encoded in one MILP at most (default 400)",
    )
    group.add_argument(
        "--max-delta",
        type=int,
        default=8,
        metavar="STEPS",
        help="largest change of one weight or bias, in steps of the format (default 8; 0: the format's range)",
    )
    group.add_argument(
        "--time-limit", type=float, default=30.0, metavar="S", help="seconds per MILP (default 30)"
    )
    group.add_argument(
        "--properties",
        nargs="+",
        metavar="SUITE|FILE",
        help="re-verify these properties before and after the repair: a suite (name, folder or file), a "
        "spec file or VNN-LIB files",
    )
    add_implementation_options(parser)
    add_verify_options(parser)
    add_output_options(
        parser,
        "results/repair",
        "continue a previous run in the output folder: take the MILPs it finished from DIR/journal.jsonl",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(handler=run)


def _validation_spec(args: argparse.Namespace) -> str:
    if args.validation:
        return args.validation
    name, _, split = args.repair_set.partition(":")
    if name in BUILT_IN and split == "train":
        return f"{name}:test"
    raise InputError("give a validation set: --validation DATA (a set not used for the repair)")


def _labelled(spec: str, net: Network, what: str) -> Dataset:
    from qverify.data import load_dataset

    data = load_dataset(spec)
    data.check_inputs(net.n_inputs, f"the network {net.name}")
    data.check_labels(net.n_outputs, f"the network {net.name}")
    if data.y is None:  # check_labels raised already; for the type checker
        raise InputError(f"{what} {spec} has no labels")
    return data


def run(args: argparse.Namespace) -> int:
    # here, not at the top: numpy, the solvers and scikit-learn would slow `qverify repair --help`
    from qverify.assurance import make_implementation, normalised_inputs
    from qverify.assurance.repair import files, report
    from qverify.assurance.repair.metrics import METRICS, RANDOM
    from qverify.assurance.repair.repair import RepairSettings, prepare_study, run_repair
    from qverify.assurance.repair.reverify import load_properties, reverify
    from qverify.assurance.repair.target import check_format_supported, make_target
    from qverify.io import load_network
    from qverify.network.align import align_nodes
    from qverify.suites.journal import Journal

    if args.format is None:
        raise InputError(
            "name the quantized implementation to repair: --format K.L (e.g. 5.3) or --format int8"
        )
    options = implementation_from_args(args)
    check_format_supported(args.format, options.number)
    metrics = (
        tuple(m.strip() for m in args.metrics.split(",") if m.strip()) if args.metrics else (*METRICS, RANDOM)
    )
    settings = RepairSettings(
        layer=args.layer,
        neurons=args.neurons,
        metrics=metrics,
        random_runs=args.random_runs,
        margin=args.margin,
        max_tests=args.max_tests,
        time_limit_s=args.time_limit,
        max_delta=None if args.max_delta == 0 else args.max_delta,
        seed=args.random_seed,
    )
    net = load_network(args.network)
    # (the quantized export may list the graph's nodes in another topological order)
    quantized_net = align_nodes(load_network(args.quantized), net) if args.quantized else net
    verify_options = verify_options_from_args(args, None, net.image_shape) if args.properties else None
    properties = load_properties(args.properties, net.n_inputs, net.n_outputs) if args.properties else []
    implementation = make_implementation(quantized_net, args.format, options)
    target = make_target(implementation, settings.layer)
    repair_set = _labelled(args.repair_set, net, "repair set")
    validation = _labelled(_validation_spec(args), net, "validation set")
    out = Path(args.out)
    prepare_output_folder(out, report.OUTPUTS, args.overwrite, args.resume)
    study = prepare_study(
        net,
        target,
        normalised_inputs(net, repair_set.x),
        repair_set.y,  # type: ignore[arg-type]
        normalised_inputs(net, validation.x),
        validation.y,  # type: ignore[arg-type]
    )
    journal = Journal(out / "journal.jsonl")
    result = run_repair(study, settings, progress=not args.no_progress, journal=journal)
    written: dict[str, str] = {}
    changes = []
    selected = result.selected
    if selected is None or selected.network is None:
        warn("no repair raised the repair-set accuracy: nothing written but the report")
    else:
        repaired = make_implementation(selected.network, args.format, implementation.qnet.options)  # type: ignore[union-attr]
        paths = files.write_repaired(
            selected.network, repaired, args.quantized or args.network, out, quantized_net
        )
        written["model"] = str(paths.model)
        written["c"] = str(paths.c_file)
        if properties:
            changes = reverify(
                quantized_net,
                selected.network,
                implementation.qnet.options,
                properties,
                verify_options,
                not args.no_progress,  # type: ignore[union-attr,arg-type]
            )
    for line in [*report.summary_lines(result), *result.notes]:
        print(line)
    print(report.aligned(report.HEADER, report.table_rows(result)))
    if selected is not None:
        print(f"written: the {selected.metric} repair ({', '.join(f'{k} {v}' for k, v in written.items())})")
    for line in report.verdict_lines(changes) if changes else []:
        print(line)
    report.write_report(result, out, changes, written)
    print(
        f"report: {out / 'report.md'}, {out / 'repair.png'}, {out / 'repair.json'} ({result.time_s + study.prepare_s:.1f} s)"
    )
    return 0
