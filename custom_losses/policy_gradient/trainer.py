"""The RLHF book's ten policy-gradient algorithms (chapter 6) on TRL's GRPOTrainer.

The math lives in pure functions (custom_losses/advantages.py, custom_losses/pg_objectives.py);
this module is plumbing. `BookGRPOTrainer` keeps GRPOTrainer's engine (sampling, reward
calls, buffering a rollout batch over several optimizer steps, old log-probs, DDP/ZeRO,
PEFT, vLLM) and overrides only:

  _generate_and_score_completions  advantages from the book's estimators (after TRL scored
                                   the batch), DAPO's dynamic sampling with refill, health
                                   metrics and the rollout database
  _compute_loss                    the book's objectives TRL lacks (plain policy gradient,
                                   two-sided CISPO), the book's KL estimators, a guard
                                   against non-finite losses
  _get_per_token_logps_and_entropies   the log-prob health check (finite, <= 0)
  _calculate_rewards               keeps the per-function rewards for the advantage step

Where TRL's engine differs from the book in a way that moves curves, the book's choice is
the default here and TRL's is an option:

  log-probs      book: from logits at temperature 1     TRL: logits / sampling temperature
                 -> logprobs_at_sampling_temperature: false (true = TRL)
  z-score eps    book: 1e-8                              TRL: 1e-4
                 -> advantage_eps: 1e-8 (1e-4 = TRL; or advantage_estimator: trl)
  aggregation    book: seq-mean (DAPO: token-mean per micro-batch) -> loss_type grpo / bnpo;
                 TRL's dr_grpo (constant divisor), dapo and cispo (global token mean) stay
                 available as loss_type values
  CISPO clip     book: two-sided clip(r, 0.8, 1.4)       TRL: clamp(r, max=epsilon_high)
                 -> book_objective: cispo (null + loss_type cispo = TRL's)
  KL             book: x = logp - ref, k1/k2/k3 with expm1; in the reward for REINFORCE and
                 RLOO, in the per-token loss otherwise    TRL: its own k3, in the loss
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import RepeatSampler

from custom_losses.policy_gradient.advantages import ESTIMATORS, compute_advantages, groups_with_contrast
from custom_losses.policy_gradient.objectives import (
    KL_ESTIMATORS, cispo_loss, kl_estimate, policy_gradient_loss, seq_mean, sequence_kl, token_mean,
)
from custom_losses.policy_gradient.health import (
    RolloutStore, check_logprobs, is_truncated, repetition_score, rollout_health_metrics, write_samples,
)

logger = logging.getLogger(__name__)
DYNAMIC_SAMPLING_STATE = "dynamic_sampling_state.json"  # in each checkpoint of a dynamic_sampling run

BOOK_OBJECTIVES = ("policy_gradient", "cispo")
# TRL loss types whose aggregation the book's KL term (and our own objectives) can follow.
_KL_AGGREGATIONS = ("grpo", "sapo", "bnpo", "dr_grpo")
_OBJECTIVE_AGGREGATIONS = {"grpo": "seq_mean", "bnpo": "token_mean"}
_LEFT_PADDED = ("prompt_ids", "prompt_mask")
FROZEN_DTYPES = ("float32", "bfloat16", "float16")  # for the reference and reward models


@dataclass
class BookGRPOConfig(GRPOConfig):
    """GRPOConfig plus the book's options (chapter 6). Defaults are the book's choices."""

    loss_type: str = field(
        default="grpo",
        metadata={"help": "TRL's loss aggregation. The book: 'grpo' (seq-mean) everywhere, 'bnpo' (token mean "
                  "over the micro-batch) for DAPO. With book_objective set, only 'grpo' and 'bnpo' apply."},
    )
    reward_funcs: list[str] = field(
        default_factory=lambda: ["correctness_reward", "format_reward"],
        metadata={"help": "Reward functions by registered name (rewards/); weights in `reward_weights`."},
    )
    advantage_estimator: str = field(
        default="zscore",
        metadata={"help": f"One of {ESTIMATORS} (custom_losses/advantages.py), or 'trl' to keep GRPOTrainer's own "
                  "advantages (scale_rewards, std eps 1e-4)."},
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
        metadata={"help": f"null: TRL's loss_type computes the objective. Else one of {BOOK_OBJECTIVES}: "
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
        import rewards

        def one_of(name: str, value: Any, allowed: tuple) -> None:
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")

        one_of("advantage_estimator", self.advantage_estimator, ESTIMATORS + ("trl",))
        one_of("book_objective", self.book_objective, BOOK_OBJECTIVES + (None,))
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
        if self.book_objective is not None and self.loss_type not in _OBJECTIVE_AGGREGATIONS:
            raise ValueError(f"with book_objective `{self.book_objective}`, loss_type only chooses the aggregation: "
                             f"'grpo' (seq-mean) or 'bnpo' (token mean per micro-batch), got {self.loss_type!r}")
        kl_in_loss = self.beta != 0 and not self.kl_in_reward
        if kl_in_loss and self.book_objective is None and self.loss_type not in _KL_AGGREGATIONS:
            raise ValueError(f"a KL term in the loss (beta {self.beta}) is supported with loss_type in "
                             f"{_KL_AGGREGATIONS}, not {self.loss_type!r}")
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
        if self.use_vllm and self.vllm_importance_sampling_correction and not self.logprobs_at_sampling_temperature:
            raise ValueError(
                "vLLM's importance-sampling correction compares vLLM's log-probs (at the sampling temperature) with "
                "ours (at temperature 1, the book's choice): set logprobs_at_sampling_temperature true, or "
                "vllm_importance_sampling_correction false"
            )


# ------------------------------------------------------------------------------------------
# Rollout batches as dicts of tensors: select rows, mask them out, concatenate with padding


def select_rows(batch: dict[str, Any], rows: torch.Tensor | slice | list[int]) -> dict[str, Any]:
    size = batch["completion_ids"].size(0)
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == size:
            out[key] = value[rows]
        elif isinstance(value, list) and len(value) == size:
            idx = range(size)[rows] if isinstance(rows, slice) else rows
            out[key] = [value[i] for i in idx]
        else:
            out[key] = value
    return out


def masked_out(batch: dict[str, Any]) -> dict[str, Any]:
    """The same rows with no loss: completion mask and advantages zeroed (a dropped group used as filler)."""
    out = dict(batch)
    out["completion_mask"] = torch.zeros_like(batch["completion_mask"])
    out["advantages"] = torch.zeros_like(batch["advantages"])
    return out


def _pad_to(t: torch.Tensor, length: int, value: float, left: bool) -> torch.Tensor:
    missing = length - t.size(1)
    if missing <= 0:
        return t
    pad = t.new_full((t.size(0), missing, *t.shape[2:]), value)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def concat_rollouts(parts: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Concatenate rollout batches along the batch dim: prompts left-padded, completions right-padded."""
    out = {}
    for key, first in parts[0].items():
        values = [p[key] for p in parts]
        if first is None:
            out[key] = None
        elif isinstance(first, torch.Tensor) and first.dim() == 0:
            out[key] = first
        elif isinstance(first, torch.Tensor) and first.dim() >= 2:
            length = max(v.size(1) for v in values)
            pad = pad_token_id if key in ("prompt_ids", "completion_ids") else 0
            out[key] = torch.cat([_pad_to(v, length, pad, key in _LEFT_PADDED) for v in values], dim=0)
        elif isinstance(first, torch.Tensor):
            out[key] = torch.cat(values, dim=0)
        elif isinstance(first, list):
            out[key] = [x for v in values for x in v]
        else:
            out[key] = first
    return out


