"""DAPO's overlong penalty (Yu et al. 2025, "soft overlong punishment"), as the book applies it.

With L = completion length in tokens (EOS included, padding not), L_max and cache length C:
  penalty = 0                        if L <= L_max - C
          = (L_max - C - L) / C      if L_max - C < L <= L_max   (linear from 0 down to -1)
          = -1                       if L > L_max
The book uses L_max 512 (= max new tokens) and C 128; it is added to the total reward.
"""

from __future__ import annotations

DEFAULT_MAX_LENGTH = 512
DEFAULT_CACHE_LENGTH = 128


def overlong_penalty(
    length: int, max_length: int = DEFAULT_MAX_LENGTH, cache_length: int = DEFAULT_CACHE_LENGTH
) -> float:
    safe = max_length - cache_length
    if length <= safe:
        return 0.0
    if length <= max_length:
        return (safe - length) / cache_length
    return -1.0


def _lengths(completions, completion_ids) -> list[int]:
    if completion_ids is None:
        raise ValueError("overlong_penalty_reward needs `completion_ids` (token ids), which GRPOTrainer passes")
    if len(completion_ids) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(completion_ids)} completion_ids")
    return [len(ids) for ids in completion_ids]


def make_overlong_penalty_reward(max_length: int = DEFAULT_MAX_LENGTH, cache_length: int = DEFAULT_CACHE_LENGTH):
    """The reward function for given L_max and C, named `overlong_penalty_reward` for TRL's logs."""
    if not 0 < cache_length <= max_length:
        raise ValueError(f"overlong penalty needs 0 < cache_length <= max_length, got {cache_length} and {max_length}")

    def overlong_penalty_reward(completions, completion_ids=None, **kwargs) -> list[float]:
        return [overlong_penalty(n, max_length, cache_length) for n in _lengths(completions, completion_ids)]

    overlong_penalty_reward.__doc__ = (
        f"DAPO's soft overlong penalty: 0 up to {max_length - cache_length} tokens, then linear down to -1 at "
        f"{max_length}, -1 beyond."
    )
    overlong_penalty_reward.max_length = max_length
    overlong_penalty_reward.cache_length = cache_length
    return overlong_penalty_reward


overlong_penalty_reward = make_overlong_penalty_reward()
