"""Direct alignment (book chapter 8): DPO and its relatives on preference pairs.

Everything but the tiny profile's sizes, the reference-free trainer argument and the facts the tools
ask (pairs, the reference model) is the default `Family` (rlhf_recipes/families/base.py).
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.families.base import Family


class DirectAlignment(Family):
    name = "direct_alignment"
    needs_chat_template = True
    tiny_overlay = {  # on top of config.TINY_COMMON
        "num_samples": 32,
        "max_steps": 4,
        "per_device_train_batch_size": 2,
        "per_device_eval_batch_size": 2,
        "effective_batch_size": 4,
        "max_length": 256,
    }
    compare_metrics = ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected", "loss",
                       "nll_loss", "kl", "grad_norm")

    def sequences_per_example(self, recipe) -> int:
        return 2  # chosen and rejected in one forward

    def reference_model(self, recipe, peft: bool) -> bool:
        """Unless the loss is reference-free (the registry's `reference_model`), the adapter is disabled
        instead (LoRA), or the reference log-probs are computed before training."""
        return (not peft and recipe.algorithm.reference_model
                and not getattr(recipe.training, "precompute_ref_log_probs", False))

    def reference_note(self, recipe, peft: bool) -> str | None:
        if self.reference_model(recipe, peft):
            return "reference model kept in memory (use_peft or precompute_ref_log_probs would avoid it)"
        why = ("reference-free loss" if not recipe.algorithm.reference_model else
               "LoRA: the reference is the base model with the adapter disabled" if peft else
               "reference log-probs precomputed before training")
        return f"no reference model ({why})"

    def trainer_kwargs(self, recipe, trainer_class: type) -> dict[str, Any]:
        """A reference-free algorithm (`reference_model=False` in the registry) on BookDPOTrainer gets
        `reference_free=True`, so it drops the reference copy DPOTrainer makes; a reference-free trainer of
        TRL's own (none today) would keep none and take no such argument."""
        from custom_losses.direct_alignment.trainer import BookDPOTrainer

        if recipe.algorithm.reference_model or not issubclass(trainer_class, BookDPOTrainer):
            return {}
        return {"reference_free": True}

    def evaluator(self, recipe, options):
        """Held-out pairs: implicit-reward accuracy and margins; win rate against the reference with --judge."""
        from rlhf_recipes.evaluation.preferences import PreferenceEvaluator

        return PreferenceEvaluator(recipe, options)


FAMILY = DirectAlignment()
