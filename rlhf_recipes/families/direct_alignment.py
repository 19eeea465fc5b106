"""Direct alignment (book chapter 8): DPO and its relatives on preference pairs.

Everything but the tiny profile's sizes is the default `Family` (rlhf_recipes/families/base.py).
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.families.base import Family


class DirectAlignment(Family):
    name = "direct_alignment"
    tiny_overlay = {  # on top of config.TINY_COMMON
        "num_samples": 32,
        "max_steps": 4,
        "per_device_train_batch_size": 2,
        "per_device_eval_batch_size": 2,
        "effective_batch_size": 4,
        "max_length": 256,
    }

    def trainer_kwargs(self, recipe, trainer_class: type) -> dict[str, Any]:
        """A reference-free algorithm (`reference_model=False` in the registry) on BookDPOTrainer gets
        `reference_free=True`, so it drops the reference copy DPOTrainer makes; a reference-free trainer of
        TRL's own (none today) would keep none and take no such argument."""
        from custom_losses.direct_alignment.trainer import BookDPOTrainer

        if recipe.algorithm.reference_model or not issubclass(trainer_class, BookDPOTrainer):
            return {}
        return {"reference_free": True}


FAMILY = DirectAlignment()
