"""The book's logs and how they map onto ours: the vocabulary the registry's `book_metrics` are written in.

Transcribed from shared/reference/book.md (the facts read from the book's own code,
github.com/natolambert/rlhf-book, folder `code/`). Each family's metric map is built here from the
per-algorithm numbers its registry entry states (accumulation steps, beta, whether the margins are
beta-scaled); rlhf_recipes/tools/compare applies them. When the book or our trainers rename a
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
}


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
    """Policy gradients: the rollout rows' reward averages, then the update rows' loss and grad_norm."""
    names = REWARD_FUNCTION_NAMES
    # `avg_reward` is the older key of the same total (the book's code before avg_total).
    return (
        MetricMap("reward", ("avg_total", "avg_reward"), row="rollout"),
        MetricMap(
            f"rewards/{names['correctness']}/mean",
            ("avg_correctness",),
            row="rollout",
            ours_glob="rewards/*correct*/mean",
        ),
        MetricMap(
            f"rewards/{names['format']}/mean",
            ("avg_format",),
            row="rollout",
            ours_glob="rewards/*format*/mean",
        ),
        MetricMap(
            f"rewards/{names['penalty']}/mean",
            ("avg_penalty",),
            row="rollout",
            ours_glob="rewards/*penalt*/mean",
        ),
        MetricMap("loss", ("loss",), row="update"),
        MetricMap("grad_norm", ("grad_norm",), row="update"),
    )


def da_metrics(accumulation_steps: int, beta: float, margins_times_beta: bool = False) -> tuple[MetricMap, ...]:
    """Direct alignment. `margins_times_beta`: our trainer logs rewards/margins as beta x the book's (SimPO)."""
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


def rm_metrics() -> tuple[MetricMap, ...]:
    """Reward models."""
    # The book logs train/* and val/* (book.md: train/accuracy, reward_margin -> margin,
    # val/* -> eval/*); TRL's Trainer writes eval rows as eval_<name> in metrics.jsonl.
    # Unlisted train/* and val/* keys are mapped by rule in tools/compare/align.py (ORM/PRM extras).
    return (
        MetricMap("accuracy", ("train/accuracy",)),
        MetricMap("margin", ("train/reward_margin", "reward_margin")),
        MetricMap("loss", ("train/loss",)),
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
