"""Self-distillation (book chapter 12): SDPO on verifiable rewards, the policy-gradient task and prompt.

Batch structure: each optimizer step trains on `effective_batch_size` completions = groups x
num_generations (the book's 16 x 8 = 128), in micro-batches of whole groups
(per_device_train_batch_size a multiple of num_generations; the book's reduction averages each
group's tokens). Gradient accumulation follows the world size, as for every family.
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.families.base import BookFigure, Family


class SelfDistillation(Family):
    name = "self_distillation"
    needs_chat_template = True
    generates_rollouts = True  # 8 rollouts per prompt each step; the live model is its own teacher (no reference)
    compare_metrics = ("reward", "loss", "skipped", "completions/mean_length", "grad_norm")
    # The book's sdpo_rg run: reward of the accepted groups, the distillation loss, grad_norm.
    book_figure = BookFigure("distillation", "wandb_distillation.png",
                             (("reward", "reward"), ("loss", "loss"), ("grad_norm", "grad_norm")), ("sdpo",))
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
    # On top of config.NANO_COMMON: the book's task, sized for a CPU, from the nano-sdpo base. Unlike tiny, nothing is
    # faked: the base answers ~27% of held-out words exactly, so groups of 8 rollouts with a success exist, and the
    # book's threshold (correctness >= 1.0), redraw, teacher prompt and loss all stay as the registry and the recipe
    # set them; only the start and what a CPU needs change here.
    nano_overlay = {
        # SDPO's teacher is the live model reading a successful rollout in its prompt, which a pretrained model can do
        # and the nano base (SFT'd on bare questions) cannot: shown the answer, it gives it a LOWER log-probability
        # (40 of 40 words), and SDPO from it falls 21% -> 2.5%. nano-sdpo (recipes/nano_sdpo_sft.yaml) is nano also
        # SFT'd on SDPO's teacher prompt (half the rows) with replay of nano's own answers (the other half): its
        # teacher reads (better on 40 of 40 words, greedy 27/40 exact vs 8/40 without the solution) while its
        # bare-question exact match stays at 27% (nano: 21%). Measured from it: 27% -> 44.5%, +17.5 [+12, +23.5]
        # points (docs/nano.md).
        "model_name_or_path": "nano-sdpo",
        "dataset": "reasoning_gym",  # the book's task, as the recipe has it (NANO_COMMON: spell_backward, 3-8 letters)
        "num_samples": 3000,  # the prompt stream; a nano run draws well under it
        "max_completion_length": 24,  # the base answers in ~10-16 tokens; 24 leaves room to think a little
        "max_prompt_length": 128,  # the student prompt is ~37 tokens
        "max_reprompt_len": 192,  # the teacher prompt (question + demonstration + instruction) is ~120 tokens
        # The book's 8 rollouts per group, one group per micro-batch (its group token mean), 4 groups per step: the
        # 32 completions per step of the policy-gradient nano overlay (the book's 16 groups cost 4x the rollouts).
        "per_device_train_batch_size": 8,
        "effective_batch_size": 32,
        # Measured from nano-sdpo, 40 steps: lr 5e-6 +4 [+0.5, +7.5] points, 2e-5 (the policy gradients' nano rate)
        # +17.5 [+12, +23.5]. (From the nano base, whose teacher cannot read, 2e-5 collapsed within 15 steps; the
        # book's 1e-6 is for 1.7B weights.)
        "learning_rate": 2.0e-5,
        "max_steps": 40,
        "use_vllm": False,  # CPU
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