# ------------------------------------------------------------------------------------------
# Health checks and the rollout database: reusable by any trainer that has self.accelerator,
# self.args (output_dir, log_samples_*, rollouts_db, repetition_ngram), self.state, self._metrics.


class RolloutMonitorMixin:
    """Per-batch health metrics, sample logging and the SQLite rollout store."""

    def _monitor_init(self, reward_names: list[str]) -> None:
        self._monitor_reward_names = list(reward_names)
        self._rollout_store: RolloutStore | None = None
        self._rollout_generation = 0
        self._last_samples_step: int | None = None

    def _rollout_store_path(self) -> Path | None:
        db = getattr(self.args, "rollouts_db", None)
        return Path(self.args.output_dir) / db if db else None

    def _monitor_record(
        self, mode: str, completion_ids: list[list[int]], stop_ids: list[int], prompts: list | None,
        completions: list | None, rewards: dict[str, list[float]], totals: list[float], advantages: list[float],
        kept: list[bool], group_size: int, contrast: list[bool] | None,
    ) -> None:
        """Log health metrics for this rollout batch and, on the main process, store every rollout.

        `completion_ids` are this process's; every other list is global (gathered), in the
        global order. Must be called on every process (it gathers).
        """
        from rewards.text import completion_text, prompt_text

        n_gram = getattr(self.args, "repetition_ngram", 4)
        local = torch.tensor(
            [[len(ids), float(is_truncated(ids, stop_ids)), repetition_score(ids, n_gram)] for ids in completion_ids],
            dtype=torch.float32, device=self.accelerator.device,
        ).reshape(-1, 3)
        stats = self.accelerator.gather(local).cpu()
        lengths, truncated, repetition = stats[:, 0].long().tolist(), stats[:, 1].bool().tolist(), stats[:, 2].tolist()
        for name, value in rollout_health_metrics(lengths, truncated, repetition, contrast).items():
            self._metrics[mode][name].append(value)
        self._rollout_generation += 1
        if mode != "train" or not self.accelerator.is_main_process:
            return

        step = self.state.global_step
        n = len(totals)
        have_texts = completions is not None and len(completions) == n
        texts = [completion_text(c) for c in completions] if have_texts else [None] * n
        prompt_messages = prompts if prompts is not None and len(prompts) == n else [None] * n
        rows = [
            {
                "step": step, "generation": self._rollout_generation, "group_index": i // max(group_size, 1),
                "prompt": prompt_text(prompt_messages[i]) if prompt_messages[i] is not None else None,
                "prompt_json": prompt_messages[i], "completion": texts[i], "reward": totals[i],
                "advantage": advantages[i], "rewards": {k: v[i] for k, v in rewards.items()},
                "length": lengths[i], "truncated": truncated[i], "repetition": repetition[i], "kept": kept[i],
            }
            for i in range(n)
        ]
        path = self._rollout_store_path()
        if path is not None:
            if self._rollout_store is None:
                self._rollout_store = RolloutStore(
                    path, self._monitor_reward_names, start_step=step,
                    run_info={"reward_funcs": self._monitor_reward_names, "group_size": group_size},
                )
            self._rollout_store.add(rows)

        every = getattr(self.args, "log_samples_every", 0)
        if every and (self._last_samples_step is None or step - self._last_samples_step >= every):
            self._last_samples_step = step
            count = getattr(self.args, "log_samples_count", 4)
            # One completion from each of the first groups, so the samples show different prompts.
            picks = list(range(0, n, max(group_size, 1)))[:count] or list(range(min(count, n)))
            keys = ("prompt", "completion", "reward", "rewards", "advantage")
            samples = [{k: rows[i][k] for k in keys} for i in picks]
            write_samples(Path(self.args.output_dir) / "samples.jsonl", step, samples, logger)


