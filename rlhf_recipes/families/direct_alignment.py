"""Direct alignment (book chapter 8): DPO and its relatives on preference pairs."""

from __future__ import annotations

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
    )
