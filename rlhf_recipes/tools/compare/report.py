"""The three comparisons the CLI offers, from run folders to figure, table and JSON.

- compare_with_reference: runs against the book's published run of an algorithm.
- compare_local_runs: several local runs in one figure and one table ("compare all methods").
- compare_with_nano_runs (`--reference nano`): a nano run laid over this project's recorded nano run of the same
  algorithm. The book's published runs train Qwen3-1.7B on GPUs; a `--profile nano` run (docs/nano.md) is the same
  recipe in miniature on a CPU, so its natural reference is ours: reference_runs/nano/<algorithm>/ (recorded by
  `rlhf-recipes nano-book --seeds N`: one folder per training seed, <algorithm>/seed-<s>/; a folder recorded with
  one seed holds the run itself), shipped without weights, labelled as this project's runs, and compared as local
  runs, offline: the figure draws the seeds as one grey curve, their mean, in their min-max band, every curve
  smoothed alike (a rolling mean over 5% of its points; the periodic eval/* as logged), so the seeds' spread is in
  view beside your run; the table keeps each seed's numbers. eval/* rows and panels (the periodic evaluation on
  the first eval_problems problems) say so apart from the held-out rows (evaluate's, on its 200).
All write into `out_dir`: compare.png, compare.txt (table + notes), compare.json (numbers).
"""

from __future__ import annotations

import fnmatch
import math
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rlhf_recipes.paths import REFERENCE_RUNS_DIR
from rlhf_recipes.registry import FAMILIES, canonical_name
from rlhf_recipes.run_folder import has_metrics
from rlhf_recipes.tools.compare.family_logs import compare_metrics
from rlhf_recipes.tools.compare.load import (
    NANO_PROFILE, CompareError, LocalRun, _config_value, load_reference_csvs, load_runs, run_algorithm, run_profile,
)
from rlhf_recipes.tools.compare.references import (
    SPECS, AlignedMetric, AlignedReference, ReferenceSpec, align_reference, cached_or_fetched, expand_metric_patterns,
    lookup, resolve_run_metric,
)
from rlhf_recipes.tools.compare.verdict import (
    BAND_SIGMAS, WINDOW_FRACTION, Comparison, compare_to_reference, final_mean,
)
from rlhf_recipes.tools.document import number, plain_table, pyplot, save_figure, write_result

FIGURE_NAME = "compare.png"
TABLE_NAME = "compare.txt"
SUMMARY_NAME = "compare.json"
NANO_RUNS_DIR = REFERENCE_RUNS_DIR / "nano"
LABEL_PREFIX = "project nano run: "


@dataclass
class CompareReport:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    local_means: dict[tuple[str, str], float] = field(default_factory=dict)
    figure: Path = Path(FIGURE_NAME)  # where _write put the three files
    table_file: Path = Path(TABLE_NAME)
    summary_file: Path = Path(SUMMARY_NAME)


# --- finding the reference ----------------------------------------------------------------


def _reference_spec(runs: list[LocalRun], reference: str | None) -> ReferenceSpec:
    name = reference or runs[0].algorithm
    if name is None:
        raise CompareError(f"Cannot tell which algorithm {runs[0].path} trained (no 'algorithm' in its "
                           "final_results.json or config.yaml). Pass --reference ALGORITHM.")
    spec = lookup(name)
    if spec is None:
        raise CompareError(f"The book has no algorithm named {name!r}. Known: {', '.join(sorted(SPECS))}.")
    return spec


def _check_families(runs: list[LocalRun], spec: ReferenceSpec, notes: list[str]) -> None:
    for run in runs:
        run_spec = lookup(run.algorithm) if run.algorithm else None
        if run_spec is None:
            notes.append(f"{run.label}: algorithm {run.algorithm!r} unknown; compared as {spec.family}.")
        elif run_spec.family != spec.family:
            raise CompareError(f"{run.label} is a {run_spec.family} run ({run.algorithm}) but the reference "
                               f"{spec.algorithm} is {spec.family}: their metrics do not correspond. Pick a "
                               "reference of the same family with --reference.")


