"""Self-distillation (book chapter 12): SDPO on verifiable rewards, the policy-gradient task and prompt.

Batch structure: each optimizer step trains on `effective_batch_size` completions = groups x
num_generations (the book's 16 x 8 = 128), in micro-batches of whole groups
(per_device_train_batch_size a multiple of num_generations; the book's reduction averages each
group's tokens). Gradient accumulation follows the world size, as for every family.
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.families.base import Family


class SelfDistillation(Family):
    name = "self_distillation"
    needs_chat_template = True

    def trainer_kwargs(self, recipe, trainer_class: type) -> dict[str, Any]:
        """The reward functions, resolved here from their names (rewards/)."""
        import rewards

        return {"reward_funcs": rewards.build_reward_funcs(list(recipe.training.reward_funcs))}

    def final_results(self, recipe, trainer) -> dict[str, Any]:
        args = trainer.args
        groups = args.generation_batch_size // args.num_generations
        results: dict[str, Any] = {"step_batch": {"groups": groups, "rollouts_per_group": args.num_generations,
                                                  "completions": args.generation_batch_size}}
        if hasattr(trainer, "draw_summary"):
            results["prompt_draws"] = trainer.draw_summary()
        return results


FAMILY = SelfDistillation()
