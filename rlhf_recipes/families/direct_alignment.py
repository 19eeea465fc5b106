"""Direct alignment (book chapter 8): DPO and its relatives on preference pairs.

Everything but the tiny profile's sizes is the default `Family` (rlhf_recipes/families/base.py).
"""

from __future__ import annotations

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


FAMILY = DirectAlignment()
