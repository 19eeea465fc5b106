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

Facts the tools ask (planner, bench, compare, evaluate) instead of testing family names; the class
attributes and methods after the hooks below, each with what it means and its default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rlhf_recipes.errors import RecipeError


@dataclass(frozen=True)
class BookFigure:
    """One of the book's wandb figures (rlhf-book, images/<image>) and the nano figure drawn with the same metrics
    against the same axis (the optimizer step); tools/nano_book.py and tools/nano_figures.py draw it."""
    name: str  # the nano figure's name: <out>/nano_<name>.png
    image: str  # the book's image it answers
    # (the book's wandb metric, the key our runs log in metrics.jsonl) per panel, in the book's order
    panels: tuple[tuple[str, str], ...]
    # the registry's algorithms whose nano runs it overlays; () : the nano SFT base's own build (no new run)
    algorithms: tuple[str, ...] = ()
    # held-out proof beside the book's training panels: a metrics.jsonl key drawn per step ...
    heldout_curve: str | None = None
    # ... and/or (after, before) keys of final_results.json, drawn per run with the base beside it
    heldout_final: tuple[str, str] | None = None


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

    # --- Facts -----------------------------------------------------------------------------
    # Training samples completions from the policy (a generation phase: KV cache, sampling).
    generates_rollouts: ClassVar[bool] = False
    # Its runs train a reward model (a scoring head; `rlhf-recipes evaluate` scores a saved one).
    trains_reward_model: ClassVar[bool] = False
    # The book's loop logs without `step=`: one wandb row per rollout, then one per optimizer step.
    book_logs_by_rollout: ClassVar[bool] = False
    # The book logs train/<x> and val/<x>: any it logs beyond the registry's map is our <x> and eval_<x>.
    book_logs_prefixed: ClassVar[bool] = False
    # Our metrics worth plotting when local runs are compared with each other, in display order (globs allowed).
    compare_metrics: ClassVar[tuple[str, ...]] = ("loss", "grad_norm")
    # The model's tokenizer must bring a chat template (conversational prompts); checked before anything loads.
    needs_chat_template: ClassVar[bool] = False
    # `rlhf-recipes nano-book --family NAME` (tools/nano_book.py), for a family that runs on nano: the held-out
    # metrics of its table and figure (the evaluator's, logged as eval/<metric> during training; a run "learns"
    # when every one's gain interval is above zero) and the training metric drawn beside them.
    nano_book_heldout: ClassVar[tuple[str, ...]] = ()
    nano_book_training: ClassVar[str | None] = None
    # The book's figure for this family and its metrics mapped to ours (BookFigure); None: the book draws none.
    book_figure: ClassVar[BookFigure | None] = None

    def sequences_per_example(self, recipe) -> int:
        """Sequences one training example puts through the forward (chosen + rejected: 2)."""
        return 1

    def scoring_head(self, recipe) -> tuple[int, bool] | None:
        """(labels, bias) of the classification head trained instead of the LM head; None: the LM head."""
        return None

    def trains_with_trl_trainer(self, recipe) -> bool:
        """The trainer is one of TRL's (or a subclass): it casts LoRA adapters to bf16 under QLoRA and keeps
        the base dtype under ZeRO-3 (a plain transformers.Trainer leaves PEFT's fp32)."""
        return True

    def reference_model(self, recipe, peft: bool) -> bool:
        """A frozen copy of the policy is held in memory during training."""
        return False

    def reference_note(self, recipe, peft: bool) -> str | None:
        """Why the reference is kept or not, where that is worth a line in the memory plan."""
        return None

    def learned_reward_models(self, recipe) -> list[str]:
        """Paths of trained reward models loaded for inference during training."""
        return []

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