# --- comparing ----------------------------------------------------------------------------


def _compare_metric(name: str, am: AlignedMetric, runs: list[LocalRun], fraction: float,
                    notes: list[str]) -> tuple[list[Comparison], Panel]:
    # One legend entry for the reference across panels; each panel's title names the book key.
    ref_line = Line("book's run", am.steps, am.values, reference=True)
    scaled = f", {am.spec.note}" if am.spec.note else ""
    panel = Panel(title=f"{name}  [book: {am.book}{scaled}]", lines=[ref_line])
    comparisons = []
    for run in runs:
        column, note = resolve_run_metric(list(run.history.columns), am.spec)
        if note:
            notes.append(f"{run.label}: {note}")
        if column is None:
            continue
        steps, values = run.series(column)
        c = compare_to_reference(name, run.label, (steps, values), (am.steps, am.values), fraction)
        comparisons.append(c)
        panel.lines.append(Line(run.label, steps, values))
        if c.window is not None and c.within is not None:
            panel.bands.append((*c.window, c.reference, c.band))
    return comparisons, panel


def compare_with_reference(run_dirs: list[Path], reference: str | None = None, reference_csvs: list[Path] | None = None,
                           reference_run: str | None = None, out_dir: Path | None = None,
                           metrics: list[str] | None = None, offline: bool = False, fraction: float = WINDOW_FRACTION,
                           cache_dir: Path = REFERENCE_RUNS_DIR) -> CompareReport:
    runs = load_runs(run_dirs)
    spec = _reference_spec(runs, reference)
    notes: list[str] = [f"{run.path} is a --profile nano run (a 0.7M model on a CPU): the book's run is Qwen3-1.7B "
                        f"on GPUs; `--reference nano` lays it over this project's recorded nano run"
                        for run in runs if run.profile == NANO_PROFILE]
    _check_families(runs, spec, notes)
    history = (load_reference_csvs(reference_csvs, reference_run) if reference_csvs
               else cached_or_fetched(spec, str(run_dirs[0]), offline, cache_dir))
    aligned = align_reference(history, spec)
    notes[:0] = [
        *([spec.run_setup] if spec.run_setup else []),  # first: the numbers below compare unlike setups
        f"reference: {history.source}",
        f"x-axis: {aligned.x_mapping}",
        (f"yours/reference: means over the last {fraction:.0%} of the steps both runs cover; "
         f"band = {BAND_SIGMAS:g} x the reference's step-to-step noise there"),
    ]
    notes.extend(aligned.notes)
    for row in heldout_rows(runs):  # the book's runs publish no held-out numbers: ours are listed as notes
        notes.append(f"held-out {row[0]}: " + ", ".join(f"{r.label} {v}" for r, v in zip(runs, row[1:])))

    comparisons: list[Comparison] = []
    panels: list[Panel] = []
    for name, am in aligned.metrics.items():
        if metrics is None or any(fnmatch.fnmatch(n, p) for p in metrics for n in (name, am.book)):
            found, panel = _compare_metric(name, am, runs, fraction, notes)
            comparisons += found
            panels += [panel] if found else []
    if not comparisons:
        raise CompareError(_nothing_in_common(runs, aligned, metrics))

    title = f"{', '.join(r.label for r in runs)} vs the book's {spec.algorithm}"
    if spec.run_id:
        title += f" ({spec.wandb_path}{', an older setup' if spec.run_setup else ''})"
    several = len(runs) > 1
    headers = ["metric", "book name", *(["run"] if several else []), "yours", "reference", "diff", "band (±)",
               "verdict"]
    rows = [[c.metric, aligned.metrics[c.metric].book, *([c.run] if several else []), number(c.yours),
             number(c.reference), number(c.diff, "+.4g"), number(c.band), c.verdict] for c in comparisons]
    summary = {"mode": "reference",
               "reference": {"algorithm": spec.algorithm, "wandb_path": spec.wandb_path, "source": history.source,
                             "x_mapping": aligned.x_mapping, "setup": spec.run_setup or None},
               "comparisons": [asdict(c) for c in comparisons]}
    return _write(CompareReport(title, headers, rows, notes, comparisons=comparisons), runs, out_dir, summary,
                  fraction, panels)


