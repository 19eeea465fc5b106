"""Evaluate what a run produced on its task's held-out data, before and after, with intervals.

    rlhf-recipes evaluate outputs/grpo --baseline --k 8           # the run vs the model it started from
    rlhf-recipes evaluate outputs/grpo/checkpoint-500 --num_problems 100
    rlhf-recipes evaluate path/to/model --recipe recipes/grpo.yaml --output eval.json
    rlhf-recipes evaluate outputs/dpo --judge rm:outputs/preference_rm   # + win rate vs the reference
    rlhf-recipes evaluate outputs/preference_rm --quantize int8   # the change int8 weights make

MODEL is a run's output directory (its config.yaml is the recipe), a checkpoint inside one, or any saved
model or hub id with --recipe. The family's evaluator (rlhf_recipes/evaluation/) builds the held-out
problems from the recipe: reasoning-gym tasks drawn with another seed (policy gradients, SDPO), GSM8K's test
split (rejection sampling), held-out pairs (direct alignment, reward models), held-out conversations (SFT).
--baseline also scores the recipe's starting model (`model_name_or_path`) on the same problems; --quantize
scores the model unquantized and in int8/int4. Further --KEY VALUE options override the recipe (e.g.
--profile tiny, --data_files). Prints metric | before | after | difference [95% interval] and writes the
result to RUN_DIR/eval/<name>.json (a checkpoint's: RUN_DIR/eval/<name>-checkpoint-N.json), or --output.
Every metric, the held-out construction and the intervals: docs/evaluate.md#evaluate-held-out-before-and-after.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from rlhf_recipes.config import RecipeError, load_recipe
from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.run_folder import CONFIG_FILE, EVAL_SUBDIR, has_config
from rlhf_recipes.tools.document import number

# eval: the former name of heldout (the reward models' held-out split)
SPLITS = ("heldout", "eval", "all", "validation")


def find_recipe(model: Path, given: str | None) -> str:
    if given:
        return given
    for folder in (model, model.parent):  # a run's output dir, or a checkpoint inside one
        if has_config(folder):
            return str(folder / CONFIG_FILE)
    if not model.exists():
        raise RecipeError(f"{model}: no such run folder or model; give a run's output directory, a checkpoint in "
                          "one, or a model path with --recipe RECIPE.yaml")
    raise RecipeError(f"{model} holds no config.yaml (not a run's output directory): pass --recipe RECIPE.yaml")


def default_output(model: Path, name: str) -> Path:
    """RUN_DIR/eval/<name>.json; a checkpoint inside a run: RUN_DIR/eval/<name>-checkpoint-N.json."""
    if has_config(model.parent) and not has_config(model):
        return model.parent / EVAL_SUBDIR / f"{name}-{model.name}.json"
    if not model.is_dir():
        raise RecipeError(f"{model} is not a folder to write eval/{name}.json into: pass --output FILE.json")
    return model / EVAL_SUBDIR / f"{name}.json"


def check_model(model: Path) -> None:
    from rlhf_recipes.models import EMBEDDED
    from rlhf_recipes.validation import check_hub_model, check_model_folder, looks_local

    text = str(model)
    if text in EMBEDDED:
        return  # an embedded model (tiny, nano): built locally on first use
    if not looks_local(text) and not model.exists():
        # A hub id: offline or unreachable and not cached is the runner's one line, not a minute of retries.
        check_hub_model(text, "MODEL")
        return
    check_model_folder(text, "MODEL", tokenizer=False)
    from rlhf_recipes.tools.trained_model import check_weights_readable

    check_weights_readable(model, "MODEL")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlhf-recipes evaluate", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="run output dir, checkpoint, or saved model (with --recipe)")
    parser.add_argument("--recipe", help="recipe the task and data come from (default: MODEL's config.yaml)")
    parser.add_argument("--baseline", action="store_true", help="also evaluate the recipe's starting model")
    parser.add_argument("--k", type=int, default=0, help="pass@k from k sampled completions per problem "
                        "(reasoning-gym tasks; 0: greedy only)")
    parser.add_argument("--num_problems", type=int, help="held-out problems to evaluate (default: the evaluator's)")
    parser.add_argument("--seed", type=int, default=0, help="sampling and bootstrap seed")
    parser.add_argument("--batch_size", type=int, default=8, help="prompts (or pairs) per forward / generate call")
    parser.add_argument("--max_new_tokens", type=int, help="generation budget (default: the recipe's)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="load the model in this dtype")
    parser.add_argument("--quantize", choices=("int8", "int4"), help="compare the model with itself quantized")
    parser.add_argument("--judge", help="rm:PATH: a reward model that judges the policy against the reference "
                        "(direct alignment)")
    parser.add_argument("--split", choices=SPLITS, default="heldout",
                        help="heldout (default: the test problems); all: every row the recipe reads (reward models); "
                        "validation: reasoning-gym problems apart from the test ones, for choosing (a checkpoint, a "
                        "setting) without touching what is reported")
    parser.add_argument("--name", help="the result's name: RUN_DIR/eval/<name>.json (default: the split)")
    parser.add_argument("--output", type=Path, help="where to write the JSON instead")
    return parser


def main(argv: list[str] | None = None) -> int:
    args, overrides = make_parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    from rlhf_recipes.evaluation import EvalError, EvalOptions
    from rlhf_recipes.registry import evaluator_for

    split = "heldout" if args.split == "eval" else args.split
    try:
        for flag, value in (("--k", args.k), ("--num_problems", args.num_problems), ("--batch_size", args.batch_size),
                            ("--max_new_tokens", args.max_new_tokens)):
            if value is not None and value < (0 if flag == "--k" else 1):
                raise RecipeError(f"{flag}: expected {'an integer >= 0' if flag == '--k' else 'a positive integer'}, "
                                  f"got {value}")
        if args.quantize and args.baseline:
            raise RecipeError("--quantize compares the model with its quantized self; run --baseline separately")
        if args.model.is_dir():  # a folder without a saved model is named before the recipe is built (seconds)
            check_model(args.model)
        # TRL's config classes are not built (~3 s of imports): evaluation reads its settings with recipe.setting()
        recipe_file = find_recipe(args.model, args.recipe)
        try:
            recipe = load_recipe([recipe_file, *overrides], construct=False)
        except RecipeError:
            from rlhf_recipes.tools.tool_flags import refuse_misspelt_tool_flags

            refuse_misspelt_tool_flags(make_parser(), overrides, [recipe_file])
            raise
        from rlhf_recipes.cpu_launch import set_torch_threads

        set_torch_threads(recipe)  # the run's threads, before its held-out data (sampled rollouts, pairs) is built
        if not args.model.is_dir():  # a folder was checked above
            check_model(args.model)
        if args.baseline:  # the recipe's starting model is loaded too: the same check, naming where it is set
            from rlhf_recipes.validation import check_model as check_recipe_model

            check_recipe_model(recipe.model.model_name_or_path, recipe.where("model_name_or_path"))
        name = args.name or split
        output = args.output or default_output(args.model, name)
        options = EvalOptions(name=name, split=split, num_problems=args.num_problems, k=args.k, seed=args.seed,
                              batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, dtype=args.dtype,
                              quantize=args.quantize, judge=args.judge)
        evaluator = evaluator_for(recipe, options)
        from rlhf_recipes.evaluation.run import evaluate

        evaluator.data()  # the held-out problems: a data mistake is reported before any model loads
        result = evaluate(recipe, evaluator, str(args.model), baseline=args.baseline)
    except (RecipeError, EvalError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print_report(result)
    output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output, json.dumps(result, indent=2, default=str) + "\n")  # never a half-written result
    print(f"wrote {output}")
    return 0


def report_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """metric | before | after | difference [interval] (after's own interval when there is no baseline)."""
    before, diff, bounds = result.get("baseline") or {}, result.get("difference") or {}, result.get("intervals") or {}
    headers = ["metric", "before", "after", "difference [95% interval]"] if result.get("baseline") is not None else \
        ["metric", "value", "95% interval", "method"]
    rows = []
    for metric, value in result["metrics"].items():
        if result.get("baseline") is not None:
            d = diff.get(metric)
            cell = "-" if d is None or d.get("value") is None else (
                f"{d['value']:+.4g}" + (f" [{d['low']:+.4g}, {d['high']:+.4g}]" if d.get("low") is not None else ""))
            rows.append([metric, number(before.get(metric)), number(value), cell])
        else:
            b = bounds.get(metric) or {}
            interval = f"[{b['low']:.4g}, {b['high']:.4g}]" if b.get("low") is not None else "-"
            rows.append([metric, number(value), interval, b.get("method", "-")])
    return headers, rows


def print_report(result: dict) -> None:
    from rlhf_recipes.tools.document import print_table

    data, speed = result["data"], result["throughput"]
    # A reward model's best-of-N rows are other problems than its split's (the held-out draw): say both counts.
    selection = (result.get("details") or {}).get("best_of_n")
    also = f"; best-of-{selection['rollouts_per_problem']} on {selection['problems']} held-out problems" \
        if selection else ""
    title = (f"{result['algorithm']}: {result['evaluation']} ({data.get('problems')} problems{also}, "
             f"{result['comparison'] if result['comparison'] != 'none' else 'no baseline'})")
    print_table(*report_rows(result), title=title)
    rate = speed.get("problems_per_s")
    tokens = speed.get("generated_tokens_per_s")
    dropped = data.get("overlaps_dropped")  # None where the held-out rows cannot overlap (a split of their own)
    print(f"held-out data: {data.get('construction')}"
          + (f"; overlaps with training dropped: {dropped}" if dropped is not None else ""))
    print(f"throughput: {number(rate)} problems/s" + (f", {number(tokens)} generated tokens/s" if tokens else ""))
    details = result.get("details")
    if details and "demo" in details:
        from rlhf_recipes.evaluation.reward_model_book import format_report

        print(format_report({k: v for k, v in details.items() if k != "evaluation"}))  # the table has them
    for sample in result.get("samples", [])[:2]:
        print("sample:", json.dumps(sample)[:400])


if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"), format="%(levelname)s %(name)s: %(message)s")
    sys.exit(main())
