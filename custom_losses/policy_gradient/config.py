"""BookGRPOConfig: GRPOConfig plus the book's policy-gradient options (chapter 6), validated.

Defaults are the book's choices (see trainer.py's module docstring for where TRL differs).
Reward functions are named here (`reward_funcs`) and checked against the registry in
rewards/ (a light import: rewards load their heavy libraries when first called); turning the
names into callables is the family's job (rlhf_recipes/families/policy_gradient.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trl import GRPOConfig

import rewards
from custom_losses.policy_gradient import rollout_backends, trl_options
from custom_losses.policy_gradient.advantages import ESTIMATORS
from custom_losses.policy_gradient.objectives import KL_ESTIMATORS

# book_objective -> whether it clips an importance weight (then its clip ratio is logged)
BOOK_OBJECTIVES = {"policy_gradient": False, "cispo": True}
# TRL loss types whose aggregation the book's KL term (and our own objectives) can follow.
# TRL loss_type -> how a KL term in the loss is aggregated, as that loss_type aggregates its own terms
KL_AGGREGATIONS = {"grpo": "seq_mean", "sapo": "seq_mean", "bnpo": "token_mean", "dr_grpo": "constant"}
OBJECTIVE_AGGREGATIONS = {"grpo": "seq_mean", "bnpo": "token_mean"}
FROZEN_DTYPES = ("float32", "bfloat16", "float16")  # for the reference and reward models


@dataclass
class BookGRPOConfig(GRPOConfig):
    """GRPOConfig plus the book's options (chapter 6). Defaults are the book's choices."""

    loss_type: str = field(
        default="grpo",
        metadata={"help": "TRL's loss aggregation. The book: 'grpo' (seq-mean) everywhere, 'bnpo' (token mean "
                  "over the micro-batch) for DAPO. With book_objective set, only 'grpo' and 'bnpo' apply."},
    )
    rollout_backend: str = field(
        default="hf",
        metadata={"help": f"The engine that samples the completions, one of {tuple(rollout_backends.BACKENDS)}: "
                  "hf (transformers generate, the book's), static_cache (static KV cache; torch.compile on CUDA), "
                  "continuous_batching (transformers' paged engine), vllm_colocate / vllm_server (TRL's vLLM modes). "
                  "It sets TRL's use_vllm, vllm_mode, use_transformers_continuous_batching and cache_implementation. "
                  "Log-probs for the loss always come from the training forward at temperature 1."},
    )
    vllm_importance_sampling_correction: bool = field(
        default=False,
        metadata={"help": "false (book): no correction for vLLM's sampler; the ratio is policy / old policy, both from "
                  "the training forward. true (TRL's default): weight the loss by exp(old - vLLM log-probs), which "
                  "needs logprobs_at_sampling_temperature true (vLLM's log-probs are at the sampling temperature)."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["correctness_reward", "format_reward"],
        metadata={"help": "Reward functions by registered name (rewards/); weights in `reward_weights`."},
    )
    advantage_estimator: str = field(
        default="zscore",
        metadata={"help": f"One of {tuple(ESTIMATORS)} (custom_losses/policy_gradient/advantages.py), or 'trl' to keep "
                  "GRPOTrainer's own advantages (scale_rewards, std eps 1e-4)."},
    )
    advantage_eps: float = field(
        default=1e-8, metadata={"help": "eps in (R - mean) / (std + eps). Book 1e-8; TRL 1e-4."}
    )
    advantage_reward: str | None = field(
        default=None,
        metadata={"help": "Compute advantages from this reward function alone instead of the weighted total "
                  "(MaxRL: binary_reward). The logged `reward` stays the weighted total."},
    )
    book_objective: str | None = field(
        default=None,
        metadata={"help": f"null: TRL's loss_type computes the objective. Else one of {tuple(BOOK_OBJECTIVES)}: "
                  "'policy_gradient' = -logp * A (REINFORCE, RLOO, MaxRL); 'cispo' = -sg(clip(r, 1-epsilon, "
                  "1+epsilon_high)) * A * logp."},
    )
    kl_estimator: str = field(
        default="k3",
        metadata={"help": "KL estimator with x = logp - ref: k1 = -x, k2 = x^2/2, k3 = expm1(x) - x. "
                  "Used when beta > 0."},
    )
    kl_in_reward: bool = field(
        default=False,
        metadata={"help": "Subtract beta * (sequence mean KL) from the reward before advantages (the book's "
                  "REINFORCE, RLOO, PPO) instead of adding beta * KL to the per-token loss."},
    )
    use_bias_correction_kl: bool = field(
        default=False,
        metadata={"help": "false (book): beta's KL term is the plain per-token estimate. TRL's default true weights "
                  "its own KL term by the importance ratio; every recipe here uses its own KL term (kl_estimator), "
                  "which does not, so true is refused."},
    )
    logprobs_at_sampling_temperature: bool = field(
        default=False,
        metadata={"help": "false (book): log-probs from logits at temperature 1. true (TRL): logits divided by "
                  "the sampling temperature first."},
    )
    dynamic_sampling: bool = field(
        default=False,
        metadata={"help": "DAPO: drop prompt groups whose `dynamic_sampling_reward` is all at its min or all at its "
                  "max, and refill the batch with groups from fresh prompts."},
    )
    dynamic_sampling_reward: str = field(
        default="correctness_reward", metadata={"help": "The reward whose all-equal groups dynamic sampling drops."}
    )
    dynamic_sampling_min: float = field(default=0.0, metadata={"help": "A group all at this value is dropped."})
    dynamic_sampling_max: float = field(default=1.0, metadata={"help": "A group all at this value is dropped."})
    dynamic_sampling_drop_any_equal: bool = field(
        default=False, metadata={"help": "Also drop groups whose values are all equal at any other value."}
    )
    max_refill_rounds: int = field(
        default=8,
        metadata={"help": "Dynamic sampling: at most this many extra rollout rounds per batch; groups still "
                  "missing after them are filled with dropped groups whose loss is masked out (logged)."},
    )
    overlong_max_length: int = field(default=512, metadata={"help": "overlong_penalty_reward's L_max (book 512)."})
    overlong_cache_length: int = field(default=128, metadata={"help": "overlong_penalty_reward's cache C (book 128)."})
    nonfinite_loss: str = field(
        default="skip",
        metadata={"help": "'skip' (book): a micro-batch whose loss is NaN/inf contributes nothing (counted in "
                  "health/nonfinite_loss_skipped); more than max_nonfinite_skips in a run is an error. 'error': "
                  "stop at the first one."},
    )
    max_nonfinite_skips: int = field(default=16, metadata={"help": "Non-finite micro-batch losses tolerated per run."})
    logprob_tolerance: float = field(
        default=1e-4, metadata={"help": "Log-probs above this (they must be <= 0) stop the run with an error."}
    )
    rollouts_db: str | None = field(
        default="rollouts.sqlite",
        metadata={"help": "SQLite file (relative to output_dir) keeping every rollout; null to disable."},
    )
    log_samples_every: int = field(
        default=50, metadata={"help": "Log sample completions with their rewards every N optimizer steps (0: never)."}
    )
    log_samples_count: int = field(default=4, metadata={"help": "How many completions to log each time."})
    repetition_ngram: int = field(default=4, metadata={"help": "n of the n-gram repetition (degeneracy) score."})
    ref_dtype: str | None = field(
        default=None,
        metadata={"help": "dtype of the frozen reference model (used when beta > 0), e.g. 'bfloat16' to halve its "
                  "memory; null: the policy's dtype. The reference never gets gradients."},
    )
    reward_model_dtype: str | None = field(
        default=None,
        metadata={"help": "dtype of `rm:` reward models, e.g. 'bfloat16'; null: bf16 on a GPU, fp32 on the CPU. "
                  "Reward models are frozen and never get gradients."},
    )

    def __post_init__(self):
        rollout_backends.apply(self)  # sets TRL's generation options, so the checks below see them
        self._validate_book_options()
        # TRL requires >= 2 completions per prompt; REINFORCE (raw reward, no baseline) needs 1.
        single = self.num_generations == 1
        if single:
            self.num_generations = 2
        try:
            super().__post_init__()
        finally:
            if single:
                self.num_generations = 1
        per_step = self.per_device_train_batch_size * self.world_size * self.gradient_accumulation_steps
        if self.generation_batch_size % per_step:
            raise ValueError(
                f"generation_batch_size {self.generation_batch_size} (completions per rollout batch) is not a multiple "
                f"of the {per_step} completions per optimizer step (per_device_train_batch_size "
                f"{self.per_device_train_batch_size} x {self.world_size} processes x gradient_accumulation_steps "
                f"{self.gradient_accumulation_steps}): each rollout batch must give whole optimizer steps, as in the "
                "book."
            )

    def _validate_book_options(self) -> None:
        def one_of(name: str, value: Any, allowed: tuple) -> None:
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")

        one_of("advantage_estimator", self.advantage_estimator, (*ESTIMATORS, "trl"))
        one_of("book_objective", self.book_objective, (*BOOK_OBJECTIVES, None))
        one_of("kl_estimator", self.kl_estimator, KL_ESTIMATORS)
        one_of("nonfinite_loss", self.nonfinite_loss, ("skip", "error"))
        one_of("ref_dtype", self.ref_dtype, FROZEN_DTYPES + (None,))
        one_of("reward_model_dtype", self.reward_model_dtype, FROZEN_DTYPES + (None,))
        rewards.check_names(list(self.reward_funcs))
        if not self.reward_funcs:
            raise ValueError("reward_funcs is empty: list at least one reward function")
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ValueError(f"reward_weights has {len(self.reward_weights)} values for {len(self.reward_funcs)} "
                             f"reward_funcs {list(self.reward_funcs)}")
        for option in ("advantage_reward",) + (("dynamic_sampling_reward",) if self.dynamic_sampling else ()):
            value = getattr(self, option)
            if value is not None and value not in self.reward_funcs:
                raise ValueError(f"{option} `{value}` is not among reward_funcs {list(self.reward_funcs)}; add it "
                                 "(weight 0.0 to log it without training on it)")
        if self.book_objective is not None and self.loss_type not in OBJECTIVE_AGGREGATIONS:
            raise ValueError(f"with book_objective `{self.book_objective}`, loss_type only chooses the aggregation: "
                             f"'grpo' (seq-mean) or 'bnpo' (token mean per micro-batch), got {self.loss_type!r}")
        kl_in_loss = self.beta != 0 and not self.kl_in_reward
        if kl_in_loss and self.book_objective is None and self.loss_type not in KL_AGGREGATIONS:
            raise ValueError(f"a KL term in the loss (beta {self.beta}) is supported with loss_type in "
                             f"{tuple(KL_AGGREGATIONS)}, not {self.loss_type!r}")
        if self.kl_in_reward and self.advantage_estimator == "trl":
            raise ValueError("kl_in_reward needs our advantage step: set advantage_estimator (e.g. raw or rloo), "
                             "not 'trl'")
        if self.num_generations == 1:
            if self.advantage_estimator != "raw":
                raise ValueError("num_generations 1 means no group to compare within: only advantage_estimator 'raw' "
                                 f"(REINFORCE) works, got {self.advantage_estimator!r}")
            if self.dynamic_sampling:
                raise ValueError("dynamic_sampling needs groups (num_generations >= 2)")
        if self.advantage_eps < 0 or self.logprob_tolerance < 0:
            raise ValueError("advantage_eps and logprob_tolerance must be >= 0")
        if self.max_refill_rounds < 0 or self.max_nonfinite_skips < 0 or self.log_samples_every < 0:
            raise ValueError("max_refill_rounds, max_nonfinite_skips and log_samples_every must be >= 0")
        refused = trl_options.refusals(self)  # TRL options that only TRL's own loss reads: act or are refused
        if refused:
            raise ValueError("; ".join(refused))
        if self.use_vllm and self.vllm_importance_sampling_correction and not self.logprobs_at_sampling_temperature:
            raise ValueError(
                "vLLM's importance-sampling correction compares vLLM's log-probs (at the sampling temperature) with "
                "ours (at temperature 1, the book's choice): set logprobs_at_sampling_temperature true, or "
                "vllm_importance_sampling_correction false"
            )
