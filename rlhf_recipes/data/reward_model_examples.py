"""A reward model's examples: recipe rows -> tokenized chosen/rejected pairs, rollouts or solution steps.

Shared by training (families/reward_model.py) and held-out evaluation (evaluation/reward_models.py), so both
tokenize the same way. `reward_model_info` is how a reward model reads its input; it is saved in the model's
config.json, so a saved reward model is scored the way it was trained, wherever it is loaded.
"""

from __future__ import annotations

import logging
from typing import Any

from rlhf_recipes.data.base import DataError

logger = logging.getLogger(__name__)


def rm_kind(recipe) -> str:
    """preference, outcome or process: the kind of reward model the recipe's config trains."""
    return type(recipe.training).rm_kind


def reward_model_info(recipe) -> dict[str, Any]:
    """How this RM reads its input; saved in the model's config.json (`reward_model`) so a
    saved RM is scored the way it was trained, wherever it is loaded."""
    cfg, kind = recipe.training, rm_kind(recipe)
    info: dict[str, Any] = {"kind": kind, "algorithm": recipe.algorithm.name, "max_length": cfg.max_length,
                            "truncation_mode": cfg.truncation_mode}
    if kind == "outcome":
        info["score_reduction"] = cfg.score_reduction
    if kind == "process":
        info.update(prompt_template=cfg.prompt_template, step_separator=cfg.step_separator, step_split=cfg.step_split)
    return info


def tokenize_split(recipe, tokenizer, rows, split: str):
    """Normalized rows -> (tokenized Dataset, statistics); logs the statistics once."""
    from datasets import Dataset

    from custom_losses.reward_models.data import preference_examples, rollout_examples, step_examples

    cfg, kind = recipe.training, rm_kind(recipe)
    rows = rows.to_list() if hasattr(rows, "to_list") else list(rows)
    if kind == "preference":
        examples, stats = preference_examples(rows, tokenizer, cfg.max_length, cfg.truncation_mode)
    elif kind == "outcome":
        examples, stats = rollout_examples(rows, tokenizer, cfg.max_length, cfg.max_rollouts_per_prompt,
                                           cfg.overlong_rollouts, cfg.truncation_mode)
    else:
        examples, stats = step_examples(rows, tokenizer, cfg.max_length, cfg.max_reasoning_steps,
                                        cfg.prompt_template, cfg.step_separator)
    stats = {"rows": len(rows), **stats}
    _log_stats(split, stats)
    if not examples:
        raise DataError(f"{recipe.source}: no {split} examples left after tokenization: {stats}")
    return Dataset.from_list(examples), stats


def _log_stats(split: str, stats: dict) -> None:
    import os

    if int(os.environ.get("RANK", "0")) != 0:
        return
    lengths = stats.get("lengths", {})
    count = {k: v for k, v in stats.items() if k not in ("lengths", "dropped", "truncated", "rows")}
    logger.info(
        "%s data: %d rows -> %s; dropped %s; tokens per sequence before truncation: mean %s, p99 %s, max %s; "
        "%.1f%% over max_length %s",
        split, stats["rows"], ", ".join(f"{v} {k}" for k, v in count.items()), stats.get("dropped") or "none",
        lengths.get("mean"), lengths.get("p99"), lengths.get("max"), 100 * lengths.get("fraction_truncated", 0.0),
        lengths.get("max_length"),
    )
    for reason, n in (stats.get("dropped") or {}).items():
        logger.warning("%s data: dropped %d examples: %s", split, n, reason)
    for reason, n in (stats.get("truncated") or {}).items():
        logger.warning("%s data: truncated %d examples: %s", split, n, reason)
