"""reasoning-gym procedural tasks -> conversational prompts plus the columns the rewards need.

Generated, not downloaded: the same code serves real runs and the tiny profile (offline).
As in the book: a reasoning-gym *composite* dataset of `num_samples` entries with the given
seed and weighted task specs; messages = a system prompt (DeepSeek-R1-Zero style by default)
then the task's question.

Recipe keys:
  dataset: reasoning_gym
  num_samples: 3000                    # the composite's size (the book's data size)
  dataset_kwargs:
    tasks:                             # any reasoning-gym task(s), each with its own config
      - {name: spell_backward, weight: 1, config: {min_word_len: 3, max_word_len: 10}}
    seed: 42                           # default: the recipe's `seed`
  system_prompt: DeepSeekZero          # a reasoning_gym.utils.SYSTEM_PROMPTS name or literal text

Columns: prompt (system + user messages), rg_dataset (composite spec JSON), rg_index
(entry index), answer (the oracle answer, for logs), task (the entry's task name).
"""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from rlhf_recipes.data.base import DataError, DataSource

if TYPE_CHECKING:
    from datasets import Dataset

DEFAULT_SYSTEM_PROMPT = "DeepSeekZero"  # the book's: reasoning_gym.utils.SYSTEM_PROMPTS["DeepSeekZero"]
_KWARGS = {"tasks", "seed"}
_TASK_KEYS = {"name", "weight", "config"}


def system_prompt_text(value: str | None) -> str:
    """A SYSTEM_PROMPTS name (e.g. 'DeepSeekZero', 'default') or literal text; None -> the book's."""
    from reasoning_gym.utils import SYSTEM_PROMPTS

    value = DEFAULT_SYSTEM_PROMPT if value is None else value
    return SYSTEM_PROMPTS.get(value, value)


