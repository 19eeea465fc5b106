"""What every family does unless it says otherwise: the `Family` class and its default hooks.

A family (rlhf_recipes/families/<family>.py) is one object, `FAMILY`, an instance of a `Family`
subclass that overrides only the hooks where it differs; `registry.family_of(algorithm)` returns it.
The hooks, in the order a run calls them:
  derive_batch(settings, origin, world_size) effective batch -> TRL's batch options (gradient accumulation)
  load_model(recipe, tokenizer)              the model to train (a causal LM unless the family says otherwise)
  build_trainer(recipe, model, tokenizer, train, eval, callbacks) -> transformers.Trainer
  final_results(recipe, trainer) -> dict     extra numbers for final_results.json (e.g. RM eval)
  evaluator(recipe, options)                 its held-out evaluation (rlhf-recipes evaluate, eval_every)
build_trainer's construction is shared; a family changes it through `peft_config(recipe)` and
`trainer_kwargs(recipe, trainer_class)`.

The facts after the hooks are the ones the run's own checks ask (validation.py). What only a tool reads lives
with that tool: the memory plan's in tools/planner/family_shapes.py, compare's in tools/compare/family_logs.py.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rlhf_recipes.errors import RecipeError


class Family:
    name: ClassVar[str] = ""

    def derive_batch(self, settings: dict[str, Any], origin: dict[str, str], world_size: int) -> None:
        """Accumulation from effective_batch_size and the world size (derive_gradient_accumulation, below)."""
        derive_gradient_accumulation(settings, origin, world_size)

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
        from rlhf_recipes.config_schema import import_object

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

    def evaluator(self, recipe, options):
        """The held-out evaluation of this family's runs (rlhf_recipes/evaluation/), for `rlhf-recipes evaluate`
        and `eval_every`: by default the task's held-out problems (reasoning-gym, another seed, or GSM8K's test
        split); None: the recipe's task has none."""
        from rlhf_recipes.evaluation import task_evaluator

        return task_evaluator(recipe, options)

    def held_out_evaluator(self, recipe, options):
        """`evaluator`, checked (EvalError before any model loads), or an EvalError saying there is none."""
        from rlhf_recipes.errors import EvalError

        evaluator = self.evaluator(recipe, options)
        if evaluator is None:
            raise EvalError(f"{recipe.source}: no held-out evaluation for a `{recipe.algorithm.name}` run on dataset "
                            f"`{recipe.args.dataset}` (held-out tasks: reasoning_gym, gsm8k; the HH runs are evaluated "
                            "side by side by `rlhf-recipes pipeline hh --evaluate-only`)")
        evaluator.family_name = self.name
        if options.split not in evaluator.splits:
            raise EvalError(f"--split {options.split}: a `{recipe.algorithm.name}` run's evaluation ({evaluator.kind}) "
                            f"has the split(s) {', '.join(evaluator.splits)}")
        evaluator.check()
        return evaluator

    # --- Facts the run's own checks ask (validation.py) --------------------------------------
    # The model's tokenizer must bring a chat template (conversational prompts); checked before anything loads.
    needs_chat_template: ClassVar[bool] = False

    def token_classifiers(self, recipe) -> list[str]:
        """The settings naming a model this run loads as a token classifier (one output per token)."""
        return []


def derive_gradient_accumulation(settings: dict[str, Any], origin: dict[str, str], world_size: int,
                                 indivisible: str | None = None) -> None:
    """Set gradient_accumulation_steps so that per-device batch x accumulation x world = effective batch.

    `indivisible` words the error when the effective batch does not split (a family's own wording): a format
    string with the fields where, effective, per_device, world_size, per_step, micro_batches (effective /
    per_device).
    """
    effective = settings.get("effective_batch_size")
    if effective is None:
        return
    per_device = settings.get("per_device_train_batch_size", 8)
    per_step = per_device * world_size
    if effective % per_step:
        if indivisible is not None:
            raise RecipeError(indivisible.format(
                where=origin["effective_batch_size"], effective=effective, per_device=per_device,
                world_size=world_size, per_step=per_step, micro_batches=effective // per_device))
        raise RecipeError(
            f"{origin['effective_batch_size']}: effective_batch_size {effective} is not divisible by "
            f"per_device_train_batch_size {per_device} x {world_size} processes = {per_step}. "
            f"Change per_device_train_batch_size or the number of processes."
        )
    accumulation = effective // per_step
    given = settings.get("gradient_accumulation_steps")
    if given is not None and given != accumulation:
        raise RecipeError(
            f"{origin['gradient_accumulation_steps']}: gradient_accumulation_steps {given} contradicts "
            f"effective_batch_size {effective} (= {per_device} per device x {world_size} processes x {accumulation}). "
            "Set only effective_batch_size; accumulation is derived from it."
        )
    settings["gradient_accumulation_steps"] = accumulation
    origin.setdefault("gradient_accumulation_steps",
                      f"derived: effective_batch_size / (per-device batch x {world_size} processes)")
