"""Reward-model losses and evaluation metrics (book chapter 5): pure functions, tensors or arrays in.

Bradley-Terry trains through TRL's own RewardTrainer, whose loss is exactly
`bradley_terry_loss`; the ORM and PRM trainers (trainers.py) call `token_bce_loss` and
`step_ce_loss`, and every kind's evaluation reads its metric function here.

Notation: r_c, r_r = scalar rewards of the chosen / rejected sequence (the head read at the
last non-pad token); z_t = the per-token logit of a token-classification head; M = mask.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from custom_losses.reward_models.data import IGNORE_INDEX, STEP_CLASS_NAMES


# --------------------------------------------------------------------------------------
# Losses


def bradley_terry_loss(
    chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, margin: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-pair Bradley-Terry loss: -logsigmoid(r_c - r_r [- margin]).

    -log P(chosen > rejected) under P = sigmoid(r_c - r_r). TRL's RewardTrainer computes the
    mean of this (with the optional margin column); the book uses no margin.
    """
    diff = chosen_rewards - rejected_rewards
    if margin is not None:
        diff = diff - margin
    return -F.logsigmoid(diff)


def outcome_label(rewards):
    """The book's ORM label of a rollout: int(reward) (train_orm.py, `label = int(reward)`), so 0.7 is 0 (wrong)."""
    return rewards.trunc() if isinstance(rewards, torch.Tensor) else np.trunc(np.asarray(rewards, dtype=np.float64))


def token_bce_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ORM loss: binary cross-entropy of every completion token against its rollout's correctness.

    logits (B, T): one logit z_t per token; targets (B,): each rollout's reward, whose label is the book's
    y = int(reward) (`outcome_label`: a partial-credit reward under 1 is a wrong answer); mask (B, T): 1 on
    completion tokens.
    loss = sum_{b,t} M_bt * BCE(z_bt, y_b) / sum_{b,t} M_bt, with
    BCE(z, y) = -[y log sigmoid(z) + (1 - y) log(1 - sigmoid(z))]  (the mean over all masked
    tokens of the micro-batch, as the book computes it). Zero, with a graph, if nothing is masked in.
    """
    mask = mask.to(logits.dtype)
    per_token = F.binary_cross_entropy_with_logits(
        logits, outcome_label(targets).to(logits.dtype)[:, None].expand_as(logits), reduction="none"
    )
    total = mask.sum()
    if total == 0:
        return logits.sum() * 0.0
    return (per_token * mask).sum() / total


def step_ce_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """PRM loss: 3-class cross-entropy at the step-separator positions only.

    logits (B, T, C): class logits per token (C = 3: bad, neutral, good); labels (B, T): the
    class index at the last token of each step separator, -100 everywhere else.
    loss = mean over positions with a label of -log softmax(logits)[label]. Zero, with a graph,
    if the micro-batch has no labeled position.
    """
    labeled = labels != IGNORE_INDEX
    if not labeled.any():
        return logits.sum() * 0.0
    return F.cross_entropy(logits[labeled], labels[labeled])


# --------------------------------------------------------------------------------------
# Evaluation metrics (numpy or tensors in, floats out)


def preference_metrics(chosen_rewards, rejected_rewards) -> dict[str, float]:
    """Pairwise accuracy (r_c > r_r, ties count as wrong, as the book) and mean margin r_c - r_r."""
    c = np.asarray(chosen_rewards, dtype=np.float64)
    r = np.asarray(rejected_rewards, dtype=np.float64)
    margin = c - r
    return {
        "accuracy": float((margin > 0).mean()) if len(margin) else float("nan"),
        "margin": float(margin.mean()) if len(margin) else float("nan"),
        "chosen_reward": float(c.mean()) if len(c) else float("nan"),
        "rejected_reward": float(r.mean()) if len(r) else float("nan"),
        "loss": float(np.logaddexp(0.0, -margin).mean()) if len(margin) else float("nan"),  # -logsigmoid
        "num_pairs": int(len(margin)),
    }


def last_token_hits(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ORM training accuracy per SEQUENCE, as the book logs `train/accuracy` (since its PR #517).

    logits (B, T) token logits, targets (B,) correctness, mask (B, T) completion tokens. A rollout
    is right when its prediction, sigmoid(z) > 0.5 (z > 0) at its LAST completion token, equals its label
    int(reward) (the book's `preds == sequence_labels`: a label outside {0, 1} is never matched).
    Returns a (B,) bool tensor; rows with no completion token are False (the caller counts them out).
    """
    positions = torch.arange(mask.size(-1), device=mask.device)
    last = (positions * mask.long()).argmax(-1)
    last_logits = logits.gather(-1, last[:, None]).squeeze(-1)
    return ((last_logits > 0).long() == outcome_label(targets).long()) & mask.bool().any(-1)