# ------------------------------------------------------------------------------------------
# The trainer


def _decode_raw_text(tokenizer, tools) -> None:
    """Rewards see the completion's raw text, as the book decodes it (<think> tags included).

    A tokenizer with a response template makes GRPOTrainer parse completions into content and
    reasoning fields, which would hide the tags from the format reward; without tools, parse
    nothing.
    """
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wraps its tokenizer
    if tokenizer is None or tools:
        return
    for attribute in ("response_template", "response_schema"):
        if getattr(tokenizer, attribute, None) is not None:
            logger.info("completions are decoded as raw text for the rewards: ignoring the tokenizer's %s", attribute)
            setattr(tokenizer, attribute, None)


class _quiet_model_init_kwargs_warning:
    """GRPOTrainer warns that model_init_kwargs are ignored for a policy passed as a model; they are
    what builds the reference (ref_dtype), so the warning would mislead."""

    def __init__(self, active: bool):
        self.active = active
        self.logger = logging.getLogger("trl.trainer.grpo_trainer")

    def filter(self, record: logging.LogRecord) -> bool:
        return "model_init_kwargs" not in record.getMessage()

    def __enter__(self):
        if self.active:
            self.logger.addFilter(self)
        return self

    def __exit__(self, *exc):
        self.logger.removeFilter(self)
        return False


