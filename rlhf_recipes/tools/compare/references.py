"""The book's published reference runs, as compare sees them: a ReferenceSpec per algorithm.

Every per-algorithm fact (run ids, the rollout or accumulation shape, beta, the metric map with
its scales, aliases) lives in the registry (rlhf_recipes/registry.py) and the book's metric
vocabulary in rlhf_recipes/book_logs.py; this file only shapes them for comparing, and keeps the
generic machinery: the book's policy-gradient loop structure (the x-axis). What a family's book
logs look like and what to plot when runs are compared with each other are facts of the family
object (`ReferenceSpec.facts`, rlhf_recipes/families/base.py).

Direction convention: every map goes book -> ours. A reference value is multiplied by
`scale` to land in the units of the metric our TRL-based trainers log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlhf_recipes.book_logs import WANDB_PROJECT, MetricMap
from rlhf_recipes.book_reference import book_reference
from rlhf_recipes.registry import ALGORITHMS, canonical_name, family_named

__all__ = ["MetricMap", "ReferenceSpec", "SPECS", "lookup", "published_algorithms", "optimizer_steps_per_rollout"]


@dataclass(frozen=True)
class ReferenceSpec:
    """One algorithm of the book: its published run (if any) and what shapes its logs."""

    algorithm: str
    family: str  # the registry's family (a module under rlhf_recipes.families)
    run_id: str | None = None
    prompts_per_rollout: int | None = None  # policy gradients only
    rollouts_per_prompt: int | None = None
    accumulation_steps: int | None = None  # direct alignment only (book's grad_norm rescale)
    beta: float | None = None  # direct alignment only (SimPO margin rescale)
    metrics: tuple[MetricMap, ...] = field(default=())
    run_setup: str = ""  # "older setup: ..." when the book's run was made by older code with other settings

    @property
    def facts(self) -> Any:
        """The family object (families/base.py): how the book logs this family, what to plot."""
        return family_named(self.family)

    @property
    def wandb_path(self) -> str | None:
        return f"{WANDB_PROJECT}/{self.run_id}" if self.run_id else None

    @property
    def wandb_url(self) -> str | None:
        return f"https://wandb.ai/{WANDB_PROJECT}/runs/{self.run_id}" if self.run_id else None


# --- The book's policy-gradient loop (book.md "Policy gradients: common behaviour") ---------
# One shuffled pass over each rollout buffer, micro-batch 2 (the last odd sample is dropped),
# optimizer step every 4 micro-batches or at the end of the pass.
BOOK_PG_MICRO_BATCH = 2
BOOK_PG_MICRO_BATCHES_PER_STEP = 4


def optimizer_steps_per_rollout(prompts: int, rollouts_per_prompt: int) -> int:
    """Optimizer steps the book takes on one rollout buffer: 4x8 -> 4, 8x1 -> 1, 16x1 -> 2."""
    micro_batches = (prompts * rollouts_per_prompt) // BOOK_PG_MICRO_BATCH
    return max(1, math.ceil(micro_batches / BOOK_PG_MICRO_BATCHES_PER_STEP))


def _spec(entry) -> ReferenceSpec:
    """A registry entry as compare sees it: the first of its book runs."""
    book = book_reference(entry.name)
    shape = book.shape
    return ReferenceSpec(entry.name, entry.family, book.runs[0] if book.runs else None, shape.prompts_per_rollout,
                         shape.rollouts_per_prompt, shape.accumulation_steps, shape.beta, book.metrics, book.run_setup)


SPECS: dict[str, ReferenceSpec] = {entry.name: _spec(entry) for entry in ALGORITHMS.values()}


def lookup(name: str) -> ReferenceSpec | None:
    return SPECS.get(canonical_name(name))


def published_algorithms() -> list[str]:
    return [name for name, spec in SPECS.items() if spec.run_id]
