"""`python -m rlhf_recipes.tools.nano_base RECIPE.yaml --goal JSON --output_dir DIR [--KEY VALUE ...]`: one nano
base build, the SFT recipe through the normal runner with the held-out target rule (rlhf_recipes/evaluation/target.py).

rlhf_recipes/nano.py starts this in a subprocess the first time a nano run needs a base (a run configures logging,
seeds and threads for its whole process); nano.py cannot import it (it stands below the evaluators and the
runner), so it names the module. The goal's evaluator is the held-out evaluator of `recipes/<goal.recipe>.yaml
--profile nano`, the one the nano tables use, on its first `goal.problems` problems at batch size 50 (nano-book's
evaluation batch size: the same greedy numbers).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

EVAL_BATCH_SIZE = 50  # as nano-book's `rlhf-recipes evaluate ... --batch_size 50`


def main(argv: list[str] | None = None) -> int:
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.evaluation import EvalOptions, evaluator_for
    from rlhf_recipes.evaluation.target import Goal, HeldoutTarget
    from rlhf_recipes.paths import recipe_path
    from rlhf_recipes.train import main as train

    argv = list(sys.argv[1:] if argv is None else argv)
    at = argv.index("--goal")
    goal = json.loads(argv[at + 1])
    del argv[at:at + 2]
    goal = Goal(**{**goal, "band": tuple(goal.get("band", (0.0, 1.0)))})
    # Loading this recipe resolves no model (construct=False): the base being built is not asked for.
    judge = load_recipe([str(recipe_path(goal.recipe)), "--profile", "nano"], construct=False)
    evaluator = evaluator_for(judge, EvalOptions(name="base_target", num_problems=goal.problems,
                                                 batch_size=EVAL_BATCH_SIZE, samples=0))
    evaluator.data()  # the held-out problems, built before training starts
    overrides = argv[1:]
    if "--output_dir" in overrides:  # a temporary folder's path: not part of how the base was built
        at = overrides.index("--output_dir")
        del overrides[at:at + 2]
    built_by = {"recipe": f"recipes/{Path(argv[0]).name}", "overrides": overrides,
                "runner": "python -m rlhf_recipes.train (the SFT recipe through the normal runner)"}
    return train(argv, extra_callbacks=(HeldoutTarget(evaluator, goal, built_by),))


if __name__ == "__main__":
    sys.exit(main())
