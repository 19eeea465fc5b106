"""Direct alignment (book chapter 8): DPO and its relatives on preference pairs."""

from __future__ import annotations

from typing import Any

from trl import get_peft_config

from rlhf_recipes.registry import import_object

TINY_OVERLAY = {  # on top of config.TINY_COMMON
    "num_samples": 32,
    "max_steps": 4,
    "per_device_train_batch_size": 2,
    "per_device_eval_batch_size": 2,
    "effective_batch_size": 4,
    "max_length": 256,
}


def reference_kwargs(recipe, trainer_class: type) -> dict[str, Any]:
    """What the trainer is told about the reference model. A reference-free algorithm
    (`reference_model: False` in the registry) on BookDPOTrainer gets `reference_free=True`, so it
    drops the reference copy DPOTrainer makes; TRL's reference-free trainers (CPOTrainer for simpo)
    keep none of their own and take no such argument."""
    from custom_losses.direct_alignment.trainer import BookDPOTrainer

    if recipe.algorithm.reference_model or not issubclass(trainer_class, BookDPOTrainer):
        return {}
    return {"reference_free": True}


def build_trainer(recipe, model, tokenizer, train, eval, callbacks):
    trainer_class = import_object(recipe.algorithm.trainer_class)
    return trainer_class(
        model=model,
        args=recipe.training,
        train_dataset=train,
        eval_dataset=eval,
        processing_class=tokenizer,
        peft_config=get_peft_config(recipe.model),
        callbacks=callbacks,
        **reference_kwargs(recipe, trainer_class),
    )
