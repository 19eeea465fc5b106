"""The book's logs and how they map onto ours: the vocabulary rlhf_recipes/book_reference.py is written in.

Transcribed from shared/reference/book.md (the facts read from the book's own code,
github.com/natolambert/rlhf-book, folder `code/`). Each family's metric map is built here from the
per-algorithm numbers book_reference.py states (accumulation steps, beta, whether the margins are
beta-scaled); `rlhf-recipes compare` applies them. When the book or our trainers rename a
metric, this file is the place to fix.

Direction convention: every map goes book -> ours. A reference value is multiplied by `scale`
to land in the units of the metric our TRL-based trainers log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WANDB_PROJECT = "rlhf-book/core"  # where the book's published runs live

# Which kind of wandb.log call a policy-gradient metric comes from in the book's loop: one
# "rollout" row of reward averages per rollout, then one "update" row per optimizer step.
RowKind = Literal["rollout", "update", "step"]

# The names our reward functions register under in rewards/ (TRL logs `rewards/<__name__>/mean`):
# rewards/reasoning_tasks.py and rewards/length.py. If a name changes there, change it here. A
# glob fallback (below) still finds e.g. `rewards/spell_correctness/mean` if only the name differs.
REWARD_FUNCTION_NAMES: dict[str, str] = {
    "correctness": "correctness_reward",
    "format": "format_reward",
    "penalty": "overlong_penalty_reward",  # DAPO's overlong penalty, the book's avg_penalty
    "binary": "binary_reward",  # correctness if the format is complete (MaxRL's advantage reward)
}

# The book's policy-gradient reward averages under both generations of its names: its PR #391
# (code/CHANGELOG.md, 2026-05-03) renamed them, and the published runs were logged before that, so
# they carry the OLD names (a later run may carry the new ones). Component -> (current, before
# 2026-05-03). The one table of these names: pg_metrics() and compare's note read it.
BOOK_PG_REWARD_NAMES: dict[str, tuple[str, str]] = {
    "total": ("avg_total", "avg_reward"),
    "correctness": ("avg_correctness", "avg_correctness_reward"),
    "format": ("avg_format", "avg_format_reward"),
    "penalty": ("avg_penalty", "avg_response_penalty"),
    "binary": ("avg_binary", "avg_binary_reward"),
}
BOOK_PG_OLD_NAMES_UNTIL = "2026-05-03"


def book_pg_name_generation(columns) -> str | None:
    """Which generation of the book's reward names a history logged: "current", "old", "both" or None."""
    columns = set(columns)
    current = any(new in columns for new, _ in BOOK_PG_REWARD_NAMES.values())
    old = any(old in columns for _, old in BOOK_PG_REWARD_NAMES.values())
    return {(True, True): "both", (True, False): "current", (False, True): "old"}.get((current, old))


@dataclass(frozen=True)
class MetricMap:
    """One metric as the book logs it and as our trainers log it."""

    ours: str  # key in our metrics.jsonl (TRL's name)
    book: tuple[str, ...]  # the book's wandb key(s); the first present in the reference wins
    row: RowKind = "step"
    scale: float = 1.0  # reference value * scale = value in our units
    ours_glob: str | None = None  # fallback when `ours` is absent from a run (reward fn names)
    note: str = ""


def pg_metrics() -> tuple[MetricMap, ...]:
    """Policy gradients: the rollout rows' reward averages, then the update rows' loss and grad_norm.
    Each reward map accepts both generations of the book's names (BOOK_PG_REWARD_NAMES), current first."""
    names = REWARD_FUNCTION_NAMES
    book = BOOK_PG_REWARD_NAMES
    components = [
        MetricMap(
            f"rewards/{names[key]}/mean",
            book[key],
            row="rollout",
            ours_glob=glob,
        )
        for key, glob in (("correctness", "rewards/*correct*/mean"), ("format", "rewards/*format*/mean"),
                          ("penalty", "rewards/*penalt*/mean"), ("binary", "rewards/*binary*/mean"))
    ]
    return (
        MetricMap("reward", book["total"], row="rollout"),
        *components,
        MetricMap("loss", ("loss",), row="update"),
        MetricMap("grad_norm", ("grad_norm",), row="update"),
    )


