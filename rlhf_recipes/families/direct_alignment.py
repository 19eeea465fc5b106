"""Direct alignment (book chapter 8): DPO and its relatives on preference pairs.

Everything but the reference-free trainer argument and the held-out evaluator is the default `Family`
(rlhf_recipes/families/base.py).
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.families.base import Family


class DirectAlignment(Family):
    name = "direct_alignment"
    needs_chat_template = True
    def trainer_kwargs(self, recipe, trainer_class: type) -> dict[str, Any]:
        """A reference-free algorithm (`reference_model=False` in the registry) on BookDPOTrainer gets
        `reference_free=True`, so it drops the reference copy DPOTrainer makes; a reference-free trainer of
        TRL's own (none today) would keep none and take no such argument."""
        from custom_losses.direct_alignment.trainer import BookDPOTrainer

        if recipe.algorithm.reference_model or not issubclass(trainer_class, BookDPOTrainer):
            return {}
        return {"reference_free": True}

    def evaluator(self, recipe, options):
        """Held-out pairs: implicit-reward accuracy and margins; win rate against the reference with --judge.
        Pairs sampled on a verifiable task (the nano profile's) are scored with the task's own held-out accuracy
        too: the point of aligning on them is answering the task better."""
        from rlhf_recipes.evaluation import task_evaluator
        from rlhf_recipes.evaluation.preferences import PreferenceEvaluator

        task = task_evaluator(recipe, options)
        if task is None:
            return PreferenceEvaluator(recipe, options)
        from rlhf_recipes.evaluation.task_preferences import TaskPreferenceEvaluator

        return TaskPreferenceEvaluator(recipe, options, task)


FAMILY = DirectAlignment()
