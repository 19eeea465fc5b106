"""The held-out rows of a recipe that reads a dataset (preference pairs, SFT conversations), in this order:

  0. a procedural source's own held-out rows, where it builds them (DataSource.heldout: pairs sampled on a
     reasoning-gym task's held-out draw), checked by the source itself;
  1. the recipe's own held-out split (eval_fraction > 0): exactly the rows the run held out (same seed);
  2. else the dataset's held-out split (DataSource.heldout_split, e.g. no_robots' test; the tiny profile
     reads its shipped fixture);
  3. else the rows after the training rows: the same (optionally shuffled) order, rows num_samples onward
     (the book's DPO trains on the first 6400 rows of UltraFeedback; the next ones were never seen).
In every case the prompts are compared with the training prompts and a held-out row whose prompt was
trained on is dropped (counted in the result). Nothing left is an error naming what to set.
"""

from __future__ import annotations

import json
from typing import Any

from rlhf_recipes.evaluation.base import EvalError


def prompt_key(row: dict[str, Any]) -> str:
    return json.dumps(row.get("prompt"), sort_keys=True)


def heldout_rows(recipe, count: int | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from rlhf_recipes.data.sources import SOURCES, _read, eval_split_seed, load_splits, normalize_rows, read_split

    args, source = recipe.args, SOURCES[recipe.args.dataset]
    if source.heldout is not None and not args.data_files:
        return source.heldout(recipe, count)
    if recipe.origin.get("data_files") == "command line":  # the user's own held-out file, as it is
        train, evals = load_splits(recipe)
        rows = [*train.to_list(), *(evals.to_list() if evals is not None else [])][:count]
        return rows, {"source": args.data_files, "split": "data_files", "seed": None, "problems": len(rows),
                      "overlaps_dropped": None, "construction": f"every row of {args.data_files} (--data_files; "
                      "not checked against the training rows)"}
    train, evals = load_splits(recipe)
    if evals is not None:
        rows, construction = evals.to_list(), (f"the run's own held-out split (eval_fraction {args.eval_fraction}, "
                                               f"seed {eval_split_seed(args)})")
        split = "eval_fraction"
    elif source.heldout_split is not None and not args.data_files and (
            not recipe.tiny or source.heldout_fixture is not None):
        rows, where = read_split(source, source.heldout_split, source.heldout_fixture, count, args.system_prompt,
                                 tiny=recipe.tiny, hub_id=args.dataset_name, config=args.dataset_config)
        rows = rows.to_list()
        construction, split = f"the dataset's {source.heldout_split} split ({where})", source.heldout_split
    elif args.num_samples is not None:
        raw, where = _read(source, recipe)
        if args.dataset_shuffle_seed is not None:
            raw = raw.shuffle(seed=args.dataset_shuffle_seed)
        end = len(raw) if count is None else min(len(raw), args.num_samples + count)
        if end <= args.num_samples:
            raise EvalError(f"{recipe.source}: the run trained on all {len(raw)} rows of {where} (num_samples "
                            f"{args.num_samples}), so none is held out; train with eval_fraction > 0, or evaluate "
                            "on other rows of the same schema with --data_files FILE")
        rows = normalize_rows(raw.select(range(args.num_samples, end)), source, where, args.system_prompt).to_list()
        construction = f"rows {args.num_samples}..{end - 1} of {where}, after the {args.num_samples} training rows"
        split = "after_training_rows"
    else:
        raise EvalError(f"{recipe.source}: the run trained on every row of `{args.dataset}` and held none out; "
                        "train with eval_fraction > 0 or num_samples, or give held-out rows with --data_files FILE")
    trained = {prompt_key(r) for r in train}
    kept = [r for r in rows if prompt_key(r) not in trained][:count]
    if not kept:
        raise EvalError(f"{recipe.source}: every held-out row's prompt is also a training prompt ({construction})")
    data = {"source": args.dataset_name or args.dataset, "split": split, "seed": args.dataset_shuffle_seed,
            "problems": len(kept), "overlaps_dropped": sum(prompt_key(r) in trained for r in rows),
            "construction": construction}
    return kept, data