def da_metrics(accumulation_steps: int, beta: float, margins_times_beta: bool = False) -> tuple[MetricMap, ...]:
    """Direct alignment. `margins_times_beta`: our trainer logs rewards/margins as beta x the book's (SimPO).
    DPO-norm's rewards/* are beta x the AVERAGED log-ratios in both (BookDPOTrainer, as the book), so they align."""
    margin_scale = beta if margins_times_beta else 1.0
    return (
        MetricMap("rewards/accuracies", ("accuracy",)),
        MetricMap(
            "rewards/margins",
            ("margins",),
            scale=margin_scale,
            note=f"book x beta ({beta:g})" if margin_scale != 1.0 else "",
        ),
        MetricMap("rewards/chosen", ("chosen_rewards",)),
        MetricMap("rewards/rejected", ("rejected_rewards",)),
        MetricMap("loss", ("loss",)),
        # book.md: "The book logs grad_norm divided by the accumulation steps."
        MetricMap(
            "grad_norm",
            ("grad_norm",),
            scale=float(accumulation_steps),
            note=f"book x accumulation ({accumulation_steps})",
        ),
        MetricMap("nll_loss", ("sft_loss",)),  # ORPO's SFT term
        MetricMap("kl", ("KL", "kl")),  # KTO's reference point
        MetricMap("log_odds_chosen", ("log_odds_ratio",)),  # ORPO
        MetricMap("learning_rate", ("learning_rate",)),
    )


# The book's reward-model scripts logged unprefixed names (`loss`, `accuracy`, `step_accuracy`, `reward_margin`;
# with step=global_step and no validation) until they moved to train/* and val/*: the preference RM on 2026-07-13
# (its 7117073), the ORM and PRM on 2026-08-15 (3478ff4). The published runs 1g3y9bcc, 3gkoqb7f and iv4d966d come
# from the April 2026 code (e893096), so they carry the OLD names: rm_metrics() maps both, current first.
BOOK_RM_OLD_NAMES = ("loss", "accuracy", "step_accuracy", "reward_margin")
BOOK_RM_PREFIXED_SINCE = {"preference": "2026-07-13", "outcome": "2026-08-15", "process": "2026-08-15"}


def rm_metrics(kind: str) -> tuple[MetricMap, ...]:
    """Reward models; kind: preference | outcome | process."""
    # The book logs train/* and val/* (book.md: train/accuracy, reward_margin -> margin,
    # val/* -> eval/*); TRL's Trainer writes eval rows as eval_<name> in metrics.jsonl.
    # Unlisted train/* and val/* keys are mapped by rule where `rlhf-recipes compare` aligns them (ORM/PRM extras).
    if kind == "outcome":
        # The old ORM's `accuracy` was per labeled token (its train/accuracy since 2026-08-15: per rollout).
        accuracy = (MetricMap("accuracy", ("train/accuracy",)),
                    MetricMap("token_accuracy", ("accuracy",), note="the book's per-token accuracy (before "
                              f"{BOOK_RM_PREFIXED_SINCE['outcome']})"))
    else:
        accuracy = (MetricMap("accuracy", ("train/accuracy", "accuracy")),)
    steps = (MetricMap("step_accuracy", ("train/step_accuracy", "step_accuracy")),) if kind == "process" else ()
    return (
        *accuracy,
        *steps,
        MetricMap("margin", ("train/reward_margin", "reward_margin")),
        MetricMap("loss", ("train/loss", "loss")),
        MetricMap("eval_accuracy", ("val/accuracy",)),
        MetricMap("eval_loss", ("val/loss",)),
        MetricMap("eval_margin", ("val/reward_margin",)),
        MetricMap("learning_rate", ("train/lr",)),
    )


def sft_metrics() -> tuple[MetricMap, ...]:
    """Supervised fine-tuning (the book's SFT run, the starting point of its other runs)."""
    return (
        MetricMap("loss", ("loss",)),
        MetricMap("grad_norm", ("grad_norm",)),
        MetricMap("learning_rate", ("learning_rate",)),
    )


def rs_metrics() -> tuple[MetricMap, ...]:
    """Rejection sampling's SFT stage. The book's loop (rejection_sampling/train.py) logs one row of selection
    facts, then one row per optimizer step (`sft/loss`: the mean of the step's micro-batch losses;
    `sft/grad_norm`: before clipping), then test_accuracy; with no explicit step, so wandb's step k is
    optimizer step k, as ours. test_accuracy is compared by `rlhf-recipes results` (final_results.json)."""
    return (
        MetricMap("loss", ("sft/loss",)),
        MetricMap("grad_norm", ("sft/grad_norm",)),
    )
