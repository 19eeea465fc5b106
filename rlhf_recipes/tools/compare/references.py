"""The book's published runs as compare sees them (a ReferenceSpec per algorithm), how to get one, how to align it.

Every per-algorithm fact (run ids, the rollout or accumulation shape, the metric map with its scales, aliases) lives
in rlhf_recipes/book_reference.py and the book's metric vocabulary in rlhf_recipes/book_logs.py; this file only
shapes them for comparing. What a family's book logs look like and what to plot when runs are compared with each
other are compare's own facts (family_logs.py). Direction convention:
every map goes book -> ours; a reference value is multiplied by `scale` to land in our trainers' units.

A published run comes from the repo's cache, else from the wandb public API. The API is used only when a quick
connection test to the wandb host succeeds, so an offline machine (CI, a cluster node) gets an immediate, clear
message instead of a long hang. A fetched history is cached once as CSV under reference_runs/ in the API-history
layout, with a small JSON file beside it saying where and when it came from. Nothing else ever writes there: a
reference is real data or it is absent.

Aligning puts a reference history on our axes: our metric names, our units, our optimizer steps. The x-axis is the
subtle part. Our metrics.jsonl is indexed by TRL's global_step, which
counts optimizer steps. The book's direct-alignment, reward-model and SFT loops log with
`step=global_step` too, so their wandb step already is an optimizer step. The book's
policy-gradient loop logs without a step: each rollout makes one `wandb.log` of reward
averages, then one per optimizer step (loss, grad_norm), and every call advances wandb's
`_step`. With k optimizer steps per rollout the book's steps run

    rollout r:  reward row at r*(k+1),  update rows at r*(k+1)+1 ... r*(k+1)+k

and we place them at our optimizer steps: update row j of rollout r -> r*k + j; the reward
row -> r*k + 1, the first optimizer step trained on that rollout, which is also where TRL's
GRPOTrainer logs the rewards of a generation.

Two ways to get there, best first:
1. Count. If the history is complete (no wandb step missing) and holds both kinds of rows,
   each update row's optimizer step is simply how many update rows came before, plus one.
   Exact, whatever k is, and robust to extra log calls.
2. Formula above, with k from book.md's rollout structure, or, when the reward rows'
   spacing says otherwise (a UI export of one chart), with k + 1 = that spacing.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import socket
import time
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pandas as pd

from rlhf_recipes.book_logs import (
    BOOK_PG_OLD_NAMES_UNTIL, BOOK_PG_REWARD_NAMES, BOOK_RM_OLD_NAMES, WANDB_PROJECT, MetricMap, book_pg_name_generation,
)
from rlhf_recipes.book_reference import BookShape, book_reference
from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.paths import REFERENCE_RUNS_DIR, REPO_ROOT
from rlhf_recipes.registry import ALGORITHMS, canonical_name
from rlhf_recipes.tools.compare.family_logs import LOGS_BY_ROLLOUT, LOGS_PREFIXED
from rlhf_recipes.tools.compare.load import API_STEP_COLUMN, CompareError, ReferenceHistory, load_reference_csvs

PROBE_TIMEOUT_S = 3.0
API_TIMEOUT_S = 30
# Used only if wandb cannot tell us its default; WANDB_BASE_URL overrides both.
FALLBACK_BASE_URL = "https://api.wandb.ai"


@dataclass(frozen=True)
class ReferenceSpec:
    """One algorithm of the book: its published run (if any) and what shapes its logs."""

    algorithm: str
    family: str  # the registry's family (a module under rlhf_recipes.families)
    run_id: str | None
    shape: BookShape  # the book's batch shape: its policy-gradient x-axis
    metrics: tuple[MetricMap, ...]
    run_setup: str = ""  # "older setup: ..." when the book's run was made by older code with other settings

    @property
    def logs_by_rollout(self) -> bool:
        return self.family in LOGS_BY_ROLLOUT

    @property
    def logs_prefixed(self) -> bool:
        return self.family in LOGS_PREFIXED

    @property
    def wandb_path(self) -> str | None:
        return f"{WANDB_PROJECT}/{self.run_id}" if self.run_id else None

    @property
    def wandb_url(self) -> str | None:
        return f"https://wandb.ai/{WANDB_PROJECT}/runs/{self.run_id}" if self.run_id else None


def _spec(name: str, family: str) -> ReferenceSpec:
    """A registry entry as compare sees it: the first of its book runs."""
    book = book_reference(name)
    return ReferenceSpec(name, family, book.runs[0] if book.runs else None, book.shape, book.metrics, book.run_setup)


SPECS: dict[str, ReferenceSpec] = {entry.name: _spec(entry.name, entry.family) for entry in ALGORITHMS.values()}


def lookup(name: str) -> ReferenceSpec | None:
    return SPECS.get(canonical_name(name))


def published_algorithms() -> list[str]:
    return [name for name, spec in SPECS.items() if spec.run_id]


# --- getting a published run --------------------------------------------------------------


def cache_path(spec: ReferenceSpec, directory: Path = REFERENCE_RUNS_DIR) -> Path:
    return Path(directory) / f"{spec.algorithm}-{spec.run_id}.csv"


def _base_url() -> str:
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    try:
        from wandb.sdk.lib.urls import DEFAULT_BASE_URL

        return str(DEFAULT_BASE_URL)
    except Exception:  # noqa: BLE001  (older/newer wandb layouts: any failure means "use the fallback")
        return FALLBACK_BASE_URL


def network_available(timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Whether the wandb API host accepts a TCP connection; the reason when it does not."""
    url = urlsplit(_base_url())
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, ""
    except OSError as exc:
        return False, f"cannot reach {host}:{port} ({exc.__class__.__name__}: {exc})"