def _nothing_in_common(runs: list[LocalRun], aligned: AlignedReference, metrics: list[str] | None) -> str:
    ours = sorted({c for r in runs for c in r.history.columns})
    return ("No metric to compare. The reference provides (in our names): "
            f"{', '.join(aligned.metrics) or 'nothing'}; your run(s) log: {', '.join(ours)}"
            + (f"; --metrics asked for: {', '.join(metrics)}" if metrics else "")
            + ". If a reward function is named differently, fix REWARD_FUNCTION_NAMES in "
            "rlhf_recipes/book_logs.py.")


def _local_patterns(runs: list[LocalRun]) -> list[str]:
    # The families of the runs' known algorithms; where no run names one, every family's key metrics.
    families = list(dict.fromkeys(spec.family for run in runs if (spec := lookup(run.algorithm or "")))) or FAMILIES
    # Held-out evaluation during training (eval_every) logs eval/<metric>: shown wherever a run has it.
    return [p for family in families for p in compare_metrics(family)] + ["eval/*"]


def heldout_rows(runs: list[LocalRun]) -> list[list[str]]:
    """One row per held-out metric of each run's eval/<name>.json: the value and its 95% interval per run."""
    rows = []
    keys = dict.fromkeys((name, m) for run in runs for name, res in run.heldout.items() for m in res["metrics"])
    for name, metric in keys:
        cells = []
        for run in runs:
            result = run.heldout.get(name) or {}
            value = (result.get("metrics") or {}).get(metric)
            bound = (result.get("intervals") or {}).get(metric) or {}
            cell = number(value) if isinstance(value, (int, float)) else "-"
            if isinstance(bound.get("low"), (int, float)) and isinstance(bound.get("high"), (int, float)):
                cell += f" [{number(bound['low'])}, {number(bound['high'])}]"
            cells.append(cell)
        counts = sorted({n for run in runs if (n := ((run.heldout.get(name) or {}).get("data") or {}).get("problems"))})
        rows.append([f"{name}: {metric}" + (f" ({'/'.join(map(str, counts))} problems)" if counts else ""), *cells])
    return rows


def periodic_label(metric: str, runs: list[LocalRun]) -> str:
    """eval/<metric> is the periodic evaluation during training (eval_every, on the first eval_problems held-out
    problems), not the held-out evaluation after it: its row and panel say so, with the problem count."""
    if not metric.startswith("eval/"):
        return metric
    counts = sorted({n for run in runs if (n := _config_value(run.path, "eval_problems"))}, key=int)
    return f"{metric} (periodic, {'/'.join(counts) or '?'} problems)"


