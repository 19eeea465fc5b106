"""Reward models (book chapter 5): Bradley-Terry, outcome (ORM) and process (PRM) reward models.

The math lives in pure tensor functions (losses and evaluation metrics); the trainers hold
plumbing only. Bradley-Terry trains through TRL's own RewardTrainer, whose loss is exactly
`bradley_terry_loss` below; TRL 1.16 has no ORM and no PRM trainer (PRMTrainer was removed
after 1.13), so `OutcomeRMTrainer` and `ProcessRMTrainer` are small subclasses of
transformers' Trainer that override `compute_loss` and feed the same evaluation metrics to
Trainer's own distributed evaluation loop.

Notation: r_c, r_r = scalar rewards of the chosen / rejected sequence (the head read at the
last non-pad token); z_t = the per-token logit of a token-classification head; M = mask.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from transformers import Trainer, TrainingArguments
from trl import RewardConfig

from custom_losses.reward_models.data import (
    DEFAULT_PROMPT_TEMPLATE, DEFAULT_STEP_SEPARATOR, STEP_CLASS_NAMES, RolloutCollator, StepCollator, rollout_scores,
)

TRUNCATION_MODES = ("keep_start", "keep_end")
SCORE_REDUCTIONS = ("mean", "last")


# --------------------------------------------------------------------------------------
# Losses


def bradley_terry_loss(
    chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, margin: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-pair Bradley-Terry loss: -logsigmoid(r_c - r_r [- margin]).

    -log P(chosen > rejected) under P = sigmoid(r_c - r_r). TRL's RewardTrainer computes the
    mean of this (with the optional margin column); the book uses no margin.
    """
    diff = chosen_rewards - rejected_rewards
    if margin is not None:
        diff = diff - margin
    return -F.logsigmoid(diff)


def token_bce_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ORM loss: binary cross-entropy of every completion token against its rollout's correctness.

    logits (B, T): one logit z_t per token; targets (B,): y in [0, 1] per sequence (1 = the
    rollout's final answer is right); mask (B, T): 1 on completion tokens.
    loss = sum_{b,t} M_bt * BCE(z_bt, y_b) / sum_{b,t} M_bt, with
    BCE(z, y) = -[y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))]  (the mean over all masked
    tokens of the micro-batch, as the book computes it). Zero, with a graph, if nothing is masked in.
    """
    mask = mask.to(logits.dtype)
    per_token = F.binary_cross_entropy_with_logits(
        logits, targets.to(logits.dtype)[:, None].expand_as(logits), reduction="none"
    )
    total = mask.sum()
    if total == 0:
        return logits.sum() * 0.0
    return (per_token * mask).sum() / total


IGNORE_INDEX = -100


def step_ce_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """PRM loss: 3-class cross-entropy at the step-separator positions only.

    logits (B, T, C): class logits per token (C = 3: bad, neutral, good); labels (B, T): the
    class index at the last token of each step separator, -100 everywhere else.
    loss = mean over positions with a label of -log softmax(logits)[label]. Zero, with a graph,
    if the micro-batch has no labeled position.
    """
    labeled = labels != IGNORE_INDEX
    if not labeled.any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits[labeled], labels[labeled])


# --------------------------------------------------------------------------------------
# Evaluation metrics (numpy or tensors in, floats out)


def preference_metrics(chosen_rewards, rejected_rewards) -> dict[str, float]:
    """Pairwise accuracy (r_c > r_r, ties count as wrong, as the book) and mean margin r_c - r_r."""
    c = np.asarray(chosen_rewards, dtype=np.float64)
    r = np.asarray(rejected_rewards, dtype=np.float64)
    margin = c - r
    return {
        "accuracy": float((margin > 0).mean()) if len(margin) else float("nan"),
        "margin": float(margin.mean()) if len(margin) else float("nan"),
        "chosen_reward": float(c.mean()) if len(c) else float("nan"),
        "rejected_reward": float(r.mean()) if len(r) else float("nan"),
        "loss": float(np.logaddexp(0.0, -margin).mean()) if len(margin) else float("nan"),  # -logsigmoid
        "num_pairs": int(len(margin)),
    }


def rollout_metrics(scores, rewards, groups) -> dict[str, float]:
    """ORM ranking metrics over rollouts grouped by prompt.

    top1_accuracy: fraction of prompts whose best-scored rollout is correct (reward >= 0.5);
    pairwise_accuracy: over all (correct, incorrect) rollout pairs of the same prompt, the
    fraction where the correct one scores strictly higher. Baselines for reading them:
    random_top1 = mean fraction of correct rollouts per prompt (picking at random), oracle_top1
    = fraction of prompts with at least one correct rollout.
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    correct = np.asarray(rewards, dtype=np.float64).reshape(-1) >= 0.5
    groups = np.asarray(groups).reshape(-1)
    top1, random_top1, oracle, wins, pairs = [], [], [], 0.0, 0
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        s, y = scores[idx], correct[idx]
        top1.append(float(y[int(np.argmax(s))]))
        random_top1.append(float(y.mean()))
        oracle.append(float(y.any()))
        if y.any() and (~y).any():
            diff = s[y][:, None] - s[~y][None, :]
            wins += float((diff > 0).sum())
            pairs += diff.size
    return {
        "top1_accuracy": float(np.mean(top1)) if top1 else float("nan"),
        "pairwise_accuracy": wins / pairs if pairs else float("nan"),
        "random_top1": float(np.mean(random_top1)) if top1 else float("nan"),
        "oracle_top1": float(np.mean(oracle)) if top1 else float("nan"),
        "mean_score_correct": float(scores[correct].mean()) if correct.any() else float("nan"),
        "mean_score_incorrect": float(scores[~correct].mean()) if (~correct).any() else float("nan"),
        "num_prompts": len(top1),
        "num_rollouts": int(len(scores)),
        "num_pairs": int(pairs),
    }


