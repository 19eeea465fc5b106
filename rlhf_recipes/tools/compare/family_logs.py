"""How the book logs each family's runs, and what compare plots when local runs are laid over each other: compare's
own facts, kept beside it (not on `Family`, whose hooks are the run's own). Families as the registry names them."""

from __future__ import annotations

# The book's loop logs without `step=`: one wandb row per rollout, then one per optimizer step.
LOGS_BY_ROLLOUT = frozenset({"policy_gradient"})
# The book logs train/<x> and val/<x>: any it logs beyond the registry's map is our <x> and eval_<x>.
LOGS_PREFIXED = frozenset({"reward_model"})

# Our metrics worth plotting when local runs are compared with each other, in display order (globs allowed).
_SFT = ("loss", "mean_token_accuracy", "grad_norm")
COMPARE_METRICS: dict[str, tuple[str, ...]] = {
    "direct_alignment": ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected", "loss",
                         "nll_loss", "kl", "grad_norm"),
    "policy_gradient": ("reward", "rewards/*/mean", "completions/mean_length", "kl", "loss", "grad_norm"),
    "reward_model": ("accuracy", "margin", "loss", "eval_accuracy", "eval_loss"),
    "self_distillation": ("reward", "loss", "skipped", "completions/mean_length", "grad_norm"),
    "sft": _SFT,
    "rejection_sampling": _SFT,  # its training stage is SFT on the selected completions
}
DEFAULT_METRICS = ("loss", "grad_norm")


def compare_metrics(family: str) -> tuple[str, ...]:
    return COMPARE_METRICS.get(family, DEFAULT_METRICS)
