"""Reward-model data sampled from a policy on a reasoning-gym task: the nano profile's ORM and PRM data.

The book trains its ORM on a policy's own samples graded by the answer checker (RLHF-Book/gsm8k-qwen3-0.6B-rollouts)
and its PRM on step-labelled solutions (PRM800K). Here both come from rollouts sampled from a policy (the nano
SFT base) on the recipe's reasoning-gym composite and scored by the task's own scorer
(data/sampled_rollouts.py: cached on disk, so the ORM, the PRM and their evaluations share one sampling run):

  reasoning_gym_rollouts  the ORM's schema, as gsm8k_rollouts: one row per prompt, `prompt` (system + user
                          messages, as the policy saw them), `completions`, `rewards` (1.0 exact, else 0.0: the
                          book's binary correctness; the task's partial credit is not an outcome label).
  reasoning_gym_steps     the PRM's schema, as prm800k: one row per rollout, `prompt` (the question text, which the
                          recipe's prompt_template formats), `completions` (the steps) and `labels` (-1/0/+1).

PRM steps: the characters of the answer (the nano base's think block is empty, so its answer is the only
reasoning it writes; spell_backward spells it letter by letter), then `</answer>`, the step where the answer ends
(rewards/reward_model_encoding.py `answer_character_steps`, so a saved PRM splits a completion the same way):
  - a character is +1 while the answer so far is a prefix of the gold answer (case-insensitive, as the task's
    scorer compares), -1 at the first character that is not: a wrong letter, or a letter past the gold's end;
  - `</answer>` is +1 when the answer has the gold's length (all of it right), -1 when it stops short;
  - PRM800K-like, a trajectory ends at its first -1 step: PRM800K's labellers stop rating a solution at its first
    bad step, so what comes after an error is never labelled (a step after a wrong letter is neither right nor
    wrong on its own terms). The neutral class (0) never occurs: a letter is right or wrong.
Rollouts without an <answer> have no steps and are dropped (counted).

Recipe keys (as for `reasoning_gym`, plus `rollouts`):
  dataset: reasoning_gym_rollouts      # or reasoning_gym_steps
  num_samples: 1000                    # prompts drawn; each gets `n` rollouts
  dataset_kwargs:
    tasks: [{name: spell_backward, weight: 1, config: {min_word_len: 3, max_word_len: 8}}]
    seed: 42
    rollouts: {policy: nano, n: 8, temperature: 0.3, top_p: 0.95, max_new_tokens: 24}

`heldout_rollouts` is the same construction on the held-out evaluator's problems (seed + 1000003, training
questions skipped: evaluation/reasoning.py), in the ORM's schema, for best-of-N selection
(evaluation/best_of_n.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlhf_recipes.data.base import DataError, DataSource
from rlhf_recipes.data.reasoning_gym import HELDOUT_SEED_OFFSET, questions, system_prompt_text, training_seed, unseen

if TYPE_CHECKING:
    from datasets import Dataset

ROLLOUT_KEYS = {"policy": str, "n": int, "temperature": float, "top_p": float, "max_new_tokens": int}
EXAMPLE = "{policy: nano, n: 8, temperature: 0.3, top_p: 0.95, max_new_tokens: 24}"


def rollout_settings(recipe) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the task's dataset_kwargs without `rollouts`, the validated `rollouts` settings)."""
    where = recipe.source
    kwargs = dict(recipe.args.dataset_kwargs or {})
    settings = kwargs.pop("rollouts", None)
    if not isinstance(settings, dict) or set(settings) != set(ROLLOUT_KEYS):
        raise DataError(f"{where}: {recipe.args.dataset} samples its data from a policy: set dataset_kwargs.rollouts "
                        f"to a mapping with keys {sorted(ROLLOUT_KEYS)}, e.g. {EXAMPLE}; got {settings!r}")
    for key, kind in ROLLOUT_KEYS.items():
        value = settings[key]
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else kind):
            raise DataError(f"{where}: dataset_kwargs.rollouts.{key} must be a {kind.__name__}, got {value!r}")
    if settings["n"] < 1 or settings["max_new_tokens"] < 1 or not 0 < settings["top_p"] <= 1 \
            or settings["temperature"] <= 0:
        raise DataError(f"{where}: dataset_kwargs.rollouts needs n >= 1, max_new_tokens >= 1, 0 < top_p <= 1 and "
                        f"temperature > 0, got {settings}")
    return kwargs, settings