def compare_local_runs(run_dirs: list[Path], out_dir: Path | None = None, metrics: list[str] | None = None,
                       fraction: float = WINDOW_FRACTION, labels: list[str | None] | None = None,
                       notes: list[str] | None = None, seeds: tuple[int, str, str] | None = None) -> CompareReport:
    """`seeds` (count, legend label, name in the title): the last `count` runs are seeds of one reference, drawn as
    one grey curve (their mean) in their min-max band, every curve of the figure smoothed alike (the table keeps
    each seed's numbers)."""
    runs = load_runs(run_dirs, labels)
    columns: list[str] = []
    for run in runs:
        columns.extend(c for c in run.history.columns if c not in columns)
    selected = expand_metric_patterns(metrics or _local_patterns(runs), columns)
    if not selected:
        raise CompareError(f"None of the metrics {', '.join(metrics or _local_patterns(runs))} is logged by "
                           f"these runs; they log: {', '.join(columns)}. Choose with --metrics.")

    panels, means = [], {}
    own, group = (runs[:-seeds[0]], runs[-seeds[0]:]) if seeds else (runs, [])
    labelled = {metric: periodic_label(metric, runs) for metric in selected}  # each reads every run's config.yaml
    for metric in selected:
        panel = Panel(title=labelled[metric], lines=[])
        for run in runs:
            steps, values = run.series(metric)
            if len(steps):
                means[(metric, run.label)] = final_mean(steps, values, fraction)[0]
                if run in own:
                    panel.lines.append(Line(run.label, steps, values))
        if group:
            panel.lines = [*seed_band(seeds[1], [r.series(metric) for r in group]), *panel.lines]
            window = smoothing_window(max((len(line.steps) for line in panel.lines), default=0))
            for line in panel.lines:
                line.smooth(window)
            panel.title += f"  [smoothed: {window} points]" if window > 1 else ""
        panels.append(panel)

    labels = [r.label for r in runs]
    title = " vs ".join([r.label for r in own] + ([seeds[2]] if seeds else []))
    rows = [[labelled[m], *(number(means.get((m, r), float("nan"))) for r in labels)] for m in selected]
    notes = [*(notes or []), f"table: each run's mean over the last {fraction:.0%} of its own logged steps"]
    if any(r.heldout for r in runs):
        notes.append("rows `<name>: <metric>`: the run's held-out evaluation named <name> (rlhf-recipes evaluate's "
                     "--name, else its split; in RUN_DIR/eval/) with its 95% interval")
    summary = {"mode": "local", "final_means": {m: {r: means.get((m, r)) for r in labels} for m in selected}}
    return _write(CompareReport(title, ["metric", *labels], rows + heldout_rows(runs), notes,
                                local_means=means), runs, out_dir, summary, fraction, panels)


# --- --reference nano: this project's recorded nano runs -----------------------------------------


def recorded_runs(folder: Path) -> list[Path]:
    """The recorded runs of one algorithm's folder: the folder itself (one seed) or its seed-<s> folders."""
    if has_metrics(folder):
        return [folder]
    seeds = [p for p in folder.glob("seed-*") if p.name[5:].isdigit() and has_metrics(p)]
    return sorted(seeds, key=lambda p: int(p.name[5:]))  # seed-2 before seed-10


def nano_reference_dirs(run_dirs: list[Path], root: Path = NANO_RUNS_DIR) -> list[Path]:
    """The recorded nano runs (every seed) of each run's algorithm (each once), or a one-line error naming what is
    missing."""
    found: list[Path] = []
    for run_dir in run_dirs:
        algorithm = run_algorithm(Path(run_dir))
        if algorithm is None:
            raise CompareError(f"{run_dir}: no algorithm in its final_results.json or config.yaml, so no recorded "
                               f"nano run to compare with; pass the reference folder itself: "
                               f"rlhf-recipes compare {run_dir} {root}/<algorithm>")
        references = recorded_runs(root / canonical_name(algorithm))
        if not references:
            recorded = sorted(p.name for p in root.iterdir() if recorded_runs(p)) if root.is_dir() else []
            raise CompareError(f"--reference nano: no recorded nano run of `{algorithm}` under {root} (recorded: "
                               f"{', '.join(recorded) or 'none'}); record one with `rlhf-recipes nano-book "
                               f"--algorithms {algorithm} --out DIR` and copy the run folder there")
        found += [r for r in references if r not in found]
    return found