def step_metrics(predictions, labels) -> dict[str, float]:
    """PRM step accuracy: argmax class == label at every labeled position (-100 elsewhere).

    Also the accuracy of always answering the most frequent class (the baseline to beat) and
    the recall of each class.
    """
    predictions = np.asarray(predictions).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    keep = labels != IGNORE_INDEX
    p, y = predictions[keep], labels[keep]
    out: dict[str, float] = {
        "step_accuracy": float((p == y).mean()) if len(y) else float("nan"),
        "majority_baseline": (float(np.bincount(y, minlength=len(STEP_CLASS_NAMES)).max() / len(y))
                              if len(y) else float("nan")),
        "num_steps": int(len(y)),
    }
    for k, name in enumerate(STEP_CLASS_NAMES):
        sel = y == k
        out[f"recall_{name}"] = float((p[sel] == k).mean()) if sel.any() else float("nan")
    return out


# --------------------------------------------------------------------------------------
# Configs


def _check_common(cfg) -> None:
    if cfg.max_length is not None and cfg.max_length < 1:
        raise ValueError(f"max_length must be a positive number of tokens or null, got {cfg.max_length}")
    if cfg.truncation_mode not in TRUNCATION_MODES:
        raise ValueError(f"truncation_mode must be one of {TRUNCATION_MODES}, got {cfg.truncation_mode!r}")


@dataclass
class PreferenceRMConfig(RewardConfig):
    """TRL's RewardConfig, truncating over-long sequences instead of dropping them (the book)."""

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
class OutcomeRMConfig(TrainingArguments):
    """Outcome reward model: one logit per token, BCE on completion tokens against correctness."""

    rm_kind: ClassVar[str] = "outcome"

    max_length: int | None = field(
        default=2048, metadata={"help": "Tokens per rollout (prompt + completion); longer ones are truncated."}
    )
    truncation_mode: str = field(default="keep_start", metadata={"help": "keep_start (cut the end) or keep_end."})
    max_rollouts_per_prompt: int | None = field(
        default=None, metadata={"help": "Use at most this many rollouts of each prompt (the first ones); null: all."}
    )
    score_reduction: str = field(
        default="mean",
        metadata={"help": "How a rollout's score is read from its token probabilities sigmoid(z_t): 'mean' over "
                  "the completion tokens (the book's scoring) or 'last' (the final token)."},
    )
    disable_dropout: bool = field(default=True, metadata={"help": "Turn dropout off (the book's head has none)."})

    def __post_init__(self):
        _check_common(self)
        if self.score_reduction not in SCORE_REDUCTIONS:
            raise ValueError(f"score_reduction must be one of {SCORE_REDUCTIONS}, got {self.score_reduction!r}")
        if self.max_rollouts_per_prompt is not None and self.max_rollouts_per_prompt < 1:
            raise ValueError(f"max_rollouts_per_prompt must be >= 1 or null, got {self.max_rollouts_per_prompt}")
        super().__post_init__()


@dataclass
class ProcessRMConfig(TrainingArguments):
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
    disable_dropout: bool = field(default=True, metadata={"help": "Turn dropout off (the book's head has none)."})

    truncation_mode: ClassVar[str] = "keep_start"  # not used: over-long examples are dropped

    def __post_init__(self):
        if self.max_length is not None and self.max_length < 1:
            raise ValueError(f"max_length must be a positive number of tokens or null, got {self.max_length}")
        if self.max_reasoning_steps < 1:
            raise ValueError(f"max_reasoning_steps must be >= 1, got {self.max_reasoning_steps}")
        if not self.step_separator:
            raise ValueError("step_separator must not be empty")
        if "{problem}" not in self.prompt_template:
            raise ValueError(f"prompt_template must contain '{{problem}}', got {self.prompt_template!r}")
        try:
            self.prompt_template.format(problem="x")
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"prompt_template {self.prompt_template!r} is not a valid format string: {e}") from e
        super().__post_init__()