class EpochSeededRepeatSampler(RepeatSampler):
    """TRL's RepeatSampler, whose prompt order in epoch e is always the e-th draw of its seeded generator.

    TRL's sampler draws one permutation per pass from a generator seeded once, so an uninterrupted
    run uses draws 0, 1, 2, ... A run resumed at the start of epoch e builds a fresh sampler and
    would use draw 0 again; transformers calls set_epoch(e) on the sampler, and this class replays
    the e draws before it, so the resumed run sees the uninterrupted run's order.
    """

    epoch: int | None = None

    @classmethod
    def like(cls, sampler: RepeatSampler) -> "EpochSeededRepeatSampler":
        return cls(sampler.data_source, sampler.mini_repeat_count, sampler.batch_size, sampler.repeat_count,
                   sampler.shuffle, sampler.seed)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        if self.shuffle and self.seed is not None and self.epoch is not None:
            self.generator.manual_seed(self.seed)
            for _ in range(self.epoch):
                torch.randperm(self.num_samples, generator=self.generator)
        return super().__iter__()


class BookGRPOTrainer(RolloutMonitorMixin, GRPOTrainer):
    """GRPOTrainer computing the book's advantages and objectives; see the module docstring."""

    def __init__(self, model, reward_funcs=None, args: BookGRPOConfig | None = None, **kwargs):
        if args is None or not isinstance(args, BookGRPOConfig):
            raise TypeError("BookGRPOTrainer needs a BookGRPOConfig")
        if reward_funcs is None:
            from rewards import build_reward_funcs

            reward_funcs = build_reward_funcs(
                list(args.reward_funcs), overlong_max_length=args.overlong_max_length,
                overlong_cache_length=args.overlong_cache_length,
            )
        _decode_raw_text(kwargs.get("processing_class"), kwargs.get("tools"))
        if args.reward_model_dtype is not None:  # `rm:` rewards load lazily, in this dtype
            for func in reward_funcs if isinstance(reward_funcs, list) else [reward_funcs]:
                if getattr(func, "scorer", None) is not None:
                    func.scorer.dtype = args.reward_model_dtype
        if args.ref_dtype is not None:  # GRPOTrainer builds the reference from model_init_kwargs
            args.model_init_kwargs = {**(args.model_init_kwargs or {}), "dtype": args.ref_dtype}
        with _quiet_model_init_kwargs_warning(args.ref_dtype is not None):
            super().__init__(model, reward_funcs=reward_funcs, args=args, **kwargs)
        if self.ref_model is not None:
            self.ref_model.requires_grad_(False)  # frozen: no gradient buffers, whatever its dtype
        if not args.logprobs_at_sampling_temperature and self.temperature != 1.0:
            self._score_at_temperature_one()
        self._reward_index = {name: i for i, name in enumerate(self.reward_func_names)}
        for option in ("advantage_reward",) + (("dynamic_sampling_reward",) if args.dynamic_sampling else ()):
            name = getattr(args, option)
            if name is not None and name not in self._reward_index:
                raise ValueError(f"{option} `{name}` is not among the trainer's reward functions "
                                 f"{self.reward_func_names}")
        if args.dynamic_sampling and not hasattr(self.train_dataset, "__getitem__"):
            raise ValueError("dynamic_sampling refills from the training set by index: it needs a map-style Dataset")
        self._last_logps: torch.Tensor | None = None
        self._last_rewards_per_func: torch.Tensor | None = None
        self._nonfinite_skips = 0
        self._refill_order: list[int] = []
        self._refill_epoch = 0
        self._refill_taken = 0  # fresh prompts drawn so far (all processes); checkpointed, replayed on resume
        self._monitor_init(self.reward_func_names)

    # --- log-probs -------------------------------------------------------------------------

    def _score_at_temperature_one(self) -> None:
        """Re-patch the fused LM head so training log-probs come from logits at temperature 1 (the book)."""
        from accelerate.utils import is_peft_model
        from trl.trainer.utils import add_fused_lm_head

        outputs = ("log_probs", "entropy")  # what GRPOTrainer's own patch computes
        target = self.model.get_base_model() if is_peft_model(self.model) else self.model
        add_fused_lm_head(target, temperature=1.0, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32, outputs=outputs)
        if self.ref_model is not None:
            ref = getattr(self.ref_model, "module", self.ref_model)
            add_fused_lm_head(ref, temperature=1.0, cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )
        grad = torch.is_grad_enabled()
        where = "policy log-probs in the loss" if grad else "log-probs computed at rollout time"
        check_logprobs(logps, attention_mask[:, -logits_to_keep:], where, self.args.logprob_tolerance)
        if grad:
            self._last_logps = logps
        return logps, entropies, aux

    # --- rewards and advantages -----------------------------------------------------------

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _advantage_signal(self, rewards_per_func: torch.Tensor, output: dict[str, Any]) -> torch.Tensor:
        """(N,) global: the reward the advantages are computed from (weighted total, or one function)."""
        device = rewards_per_func.device
        if self.args.advantage_reward is not None:
            signal = rewards_per_func[:, self._reward_index[self.args.advantage_reward]].clone()
        else:
            signal = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
            signal[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        if self.args.kl_in_reward and self.beta != 0.0:
            kl = self._rollout_sequence_kl(output).to(device)
            self._metrics["train" if self.model.training else "eval"]["kl"].append(kl.mean().item())
            signal = signal - self.beta * kl
        return signal

    def _rollout_sequence_kl(self, output: dict[str, Any]) -> torch.Tensor:
        """(N,) global masked-mean KL(rollout policy || reference) per completion, for the reward."""
        old = output.get("old_per_token_logps")
        if old is None:  # on-policy batch: TRL skipped the old log-probs; compute them here
            ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
            attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
            with torch.no_grad():
                old, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, attention, output["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )
        local = sequence_kl(old, output["ref_per_token_logps"], output["completion_mask"], self.args.kl_estimator)
        return self.accelerator.gather(local)

    def _score_round(self, inputs: list[dict[str, Any]], defer_record: bool = False):
        """Generate and score one rollout batch with TRL, then apply the book's advantages.

        Returns this process's batch, the global per-group mask of groups that pass dynamic
        sampling's filter (all True without it), and, with `defer_record`, the arguments of
        `_monitor_record` (called later, once it is known which groups were trained on).
        """
        mode = "train" if self.model.training else "eval"
        output = super()._generate_and_score_completions(inputs)
        rewards_per_func = self._last_rewards_per_func
        group = self.num_generations if mode == "train" else self.num_generations_eval
        n_local = output["completion_ids"].size(0)
        local = slice(self.accelerator.process_index * n_local, (self.accelerator.process_index + 1) * n_local)

        signal = self._advantage_signal(rewards_per_func, output)
        unscorable = torch.isnan(signal)
        if self.args.advantage_estimator == "trl":
            advantages = self.accelerator.gather(output["advantages"])
        else:
            filled = signal.clone()
            if unscorable.any():  # every reward function returned None: no signal; neutral in its group
                grouped = filled.view(-1, group)
                means = torch.nanmean(grouped, dim=1, keepdim=True).nan_to_num(0.0).expand_as(grouped)
                filled = torch.where(torch.isnan(grouped), means, grouped).reshape(-1)
            advantages = compute_advantages(self.args.advantage_estimator, filled, group, self.args.advantage_eps)
            advantages = torch.where(unscorable, torch.zeros_like(advantages), advantages)
            output["advantages"] = advantages[local].to(output["advantages"].dtype)
            logged = self._logs["advantages"]
            if len(logged) >= advantages.numel():
                start = len(logged) - advantages.numel()
                for j, value in enumerate(advantages.tolist()):
                    logged[start + j] = value

        keep_groups = torch.ones(rewards_per_func.size(0) // group, dtype=torch.bool)
        if mode == "train" and self.args.dynamic_sampling:
            keep_groups = self._dynamic_sampling_keep(rewards_per_func, group)
        contrast = groups_with_contrast(signal.nan_to_num(0.0), group).tolist() if group > 1 else None

        weights = self.reward_weights.to(rewards_per_func.device)
        totals = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1).tolist()
        per_func = {name: rewards_per_func[:, i].tolist() for i, name in enumerate(self.reward_func_names)}
        n_global = rewards_per_func.size(0)
        prompts = list(self._logs["prompt"])[-n_global:] if len(self._logs["prompt"]) >= n_global else None
        completions = list(self._logs["completion"])[-n_global:] if len(self._logs["completion"]) >= n_global else None
        ids = [c[m.bool()].tolist() for c, m in zip(output["completion_ids"].cpu(), output["completion_mask"].cpu())]
        record = dict(
            mode=mode, completion_ids=ids, stop_ids=[*self.eos_token_ids, self._tokenizer.pad_token_id],
            prompts=prompts, completions=completions, rewards=per_func, totals=totals, advantages=advantages.tolist(),
            kept=keep_groups.repeat_interleave(group).tolist(), group_size=group, contrast=contrast,
        )
        if defer_record:
            return output, keep_groups, record
        self._monitor_record(**record)
        return output, keep_groups, None

    def _dynamic_sampling_keep(self, rewards_per_func: torch.Tensor, group: int) -> torch.Tensor:
        """(groups,) global: False for a group whose dynamic_sampling_reward is all min or all max."""
        values = rewards_per_func[:, self._reward_index[self.args.dynamic_sampling_reward]].view(-1, group).cpu()
        all_min = (values == self.args.dynamic_sampling_min).all(dim=1)
        all_max = (values == self.args.dynamic_sampling_max).all(dim=1)
        drop = all_min | all_max
        if self.args.dynamic_sampling_drop_any_equal:
            drop |= (values == values[:, :1]).all(dim=1)
        return ~drop

    def _generate_and_score_completions(self, inputs):
        if self.model.training and self.args.dynamic_sampling:
            return self._dynamic_sampling_batch(inputs)
        return self._score_round(inputs)[0]

    def _get_train_sampler(self, dataset=None):
        sampler = super()._get_train_sampler(dataset)
        return EpochSeededRepeatSampler.like(sampler) if type(sampler) is RepeatSampler else sampler

    # --- DAPO's dynamic sampling ------------------------------------------------------------

    def _next_refill_prompts(self, groups_per_process: int) -> list[dict[str, Any]]:
        """This process's share of the next fresh prompts, each repeated num_generations times.

        Fresh prompts come from their own seeded pass over the training set (the same on every
        process), so the main pass over the data is not disturbed.
        """
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        taken = self._take_refill_indices(world * groups_per_process)
        mine = taken[rank * groups_per_process:(rank + 1) * groups_per_process]
        return [dict(self.train_dataset[i]) for i in mine for _ in range(self.num_generations)]

    def _take_refill_indices(self, count: int) -> list[int]:
        while len(self._refill_order) < count:
            generator = torch.Generator().manual_seed(self.args.seed + 7919 * (self._refill_epoch + 1))
            self._refill_order += torch.randperm(len(self.train_dataset), generator=generator).tolist()
            self._refill_epoch += 1
        taken, self._refill_order = self._refill_order[:count], self._refill_order[count:]
        self._refill_taken += count
        return taken

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.dynamic_sampling and self.args.should_save:
            state = {"refill_prompts_taken": self._refill_taken}
            (Path(output_dir) / DYNAMIC_SAMPLING_STATE).write_text(json.dumps(state) + "\n")

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        path = Path(checkpoint) / DYNAMIC_SAMPLING_STATE if checkpoint else None
        if not self.args.dynamic_sampling or path is None:
            return
        if not path.exists():
            logger.warning("%s has no %s: refill prompts start again from the first fresh prompt",
                           checkpoint, DYNAMIC_SAMPLING_STATE)
            return
        # The refill order is a function of the seed: replaying the count puts it where the saved run was.
        self._refill_order, self._refill_epoch, self._refill_taken = [], 0, 0
        self._take_refill_indices(json.loads(path.read_text())["refill_prompts_taken"])

    def _dynamic_sampling_batch(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        group = self.num_generations
        if len(inputs) % group:
            raise ValueError(
                f"dynamic_sampling needs whole prompt groups on each process, but this process holds {len(inputs)} "
                f"completions for num_generations {group}: make per_device_train_batch_size x steps_per_generation a "
                "multiple of num_generations (fewer processes, or a larger generation_batch_size)."
            )
        need = len(inputs) // group
        rank = self.accelerator.process_index
        metrics = self._metrics["train"]
        logged_before = {key: len(values) for key, values in metrics.items()}
        kept, spare, kept_rewards, first_round_kept = [], [], [], None
        records, trained = [], []  # per round: what to store, and which of this process's groups were trained on
        rounds, batch = 0, inputs
        while True:
            output, keep_groups, record = self._score_round(batch, defer_record=True)
            records.append(record)
            trained.append([False] * need)
            grouped = self._last_rewards_per_func.view(-1, group, len(self.reward_funcs))
            local_rewards = grouped[rank * need:(rank + 1) * need]
            if first_round_kept is None:
                first_round_kept = keep_groups.float().mean().item()
            for g, keep in enumerate(keep_groups[rank * need:(rank + 1) * need].tolist()):
                part = select_rows(output, slice(g * group, (g + 1) * group))
                if keep and len(kept) < need:
                    kept.append(part)
                    kept_rewards.append(local_rewards[g])
                    trained[-1][g] = True
                elif len(spare) < need:
                    spare.append(part)
            short = torch.tensor([need - len(kept)], device=self.accelerator.device)
            if int(self.accelerator.gather(short).max()) == 0 or rounds >= self.args.max_refill_rounds:
                break
            batch = self._next_refill_prompts(need)
            rounds += 1
        filler = [masked_out(p) for p in spare[: need - len(kept)]]
        result = concat_rollouts(kept + filler, self._tokenizer.pad_token_id)
        result["num_items_in_batch"] = self.accelerator.gather(self._loss_mask(result).sum()).sum()
        self._log_kept_rewards(kept_rewards, logged_before)
        for record, flags in zip(records, trained):  # `kept` in the rollout store = trained on
            flags = self.accelerator.gather(torch.tensor(flags, device=self.accelerator.device)).cpu()
            self._monitor_record(**{**record, "kept": flags.repeat_interleave(group).tolist()})
        device = self.accelerator.device
        masked = self.accelerator.gather(torch.tensor([float(len(filler))], device=device)).sum().item()
        metrics["dynamic_sampling/refill_rounds"].append(float(rounds))
        metrics["dynamic_sampling/kept_groups_first_round"].append(first_round_kept)
        metrics["dynamic_sampling/masked_groups"].append(masked)
        if filler:
            logger.warning("dynamic sampling: %d group(s) still lacked reward contrast after %d refill rounds; "
                           "their loss is masked out", len(filler), rounds)
        return result

    def _log_kept_rewards(self, kept_rewards: list[torch.Tensor], logged_before: dict[str, int]) -> None:
        """Reward metrics over the groups trained on, as the book averages its filtered buffer.

        TRL logged every round's rewards, dropped groups included; those entries are replaced
        by one value over the kept groups of all processes (kept as they are if none was kept).
        """
        from accelerate.utils import gather_object

        rows = [row for g in kept_rewards for row in g.tolist()]
        rows = [row for part in gather_object([rows]) for row in part]
        if not rows:
            return
        values = torch.tensor(rows, dtype=torch.float32)  # (kept completions, functions)
        total = (values * self.reward_weights.unsqueeze(0)).nansum(dim=1)
        replaced = {"reward": total.mean().item(), "reward_std": total.std().item() if len(total) > 1 else 0.0}
        for i, name in enumerate(self.reward_func_names):
            column = values[:, i]
            replaced[f"rewards/{name}/mean"] = torch.nanmean(column).item()
            replaced[f"rewards/{name}/std"] = column[~torch.isnan(column)].std().item() if len(column) > 1 else 0.0
        metrics = self._metrics["train"]
        for key, value in replaced.items():
            del metrics[key][logged_before.get(key, 0):]
            metrics[key].append(value)

    # --- the loss -------------------------------------------------------------------------

    def _compute_loss(self, model, inputs):
        if self.args.book_objective is None:
            beta, self.beta = self.beta, 0.0  # TRL computes the policy term; the book's KL is added below
            try:
                loss = super()._compute_loss(model, inputs)
            finally:
                self.beta = beta
            if beta != 0.0 and not self.args.kl_in_reward:
                loss = loss + self._kl_loss_term(inputs, beta, self.loss_type)
        else:
            loss = self._book_objective_loss(model, inputs)
        return self._guard_loss(loss)

    def _loss_normalizer(self) -> float:
        return self.current_gradient_accumulation_steps if self.model.training else 1.0

    def _loss_mask(self, inputs) -> torch.Tensor:
        mask = inputs["completion_mask"]
        return mask if inputs.get("tool_mask") is None else mask * inputs["tool_mask"]

    def _global_masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        values = values.expand_as(mask) if values.shape != mask.shape else values
        totals = self.accelerator.reduce(
            torch.stack([(values.detach().float() * mask).sum(), mask.sum().float()]), reduction="sum"
        )
        return (totals[0] / totals[1].clamp(min=1.0)).item()

    def _kl_loss_term(self, inputs, beta: float, aggregation: str) -> torch.Tensor:
        logps, mask = self._last_logps, self._loss_mask(inputs)
        kl = kl_estimate(logps, inputs["ref_per_token_logps"], self.args.kl_estimator)
        if aggregation in ("grpo", "sapo"):
            term = seq_mean(kl, mask)
        elif aggregation == "bnpo":
            term = token_mean(kl, mask)
        else:  # dr_grpo: TRL's constant divisor
            term = (kl * mask).sum() / (kl.size(0) * self.max_completion_length)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["kl"].append(self._global_masked_mean(kl, mask))
        return beta * term / self._loss_normalizer()

    def _book_objective_loss(self, model, inputs) -> torch.Tensor:
        """The book's objectives that GRPOTrainer lacks (see book_objective), on GRPOTrainer's forward."""
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        mask = self._loss_mask(inputs)
        logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True
        )
        advantages = inputs["advantages"]
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        if self.args.book_objective == "policy_gradient":
            per_token = policy_gradient_loss(logps, advantages)
        else:  # cispo
            per_token = cispo_loss(logps, old, advantages, self.epsilon_low, self.epsilon_high)
        mode = "train" if self.model.training else "eval"
        if self.beta != 0.0 and not self.args.kl_in_reward:
            kl = kl_estimate(logps, inputs["ref_per_token_logps"], self.args.kl_estimator)
            per_token = per_token + self.beta * kl
            self._metrics[mode]["kl"].append(self._global_masked_mean(kl, mask))
        aggregate = seq_mean if self.loss_type == "grpo" else token_mean
        loss = aggregate(per_token, mask)
        self._metrics[mode]["entropy"].append(self._global_masked_mean(entropies, mask))
        if self.args.book_objective == "cispo":
            ratio = torch.exp(logps.detach() - old)
            clipped = (ratio < 1 - self.epsilon_low) | (ratio > 1 + self.epsilon_high)
            self._metrics[mode]["cispo_clip_ratio"].append(self._global_masked_mean(clipped.float(), mask))
        return loss / self._loss_normalizer()

    def _guard_loss(self, loss: torch.Tensor) -> torch.Tensor:
        mode = "train" if self.model.training else "eval"
        finite = bool(torch.isfinite(loss.detach()).all())
        self._metrics[mode]["health/nonfinite_loss_skipped"].append(0.0 if finite else 1.0)
        if finite:
            return loss
        self._nonfinite_skips += 1
        allowed = self.args.max_nonfinite_skips if self.args.nonfinite_loss == "skip" else 0
        if self._nonfinite_skips > allowed:
            raise FloatingPointError(
                f"the loss is {loss.item()} at step {self.state.global_step} (non-finite micro-batch losses so far: "
                f"{self._nonfinite_skips}, allowed {allowed}). "
                "The log-probs were finite, so the objective overflowed: check the importance ratios (old log-probs "
                "from another temperature?), the advantages, or lower the learning rate."
            )
        logger.warning("non-finite loss at step %d: micro-batch skipped (%d so far)", self.state.global_step,
                       self._nonfinite_skips)
        # A zero that still reaches every parameter through the (finite) log-probs, so that DDP and
        # ZeRO see a normal backward and the accumulated gradient is unchanged.
        return self._last_logps.sum() * 0.0

    # --- after the run ----------------------------------------------------------------------

    def rollout_summary(self) -> dict[str, Any]:
        path = self._rollout_store_path()
        summary: dict[str, Any] = {"nonfinite_losses_skipped": self._nonfinite_skips}
        if self._rollout_store is not None:
            summary.update(rollouts_db=str(path), rollouts_stored=self._rollout_store.count())
        return summary
