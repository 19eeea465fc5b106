"""GRPOConfig options that TRL applies inside its own loss, and which of them our objectives apply too.

TRL 1.16's GRPOTrainer._compute_loss reads these options while it builds its objective. Our recipes
compute some objectives themselves (trainer.py: book_objective policy_gradient for REINFORCE, RLOO and
MaxRL, cispo for CISPO; PPO in custom_losses/ppo), and our KL term replaces TRL's in every recipe. An
option that only TRL's loss reads would then be accepted and do nothing. Each one either acts (the same
math as TRL's, applied in our objective) or is refused before anything loads, by `refusals`.

What acts where (TRL 1.16):
- top_entropy_quantile (the 80/20 rule: the policy term only on the top-q entropy tokens) and a constant
  entropy_coef (loss -= coef * mean entropy): every TRL loss_type, our policy_gradient / cispo objectives and
  PPO's (trainer.py's _entropy_mask and _entropy_bonus, with TRL's own entropy mask; PPO's value term is
  never masked).
- use_adaptive_entropy, off_policy_mask_threshold, importance_sampling_level 'sequence': TRL's losses only.
- delta (INTELLECT-2's upper bound on the unclipped ratio): TRL's clipped losses only (grpo, bnpo,
  dr_grpo, dapo, luspo); TRL's own cispo, sapo and vespo ignore it.
- use_bias_correction_kl: TRL's KL term only, which no recipe uses (beta's term is ours, kl_estimator).
"""

from __future__ import annotations

from typing import Any

# TRL loss types whose clipped surrogate reads `delta` (GRPOTrainer._compute_loss)
DELTA_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
# Our own objectives -> the algorithms of this repository that use them (for the one-line refusal)
OWN_OBJECTIVES = {
    "policy_gradient": "book_objective policy_gradient (reinforce, rloo, maxrl: -logp * A, no ratio)",
    "cispo": "book_objective cispo (cispo)",
    "ppo": "ppo's own objective",
}
# Options our own objectives apply as TRL does
ACTS_IN_OWN_OBJECTIVE = {
    "policy_gradient": ("top_entropy_quantile", "entropy_coef"),
    "cispo": ("top_entropy_quantile", "entropy_coef"),
    "ppo": ("top_entropy_quantile", "entropy_coef"),
}
# option -> (is it set?, what it is), for the refusal message
OPTIONS = {
    "top_entropy_quantile": (lambda c: c.top_entropy_quantile < 1.0, "TRL's high-entropy token mask"),
    "entropy_coef": (lambda c: c.entropy_coef != 0.0, "TRL's entropy bonus"),
    "use_adaptive_entropy": (lambda c: bool(c.use_adaptive_entropy), "TRL's adaptive entropy bonus"),
    "delta": (lambda c: c.delta is not None, "TRL's upper bound on the unclipped ratio"),
    "off_policy_mask_threshold": (lambda c: c.off_policy_mask_threshold is not None, "TRL's off-policy mask"),
    "importance_sampling_level": (lambda c: c.importance_sampling_level != "token", "TRL's sequence-level ratio"),
    "use_bias_correction_kl": (lambda c: bool(c.use_bias_correction_kl), "TRL's importance-weighted KL"),
}


def objective_of(config: Any) -> str | None:
    """'ppo', our book_objective, or None where TRL's loss_type computes the objective."""
    return getattr(config, "own_objective", None) or config.book_objective


def acts(option: str, objective: str | None, loss_type: str) -> bool:
    """Whether `option`, when set, changes the loss of this objective (None: TRL's `loss_type`)."""
    if option == "use_bias_correction_kl":
        return False  # our KL term (trainer.py) replaces TRL's in every recipe
    if objective is not None:
        return option in ACTS_IN_OWN_OBJECTIVE[objective]
    if option == "delta":
        return loss_type in DELTA_LOSS_TYPES
    return True


def refusals(config: Any) -> list[str]:
    """One message per option that is set but would not act here."""
    objective = objective_of(config)
    where = OWN_OBJECTIVES[objective] if objective is not None else f"TRL's loss_type {config.loss_type}"
    out = []
    for option, (is_set, what) in OPTIONS.items():
        if not is_set(config) or acts(option, objective, config.loss_type):
            continue
        value = getattr(config, option)
        if option == "use_bias_correction_kl":
            out.append(f"use_bias_correction_kl {value} ({what}) does not act: beta's KL term is this repository's "
                       "(kl_estimator, trainer.py) in every recipe; remove it")
        elif option == "delta" and objective is None:
            out.append(f"delta {value} ({what}) does not act with {where}: TRL reads it only for loss_type in "
                       f"{DELTA_LOSS_TYPES}; remove it")
        else:
            out.append(f"{option} {value} ({what}) does not act with {where}; remove it, or use an algorithm whose "
                       "objective is TRL's (grpo, drgrpo, gspo, sapo, dapo)")
    return out
