"""The book's figures and what nano-book reads of each family: the lab's facts, kept with the tools that draw them
(nano_book.py, nano_figures.py, sweep/report.py) rather than on the runner's `Family`. Families and algorithms as
the registry names them; a family not listed has no book figure and no nano-book table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BookFigure:
    """One of the book's wandb figures (rlhf-book, images/<image>) and the nano figure drawn with the same metrics
    against the same axis (the optimizer step)."""
    name: str  # the nano figure's name: <out>/nano_<name>.png
    image: str  # the book's image it answers
    # (the book's wandb metric, the key our runs log in metrics.jsonl) per panel, in the book's order
    panels: tuple[tuple[str, str], ...]
    # the registry's algorithms whose nano runs it overlays; () : the nano SFT base's own build (no new run)
    algorithms: tuple[str, ...] = ()
    # held-out proof beside the book's training panels: a metrics.jsonl key drawn per step ...
    heldout_curve: str | None = None
    # ... and/or (after, before) keys of final_results.json, drawn per run with the base beside it
    heldout_final: tuple[str, str] | None = None


BOOK_FIGURES: dict[str, BookFigure] = {
    # The book's `accuracy`: the share of the batch's pairs whose implicit reward ranks chosen first (TRL's name).
    "direct_alignment": BookFigure("direct_alignment", "wandb_direct_alignment.png",
                                   (("accuracy", "rewards/accuracies"),), ("kto", "ipo", "dpo"),
                                   "eval/implicit_accuracy"),
    # The book's figure plots avg_reward (correctness + 0.5 x format, 0-1.5), which TRL logs as `reward`.
    "policy_gradient": BookFigure("policy_gradients", "wandb_policy_gradients.png", (("avg_reward", "reward"),),
                                  ("cispo", "gspo", "drgrpo", "ppo", "rloo", "grpo", "reinforce"), "eval/exact_match"),
    # The book's four rules' SFT stage (wandb sft/*; our SFT stage logs them unprefixed, epoch from 0) and, as the
    # proof, stage 6's held-out exact match after and before (final_results.json).
    "rejection_sampling": BookFigure("rejection_sampling", "wandb_rejection_sampling.png",
                                     (("sft/loss", "loss"), ("sft/grad_norm", "grad_norm"), ("sft/epoch", "epoch")),
                                     ("rejection_sampling_top_per_prompt", "rejection_sampling_top_k_overall",
                                      "rejection_sampling_random_per_prompt", "rejection_sampling_random_k_overall"),
                                     heldout_final=("test_accuracy", "base_test_accuracy")),
    # The book's sdpo_rg run: reward of the accepted groups, the distillation loss, grad_norm.
    "self_distillation": BookFigure("distillation", "wandb_distillation.png",
                                    (("reward", "reward"), ("loss", "loss"), ("grad_norm", "grad_norm")), ("sdpo",)),
    # The book's no_robots SFT run; on nano, the nano base's own build (its periodic eval/exact_match: the proof).
    "sft": BookFigure("instruction_tuning", "wandb_instruction_tuning.png",
                      (("loss", "loss"), ("grad_norm", "grad_norm")), (), "eval/exact_match"),
}


@dataclass(frozen=True)
class NanoBookMetrics:
    """`rlhf-recipes nano-book --family NAME`: the held-out metrics of its table and figure (the evaluator's, logged
    as eval/<metric> during training; a run "learns" when every one's gain interval is above zero) and the training
    metric drawn beside them."""
    heldout: tuple[str, ...]
    training: str


NANO_BOOK: dict[str, NanoBookMetrics] = {
    # The book's figure: held-out accuracy on the task, beside the training correctness reward.
    "policy_gradient": NanoBookMetrics(("exact_match",), "rewards/correctness_reward/mean"),
    # Direct alignment on nano: held-out preference accuracy, and task accuracy; the training pairs' preference
    # accuracy as TRL logs it.
    "direct_alignment": NanoBookMetrics(("implicit_accuracy", "exact_match"), "rewards/accuracies"),
}
