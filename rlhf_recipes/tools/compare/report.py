"""The two comparisons the CLI offers, from run folders to figure, table and JSON.

- compare_with_reference: runs against the book's published run of an algorithm.
- compare_local_runs: several local runs in one figure and one table ("compare all methods").
Both write into `out_dir`: compare.png, compare.txt (table + notes), compare.json (numbers).
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlhf_recipes.tools.compare import plot, wandb_source
from rlhf_recipes.tools.compare.align import (
    AlignedReference, align_reference, expand_metric_patterns, resolve_run_metric,
)
from rlhf_recipes.tools.compare.errors import CompareError
from rlhf_recipes.tools.compare.load import NANO_PROFILE, LocalRun, ReferenceHistory, load_reference_csvs, load_runs
from rlhf_recipes.registry import FAMILIES, family_named
from rlhf_recipes.tools.compare.references import SPECS, ReferenceSpec, lookup, published_algorithms
from rlhf_recipes.tools.compare.table import fmt, local_table, reference_table
from rlhf_recipes.tools.compare.verdict import (
    BAND_SIGMAS, WINDOW_FRACTION, Comparison, compare_to_reference, final_mean,
)
from rlhf_recipes.tools.lab.document import plain_table, write_result

FIGURE_NAME = "compare.png"
TABLE_NAME = "compare.txt"
SUMMARY_NAME = "compare.json"


@dataclass
class CompareReport:
    title: str
    headers: list[str]
    rows: list[list[str]]
    figure: Path
    table_file: Path
    summary_file: Path
    notes: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    local_means: dict[tuple[str, str], float] = field(default_factory=dict)


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


def _cached_or_fetched(spec: ReferenceSpec, run_arg: str, offline: bool, cache_dir: Path) -> ReferenceHistory:
    if spec.run_id is None:
        raise CompareError(f"The book publishes no wandb run for {spec.algorithm} (book.md lists runs for "
                           f"{', '.join(published_algorithms())}). To compare with a run of the book's code "
                           f"that you made, export its history as CSV and pass --reference-csv PATH "
                           f"--reference {spec.algorithm}.")
    path = wandb_source.cache_path(spec, cache_dir)
    if path.exists():
        history = load_reference_csvs([path])
        history.source = f"{path} (cached from wandb {spec.wandb_path})"
        return history
    # Every name a chart may carry: the book's policy-gradient runs before 2026-05-03 log older names.
    book_metrics = [mm.book for mm in spec.metrics]
    help_text = wandb_source.export_instructions(spec, run_arg, book_metrics)
    if offline:
        raise CompareError(f"{path} is not cached and --offline forbids fetching it.\n{help_text}")
    ok, reason = wandb_source.network_available()
    if not ok:
        raise CompareError(f"No reference data for {spec.algorithm}: {path} is not cached, and the wandb "
                           f"API is not reachable from here ({reason}).\n{help_text}")
    try:
        wandb_source.fetch_and_cache(spec, cache_dir)
    except CompareError:
        raise
    except Exception as exc:  # auth, HTTP, missing run: report it with the fallback steps
        raise CompareError(f"Fetching wandb run {spec.wandb_path} failed: {exc.__class__.__name__}: {exc}\n"
                           f"{help_text}") from exc
    history = load_reference_csvs([path])
    history.source = f"{path} (fetched now from wandb {spec.wandb_path})"
    return history


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


def _wanted(patterns: list[str] | None, *names: str) -> bool:
    return patterns is None or any(fnmatch.fnmatch(n, p) for p in patterns for n in names)


def _compare_metric(metric_name: str, aligned: AlignedReference, runs: list[LocalRun], fraction: float,
                    notes: list[str]) -> tuple[list[Comparison], plot.Panel | None]:
    am = aligned.metrics[metric_name]
    # One legend entry for the reference across panels; each panel's title names the book key.
    ref_line = plot.Line("book's run", am.steps, am.values, reference=True)
    scaled = f", {am.spec.note}" if am.spec.note else ""
    panel = plot.Panel(title=f"{am.ours}  [book: {am.book}{scaled}]", lines=[ref_line])
    comparisons = []
    for run in runs:
        column, note = resolve_run_metric(list(run.history.columns), am.spec)
        if note:
            notes.append(f"{run.label}: {note}")
        if column is None:
            continue
        steps, values = run.series(column)
        c = compare_to_reference(am.ours, run.label, (steps, values), (am.steps, am.values), fraction)
        comparisons.append(c)
        panel.lines.append(plot.Line(run.label, steps, values))
        if c.window is not None and c.within is not None:
            panel.bands.append(plot.Band(c.window[0], c.window[1], c.reference, c.band))
    return comparisons, (panel if comparisons else None)


def compare_with_reference(run_dirs: list[Path], reference: str | None = None, reference_csvs: list[Path] | None = None,
                           reference_run: str | None = None, out_dir: Path | None = None,
                           metrics: list[str] | None = None, offline: bool = False, fraction: float = WINDOW_FRACTION,
                           cache_dir: Path = wandb_source.REFERENCE_DIR) -> CompareReport:
    runs = load_runs(run_dirs)
    spec = _reference_spec(runs, reference)
    notes: list[str] = [f"{run.path} is a --profile nano run (a 0.7M model on a CPU): the book's run is Qwen3-1.7B "
                        f"on GPUs; `--reference nano` lays it over this project's recorded nano run"
                        for run in runs if run.profile == NANO_PROFILE]
    _check_families(runs, spec, notes)
    if reference_csvs:
        history = load_reference_csvs(reference_csvs, reference_run)
    else:
        history = _cached_or_fetched(spec, str(run_dirs[0]), offline, cache_dir)
    aligned = align_reference(history, spec)
    notes[:0] = [
        *([spec.run_setup] if spec.run_setup else []),  # first: the numbers below compare unlike setups
        f"reference: {history.source}",
        f"x-axis: {aligned.x_mapping}",
        f"yours/reference: means over the last {fraction:.0%} of the steps both runs cover; "
        f"band = {BAND_SIGMAS:g} x the reference's step-to-step noise there",
    ]
    notes.extend(aligned.notes)
    for row in heldout_rows(runs):  # the book's runs publish no held-out numbers: ours are listed as notes
        notes.append(f"held-out {row[0]}: " + ", ".join(f"{r.label} {v}" for r, v in zip(runs, row[1:])))

    comparisons: list[Comparison] = []
    panels: list[plot.Panel] = []
    for name, am in aligned.metrics.items():
        if not _wanted(metrics, name, am.book):
            continue
        found, panel = _compare_metric(name, aligned, runs, fraction, notes)
        comparisons.extend(found)
        if panel:
            panels.append(panel)
    if not comparisons:
        raise CompareError(_nothing_in_common(runs, aligned, metrics))

    out = Path(out_dir) if out_dir else runs[0].path / "compare"
    title = f"{', '.join(r.label for r in runs)} vs the book's {spec.algorithm}"
    if spec.run_id:
        title += f" ({spec.wandb_path}{', an older setup' if spec.run_setup else ''})"
    book_names = {name: am.book for name, am in aligned.metrics.items()}
    headers, rows = reference_table(comparisons, book_names, several_runs=len(runs) > 1)
    report = CompareReport(title, headers, rows, out / FIGURE_NAME, out / TABLE_NAME, out / SUMMARY_NAME, notes,
                           comparisons)
    summary = {"mode": "reference",
               "reference": {"algorithm": spec.algorithm, "wandb_path": spec.wandb_path, "source": history.source,
                             "x_mapping": aligned.x_mapping, "setup": spec.run_setup or None},
               "comparisons": [asdict(c) for c in comparisons], "heldout": heldout_summary(runs)}
    _write_outputs(report, runs, summary, fraction, panels)
    return report


def _nothing_in_common(runs: list[LocalRun], aligned: AlignedReference, metrics: list[str] | None) -> str:
    ours = sorted({c for r in runs for c in r.history.columns})
    return ("No metric to compare. The reference provides (in our names): "
            f"{', '.join(aligned.metrics) or 'nothing'}; your run(s) log: {', '.join(ours)}"
            + (f"; --metrics asked for: {', '.join(metrics)}" if metrics else "")
            + ". If a reward function is named differently, fix REWARD_FUNCTION_NAMES in "
            "rlhf_recipes/book_logs.py.")


def _local_patterns(runs: list[LocalRun]) -> list[str]:
    families = []
    for run in runs:
        spec = lookup(run.algorithm) if run.algorithm else None
        if spec and spec.family not in families:
            families.append(spec.family)
    if not families:  # no run says what it is: offer every family's key metrics
        families = list(FAMILIES)
    # Held-out evaluation during training (eval_every) logs eval/<metric>: shown wherever a run has it.
    return [p for family in families for p in family_named(family).compare_metrics] + ["eval/*"]


def heldout_rows(runs: list[LocalRun]) -> list[list[str]]:
    """One row per held-out metric of each run's eval/<name>.json: the value and its 95% interval per run."""
    keys: list[tuple[str, str]] = []
    for run in runs:
        for name, result in run.heldout.items():
            keys.extend((name, m) for m in result["metrics"] if (name, m) not in keys)
    rows = []
    for name, metric in keys:
        cells = []
        for run in runs:
            result = run.heldout.get(name) or {}
            value = (result.get("metrics") or {}).get(metric)
            bound = (result.get("intervals") or {}).get(metric) or {}
            cell = fmt(value) if isinstance(value, (int, float)) else "-"
            if isinstance(bound.get("low"), (int, float)) and isinstance(bound.get("high"), (int, float)):
                cell += f" [{fmt(bound['low'])}, {fmt(bound['high'])}]"
            cells.append(cell)
        rows.append([f"{name}: {metric}", *cells])
    return rows


