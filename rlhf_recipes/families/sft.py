"""Supervised fine-tuning (book chapter 4): instruction tuning on prompt/completion conversations.

The data adapter (e.g. data/no_robots.py) gives conversational prompt/completion rows; TRL's
SFTTrainer puts the loss on the completion only. BookSFTTrainer (custom_losses/sft/) adds the
book's loss reduction, whole-step epochs and warmup schedule.

Chat template: the book's model (OLMo-2 base) has none, so the recipe names a tokenizer to copy
it from (`chat_template_from`, the template string only). The tiny profile sets it to null: the
tiny model already has a ChatML template and the hub is not reachable.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from rlhf_recipes.families.base import Family
from rlhf_recipes.models import copy_chat_template

logger = logging.getLogger(__name__)


class SupervisedFineTuning(Family):
    name = "sft"

    def build_trainer(self, recipe, model, tokenizer, train, eval, callbacks):
        cfg = recipe.training
        if cfg.chat_template_from:
            copy_chat_template(tokenizer, cfg.chat_template_from)
        if tokenizer.chat_template is None:
            from rlhf_recipes.errors import RecipeError

            raise RecipeError(f"{recipe.source}: the tokenizer of {recipe.model.model_name_or_path} has no chat "
                              "template; set `chat_template_from` to a tokenizer whose template to copy")
        trainer = super().build_trainer(recipe, model, tokenizer, train, eval, callbacks)
        # TRL drops examples whose completion max_length cuts off entirely (the prompt alone fills it).
        cut = len(train) - len(trainer.train_dataset)
        if cut and int(os.environ.get("RANK", "0")) == 0:
            logger.warning("train data: %d of %d examples dropped: no completion token left within max_length %s",
                           cut, len(train), cfg.max_length)
        trainer.sft_data_stats = {"examples": len(train), "cut_by_max_length": cut}
        return trainer

    def final_results(self, recipe, trainer) -> dict[str, Any]:
        """How the data turned into optimizer steps (for comparing step counts with the book's)."""
        stats = dict(getattr(trainer, "sft_data_stats", {}))
        sampler = getattr(trainer, "_whole_step_sampler", None)
        if sampler is not None:
            stats.update(steps_per_epoch=sampler.steps_per_epoch, rows_dropped_per_epoch=sampler.dropped_per_epoch)
        return {"data": stats}

    def evaluator(self, recipe, options):
        """Held-out conversations: loss, perplexity and sample generations."""
        from rlhf_recipes.evaluation.sft import SftEvaluator

        return SftEvaluator(recipe, options)


FAMILY = SupervisedFineTuning()
