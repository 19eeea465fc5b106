"""Advantage estimators of the RLHF book's chapter 6, as pure tensor functions.

Every function takes one scalar reward per completion, flat, ordered so that each prompt's
G completions are contiguous (as GRPOTrainer orders them), and returns one advantage per
completion. R is a group's rewards, mean and std are over that group; std is the UNBIASED
(Bessel-corrected) standard deviation, as torch.std and the book use.

  raw      A = R                                     REINFORCE (no baseline; G may be 1)
  rloo     A = K/(K-1) * (R - mean(R))              RLOO: leave-one-out baseline, K = G >= 2
  zscore   A = (R - mean(R)) / (std(R) + eps)       GRPO family; the book's eps is 1e-8
  center   A = R - mean(R)                           Dr. GRPO (no std scaling)
  maxrl    A = (b - mean(b)) / mean(b), 0 if mean(b) == 0   MaxRL, on the binary reward b

Note K/(K-1) * (R_i - mean) equals R_i - mean of the OTHER K-1 rewards: the RLOO baseline.
"""

from __future__ import annotations

import torch

BOOK_STD_EPS = 1e-8  # the book's eps in the z-score; TRL uses 1e-4


def grouped(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N,) -> (N / G, G), checking that N is a whole number of groups."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one per completion), got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    return rewards.view(-1, group_size)


def raw_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE without a baseline: A = R."""
    return rewards.clone()


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """A = K/(K-1) * (R - mean(R)) per group of K = group_size >= 2 completions."""
    if group_size < 2:
        raise ValueError("RLOO needs at least 2 completions per prompt (its baseline is the other completions)")
    g = grouped(rewards, group_size)
    return (group_size / (group_size - 1) * (g - g.mean(dim=1, keepdim=True))).reshape(-1)


def zscore_advantages(rewards: torch.Tensor, group_size: int, eps: float = BOOK_STD_EPS) -> torch.Tensor:
    """A = (R - mean(R)) / (std(R) + eps), unbiased std, per group of group_size >= 2.

    A group whose rewards are all equal gets A = 0 exactly (0 / eps).
    """
    if group_size < 2:
        raise ValueError("a z-scored advantage needs at least 2 completions per prompt")
    g = grouped(rewards, group_size)
    centered = g - g.mean(dim=1, keepdim=True)
    return (centered / (g.std(dim=1, keepdim=True, unbiased=True) + eps)).reshape(-1)


def centered_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO: A = R - mean(R) per group (no division by the std)."""
    g = grouped(rewards, group_size)
    return (g - g.mean(dim=1, keepdim=True)).reshape(-1)


def maxrl_advantages(binary_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """MaxRL: A = (b - mean(b)) / mean(b) per group; a group with mean(b) == 0 gets A = 0.

    b is the "binary" reward (correctness * [format complete]); dividing by the group's
    success rate weights hard prompts (few successes) up, like maximum likelihood on them.
    """
    g = grouped(binary_rewards, group_size)
    mean = g.mean(dim=1, keepdim=True)
    safe = torch.where(mean > 0, mean, torch.ones_like(mean))
    return torch.where(mean > 0, (g - mean) / safe, torch.zeros_like(g)).reshape(-1)


def compute_advantages(name: str, rewards: torch.Tensor, group_size: int, eps: float = BOOK_STD_EPS) -> torch.Tensor:
    """Dispatch on the estimator's name (see the module docstring)."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator `{name}`; choose one of {tuple(ESTIMATORS)}")
    return ESTIMATORS[name](rewards.float(), group_size, eps)


def groups_with_contrast(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """(N / G,) bool: True where a group's rewards are not all equal (it carries a learning signal)."""
    g = grouped(rewards, group_size)
    return (g != g[:, :1]).any(dim=1)


# name -> f(rewards, group_size, eps): the `advantage_estimator` option's values
ESTIMATORS = {
    "raw": lambda rewards, group_size, eps: raw_advantages(rewards),
    "rloo": lambda rewards, group_size, eps: rloo_advantages(rewards, group_size),
    "zscore": zscore_advantages,
    "center": lambda rewards, group_size, eps: centered_advantages(rewards, group_size),
    "maxrl": lambda rewards, group_size, eps: maxrl_advantages(rewards, group_size),
}