def heldout_summary(runs: list[LocalRun]) -> dict[str, Any]:
    return {r.label: {name: {"metrics": res.get("metrics"), "intervals": res.get("intervals"),
                             "baseline": res.get("baseline"), "difference": res.get("difference")}
                      for name, res in r.heldout.items()} for r in runs if r.heldout}


def compare_local_runs(run_dirs: list[Path], out_dir: Path | None = None, metrics: list[str] | None = None,
                       fraction: float = WINDOW_FRACTION, labels: list[str | None] | None = None,
                       notes: list[str] | None = None) -> CompareReport:
    runs = load_runs(run_dirs, labels)
    columns: list[str] = []
    for run in runs:
        columns.extend(c for c in run.history.columns if c not in columns)
    selected = expand_metric_patterns(metrics or _local_patterns(runs), columns)
    if not selected:
        raise CompareError(f"None of the metrics {', '.join(metrics or _local_patterns(runs))} is logged by "
                           f"these runs; they log: {', '.join(columns)}. Choose with --metrics.")

    panels, means = [], {}
    for metric in selected:
        panel = plot.Panel(title=metric, lines=[])
        for run in runs:
            steps, values = run.series(metric)
            if len(steps):
                panel.lines.append(plot.Line(run.label, steps, values))
                means[(metric, run.label)] = final_mean(steps, values, fraction)[0]
        panels.append(panel)

    out = Path(out_dir) if out_dir else runs[0].path / "compare"
    labels = [r.label for r in runs]
    title = " vs ".join(labels)
    headers, rows = local_table(selected, labels, means)
    rows += heldout_rows(runs)
    report = CompareReport(
        title, headers, rows, out / FIGURE_NAME, out / TABLE_NAME, out / SUMMARY_NAME,
        notes=[*(notes or []), f"table: each run's mean over the last {fraction:.0%} of its own logged steps"]
        + (["rows `<name>: <metric>`: the run's held-out evaluation named <name> (rlhf-recipes evaluate's --name, "
            "else its split; in RUN_DIR/eval/) with its 95% interval"] if any(r.heldout for r in runs) else []),
        local_means=means,
    )
    summary = {"mode": "local", "final_means": {m: {r: means.get((m, r)) for r in labels} for m in selected},
               "heldout": heldout_summary(runs)}
    _write_outputs(report, runs, summary, fraction, panels)
    return report


# --- writing ------------------------------------------------------------------------------


def _write_outputs(report: CompareReport, runs: list[LocalRun], summary: dict, fraction: float,
                   panels: list[plot.Panel]) -> None:
    summary = {**summary, "runs": [{"label": r.label, "path": str(r.path), "algorithm": r.algorithm} for r in runs],
               "window_fraction": fraction, "band_sigmas": BAND_SIGMAS, "notes": report.notes,
               "figure": str(report.figure)}
    text = plain_table(report.headers, report.rows, report.title)
    if report.notes:
        text += "\n\nNotes:\n" + "\n".join(f"- {n}" for n in report.notes)
    write_result(summary, report.summary_file, text=text, text_path=report.table_file,
                 draw=lambda path: plot.draw(panels, path, report.title), figure_path=report.figure)
