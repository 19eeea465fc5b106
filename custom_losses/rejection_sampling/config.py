"""RejectionSamplingConfig: the SFT stage's config (BookSFTConfig) plus the stages around it.

Generation (stage 1), scoring (2), selection (4) and evaluation (6) read these; the SFT stage (5) reads
BookSFTConfig's own fields. Defaults are the book's (chapter 9, package rejection_sampling).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import rewards
from custom_losses.rejection_sampling.grading import BOXED_RULE_HELP, BOXED_RULES, DEFAULT_BOXED_RULE, check_rule
from custom_losses.rejection_sampling.selection import RULES
from custom_losses.sft.config import BookSFTConfig
from rewards.reward_model import RM_PREFIX
from rewards.zero3 import zero3_launch


@dataclass
class RejectionSamplingConfig(BookSFTConfig):
    selection_rule: str = field(
        default="top_per_prompt",
        metadata={"help": "Which completions to fine-tune on (custom_losses/rejection_sampling/selection.py).",
                  "choices": list(RULES)},
    )
    selection_k: int = field(default=1000, metadata={"help": "Pairs kept by the *_k_overall rules."})
    selection_seed: int = field(default=42, metadata={"help": "random.Random(seed) of the random_* rules."})
    num_completions: int = field(default=8, metadata={"help": "Completions sampled per prompt (N)."})
    reward_model: str = field(
        default="nvidia/AceMath-7B-RM",
        metadata={"help": "Sequence classifier with one logit (hub id or folder; `rm:<folder>` too); its logit on "
                  "the chat [system, question, completion] is the reward. 'tiny': a stand-in built from the tiny "
                  "model."},
    )
    reward_func: str | None = field(
        default=None,
        metadata={"help": "A verifiable reward by its registered name (rewards/, e.g. correctness_reward): stages 2-3 "
                  "score each completion with the task's own checker against the prompt's answer instead of "
                  "`reward_model` (verifier-based rejection sampling; the nano profile sets it)."},
    )
    reward_model_trust_remote_code: bool = field(
        default=False,
        metadata={"help": "Let the reward model's repository run its own code (the book passes True for AceMath; "
                  "its architecture is transformers' standard sequence classifier, so False loads it too)."},
    )
    enable_thinking: bool = field(
        default=False, metadata={"help": "Passed to the chat template for generation, SFT and evaluation."})
    rollout_temperature: float = field(default=0.8, metadata={"help": "Sampling temperature of stage 1."})
    rollout_top_p: float = field(default=0.95, metadata={"help": "Nucleus sampling of stage 1."})
    rollout_top_k: int = field(default=20, metadata={"help": "Top-k sampling of stage 1."})
    rollout_min_p: float = field(default=0.0, metadata={"help": "Min-p sampling of stage 1 (0: off)."})
    rollout_max_new_tokens: int = field(
        default=512, metadata={"help": "New tokens per completion; truncated completions are kept."})
    rollout_batch_size: int = field(
        default=8,
        metadata={"help": "Prompts per generate call (x N sequences); the book's 8. A larger batch generates faster on "
                  "a GPU with room to spare, but draws another sampling stream (other completions for the same "
                  "seed) and holds more memory."})
    score_batch_size: int = field(
        default=2,
        metadata={"help": "Sequences per reward-model forward pass (sorted by length, left-padded); the book's 2. "
                  "Larger is faster where memory allows; the rewards change only by padding numerics."})
    eval_questions: int = field(default=200, metadata={"help": "The first N GSM8K test questions."})
    eval_split: str = field(default="test", metadata={"help": "GSM8K split of the evaluation."})
    eval_max_new_tokens: int = field(default=512, metadata={"help": "Greedy new tokens per evaluation answer."})
    eval_generation_batch_size: int = field(default=32, metadata={"help": "Questions per evaluation generate call."})
    boxed_rule: str = field(
        default=DEFAULT_BOXED_RULE,
        metadata={"help": "Which \\boxed{} grading reads (custom_losses/rejection_sampling/grading.py): "
                  + "; ".join(f"{k}: {v}" for k, v in BOXED_RULE_HELP.items()) + ".",
                  "choices": list(BOXED_RULES)},
    )
    evaluate_base: bool = field(
        default=True, metadata={"help": "Also evaluate the base policy (the results table's first column)."})

    def __post_init__(self):
        super().__post_init__()
        if self.reward_func is not None:
            if self.reward_func.startswith(RM_PREFIX):
                raise ValueError(f"reward_func {self.reward_func!r} names a reward model: set reward_model to it")
            rewards.check_names([self.reward_func])
        check_rule(self.boxed_rule)
        if zero3_launch():
            raise ValueError("rejection sampling does not run under DeepSpeed ZeRO-3 (its stages sample and score "
                             "with whole models outside the training engine, and ZeRO-3 would partition them): launch "
                             "it with a DDP config such as accelerate_configs/4gpu.yaml or 1gpu.yaml")
        if self.selection_rule not in RULES:
            raise ValueError(f"selection_rule must be one of {', '.join(RULES)}, got {self.selection_rule!r}")
        for name in ("selection_k", "num_completions", "rollout_max_new_tokens", "rollout_batch_size",
                     "score_batch_size", "eval_questions", "eval_max_new_tokens", "eval_generation_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