def compare_with_nano_runs(run_dirs: list[Path], out_dir: Path | None = None, metrics: list[str] | None = None,
                           fraction: float = WINDOW_FRACTION, root: Path = NANO_RUNS_DIR) -> CompareReport:
    """The runs and the recorded nano run of each one's algorithm in one figure and table, offline."""
    references = nano_reference_dirs(run_dirs, root)
    notes = [(f"{LABEL_PREFIX}{', '.join(str(r) for r in references)}: this project's recorded run(s) on the "
              f"nano profile (a 2-core CPU; one per training seed), not the book's (reference_runs/nano/README.md)")]
    notes += [f"{run_dir} is not a --profile nano run (config.yaml profile: {profile}): its model and data differ "
              f"from the reference's, so the curves are not like for like"
              for run_dir in run_dirs if (profile := run_profile(run_dir)) != NANO_PROFILE]
    labels = [None] * len(run_dirs) + [LABEL_PREFIX + r.relative_to(root).as_posix() for r in references]
    algorithms = ", ".join(dict.fromkeys(r.relative_to(root).parts[0] for r in references))
    name = f"project nano runs: {algorithms}, {len(references)} seed(s)"
    band = f"{name}: their mean (line) and min-max (band), smoothed as your run"
    notes.append(f"figure: {band}; each panel's title gives the rolling mean's width in logged points (none for "
                 "the periodic eval/*, which has few); the table keeps each seed's own numbers")
    return compare_local_runs([*run_dirs, *references], out_dir=out_dir, metrics=metrics, fraction=fraction,
                              labels=labels, notes=notes, seeds=(len(references), band, name))


# --- the figure: one panel per metric, runs in colour, the book's reference in grey ------------------------

REFERENCE_COLOR = "0.35"
MAX_COLUMNS = 3
FEW_POINTS = 30  # below this many points, draw markers so short runs stay visible


SMOOTH_FRACTION = 0.05  # the seeds' figure: a centred rolling mean over 5% of a curve's logged points...
SMOOTH_FROM = 60  # ...on curves of at least this many points (the periodic eval/*, ~8 points, is drawn as logged)


@dataclass
class Line:
    label: str
    steps: np.ndarray
    values: np.ndarray
    reference: bool = False
    low: np.ndarray | None = None  # a band drawn around the line (the seeds' min and max), same steps
    high: np.ndarray | None = None
    raw: np.ndarray | None = None  # the values before smoothing, drawn faint beneath

    def smooth(self, window: int) -> None:
        """A centred rolling mean over `window` points, of the line and its band; the raw values kept."""
        if window <= 1:
            return
        self.raw = self.values
        self.values, self.low, self.high = (rolling_mean(v, window) if v is not None else None
                                            for v in (self.values, self.low, self.high))


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    import pandas as pd

    return pd.Series(values).rolling(window, center=True, min_periods=1).mean().to_numpy()


def smoothing_window(points: int) -> int:
    return max(1, round(points * SMOOTH_FRACTION)) if points >= SMOOTH_FROM else 1


def seed_band(label: str, series: list[tuple[np.ndarray, np.ndarray]]) -> list[Line]:
    """The seeds' curves as one: their mean and min-max at the steps every seed logged (none when one lacks the
    metric)."""
    if not series or any(len(steps) == 0 for steps, _ in series):
        return []
    common = series[0][0]
    for steps, _ in series[1:]:
        common = np.intersect1d(common, steps)
    stacked = np.stack([values[np.isin(steps, common)] for steps, values in series])
    return [Line(label, common, stacked.mean(axis=0), reference=True, low=stacked.min(axis=0),
                 high=stacked.max(axis=0))]


@dataclass
class Panel:
    title: str
    lines: list[Line]
    # The reference's noise band over each comparison window: (start, end, center, half-width).
    bands: list[tuple[float, float, float, float]] = field(default_factory=list)


def _colors(panels: list[Panel], cycle: list[str]) -> dict[str, str]:
    """One colour per run across all panels, so a run missing from one panel keeps its colour."""
    colors: dict[str, str] = {}
    for line in (line for panel in panels for line in panel.lines):
        if line.label not in colors:
            runs = sum(1 for c in colors.values() if c != REFERENCE_COLOR)
            colors[line.label] = REFERENCE_COLOR if line.reference else cycle[runs % len(cycle)]
    return colors


