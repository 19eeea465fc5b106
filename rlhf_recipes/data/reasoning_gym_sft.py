"""SFT demonstrations for reasoning-gym tasks in the book's format: the prompts the `reasoning_gym` adapter builds,
and the oracle answer inside the book's tags as the completion.

The nano profile's base (rlhf_recipes/nano.py, recipes/nano_sft.yaml) learns the task and the format from these
before any RL, as the book's pipeline puts SFT (chapter 4) before RL (chapter 6).

Recipe keys (as for `reasoning_gym`, plus `exclude`):
  dataset: reasoning_gym_sft
  num_samples: 8000                    # entries drawn; those excluded below are dropped (and counted)
  dataset_kwargs:
    tasks: [{name: spell_backward, config: {min_word_len: 3, max_word_len: 8}}]
    seed: 1
    exclude: {seed: 1000045, size: 2000}   # drop questions that appear in this other draw of the same tasks
  system_prompt: DeepSeekZero

`exclude` keeps demonstrations off a held-out split: the policy-gradient evaluator draws its held-out problems
with seed (training seed + 1000003) (rlhf_recipes/evaluation/reasoning.py), so an SFT base evaluated there has
never been shown those answers.

Completion: "<think>\\n\\n</think>\\n<answer>{answer}</answer>": an empty think block, because the oracle gives
no reasoning to imitate, and the book's format reward asks for all four tags; the RL recipes may then fill the
think block if that earns reward. Columns: prompt (system + user messages), completion (one assistant message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlhf_recipes.data.base import DataError, DataSource
from rlhf_recipes.data.reasoning_gym import build_rows, questions, training_seed

if TYPE_CHECKING:
    from datasets import Dataset

COMPLETION = "<think>\n\n</think>\n<answer>{answer}</answer>"


def demonstration(answer: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": COMPLETION.format(answer=answer)}]


def _excluded_questions(recipe, kwargs: dict, where: str) -> set[str]:
    exclude = kwargs.pop("exclude", None)
    if exclude is None:
        return set()
    if not isinstance(exclude, dict) or set(exclude) != {"seed", "size"} or not all(
            isinstance(v, int) and v >= 0 for v in exclude.values()):
        raise DataError(f"{where}: dataset_kwargs.exclude must be a mapping {{seed: INT, size: INT}} (the draw whose "
                        f"questions to leave out), got {exclude!r}")
    return questions(recipe, exclude["size"], exclude["seed"], kwargs)


def draw_rows(recipe, kwargs: dict) -> "Dataset":
    """`num_samples` entries of the recipe's composite (training seed), less those in `exclude`'s draw (counted);
    `kwargs` is dataset_kwargs without the caller's own keys (this function pops `exclude`)."""
    where, args = recipe.source, recipe.args
    if args.num_samples is None or args.num_samples <= 0:
        raise DataError(f"{where}: {args.dataset} generates its data: set `num_samples` > 0 (entries drawn)")
    excluded = _excluded_questions(recipe, kwargs, where)
    rows = build_rows(recipe, args.num_samples, training_seed(recipe), kwargs)
    kept = [i for i, prompt in enumerate(rows["prompt"]) if prompt[-1]["content"] not in excluded]
    if not kept:
        raise DataError(f"{where}: every drawn question is in dataset_kwargs.exclude's draw; draw more (num_samples)")
    if len(kept) < len(rows):
        import logging

        logging.getLogger(__name__).warning("%s: dropped %d of %d demonstrations whose question is in the excluded "
                                            "draw", where, len(rows) - len(kept), len(rows))
    return rows.select(kept)


def generate(recipe) -> "Dataset":
    from datasets import Dataset

    rows = draw_rows(recipe, dict(recipe.args.dataset_kwargs or {}))
    return Dataset.from_dict({"prompt": rows["prompt"], "completion": [demonstration(a) for a in rows["answer"]]})


SOURCE = DataSource(
    name="reasoning_gym_sft",
    columns=("prompt", "completion"),
    generate=generate,
)
