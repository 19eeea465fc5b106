"""PPO with a value model (RLHF book, chapter 6) on TRL's GRPOTrainer machinery.

TRL 1.16 has no PPOTrainer. `PPOTrainer` here is a `BookGRPOTrainer` (custom_losses/policy_gradient/),
so it keeps everything the other policy-gradient recipes have: GRPOTrainer's generation
(any `rollout_backend`: transformers generate, static cache, continuous batching or vLLM),
reward functions (including a trained RM as `rm:<path>`), rollout buffering with one shuffled
pass per rollout batch, old and reference log-probs, DDP/ZeRO, PEFT, logging; and the book's
health checks, SQLite rollouts and samples. It adds:

  a value model        value_model.py: a full copy of the policy with a Linear(hidden, 1)
                       head (the book), or a head on the policy's own backbone (share_value_backbone)
  advantages           GAE on per-token rewards (losses.py): the scalar reward on the
                       last completion token, KL in the reward (the book) or in the loss
  the loss             grpo's clipped policy term + vf_coef * clipped value loss, seq-mean of the sum
  the optimizer        value_optimizer joint (the book): the value model's parameters join the
                       policy's optimizer (its class, settings, LR and schedule), and ONE clipping at
                       max_grad_norm covers both gradients before the one step. separate: the value
                       model has its own optimizer (value_learning_rate if set) and its own clipping,
                       stepped with the policy's
  saving               <output_dir>/value_model (and in every checkpoint; joint: the value model's
                       optimizer state is in the policy's optimizer.pt; separate: its optimizer and
                       scheduler state in value_model/; --resume restores them)

Batch structure (the book): 16 prompts x 1 rollout per rollout batch, micro-batch 2, an optimizer
step every 4 micro-batches: 2 optimizer steps per rollout batch, one shuffled pass.

Distributed: the value model is prepared by accelerate. Under DDP it is wrapped in its own
DistributedDataParallel (gradients reduced at the accumulation boundary). Under DeepSpeed
(ZeRO-2/3) the POLICY is sharded by DeepSpeed while the value model is a full replica on
every process whose gradients are averaged across processes before its optimizer step: it is
not sharded (use share_value_backbone or LoRA to shrink it). DeepSpeed owns the policy's optimizer
and clipping, so it needs value_optimizer separate (PPOConfig says so before any model loads).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainerCallback

from custom_losses.policy_gradient.objectives import kl_estimate, seq_mean, token_mean
from custom_losses.policy_gradient.trainer import BookGRPOTrainer
from custom_losses.ppo.config import PPOConfig
from custom_losses.ppo.losses import clipped_surrogate_loss, gae, masked_whiten, token_rewards, value_loss_clipped
from custom_losses.ppo.value_model import (
    OPTIMIZER_FILE, SCHEDULER_FILE, VALUE_SUBDIR, ValueHead, backbone_of, count_trainable, hidden_size_of,
    load_value_model, restore_value_weights, save_value_model,
)
from rewards.reward_model_files import full_model

logger = logging.getLogger(__name__)

_AGGREGATIONS = {"grpo": seq_mean, "bnpo": token_mean}



class _ValueOptimizerStep(TrainerCallback):
    """separate: steps the value model's optimizer right before the policy's (after the policy's gradients are
    clipped). joint: after the one step, clears the value model's gradients (Trainer zeroes only the policy's)."""

    def __init__(self, trainer: "PPOTrainer"):
        self.trainer = trainer

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.trainer._value_optimizer_step()

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self.trainer._joint:
            for p in self.trainer._value_params:
                p.grad = None


class PPOTrainer(BookGRPOTrainer):
    """BookGRPOTrainer with a value model, GAE and the clipped value loss; see the module docstring."""

    needs_value_model = True  # the family passes value_model_init_kwargs (dtype, attention, quantization)

    def __init__(self, model, reward_funcs=None, args: PPOConfig | None = None, value_model=None,
                 value_model_init_kwargs: dict[str, Any] | None = None, **kwargs):
        if args is None or not isinstance(args, PPOConfig):
            raise TypeError("PPOTrainer needs a PPOConfig")
        peft_config = kwargs.get("peft_config")
        super().__init__(model, reward_funcs=reward_funcs, args=args, **kwargs)
        self._value_kind = "shared" if args.share_value_backbone else "separate"
        self._hidden: list[torch.Tensor] = []
        self._capture_hidden = False
        if self._value_kind == "shared":
            if value_model is not None:
                raise ValueError("share_value_backbone builds its own head: do not pass value_model")
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(args.seed)
                value_model = ValueHead(hidden_size_of(self.model))
            backbone_of(self.model).register_forward_hook(self._keep_hidden_states)
            self._value_base = None
        else:
            from trl.trainer.utils import disable_dropout_in_model, get_config_model_id

            # A reward-model run's folder holds its full model in merged/ when it trained LoRA adapters.
            self._value_base = (full_model(args.value_model_path) if args.value_model_path else
                                get_config_model_id(self.model.config))
            if value_model is None:
                use_peft = (peft_config is not None) if args.value_use_peft is None else args.value_use_peft
                if use_peft and peft_config is None:
                    raise ValueError("value_use_peft is true but no LoRA settings were given (use_peft, lora_r, ...)")
                init_kwargs = dict(value_model_init_kwargs or {
                    "dtype": self.model.dtype, "attn_implementation": self.model.config._attn_implementation,
                })
                if args.value_model_path is not None:
                    init_kwargs.pop("revision", None)  # the policy's revision, not the value checkpoint's
                value_model = load_value_model(self._value_base, self._tokenizer.pad_token_id, args.seed,
                                               init_kwargs, peft_config if use_peft else None)
            disable_dropout_in_model(value_model)
            self._check_value_vocabulary(value_model)
            if args.activation_checkpointing:
                kwargs_gc = {"use_reentrant": False, **dict(args.activation_checkpointing_kwargs or {})}
                kwargs_gc.pop("every_n_layers", None)
                kwargs_gc.pop("offload", None)
                value_model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs_gc)
        self.value_model = value_model
        self._value_wrapped = None
        self._value_optimizer = None  # value_optimizer separate only
        self._value_scheduler = None
        self._value_groups: list[dict[str, Any]] | None = None
        self._value_params: list[torch.Tensor] = []
        self._joint = args.value_optimizer == "joint"
        if self._joint and self.is_deepspeed_enabled:
            raise ValueError("value_optimizer: joint needs the policy's optimizer and clipping, which DeepSpeed owns: "
                             "under DeepSpeed set value_optimizer: separate")
        self._last_values: torch.Tensor | None = None
        self._value_restored_from: str | None = None
        self.add_callback(_ValueOptimizerStep(self))
        logger.info("ppo value model: %s, %d trainable parameters", self._value_kind, count_trainable(value_model))

    # --- the value model -------------------------------------------------------------------

    def _check_value_vocabulary(self, value_model) -> None:
        policy_vocab = getattr(self.model.config.get_text_config(), "vocab_size", None)  # ZeRO-3 shards the weights
        value_vocab = value_model.get_input_embeddings().weight.shape[0]
        if value_vocab < len(self._tokenizer):
            raise ValueError(f"the value model ({self._value_base}) has {value_vocab} token embeddings but the "
                             f"policy's tokenizer has {len(self._tokenizer)} tokens: the value model must read the "
                             "policy's token ids (same tokenizer family)")
        if policy_vocab is not None and value_vocab != policy_vocab:
            logger.warning("value model vocabulary %d != policy's %d: check that they share a tokenizer", value_vocab,
                           policy_vocab)

    def _keep_hidden_states(self, module, args, output) -> None:
        if self._capture_hidden:
            hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
            self._hidden.append(hidden)

    def _ensure_value_device(self) -> None:
        device = self.accelerator.device
        first = next(self.value_model.parameters())
        if self._value_wrapped is None and first.device != device:
            self.value_model.to(device)

    def _values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                batch_size: int | None = None, hidden: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) values at the states before each of the last `logits_to_keep` tokens, in fp32.

        With gradients and a prepared value model the forward goes through its wrapper (DDP).
        `hidden` (shared backbone): the policy's last hidden states from the same forward.
        """
        training = torch.is_grad_enabled() and self._value_wrapped is not None
        module = self._value_wrapped if training else self.value_model
        self._ensure_value_device()
        if self._value_kind == "shared":
            if hidden is None:  # rollout time: run the policy's backbone once more, without gradients
                backbone = backbone_of(self.accelerator.unwrap_model(self.model))
                chunks = []
                step = batch_size or input_ids.size(0)
                for start in range(0, input_ids.size(0), step):
                    with self.accelerator.autocast():
                        out = backbone(input_ids=input_ids[start:start + step],
                                       attention_mask=attention_mask[start:start + step], use_cache=False)
                    chunks.append(out.last_hidden_state)
                hidden = torch.cat(chunks, dim=0)
            return module(hidden[:, -logits_to_keep - 1:-1]).float()
        step = batch_size or input_ids.size(0)
        values = []
        for start in range(0, input_ids.size(0), step):
            with self.accelerator.autocast():
                logits = module(input_ids=input_ids[start:start + step],
                                attention_mask=attention_mask[start:start + step]).logits
            values.append(logits[:, -logits_to_keep - 1:-1, 0].float())
        return torch.cat(values, dim=0)

    # --- rollouts: values, rewards per token, GAE -------------------------------------------

    def _advantage_signal(self, rewards_per_func: torch.Tensor, output: dict[str, Any]) -> torch.Tensor:
        """The task reward per completion (weighted total, or one function); the KL is added per token later."""
        device = rewards_per_func.device
        if self.args.advantage_reward is not None:
            return rewards_per_func[:, self._reward_index[self.args.advantage_reward]].clone()
        signal = (rewards_per_func * self.reward_weights.to(device).unsqueeze(0)).nansum(dim=1)
        signal[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        return signal

    def _rollout_logps(self, output: dict[str, Any], ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """Old (rollout-time) log-probs; computed here when TRL skipped them (on-policy batch), and kept."""
        old = output.get("old_per_token_logps")
        if old is None:
            with torch.no_grad():
                old, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, attention, output["completion_ids"].size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )
            output["old_per_token_logps"] = old
        return old

    def _global_stats(self, values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked mean and (biased) variance over all processes."""
        mask = mask.to(values.dtype)
        totals = self.accelerator.reduce(
            torch.stack([(values * mask).sum(), (values.pow(2) * mask).sum(), mask.sum()]), reduction="sum"
        )
        count = totals[2].clamp(min=1.0)
        mean = totals[0] / count
        return mean, (totals[1] / count - mean.pow(2)).clamp(min=0.0)

    def _generate_and_score_completions(self, inputs):
        output, _, record = self._score_round(inputs, defer_record=True)
        mode = "train" if self.model.training else "eval"
        ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        mask = self._loss_mask(output).float()
        length = output["completion_ids"].size(1)
        scores = output["advantages"].float()  # the raw reward per completion (advantage_estimator raw)

        per_token_kl = None
        if self.beta != 0.0 and self.args.kl_in_reward:
            old = self._rollout_logps(output, ids, attention)
            per_token_kl = kl_estimate(old, output["ref_per_token_logps"], self.args.kl_estimator)
            self._metrics[mode]["kl"].append(self._global_masked_mean(per_token_kl, mask))
        rewards = token_rewards(scores, mask, per_token_kl, self.beta if self.args.kl_in_reward else 0.0,
                                self.args.kl_reward_shape)
        with torch.no_grad():
            values = self._values(ids, attention, length, batch_size=self.args.per_device_train_batch_size)
        # GAE reads the values unmasked, as the book's compute_gae does (a masked-out token inside a completion
        # still bootstraps); old_values and the metrics keep only the loss's tokens
        advantages, returns = gae(rewards, values, mask, self.args.gamma, self.args.lam)
        values = values * mask
        if self.args.whiten_advantages:
            mean, var = self._global_stats(advantages, mask)
            advantages = masked_whiten(advantages, mask, mean, var)
        output["advantages"] = advantages
        output["returns"] = returns
        output["old_values"] = values

        metrics = self._metrics[mode]
        metrics["value/mean"].append(self._global_masked_mean(values, mask))
        metrics["returns/mean"].append(self._global_masked_mean(returns, mask))
        metrics["advantages/mean"].append(self._global_masked_mean(advantages, mask))
        _, var_returns = self._global_stats(returns, mask)
        _, var_residual = self._global_stats(returns - values, mask)  # explained_variance, over all processes
        metrics["value/explained_variance"].append(
            float(1.0 - var_residual / var_returns) if float(var_returns) > 0 else float("nan"))

        # The rollout store's `advantage`: the GAE advantage at the first completion token.
        first = self.accelerator.gather(advantages[:, 0].contiguous()).tolist()
        self._monitor_record(**{**record, "advantages": first})
        return output

    # --- the loss ---------------------------------------------------------------------------

    def _compute_loss(self, model, inputs):
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        mask = self._loss_mask(inputs)
        length = completion_ids.size(1)
        self._hidden.clear()
        self._capture_hidden = self._value_kind == "shared"
        try:
            logps, entropies, _ = self._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, length, compute_entropy=True
            )
        finally:
            self._capture_hidden = False
        hidden = torch.cat(self._hidden, dim=0) if self._hidden else None
        self._hidden.clear()
        values = self._values(input_ids, attention_mask, length, hidden=hidden)
        self._last_values = values

        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else old
        advantages = inputs["advantages"]
        policy = clipped_surrogate_loss(logps, old, advantages, self.epsilon_low, self.epsilon_high)
        entropy_mask = self._entropy_mask(entropies, mask)  # TRL's 80/20 rule: the policy term only, not the value's
        if entropy_mask is not None:
            policy = policy * entropy_mask
        if self.use_vllm and self.vllm_importance_sampling_correction:
            policy = policy * inputs["importance_sampling_ratio"]
        value, value_clipped = value_loss_clipped(values, inputs["old_values"], inputs["returns"],
                                                  self.args.cliprange_value)
        per_token = policy + self.args.vf_coef * value
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        if self.beta != 0.0 and not self.args.kl_in_reward:
            kl = kl_estimate(logps, inputs["ref_per_token_logps"], self.args.kl_estimator)
            per_token = per_token + self.beta * kl
            metrics["kl"].append(self._global_masked_mean(kl, mask))
        aggregate = _AGGREGATIONS[self.loss_type]
        loss = aggregate(per_token, mask) - self._entropy_bonus(entropies, mask, entropy_mask)

        with torch.no_grad():
            ratio = torch.exp(logps.detach() - old)
            low = (ratio < 1 - self.epsilon_low) & (advantages < 0)
            high = (ratio > 1 + self.epsilon_high) & (advantages > 0)
            metrics["policy_loss"].append(self._mean_over_processes(aggregate(policy.detach(), mask)))
            metrics["value_loss"].append(self._mean_over_processes(aggregate(value.detach(), mask)))
            metrics["value_clipfrac"].append(self._global_masked_mean(value_clipped.float(), mask))
            metrics["entropy"].append(self._global_masked_mean(entropies, mask))
            metrics["clip_ratio/low_mean"].append(self._global_masked_mean(low.float(), mask))
            metrics["clip_ratio/high_mean"].append(self._global_masked_mean(high.float(), mask))
            metrics["clip_ratio/region_mean"].append(self._global_masked_mean((low | high).float(), mask))
            metrics["approx_kl_to_old"].append(self._global_masked_mean(0.5 * (logps.detach() - old) ** 2, mask))
        return self._guard_loss(loss / self._loss_normalizer())

    def _mean_over_processes(self, value: torch.Tensor) -> float:
        return self.accelerator.reduce(value.detach().float().reshape(1), reduction="mean").item()

    def _guard_loss(self, loss: torch.Tensor) -> torch.Tensor:
        guarded = super()._guard_loss(loss)
        if guarded is not loss and self._last_values is not None:
            # The value model must see a (zero) backward too, or DDP waits for its gradients forever.
            guarded = guarded + torch.nan_to_num(self._last_values * 0.0).sum()
        return guarded

    # --- the value model's optimizer --------------------------------------------------------

    def _prepare_for_training(self, max_steps, train_dataloader, resume_from_checkpoint):
        self._setup_value_training(max_steps)
        return super()._prepare_for_training(max_steps, train_dataloader, resume_from_checkpoint)

    def _setup_value_training(self, max_steps: int) -> None:
        """Prepare the value model with accelerate; give it the policy's optimizer settings and LR schedule: as
        parameter groups of the policy's optimizer (joint, see create_optimizer) or in its own optimizer (separate)."""
        if self._value_groups is not None:
            return
        from transformers.optimization import get_scheduler

        if self.args.fp16:
            raise ValueError("ppo: fp16 loss scaling is not applied to the value model; use bf16 or fp32")
        # from_pretrained returns a model in eval mode, and transformers only checkpoints activations in
        # training mode: without this the value model's activations were all kept (dropout is already off).
        self.value_model.train()
        self._value_wrapped = self.accelerator.prepare_model(self.value_model)
        module = self.value_model
        decay = set(self.get_decay_parameter_names(module))
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        groups = [
            {"params": [p for n, p in named if n in decay], "weight_decay": self.args.weight_decay},
            {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
        ]
        self._value_groups = [g for g in groups if g["params"]]
        self._value_params = [p for _, p in named]
        if self._joint:
            return
        optimizer_class, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, module)
        if self.args.value_learning_rate is not None:
            optimizer_kwargs = {**optimizer_kwargs, "lr": self.args.value_learning_rate}
        self._value_optimizer = optimizer_class(self._value_groups, **optimizer_kwargs)
        self._value_scheduler = get_scheduler(
            self.args.lr_scheduler_type, optimizer=self._value_optimizer,
            num_warmup_steps=self.args.get_warmup_steps(max_steps), num_training_steps=max_steps,
            scheduler_specific_kwargs=self.args.lr_scheduler_kwargs,
        )

    def create_optimizer(self, model=None):
        """joint (the book): the policy's optimizer, with the value model's parameters as more groups of it."""
        fresh = self.optimizer is None
        optimizer = super().create_optimizer(model)
        if fresh and self._joint and self._value_groups:
            for group in self._value_groups:
                optimizer.add_param_group(dict(group))
        return optimizer

    def _joint_params(self, model) -> list[torch.Tensor]:
        return [*model.parameters(), *self._value_params]

    def _clip_grad_norm(self, model):
        """joint (the book): one clipping at max_grad_norm over the policy's and the value model's gradients
        together (a large value gradient shrinks the policy's update too). Returns the joint pre-clip norm."""
        if not self._joint:
            return super()._clip_grad_norm(model)
        self._log_value_grad_norm()
        return self.accelerator.clip_grad_norm_(self._joint_params(model), self.args.max_grad_norm)

    def _get_grad_norm(self, model, grad_norm=None):
        if self._joint and grad_norm is None:  # max_grad_norm 0: no clipping, the joint norm is still logged
            self._log_value_grad_norm()
            grad_norm = self.accelerator.clip_grad_norm_(self._joint_params(model), float("inf"))
        return super()._get_grad_norm(model, grad_norm)

    def _log_value_grad_norm(self) -> None:
        grads = [p.grad for p in self._value_params if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
        self._metrics["train"]["value_grad_norm"].append(float(norm))

    def training_step(self, model, inputs, num_items_in_batch):
        wrapped = self._value_wrapped
        accumulating = not self.accelerator.sync_gradients
        context = wrapped.no_sync() if accumulating and hasattr(wrapped, "no_sync") else contextlib.nullcontext()
        with context:
            return super().training_step(model, inputs, num_items_in_batch)

    def _value_optimizer_step(self) -> None:
        if self._value_optimizer is None:
            return
        params = self._value_params
        world = self.accelerator.num_processes
        if world > 1 and not hasattr(self._value_wrapped, "no_sync"):  # not DDP-wrapped (DeepSpeed): average here
            for p in params:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                p.grad.copy_(self.accelerator.reduce(p.grad, reduction="mean"))
        grads = [p for p in params if p.grad is not None]
        max_norm = self.args.max_grad_norm if self.args.max_grad_norm and self.args.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(grads, max_norm) if grads else torch.tensor(0.0)
        self._value_optimizer.step()
        self._value_scheduler.step()
        self._value_optimizer.zero_grad(set_to_none=True)
        self._metrics["train"]["value_grad_norm"].append(float(norm))

    # --- saving and resuming ----------------------------------------------------------------

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        target = output_dir or self.args.output_dir
        if self.args.should_save:
            save_value_model(self.value_model, target, self._value_kind, self._value_base)

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save and self._value_optimizer is not None:
            folder = Path(output_dir) / VALUE_SUBDIR
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(self._value_optimizer.state_dict(), folder / OPTIMIZER_FILE)
            torch.save(self._value_scheduler.state_dict(), folder / SCHEDULER_FILE)

    def _load_optimizer_and_scheduler(self, checkpoint):
        folder = Path(checkpoint) / VALUE_SUBDIR if checkpoint is not None else None
        if folder is not None and folder.is_dir() and (folder / OPTIMIZER_FILE).exists() == self._joint:
            saved = "separate" if self._joint else "joint"
            raise ValueError(f"{checkpoint} was saved with value_optimizer: {saved}; resume it with "
                             f"--value_optimizer {saved}")
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        folder = Path(checkpoint) / VALUE_SUBDIR
        if not folder.is_dir():
            logger.warning("%s holds no value model: the value model starts fresh (a checkpoint of another run?)",
                           checkpoint)
            return
        restore_value_weights(self.value_model, checkpoint, self._value_kind)
        if (folder / OPTIMIZER_FILE).exists() and self._value_optimizer is not None:
            device = next(self.value_model.parameters()).device
            self._value_optimizer.load_state_dict(torch.load(folder / OPTIMIZER_FILE, map_location=device,
                                                             weights_only=True))
            self._value_scheduler.load_state_dict(torch.load(folder / SCHEDULER_FILE, weights_only=True))
        self._value_restored_from = str(checkpoint)
        logger.info("value model, its optimizer and scheduler restored from %s", checkpoint)

    # --- after the run ----------------------------------------------------------------------

    def rollout_summary(self) -> dict[str, Any]:
        summary = super().rollout_summary()
        summary["value_model"] = {
            "kind": self._value_kind,
            "starts_from": self._value_base if self._value_kind == "separate" else "head on the policy's backbone",
            "trainable_parameters": count_trainable(self.value_model),
            "saved_to": str(Path(self.args.output_dir) / VALUE_SUBDIR),
            "restored_from": self._value_restored_from,
        }
        return summary
