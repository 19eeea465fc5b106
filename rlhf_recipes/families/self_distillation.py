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
    generates_rollouts = True  # 8 rollouts per prompt each step; the live model is its own teacher (no reference)
    compare_metrics = ("reward", "loss", "skipped", "completions/mean_length", "grad_norm")
    tiny_overlay = {  # on top of config.TINY_COMMON
        "num_samples": 16,
        "max_steps": 2,
        "num_generations": 4,
        "per_device_train_batch_size": 4,  # one group per micro-batch ...
        "effective_batch_size": 8,  # ... two groups per optimizer step
        "max_completion_length": 12,
        "max_reprompt_len": 48,  # small enough that the tiny teacher prompt is cut on the left
        # The random tiny model never answers correctly, so no group would ever succeed and every prompt would be
        # redrawn until max_draws stops the run. In the tiny profile ONLY, every rollout counts as a success
        # (correctness >= 0): the loss, the teacher prompt and the logging run; the redraw itself is tested on
        # constructed rewards (tests/test_sdpo.py).
        "success_reward_threshold": 0.0,
        "use_vllm": False,
    }

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

    def evaluator(self, recipe, options):
        """The task's held-out problems: reasoning-gym (another seed) or GSM8K's test split."""
        from rlhf_recipes.evaluation import task_evaluator

        return task_evaluator(recipe, options)


FAMILY = SelfDistillation()
