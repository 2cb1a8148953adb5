"""The files of a `qverify diff` run: diis.npz (every kept DII with both outputs and its distortion
vector), diis.png (a grid: seed, DII, both labels and top scores), sr_dir.png (SR and DiR per method
and per distortion), report.md and diff.json; proof mode adds regions.npz with the replayed
disagreements."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from qverify.assurance.diff.records import DiffStudy, Dii, MethodRun, RegionVerdict
from qverify.assurance.impact.tables import aligned, markdown
from qverify.errors import InputError

METHOD_HEADER = ("method", "seeds", "queries", "#DII", "DiR", "SR", "first DII s", "first DII queries",
                 "diversity", "label pairs", "VR", "wall s")  # fmt: skip
REGION_HEADER = ("status", "regions", "median s", "max s", "ended by")
GRID_ROWS = 12
HARNESSES = "harnesses"  # proof mode's folder: a harness and its journalled verdict per region
# what a run writes into its folder (`qverify diff --overwrite` removes these first, and only these)
OUTPUTS = (
    "diis.npz",
    "regions.npz",
    "diis.png",
    "sr_dir.png",
    "report.md",
    "diff.json",
    "search.jsonl",
    HARNESSES,
)


def _optional(value: float | None, style: str) -> str:
    return "-" if value is None else format(value, style)


def method_rows(runs: Sequence[MethodRun]) -> list[tuple[str, ...]]:
    return [
        (s.method, str(s.seeds), f"{s.queries:,}", f"{s.dii:,}", f"{s.dir:.4f}", f"{s.sr:.2f}",
         _optional(s.first_s, ".3f"), _optional(s.first_queries, ".0f"), _optional(s.diversity, ".3f"),
         str(s.label_pairs), f"{s.vr:.2f}", f"{s.wall_s:.1f}")
        for s in (run.summary for run in runs)
    ]  # fmt: skip


def region_rows(regions: Sequence[RegionVerdict]) -> list[tuple[str, ...]]:
    """Per status: how many regions, median and maximum time, and which step of proof mode ended them."""
    rows = []
    for status in ("SAFE", "UNSAFE", "UNKNOWN", "ERROR"):
        chosen = [r for r in regions if r.status == status]
        if chosen:
            times = [r.seconds for r in chosen]
            steps = Counter(r.method or "-" for r in chosen)
            by = ", ".join(f"{step} {count}" for step, count in steps.most_common())
            rows.append((status, str(len(chosen)), f"{np.median(times):.2f}", f"{max(times):.2f}", by))
    return rows


def decided_share(regions: Sequence[RegionVerdict]) -> float:
    return sum(r.status in ("SAFE", "UNSAFE") for r in regions) / len(regions) if regions else 0.0


def summary_text(study: DiffStudy) -> str:
    """The tables `qverify diff` prints."""
    parts = []
    if study.runs:
        parts.append(aligned(METHOD_HEADER, method_rows(study.runs)))
    if study.regions:
        parts.append(aligned(REGION_HEADER, region_rows(study.regions)))
    return "\n".join(parts)


def _kept(study: DiffStudy) -> list[tuple[str, Dii]]:
    return [
        (run.summary.method, dii) for run in study.runs for outcome in run.outcomes for dii in outcome.kept
    ]


def write_npz(study: DiffStudy, path: Path) -> Path:
    kept = _kept(study)
    width = max((len(d.params) for _, d in kept if d.params is not None), default=0)
    params = np.full((len(kept), width), np.nan)
    for row, (_, dii) in enumerate(kept):
        if dii.params is not None:
            params[row, : len(dii.params)] = dii.params
    n_in = study.seeds.shape[1]
    n_out = len(kept[0][1].reference) if kept else 0
    np.savez_compressed(
        path,
        x=np.array([d.x for _, d in kept]).reshape(len(kept), n_in),
        x_raw=study.to_raw(np.array([d.x for _, d in kept]).reshape(len(kept), n_in)),
        seed_index=np.array([d.seed_index for _, d in kept], dtype=np.int64),
        query=np.array([d.query for _, d in kept], dtype=np.int64),
        method=np.array([m for m, _ in kept], dtype=str),
        reference=np.array([d.reference for _, d in kept]).reshape(len(kept), n_out),
        candidate=np.array([d.candidate for _, d in kept]).reshape(len(kept), n_out),
        params=params,
        seeds=study.seeds,
        seed_labels=study.seed_labels,
    )
    return path


def write_regions_npz(study: DiffStudy, path: Path) -> Path:
    unsafe = [r for r in study.regions if r.x is not None]
    np.savez_compressed(
        path,
        x=np.array([r.x for r in unsafe]).reshape(len(unsafe), study.seeds.shape[1]),
        x_raw=study.to_raw(np.array([r.x for r in unsafe]).reshape(len(unsafe), study.seeds.shape[1])),
        region=np.array([r.index for r in unsafe], dtype=np.int64),
        seed_index=np.array([r.seed_index for r in unsafe], dtype=np.int64),
        reference=np.array([r.reference for r in unsafe]),
        candidate=np.array([r.candidate for r in unsafe]),
        status=np.array([r.status for r in study.regions], dtype=str),
    )
    return path


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(figure, plt) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def _image(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    image = x.reshape(shape)
    if image.ndim == 3:
        image = np.moveaxis(image, 0, -1) if image.shape[0] == 3 else image[0]
    return image


def grid_png(
    study: DiffStudy, examples: Sequence[tuple[str, int, np.ndarray, np.ndarray, np.ndarray]]
) -> bytes:
    """Rows of (seed, disagreement-inducing input) with both labels and top scores; for inputs without
    an image shape, both as bar charts of their values."""
    plt = _figure()
    per_row = 2 if len(examples) > 3 else 1  # (seed, DII) pairs side by side
    rows = max(1, -(-len(examples) // per_row))
    figure, axes = plt.subplots(rows, 2 * per_row, figsize=(3.1 * 2 * per_row, 2.1 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    lo, hi = study.domain
    for number, (method, seed_index, x, reference, candidate) in enumerate(examples):
        row, first = divmod(number, per_row)
        seed = study.seeds[seed_index]
        scores = (f"{method}: ref {int(np.argmax(reference))} ({np.max(reference):.3g}), "
                  f"cand {int(np.argmax(candidate))} ({np.max(candidate):.3g})")  # fmt: skip
        pictures = ((seed, f"seed {seed_index}: both say {int(study.seed_labels[seed_index])}"), (x, scores))
        for column, (values, title) in enumerate(pictures):
            ax = axes[row][2 * first + column]
            ax.axis("on")
            if study.image_shape is not None:
                ax.imshow(_image(values, study.image_shape), cmap="gray", vmin=lo, vmax=hi)
                ax.set_xticks([]), ax.set_yticks([])
            else:
                ax.bar(range(len(values)), values, color="tab:blue" if column == 0 else "tab:red")
                ax.set_ylim(lo, hi)
            ax.set_title(title, fontsize=7.5)
    if not examples:
        axes[0][0].set_title("no disagreement found", fontsize=9)
    figure.tight_layout()
    return _png(figure, plt)


def sr_dir_png(study: DiffStudy) -> bytes:
    """SR and DiR per method (and per distortion family when searched alone), side by side."""
    plt = _figure()
    names = [run.summary.method for run in study.runs]
    figure, axes = plt.subplots(1, 2, figsize=(max(7.0, 0.55 * len(names) + 3), 4.2))
    colours = ["tab:gray" if run.family else "tab:blue" for run in study.runs]
    for ax, metric, label in (
        (axes[0], "sr", "success rate (SR)"),
        (axes[1], "dir", "divergence rate (DiR)"),
    ):
        ax.bar(range(len(names)), [getattr(run.summary, metric) for run in study.runs], color=colours)
        ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylim(0, 1.02)
    figure.suptitle(f"{study.pair}: {study.criterion}", fontsize=9)
    figure.tight_layout()
    return _png(figure, plt)


def grid_examples(study: DiffStudy) -> list[tuple[str, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Up to GRID_ROWS examples: the first kept DII of each (method, seed), methods in turn; then the
    replayed disagreements of proof mode."""
    found = []
    for run in study.runs:
        if run.family is not None:
            continue
        for outcome in run.outcomes:
            if outcome.kept:
                dii = outcome.kept[0]
                found.append((run.summary.method, dii.seed_index, dii.x, dii.reference, dii.candidate))
                break
    for run in study.runs:  # more of each method's seeds, round-robin, up to the limit
        if run.family is None:
            found += [(run.summary.method, o.kept[0].seed_index, o.kept[0].x, o.kept[0].reference,
                       o.kept[0].candidate) for o in run.outcomes[1:] if o.kept][:2]  # fmt: skip
    found += [
        ("proof", r.seed_index, r.x, r.reference, r.candidate) for r in study.regions if r.x is not None
    ]
    unique, seen = [], set()
    for example in found:
        key = (example[0], example[1])
        if key not in seen:
            seen.add(key)
            unique.append(example)
    return unique[:GRID_ROWS]