def parse_task_specs(kwargs: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """Validate `dataset_kwargs.tasks` against reasoning-gym's registry; errors name the bad key or task."""
    from reasoning_gym.factory import DATASETS

    unknown = set(kwargs) - _KWARGS
    if unknown:
        raise DataError(f"{where}: unknown dataset_kwargs key(s) {sorted(unknown)} for reasoning_gym; "
                        f"expected {sorted(_KWARGS)}")
    tasks = kwargs.get("tasks")
    if not tasks or not isinstance(tasks, list):
        raise DataError(f"{where}: reasoning_gym needs dataset_kwargs.tasks, a list like "
                        "[{name: spell_backward, weight: 1, config: {min_word_len: 3}}]")
    specs = []
    for i, task in enumerate(tasks):
        if isinstance(task, str):
            task = {"name": task}
        if not isinstance(task, dict) or "name" not in task:
            raise DataError(f"{where}: dataset_kwargs.tasks[{i}] must be a mapping with a `name`, got {task!r}")
        extra = set(task) - _TASK_KEYS
        if extra:
            raise DataError(f"{where}: dataset_kwargs.tasks[{i}]: unknown key(s) {sorted(extra)}; "
                            f"expected {sorted(_TASK_KEYS)}")
        name = task["name"]
        if name not in DATASETS:
            close = difflib.get_close_matches(str(name), list(DATASETS), n=1, cutoff=0.6)
            hint = f" Did you mean `{close[0]}`?" if close else ""
            raise DataError(f"{where}: unknown reasoning-gym task `{name}`.{hint} "
                            f"({len(DATASETS)} tasks are registered; see reasoning_gym.factory.DATASETS)")
        weight = task.get("weight", 1)
        if not isinstance(weight, (int, float)) or weight <= 0:
            raise DataError(f"{where}: dataset_kwargs.tasks[{i}] ({name}): weight must be > 0, got {weight!r}")
        config = task.get("config") or {}
        if not isinstance(config, dict):
            raise DataError(f"{where}: dataset_kwargs.tasks[{i}] ({name}): config must be a mapping, got {config!r}")
        specs.append({"name": name, "weight": weight, "config": config})
    return specs


# The held-out draw of a recipe's composite (evaluation/reasoning.py, and the held-out pairs and rollouts that
# nano's sampled sources build): seed = training seed + this, a prime far from any seed a recipe sets.
HELDOUT_SEED_OFFSET = 1_000_003
# That draw in two parts that never overlap: its first VALIDATION_FROM distinct problems are the test problems (what
# every table reports: the first N of them), the ones from VALIDATION_FROM on are the validation problems, on which
# a choice is made (`rlhf-recipes evaluate --split validation`; a held-out target's `split: validation`, the nano
# base's). Both lie inside the 2000 that the nano SFT recipes exclude from their demonstrations.
VALIDATION_FROM = 1000


def training_seed(recipe) -> int:
    """The composite's seed: dataset_kwargs.seed, else the recipe's `seed`."""
    return int((recipe.args.dataset_kwargs or {}).get("seed", recipe.setting("seed")))


def build_rows(recipe, size: int, seed: int, kwargs: dict[str, Any] | None = None) -> "Dataset":
    """`size` entries of the recipe's composite (its tasks, with `seed`) as conversational rows; the same
    prompts for training (generate), for SFT demonstrations (data/reasoning_gym_sft.py, which passes its
    `dataset_kwargs` without its own keys as `kwargs`) and for the held-out split (evaluation/reasoning.py)."""
    from datasets import Dataset

    from rewards.reasoning_tasks import composite_dataset, composite_spec

    where = recipe.source
    kwargs = dict(recipe.args.dataset_kwargs or {}) if kwargs is None else kwargs
    specs = parse_task_specs(kwargs, where)
    spec_json = composite_spec(specs, size=size, seed=seed)
    try:
        dataset = composite_dataset(spec_json)
    except (TypeError, ValueError, AssertionError) as e:
        raise DataError(f"{where}: reasoning-gym rejected the task config {specs}: {e}") from e

    system = system_prompt_text(recipe.args.system_prompt)
    rows: dict[str, list] = {"prompt": [], "rg_dataset": [], "rg_index": [], "answer": [], "task": []}
    for index in range(size):
        entry = dataset[index]
        messages = [{"role": "user", "content": entry["question"]}]
        if system:
            messages.insert(0, {"role": "system", "content": system})
        rows["prompt"].append(messages)
        rows["rg_dataset"].append(spec_json)
        rows["rg_index"].append(index)
        rows["answer"].append(str(entry["answer"]))
        rows["task"].append(entry["metadata"].get("source_dataset", specs[0]["name"]))
    return Dataset.from_dict(rows)


def questions(recipe, size: int, seed: int, kwargs: dict[str, Any] | None = None) -> set[str]:
    """The questions (last user turns) of a draw of `size` entries with `seed`: what a held-out draw must avoid
    (the training prompts) and what an SFT draw leaves out (data/reasoning_gym_sft.py's `exclude`)."""
    return {prompt[-1]["content"] for prompt in build_rows(recipe, size, seed, kwargs)["prompt"]} if size else set()


def unseen(rows, trained: set[str], limit: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """The rows of a held-out draw whose question is neither a training question nor a repeat (a training prompt
    or a repeat: the next one drawn takes its place), the first `limit` of them; and how many were training ones."""
    kept, seen, overlaps = [], set(), 0
    for row in rows:
        question = row["prompt"][-1]["content"]
        if question in trained or question in seen:
            overlaps += question in trained
            continue
        seen.add(question)
        kept.append(row)
        if len(kept) == limit:
            break
    return kept, overlaps


def generate(recipe) -> "Dataset":
    args = recipe.args
    where = recipe.source
    if args.num_samples is None:
        raise DataError(f"{where}: reasoning_gym generates its data: set `num_samples` (the book: 3000 for grpo)")
    if args.num_samples <= 0:
        raise DataError(f"{where}: num_samples must be > 0, got {args.num_samples}")
    return build_rows(recipe, args.num_samples, training_seed(recipe))


SOURCE = DataSource(
    name="reasoning_gym",
    columns=("prompt", "rg_dataset", "rg_index"),
    generate=generate,
    system_prompt_text=system_prompt_text,
)
