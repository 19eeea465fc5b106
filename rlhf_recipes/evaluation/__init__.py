"""Held-out evaluation of what a run produced, for every family: the runner's floor, so that training can run it
too (`eval_every`, callback.py) and `rlhf-recipes evaluate` is a thin CLI over it.

  intervals.py      Wilson, bootstrap and paired-bootstrap intervals, the unbiased pass@k (pure functions)
  base.py           options, per-problem Scores, their summary and difference; the Evaluator base class
  loading.py        the model to evaluate, optionally quantized (bitsandbytes int8 / int4)
  heldout.py        held-out rows of a dataset-reading recipe (its eval split, the dataset's test split, or
                    the rows after the training rows), checked against the training prompts
  reasoning.py      reasoning-gym tasks (policy gradients, SDPO)     gsm8k.py   GSM8K (rejection sampling, book)
  (a task's evaluator is picked by the data source the recipe trains on: task_evaluator below)
  preferences.py    direct alignment                                 sft.py     SFT
  task_preferences.py  direct alignment on pairs sampled on a task: preferences.py + the task's exact match
  reward_models.py  reward models                                    run.py     one evaluation -> its JSON document
  callback.py       periodic evaluation during training (eval/* metrics)
A family says which evaluator its runs get: `Family.evaluator(recipe, options)` (rlhf_recipes/families/);
`registry.evaluator_for(recipe, options)` asks the recipe's family and checks it.
"""

from __future__ import annotations

from rlhf_recipes.evaluation.base import EvalError, EvalOptions, Evaluator

__all__ = ["EvalError", "EvalOptions", "Evaluator", "task_evaluator"]


def task_evaluator(recipe, options: EvalOptions) -> Evaluator | None:
    """The evaluator of a verifiable-reward task, by the data source the recipe trains on (None: none here)."""
    from rlhf_recipes.evaluation.gsm8k import Gsm8kEvaluator
    from rlhf_recipes.evaluation.reasoning import ReasoningGymEvaluator

    # reasoning_gym_preferences: pairs sampled on a reasoning-gym task, whose held-out problems score the policy too
    by_source = {"reasoning_gym": ReasoningGymEvaluator, "reasoning_gym_preferences": ReasoningGymEvaluator,
                 "gsm8k": Gsm8kEvaluator}
    cls = by_source.get(recipe.args.dataset)
    return None if cls is None else cls(recipe, options)
