"""Policy gradients (book chapter 6): REINFORCE, RLOO, GRPO and relatives on verifiable rewards.

The book's batch structure, which every recipe states and every world size keeps:
  generation_batch_size  completions per rollout batch, all processes together
                         (prompts x rollouts: 4 x 8 = 32; REINFORCE 8 x 1)
  per_device_train_batch_size  the micro-batch (the book's 2)
  effective_batch_size   completions per optimizer step (the book's 2 x 4 = 8)
so one rollout batch gives generation_batch_size / effective_batch_size optimizer steps (4),
the first on-policy and the rest off-policy. Gradient accumulation is derived from the world
size: 1 process -> 4 micro-batches of 2, 2 processes -> 2 each, 4 -> 1 each; 8 processes
cannot keep a micro-batch of 2 and fail with a message saying what to change.
"""

from __future__ import annotations

from typing import Any

from trl import get_peft_config

from rlhf_recipes.registry import import_object

TINY_OVERLAY = {  # on top of config.TINY_COMMON
    "num_samples": 16,  # prompts generated (reasoning-gym is offline)
    "max_steps": 4,  # one rollout batch of the book's 4 x 8 structure = 4 optimizer steps
    "max_completion_length": 16,
    "overlong_max_length": 16,  # DAPO's penalty scaled to the tiny budget ...
    "overlong_cache_length": 4,  # ... so it still bites
    "use_vllm": False,
    "log_samples_every": 2,
    "log_samples_count": 2,
}


def derive_batch(typed: dict[str, dict[str, Any]], origin: dict[str, str], world_size: int) -> None:
    """Accumulation from effective_batch_size and the world size, keeping the per-device micro-batch."""
    from rlhf_recipes.config import RecipeError

    training, recipe = typed["training"], typed["recipe"]
    effective = recipe.get("effective_batch_size")
    if effective is None:
        return
    per_device = training.get("per_device_train_batch_size", 8)
    per_step = per_device * world_size
    if effective % per_step:
        raise RecipeError(
            f"{origin['effective_batch_size']}: effective_batch_size {effective} (completions per optimizer step) "
            f"cannot be split into micro-batches of per_device_train_batch_size {per_device} on {world_size} "
            f"processes ({per_step} per micro-step). Use a number of processes that divides {effective // per_device}, "
            f"or lower per_device_train_batch_size (with DAPO's token mean this changes what one micro-batch averages)."
        )
    accumulation = effective // per_step
    given = training.get("gradient_accumulation_steps")
    if given is not None and given != accumulation:
        raise RecipeError(
            f"{origin['gradient_accumulation_steps']}: gradient_accumulation_steps {given} contradicts "
            f"effective_batch_size {effective} (= {per_device} per device x {world_size} processes x {accumulation}). "
            "Set only effective_batch_size; accumulation is derived from it."
        )
    training["gradient_accumulation_steps"] = accumulation
    generation = training.get("generation_batch_size")
    if generation is not None and generation % effective:
        raise RecipeError(
            f"{origin['generation_batch_size']}: generation_batch_size {generation} (completions per rollout batch) "
            f"is not a multiple of effective_batch_size {effective}: each rollout batch must give whole optimizer "
            "steps."
        )


def reward_funcs(args) -> list:
    """The config's reward functions, named in `reward_funcs`, as the callables the trainer takes
    (rewards/; `rm:<path>` is a trained reward model, loaded when first called)."""
    import rewards

    return rewards.build_reward_funcs(
        list(args.reward_funcs), overlong_max_length=args.overlong_max_length,
        overlong_cache_length=args.overlong_cache_length,
    )


def build_trainer(recipe, model, tokenizer, train, eval, callbacks):
    trainer_class = import_object(recipe.algorithm.trainer_class)
    extra = {}
    if getattr(trainer_class, "needs_value_model", False):  # PPO: the value model loads like the policy
        from rlhf_recipes.models import model_init_kwargs

        extra["value_model_init_kwargs"] = model_init_kwargs(recipe.model)
    return trainer_class(
        model=model,
        reward_funcs=reward_funcs(recipe.training),
        args=recipe.training,
        train_dataset=train,
        eval_dataset=eval,
        processing_class=tokenizer,
        peft_config=get_peft_config(recipe.model),
        callbacks=callbacks,
        **extra,
    )


def final_results(recipe, trainer) -> dict[str, Any]:
    args = trainer.args
    per_step = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
    results = {
        "rollout_batch": {
            "completions": args.generation_batch_size,
            "prompts": args.generation_batch_size // args.num_generations,
            "rollouts_per_prompt": args.num_generations,
            "optimizer_steps": args.generation_batch_size // per_step,
        },
    }
    if hasattr(trainer, "rollout_summary"):
        results.update(trainer.rollout_summary())
    return results
