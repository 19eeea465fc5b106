"""ScheduledDPOTrainer: TRL's DPOTrainer with the book's LR schedule option (custom_losses/schedules.py).
BookDPOTrainer: that, with one of the book's loss functions (losses.py).

It runs the forward passes, reusing DPOTrainer's data pipeline, reference handling and PEFT
support, and hands the summed response log-ratios to the loss (averaged over each response's tokens for
DPO-norm: losses.AVERAGED_LOGRATIO_LOSSES); rewards/* are logged as beta x those same log-ratios, as the book
does. A reference-free loss (ORPO, SimPO: losses.REFERENCE_FREE_LOSSES) reads averaged log-probs and runs with `reference_free=True`:
the trainer then keeps no reference copy and computes no reference log-probs. Which algorithms are reference-free is the registry's fact
(rlhf_recipes/registry.py, `reference_model`); the family passes it in.
"""

from __future__ import annotations

import torch
from trl import DPOTrainer

from custom_losses.direct_alignment.losses import (
    AVERAGED_LOGRATIO_LOSSES, REFERENCE_FREE_LOSSES, apo_down_loss, apo_zero_loss, cdpo_loss, dpo_loss, ipo_loss,
    kto_loss, orpo_loss, simpo_loss,
)
from custom_losses.schedules import BookLRScheduleMixin


class ScheduledDPOTrainer(BookLRScheduleMixin, DPOTrainer):
    """TRL's DPOTrainer, its loss untouched; `book_lr_schedule` gives it the book's warmup + linear decay."""


# book_loss -> f(chosen, rejected, beta, config) -> (scalar loss, extra metrics). The log-ratio losses take
# lr = logp - ref summed over the response (averaged over its tokens for AVERAGED_LOGRATIO_LOSSES); the
# reference-free ones take the AVERAGED response log-probs.
LOGRATIO_LOSSES = {
    "dpo": lambda c, r, beta, cfg: (dpo_loss(c, r, beta).mean(), {}),
    "dpo_norm": lambda c, r, beta, cfg: (dpo_loss(c, r, beta).mean(), {}),  # c, r averaged: DPO-norm
    "cdpo": lambda c, r, beta, cfg: (cdpo_loss(c, r, beta, cfg.label_smoothing).mean(), {}),
    "ipo": lambda c, r, beta, cfg: (ipo_loss(c, r, beta).mean(), {}),
    "apo_zero": lambda c, r, beta, cfg: (apo_zero_loss(c, r, beta).mean(), {}),
    "apo_down": lambda c, r, beta, cfg: (apo_down_loss(c, r, beta).mean(), {}),
    "kto": lambda c, r, beta, cfg: _with_kl(*kto_loss(c, r, beta, cfg.desirable_weight, cfg.undesirable_weight)),
}
AVERAGED_LOSSES = {
    "orpo": lambda c, r, beta, cfg: _orpo(c, r, beta),
    "simpo": lambda c, r, beta, cfg: (simpo_loss(c, r, beta, cfg.gamma_beta_ratio).mean(), {}),
}


def _with_kl(loss: torch.Tensor, kl: torch.Tensor):
    return loss, {"kl": kl}


def _orpo(avg_c: torch.Tensor, avg_r: torch.Tensor, beta: float):
    per_pair, log_odds = orpo_loss(avg_c, avg_r, chosen_nll=-avg_c, beta=beta)
    return per_pair.mean(), {"nll_loss": (-avg_c).detach().mean(), "log_odds_chosen": log_odds.detach().mean()}


class BookDPOTrainer(ScheduledDPOTrainer):
    """DPOTrainer whose loss is one of the book's functions (losses.py).

    Everything but the loss (tokenisation, collation, reference model or PEFT adapter
    disabling, precomputed reference log-probs, logging) is DPOTrainer's. With
    `reference_free`, the loss reads the policy's log-probs alone: the reference copy
    DPOTrainer made is dropped and no reference log-probs are computed.
    """

    _NON_MODEL_KEYS = frozenset({"completion_mask", "ref_chosen_logps", "ref_rejected_logps"})

    def __init__(self, *args, reference_free: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.reference_free = reference_free
        if reference_free != (self.args.book_loss in REFERENCE_FREE_LOSSES):
            raise ValueError(
                f"book_loss {self.args.book_loss!r} with reference_free={reference_free}: {REFERENCE_FREE_LOSSES} "
                "are the book losses without a reference model (reference_free=True); the others compare against "
                "one (False)"
            )
        if reference_free:
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

        if self.reference_free:  # orpo, simpo: averaged log-probs
            avg_c, avg_r = chosen_logps / chosen_len, rejected_logps / rejected_len
            loss, metrics = AVERAGED_LOSSES[loss_name](avg_c, avg_r, beta, self.args)
            # "Rewards" are beta x averaged log-probs (the book's ORPO; TRL's CPO/SimPO, whose margins are
            # beta x the book's SimPO margins: the registry's book_metrics rescale them).
            chosen_rewards, rejected_rewards = beta * avg_c.detach(), beta * avg_r.detach()
        else:
            if self.precompute_ref_logps:
                ref_c, ref_r = inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]
            else:
                ref_c, ref_r = self.compute_ref_log_probs(self.ref_model or self.model, inputs)
            lr_c, lr_r = chosen_logps - ref_c, rejected_logps - ref_r
            if loss_name in AVERAGED_LOGRATIO_LOSSES:  # the loss and the logged rewards read per-token means
                lr_c, lr_r = lr_c / chosen_len, lr_r / rejected_len
            loss, metrics = LOGRATIO_LOSSES[loss_name](lr_c, lr_r, beta, self.args)
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
