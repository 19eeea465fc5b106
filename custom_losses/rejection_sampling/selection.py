"""The book's four selection rules (chapter 9), as pure functions on the reward cache.

A cache record is one prompt: {"question": str, "answer": str, "completions": [str] * N, "rewards": [float] * N}.
Each rule returns the selected pairs as (prompt index, completion index), in the order the book trains them;
`pairs_of` turns them into rows. The two `top_*` rules use the reward model; the two `random_*` rules are the
matched-size controls that ignore the reward.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

Record = dict[str, Any]
Pair = tuple[int, int]  # (prompt index, completion index)


def top_per_prompt(records: Sequence[Record], k: int, seed: int) -> list[Pair]:
    """Per prompt, in order: the FIRST argmax of its rewards (ties keep the earlier completion). M pairs.

    (`k` and `seed` are unused: one pair per prompt.)"""
    pairs = []
    for i, rec in enumerate(records):
        rewards = rec["rewards"]
        if rewards:
            pairs.append((i, max(range(len(rewards)), key=lambda j: rewards[j])))  # max keeps the first maximum
    return pairs


def top_k_overall(records: Sequence[Record], k: int, seed: int) -> list[Pair]:
    """All M x N pairs in prompt-major order, STABLE-sorted by reward descending; the first k.

    Ties keep the earlier pair (prompt-major order); a prompt may appear several times or not at all.
    (`seed` is unused.)"""
    flat = [(i, j) for i, rec in enumerate(records) for j in range(len(rec["rewards"]))]
    flat.sort(key=lambda p: float(records[p[0]]["rewards"][p[1]]), reverse=True)  # sort is stable, reverse too
    return flat[:k]


def random_per_prompt(records: Sequence[Record], k: int, seed: int) -> list[Pair]:
    """One rng = random.Random(seed); per prompt, in order: completion rng.randrange(N). M pairs.

    (`k` is unused: one pair per prompt.)"""
    rng = random.Random(seed)
    return [(i, rng.randrange(len(rec["completions"]))) for i, rec in enumerate(records) if rec["completions"]]


def random_k_overall(records: Sequence[Record], k: int, seed: int) -> list[Pair]:
    """random.Random(seed).sample(all M x N pairs in prompt-major order, min(k, M x N)): k distinct pairs."""
    flat = [(i, j) for i, rec in enumerate(records) for j in range(len(rec["completions"]))]
    return random.Random(seed).sample(flat, min(k, len(flat)))


RULES: dict[str, Callable[[Sequence[Record], int, int], list[Pair]]] = {
    "top_per_prompt": top_per_prompt,
    "top_k_overall": top_k_overall,
    "random_per_prompt": random_per_prompt,
    "random_k_overall": random_k_overall,
}


def select(rule: str, records: Sequence[Record], k: int, seed: int) -> list[Pair]:
    if rule not in RULES:
        raise ValueError(f"unknown selection rule {rule!r}; one of {', '.join(RULES)}")
    return RULES[rule](records, k, seed)


def pairs_of(records: Sequence[Record], pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """The selected pairs as rows: question, gold answer, completion, its reward and where it came from."""
    return [{"question": records[i]["question"], "answer": records[i]["answer"],
             "completion": records[i]["completions"][j], "reward": float(records[i]["rewards"][j]),
             "prompt_index": i, "completion_index": j} for i, j in pairs]
