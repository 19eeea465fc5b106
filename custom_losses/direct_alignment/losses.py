"""Direct-alignment losses where TRL 1.16 computes something other than the book (chapter 8).

Pure functions over per-sequence log-probs; `BookDPOTrainer` (trainer.py) only runs the
forward passes and hands the numbers to them. Notation: lr_c = logp_c - ref_c and
lr_r = logp_r - ref_r are the response log-ratios, summed over the response tokens;
D = lr_c - lr_r; d = beta * D.

Why not TRL's own option:
  cdpo  TRL's `sigmoid` ignores label_smoothing since 0.29; `robust` divides by (1 - 2 eps).
  dpo_norm  TRL's `sigmoid_norm` computes the same loss but logs rewards/* from the SUMMED log-ratios; the book
        (use_average_logprob) logs the averaged ones it trains on, about the response length smaller.
  ipo   TRL's `ipo` length-normalises the log-ratios; the book uses summed ones.
  orpo  TRL's ORPO takes the NLL over prompt+response as a token mean, without clamping.
  kto   TRL's KTOTrainer unpairs the data and runs extra forwards for the KL point.
  apo_zero, apo_down  TRL's `apo_zero`/`apo_down` add a constant 1 to the loss (same gradients, a
        logged loss 1.0 above the book's).
  simpo TRL's CPOTrainer keeps the prompt and cuts the response's end on over-long pairs; the book
        cuts prompt+response from the left (DPOTrainer's keep_end), keeping the response.

Inputs are (batch,) tensors; outputs are (batch,) per-pair losses unless stated otherwise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

BOOK_LOSSES = ("dpo", "cdpo", "dpo_norm", "ipo", "orpo", "kto", "apo_zero", "apo_down", "simpo")
REFERENCE_FREE_LOSSES = ("orpo", "simpo")  # read the policy's log-probs alone (AVERAGED over the response)
# Read log-ratios AVERAGED over each response's tokens (the book's use_average_logprob), as are their logged rewards.
AVERAGED_LOGRATIO_LOSSES = ("dpo_norm",)


def dpo_loss(chosen_logratios: torch.Tensor, rejected_logratios: torch.Tensor, beta: float) -> torch.Tensor:
    """-logsigmoid(beta * (lr_c - lr_r))."""
    return -F.logsigmoid(beta * (chosen_logratios - rejected_logratios))


def cdpo_loss(
    chosen_logratios: torch.Tensor, rejected_logratios: torch.Tensor, beta: float, label_smoothing: float
) -> torch.Tensor:
    """Conservative DPO: (1 - eps) * -logsigmoid(d) + eps * -logsigmoid(-d), d = beta * (lr_c - lr_r).

    eps is the assumed fraction of flipped preference labels (the book uses 0.1).
    """
    d = beta * (chosen_logratios - rejected_logratios)
    return (1 - label_smoothing) * -F.logsigmoid(d) + label_smoothing * -F.logsigmoid(-d)


def ipo_loss(chosen_logratios: torch.Tensor, rejected_logratios: torch.Tensor, beta: float) -> torch.Tensor:
    """(D - 1/(2 beta))^2 with D = lr_c - lr_r on SUMMED log-ratios (no length normalisation)."""
    return (chosen_logratios - rejected_logratios - 1.0 / (2.0 * beta)) ** 2


def apo_zero_loss(chosen_logratios: torch.Tensor, rejected_logratios: torch.Tensor, beta: float) -> torch.Tensor:
    """APO-zero: -sigmoid(beta * lr_c) + sigmoid(beta * lr_r) (no constant: TRL's adds 1)."""
    return -torch.sigmoid(beta * chosen_logratios) + torch.sigmoid(beta * rejected_logratios)


def apo_down_loss(chosen_logratios: torch.Tensor, rejected_logratios: torch.Tensor, beta: float) -> torch.Tensor:
    """APO-down: sigmoid(beta * lr_c) - sigmoid(beta * (lr_c - lr_r)) (no constant: TRL's adds 1)."""
    return torch.sigmoid(beta * chosen_logratios) - torch.sigmoid(beta * (chosen_logratios - rejected_logratios))


def simpo_loss(
    chosen_avg_logps: torch.Tensor, rejected_avg_logps: torch.Tensor, beta: float, gamma_beta_ratio: float
) -> torch.Tensor:
    """SimPO, reference-free: -logsigmoid(beta * (a_c - a_r - gamma_beta_ratio)), a_* the responses' AVERAGED
    token log-probs. The book's gamma is the gamma/beta ratio (0.5), so the shift is gamma_beta_ratio * beta."""
    return -F.logsigmoid(beta * (chosen_avg_logps - rejected_avg_logps - gamma_beta_ratio))


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, stable at both ends (Maechler 2012): expm1 near 0, log1p far from it."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


ORPO_LOGP_MAX = -1e-6  # log-odds need p < 1; the book clamps averaged log-probs here


def orpo_loss(
    chosen_avg_logps: torch.Tensor,
    rejected_avg_logps: torch.Tensor,
    chosen_nll: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ORPO: NLL(chosen) - beta * logsigmoid(log_odds), per pair.

    log_odds = [a_c - log(1 - exp(a_c))] - [a_r - log(1 - exp(a_r))], where a_* are the
    responses' AVERAGED token log-probs clamped to <= -1e-6, and NLL(chosen) is the
    per-sequence mean NLL over the chosen RESPONSE tokens only.
    Returns (per-pair loss, log_odds).
    """
    a_c = chosen_avg_logps.float().clamp(max=ORPO_LOGP_MAX)
    a_r = rejected_avg_logps.float().clamp(max=ORPO_LOGP_MAX)
    log_odds = (a_c - a_r) - (log1mexp(a_c) - log1mexp(a_r))
    return chosen_nll - beta * F.logsigmoid(log_odds), log_odds


def kto_loss(
    chosen_logratios: torch.Tensor,
    rejected_logratios: torch.Tensor,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Paired KTO, as the book runs it. Returns (scalar loss, KL reference point).

    KL = clamp(mean(lr_r), min=0), detached: the batch's rejected log-ratios stand in for
    the unrelated-completion KL estimate, so no extra forward pass is needed. With a single
    pair in the micro-batch the book falls back to the mean over BOTH log-ratios,
    KL = clamp(mean([lr_c, lr_r]), min=0).
    loss = w_d * mean(1 - sigmoid(beta (lr_c - KL))) + w_u * mean(1 - sigmoid(beta (KL - lr_r))).
    """
    if rejected_logratios.numel() > 1:
        kl_logratios = rejected_logratios
    else:
        kl_logratios = torch.cat([chosen_logratios.reshape(-1), rejected_logratios.reshape(-1)])
    kl = kl_logratios.detach().mean().clamp(min=0)
    chosen = 1 - torch.sigmoid(beta * (chosen_logratios - kl))
    rejected = 1 - torch.sigmoid(beta * (kl - rejected_logratios))
    return desirable_weight * chosen.mean() + undesirable_weight * rejected.mean(), kl
