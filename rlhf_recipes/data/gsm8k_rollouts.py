"""GSM8K rollouts (the book's RLHF-Book/gsm8k-qwen3-0.6B-rollouts) -> prompt / completions / rewards.

Real schema, one prompt per row: `prompt` (str, the question), `completions` (list of str,
up to ~100 sampled solutions), `rewards` (list of float: 1.0 when the completion's final
"#### <number>" is correct, else 0.0; bools and 0/1 ints are read the same way). The row stays grouped by prompt, so the eval split
holds whole prompts out (the ORM's top-1 metric ranks the rollouts of one prompt); the ORM
family expands it into one example per rollout. The prompt becomes a user message, so the
recipe's `system_prompt` (the book asks for a final "#### <number>") is put in front of it.
"""

from __future__ import annotations

import math
from typing import Any

from rlhf_recipes.data.base import DROP, DataSource


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    prompt, completions, rewards = row["prompt"], row["completions"], row["rewards"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"column `prompt` must be a non-empty string, got {prompt!r:.80}")
    if not isinstance(completions, list) or not all(isinstance(c, str) for c in completions):
        raise ValueError(f"column `completions` must be a list of strings, got {completions!r:.80}")
    if not isinstance(rewards, list) or len(rewards) != len(completions):
        raise ValueError(
            f"column `rewards` must be a list with one value per completion ({len(completions)}), got {rewards!r:.80}"
        )
    # The book casts each reward with int() and bool(), so a hub copy may hold bools or 0/1 ints as well as
    # 0.0/1.0 floats: all of them are correctness and become floats here.
    for r in rewards:
        if not isinstance(r, (bool, int, float)) or not math.isfinite(r) or not 0.0 <= r <= 1.0:
            raise ValueError(
                f"column `rewards`: every value must be correctness, a bool or a number in [0, 1], got {r!r}"
            )
    if not completions:
        return {DROP: "no completions"}
    return {
        "prompt": [{"role": "user", "content": prompt}],
        "completions": list(completions),
        "rewards": [float(r) for r in rewards],
    }


SOURCE = DataSource(
    name="gsm8k_rollouts",
    hub_id="RLHF-Book/gsm8k-qwen3-0.6B-rollouts",
    fixture="gsm8k-rollouts/train.jsonl",
    columns=("prompt", "completions", "rewards"),
    normalize=normalize,
)
