#!/usr/bin/env python
"""Evaluate a trained reward model: the book's numbers on held-out data, and a scored demo.

    rlhf-recipes evaluate outputs/preference_rm
    rlhf-recipes evaluate outputs/orm/checkpoint-500 --batch_size 32
    rlhf-recipes evaluate path/to/rm --recipe recipes/hh_rm.yaml --split all --data_files test.jsonl

MODEL is a run's output directory (its config.yaml is the recipe) or a checkpoint inside one,
or any saved reward model with --recipe. The data come from the recipe, so the held-out split
is the one the run held out (same rows, same seed). Further --KEY VALUE options override the
recipe (e.g. --num_samples, --data_files, --dataset_split, --profile tiny).
Prints a table and writes eval_results.json into MODEL (or --output):
  preference  pairwise accuracy (r_chosen > r_rejected) and mean margin;
  outcome     top-1 accuracy (the best-scored rollout of a prompt is correct) and pairwise
              accuracy over (correct, incorrect) rollouts of a prompt, with baselines;
  process     step accuracy (argmax of bad/neutral/good at each step), with the majority baseline.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path


from rlhf_recipes.config import RecipeError, load_recipe
from rlhf_recipes.registry import family_of


def find_recipe(model: Path, given: str | None) -> str:
    if given:
        return given
    for folder in (model, model.parent):  # a run's output dir, or a checkpoint inside one
        if (folder / "config.yaml").is_file():
            return str(folder / "config.yaml")
    raise RecipeError(f"{model} holds no config.yaml (not a run's output directory): pass --recipe RECIPE.yaml")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("model", type=Path, help="saved reward model (run output dir or checkpoint)")
    parser.add_argument("--recipe", help="recipe the data come from (default: MODEL's config.yaml)")
    parser.add_argument("--split", choices=("eval", "all"), default="eval",
                        help="the recipe's held-out split (default) or every row it reads")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="load the model in this dtype")
    parser.add_argument("--output", type=Path, help="where to write the JSON (default: MODEL/eval_results.json)")
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        recipe = load_recipe([find_recipe(args.model, args.recipe), *overrides])
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not family_of(recipe.algorithm).trains_reward_model:
        print(f"error: {recipe.source} is a `{recipe.algorithm.name}` recipe, not a reward model's", file=sys.stderr)
        return 2

    from rlhf_recipes.families.reward_model import evaluate_saved, format_report

    try:
        results = evaluate_saved(str(args.model), recipe, args.split, args.batch_size, args.dtype)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_report(results))
    output = args.output or args.model / "eval_results.json"
    output.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
