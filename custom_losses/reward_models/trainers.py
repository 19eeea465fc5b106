"""Outcome (ORM) and process (PRM) reward-model trainers (book chapter 5).

TRL 1.16 has no ORM and no PRM trainer (PRMTrainer was removed after 1.13), so these are
small subclasses of transformers' Trainer that override `compute_loss` with the pure losses
of losses.py and feed the same evaluation metrics to Trainer's own distributed evaluation
loop. The Bradley-Terry (preference) RM trains with TRL's RewardTrainer; its config is
config.py's PreferenceRMConfig.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, ClassVar

import torch
from transformers import Trainer

from custom_losses.reward_models.data import IGNORE_INDEX, RolloutCollator, StepCollator
from custom_losses.schedules import BookLRScheduleMixin
from custom_losses.reward_models.losses import (
    last_token_hits, outcome_label, rollout_metrics, step_ce_loss, step_metrics, token_bce_loss,
)
from rewards.reward_model_scoring import rollout_scores


class _TokenRewardTrainer(BookLRScheduleMixin, Trainer):
    """Shared plumbing of the ORM and PRM trainers: collator, metrics, logging like TRL's trainers, the book's
    LR schedule option (custom_losses/schedules.py)."""

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
            # `accuracy` is the book's train/accuracy: per rollout, at its last token; `token_accuracy` is the
            # same test on every completion token (what this name meant before the book's PR #517).
            has_tokens = mask.bool().any(-1)
            self._record(mode, "accuracy", last_token_hits(logits, targets, mask).sum(), has_tokens.sum())
            keep = mask.bool()
            right = ((logits > 0).long() == outcome_label(targets).long()[:, None].expand_as(logits)) & keep
            self._record(mode, "token_accuracy", right.sum(), keep.sum())
            scores = rollout_scores(logits, mask, self.args.score_reduction)
        return (loss, {"scores": scores}) if return_outputs else loss

    def compute_eval_metrics(self, eval_pred) -> dict[str, float]:
        rewards, groups = eval_pred.label_ids
        m = rollout_metrics(eval_pred.predictions, rewards, groups)
        out = {k: m[k] for k in ("top1_accuracy", "pairwise_accuracy", "random_top1", "oracle_top1")}
        # The book logs the mean score of correct and of incorrect rollouts at every evaluation, under
        # val/reward_correct_mean and val/reward_incorrect_mean (absent when the split has none of a kind).
        for ours, book in (("mean_score_correct", "reward_correct_mean"),
                           ("mean_score_incorrect", "reward_incorrect_mean")):
            if m[ours] == m[ours]:  # not NaN
                out[book] = m[ours]
        return out


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
