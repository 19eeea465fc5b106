"""The book's published reference runs, and how their logs map onto ours.

Everything here is transcribed from shared/reference/book.md (the facts read from the book's
own code, github.com/natolambert/rlhf-book, folder `code/`). Nothing is measured or invented:
the run ids, metric names, the rollout structure that defines the book's x-axis, and the two
stated rescalings. When the book or our trainers rename something, this file is the only
place to fix.

Direction convention: every map goes book -> ours. A reference value is multiplied by
`scale` to land in the units of the metric our TRL-based trainers log.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

WANDB_PROJECT = "rlhf-book/core"

Family = Literal["policy_gradient", "direct_alignment", "reward_model", "sft"]
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


@dataclass(frozen=True)
class ReferenceSpec:
    """One algorithm of the book: its published run (if any) and what shapes its logs."""

    algorithm: str
    family: Family
    run_id: str | None = None
    prompts_per_rollout: int | None = None  # policy gradients only
    rollouts_per_prompt: int | None = None
    accumulation_steps: int | None = None  # direct alignment only (book's grad_norm rescale)
    beta: float | None = None  # direct alignment only (SimPO margin rescale)
    metrics: tuple[MetricMap, ...] = field(default=())

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


def _pg_metrics() -> tuple[MetricMap, ...]:
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


def _da_metrics(algorithm: str, accumulation_steps: int, beta: float) -> tuple[MetricMap, ...]:
    # SimPO: TRL's rewards/margins are beta * (avg_c - avg_r); the book logs avg_c - avg_r.
    margin_scale = beta if algorithm == "simpo" else 1.0
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


def _rm_metrics() -> tuple[MetricMap, ...]:
    # The book logs train/* and val/* (book.md: train/accuracy, reward_margin -> margin,
    # val/* -> eval/*); TRL's Trainer writes eval rows as eval_<name> in metrics.jsonl.
    # Unlisted train/* and val/* keys are mapped by rule in align.py (ORM/PRM extras).
    return (
        MetricMap("accuracy", ("train/accuracy",)),
        MetricMap("margin", ("train/reward_margin", "reward_margin")),
        MetricMap("loss", ("train/loss",)),
        MetricMap("eval_accuracy", ("val/accuracy",)),
        MetricMap("eval_loss", ("val/loss",)),
        MetricMap("eval_margin", ("val/reward_margin",)),
        MetricMap("learning_rate", ("train/lr",)),
    )


def _sft_metrics() -> tuple[MetricMap, ...]:
    return (
        MetricMap("loss", ("loss",)),
        MetricMap("grad_norm", ("grad_norm",)),
        MetricMap("learning_rate", ("learning_rate",)),
    )


def _pg(algorithm: str, run_id: str, prompts: int, rollouts: int) -> ReferenceSpec:
    return ReferenceSpec(
        algorithm,
        "policy_gradient",
        run_id,
        prompts_per_rollout=prompts,
        rollouts_per_prompt=rollouts,
        metrics=_pg_metrics(),
    )


def _da(algorithm: str, accumulation: int = 8, beta: float = 0.1) -> ReferenceSpec:
    # The book publishes no direct-alignment run: these specs serve --reference-csv exports
    # of runs a user made with the book's code.
    return ReferenceSpec(
        algorithm,
        "direct_alignment",
        None,
        accumulation_steps=accumulation,
        beta=beta,
        metrics=_da_metrics(algorithm, accumulation, beta),
    )


def _build_specs() -> dict[str, ReferenceSpec]:
    specs = [
        # Published runs, wandb project rlhf-book/core (book.md "Published reference runs").
        _pg("reinforce", "0uqbq4oz", 8, 1),
        _pg("rloo", "07xeasn8", 4, 8),
        _pg("ppo", "ku3r3g9j", 16, 1),
        _pg("grpo", "vjp7lgdi", 4, 8),
        _pg("drgrpo", "a1swuynq", 4, 8),
        _pg("gspo", "10sxytli", 4, 8),
        _pg("cispo", "6dg0m06n", 4, 8),
        _pg("sapo", "79608nwk", 4, 8),
        _pg("dapo", "db1pipip", 4, 8),
        _pg("maxrl", "fdowf1se", 4, 8),
        ReferenceSpec("preference_rm", "reward_model", "1g3y9bcc", metrics=_rm_metrics()),
        ReferenceSpec("orm", "reward_model", "3gkoqb7f", metrics=_rm_metrics()),
        ReferenceSpec("prm", "reward_model", "iv4d966d", metrics=_rm_metrics()),
        ReferenceSpec("sft", "sft", "nybj8sdx", metrics=_sft_metrics()),
        # Direct alignment: batch 8 x accumulation 8, beta 0.1 unless stated otherwise.
        _da("dpo"),
        _da("cdpo", accumulation=4),
        _da("dpo_norm", beta=2.0),
        _da("ipo"),
        _da("simpo", beta=2.0),
        _da("orpo"),
        _da("kto"),
        _da("apo_zero"),
        _da("apo_down"),
    ]
    return {spec.algorithm: spec for spec in specs}


SPECS: dict[str, ReferenceSpec] = _build_specs()

# Spellings of the same algorithm that recipes or users may use.
ALIASES: dict[str, str] = {
    "dr_grpo": "drgrpo",
    "reward": "preference_rm",
    "reward_model": "preference_rm",
    "rm": "preference_rm",
    "bradley_terry": "preference_rm",
    "bt_rm": "preference_rm",
    "dponorm": "dpo_norm",
    "sigmoid_norm": "dpo_norm",
}


def canonical_algorithm(name: str) -> str:
    key = name.strip().lower().replace("-", "_")
    return ALIASES.get(key, key)


def lookup(name: str) -> ReferenceSpec | None:
    return SPECS.get(canonical_algorithm(name))


def published_algorithms() -> list[str]:
    return [name for name, spec in SPECS.items() if spec.run_id]


# Metrics worth plotting when comparing local runs with each other (no reference): ours only,
# in display order. Runs that lack one simply do not draw it.
LOCAL_KEY_METRICS: dict[Family, tuple[str, ...]] = {
    "policy_gradient": (
        "reward",
        "rewards/*/mean",
        "completions/mean_length",
        "kl",
        "loss",
        "grad_norm",
    ),
    "direct_alignment": (
        "rewards/accuracies",
        "rewards/margins",
        "rewards/chosen",
        "rewards/rejected",
        "loss",
        "nll_loss",
        "kl",
        "grad_norm",
    ),
    "reward_model": ("accuracy", "margin", "loss", "eval_accuracy", "eval_loss"),
    "sft": ("loss", "mean_token_accuracy", "grad_norm"),
}