def rollout_metrics(scores, rewards, groups) -> dict[str, float]:
    """ORM ranking metrics over rollouts grouped by prompt.

    top1_accuracy: per prompt, the fraction of correct rollouts among those tied at the top score
    (one top rollout: 1 or 0), averaged over prompts; pairwise_accuracy: over all (correct,
    incorrect) rollout pairs of the same prompt, 1 when the correct one scores higher, 0.5 on a
    tie, 0 otherwise, averaged (both as the book's train_orm.py counts ties). Baselines for reading them:
    random_top1 = mean fraction of correct rollouts per prompt (picking at random), oracle_top1
    = fraction of prompts with at least one correct rollout.
    """
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    correct = outcome_label(rewards).reshape(-1) != 0  # the book's outcome: bool(int(reward))
    groups = np.asarray(groups).reshape(-1)
    top1, random_top1, oracle, wins, pairs = [], [], [], 0.0, 0
    for g in np.unique(groups):
        idx = np.flatnonzero(groups == g)
        s, y = scores[idx], correct[idx]
        top1.append(float(y[s == s.max()].mean()))
        random_top1.append(float(y.mean()))
        oracle.append(float(y.any()))
        if y.any() and (~y).any():
            diff = s[y][:, None] - s[~y][None, :]
            wins += float((diff > 0).sum()) + 0.5 * float((diff == 0).sum())
            pairs += diff.size
    return {
        "top1_accuracy": float(np.mean(top1)) if top1 else float("nan"),
        "pairwise_accuracy": wins / pairs if pairs else float("nan"),
        "random_top1": float(np.mean(random_top1)) if top1 else float("nan"),
        "oracle_top1": float(np.mean(oracle)) if top1 else float("nan"),
        "mean_score_correct": float(scores[correct].mean()) if correct.any() else float("nan"),
        "mean_score_incorrect": float(scores[~correct].mean()) if (~correct).any() else float("nan"),
        "num_prompts": len(top1),
        "num_rollouts": int(len(scores)),
        "num_pairs": int(pairs),
    }


def step_metrics(predictions, labels) -> dict[str, float]:
    """PRM step accuracy: argmax class == label at every labeled position (-100 elsewhere).

    Also the accuracy of always answering the most frequent class (the baseline to beat) and
    the recall of each class.
    """
    predictions = np.asarray(predictions).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    keep = labels != IGNORE_INDEX
    p, y = predictions[keep], labels[keep]
    out: dict[str, float] = {
        "step_accuracy": float((p == y).mean()) if len(y) else float("nan"),
        "majority_baseline": (float(np.bincount(y, minlength=len(STEP_CLASS_NAMES)).max() / len(y))
                              if len(y) else float("nan")),
        "num_steps": int(len(y)),
    }
    for k, name in enumerate(STEP_CLASS_NAMES):
        sel = y == k
        out[f"recall_{name}"] = float((p[sel] == k).mean()) if sel.any() else float("nan")
    return out
