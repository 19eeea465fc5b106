"""Put a reference history on our axes: our metric names, our units, our optimizer steps.

The x-axis is the subtle part. Our metrics.jsonl is indexed by TRL's global_step, which
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
import math
from dataclasses import dataclass, field
from functools import reduce

import numpy as np
import pandas as pd

from rlhf_recipes.book_logs import (
    BOOK_PG_OLD_NAMES_UNTIL, BOOK_PG_REWARD_NAMES, BOOK_RM_OLD_NAMES, book_pg_name_generation,
)
from rlhf_recipes.tools.compare.load import API_STEP_COLUMN, ReferenceHistory
from rlhf_recipes.tools.compare.references import MetricMap, ReferenceSpec, optimizer_steps_per_rollout


@dataclass(frozen=True)
class AlignedMetric:
    ours: str  # our metric name (as in references.py; a run may resolve it differently)
    book: str  # the book key the values came from
    steps: np.ndarray  # our optimizer steps
    values: np.ndarray  # in our units (scale applied)
    spec: MetricMap


@dataclass
class AlignedReference:
    metrics: dict[str, AlignedMetric]
    x_mapping: str  # how book steps became ours, for the report
    notes: list[str] = field(default_factory=list)


# --- the policy-gradient x-axis -----------------------------------------------------------


def book_step_to_optimizer_step(book_steps: np.ndarray, steps_per_rollout: int) -> np.ndarray:
    """The formula: rollout r's reward row -> r*k+1, its j-th update row -> r*k+j."""
    k = steps_per_rollout
    cycle = k + 1
    steps = np.asarray(book_steps, dtype=np.int64)
    rollout, position = np.divmod(steps, cycle)
    return rollout * k + np.maximum(position, 1)


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
    for name in mm.book:
        if name in frame.columns and frame[name].notna().any():
            return name
    return None


def _row_mask(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    if not columns:
        return np.zeros(len(frame), dtype=bool)
    return frame[columns].notna().any(axis=1).to_numpy()


def _pg_steps(history: ReferenceHistory, spec: ReferenceSpec, notes: list[str]) -> tuple[np.ndarray, str]:
    frame = history.frame
    update_cols = [c for mm in spec.metrics if mm.row == "update" and (c := _present(frame, mm))]
    rollout_cols = [c for mm in spec.metrics if mm.row == "rollout" and (c := _present(frame, mm))]
    is_update = _row_mask(frame, update_cols)
    is_rollout = _row_mask(frame, rollout_cols) & ~is_update
    if history.complete and is_update.any() and is_rollout.any():
        return count_optimizer_steps(is_update), "counted optimizer-step rows (complete history)"

    assert spec.prompts_per_rollout and spec.rollouts_per_prompt
    k = optimizer_steps_per_rollout(spec.prompts_per_rollout, spec.rollouts_per_prompt)
    book_steps = frame[API_STEP_COLUMN].to_numpy()
    cycle = infer_cycle(book_steps[is_rollout])
    if cycle is not None and cycle >= 2 and cycle != k + 1:
        notes.append(f"The reference's reward rows are {cycle} wandb steps apart, but book.md's "
                     f"{spec.prompts_per_rollout}x{spec.rollouts_per_prompt} rollouts imply {k + 1}; "
                     f"using {cycle - 1} optimizer steps per rollout, as the data says.")
        k = cycle - 1
    how = f"book step s -> (s // {k + 1}) * {k} + max(s % {k + 1}, 1)  ({k} optimizer steps per rollout)"
    return book_step_to_optimizer_step(book_steps, k), how


# --- names and units ----------------------------------------------------------------------


def _rule_based_maps(frame: pd.DataFrame, spec: ReferenceSpec) -> list[MetricMap]:
    """Where the book logs train/<x> and val/<x> (reward models): any other train/<x> is our <x>, val/<x> our
    eval_<x> (ORM/PRM extras)."""
    if not spec.facts.book_logs_prefixed:
        return []
    used = {name for mm in spec.metrics for name in mm.book}
    extra = []
    for col in frame.columns:
        if col in used:
            continue
        if col.startswith("train/"):
            extra.append(MetricMap(col.removeprefix("train/"), (col,)))
        elif col.startswith("val/"):
            extra.append(MetricMap("eval_" + col.removeprefix("val/"), (col,)))
    return extra


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


def _unprefixed_names_note(aligned: dict[str, "AlignedMetric"], spec: ReferenceSpec) -> list[str]:
    """Say so when a reward-model reference logged the book's old unprefixed names (book_logs.BOOK_RM_OLD_NAMES)."""
    if not spec.facts.book_logs_prefixed:
        return []
    old = [am.book for am in aligned.values() if am.book in BOOK_RM_OLD_NAMES]
    return [f"reference metric names: the book's unprefixed ones, from before its train/ and val/ names "
            f"({', '.join(old)})"] if old else []


def align_reference(history: ReferenceHistory, spec: ReferenceSpec) -> AlignedReference:
    notes: list[str] = []
    frame = history.frame
    if spec.facts.book_logs_by_rollout:
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
        metrics[mm.ours] = AlignedMetric(ours=mm.ours, book=book_name, steps=series.index.to_numpy(dtype=float),
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
        for name in fnmatch.filter(columns, pattern) if any(ch in pattern for ch in "*?[") else [pattern]:
            if name in columns and name not in found:
                found.append(name)
    return found