def render_markdown(study: DiffStudy, files: dict[str, str]) -> str:
    lines = [f"# qverify diff: {study.pair}", "",
             f"- criterion: {study.criterion}",
             f"- seeds: {len(study.seeds)}; input domain [{study.domain[0]:g}, {study.domain[1]:g}]"
             + (f", images {'x'.join(map(str, study.image_shape))}" if study.image_shape else ""),
             f"- settings: {', '.join(f'{k}={v}' for k, v in study.settings.items())}", ""]  # fmt: skip
    lines += [f"- {note}" for note in study.notes]
    if study.runs:
        lines += ["", "## Search mode", ""]
        lines += markdown(METHOD_HEADER, method_rows(study.runs))
        lines += ["", ("#DII: distinct disagreement-inducing inputs; DiR: mean over seeds of DIIs / generated "
                  "inputs; SR: share of seeds with at least one DII; first DII: median over successful seeds; "
                  "diversity: mean pairwise RMS distance of a seed's kept DIIs / input range; VR: share of "
                  "generated inputs with PSNR at least the threshold (invalid inputs never count as DIIs)."), ""]  # fmt: skip
        if study.settings.get("first_dii"):
            lines += [("Each seed's search stopped at its first DII (--first-dii, DiffChaser's protocol): at most "
                       "one DII per seed, its queries and seconds are the cost of that first DII (of the whole "
                       "budget on a seed without one); #DII and DiR do not compare methods here."), ""]  # fmt: skip
        if "sr_dir" in files:
            lines += [f"![SR and DiR per method]({files['sr_dir']})", ""]
    if study.regions:
        lines += ["", "## Proof mode", ""]
        lines += markdown(REGION_HEADER, region_rows(study.regions))
        lines += [
            "",
            f"decided (SAFE or UNSAFE): {decided_share(study.regions):.0%} of {len(study.regions)} regions",
            "",
        ]
        lines += markdown(("region", "seed", "status", "s", "reason"),
                          [(r.region, str(r.seed_index), r.status, f"{r.seconds:.2f}", r.reason or "")
                           for r in study.regions])  # fmt: skip
    if "grid" in files:
        lines += ["", "## Disagreements", "", f"![seed and DII per row]({files['grid']})", ""]
    lines += ["", "Files: " + ", ".join(files.values()) + ", report.md, diff.json", ""]
    return "\n".join(lines)


def write_report(study: DiffStudy, out: Path) -> list[Path]:
    """Every file of the run into `out`; returns their paths."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cannot write to {out}: {error.strerror}") from None
    written: list[Path] = []
    files: dict[str, str] = {}
    if study.runs:
        written.append(write_npz(study, out / "diis.npz"))
        files["diis"] = "diis.npz"
        (out / "sr_dir.png").write_bytes(sr_dir_png(study))
        files["sr_dir"] = "sr_dir.png"
    if study.regions:
        written.append(write_regions_npz(study, out / "regions.npz"))
        files["regions"] = "regions.npz"
    examples = grid_examples(study)
    if examples or study.runs:
        (out / "diis.png").write_bytes(grid_png(study, examples))
        files["grid"] = "diis.png"
    written += [out / name for key, name in files.items() if key in ("sr_dir", "grid")]
    (out / "report.md").write_text(render_markdown(study, files))
    (out / "diff.json").write_text(json.dumps(study.to_json(), indent=2) + "\n")
    return [*written, out / "report.md", out / "diff.json"]
