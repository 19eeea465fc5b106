"""The RLHF book's ten policy-gradient algorithms (chapter 6) on TRL's GRPOTrainer.

The math lives in pure functions (advantages.py, objectives.py); this module is plumbing.
The options are BookGRPOConfig's (config.py); DAPO's dynamic sampling is dynamic_sampling.py,
the health checks and the rollout database health.py, batch surgery rollout_batch.py, exact resume inside
a rollout batch pending_rollouts.py.

`BookGRPOTrainer` keeps GRPOTrainer's engine (sampling, reward calls, buffering a rollout
batch over several optimizer steps, old log-probs, DDP/ZeRO, PEFT, vLLM) and overrides only:

  _generate_and_score_completions  advantages from the book's estimators (after TRL scored
                                   the batch), DAPO's dynamic sampling with refill, health
                                   metrics and the rollout database
  _compute_loss                    the book's objectives TRL lacks (plain policy gradient,
                                   two-sided CISPO), the book's KL estimators, a guard
                                   against non-finite losses
  _get_per_token_logps_and_entropies   the log-prob health check (finite, <= 0)
  _calculate_rewards               keeps the per-function rewards for the advantage step

Reward functions arrive as callables (`reward_funcs`), as GRPOTrainer takes them; turning
the config's names into callables is the family's job (rlhf_recipes/families/policy_gradient.py).

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

import logging
from typing import Any

import torch
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from custom_losses.policy_gradient import rollout_backends
from custom_losses.policy_gradient.advantages import compute_advantages, groups_with_contrast
from custom_losses.policy_gradient.config import (
    BOOK_OBJECTIVES, KL_AGGREGATIONS, OBJECTIVE_AGGREGATIONS, BookGRPOConfig,
)
from custom_losses.policy_gradient.dynamic_sampling import DynamicSamplingMixin
from custom_losses.policy_gradient.health import RolloutMonitorMixin, check_logprobs
from custom_losses.policy_gradient.pending_rollouts import PendingRolloutsMixin
from custom_losses.policy_gradient.shared_prefill import prefill_once_per_prompt
from custom_losses.policy_gradient.objectives import (
    cispo_loss, kl_estimate, policy_gradient_loss, seq_mean, sequence_kl, token_mean,
)

logger = logging.getLogger(__name__)


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


class BookGRPOTrainer(PendingRolloutsMixin, DynamicSamplingMixin, RolloutMonitorMixin, GRPOTrainer):
    """GRPOTrainer computing the book's advantages and objectives; see the module docstring."""

    def __init__(self, model, reward_funcs=None, args: BookGRPOConfig | None = None, **kwargs):
        if args is None or not isinstance(args, BookGRPOConfig):
            raise TypeError("BookGRPOTrainer needs a BookGRPOConfig")
        if reward_funcs is None:
            raise TypeError(f"{type(self).__name__} needs reward_funcs (callables): build them from the config's "
                            "names with rewards.build_reward_funcs, as rlhf_recipes/families/policy_gradient.py does")
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
        if not self.use_vllm:  # the backend's generate settings beyond TRL's options (rollout_backends.py)
            for name, value in rollout_backends.backend(args.rollout_backend).generation_config:
                setattr(self.generation_config, name, value)
        if not args.logprobs_at_sampling_temperature and self.temperature != 1.0:
            self._score_at_temperature_one()
        self._reward_index = {name: i for i, name in enumerate(self.reward_func_names)}
        for option in ("advantage_reward",) + (("dynamic_sampling_reward",) if args.dynamic_sampling else ()):
            name = getattr(args, option)
            if name is not None and name not in self._reward_index:
                raise ValueError(f"{option} `{name}` is not among the trainer's reward functions "
                                 f"{self.reward_func_names}")
        self._dynamic_sampling_init()
        self._last_logps: torch.Tensor | None = None
        self._last_rewards_per_func: torch.Tensor | None = None
        self._nonfinite_skips = 0
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

    # --- sampling ---------------------------------------------------------------------------

    def _generate_single_turn(self, *args, **kwargs):
        # transformers generate prefills each distinct prompt once, not once per rollout (shared_prefill.py: the
        # same tokens, bit for bit); vLLM and continuous batching never call generate's prefill, so it is a no-op
        with prefill_once_per_prompt(self.accelerator.unwrap_model(self.model)):
            return super()._generate_single_turn(*args, **kwargs)

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
            # summed in float64, then float32, nearer the book's sum of Python floats (TRL has already rounded each
            # reward to float32, so ~1 in 10 of spell_backward's reward combinations still ends an ulp away)
            wide = torch.float64 if device.type != "mps" else torch.float32  # MPS has no float64
            weighted = rewards_per_func.to(wide) * self.reward_weights.to(device, wide).unsqueeze(0)
            signal = weighted.nansum(dim=1).to(rewards_per_func.dtype)
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

    def _generate_and_score_completions(self, inputs):
        if self.model.training and self.args.dynamic_sampling:
            return self._dynamic_sampling_batch(inputs)
        return self._score_round(inputs)[0]

    def _get_train_sampler(self, dataset=None):
        sampler = super()._get_train_sampler(dataset)
        return EpochSeededRepeatSampler.like(sampler) if type(sampler) is RepeatSampler else sampler

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
        how = KL_AGGREGATIONS[aggregation]
        if how == "seq_mean":
            term = seq_mean(kl, mask)
        elif how == "token_mean":
            term = token_mean(kl, mask)
        else:  # TRL's dr_grpo: a constant divisor
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
        if BOOK_OBJECTIVES[self.args.book_objective]:  # CISPO: a clipped, stopped-gradient weight
            per_token = cispo_loss(logps, old, advantages, self.epsilon_low, self.epsilon_high)
        else:
            per_token = policy_gradient_loss(logps, advantages)
        # TRL's options on the policy term, as GRPOTrainer._compute_loss applies them (trl_options.py): the 80/20
        # rule keeps the policy term on the top-q entropy tokens only; vLLM's importance-sampling weight.
        entropy_mask = self._entropy_mask(entropies, mask)
        if entropy_mask is not None:
            per_token = per_token * entropy_mask
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token = per_token * inputs["importance_sampling_ratio"]
        mode = "train" if self.model.training else "eval"
        if self.beta != 0.0 and not self.args.kl_in_reward:
            kl = kl_estimate(logps, inputs["ref_per_token_logps"], self.args.kl_estimator)
            per_token = per_token + self.beta * kl
            self._metrics[mode]["kl"].append(self._global_masked_mean(kl, mask))
        aggregate = seq_mean if OBJECTIVE_AGGREGATIONS[self.loss_type] == "seq_mean" else token_mean
        loss = aggregate(per_token, mask)
        self._metrics[mode]["entropy"].append(self._global_masked_mean(entropies, mask))
        if BOOK_OBJECTIVES[self.args.book_objective]:
            ratio = torch.exp(logps.detach() - old)
            clipped = (ratio < 1 - self.epsilon_low) | (ratio > 1 + self.epsilon_high)
            self._metrics[mode]["cispo_clip_ratio"].append(self._global_masked_mean(clipped.float(), mask))
        return (loss - self._entropy_bonus(entropies, mask, entropy_mask)) / self._loss_normalizer()

    def _entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
        """TRL's top_entropy_quantile (the 80/20 rule) for our own objectives: 1 on the completion tokens whose
        entropy is in the top q of all processes' (GRPOTrainer's own get_high_entropy_mask); None when q is 1."""
        if self.top_entropy_quantile >= 1.0:
            return None
        return self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)

    def _entropy_bonus(self, entropies: torch.Tensor, mask: torch.Tensor, entropy_mask: torch.Tensor | None):
        """TRL's constant entropy_coef for our own objectives: coef x the mean entropy over the tokens the policy
        term acts on (subtracted from the loss, before the division by the accumulation steps, as TRL)."""
        if self.entropy_coef == 0.0:
            return 0.0
        acting = mask if entropy_mask is None else mask * entropy_mask
        return self.entropy_coef * (entropies * acting).sum() / acting.sum().clamp(min=1.0)

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
