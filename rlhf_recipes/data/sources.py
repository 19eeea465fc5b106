"""Loading a recipe's data: real hub dataset or shipped fixture, through the same adapter.

A source names a real dataset (hub id, split), the fixture file that the tiny profile reads
instead (same schema, real or schema-exact rows shipped in data/fixtures/), the columns its
schema must have, and `normalize`: one row of the source schema -> the columns TRL's trainer
expects. A row that carries no training signal (e.g. identical chosen and rejected) is
dropped and counted; a row that does not fit the schema is an error naming the row.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlhf_recipes.data.base import DROP, DataError, DataSource

if TYPE_CHECKING:
    from datasets import Dataset

FIXTURES = Path(__file__).parent / "fixtures"
logger = logging.getLogger(__name__)

__all__ = ["DROP", "DataError", "DataSource", "SOURCES", "chat_prompt", "load_splits", "with_system_prompt"]


def _registry() -> dict[str, DataSource]:
    from rlhf_recipes.data import (
        gsm8k, gsm8k_rollouts, hh_rlhf, hh_rlhf_prompts, no_robots, prm800k, reasoning_gym, reasoning_gym_preferences,
        reasoning_gym_rollouts, reasoning_gym_sdpo_sft, reasoning_gym_sft, ultrafeedback,
    )

    sources = [
        ultrafeedback.SOURCE, hh_rlhf.SOURCE,  # preference pairs (chapters 5 and 8)
        reasoning_gym.SOURCE, gsm8k.SOURCE, hh_rlhf_prompts.SOURCE,  # prompts for policy gradients (chapter 6)
        gsm8k_rollouts.SOURCE, prm800k.SOURCE,  # outcome and process reward models (chapter 5)
        no_robots.SOURCE,  # instruction tuning, SFT (chapter 4)
        reasoning_gym_sft.SOURCE,  # SFT demonstrations of a reasoning-gym task (the nano base)
        reasoning_gym_sdpo_sft.SOURCE,  # SDPO teacher-prompt demonstrations + replay (the nano-sdpo base)
        reasoning_gym_preferences.SOURCE,  # pairs sampled from the policy on a reasoning-gym task (nano's DPO)
        # ORM / PRM data sampled from a policy on a reasoning-gym task (the nano profile's reward models)
        reasoning_gym_rollouts.ROLLOUTS_SOURCE, reasoning_gym_rollouts.STEPS_SOURCE,
    ]
    return {s.name: s for s in sources}


SOURCES: dict[str, DataSource] = _registry()


def _read(source: DataSource, recipe) -> tuple["Dataset", str]:
    from datasets import load_dataset

    args = recipe.args
    if args.data_files or recipe.tiny:
        path = args.data_files or str(FIXTURES / source.fixture)
        return load_dataset("json", data_files=path, split="train"), path
    hub_id = args.dataset_name or source.hub_id
    split = args.dataset_split or source.default_split
    return load_dataset(hub_id, args.dataset_config or source.hub_config, split=split), f"{hub_id} [{split}]"


def normalize_rows(dataset: "Dataset", source: DataSource, where: str, system_prompt: str | None = None) -> "Dataset":
    """Apply the adapter to every row; errors name the row, drops are counted and logged."""
    missing = [c for c in source.columns if c not in dataset.column_names]
    if missing:
        raise DataError(
            f"{where}: missing column(s) {missing} for source `{source.name}`; expected {list(source.columns)}, "
            f"found {dataset.column_names}"
        )

    def normalized(row: dict[str, Any], index: int) -> dict[str, Any]:
        try:
            return source.normalize(row)
        except (KeyError, TypeError, ValueError) as e:
            # 1-based, as an editor numbers lines: the row-th row of the data as loaded (shuffled, if asked)
            raise DataError(f"{where}: row {index + 1}: {e}") from e

    # Rows without signal are found and removed first: a map whose rows have different keys
    # (a dropped row has none of the output columns) breaks Arrow's schema.
    flagged = dataset.map(lambda row, i: {DROP: normalized(row, i).get(DROP, "")}, with_indices=True,
                          desc=f"check {source.name}")
    reasons = [r for r in flagged[DROP] if r]
    if reasons:
        counts: dict[str, int] = {}
        for r in reasons:
            counts[r] = counts.get(r, 0) + 1
        logger.warning("%s: dropped %d of %d rows: %s", where, len(reasons), len(flagged), counts)
        dataset = flagged.filter(lambda r: not r[DROP]).remove_columns(DROP)

    def apply(row: dict[str, Any], index: int) -> dict[str, Any]:
        out = normalized(row, index)
        if isinstance(out.get("prompt"), list):
            out["prompt"] = with_system_prompt(out["prompt"], source, system_prompt)
        return out

    return dataset.map(apply, with_indices=True, remove_columns=dataset.column_names, desc=f"normalize {source.name}")


def with_system_prompt(messages: list[dict[str, str]], source: DataSource | None,
                       system_prompt: str | None) -> list[dict[str, str]]:
    """A conversational prompt with the recipe's system message in front, as the source's rows get it."""
    text = source.system_prompt_text(system_prompt) if source and source.system_prompt_text else system_prompt
    return [{"role": "system", "content": text}, *messages] if text else list(messages)


def chat_prompt(recipe, user_text: str) -> list[dict[str, str]]:
    """What a training row's prompt would be for a user's own question: the user turn, with the recipe's
    system message as its data source puts it there (`rlhf-recipes chat` asks a trained model this way)."""
    return with_system_prompt([{"role": "user", "content": user_text}], SOURCES.get(recipe.args.dataset),
                              recipe.args.system_prompt)


def load_splits(recipe) -> tuple["Dataset", "Dataset | None"]:
    """The recipe's train and (optional) eval datasets, in TRL's columns."""
    args = recipe.args
    if args.dataset not in SOURCES:
        raise DataError(f"{recipe.source}: unknown dataset `{args.dataset}`; available: {', '.join(sorted(SOURCES))}")
    source = SOURCES[args.dataset]
    if source.generate is not None:
        dataset = source.generate(recipe)
    else:
        raw, where = _read(source, recipe)
        if args.dataset_shuffle_seed is not None:
            raw = raw.shuffle(seed=args.dataset_shuffle_seed)
        if args.num_samples is not None:
            raw = raw.select(range(min(args.num_samples, len(raw))))
        dataset = normalize_rows(raw, source, where, args.system_prompt)
    if len(dataset) == 0:
        raise DataError(f"{recipe.source}: dataset `{args.dataset}` has no usable rows")
    if args.eval_fraction > 0:
        split = dataset.train_test_split(test_size=args.eval_fraction, seed=args.dataset_shuffle_seed or 0)
        return split["train"], split["test"]
    return dataset, None
