"""PPO's math (RLHF book, chapter 6), as pure tensor functions.

Notation as in custom_losses/policy_gradient/objectives.py: per-token tensors are (B, T) over the
completion tokens, M is the completion mask (1 on real tokens, right-padded), logp / old /
ref are the current, rollout-time and reference log-probs, V the value model's output at
the state before each completion token (V_t predicts the return from token t on), V_old the
values at rollout time, R one scalar reward per completion.

Rewards per token (the book: the scalar on the LAST completion token, zero elsewhere):
  r_t = R * [t == last(M)]                           no KL, or KL in the loss
  sequence_mean (book):  R' = R - beta * seq-mean_t(kl_t),  r_t = R' * [t == last]
  per_token (InstructGPT / TRL's old PPOTrainer):    r_t = R * [t == last] - beta * kl_t * M_t
with kl_t one of the book's estimators of x_t = old_t - ref_t: k1 = -x, k2 = x^2/2,
k3 = expm1(x) - x (custom_losses/policy_gradient/objectives.kl_estimate).

GAE (Schulman et al. 2016), with every position after the last completion token done:
  delta_t = r_t + gamma * V_{t+1} * M_{t+1} - V_t
  A_t     = (delta_t + gamma * lam * A_{t+1}) * M_t          (A_T = 0, V_T = 0)
  G_t     = A_t + V_t                                         (the value target, "returns")
The book: gamma 1.0, lam 0.98, advantages masked to the completion, NOT whitened.

Losses per token (loss = -objective), aggregated by the caller ("seq-mean of the sum"):
  policy  -min(r A, clip(r, 1 - eps, 1 + eps) A), r = exp(logp - old)       (grpo's term)
  value   max(0.5 (G - V)^2, 0.5 (G - clip(V, V_old - c, V_old + c))^2)   (book c = 0.4)
  total   policy + vf_coef * value                                        (book vf_coef 0.5)
"""

from __future__ import annotations

import torch

from custom_losses.policy_gradient.objectives import clipped_surrogate_loss, kl_estimate

KL_REWARD_SHAPES = ("sequence_mean", "per_token")

__all__ = [
    "KL_REWARD_SHAPES", "clipped_surrogate_loss", "explained_variance", "gae", "last_token_index", "masked_mean",
    "masked_whiten", "place_on_last_token", "ppo_loss", "token_rewards", "value_loss_clipped",
]


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the unmasked entries (0 when there are none)."""
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """(B,) index of each row's last unmasked position (0 for an empty row)."""
    positions = torch.arange(mask.size(1), device=mask.device).expand_as(mask)
    return (positions * (mask > 0)).max(dim=1).values


