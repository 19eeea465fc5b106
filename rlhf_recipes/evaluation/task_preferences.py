"""Held-out evaluation of a direct-alignment run whose pairs were sampled on a verifiable task (the nano profile's
DPO on spell_backward): the preference numbers AND the task's own accuracy, in one result.

Preference pairs say whether the policy now ranks the right answer above its own likely mistake; only the task's
scorer says whether that made it answer better. So both are scored on held-out data, each with its baseline and
interval:
  preferences   PreferenceEvaluator (preferences.py) on held-out pairs built like the training pairs from the
                task's held-out draw (the data source's `heldout`): implicit_accuracy, implicit_margin,
                logprob_accuracy;
  task          the task's evaluator (task_evaluator: reasoning.py for reasoning-gym), greedy, on its held-out
                problems: exact_match, mean_score, format_rate, mean_length, truncated_rate.
Their metric names differ, so one Scores holds both; each keeps its own per-problem values (the pairs and the
problems are different held-out sets, so the two parts have their own counts).
"""

from __future__ import annotations

from dataclasses import replace

from rlhf_recipes.evaluation.base import Evaluator, Scores
from rlhf_recipes.evaluation.preferences import PreferenceEvaluator


def merged(preferences: Scores, task: Scores) -> Scores:
    """One Scores with both parts' metrics; the task's decoding, throughput and samples (it generates)."""
    clash = set(preferences.per_problem) & set(task.per_problem)
    assert not clash, f"metric names shared by both parts: {clash}"
    return replace(task, per_problem={**preferences.per_problem, **task.per_problem},
                   rates=preferences.rates | task.rates, weights={**preferences.weights, **task.weights},
                   derived={**preferences.derived, **task.derived}, fixed={**preferences.fixed, **task.fixed},
                   decoding={"preferences": preferences.decoding, **task.decoding},
                   details={**preferences.details, **task.details})


class TaskPreferenceEvaluator(PreferenceEvaluator):
    kind = ("held-out preference pairs sampled on the task (implicit-reward accuracy, margins) and the task's "
            "held-out problems (exact match, greedy)")
    default_problems = 200  # pairs, and the task's problems (its evaluator's default)

    def __init__(self, recipe, options, task: Evaluator):
        super().__init__(recipe, options)
        self.task = task

    def check(self) -> None:
        super().check()
        self.task.check()

    def build_data(self):
        pairs, pair_data = super().build_data()
        _, task_data = self.task.data()
        return pairs, {**pair_data, "task": task_data}

    def score(self, model, tokenizer) -> Scores:
        return merged(super().score(model, tokenizer), self.task.score(model, tokenizer))

    def prompts(self):
        return self.task.prompts()
