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

Each group is computed on its own, as a (G, 1) column reduced over dim 0, exactly as the book's code computes one
prompt's rollouts (policy_gradients/utils.py). A vectorised (N/G, G) reduction gives other last bits, and on a group
whose rewards are all equal to a value float32 cannot hold (0.7, 1.2: partial credit) the difference is not small:
the row-wise std is exactly 0 while the mean is off by an ulp, so the z-score was ulp / eps, up to ~12 (measured:
eight rewards of 1.2 -> 11.9 for every rollout; the book's column gives 0.87, its own rounding residue).
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


def per_group(rewards: torch.Tensor, group_size: int, book_formula) -> torch.Tensor:
    """Apply `book_formula` to each group's rewards as the book holds them, a (G, 1) column; (N,) back."""
    g = grouped(rewards, group_size)
    return torch.cat([book_formula(row.reshape(-1, 1)) for row in g]).reshape(-1)


def raw_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE without a baseline: A = R."""
    return rewards.clone()


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """A = K/(K-1) * (R - mean(R)) per group of K = group_size >= 2 completions."""
    if group_size < 2:
        raise ValueError("RLOO needs at least 2 completions per prompt (its baseline is the other completions)")
    return per_group(rewards, group_size, lambda r: (group_size / (group_size - 1)) * (r - r.mean(dim=0, keepdim=True)))


def zscore_advantages(rewards: torch.Tensor, group_size: int, eps: float = BOOK_STD_EPS) -> torch.Tensor:
    """A = (R - mean(R)) / (std(R) + eps), unbiased std, per group of group_size >= 2.

    A group whose rewards are all equal gets A = 0 (0 / eps) where float32 holds the value exactly (0, 0.5, 1.5), and
    the book's rounding residue elsewhere (|A| < 0.9 for eight rewards of 0.05-1.5), as in the book's code.
    """
    if group_size < 2:
        raise ValueError("a z-scored advantage needs at least 2 completions per prompt")
    return per_group(rewards, group_size, lambda r: (r - r.mean(dim=0, keepdim=True)) / (r.std(dim=0, keepdim=True) + eps))


def centered_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr. GRPO: A = R - mean(R) per group (no division by the std)."""
    return per_group(rewards, group_size, lambda r: r - r.mean(dim=0, keepdim=True))


def maxrl_advantages(binary_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """MaxRL: A = (b - mean(b)) / mean(b) per group; a group with mean(b) == 0 gets A = 0.

    b is the "binary" reward (correctness * [format complete]); dividing by the group's
    success rate weights hard prompts (few successes) up, like maximum likelihood on them.
    """
    def book_formula(b: torch.Tensor) -> torch.Tensor:
        mean = b.mean(dim=0, keepdim=True)
        safe = torch.where(mean > 0, mean, torch.ones_like(mean))  # no 0/0 computed, even where it is discarded
        return torch.where(mean > 0, (b - mean) / safe, torch.zeros_like(b))

    return per_group(binary_rewards, group_size, book_formula)


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