def sample(recipe, size: int, seed: int) -> list[dict[str, Any]]:
    """`size` problems of the recipe's composite (seed `seed`) x n rollouts of its policy, scored (cached)."""
    from rlhf_recipes.data.sampled_rollouts import sampled_rollouts
    from rlhf_recipes.models import resolve_model_path

    kwargs, s = rollout_settings(recipe)
    return sampled_rollouts(recipe, resolve_model_path(s["policy"]), size=size, seed=seed, n=s["n"],
                            max_new_tokens=s["max_new_tokens"], dataset_kwargs=kwargs,
                            sampling={"temperature": s["temperature"], "top_p": s["top_p"]})


def step_labels(answer: str, gold: str) -> list[int]:
    """Ratings of an answer's steps (its characters, then the end): see the module doc."""
    answer, gold = answer.lower(), gold.lower()
    labels = []
    for i, char in enumerate(answer):
        if i >= len(gold) or char != gold[i]:
            return labels + [-1]  # the first wrong character ends the trajectory (PRM800K)
        labels.append(1)
    return labels + [1 if len(answer) == len(gold) else -1]


def _training_rows(recipe) -> list[dict[str, Any]]:
    args = recipe.args
    if args.num_samples is None or args.num_samples <= 0:
        raise DataError(f"{recipe.source}: {args.dataset} samples its data: set `num_samples` > 0 (prompts drawn)")
    return sample(recipe, args.num_samples, training_seed(recipe))


def outcome_row(row: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": row["prompt"], "completions": row["completions"],
            "rewards": [float(score == 1.0) for score in row["scores"]]}


def generate_rollouts(recipe) -> "Dataset":
    from datasets import Dataset

    return Dataset.from_list([outcome_row(row) for row in _training_rows(recipe)])


def generate_steps(recipe) -> "Dataset":
    import logging

    from datasets import Dataset

    from rewards.reward_model_encoding import answer_character_steps

    rows, dropped = [], 0
    for row in _training_rows(recipe):
        question = row["prompt"][-1]["content"]
        for completion in row["completions"]:
            steps = answer_character_steps(completion)
            if not steps:
                dropped += 1
                continue
            labels = step_labels("".join(steps[:-1]), row["answer"])
            rows.append({"prompt": question, "completions": steps[:len(labels)], "labels": labels})
    if dropped:
        logging.getLogger(__name__).warning("%s: dropped %d rollouts without an <answer> (no steps)", recipe.source,
                                            dropped)
    if not rows:
        raise DataError(f"{recipe.source}: no rollout has an <answer>: nothing to label")
    return Dataset.from_list(rows)


def heldout_rollouts(recipe, count: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`count` held-out problems x n rollouts, in the ORM's schema (+ `answer`): the held-out evaluator's draw
    (training seed + HELDOUT_SEED_OFFSET), questions that appear among the training prompts skipped."""
    kwargs, settings = rollout_settings(recipe)
    seed = training_seed(recipe)
    trained = questions(recipe, recipe.args.num_samples or 0, seed, kwargs)
    kept, overlaps = unseen(sample(recipe, count + max(8, count // 4), seed + HELDOUT_SEED_OFFSET), trained)
    kept = [{**outcome_row(row), "answer": row["answer"]} for row in kept[:count]]
    data = {"source": recipe.args.dataset, "split": "heldout", "seed": seed + HELDOUT_SEED_OFFSET,
            "training_seed": seed, "problems": len(kept), "rollouts_per_problem": settings["n"],
            "overlaps_dropped": overlaps, "sampling": settings,
            "construction": f"the recipe's composite drawn with seed {seed} + {HELDOUT_SEED_OFFSET} (the held-out "
                            "evaluator's draw), training questions skipped; n rollouts per problem sampled from "
                            "the policy and scored by the task's scorer (exact = correct)"}
    return kept, data


ROLLOUTS_SOURCE = DataSource(
    name="reasoning_gym_rollouts",
    columns=("prompt", "completions", "rewards"),
    generate=generate_rollouts,
    system_prompt_text=system_prompt_text,
    heldout_rollouts=heldout_rollouts,
)

STEPS_SOURCE = DataSource(
    name="reasoning_gym_steps",
    columns=("prompt", "completions", "labels"),
    generate=generate_steps,
    system_prompt_text=system_prompt_text,
    heldout_rollouts=heldout_rollouts,
)
