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
    # On top of config.NANO_COMMON: the book's task on the nano base (rlhf_recipes/nano.py), sized for a CPU. Unlike
    # tiny, nothing is faked: the nano base answers ~21% of held-out words exactly, so groups of 8 rollouts with a
    # success exist (about half of them at the start) and the book's threshold (correctness >= 1.0), redraw, teacher
    # prompt and loss all stay as the registry and the recipe set them; only what a CPU needs changes here.
    # SDPO does NOT learn on nano (docs/nano.md): its teacher is the live model reading a successful rollout in its
    # prompt, and a 0.7M model SFT'd on bare questions cannot read one (measured: the correct answer's log-probability
    # is LOWER with the solution shown, 40 of 40 words; greedy exact 0/40 with it, 5/40 without), so the student is
    # distilled towards a worse teacher. The run finishes and shows that; it is the limit of the model, not a tuning.
    nano_overlay = {
        "dataset": "reasoning_gym",  # the book's task, as the recipe has it ...
        "dataset_kwargs": {  # ... in the word range the nano base learned (recipes/nano_sft.yaml; the book's: 3-10)
            "tasks": [{"name": "spell_backward", "weight": 1, "config": {"min_word_len": 3, "max_word_len": 8}}],
            "seed": 42},
        "system_prompt": "DeepSeekZero",  # the book's prompt: one token of the nano tokenizer
        "num_samples": 3000,  # the prompt stream; a nano run draws well under it
        "max_completion_length": 24,  # the base answers in ~10-16 tokens; 24 leaves room to think a little
        "max_prompt_length": 128,  # the student prompt is ~37 tokens
        "max_reprompt_len": 192,  # the teacher prompt (question + demonstration + instruction) is ~120 tokens
        # The book's 8 rollouts per group, one group per micro-batch (its group token mean), 4 groups per step: the
        # 32 completions per step of the policy-gradient nano overlay (the book's 16 groups cost 4x the rollouts).
        "per_device_train_batch_size": 8,
        "effective_batch_size": 32,
        # Measured: at 2e-5 (the policy gradients' nano rate) the model degrades so fast that by step 15 it drew 877
        # prompts for 4 successful groups (max_draws 1600 would soon stop the run); at 5e-6, 40 steps finish in ~2.5
        # minutes, held-out exact match 21% -> 2.5%. (The book's 1e-6 is for 1.7B weights.)
        "learning_rate": 5.0e-6,
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
