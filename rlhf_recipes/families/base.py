"""What every family does unless it says otherwise: the `Family` class and its default hooks.

A family (rlhf_recipes/families/<family>.py) is one object, `FAMILY`, an instance of a `Family`
subclass that overrides only the hooks where it differs; `registry.family_of(algorithm)` returns it.
The hooks, in the order a run calls them:
  tiny_overlay                               values the tiny profile sets for every recipe of the family
  derive_batch(typed, origin, world_size)    effective batch -> TRL's batch options (gradient accumulation)
  load_model(recipe, tokenizer)              the model to train (a causal LM unless the family says otherwise)
  build_trainer(recipe, model, tokenizer, train, eval, callbacks) -> transformers.Trainer
  final_results(recipe, trainer) -> dict     extra numbers for final_results.json (e.g. RM eval)
build_trainer's construction is shared; a family changes it through `peft_config(recipe)` and
`trainer_kwargs(recipe, trainer_class)`.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Family:
    name: ClassVar[str] = ""
    tiny_overlay: ClassVar[dict[str, Any]] = {}  # on top of config.TINY_COMMON

    def derive_batch(self, typed: dict[str, dict[str, Any]], origin: dict[str, str], world_size: int) -> None:
        """Accumulation from effective_batch_size and the world size (config.derive_gradient_accumulation)."""
        from rlhf_recipes.config import derive_gradient_accumulation

        derive_gradient_accumulation(typed, origin, world_size)

    def load_model(self, recipe, tokenizer):
        from rlhf_recipes.models import load_causal_lm

        return load_causal_lm(recipe.model)

    def peft_config(self, recipe):
        from trl import get_peft_config

        return get_peft_config(recipe.model)

    def trainer_kwargs(self, recipe, trainer_class: type) -> dict[str, Any]:
        """Keyword arguments beyond the common ones, for this family's trainers."""
        return {}

    def build_trainer(self, recipe, model, tokenizer, train, eval, callbacks):
        from rlhf_recipes.registry import import_object

        trainer_class = import_object(recipe.algorithm.trainer_class)
        return trainer_class(
            model=model,
            args=recipe.training,
            train_dataset=train,
            eval_dataset=eval,
            processing_class=tokenizer,
            peft_config=self.peft_config(recipe),
            callbacks=callbacks,
            **self.trainer_kwargs(recipe, trainer_class),
        )

    def final_results(self, recipe, trainer) -> dict[str, Any]:
        return {}
