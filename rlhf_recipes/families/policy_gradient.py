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

from rlhf_recipes.errors import RecipeError
from rlhf_recipes.families.base import Family, derive_gradient_accumulation

# The book's batch structure, in the words of a policy-gradient run (families/base.py derive_gradient_accumulation).
INDIVISIBLE = (
    "{where}: effective_batch_size {effective} (completions per optimizer step) cannot be split into micro-batches "
    "of per_device_train_batch_size {per_device} on {world_size} processes ({per_step} per micro-step). Use a "
    "number of processes that divides {micro_batches}, or lower per_device_train_batch_size (with DAPO's token "
    "mean this changes what one micro-batch averages)."
)


class PolicyGradient(Family):
    name = "policy_gradient"
    needs_chat_template = True
    def token_classifiers(self, recipe) -> list[str]:
        """PPO's separate value model: its own checkpoint, else a copy of the policy."""
        if not recipe.has("value_model_path") or recipe.setting("share_value_backbone"):
            return []
        return ["value_model_path" if recipe.setting("value_model_path") else "model_name_or_path"]

    def derive_batch(self, settings: dict[str, Any], origin: dict[str, str], world_size: int) -> None:
        """Accumulation from effective_batch_size and the world size, keeping the per-device micro-batch;
        then each rollout batch must give whole optimizer steps."""
        derive_gradient_accumulation(settings, origin, world_size, indivisible=INDIVISIBLE)
        effective = settings.get("effective_batch_size")
        generation = settings.get("generation_batch_size")
        if effective is not None and generation is not None and generation % effective:
            raise RecipeError(
                f"{origin['generation_batch_size']}: generation_batch_size {generation} (completions per rollout "
                f"batch) is not a multiple of effective_batch_size {effective}: each rollout batch must give whole "
                "optimizer steps."
            )

    def trainer_kwargs(self, recipe, trainer_class: type) -> dict[str, Any]:
        """The reward functions, resolved here from their names (as open-r1 does), and PPO's value model."""
        kwargs: dict[str, Any] = {"reward_funcs": reward_funcs(recipe.training)}
        if getattr(trainer_class, "needs_value_model", False):  # PPO: the value model loads like the policy
            from rlhf_recipes.models import model_init_kwargs

            kwargs["value_model_init_kwargs"] = model_init_kwargs(recipe.model)
        return kwargs

    def final_results(self, recipe, trainer) -> dict[str, Any]:
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


def reward_funcs(args) -> list:
    """The config's reward functions, named in `reward_funcs`, as the callables the trainer takes
    (rewards/; `rm:<path>` is a trained reward model, loaded when first called)."""
    import rewards

    return rewards.build_reward_funcs(
        list(args.reward_funcs), overlong_max_length=args.overlong_max_length,
        overlong_cache_length=args.overlong_cache_length,
    )


FAMILY = PolicyGradient()
