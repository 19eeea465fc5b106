"""Reward-model training data: rows -> tokenized examples (+ statistics) -> batches.

Each kind's text layout is rewards/reward_model_encoding.py, the one the trained model is
later scored with (rewards/reward_model_scoring.py), so an RM is always read the way it was
trained. Over-long preference sequences are truncated and pairs that become identical are
dropped and counted; outcome rollouts (unless `overlong_rollouts: truncate`) and process examples over the
limit are dropped and counted (the book: truncating would cut the text its label is about). Every builder
returns length statistics for the run's log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch

from rewards.reward_model_encoding import encode_rollout, encode_sequence, encode_steps, prompt_ids, truncate
from rewards.reward_model_scoring import ids_and_mask, pad

STEP_RATINGS = (-1, 0, 1)
STEP_CLASS_NAMES = ("bad", "neutral", "good")  # class index = rating + 1
IGNORE_INDEX = -100


# --------------------------------------------------------------------------------------
# Rows -> examples (+ statistics)


def length_stats(lengths: list[int], max_length: int | None) -> dict[str, float]:
    """Token lengths BEFORE truncation: mean, p99, max and the fraction over max_length."""
    if not lengths:
        return {"sequences": 0}
    a = np.asarray(lengths)
    return {
        "sequences": int(len(a)),
        "mean": round(float(a.mean()), 1),
        "p99": round(float(np.percentile(a, 99)), 1),
        "max": int(a.max()),
        "max_length": max_length,
        "fraction_truncated": round(float((a > max_length).mean()), 4) if max_length else 0.0,
    }


def preference_examples(rows: Iterable[dict], tokenizer, max_length: int | None, truncation_mode: str):
    """prompt/chosen/rejected rows -> ({chosen_ids, rejected_ids[, margin]} examples, stats)."""
    examples, lengths, dropped = [], [], 0
    for row in rows:
        prompt = row.get("prompt")
        chosen = encode_sequence(tokenizer, prompt, row["chosen"])
        rejected = encode_sequence(tokenizer, prompt, row["rejected"])
        lengths += [len(chosen), len(rejected)]
        chosen = truncate(chosen, max_length, truncation_mode)
        rejected = truncate(rejected, max_length, truncation_mode)
        if chosen == rejected:
            dropped += 1  # no signal: both sides read the same tokens
            continue
        example = {"chosen_ids": chosen, "rejected_ids": rejected}
        if row.get("margin") is not None:
            example["margin"] = float(row["margin"])
        examples.append(example)
    stats = {"pairs": len(examples), "dropped": {"identical after truncation": dropped} if dropped else {},
             "lengths": length_stats(lengths, max_length)}
    return examples, stats


OVERLONG_ROLLOUTS = ("skip", "truncate")


def rollout_examples(rows: Iterable[dict], tokenizer, max_length: int | None, max_rollouts: int | None = None,
                     overlong: str = "skip", truncation_mode: str = "keep_start"):
    """prompt/completions/rewards rows -> one {input_ids, completion_mask, rewards, group} per rollout.

    A rollout longer than `max_length` (prompt + completion) is, with `overlong` "skip" (the book's
    train_orm.py), SKIPPED and counted: truncating would train on a cut completion against the whole
    rollout's correctness. With "truncate" it is cut to max_length on the `truncation_mode` side (keep_start:
    the end of the completion goes) and counted; one whose cut leaves no completion token is skipped."""
    if overlong not in OVERLONG_ROLLOUTS:
        raise ValueError(f"overlong_rollouts must be one of {', '.join(OVERLONG_ROLLOUTS)}, got {overlong!r}")
    examples, lengths, dropped, no_completion, cut = [], [], 0, 0, 0
    for group, row in enumerate(rows):
        completions, rewards = row["completions"], row["rewards"]
        if max_rollouts is not None:
            completions, rewards = completions[:max_rollouts], rewards[:max_rollouts]
        cached = prompt_ids(tokenizer, row["prompt"])
        for completion, reward in zip(completions, rewards):
            ids, start = encode_rollout(tokenizer, row["prompt"], completion, cached)
            lengths.append(len(ids))
            if max_length is not None and len(ids) > max_length:
                if overlong == "skip":
                    dropped += 1
                    continue
                removed = len(ids) - max_length if truncation_mode == "keep_end" else 0
                ids, start = truncate(ids, max_length, truncation_mode), max(0, start - removed)
                if start >= len(ids):
                    no_completion += 1
                    continue
                cut += 1
            mask = [0] * start + [1] * (len(ids) - start)
            examples.append({"input_ids": ids, "completion_mask": mask, "rewards": float(reward), "group": group})
    reasons = {"longer than max_length": dropped, "no completion token left after truncation": no_completion}
    stats = {"rollouts": len(examples), "dropped": {k: n for k, n in reasons.items() if n},
             "truncated": {f"longer than max_length, cut ({truncation_mode})": cut} if cut else {},
             "lengths": length_stats(lengths, max_length)}
    return examples, stats


def step_examples(rows: Iterable[dict], tokenizer, max_length: int | None, max_steps: int, prompt_template: str,
                  separator: str):
    """prompt/completions/labels rows (ratings -1/0/+1) -> {input_ids, labels, group} examples.

    A solution longer than `max_steps` becomes several examples of at most `max_steps` steps,
    each starting from the prompt (the book's chunking). Examples over `max_length` are dropped.
    """
    examples, lengths, dropped = [], [], 0
    for group, row in enumerate(rows):
        steps, ratings = row["completions"], row["labels"]
        for start in range(0, len(steps), max_steps):
            ids, positions = encode_steps(tokenizer, row["prompt"], steps[start:start + max_steps], prompt_template,
                                          separator)
            lengths.append(len(ids))
            if max_length is not None and len(ids) > max_length:
                dropped += 1
                continue
            labels = [IGNORE_INDEX] * len(ids)
            for pos, rating in zip(positions, ratings[start:start + max_steps]):
                labels[pos] = STEP_RATINGS.index(rating)
            examples.append({"input_ids": ids, "labels": labels, "group": group})
    stats = {"examples": len(examples), "dropped": {"longer than max_length": dropped} if dropped else {},
             "lengths": length_stats(lengths, max_length)}
    return examples, stats


# --------------------------------------------------------------------------------------
# Batches


@dataclass
class RolloutCollator:
    """ORM batches: right-padded ids, attention and completion masks, correctness, prompt group."""

    pad_token_id: int

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = ids_and_mask([e["input_ids"] for e in examples], self.pad_token_id)
        batch["completion_mask"] = pad([e["completion_mask"] for e in examples], 0)
        batch["rewards"] = torch.tensor([e["rewards"] for e in examples], dtype=torch.float)
        batch["group"] = torch.tensor([e["group"] for e in examples], dtype=torch.long)
        return batch


@dataclass
class StepCollator:
    """PRM batches: right-padded ids and attention mask; labels padded with -100."""

    pad_token_id: int

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = ids_and_mask([e["input_ids"] for e in examples], self.pad_token_id)
        batch["labels"] = pad([e["labels"] for e in examples], IGNORE_INDEX)
        return batch
