"""Reward-model training configs (book chapter 5): which kind each trains (`rm_kind`) and its data options."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from transformers import TrainingArguments
from trl import RewardConfig

from custom_losses.reward_models.data import OVERLONG_ROLLOUTS
from custom_losses.schedules import BookLRScheduleArguments, BookWarmupSteps
from rewards.reward_model_encoding import DEFAULT_PROMPT_TEMPLATE, DEFAULT_STEP_SEPARATOR, STEP_SPLITS

TRUNCATION_MODES = ("keep_start", "keep_end")
SCORE_REDUCTIONS = ("mean", "last")


def _check_common(cfg) -> None:
    if cfg.max_length is not None and cfg.max_length < 1:
        raise ValueError(f"max_length must be a positive number of tokens or null, got {cfg.max_length}")
    if cfg.truncation_mode not in TRUNCATION_MODES:
        raise ValueError(f"truncation_mode must be one of {TRUNCATION_MODES}, got {cfg.truncation_mode!r}")


@dataclass
class PreferenceRMConfig(BookWarmupSteps, RewardConfig):
    """TRL's RewardConfig, truncating over-long sequences instead of dropping them (the book), with the book's
    warmup length W = int(ratio * T) under transformers' linear schedule (the book's train_preference_rm.py)."""

    rm_kind: ClassVar[str] = "preference"

    max_length: int | None = field(
        default=1024,
        metadata={"help": "Tokens per sequence (prompt + response, chat template applied). Longer sequences are "
                  "TRUNCATED (TRL's RewardTrainer would drop them); pairs identical after truncation are dropped "
                  "and counted."},
    )
    truncation_mode: str = field(
        default="keep_start",
        metadata={"help": "keep_start: cut the end (the book: its tokenizer's default right-side truncation); "
                  "keep_end: cut the beginning."},
    )

    def __post_init__(self):
        _check_common(self)
        super().__post_init__()


@dataclass
class OutcomeRMConfig(BookLRScheduleArguments, TrainingArguments):
    """Outcome reward model: one logit per token, BCE on completion tokens against correctness."""

    rm_kind: ClassVar[str] = "outcome"

    max_length: int | None = field(
        default=2048, metadata={"help": "Tokens per rollout (prompt + completion); what happens to longer training "
                                "and evaluation rollouts: `overlong_rollouts`."}
    )
    overlong_rollouts: str = field(
        default="skip",
        metadata={"help": "Rollouts longer than max_length: 'skip' (the book's train_orm.py; counted as dropped in "
                  "the log and final_results.json `data`) or 'truncate' (cut on the truncation_mode side, counted "
                  "as truncated; a cut completion is still labelled with the whole rollout's correctness).",
                  "choices": list(OVERLONG_ROLLOUTS)},
    )
    truncation_mode: str = field(
        default="keep_start",
        metadata={"help": "Which side a cut keeps: with overlong_rollouts truncate, and when the saved ORM later "
                  "scores text longer than max_length (demo, rewards): keep_start (cut the end) or keep_end."},
    )
    max_rollouts_per_prompt: int | None = field(
        default=None, metadata={"help": "Use at most this many rollouts of each prompt (the first ones); null: all."}
    )
    score_reduction: str = field(
        default="last",
        metadata={"help": "How a rollout's score is read from its token probabilities sigmoid(z_t): 'last', at "
                  "the last completion token (the book's code), or 'mean' over the completion tokens (the "
                  "book's text; every supervised token votes)."},
    )
    disable_dropout: bool = field(default=True, metadata={"help": "Turn dropout off (the book's head has none)."})

    def __post_init__(self):
        _check_common(self)
        if self.overlong_rollouts not in OVERLONG_ROLLOUTS:
            raise ValueError(f"overlong_rollouts must be one of {', '.join(OVERLONG_ROLLOUTS)}, "
                             f"got {self.overlong_rollouts!r}")
        if self.score_reduction not in SCORE_REDUCTIONS:
            raise ValueError(f"score_reduction must be one of {SCORE_REDUCTIONS}, got {self.score_reduction!r}")
        if self.max_rollouts_per_prompt is not None and self.max_rollouts_per_prompt < 1:
            raise ValueError(f"max_rollouts_per_prompt must be >= 1 or null, got {self.max_rollouts_per_prompt}")
        super().__post_init__()


@dataclass
class ProcessRMConfig(BookLRScheduleArguments, TrainingArguments):
    """Process reward model: 3-class (bad/neutral/good) cross-entropy at each step separator."""

    rm_kind: ClassVar[str] = "process"

    max_length: int | None = field(
        default=2048,
        metadata={"help": "Tokens per example; longer examples are dropped and counted (the book skips them: "
                  "truncating would cut labeled steps off)."},
    )
    max_reasoning_steps: int = field(
        default=12,
        metadata={"help": "Steps per example: longer solutions are cut into chunks of this many steps, each "
                  "chunk an example starting from the prompt (the book)."},
    )
    step_separator: str = field(
        default=DEFAULT_STEP_SEPARATOR,
        metadata={"help": "Appended to every step; its last token carries the step's label (the book's)."}
    )
    prompt_template: str = field(
        default=DEFAULT_PROMPT_TEMPLATE,
        metadata={"help": "Text before the steps; `{problem}` is replaced by the problem (the book's format)."},
    )
    step_split: str = field(
        default="separator",
        metadata={"help": "How a completion scored by the saved PRM is cut into steps, as its training data was: "
                  "'separator' (on step_separator, else on blank lines; the book's PRM800K solutions) or "
                  "'answer_characters' (each character of the last <answer>, then its end; the nano profile's "
                  "spell_backward rollouts, data/reasoning_gym_rollouts.py)."},
    )
    disable_dropout: bool = field(default=True, metadata={"help": "Turn dropout off (the book's head has none)."})

    truncation_mode: ClassVar[str] = "keep_start"  # not used: over-long examples are dropped

    def __post_init__(self):
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be a positive number of tokens or null, got {self.max_length}")
        if self.max_reasoning_steps < 1:
            raise ValueError(f"max_reasoning_steps must be >= 1, got {self.max_reasoning_steps}")
        if self.step_split not in STEP_SPLITS:
            raise ValueError(f"step_split must be one of {STEP_SPLITS}, got {self.step_split!r}")
        if not self.step_separator:
            raise ValueError("step_separator must not be empty")
        if "{problem}" not in self.prompt_template:
            raise ValueError(f"prompt_template must contain '{{problem}}', got {self.prompt_template!r}")
        try:
            self.prompt_template.format(problem="x")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"prompt_template {self.prompt_template!r} is not a valid format string: {e}") from e
        super().__post_init__()
