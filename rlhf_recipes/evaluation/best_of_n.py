"""Best-of-N selection by a reward model: does it pick a correct rollout more often than a random pick?

What an ORM or PRM is for (the book's chapter 5: verifiers rank a policy's samples; chapter 9: rejection
sampling keeps the best of N): on held-out problems, each with N rollouts sampled from the policy and graded by the
task's scorer (DataSource.heldout_rollouts, e.g. data/reasoning_gym_rollouts.py), the reward model scores every
rollout the way it scores a policy's completions as a reward (rewards/reward_model_scoring.score_completions: the
ORM's rollout score; the PRM's probability that no step is bad, prod_steps (1 - P(bad))) and picks the highest.
Per problem:
  best_of_n_accuracy   1 if the picked rollout is correct (a tie goes to the first of the tied, in sampling
                       order: as good as a random pick among them)
  random_pick_accuracy the share of its N rollouts that are correct: the expected accuracy of a random pick
  oracle_accuracy      1 if any of its N rollouts is correct: the best any picker can do
  best_of_n_gain       best_of_n_accuracy - random_pick_accuracy; its bootstrap over problems resamples both on the
                       same problems, i.e. the paired bootstrap of the difference (evaluation/intervals.py)
"""

from __future__ import annotations

from typing import Any

import numpy as np

METRICS = ("best_of_n_accuracy", "random_pick_accuracy", "oracle_accuracy", "best_of_n_gain")
RATES = frozenset({"best_of_n_accuracy", "oracle_accuracy"})


def selection(scores: list[list[float]], correct: list[list[float]]) -> dict[str, list[float]]:
    """Per problem: the reward model's scores of its rollouts and their correctness (0/1) -> the four metrics."""
    out: dict[str, list[float]] = {name: [] for name in METRICS}
    for s, y in zip(scores, correct):
        y = np.asarray(y, dtype=float)
        picked = float(y[int(np.argmax(np.asarray(s, dtype=float)))])
        out["best_of_n_accuracy"].append(picked)
        out["random_pick_accuracy"].append(float(y.mean()))
        out["oracle_accuracy"].append(float(y.max()))
        out["best_of_n_gain"].append(picked - float(y.mean()))
    return out


def best_of_n(info: dict, model, tokenizer, rows: list[dict[str, Any]], batch_size: int,
              samples: int = 2) -> tuple[dict[str, list[float]], list[dict[str, Any]]]:
    """Score every held-out rollout with the reward model and pick one per problem (see the module doc):
    (the per-problem metrics, the first `samples` problems' distinct rollouts by score, for reading)."""
    from rewards.reward_model_scoring import score_completions

    prompts = [row["prompt"] for row in rows for _ in row["completions"]]
    completions = [c for row in rows for c in row["completions"]]
    flat = iter(score_completions(info, model, tokenizer, prompts, completions, batch_size))
    scores = [[next(flat) for _ in row["completions"]] for row in rows]
    correct = [[float(r >= 0.5) for r in row["rewards"]] for row in rows]
    shown = []
    for row, s, y in list(zip(rows, scores, correct))[:samples]:
        ranked = sorted({c: (round(v, 4), bool(ok)) for c, v, ok in zip(row["completions"], s, y)}.items(),
                        key=lambda item: -item[1][0])
        shown.append({"question": _tail(row["prompt"][-1]["content"], 60), "answer": row.get("answer"),
                      "rollouts_by_score": [[_tail(c, 40), v, ok] for c, (v, ok) in ranked]})
    return selection(scores, correct), shown


def _tail(text: str, n: int) -> str:
    """The last n characters, marked with an ellipsis where cut (a cut "<think>" read as the model's own "hink>")."""
    return text if len(text) <= n else "…" + text[-(n - 1):]
