"""PPOConfig: BookGRPOConfig plus PPO's value model and GAE (RLHF book, chapter 6), and what a
PPO run keeps in memory (`models_in_memory`, for planning)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from custom_losses.policy_gradient.config import BookGRPOConfig
from custom_losses.ppo.losses import KL_REWARD_SHAPES

logger = logging.getLogger(__name__)

AGGREGATIONS = ("grpo", "bnpo")  # loss_type: seq-mean (the book) or token mean per micro-batch
VALUE_OPTIMIZERS = ("joint", "separate")


@dataclass
class PPOConfig(BookGRPOConfig):
    """BookGRPOConfig plus PPO's value model and GAE. Defaults are the book's."""

    own_objective: ClassVar[str] = "ppo"  # for the TRL options only TRL's loss reads (policy_gradient/trl_options.py)

    advantage_estimator: str = field(
        default="raw",
        metadata={"help": "PPO: the per-completion scalar that GAE puts on the last token is the raw (weighted) "
                  "reward; must stay 'raw' (the advantages come from GAE)."},
    )
    kl_in_reward: bool = field(
        default=True,
        metadata={"help": "true (book): the KL penalty (beta > 0) enters the reward before GAE (see kl_reward_shape); "
                  "false: beta * KL per token is added to the loss, as in the GRPO family."},
    )
    kl_reward_shape: str = field(
        default="sequence_mean",
        metadata={"help": f"How a KL penalty enters the reward, one of {KL_REWARD_SHAPES}. 'sequence_mean' (book): "
                  "R - beta * (masked mean of the per-token KL estimate), on the last token. 'per_token' "
                  "(InstructGPT, TRL's old PPOTrainer): -beta * kl_t on every completion token, R on the last."},
    )
    vf_coef: float = field(default=0.5, metadata={"help": "Weight of the value loss in the total loss (book 0.5)."})
    cliprange_value: float | None = field(
        default=0.4,
        metadata={"help": "Value clipping c: loss max(0.5 (G - V)^2, 0.5 (G - clip(V, V_old - c, V_old + c))^2) "
                  "(book 0.4). null or 0: unclipped 0.5 (G - V)^2."},
    )
    gamma: float = field(default=1.0, metadata={"help": "GAE discount (book 1.0)."})
    lam: float = field(default=0.98, metadata={"help": "GAE lambda (book 0.98)."})
    whiten_advantages: bool = field(
        default=False,
        metadata={"help": "Whiten the advantages over the rollout batch's completion tokens (all processes). "
                  "The book does not."},
    )
    share_value_backbone: bool = field(
        default=False,
        metadata={"help": "false (book): the value model is a separate full copy with a Linear(hidden, 1) head. "
                  "true: only a Linear(hidden, 1) head on the policy's last hidden states (no second backbone in "
                  "memory; the value loss then also trains the policy's backbone)."},
    )
    value_model_path: str | None = field(
        default=None,
        metadata={"help": "Checkpoint the separate value model starts from (null: the policy's). A trained reward "
                  "model's run dir works too (InstructGPT's choice), if it shares the policy's tokenizer."},
    )
    value_use_peft: bool | None = field(
        default=None,
        metadata={"help": "LoRA on the separate value model (its head always trains fully). null: exactly when the "
                  "policy uses LoRA (use_peft), with the policy's LoRA settings."},
    )

    value_optimizer: str = field(
        default="joint",
        metadata={"help": "'joint' (book): ONE optimizer over the policy's and the value model's parameters, ONE "
                  "gradient clipping at max_grad_norm over both together, one step. 'separate': the value model gets "
                  "its own optimizer (the policy's class, settings and schedule; value_learning_rate if set) and its "
                  "own clipping at max_grad_norm; use it for a different value learning rate, and under DeepSpeed, "
                  "which owns the policy's optimizer and clipping."},
    )
    value_learning_rate: float | None = field(
        default=None,
        metadata={"help": "Learning rate of the value model's own optimizer (value_optimizer: separate only); null: "
                  "learning_rate, as the book."},
    )

    def _validate_book_options(self) -> None:
        self._validate_ppo_options()  # first: PPO's own messages are the clearer ones
        super()._validate_book_options()

    def _validate_ppo_options(self) -> None:
        if self.advantage_estimator != "raw":
            raise ValueError("ppo: advantages come from GAE over the raw reward; advantage_estimator must be 'raw', "
                             f"got {self.advantage_estimator!r}")
        if self.book_objective is not None:
            raise ValueError("ppo computes its own objective; book_objective must be null, got "
                             f"{self.book_objective!r}")
        if self.loss_type not in AGGREGATIONS:
            raise ValueError(f"ppo: loss_type only chooses the aggregation, 'grpo' (seq-mean, the book) or 'bnpo' "
                             f"(token mean per micro-batch); got {self.loss_type!r}")
        if self.importance_sampling_level != "token":
            raise ValueError("ppo uses per-token ratios: importance_sampling_level must be 'token'")
        if self.dynamic_sampling:
            raise ValueError("dynamic_sampling (DAPO) is not supported by ppo")
        if self.kl_reward_shape not in KL_REWARD_SHAPES:
            raise ValueError(f"kl_reward_shape must be one of {KL_REWARD_SHAPES}, got {self.kl_reward_shape!r}")
        if self.vf_coef < 0:
            raise ValueError(f"vf_coef must be >= 0, got {self.vf_coef}")
        if self.cliprange_value is not None and self.cliprange_value < 0:
            raise ValueError(f"cliprange_value must be >= 0 or null, got {self.cliprange_value}")
        for name in ("gamma", "lam"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.value_optimizer not in VALUE_OPTIMIZERS:
            raise ValueError(f"value_optimizer must be one of {VALUE_OPTIMIZERS}, got {self.value_optimizer!r}")
        if self.value_learning_rate is not None and self.value_optimizer != "separate":
            raise ValueError("value_learning_rate needs the value model's own optimizer: set value_optimizer: separate "
                             "(or drop value_learning_rate)")
        deepspeed = self.deepspeed or os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
        if deepspeed and self.value_optimizer == "joint":
            raise ValueError("value_optimizer: joint needs the policy's optimizer and clipping, which DeepSpeed owns: "
                             "under DeepSpeed set value_optimizer: separate")
        if self.share_value_backbone and self.value_model_path is not None:
            raise ValueError("share_value_backbone puts the value head on the policy's backbone: value_model_path "
                             "does not apply (set one or the other)")
        if self.share_value_backbone and self.value_use_peft:
            raise ValueError("value_use_peft applies to a separate value model, not to share_value_backbone")
        # TRL's loss options (top_entropy_quantile, entropy_coef, delta, ...) are refused by
        # policy_gradient/trl_options.py, for ppo as for the other objectives of ours.
        unsupported = {"num_iterations": self.num_iterations != 1}
        bad = [name for name, on in unsupported.items() if on]
        if bad:
            raise ValueError(f"ppo does not implement GRPOTrainer's {', '.join(bad)}; leave them at their defaults")
        if self.beta != 0 and self.kl_in_reward and self.kl_estimator == "k1":
            logger.warning("ppo: kl_estimator k1 in the reward: the book's k1 = -(logp - ref) has expectation -KL, so "
                           "subtracting beta * k1 REWARDS divergence from the reference; use k2 or k3")


def models_in_memory(args: PPOConfig, policy_uses_peft: bool = False) -> dict[str, dict[str, Any]]:
    """What a PPO run keeps in memory per process, for memory planning (no model is loaded).

    Each role: `copy` (what it is relative to the policy's weights), `trainable` (gets gradients
    and optimizer state), `dtype` (None: the policy's), `sharded_by_zero` (partitioned by
    DeepSpeed ZeRO; otherwise a full replica on every process).
    """
    value_peft = policy_uses_peft if args.value_use_peft is None else args.value_use_peft
    roles: dict[str, dict[str, Any]] = {
        "policy": {"copy": "policy", "trainable": "lora" if policy_uses_peft else "full", "dtype": None,
                   "sharded_by_zero": True},
    }
    if args.share_value_backbone:
        roles["value"] = {"copy": "head only: Linear(hidden, 1), fp32, on the policy's backbone", "trainable": "full",
                          "dtype": "float32", "sharded_by_zero": False}
    else:
        roles["value"] = {"copy": "full policy backbone (no LM head) + Linear(hidden, 1)",
                          "trainable": "lora (+ head)" if value_peft else "full", "dtype": None,
                          "sharded_by_zero": False, "starts_from": args.value_model_path or "the policy"}
    if args.beta != 0.0:
        roles["reference"] = ({"copy": "none: the policy with its LoRA adapter disabled", "trainable": False}
                              if policy_uses_peft else
                              {"copy": "policy (frozen)", "trainable": False, "dtype": args.ref_dtype,
                               "sharded_by_zero": True})
    from rewards.reward_model import RM_PREFIX

    rm = [name for name in args.reward_funcs if name.startswith(RM_PREFIX)]
    if rm:
        roles["reward"] = {"copy": f"reward model(s) {rm} (frozen)", "trainable": False,
                           "dtype": args.reward_model_dtype or "bfloat16 on GPU, float32 on CPU",
                           "sharded_by_zero": False}
    return roles
