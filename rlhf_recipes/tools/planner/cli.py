#!/usr/bin/env python
"""Will this recipe fit on my GPUs? `rlhf-recipes plan RECIPE.yaml [--config_file ACCELERATE.yaml] [--KEY VALUE ...]`

Prints the predicted peak memory per GPU, term by term (weights, gradients, optimizer state,
activations with or without checkpointing, reference / reward models, the LM head, the KV
cache of generation), a verdict for a 48 GB A6000 (or --gpu-memory GiB), and the settings that
would make it fit. Reads the recipe like recipes/run.py (the same overrides work) and the
model's config.json (shipped for the book's models; fetched from the Hub otherwise): no
weights are downloaded and no GPU is needed.

Examples:
  rlhf-recipes plan recipes/grpo.yaml --config_file accelerate_configs/4gpu.yaml
  rlhf-recipes plan recipes/dpo.yaml --activation_checkpointing false
  rlhf-recipes plan recipes/dpo.yaml --model_name_or_path allenai/OLMo-2-1124-7B-SFT \
      --config_file accelerate_configs/zero3.yaml
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe")
    # --config_file: the flag's name in preflight and in `accelerate launch`, so one command line serves all three;
    # --config, its former spelling here, still works
    parser.add_argument("--config_file", "--config", dest="config",
                        help="accelerate config (accelerate_configs/*.yaml); default: one GPU")
    parser.add_argument("--gpu-memory", type=float, default=48.0, help="GiB per GPU (default 48, an RTX A6000)")
    parser.add_argument("--prompt-length", type=int, help="policy gradients: prompt tokens (default 256)")
    parser.add_argument("--json", help="also write the plan to this file")
    parser.add_argument("--no-suggestions", action="store_true")
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)

    from rlhf_recipes.config import RecipeError
    from rlhf_recipes.tools.document import write_result
    from rlhf_recipes.tools.planner import plan_recipe, read_launch
    from rlhf_recipes.tools.planner.report import render, suggest
    from rlhf_recipes.tools.planner.shapes import ShapeError

    recipe_argv = [args.recipe, *overrides]
    try:
        launch = read_launch(args.config)
        plan = plan_recipe(recipe_argv, launch, args.gpu_memory, prompt_len=args.prompt_length)
    except (RecipeError, ShapeError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    suggestions = None if args.no_suggestions else suggest(recipe_argv, plan, prompt_len=args.prompt_length)
    render(plan, suggestions)
    if args.json:
        data = plan.summary()
        data["suggestions"] = [{"change": s.change, "required_gib": round(s.plan.required_bytes / 2**30, 3)}
                               for s in suggestions or []]
        write_result(data, args.json)
    return 0 if plan.verdict != "does not fit" else 1


if __name__ == "__main__":
    sys.exit(main())
