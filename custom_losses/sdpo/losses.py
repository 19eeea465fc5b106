"""SDPO's loss (RLHF book, chapter 12): top-k + tail reverse KL from student to teacher, group token mean.

Pure functions on tensors; the trainer (trainer.py) only feeds them logits and masks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TAIL_LOG_MASS_MAX = -1e-7  # log of the top-k mass is clamped here, so the tail bucket never has log(0)


def topk_tail_log_probs(log_probs_topk: torch.Tensor) -> torch.Tensor:
    """Append the tail bucket to top-k log-probabilities.

    Given log p_i for the k chosen tokens (i = 1..k, normalised over the full vocabulary, so
    S = sum_i p_i <= 1), return k + 1 log-probabilities: the k given ones and
        log p_tail = log(1 - S) = log(-expm1(log S)),
    with log S clamped at -1e-7 so that a top-k covering (numerically) all the mass gives a tail
    of about 1e-7 instead of log 0.
    """
    log_mass = torch.logsumexp(log_probs_topk, dim=-1, keepdim=True).clamp(max=TAIL_LOG_MASS_MAX)
    return torch.cat([log_probs_topk, torch.log(-torch.expm1(log_mass))], dim=-1)


def topk_tail_reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, k: int) -> torch.Tensor:
    """Per-position top-k + tail reverse KL, shape (..., T) from logits of shape (..., T, V).

    With p_s = softmax(student_logits), p_t = softmax(teacher_logits) over the FULL vocabulary
    (temperature 1: the logits are used as given), I = the student's k most probable tokens, and
        p_s(tail) = 1 - sum_{i in I} p_s(i),   p_t(tail) = 1 - sum_{i in I} p_t(i),
    the loss at a position is
        KL(s || t) = sum_{i in I + {tail}} p_s(i) (log p_s(i) - log p_t(i)).
    Gradients flow through the student only when the teacher logits are detached (the trainer
    computes them under no_grad). Computed as the book's SDPOLoss computes it, op for op and in the logits' own
    dtype (bf16 logits stay bf16: the book's numbers, not more precise ones): top-k of the logits, minus the
    log-sum-exp, and torch's kl_div on the log-probabilities.
    """
    top_student, index = student_logits.topk(k, dim=-1)
    log_s = topk_tail_log_probs(top_student - student_logits.logsumexp(dim=-1, keepdim=True))
    log_t = topk_tail_log_probs(teacher_logits.gather(-1, index) - teacher_logits.logsumexp(dim=-1, keepdim=True))
    return F.kl_div(log_t, log_s, reduction="none", log_target=True).sum(dim=-1)


def group_token_mean(per_token: torch.Tensor, mask: torch.Tensor, group_size: int) -> torch.Tensor:
    """The book's reduction: masked mean over ALL tokens of each group, then the mean over groups.

    per_token, mask: (B, T) with B = groups x group_size, each group's rows consecutive. For group g
    with rows R_g,
        L_g = sum_{r in R_g, t} mask[r, t] * per_token[r, t] / sum_{r in R_g, t} mask[r, t]
    (0 for a group with no unmasked token), and the loss is (1/G) sum_g L_g. Long completions
    weigh more within their group (a token mean), unlike a per-sequence mean.
    """
    if per_token.size(0) % group_size:
        raise ValueError(f"{per_token.size(0)} rows are not whole groups of {group_size}")
    mask = mask.to(per_token.dtype)
    sums = (per_token * mask).reshape(-1, group_size * per_token.size(1)).sum(dim=1)
    counts = mask.reshape(-1, group_size * mask.size(1)).sum(dim=1)
    return (sums / counts.clamp(min=1.0)).mean()


def book_completion_mask(completion_ids: torch.Tensor, completion_mask: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """The book's loss mask: every generated position whose token is not the pad token.

    TRL's mask covers the completion up to and including its first end token. The book masks by
    `completion_ids != pad_token_id` on the generated (pad-filled) ids, so an end token that IS the
    pad token (Qwen3: <|endoftext|>) is excluded; <|im_end|> (not the pad token) stays in.
    """
    return completion_mask * (completion_ids != pad_token_id).to(completion_mask.dtype)
