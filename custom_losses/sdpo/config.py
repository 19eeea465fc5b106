"""BookSDPOConfig: TRL's experimental SDPOConfig with the book's self-distillation (chapter 12) as defaults.

TRL computes the book's top-k + tail reverse KL only with the settings below (distillation_mode
topk_logits, topk 20, add_tail, a live teacher, own success not excluded, the book's templates); the
options after them are ours, for the three places where TRL's trainer differs from the book
(custom_losses/sdpo/trainer.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl.experimental.sdpo import SDPOConfig

import rewards

# The book's teacher user turn: question + "\n\nCorrect solution:\n\n" + demonstration + "\n\nCorrectly solve the
# original question." TRL fills reprompt_template with prompt, solution (solution_template) and feedback (unused).
BOOK_REPROMPT_TEMPLATE = "{prompt}{solution}{feedback}\n\nCorrectly solve the original question."
BOOK_SOLUTION_TEMPLATE = "\n\nCorrect solution:\n\n{successful_previous_attempt}"


@dataclass
class BookSDPOConfig(SDPOConfig):
    """SDPOConfig whose defaults are the book's SDPO; see the module docstring."""

    # --- TRL's options, at the book's values --------------------------------------------------
    distillation_mode: str = field(default="topk_logits", metadata={"help": "Book: topk_logits."})
    distillation_topk: int | None = field(default=20, metadata={"help": "Book: the student's top-20 tokens."})
    distillation_add_tail: bool = field(default=True, metadata={"help": "Book: a tail bucket log(1 - top-k mass)."})
    distillation_is_clip: float | None = field(
        default=None, metadata={"help": "Book: no importance-sampling correction (the batch is on-policy)."})
    teacher_model_kind: str = field(default="live", metadata={"help": "Book: the live model under no_grad."})
    dont_reprompt_on_self_success: bool = field(
        default=False, metadata={"help": "Book: false, a successful rollout's own text is its demonstration too."})
    max_reprompt_len: int = field(
        default=1024, metadata={"help": "Book: the teacher prompt keeps its last 1024 tokens (cut on the left)."})
    reprompt_template: str = field(default=BOOK_REPROMPT_TEMPLATE, metadata={"help": "The book's teacher user turn."})
    solution_template: str = field(default=BOOK_SOLUTION_TEMPLATE, metadata={"help": "The book's demonstration block."})
    # --- ours -----------------------------------------------------------------------------------
    reward_funcs: list[str] = field(
        default_factory=lambda: ["correctness_reward"],
        metadata={"help": "Reward functions by registered name (rewards/). Book: correctness only."},
    )
    redraw_failed_groups: bool = field(
        default=True,
        metadata={"help": "Book: a prompt whose group has no rollout with reward >= success_reward_threshold is "
                  "skipped and another drawn until the step has its groups. false = TRL: such groups stay in the "
                  "batch with zero loss."},
    )
    max_draws: int = field(
        default=1600,
        metadata={"help": "Prompts one process may draw for one optimizer step before the run stops with an error "
                  "(book: 1600 for 16 groups)."},
    )
    group_token_mean: bool = field(
        default=True,
        metadata={"help": "Book: the loss is the masked mean over all tokens of each group's rollouts, then the mean "
                  "over groups. false = TRL: per-sequence mean, then the mean over sequences."},
    )
    book_end_token_mask: bool = field(
        default=True,
        metadata={"help": "Book: the loss mask is `completion token != pad token`, so an end token equal to the pad "
                  "token (Qwen3's <|endoftext|>) is left out. false = TRL: up to and including the first end token."},
    )
    logprobs_at_sampling_temperature: bool = field(
        default=False,
        metadata={"help": "false (book): both distributions from logits at temperature 1, whatever the sampling "
                  "temperature. true (TRL): logits divided by `temperature` first."},
    )

    def __post_init__(self):
        super().__post_init__()
        rewards.check_names(list(self.reward_funcs))
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(f"reward_weights has {len(self.reward_weights)} values for {len(self.reward_funcs)} "
                             "reward_funcs")
        if self.group_token_mean and self.per_device_train_batch_size % self.num_generations:
            raise ValueError(
                f"group_token_mean averages whole groups within a micro-batch: per_device_train_batch_size "
                f"{self.per_device_train_batch_size} must be a multiple of num_generations {self.num_generations}")
        if self.redraw_failed_groups and self.max_draws < 1:
            raise ValueError("max_draws must be at least 1")
