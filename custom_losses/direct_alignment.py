"""Direct-alignment losses where TRL 1.16 computes something other than the book (chapter 8).

The math lives in pure functions over per-sequence log-probs; `BookDPOTrainer` only runs the
forward passes (reusing DPOTrainer's data pipeline, reference handling and PEFT support) and
hands the numbers to them. Notation: lr_c = logp_c - ref_c and lr_r = logp_r - ref_r are
the response log-ratios, summed over the response tokens; D = lr_c - lr_r; d = beta * D.

Why not TRL's own option:
  cdpo  TRL's `sigmoid` ignores label_smoothing since 0.29; `robust` divides by (1 - 2 eps).
  ipo   TRL's `ipo` length-normalises the log-ratios; the book uses summed ones.
  orpo  TRL's ORPO takes the NLL over prompt+response as a token mean, without clamping.
  kto   TRL's KTOTrainer unpairs the data and runs extra forwards for the KL point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from trl import DPOConfig, DPOTrainer

BOOK_LOSSES = ("dpo", "cdpo", "ipo", "orpo", "kto")
REFERENCE_FREE = frozenset({"orpo"})


# --------------------------------------------------------------------------------------
# Pure loss functions. Inputs are (batch,) tensors; outputs are (batch,) per-pair losses
# unless stated otherwise.


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
    the unrelated-completion KL estimate, so no extra forward pass is needed.
    loss = w_d * mean(1 - sigmoid(beta (lr_c - KL))) + w_u * mean(1 - sigmoid(beta (KL - lr_r))).
    """
    kl = rejected_logratios.detach().mean().clamp(min=0)
    chosen = 1 - torch.sigmoid(beta * (chosen_logratios - kl))
    rejected = 1 - torch.sigmoid(beta * (kl - rejected_logratios))
    return desirable_weight * chosen.mean() + undesirable_weight * rejected.mean(), kl


# --------------------------------------------------------------------------------------
# Trainer plumbing


@dataclass
class BookDPOConfig(DPOConfig):
    """DPOConfig plus the book's losses that TRL does not compute the same way."""

    book_loss: str = field(
        default="dpo",
        metadata={"help": f"Which book loss to use: {', '.join(BOOK_LOSSES)}. Replaces `loss_type`."},
    )
    desirable_weight: float = field(default=1.0, metadata={"help": "KTO: weight of the chosen (desirable) term."})
    undesirable_weight: float = field(default=1.0, metadata={"help": "KTO: weight of the rejected term."})

    def __post_init__(self):
        if self.book_loss not in BOOK_LOSSES:
            raise ValueError(f"book_loss must be one of {BOOK_LOSSES}, got {self.book_loss!r}")
        if self.book_loss == "cdpo" and not 0 <= self.label_smoothing < 0.5:
            raise ValueError(f"cdpo needs 0 <= label_smoothing < 0.5, got {self.label_smoothing}")
        super().__post_init__()


class BookDPOTrainer(DPOTrainer):
    """DPOTrainer whose loss is one of the book's functions above.

    Everything but the loss (tokenisation, collation, reference model or PEFT adapter
    disabling, precomputed reference log-probs, logging) is DPOTrainer's.
    """

    _NON_MODEL_KEYS = frozenset({"completion_mask", "ref_chosen_logps", "ref_rejected_logps"})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.args.book_loss in REFERENCE_FREE:
            self.ref_model = None  # never queried; free the copy DPOTrainer made

    def _compute_loss(self, model, inputs, return_outputs):
        if return_outputs:
            raise NotImplementedError("BookDPOTrainer does not return logits")
        mode = "train" if self.model.training else "eval"
        loss_name, beta = self.args.book_loss, self.beta

        model_kwargs = {k: v for k, v in inputs.items() if k not in self._NON_MODEL_KEYS}
        model_kwargs["use_cache"] = False
        completion_mask = inputs["completion_mask"]
        labels = inputs["input_ids"].masked_fill(completion_mask == 0, -100)
        outputs = model(**model_kwargs, labels=labels, fused_lm_head=True)
        mask = completion_mask[..., 1:].to(outputs.log_probs.dtype)
        per_token_logps = outputs.log_probs[:, -mask.size(1):] * mask
        lengths = mask.sum(dim=1).clamp(min=1)
        logps = per_token_logps.sum(dim=1)
        chosen_logps, rejected_logps = logps.chunk(2, dim=0)
        chosen_len, rejected_len = lengths.chunk(2, dim=0)

        metrics: dict[str, torch.Tensor] = {}
        if loss_name in REFERENCE_FREE:
            avg_c, avg_r = chosen_logps / chosen_len, rejected_logps / rejected_len
            per_pair, log_odds = orpo_loss(avg_c, avg_r, chosen_nll=-avg_c, beta=beta)
            loss = per_pair.mean()
            # The book logs ORPO's "rewards" as beta x averaged log-probs.
            chosen_rewards, rejected_rewards = beta * avg_c.detach(), beta * avg_r.detach()
            metrics["nll_loss"] = (-avg_c).detach().mean()
            metrics["log_odds_chosen"] = log_odds.detach().mean()
        else:
            if self.precompute_ref_logps:
                ref_c, ref_r = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
            else:
                ref_c, ref_r = self.compute_ref_log_probs(self.ref_model or self.model, inputs)
            lr_c, lr_r = chosen_logps - ref_c, rejected_logps - ref_r
            if loss_name == "dpo":
                loss = dpo_loss(lr_c, lr_r, beta).mean()
            elif loss_name == "cdpo":
                loss = cdpo_loss(lr_c, lr_r, beta, self.args.label_smoothing).mean()
            elif loss_name == "ipo":
                loss = ipo_loss(lr_c, lr_r, beta).mean()
            else:  # kto
                loss, kl = kto_loss(lr_c, lr_r, beta, self.args.desirable_weight, self.args.undesirable_weight)
                metrics["kl"] = kl
            chosen_rewards, rejected_rewards = beta * lr_c.detach(), beta * lr_r.detach()

        gather = self.accelerator.gather
        self._metrics[mode]["rewards/chosen"].append(gather(chosen_rewards).mean().item())
        self._metrics[mode]["rewards/rejected"].append(gather(rejected_rewards).mean().item())
        self._metrics[mode]["rewards/margins"].append(gather(chosen_rewards - rejected_rewards).mean().item())
        self._metrics[mode]["rewards/accuracies"].append(
            gather((chosen_rewards > rejected_rewards).float()).mean().item()
        )
        self._metrics[mode]["logps/chosen"].append(gather(chosen_logps.detach()).mean().item())
        self._metrics[mode]["logps/rejected"].append(gather(rejected_logps.detach()).mean().item())
        for name, value in metrics.items():
            self._metrics[mode][name].append(gather(value.reshape(1)).mean().item())
        return loss