def place_on_last_token(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) scalars -> (B, T) per-token rewards: the scalar on the last completion token, 0 elsewhere.

    A row with no completion token gets no reward at all.
    """
    rewards = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
    has_tokens = mask.sum(dim=1) > 0
    rows = torch.arange(mask.size(0), device=mask.device)
    rewards[rows, last_token_index(mask)] = torch.where(has_tokens, scores, torch.zeros_like(scores))
    return rewards


def token_rewards(
    scores: torch.Tensor, mask: torch.Tensor, per_token_kl: torch.Tensor | None = None, beta: float = 0.0,
    shape: str = "sequence_mean",
) -> torch.Tensor:
    """The per-token rewards GAE runs on, with an optional KL penalty in the reward.

    sequence_mean (the book): R' = R - beta * (masked mean of kl over the completion), on the last token.
    per_token: R on the last token, and -beta * kl_t on every completion token.
    `per_token_kl` is the estimator's value per token (B, T); ignored when beta is 0.
    """
    if shape not in KL_REWARD_SHAPES:
        raise ValueError(f"unknown KL reward shape `{shape}`; choose one of {KL_REWARD_SHAPES}")
    mask = mask.to(scores.dtype)
    if beta == 0.0 or per_token_kl is None:
        return place_on_last_token(scores, mask)
    if shape == "sequence_mean":
        sequence_kl = (per_token_kl * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return place_on_last_token(scores - beta * sequence_kl, mask)
    return place_on_last_token(scores, mask) - beta * per_token_kl * mask


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.98
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over the completion tokens -> (advantages, returns), both (B, T).

    `rewards` is either (B, T) per-token rewards or (B,) scalar rewards, which are put on each
    row's last completion token. The book's recurrence (policy_gradients/utils.py compute_gae): every position
    from the row's last completion token on is done (bootstraps nothing, carries nothing back); before it the
    running advantage carries through every position, a masked-out hole inside the completion included, and
    the mask is applied at the end. Both outputs are zero outside the mask.
    """
    mask = mask.to(values.dtype)
    if rewards.dim() == 1:
        rewards = place_on_last_token(rewards.to(values.dtype), mask)
    if rewards.shape != values.shape or values.shape != mask.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)}, values {tuple(values.shape)} and mask "
                         f"{tuple(mask.shape)} must have the same (B, T) shape")
    length = values.size(1)
    last = mask.long().cumsum(dim=-1).argmax(dim=-1, keepdim=True)
    done = (torch.arange(length, device=mask.device).unsqueeze(0) >= last).to(values.dtype)
    advantages = torch.zeros_like(values)
    next_value = torch.zeros_like(values[:, 0])
    running = torch.zeros_like(values[:, 0])
    for t in reversed(range(length)):
        not_done = 1.0 - done[:, t]
        delta = rewards[:, t] + not_done * gamma * next_value - values[:, t]
        running = delta + not_done * gamma * lam * running
        advantages[:, t] = running
        next_value = values[:, t]
    advantages = advantages * mask
    returns = (advantages + values) * mask
    return advantages, returns


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor | float | None = None,
    var: torch.Tensor | float | None = None, eps: float = 1e-8,
) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the unmasked entries (0 outside the mask).

    `mean` and `var` default to the (biased) masked statistics of `values`; pass global ones
    to whiten over several processes.
    """
    mask = mask.to(values.dtype)
    if mean is None:
        mean = masked_mean(values, mask)
    if var is None:
        var = masked_mean((values - mean) ** 2, mask)
    return (values - mean) * torch.rsqrt(torch.as_tensor(var, dtype=values.dtype) + eps) * mask


def value_loss_clipped(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float | None = 0.4
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped value loss and where the clipped branch is the larger one.

        loss_t = max(0.5 (G - V)^2, 0.5 (G - clip(V, V_old - c, V_old + c))^2)
    With `clip` None (or <= 0) the loss is 0.5 (G - V)^2 and nothing is clipped.
    """
    unclipped = 0.5 * (returns - values) ** 2
    if clip is None or clip <= 0:
        return unclipped, torch.zeros_like(unclipped, dtype=torch.bool)
    clipped_values = old_values + (values - old_values).clamp(-clip, clip)
    clipped = 0.5 * (returns - clipped_values) ** 2
    return torch.max(unclipped, clipped), clipped > unclipped


def ppo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, values: torch.Tensor,
    old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, eps_low: float = 0.2,
    eps_high: float = 0.2, vf_coef: float = 0.5, cliprange_value: float | None = 0.4,
    ref_logp: torch.Tensor | None = None, beta: float = 0.0, kl_estimator: str = "k3",
    aggregation: str = "seq_mean",
) -> dict[str, torch.Tensor]:
    """The book's PPO loss on one micro-batch; returns the loss and its parts (each aggregated alike).

    per token: policy_t + vf_coef * value_t (+ beta * kl_t when the KL is in the loss, i.e.
    `ref_logp` given and beta > 0); aggregation 'seq_mean' (the book) or 'token_mean'.
    """
    from custom_losses.policy_gradient.objectives import seq_mean, token_mean

    aggregate = {"seq_mean": seq_mean, "token_mean": token_mean}[aggregation]
    policy = clipped_surrogate_loss(logp, old_logp, advantages, eps_low, eps_high)
    value, value_clipped = value_loss_clipped(values, old_values, returns, cliprange_value)
    per_token = policy + vf_coef * value
    out = {"policy_loss": aggregate(policy, mask), "value_loss": aggregate(value, mask),
           "value_clipfrac": masked_mean(value_clipped.to(values.dtype), mask)}
    if beta != 0.0 and ref_logp is not None:
        kl = kl_estimate(logp, ref_logp, kl_estimator)
        per_token = per_token + beta * kl
        out["kl"] = masked_mean(kl.detach(), mask)
    out["loss"] = aggregate(per_token, mask)
    return out


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(G - V) / Var(G) over the unmasked tokens (1: perfect value model, <= 0: no better than a constant)."""
    mask = mask.to(values.dtype)
    var_returns = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    residual = returns - values
    var_residual = masked_mean((residual - masked_mean(residual, mask)) ** 2, mask)
    return float(1.0 - var_residual / var_returns) if float(var_returns) > 0 else float("nan")