def _draw_panel(ax, panel: Panel, colors: dict[str, str]) -> None:
    from matplotlib.ticker import MaxNLocator

    for line in panel.lines:
        style = {"lw": 0.9, "alpha": 0.7, "zorder": 1} if line.reference else {"lw": 1.5, "zorder": 2}
        marker = "o" if len(line.steps) < FEW_POINTS else None
        if line.low is not None:
            ax.fill_between(line.steps, line.low, line.high, color=colors[line.label], alpha=0.2, lw=0, zorder=0)
            style = {"lw": 1.2, "alpha": 0.9, "zorder": 1}
        if line.raw is not None and line.low is None:  # a run's own noise, faint under its smoothed curve
            ax.plot(line.steps, line.raw, color=colors[line.label], lw=0.6, alpha=0.25, zorder=1)
        ax.plot(line.steps, line.values, color=colors[line.label], marker=marker, ms=3, label=line.label, **style)
    # Several runs compared over the same window share one band: draw it once.
    for start, end, center, half in dict.fromkeys(panel.bands):
        ax.fill_between([start, end], center - half, center + half, color=REFERENCE_COLOR,
                        alpha=0.15, lw=0, zorder=0)
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.grid(alpha=0.3)


def draw(panels: list[Panel], path: Path, title: str) -> Path:
    if not panels:
        raise ValueError("nothing to plot")
    plt = pyplot()  # here, not at import: `compare --help` and a refused comparison never load matplotlib
    from matplotlib.lines import Line2D

    ncols = min(MAX_COLUMNS, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    height = 3.6 * nrows + 0.9  # + room for the title and the legend
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, height), squeeze=False)
    colors = _colors(panels, plt.rcParams["axes.prop_cycle"].by_key()["color"])
    for ax, panel in zip(axes.flat, panels):
        _draw_panel(ax, panel, colors)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    # ~13 characters per inch at this font size: wrap rather than clip a long title.
    wrapped = textwrap.fill(title, width=int(13 * 5.0 * ncols), break_on_hyphens=False)
    fig.suptitle(wrapped, y=1 - 0.1 / height, fontsize=11)
    reference = {line.label for panel in panels for line in panel.lines if line.reference}
    from matplotlib.patches import Patch

    banded = {line.label for panel in panels for line in panel.lines if line.low is not None}
    handles = [(Patch(facecolor=c, alpha=0.35, edgecolor=c, label=label) if label in banded else
                Line2D([], [], color=c, lw=0.9 if label in reference else 1.5, label=label))
               for label, c in colors.items()]
    fig.legend(handles=handles, loc="upper center", ncol=min(5, len(handles)),
               bbox_to_anchor=(0.5, 1 - 0.45 / height), frameon=False)
    fig.set_layout_engine("tight", rect=(0, 0, 1, 1 - 0.75 / height))  # room above for the title and legend
    return save_figure(fig, path)


# --- writing ------------------------------------------------------------------------------


def _write(report: CompareReport, runs: list[LocalRun], out_dir: Path | None, summary: dict, fraction: float,
           panels: list[Panel]) -> CompareReport:
    """compare.json (the numbers), compare.txt (the table and its notes) and compare.png into `out_dir` (default:
    <first run>/compare/)."""
    out = Path(out_dir) if out_dir else runs[0].path / "compare"
    report.figure, report.table_file, report.summary_file = out / FIGURE_NAME, out / TABLE_NAME, out / SUMMARY_NAME
    heldout = {r.label: {name: {k: res.get(k) for k in ("metrics", "intervals", "baseline", "difference")}
                         for name, res in r.heldout.items()} for r in runs if r.heldout}
    summary = {**summary, "heldout": heldout,
               "runs": [{"label": r.label, "path": str(r.path), "algorithm": r.algorithm} for r in runs],
               "window_fraction": fraction, "band_sigmas": BAND_SIGMAS, "notes": report.notes,
               "figure": str(report.figure)}
    text = plain_table(report.headers, report.rows, report.title)
    if report.notes:
        text += "\n\nNotes:\n" + "\n".join(f"- {n}" for n in report.notes)
    write_result(summary, report.summary_file, text=text, text_path=report.table_file,
                 draw=lambda path: draw(panels, path, report.title), figure_path=report.figure)
    return report
