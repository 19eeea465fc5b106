"""Held-out evaluation of reward models: the book's numbers (rlhf_recipes/families/reward_model.py) with intervals.

Problems: the recipe's held-out split (eval_fraction, the rows the run held out; `--split all`: every row
it reads). Per kind:
  preference  per pair: accuracy (r_chosen > r_rejected; a tie is wrong, as the book counts it) and margin
              r_chosen - r_rejected, so both get intervals over pairs;
  outcome     top-1 and pairwise accuracy over a prompt's rollouts, and process: step accuracy: the book's
              aggregate numbers (no per-problem interval).
Where the recipe's data are rollouts sampled from a policy (DataSource.heldout_rollouts: the nano profile's ORM and
PRM), also best-of-N selection on held-out problems (evaluation/best_of_n.py): the share of problems whose
highest-scored rollout is correct, against a random pick and the oracle, with intervals over problems.
The result's `details` keeps the existing report: data statistics, every number, and the scored demo.
The baseline is the starting model with the freshly initialised (seeded) head that training started from.
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.data.reward_model_examples import reward_model_info, rm_kind, tokenize_split
from rlhf_recipes.evaluation.base import EvalError, Evaluator, Scores
from rlhf_recipes.evaluation.reward_model_book import demo, evaluate, pair_rewards, shows_book_demo, step_predictions


class RewardModelEvaluator(Evaluator):
    kind = "reward model on its held-out split"
    default_problems = None
    splits = ("heldout", "all")

    def __init__(self, recipe, options, load_model):
        super().__init__(recipe, options)
        self.load_model = load_model  # the family's: the starting model with its seeded scoring head

    def build_data(self):
        from datasets import concatenate_datasets

        from rlhf_recipes.data import load_splits
        from rlhf_recipes.data.sources import eval_split_seed

        train, evals = load_splits(self.recipe)
        if self.options.split == "all":
            rows = train if evals is None else concatenate_datasets([train, evals])
            construction = "every row the recipe reads (--split all)"
        elif evals is None:
            raise EvalError(f"{self.recipe.source}: eval_fraction is 0, so there is no held-out split; use --split "
                            "all (e.g. with --data_files held_out.jsonl) or set --eval_fraction")
        else:
            rows = evals
            construction = f"the run's held-out split (eval_fraction {self.recipe.args.eval_fraction})"
        if self.options.num_problems:
            rows = rows.select(range(min(self.options.num_problems, len(rows))))
        return rows, {"source": self.recipe.args.dataset_name or self.recipe.args.dataset, "split": self.options.split,
                      "seed": eval_split_seed(self.recipe.args), "problems": len(rows),
                      "construction": construction}

    def selection_rows(self) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
        """(held-out problems x N rollouts, their description) for best-of-N selection; None: the recipe's data
        source has none."""
        from rlhf_recipes.data import SOURCES

        source = SOURCES.get(self.recipe.args.dataset)
        if source is None or source.heldout_rollouts is None:
            return None
        if not hasattr(self, "_selection_rows"):
            self._selection_rows = source.heldout_rollouts(self.recipe, self.options.num_problems or 200)
        return self._selection_rows

    def load(self, path: str):
        from rewards.reward_model_scoring import load_reward_model
        from rlhf_recipes.evaluation.loading import device_of, load_kwargs

        try:
            if self.options.quantize:
                model, tokenizer, info = load_reward_model(path, **load_kwargs(self.recipe, self.options))
            else:
                model, tokenizer, info = load_reward_model(path, self.options.dtype)
                model.to(device_of(self.options))
        except ValueError as e:
            raise EvalError(str(e)) from None
        if info["kind"] != rm_kind(self.recipe):
            raise EvalError(f"{path} is a {info['kind']} reward model but {self.recipe.source} trains a "
                            f"{rm_kind(self.recipe)} one (algorithm {self.recipe.algorithm.name}); pass the recipe "
                            "it was trained with")
        model.reward_model_info = info
        return model.eval(), tokenizer

    def load_baseline(self, path: str):
        """The starting model with the head training began from (the family's own seeded initialisation)."""
        from rlhf_recipes.evaluation.loading import device_of
        from rlhf_recipes.models import load_tokenizer

        from transformers.utils import logging as hf_logging

        tokenizer = load_tokenizer(self.recipe.model)
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the new head is missing from the starting model's files, by design
        try:
            model = self.load_model(self.recipe, tokenizer)
        finally:
            hf_logging.set_verbosity(verbosity)
        model.reward_model_info = reward_model_info(self.recipe)
        return model.to(device_of(self.options)).eval(), tokenizer

    def score(self, model, tokenizer) -> Scores:

        rows, data = self.data()
        info = getattr(model, "reward_model_info", None) or reward_model_info(self.recipe)
        dataset, stats = tokenize_split(self.recipe, tokenizer, rows, self.options.split)
        details: dict[str, Any] = {"kind": info["kind"], "split": "all" if self.options.split == "all" else "eval",
                                   "data": stats}
        per_problem: dict[str, list[float]] = {}
        fixed: dict[str, float] = {}
        if info["kind"] == "preference":
            chosen, rejected = pair_rewards(model, dataset, tokenizer.pad_token_id, self.options.batch_size)
            from custom_losses.reward_models.losses import preference_metrics

            details["evaluation"] = preference_metrics(chosen, rejected)
            margins = [c - r for c, r in zip(chosen, rejected)]
            per_problem = {"accuracy": [float(m > 0) for m in margins], "margin": margins}
        else:
            if info["kind"] == "process":  # step accuracy per labelled step, so it gets a Wilson interval
                from custom_losses.reward_models.losses import step_metrics

                predicted, truth = step_predictions(model, dataset, tokenizer.pad_token_id, self.options.batch_size)
                details["evaluation"] = step_metrics(predicted, truth)  # evaluate()'s numbers, from one pass
                per_problem = {"step_accuracy": [float(a == b) for a, b in zip(predicted, truth)]}
            else:
                details["evaluation"] = evaluate(info, model, tokenizer, dataset, self.options.batch_size)
            fixed = {k: float(v) for k, v in details["evaluation"].items() if isinstance(v, (int, float))}
            fixed.pop("step_accuracy", None)  # a process RM's is per_problem's, with its interval
        details["demo"] = demo(info, model, tokenizer, rows, self.recipe.args.system_prompt) \
            if shows_book_demo(self.recipe) else []
        rates, samples = {"accuracy", "step_accuracy"}, []
        held_out = self.selection_rows()
        if held_out is not None:
            from rlhf_recipes.evaluation.best_of_n import RATES, best_of_n

            picked, samples = best_of_n(info, model, tokenizer, held_out[0], self.options.batch_size,
                                        self.options.samples)
            per_problem.update(picked)
            rates |= RATES
            details["best_of_n"] = held_out[1]
        return Scores(per_problem=per_problem, rates=frozenset(rates), fixed=fixed, details=details,
                      samples=samples,
                      decoding={"scoring": "the reward model's head", "max_length": info.get("max_length")})
