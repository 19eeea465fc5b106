"""SFT rows that teach a small base to read SDPO's teacher prompt without teaching it more of the task itself.

SDPO (book chapter 12) distils the model towards itself prompted with a successful rollout as "Correct solution":
it presupposes a model that reads a demonstration in its prompt, as a pretrained 1.7B model does. The nano base
(recipes/nano_sft.yaml) was SFT'd on bare questions only and cannot: shown the answer it does worse (docs/nano.md).
This adapter mixes two kinds of rows, drawn like `reasoning_gym_sft`'s (same keys, `exclude` included):

  teacher rows   (the first `teacher_fraction` of the draw) the prompt SDPO's trainer builds for its teacher: the
                 system message + the book's reprompt (custom_losses/sdpo/config.py: question + "Correct solution:"
                 block holding the oracle completion + the closing instruction); completion = that oracle
                 completion. It teaches reading the demonstration, the skill SDPO takes for granted.
  replay rows    (the rest) the bare question; completion = the recipe's starting model's OWN greedy answer, right
                 or wrong. They keep the bare-question behaviour where it was: training on oracle answers here
                 (measured) lifts the base from 21% to 81% and leaves SDPO no room.

Recipe keys (those of `reasoning_gym_sft`, plus):
  dataset: reasoning_gym_sdpo_sft
  dataset_kwargs:
    teacher_fraction: 0.5              # share of teacher rows, in (0, 1]
Replay answers that run out of REPLAY_MAX_NEW_TOKENS are dropped (the chat template would close them with an end
token the model never produced). Columns: prompt, completion (as reasoning_gym_sft).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rlhf_recipes.data.base import DataError, DataSource
from rlhf_recipes.data.reasoning_gym_sft import COMPLETION, demonstration, draw_rows

if TYPE_CHECKING:
    from datasets import Dataset

logger = logging.getLogger(__name__)

REPLAY_MAX_NEW_TOKENS = 24  # the nano base answers in ~14 tokens (the SDPO nano overlay's completion budget)


def teacher_prompt(prompt: list[dict[str, str]], answer: str) -> list[dict[str, str]]:
    """The messages SDPO's trainer gives its teacher when the group's successful rollout is the oracle completion
    (TRL's SuccessfulRolloutTeacherContextBuilder: the system messages kept, the last user turn reprompted)."""
    from custom_losses.sdpo.config import BOOK_REPROMPT_TEMPLATE, BOOK_SOLUTION_TEMPLATE

    solution = BOOK_SOLUTION_TEMPLATE.format(successful_previous_attempt=COMPLETION.format(answer=answer))
    reprompt = BOOK_REPROMPT_TEMPLATE.format(prompt=prompt[-1]["content"], solution=solution, feedback="")
    return [*prompt[:-1], {"role": "user", "content": reprompt}]


def generate(recipe) -> "Dataset":
    from datasets import Dataset

    from rlhf_recipes.data.sampled_rollouts import generate_from
    from rlhf_recipes.models import resolve_model_path

    where = recipe.source
    kwargs = dict(recipe.args.dataset_kwargs or {})
    fraction = kwargs.pop("teacher_fraction", 0.5)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise DataError(f"{where}: dataset_kwargs.teacher_fraction must be a number in (0, 1] (the share of rows in "
                        f"SDPO's teacher prompt), got {fraction!r}")
    rows = draw_rows(recipe, kwargs)
    n_teacher = round(len(rows) * fraction)
    prompts, completions = [], []
    for prompt, answer in zip(rows["prompt"][:n_teacher], rows["answer"][:n_teacher]):
        prompts.append(teacher_prompt(prompt, answer))
        completions.append(demonstration(answer))
    replay_prompts = rows["prompt"][n_teacher:]
    replies = []
    if replay_prompts:
        groups = generate_from(resolve_model_path(recipe.model.model_name_or_path), replay_prompts, n=1,
                               batch_size=256, max_new_tokens=REPLAY_MAX_NEW_TOKENS,
                               desc="replay: the starting model's greedy answers")
        replies = [group[0] for group in groups]
    kept = [(p, r["text"]) for p, r in zip(replay_prompts, replies) if not r["truncated"]]
    logger.warning("%s: %d teacher-prompt rows, %d replay rows (%d replay answers ran out of %d tokens: dropped)",
                   where, n_teacher, len(kept), len(replies) - len(kept), REPLAY_MAX_NEW_TOKENS)
    prompts += [p for p, _ in kept]
    completions += [[{"role": "assistant", "content": text}] for _, text in kept]
    return Dataset.from_dict({"prompt": prompts, "completion": completions})


SOURCE = DataSource(
    name="reasoning_gym_sdpo_sft",
    columns=("prompt", "completion"),
    generate=generate,
)