# --------------------------------------------------------------------------------------
# Trainers


class _TokenRewardTrainer(Trainer):
    """Shared plumbing of the ORM and PRM trainers: collator, metrics, logging like TRL's trainers."""

    loss_is_scaled_for_ga = False  # compute_loss returns a per-micro-batch mean; Trainer divides by accumulation
    collator_class: ClassVar[type]
    columns: ClassVar[tuple[str, ...]]
    label_columns: ClassVar[tuple[str, ...]]

    def __init__(self, model, args, train_dataset=None, eval_dataset=None, processing_class=None, callbacks=None,
                 data_collator=None, peft_config=None):
        if peft_config is not None:
            from peft import get_peft_model

            peft_config.modules_to_save = sorted(set(peft_config.modules_to_save or []) | {"score"})
            model = get_peft_model(model, peft_config)
        if args.disable_dropout:
            for module in model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
        if data_collator is None:
            data_collator = self.collator_class(pad_token_id=processing_class.pad_token_id)
        super().__init__(
            model=model, args=args, data_collator=data_collator, train_dataset=train_dataset,
            eval_dataset=eval_dataset, processing_class=processing_class, callbacks=callbacks,
            compute_metrics=self.compute_eval_metrics,
        )
        # Evaluation runs compute_loss (return_outputs=True) and gathers these columns as labels.
        self.label_names = list(self.label_columns)
        self.can_return_loss = True
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = list(self.columns)

    def _record(self, mode: str, name: str, hits: torch.Tensor, total: torch.Tensor) -> None:
        """Pooled ratio across processes: sum of hits / sum of totals."""
        both = self.accelerator.gather_for_metrics(torch.stack([hits.float(), total.float()]).reshape(1, 2))
        both = both.reshape(-1, 2).sum(0)
        if both[1] > 0:
            self._metrics[mode][name].append((both[0] / both[1]).item())

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        metrics = {key: sum(val) / len(val) for key, val in self._metrics[mode].items() if val}
        if mode == "eval":
            metrics = {f"eval_{key}": val for key, val in metrics.items()}
        logs.update(metrics)
        super().log(logs, start_time)
        self._metrics[mode].clear()

    def compute_eval_metrics(self, eval_pred) -> dict[str, float]:
        raise NotImplementedError


class OutcomeRMTrainer(_TokenRewardTrainer):
    """Outcome RM: `token_bce_loss` on every completion token, against its rollout's correctness."""

    collator_class = RolloutCollator
    columns = ("input_ids", "completion_mask", "rewards", "group")
    label_columns = ("rewards", "group")

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False)
        logits = outputs.logits.squeeze(-1).float()  # (B, T)
        mask, targets = inputs["completion_mask"], inputs["rewards"]
        loss = token_bce_loss(logits, targets, mask)
        with torch.no_grad():
            keep = mask.bool()
            right = ((logits > 0) == (targets[:, None] >= 0.5).expand_as(logits)) & keep
            self._record(mode, "accuracy", right.sum(), keep.sum())
            scores = rollout_scores(logits, mask, self.args.score_reduction)
        return (loss, {"scores": scores}) if return_outputs else loss

    def compute_eval_metrics(self, eval_pred) -> dict[str, float]:
        rewards, groups = eval_pred.label_ids
        m = rollout_metrics(eval_pred.predictions, rewards, groups)
        return {k: m[k] for k in ("top1_accuracy", "pairwise_accuracy", "random_top1", "oracle_top1")}


class ProcessRMTrainer(_TokenRewardTrainer):
    """Process RM: `step_ce_loss` at the last token of every step separator."""

    collator_class = StepCollator
    columns = ("input_ids", "labels")
    label_columns = ("labels",)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False)
        logits = outputs.logits.float()  # (B, T, 3)
        labels = inputs["labels"]
        loss = step_ce_loss(logits, labels)
        with torch.no_grad():
            predictions = logits.argmax(-1)
            if mode == "train":  # evaluation pools it over the whole eval set in compute_eval_metrics
                keep = labels != IGNORE_INDEX
                self._record(mode, "step_accuracy", ((predictions == labels) & keep).sum(), keep.sum())
        return (loss, {"predictions": predictions}) if return_outputs else loss

    def compute_eval_metrics(self, eval_pred) -> dict[str, Any]:
        m = step_metrics(eval_pred.predictions, eval_pred.label_ids)
        return {k: m[k] for k in ("step_accuracy", "majority_baseline")}
