"""Loading a recipe's data: real hub dataset or shipped fixture, through the same adapter.

A source names a real dataset (hub id, split), the fixture file that the tiny profile reads
instead (same schema, real or schema-exact rows shipped in data/fixtures/), the columns its
schema must have, and `normalize`: one row of the source schema -> the columns TRL's trainer
expects. A row that carries no training signal (e.g. identical chosen and rejected) is
dropped and counted. A row that does not fit the schema is an error naming the row in a local
file (`--data_files`, the tiny profile's fixture): the user can fix it. In a hub dataset it is
dropped and counted instead, the first few named by row index: one odd row in 160k must not
end the run. The counts go to final_results.json (`dataset_rows`, via `recipe.data_counts`).
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlhf_recipes.data.base import DROP, DataError, DataSource

if TYPE_CHECKING:
    from datasets import Dataset

FIXTURES = Path(__file__).parent / "fixtures"
logger = logging.getLogger(__name__)
UNFIT = "does not fit the schema"  # the drop reason of a hub row the adapter rejects
_WHY = "__why__"  # the adapter's message for such a row, beside DROP
NAMED_UNFIT = 5  # how many of them the log and final_results.json name

__all__ = ["DROP", "DataError", "DataSource", "SOURCES", "chat_prompt", "load_splits", "with_system_prompt"]


def _registry() -> dict[str, DataSource]:
    from rlhf_recipes.data import (
        gsm8k, gsm8k_rollouts, hh_rlhf, no_robots, prm800k, reasoning_gym, reasoning_gym_preferences,
        reasoning_gym_rollouts, reasoning_gym_sdpo_sft, reasoning_gym_sft, ultrafeedback,
    )

    sources = [
        ultrafeedback.SOURCE, hh_rlhf.SOURCE,  # preference pairs (chapters 5 and 8)
        reasoning_gym.SOURCE, gsm8k.SOURCE, hh_rlhf.PROMPTS_SOURCE,  # prompts for policy gradients (chapter 6)
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


def _normalize_one(source: DataSource, row: dict[str, Any], where_row: str, drop_unfit: bool) -> dict[str, Any]:
    """The adapter's output for one row; a row it rejects is an error naming the row, or (drop_unfit) a drop."""
    try:
        return source.normalize(row)
    except (KeyError, TypeError, ValueError) as e:
        if not drop_unfit:
            raise DataError(f"{where_row}: {e}") from e
        return {DROP: UNFIT, _WHY: f"{where_row}: {e}"}


def _count_drops(where: str, read: int, reasons: list[str], unfit: list[str]) -> dict[str, Any]:
    """Log the dropped rows (the unfit ones named) and return the counts for final_results.json."""
    counts = dict(Counter(reasons))
    if reasons:
        logger.warning("%s: dropped %d of %d rows: %s", where, len(reasons), read, counts)
    if unfit:
        logger.warning("%s: %d rows do not fit the schema and were dropped; the first: %s", where, len(unfit),
                       " | ".join(unfit[:NAMED_UNFIT]))
    return {"source": where, "rows_read": read, "rows_dropped": len(reasons), "dropped": counts,
            "unfit_rows": unfit[:NAMED_UNFIT]}


def normalize_rows(dataset: "Dataset", source: DataSource, where: str, system_prompt: str | None = None) -> "Dataset":
    """Apply the adapter to every row; errors name the row, drops are counted and logged."""
    return normalize_and_count(dataset, source, where, system_prompt)[0]


def normalize_and_count(dataset: "Dataset", source: DataSource, where: str, system_prompt: str | None = None, *,
                        drop_unfit: bool = False, row_indices=None) -> tuple["Dataset", dict[str, Any]]:
    """normalize_rows, and its counts. drop_unfit (hub data): a row the adapter rejects is dropped and counted,
    named by `row_indices[i]` (its index in the hub split before shuffling), not an error."""
    missing = [c for c in source.columns if c not in dataset.column_names]
    if missing:
        raise DataError(
            f"{where}: missing column(s) {missing} for source `{source.name}`; expected {list(source.columns)}, "
            f"found {dataset.column_names}"
        )

    def where_row(index: int) -> str:
        if drop_unfit:
            return f"row index {int(row_indices[index]) if row_indices is not None else index}"
        # 1-based, as an editor numbers lines: the row-th row of the data as loaded (shuffled, if asked)
        return f"{where}: row {index + 1}"

    # Rows without signal are found and removed first: a map whose rows have different keys
    # (a dropped row has none of the output columns) breaks Arrow's schema. The reasons travel as columns
    # (not a closure's list), so a map that datasets reads back from its cache still counts them.
    def flag(row: dict[str, Any], i: int) -> dict[str, str]:
        out = _normalize_one(source, row, where_row(i), drop_unfit)
        return {DROP: out.get(DROP, ""), _WHY: out.get(_WHY, "")}

    flagged = dataset.map(flag, with_indices=True, desc=f"check {source.name}")
    reasons = [r for r in flagged[DROP] if r]
    counts = _count_drops(where, len(flagged), reasons, [w for w in flagged[_WHY] if w])
    dataset = (flagged.filter(lambda r: not r[DROP]) if reasons else flagged).remove_columns([DROP, _WHY])

    def apply(row: dict[str, Any], index: int) -> dict[str, Any]:
        return _with_source_system_prompt(_normalize_one(source, row, where_row(index), False), source, system_prompt)

    out = dataset.map(apply, with_indices=True, remove_columns=dataset.column_names, desc=f"normalize {source.name}")
    return out, counts


