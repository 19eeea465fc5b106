"""Per-token policy-gradient objectives, their aggregation, and KL estimators (book chapter 6).

Notation: logp = per-token log-prob of the current policy (B, T), old = at rollout time,
ref = frozen reference, A = advantage per sequence (B,) or (B, 1), r = exp(logp - old),
M = completion mask (B, T). Each objective returns the per-token LOSS (the negated
objective), (B, T), or (B, 1) where it is one value per sequence; `seq_mean` or
`token_mean` turns it into the micro-batch loss.

  policy_gradient  -logp * A                                     REINFORCE, RLOO, MaxRL
  clipped          -min(r A, clip(r, 1-eps_lo, 1+eps_hi) A)       GRPO, Dr. GRPO, DAPO (0.2/0.28)
  gspo             s = exp(seq-mean(logp - old)); -min(s A, clip(s, 1-eps_lo, 1+eps_hi) A)
  cispo            -sg(clip(r, 1-eps_lo, 1+eps_hi)) * A * logp    CISPO (book: 0.8 / 1.4)
  sapo             -sigmoid(tau (r - 1)) * 4 / tau * A, tau = tau_pos if A > 0 else tau_neg

KL estimators, with x = logp - ref (the book's convention):
  k1 = -x,  k2 = x^2 / 2,  k3 = expm1(x) - x
expm1, not exp(x) - 1, which loses all precision (and can go negative) near x = 0. Note the
book's k1 has expectation -KL under the policy; TRL's k3 is exp(ref - logp) - (ref - logp) - 1,
i.e. this k3 with x negated.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def _per_sequence(advantages: torch.Tensor) -> torch.Tensor:
    return advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages


def policy_gradient_loss(logp: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """-logp * A: the plain policy gradient (no ratio, no clipping)."""
    return -logp * _per_sequence(advantages)


def clipped_surrogate_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> torch.Tensor:
    """PPO/GRPO's clipped surrogate: -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), r = exp(logp - old)."""
    a = _per_sequence(advantages)
    ratio = torch.exp(logp - old_logp)
    return -torch.min(ratio * a, ratio.clamp(1 - eps_low, 1 + eps_high) * a)


def sequence_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, 1): the masked mean over each sequence's tokens of logp - old (0 for an empty mask)."""
    mask = mask.to(logp.dtype)
    return ((logp - old_logp) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)


def gspo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    eps_low: float, eps_high: float,
) -> torch.Tensor:
    """GSPO: one ratio per sequence, s = exp(seq-mean(logp - old)), clipped like GRPO. Returns (B, 1)."""
    a = _per_sequence(advantages)
    s = torch.exp(sequence_log_ratio(logp, old_logp, mask))
    return -torch.min(s * a, s.clamp(1 - eps_low, 1 + eps_high) * a)


def cispo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float, eps_high: float
) -> torch.Tensor:
    """CISPO: -sg(clip(r, 1 - eps_low, 1 + eps_high)) * A * logp; the gradient flows through logp only."""
    weight = torch.exp(logp - old_logp).clamp(1 - eps_low, 1 + eps_high).detach()
    return -weight * _per_sequence(advantages) * logp


def sapo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, tau_pos: float = 1.0, tau_neg: float = 1.05
) -> torch.Tensor:
    """SAPO's soft gate: -sigmoid(tau (r - 1)) * 4 / tau * A, tau = tau_pos where A > 0 else tau_neg."""
    a = _per_sequence(advantages)
    ratio = torch.exp(logp - old_logp)
    tau = torch.where(a > 0, torch.as_tensor(tau_pos, dtype=ratio.dtype), torch.as_tensor(tau_neg, dtype=ratio.dtype))
    return -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * a


def seq_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean over each sequence's tokens, then mean over sequences (a sequence with no
    tokens contributes 0, as the book's masked_mean with a clamped denominator does)."""
    mask = mask.to(per_token.dtype)
    per_token = per_token.expand_as(mask) if per_token.shape != mask.shape else per_token
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def token_mean(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over every unmasked token of the micro-batch divided by their count (DAPO's token-level mean)."""
    mask = mask.to(per_token.dtype)
    per_token = per_token.expand_as(mask) if per_token.shape != mask.shape else per_token
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


AGGREGATIONS = {"seq_mean": seq_mean, "token_mean": token_mean}


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL estimate with x = logp - ref: k1 = -x, k2 = x^2/2, k3 = expm1(x) - x."""
    x = logp - ref_logp
    if estimator == "k1":
        return -x
    if estimator == "k2":
        return x.pow(2) / 2
    if estimator == "k3":
        return torch.expm1(x) - x
    raise ValueError(f"unknown KL estimator `{estimator}`; choose one of {KL_ESTIMATORS}")


def sequence_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """(B,): each sequence's masked-mean KL estimate; REINFORCE/RLOO/PPO subtract beta times it from the reward."""
    mask = mask.to(logp.dtype)
    kl = kl_estimate(logp, ref_logp, estimator) * mask
    return kl.sum(-1) / mask.sum(-1).clamp(min=1.0)
