"""What every held-out evaluation shares: how it runs (EvalOptions), the per-problem scores it returns, and their
summary.

An evaluator (one module per kind of task in this package) turns a model into `Scores`: for each metric one
value per held-out problem, in a fixed problem order. Everything after that is common and lives here: the
mean of each metric, its interval (Wilson for 0/1 rates, bootstrap for means), and, when a baseline was
scored on the same problems, the paired-bootstrap interval of the difference. A family says which
evaluator its runs get (`Family.evaluator`, rlhf_recipes/families/base.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from rlhf_recipes.evaluation import intervals
from rlhf_recipes.evaluation.options import EvalError, EvalOptions  # noqa: F401  (the evaluators' names)


@dataclass
class Scores:
    """One model's per-problem numbers on the held-out problems."""

    per_problem: dict[str, list[float]]  # metric -> one value per problem, in the problem order
    rates: frozenset[str] = frozenset()  # metrics whose per-problem values are 0/1 (Wilson interval)
    weights: dict[str, list[float]] = field(default_factory=dict)  # metric -> per-problem weights (e.g. tokens)
    derived: dict[str, tuple[str, Callable]] = field(default_factory=dict)  # name -> (metric, monotone transform)
    fixed: dict[str, float] = field(default_factory=dict)  # numbers without per-problem values (no interval)
    decoding: dict[str, Any] = field(default_factory=dict)
    throughput: dict[str, float] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # the evaluator's own report (e.g. a reward model's demo)


def _exp(x):
    import numpy as np

    return np.exp(np.minimum(x, 700.0))


def summarize(scores: Scores, seed: int) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """(metrics, intervals): each metric's mean over problems and its 95% interval, with the method named."""
    import numpy as np

    metrics: dict[str, float] = {}
    bounds: dict[str, dict[str, Any]] = {}
    for name, values in scores.per_problem.items():
        weights = scores.weights.get(name)
        v = np.asarray(values, dtype=float)
        w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=float)
        metrics[name] = float(intervals.weighted_mean(v, w)) if v.size else math.nan
        if name in scores.rates:
            low, high = intervals.wilson(int(v.sum()), int(v.size))
            bounds[name] = {"low": low, "high": high, "method": "wilson"}
        else:
            low, high = intervals.bootstrap(v, seed, weights)
            bounds[name] = {"low": low, "high": high, "method": "bootstrap over problems"}
    for name, (base, transform) in scores.derived.items():
        metrics[name] = float(transform(np.asarray(metrics[base])))
        low, high = intervals.bootstrap(scores.per_problem[base], seed, scores.weights.get(base), transform)
        bounds[name] = {"low": low, "high": high, "method": f"bootstrap over problems (of {base})"}
    metrics.update(scores.fixed)
    return metrics, bounds


def difference(after: Scores, before: Scores, seed: int) -> dict[str, dict[str, float]]:
    """after - before per metric, with a paired bootstrap interval over the shared problems."""
    out: dict[str, dict[str, float]] = {}
    for name, values in after.per_problem.items():
        if name not in before.per_problem or len(before.per_problem[name]) != len(values):
            continue
        value, low, high = intervals.paired_bootstrap(values, before.per_problem[name], seed,
                                                      after.weights.get(name), before.weights.get(name))
        out[name] = {"value": value, "low": low, "high": high, "method": "paired bootstrap over problems"}
    for name, (base, transform) in after.derived.items():
        if base in out:
            value, low, high = intervals.paired_bootstrap(after.per_problem[base], before.per_problem[base], seed,
                                                          after.weights.get(base), before.weights.get(base), transform)
            out[name] = {"value": value, "low": low, "high": high, "method": f"paired bootstrap (of {base})"}
    for name, value in after.fixed.items():
        if name in before.fixed:
            out[name] = {"value": value - before.fixed[name], "low": math.nan, "high": math.nan, "method": "none"}
    return out


class Evaluator:
    """A held-out evaluation: its problems (built once per recipe) and how a model is scored on them."""

    kind = ""  # what it measures, for the result and the docs
    default_problems = 200
    splits = ("heldout",)  # what `--split` may name (EvalOptions.split)

    def __init__(self, recipe, options: EvalOptions):
        self.recipe = recipe
        self.options = options
        self._data: tuple[list[dict[str, Any]], dict[str, Any]] | None = None

    def check(self) -> None:
        """Refuse what cannot run (before any model loads); EvalError with one line."""
        if self.options.judge is not None:
            raise EvalError(f"--judge: {self.recipe.source} is a `{self.recipe.algorithm.name}` recipe, whose "
                            f"evaluation ({self.kind}) takes no judge; --judge rm:PATH is for direct-alignment recipes")

    def num_problems(self) -> int:
        return self.options.num_problems or self.default_problems

    def data(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """(problems, description of the held-out data: source, split, seed, size, construction)."""
        if self._data is None:
            self._data = self.build_data()
        return self._data

    def build_data(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        raise NotImplementedError

    def load(self, path: str):
        """(model, tokenizer) for a saved model or hub id; a causal LM unless the evaluator says otherwise."""
        from rlhf_recipes.evaluation.loading import load_causal_lm

        return load_causal_lm(path, self.recipe, self.options)

    def load_baseline(self, path: str):
        """(model, tokenizer) of the starting model, loaded the way training started from it."""
        return self.load(path)

    def score(self, model, tokenizer) -> Scores:
        raise NotImplementedError

    def chat_template_kwargs(self) -> dict | None:
        """How the recipe renders its prompts: its `enable_thinking` (rejection sampling) or its
        `chat_template_kwargs` (policy gradients, SDPO)."""
        if self.recipe.has("enable_thinking"):
            return {"enable_thinking": self.recipe.setting("enable_thinking")}
        return self.recipe.setting("chat_template_kwargs")

    def grade(self, completion: str, problem: dict[str, Any]) -> dict[str, Any]:
        """One completion of one held-out problem (or of a training row of the same task) graded as score()
        grades it: a dict with at least `correct` (bool). Task evaluators only."""
        raise NotImplementedError(f"{type(self).__name__} grades no single completions")

    def grading(self) -> str:
        """Which rule grade() applies, said in final_results.json (GSM8K: its \\boxed{} rule)."""
        return self.kind

    def prompts(self) -> tuple[list[list[dict]], dict | None, int] | None:
        """(chats, chat_template_kwargs, max_new_tokens) on which a policy's own generations are compared with its
        quantized copy (KL); None: not a policy."""
        return None
