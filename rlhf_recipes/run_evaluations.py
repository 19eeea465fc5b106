"""The run's held-out evaluation callbacks, built from its recipe before training starts (a data mistake stops the
start, not step 50): `eval_every` (evaluation/callback.py's PeriodicEvaluation) and `heldout_target`
(evaluation/target.py's HeldoutTarget, how the nano bases are built). Each asks the recipe's family for its held-out
evaluator (registry.evaluator_for), which is why this stands above the registry and not inside evaluation/."""

from __future__ import annotations

from pathlib import Path

from rlhf_recipes.config import load_recipe
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.evaluation.base import EvalOptions
from rlhf_recipes.evaluation.callback import PeriodicEvaluation
from rlhf_recipes.evaluation.target import Goal, HeldoutTarget
from rlhf_recipes.paths import recipe_path
from rlhf_recipes.registry import evaluator_for


def periodic_evaluation(recipe) -> PeriodicEvaluation | None:
    """The callback for a recipe with eval_every > 0 (its problems built now: a mistake stops the start)."""
    every = recipe.args.eval_every
    if not every:
        return None
    options = EvalOptions(name="periodic", num_problems=recipe.args.eval_problems, k=0, seed=recipe.training.seed,
                          batch_size=recipe.training.per_device_eval_batch_size or 8, samples=0)
    evaluator = evaluator_for(recipe, options)
    evaluator.data()
    return PeriodicEvaluation(evaluator, every)


EVAL_BATCH_SIZE = 50  # as nano-book's `rlhf-recipes evaluate ... --batch_size 50`: the same greedy numbers


def heldout_target(recipe, argv: list[str]) -> HeldoutTarget | None:
    """The callback for a recipe's `heldout_target` (a Goal's fields; None: no target, the run trains its steps). Its
    evaluator is the held-out evaluator of `recipes/<goal.recipe>.yaml --profile nano`, the one the nano tables use,
    on its first `goal.problems` problems, built before training starts. `argv`: the run's command line, recorded
    (less its output folder, often a temporary one) as how the build was asked for."""
    goal = recipe.args.heldout_target
    if goal is None:
        return None
    try:
        goal = Goal(**{**goal, "band": tuple(goal.get("band", (0.0, 1.0)))})
    except (TypeError, ValueError) as e:
        raise RecipeError(f"{recipe.where('heldout_target')}: {e} (fields: {', '.join(Goal.__dataclass_fields__)})") \
            from None
    # Loading this recipe resolves no model (construct=False): the base being built is not asked for.
    judge = load_recipe([str(recipe_path(goal.recipe)), "--profile", "nano"], construct=False)
    evaluator = evaluator_for(judge, EvalOptions(name="base_target", split=goal.split, num_problems=goal.problems,
                                                 batch_size=EVAL_BATCH_SIZE, samples=0))
    evaluator.data()  # the held-out problems, built before training starts
    overrides = list(argv[1:])
    for key in ("--output_dir", "--heldout_target"):  # a temporary folder's path; the goal is recorded apart
        if key in overrides:
            at = overrides.index(key)
            del overrides[at:at + 2]
    built_by = {"recipe": f"recipes/{Path(argv[0]).name}", "overrides": overrides,
                "runner": "recipes/run.py (the SFT recipe through the normal runner)"}
    return HeldoutTarget(evaluator, goal, built_by)