def read_split(source: DataSource, split: str, fixture: str, count: int | None, system_prompt: str | None, *,
               tiny: bool, hub_id: str | None = None, config: str | None = None) -> tuple[Dataset, str]:
    """(the first `count` rows of a held-out split, normalized; where they were read): the shipped fixture file
    of that split (the tiny profile), else the hub's split (`hub_id`, `config`: the source's unless given)."""
    from datasets import load_dataset

    if tiny:
        where = str(FIXTURES / fixture)
        raw = load_dataset("json", data_files=where, split="train")
    else:
        hub_id = hub_id or source.hub_id
        where = f"{hub_id} [{split}]"
        raw = load_dataset(hub_id, config or source.hub_config, split=split)
    if count is not None:
        raw = raw.select(range(min(count, len(raw))))
    return normalize_rows(raw, source, where, system_prompt), where


def _with_source_system_prompt(out: dict[str, Any], source: DataSource, system_prompt: str | None) -> dict[str, Any]:
    if isinstance(out.get("prompt"), list):
        out["prompt"] = with_system_prompt(out["prompt"], source, system_prompt)
    return out


def _read_hub_files(source: DataSource, recipe) -> tuple["Dataset", dict[str, Any]]:
    """A source whose hub repo is raw JSONL files of differing schemas (PRM800K): read line by line in file
    order, normalized row by row, the first `num_samples` usable rows kept (the book's procedure, no shuffle);
    with dataset_shuffle_seed, every usable row is read and the first `num_samples` after a shuffle kept."""
    import numpy as np
    from datasets import Dataset

    from rlhf_recipes.data.hub_files import jsonl_rows

    args = recipe.args
    hub_id = args.dataset_name or source.hub_id
    split = args.dataset_split or source.default_split
    if args.dataset_config:  # datasets' config name picks nothing here: no loader runs, the files are read
        raise DataError(f"{recipe.source}: --dataset_config {args.dataset_config} does not apply to dataset "
                        f"`{args.dataset}`: its hub repo {hub_id} has no configs, its raw files "
                        f"({', '.join(source.hub_files(split))}) are read; remove --dataset_config")
    where = f"{hub_id} [{split}]"
    limit = args.num_samples if args.dataset_shuffle_seed is None else None
    kept: list[dict[str, Any]] = []
    reasons: list[str] = []
    unfit: list[str] = []
    read = 0
    for where_row, row in jsonl_rows(hub_id, source.hub_files(split)):
        if limit is not None and len(kept) >= limit:
            break
        read += 1
        out = _normalize_one(source, row, where_row, drop_unfit=True)
        if out.get(DROP):
            reasons.append(out[DROP])
            if out.get(_WHY):
                unfit.append(out[_WHY])
            continue
        kept.append(_with_source_system_prompt(out, source, args.system_prompt))
    if args.dataset_shuffle_seed is not None:
        order = np.random.default_rng(args.dataset_shuffle_seed).permutation(len(kept))[:args.num_samples]
        kept = [kept[i] for i in order]
    counts = _count_drops(where, read, reasons, unfit)
    return Dataset.from_list(kept), counts


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


def eval_split_seed(args) -> int:
    """The seed of the train/eval split: eval_split_seed, else the shuffle seed, else 0."""
    if args.eval_split_seed is not None:
        return args.eval_split_seed
    return args.dataset_shuffle_seed or 0


def _take(raw: "Dataset", seed: int | None, count: int | None):
    """The rows a recipe trains on, and their indices in `raw`: the first `count`, after a shuffle with `seed`
    (the permutation Dataset.shuffle(seed=seed) draws)."""
    import numpy as np

    if seed is None:
        indices = range(len(raw) if count is None else min(count, len(raw)))
        return (raw if len(indices) == len(raw) else raw.select(indices)), indices
    indices = np.random.default_rng(seed).permutation(len(raw))[:count]
    return raw.select(indices), indices


def load_splits(recipe) -> tuple["Dataset", "Dataset | None"]:
    """The recipe's train and (optional) eval datasets, in TRL's columns. What was read and dropped is left in
    `recipe.data_counts` (final_results.json's `dataset_rows`)."""
    args = recipe.args
    if args.dataset not in SOURCES:
        raise DataError(f"{recipe.source}: unknown dataset `{args.dataset}`; available: {', '.join(sorted(SOURCES))}")
    source = SOURCES[args.dataset]
    hub = not (args.data_files or recipe.tiny)
    if source.generate is not None:
        dataset = source.generate(recipe)
        counts: dict[str, Any] = {"source": "generated"}
    elif hub and source.hub_files is not None:
        dataset, counts = _read_hub_files(source, recipe)
    else:
        raw, where = _read(source, recipe)
        raw, indices = _take(raw, args.dataset_shuffle_seed, args.num_samples)
        dataset, counts = normalize_and_count(raw, source, where, args.system_prompt, drop_unfit=hub,
                                              row_indices=indices)
    if len(dataset) == 0:
        why = f" (e.g. {counts['unfit_rows'][0]})" if counts.get("unfit_rows") else ""
        raise DataError(f"{recipe.source}: dataset `{args.dataset}` has no usable rows{why}")
    train, evals = dataset, None
    if args.eval_fraction > 0:
        split = dataset.train_test_split(test_size=args.eval_fraction, seed=eval_split_seed(args))
        train, evals = split["train"], split["test"]
    recipe.data_counts = {**counts, "train_rows": len(train), "eval_rows": len(evals) if evals is not None else 0}
    return train, evals
