"""Read local runs (the recipe runner's output folders) and reference histories (CSV).

Two CSV layouts come from wandb, and both are read here into one shape: a frame with a
`_step` column (the wandb step) and one column per metric, NaN on rows that logged other
metrics.
- API history: `run.history()` / `run.scan_history()` rows, as a DataFrame written with
  `to_csv` (often with the pandas index as an unnamed first column): `_step`, `_runtime`,
  `_timestamp`, then metric keys.
- UI export (a chart's CSV download): `Step`, then for each run on the chart
  `<run name> - <metric>`, `<run name> - <metric>__MIN`, `<run name> - <metric>__MAX`
  (min/max of the points a bucket averages). One chart is one metric, so users export several.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rlhf_recipes.run_folder import METRICS_FILE, read_config, read_metrics, read_results

NANO_PROFILE = "nano"  # config.PROFILES: the profile with recorded reference runs of its own (`--reference nano`)
# Keys of a metrics.jsonl row that index it rather than measure anything.
BOOKKEEPING_KEYS = ("step", "epoch")

UI_STEP_COLUMN = "Step"
API_STEP_COLUMN = "_step"
UI_SEPARATOR = " - "
UI_BUCKET_SUFFIXES = ("__MIN", "__MAX")


class CompareError(Exception):
    """A problem the user can fix. The message says exactly what to do; the CLI prints it without a traceback."""


@dataclass
class LocalRun:
    """One output folder of recipes/run.py."""

    path: Path
    label: str
    algorithm: str | None
    history: pd.DataFrame  # index: trainer global_step; columns: metric names
    heldout: dict[str, dict[str, Any]] = field(default_factory=dict)  # eval/<name>.json of `rlhf-recipes evaluate`
    profile: str | None = None  # config.yaml's `profile` (tiny, nano), None for a real run

    def series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """Steps and values where `metric` was logged (rows that log other things dropped)."""
        if metric not in self.history.columns:
            return np.array([]), np.array([])
        col = self.history[metric].dropna()
        return col.index.to_numpy(dtype=float), col.to_numpy(dtype=float)


@dataclass
class ReferenceHistory:
    """A reference run's history in the book's names and wandb steps."""

    frame: pd.DataFrame  # `_step` plus one column per book metric
    source: str  # where it came from, for the report
    complete: bool  # every wandb step from first to last is present (nothing sampled away)


# --- local runs ---------------------------------------------------------------------------


def read_metrics_jsonl(path: Path) -> pd.DataFrame:
    """One row per trainer step; a step logged twice (train row + eval row) is merged. Read as the run folder's
    reader reads it (run_folder.read_metrics): a torn last row, a killed run's, is skipped."""
    try:
        rows = read_metrics(path)
    except ValueError as exc:
        raise CompareError(f"{path}: a row before the last is not valid JSON ({exc}).") from exc
    records: list[dict[str, float]] = []
    for row in rows:
        # Numbers only (a bool or a string is not a metric); an infinity is no point: NaN.
        values = {k: float(v) if math.isfinite(v) else math.nan for k, v in row.items()
                  if k not in BOOKKEEPING_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if "step" in row and values:
            records.append({"step": int(row["step"]), **values})
    if not records:
        raise CompareError(f"{path} has no metric rows: did the run log anything?")
    frame = pd.DataFrame.from_records(records)
    # mean() skips NaN, so a train row and an eval row at one step merge into one.
    return frame.groupby("step").mean().sort_index()


def _config_value(run_dir: Path, key: str) -> str | None:
    data = read_config(run_dir)
    return str(data[key]) if isinstance(data, dict) and data.get(key) else None


def run_algorithm(run_dir: Path) -> str | None:
    """The algorithm a run trained, from final_results.json, else config.yaml."""
    algorithm = (read_results(run_dir) or {}).get("algorithm")
    return str(algorithm) if algorithm else _config_value(run_dir, "algorithm")


def run_profile(run_dir: Path) -> str | None:
    """The embedded profile a run used (config.yaml's `profile`: tiny, nano), None for a real run."""
    return _config_value(run_dir, "profile")


def load_run(run_dir: Path, label: str | None = None) -> LocalRun:
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS_FILE
    if not metrics.exists():
        raise CompareError(f"{run_dir} is not a run folder: {METRICS_FILE} is missing there. Pass the "
                           f"--output_dir of `recipes/run.py` (the folder holding {METRICS_FILE}).")
    return LocalRun(path=run_dir, label=label or run_dir.name, algorithm=run_algorithm(run_dir),
                    history=read_metrics_jsonl(metrics), heldout=read_heldout(run_dir), profile=run_profile(run_dir))


def read_heldout(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The run's held-out evaluations (RUN_DIR/eval/<file>.json) by the name each result gives itself (`evaluate`'s
    --name, else its split), so that one evaluation lines up across runs whatever its file is called (nano-book
    writes its `heldout` evaluation to nano_book.json); by file name where two results of one run share a name.
    Unreadable files skipped."""
    results = {}
    for path in sorted((run_dir / "eval").glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
            results[path.stem] = data
    names = [str(data.get("name") or stem) for stem, data in results.items()]
    return {(name if names.count(name) == 1 else stem): data for (stem, data), name in zip(results.items(), names)}


def load_runs(run_dirs: list[Path], labels: list[str | None] | None = None) -> list[LocalRun]:
    """Load several runs, labelled as given, else by folder name (by path where two names clash)."""
    names = [Path(d).name for d in run_dirs]
    labels = [given or (str(d) if names.count(Path(d).name) > 1 else Path(d).name)
              for d, given in zip(run_dirs, labels or [None] * len(run_dirs), strict=True)]
    return [load_run(Path(d), label) for d, label in zip(run_dirs, labels, strict=True)]


# --- reference CSVs -----------------------------------------------------------------------


def _numeric_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """Coerce to float; drop columns with no number at all (tables, media, JSON blobs)."""
    frame = frame.apply(pd.to_numeric, errors="coerce")
    return frame.loc[:, frame.notna().any()]


def _ui_export(frame: pd.DataFrame, path: Path, run_name: str | None) -> pd.DataFrame:
    """One run's `<run name> - <metric>` columns of a chart export, under `_step` and the metric's name."""
    parsed: dict[str, tuple[str, str]] = {}  # column -> (run name, metric)
    for col in frame.columns:
        run, separator, metric = col.rpartition(UI_SEPARATOR)
        # Bucket min/max are not values; some exports carry each run's own _step: not a metric.
        if separator and not col.endswith(UI_BUCKET_SUFFIXES) and metric != API_STEP_COLUMN:
            parsed[col] = (run, metric)
    runs = sorted({run for run, _ in parsed.values()})
    if run_name is not None:
        parsed = {c: rm for c, rm in parsed.items() if rm[0] == run_name}
        if not parsed:
            raise CompareError(f"{path} has no run named {run_name!r}; it has: {', '.join(runs) or 'none'}.")
    elif len(runs) > 1:
        raise CompareError(f"{path} holds several runs ({', '.join(runs)}). Pick the reference with "
                           "--reference-run NAME, or export the chart with only the book's run visible.")
    if not parsed:
        raise CompareError(f"{path} has no '<run name> - <metric>' columns; is it a wandb chart export?")
    out = _numeric_columns(frame[[UI_STEP_COLUMN, *parsed]].rename(
        columns={UI_STEP_COLUMN: API_STEP_COLUMN, **{c: m for c, (_, m) in parsed.items()}}))
    # Steps where only the other runs of the chart have a point are not rows of this run.
    return out.dropna(subset=[c for c in out.columns if c != API_STEP_COLUMN], how="all")


def read_reference_csv(path: Path, run_name: str | None = None) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise CompareError(f"Reference CSV {path} does not exist.")
    frame = pd.read_csv(path)
    if API_STEP_COLUMN in frame.columns:
        # wandb's own columns (_runtime, ...) go, and the pandas index that `history().to_csv(...)` writes as an
        # unnamed first column.
        return _numeric_columns(frame[[c for c in frame.columns if c == API_STEP_COLUMN
                                       or not c.startswith(("_", "Unnamed:"))]])
    if UI_STEP_COLUMN in frame.columns:
        return _ui_export(frame, path, run_name)
    raise CompareError(f"{path} has neither a '{UI_STEP_COLUMN}' column (a wandb chart export with the "
                       f"default x-axis) nor '{API_STEP_COLUMN}' (an API history). Its columns: "
                       f"{', '.join(map(str, frame.columns[:8]))}. Re-export the chart with X axis = Step.")


def load_reference_csvs(paths: list[Path], run_name: str | None = None) -> ReferenceHistory:
    """Read one or more CSVs of the same run (e.g. one UI export per chart) into one history."""
    frames = [read_reference_csv(Path(p), run_name) for p in paths]
    merged = pd.concat(frames, ignore_index=True)
    merged = merged.dropna(subset=[API_STEP_COLUMN])
    # first() skips NaN per column, so charts exported separately merge row by row.
    merged = merged.groupby(API_STEP_COLUMN, as_index=False).first()
    merged = merged.sort_values(API_STEP_COLUMN).reset_index(drop=True)
    steps = np.unique(merged[API_STEP_COLUMN].to_numpy())
    return ReferenceHistory(frame=merged, source=", ".join(str(p) for p in paths),
                            complete=len(steps) > 1 and bool(np.all(np.diff(steps) == 1)))