def _history_frame(rows: list[dict]) -> pd.DataFrame:
    """Scalar columns of scan_history rows; tables and media (dict values) are dropped."""
    scalar_rows = [{k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                   for row in rows]
    frame = pd.DataFrame.from_records(scalar_rows)
    if "_step" not in frame.columns:
        raise CompareError("The wandb API returned a history without _step; cannot align it.")
    front = [c for c in ("_step", "_runtime", "_timestamp") if c in frame.columns]
    rest = sorted(c for c in frame.columns if c not in front)
    return frame[front + rest].sort_values("_step").reset_index(drop=True)


def fetch_history(wandb_path: str, timeout: int = API_TIMEOUT_S) -> pd.DataFrame:
    """Every history row of a run (scan_history: unsampled, unlike history())."""
    import wandb  # deferred: importing wandb costs a second and is only needed here

    return _history_frame(list(wandb.Api(timeout=timeout).run(wandb_path).scan_history()))


def fetch_and_cache(spec: ReferenceSpec, directory: Path) -> Path:
    """Download the run's history once and store it; returns the cached CSV's path."""
    assert spec.wandb_path is not None
    frame = fetch_history(spec.wandb_path)
    path = cache_path(spec, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomic: an interrupted fetch must never leave a partial CSV that later passes for the reference.
    atomic_write_text(path, frame.to_csv(index=False))
    provenance = {"wandb_path": spec.wandb_path, "url": spec.wandb_url,
                  "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "method": "wandb.Api().run(path).scan_history()", "rows": len(frame)}
    path.with_suffix(".source.json").write_text(json.dumps(provenance, indent=2) + "\n")
    return path


def export_instructions(spec: ReferenceSpec, run_arg: str) -> str:
    """What to do when the reference is neither cached nor downloadable. Each chart is named by every one of its
    book names (a run logs one of them: the policy-gradient runs renamed theirs on 2026-05-03)."""
    book_metrics = [mm.book for mm in spec.metrics]
    csv_args = " ".join(f"{names[0].replace('/', '_')}.csv" for names in book_metrics[:2]) + " ..."
    charts = ", ".join(" or ".join(names) for names in book_metrics)
    cached = cache_path(spec).relative_to(REPO_ROOT)
    return "\n".join([f"To get the book's {spec.algorithm} run (wandb {spec.wandb_path}), do one of:",
                      "  1. On a machine that reaches wandb, run this same command once: it fetches the run",
                      f"     and caches it as {cached}. Copy that file into this checkout's",
                      "     reference_runs/ folder. (wandb.Api() may ask for an API key: `wandb login` with",
                      "     any free account reads public projects.)",
                      "  2. Or export the charts from the run's wandb page:", f"       {spec.wandb_url}",
                      f"     For each chart you want ({charts}):",
                      "     open the chart's '...' menu > Export / Download data > CSV, with the x-axis left",
                      "     on 'Step'. Then pass the files (several CSVs of one run are merged):",
                      f"       rlhf-recipes compare {run_arg} --reference {spec.algorithm} --reference-csv {csv_args}",
                      "     An API history saved with run.history().to_csv(...) works as well."])


def cached_or_fetched(spec: ReferenceSpec, run_arg: str, offline: bool, cache_dir: Path) -> ReferenceHistory:
    """The book's run of `spec` from the cache, else fetched now (and cached); else an error saying what to do."""
    if spec.run_id is None:
        raise CompareError(f"The book publishes no wandb run for {spec.algorithm} (book.md lists runs for "
                           f"{', '.join(published_algorithms())}). To compare with a run of the book's code "
                           f"that you made, export its history as CSV and pass --reference-csv PATH "
                           f"--reference {spec.algorithm}.")
    path = cache_path(spec, cache_dir)
    how = "cached from"
    if not path.exists():
        help_text = export_instructions(spec, run_arg)
        if offline:
            raise CompareError(f"{path} is not cached and --offline forbids fetching it.\n{help_text}")
        ok, reason = network_available()
        if not ok:
            raise CompareError(f"No reference data for {spec.algorithm}: {path} is not cached, and the wandb "
                               f"API is not reachable from here ({reason}).\n{help_text}")
        try:
            fetch_and_cache(spec, cache_dir)
        except CompareError:
            raise
        except Exception as exc:  # auth, HTTP, missing run: report it with the fallback steps
            raise CompareError(f"Fetching wandb run {spec.wandb_path} failed: {exc.__class__.__name__}: {exc}\n"
                               f"{help_text}") from exc
        how = "fetched now from"
    history = load_reference_csvs([path])
    history.source = f"{path} ({how} wandb {spec.wandb_path})"
    return history


# --- putting a reference on our axes ------------------------------------------------------


@dataclass(frozen=True)
class AlignedMetric:
    book: str  # the book key the values came from
    steps: np.ndarray  # our optimizer steps
    values: np.ndarray  # in our units (scale applied)
    spec: MetricMap  # spec.ours: our metric name (a run may resolve it differently)


@dataclass
class AlignedReference:
    metrics: dict[str, AlignedMetric]
    x_mapping: str  # how book steps became ours, for the report
    notes: list[str] = field(default_factory=list)


# --- the policy-gradient x-axis -----------------------------------------------------------
# The book's loop (book.md "Policy gradients: common behaviour"): one shuffled pass over each rollout buffer,
# micro-batch 2 (the last odd sample is dropped), optimizer step every 4 micro-batches or at the end of the pass.
BOOK_PG_MICRO_BATCH = 2
BOOK_PG_MICRO_BATCHES_PER_STEP = 4


def optimizer_steps_per_rollout(prompts: int, rollouts_per_prompt: int) -> int:
    """Optimizer steps the book takes on one rollout buffer: 4x8 -> 4, 8x1 -> 1, 16x1 -> 2."""
    micro_batches = (prompts * rollouts_per_prompt) // BOOK_PG_MICRO_BATCH
    return max(1, math.ceil(micro_batches / BOOK_PG_MICRO_BATCHES_PER_STEP))


def book_step_to_optimizer_step(book_steps: np.ndarray, steps_per_rollout: int) -> np.ndarray:
    """The formula: rollout r's reward row -> r*k+1, its j-th update row -> r*k+j."""
    rollout, position = np.divmod(np.asarray(book_steps, dtype=np.int64), steps_per_rollout + 1)
    return rollout * steps_per_rollout + np.maximum(position, 1)


def count_optimizer_steps(is_update: np.ndarray) -> np.ndarray:
    """Counting: update rows get 1, 2, 3, ...; any other row the step of the next update."""
    counted = np.cumsum(is_update.astype(np.int64))
    return np.where(is_update, counted, counted + 1)


def infer_cycle(rollout_steps: np.ndarray) -> int | None:
    """Spacing of the reward rows (k + 1), or None when there are too few to tell."""
    unique = np.unique(np.asarray(rollout_steps, dtype=np.int64))
    if len(unique) < 3:
        return None
    return int(reduce(math.gcd, np.diff(unique).tolist()))


def _present(frame: pd.DataFrame, mm: MetricMap) -> str | None:
    """The first of the book's names for this metric that the reference actually logged."""
    return next((name for name in mm.book if name in frame.columns and frame[name].notna().any()), None)


def _rows_of(frame: pd.DataFrame, spec: ReferenceSpec, kind: str) -> np.ndarray:
    """Rows holding any metric logged on `kind` rows (an empty selection: none)."""
    columns = [c for mm in spec.metrics if mm.row == kind and (c := _present(frame, mm))]
    return frame[columns].notna().any(axis=1).to_numpy(dtype=bool)


def _pg_steps(history: ReferenceHistory, spec: ReferenceSpec, notes: list[str]) -> tuple[np.ndarray, str]:
    frame = history.frame
    is_update = _rows_of(frame, spec, "update")
    is_rollout = _rows_of(frame, spec, "rollout") & ~is_update
    if history.complete and is_update.any() and is_rollout.any():
        return count_optimizer_steps(is_update), "counted optimizer-step rows (complete history)"

    prompts, rollouts = spec.shape.prompts_per_rollout, spec.shape.rollouts_per_prompt
    assert prompts and rollouts
    k = optimizer_steps_per_rollout(prompts, rollouts)
    book_steps = frame[API_STEP_COLUMN].to_numpy()
    cycle = infer_cycle(book_steps[is_rollout])
    if cycle is not None and cycle >= 2 and cycle != k + 1:
        notes.append(f"The reference's reward rows are {cycle} wandb steps apart, but book.md's "
                     f"{prompts}x{rollouts} rollouts imply {k + 1}; "
                     f"using {cycle - 1} optimizer steps per rollout, as the data says.")
        k = cycle - 1
    how = f"book step s -> (s // {k + 1}) * {k} + max(s % {k + 1}, 1)  ({k} optimizer steps per rollout)"
    return book_step_to_optimizer_step(book_steps, k), how


# --- names and units ----------------------------------------------------------------------


def _rule_based_maps(frame: pd.DataFrame, spec: ReferenceSpec) -> list[MetricMap]:
    """Where the book logs train/<x> and val/<x> (reward models): any other train/<x> is our <x>, val/<x> our
    eval_<x> (ORM/PRM extras)."""
    if not spec.logs_prefixed:
        return []
    used = {name for mm in spec.metrics for name in mm.book}
    return [MetricMap(ours + col.removeprefix(book), (col,)) for col in frame.columns if col not in used
            for book, ours in (("train/", ""), ("val/", "eval_")) if col.startswith(book)]


def _name_generation_note(frame: pd.DataFrame) -> list[str]:
    """Say which generation of the book's reward names the reference logged (book_logs.BOOK_PG_REWARD_NAMES)."""
    generation = book_pg_name_generation(frame.columns)
    if generation is None:
        return []
    used = [name for pair in BOOK_PG_REWARD_NAMES.values() for name in pair if name in frame.columns]
    said = {"old": f"the book's names from before {BOOK_PG_OLD_NAMES_UNTIL}",
            "current": f"the book's names since {BOOK_PG_OLD_NAMES_UNTIL}",
            "both": "both generations of the book's names"}[generation]
    return [f"reference reward names: {said} ({', '.join(used)})"]


def _unprefixed_names_note(aligned: dict[str, AlignedMetric], spec: ReferenceSpec) -> list[str]:
    """Say so when a reward-model reference logged the book's old unprefixed names (book_logs.BOOK_RM_OLD_NAMES)."""
    if not spec.logs_prefixed:
        return []
    old = [am.book for am in aligned.values() if am.book in BOOK_RM_OLD_NAMES]
    return [(f"reference metric names: the book's unprefixed ones, from before its train/ and val/ names "
             f"({', '.join(old)})")] if old else []


def align_reference(history: ReferenceHistory, spec: ReferenceSpec) -> AlignedReference:
    notes: list[str] = []
    frame = history.frame
    if spec.logs_by_rollout:
        our_steps, how = _pg_steps(history, spec, notes)
        notes.extend(_name_generation_note(frame))
    else:
        our_steps = frame[API_STEP_COLUMN].to_numpy(dtype=np.int64)
        how = "book step = optimizer step (the book logs with step=global_step)"

    metrics: dict[str, AlignedMetric] = {}
    for mm in (*spec.metrics, *_rule_based_maps(frame, spec)):
        book_name = _present(frame, mm)
        if book_name is None or mm.ours in metrics:
            continue
        values = frame[book_name].to_numpy(dtype=float)
        keep = ~np.isnan(values)
        # Several book rows can land on one optimizer step: average them.
        series = pd.Series(values[keep] * mm.scale, index=our_steps[keep]).groupby(level=0).mean()
        metrics[mm.ours] = AlignedMetric(book=book_name, steps=series.index.to_numpy(dtype=float),
                                         values=series.to_numpy(dtype=float), spec=mm)
    return AlignedReference(metrics=metrics, x_mapping=how, notes=notes + _unprefixed_names_note(metrics, spec))


def resolve_run_metric(columns: list[str], mm: MetricMap) -> tuple[str | None, str | None]:
    """Which column of a run holds this metric, and a note if that needed a guess."""
    if mm.ours in columns:
        return mm.ours, None
    if mm.ours_glob:
        matches = fnmatch.filter(columns, mm.ours_glob)
        if len(matches) == 1:
            return matches[0], f"{mm.book[0]}: used {matches[0]} (no {mm.ours} in the run)"
        if len(matches) > 1:
            return None, (f"{mm.book[0]}: several candidates ({', '.join(matches)}); set the name in "
                          "REWARD_FUNCTION_NAMES in rlhf_recipes/book_logs.py")
    return None, None


def expand_metric_patterns(patterns: list[str], columns: list[str]) -> list[str]:
    """Exact names and globs (e.g. rewards/*/mean) -> the matching columns, in order."""
    found: list[str] = []
    for pattern in patterns:
        found += [name for name in fnmatch.filter(columns, pattern) if name not in found]
    return found
