"""The one place that knows algorithm names.

Each entry says which TRL config class and trainer class run the algorithm (TRL's own where
it computes the book's math exactly, ours in custom_losses/ where it does not), which
family builds its data and trainer (rlhf_recipes/families/<family>.py), and the values
that make it this algorithm rather than its neighbour (`defaults`, applied before the
recipe's own values). Classes are named by import path so that validating a recipe
does not import every trainer.

Adding an algorithm: one entry here + one recipes/<name>.yaml (+ a loss function and a
trainer subclass in custom_losses/ when TRL lacks it).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Algorithm:
    name: str
    family: str  # module under rlhf_recipes.families
    config_class: str  # "module:Class"
    trainer_class: str  # "module:Class"
    paper: str
    chapter: str
    defaults: dict[str, Any] = field(default_factory=dict)
    key_metrics: tuple[str, ...] = ()  # plotted in curves.png next to the loss
    tiny: dict[str, Any] = field(default_factory=dict)  # per-algorithm additions to the tiny profile


def import_object(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def family_of(algorithm: Algorithm) -> ModuleType:
    return importlib.import_module(f"rlhf_recipes.families.{algorithm.family}")


_DPO_METRICS = ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected")
_BOOK_DPO = dict(
    family="direct_alignment",
    config_class="custom_losses.direct_alignment:BookDPOConfig",
    trainer_class="custom_losses.direct_alignment:BookDPOTrainer",
    key_metrics=_DPO_METRICS,
)

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in [
        # --- direct alignment (book chapter 8) ------------------------------------------
        Algorithm(
            "dpo", family="direct_alignment", config_class="trl:DPOConfig", trainer_class="trl:DPOTrainer",
            paper="Rafailov et al. 2023, Direct Preference Optimization", chapter="8",
            defaults={"loss_type": ["sigmoid"]}, key_metrics=_DPO_METRICS,
        ),
        Algorithm(
            "cdpo", **_BOOK_DPO, paper="Mitchell 2023, A note on DPO with noisy preferences (conservative DPO)",
            chapter="8", defaults={"book_loss": "cdpo", "label_smoothing": 0.1},
        ),
        Algorithm(
            "dpo_norm", family="direct_alignment", config_class="trl:DPOConfig", trainer_class="trl:DPOTrainer",
            paper="Rafailov et al. 2023 (DPO) with length-averaged log-ratios", chapter="8",
            defaults={"loss_type": ["sigmoid_norm"]}, key_metrics=_DPO_METRICS,
        ),
        Algorithm(
            "ipo", **_BOOK_DPO, paper="Azar et al. 2023, A General Theoretical Paradigm (IPO)", chapter="8",
            defaults={"book_loss": "ipo"},
        ),
        Algorithm(
            "simpo", family="direct_alignment", config_class="trl.experimental.cpo:CPOConfig",
            trainer_class="trl.experimental.cpo:CPOTrainer",
            paper="Meng et al. 2024, SimPO: Simple Preference Optimization", chapter="8",
            defaults={"loss_type": "simpo", "cpo_alpha": 0.0}, key_metrics=_DPO_METRICS,
        ),
        Algorithm(
            "orpo", **{**_BOOK_DPO, "key_metrics": _DPO_METRICS + ("nll_loss", "log_odds_chosen")},
            paper="Hong et al. 2024, ORPO: Monolithic Preference Optimization", chapter="8",
            defaults={"book_loss": "orpo"},
        ),
        Algorithm(
            "kto", **{**_BOOK_DPO, "key_metrics": _DPO_METRICS + ("kl",)},
            paper="Ethayarajh et al. 2024, KTO: Model Alignment as Prospect Theoretic Optimization", chapter="8",
            defaults={"book_loss": "kto"},
        ),
        Algorithm(
            "apo_zero", family="direct_alignment", config_class="trl:DPOConfig", trainer_class="trl:DPOTrainer",
            paper="D'Oosterlinck et al. 2024, Anchored Preference Optimization (APO-zero)", chapter="8",
            defaults={"loss_type": ["apo_zero"]}, key_metrics=_DPO_METRICS,
        ),
        Algorithm(
            "apo_down", family="direct_alignment", config_class="trl:DPOConfig", trainer_class="trl:DPOTrainer",
            paper="D'Oosterlinck et al. 2024, Anchored Preference Optimization (APO-down)", chapter="8",
            defaults={"loss_type": ["apo_down"]}, key_metrics=_DPO_METRICS,
        ),
        # --- policy gradients (book chapter 6) -------------------------------------------
        # One config and trainer (custom_losses/policy_gradient.py) for all ten; `defaults` are
        # what makes each algorithm itself. Every entry: the book's seq-mean aggregation
        # (loss_type grpo) unless stated, log-probs at temperature 1, z-score eps 1e-8.
        Algorithm(
            "reinforce", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="Williams 1992, Simple statistical gradient-following algorithms (REINFORCE)", chapter="6",
            defaults={"advantage_estimator": "raw", "book_objective": "policy_gradient", "kl_in_reward": True,
                      "loss_type": "grpo"},
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean",
                         "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "rloo", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization (RLOO)", chapter="6",
            defaults={"advantage_estimator": "rloo", "book_objective": "policy_gradient", "kl_in_reward": True,
                      "loss_type": "grpo"},
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean",
                         "health/groups_with_contrast", "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "grpo", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="Shao et al. 2024, DeepSeekMath (Group Relative Policy Optimization)", chapter="6",
            defaults={"advantage_estimator": "zscore", "loss_type": "grpo", "importance_sampling_level": "token",
                      "epsilon": 0.2, "epsilon_high": 0.2},
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean",
                         "health/groups_with_contrast", "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "drgrpo", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective (Dr. GRPO)",
            chapter="6",
            # TRL's own advantage with scale_rewards none is the book's R - mean; the book keeps
            # GRPO's seq-mean (TRL's loss_type dr_grpo divides by a constant instead).
            defaults={"advantage_estimator": "trl", "scale_rewards": "none", "loss_type": "grpo",
                      "epsilon": 0.2, "epsilon_high": 0.2},
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean",
                         "health/groups_with_contrast", "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "gspo", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="Zheng et al. 2025, Group Sequence Policy Optimization", chapter="6",
            defaults={"advantage_estimator": "zscore", "loss_type": "grpo", "importance_sampling_level": "sequence",
                      "epsilon": 0.2, "epsilon_high": 0.2},
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean",
                         "health/groups_with_contrast", "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "cispo", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="MiniMax 2025, MiniMax-M1 (Clipped IS-weight Policy Optimization)", chapter="6",
            defaults={"advantage_estimator": "zscore", "book_objective": "cispo", "loss_type": "grpo",
                      "epsilon": 0.2, "epsilon_high": 0.4},
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean",
                         "cispo_clip_ratio", "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "sapo", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="Gao et al. 2025, Soft Adaptive Policy Optimization (SAPO)", chapter="6",
            defaults={"advantage_estimator": "zscore", "loss_type": "sapo", "sapo_temperature_pos": 1.0,
                      "sapo_temperature_neg": 1.05},
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean",
                         "health/groups_with_contrast", "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "dapo", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at Scale", chapter="6",
            # TRL's bnpo is the book's token mean over the micro-batch (TRL's `dapo` normalizes
            # over the whole accumulated batch instead).
            defaults={"advantage_estimator": "zscore", "loss_type": "bnpo", "epsilon": 0.2, "epsilon_high": 0.28,
                      "dynamic_sampling": True},
            tiny={"max_refill_rounds": 1},  # a random tiny model is never correct: one refill round, then filler
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/overlong_penalty_reward/mean",
                         "dynamic_sampling/kept_groups_first_round", "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "maxrl", family="policy_gradient", config_class="custom_losses.policy_gradient.trainer:BookGRPOConfig",
            trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer",
            paper="Tajwar et al. 2026, Maximum Likelihood Reinforcement Learning (MaxRL)", chapter="6",
            defaults={"advantage_estimator": "maxrl", "advantage_reward": "binary_reward",
                      "book_objective": "policy_gradient", "loss_type": "grpo"},
            key_metrics=("reward", "rewards/correctness_reward/mean", "rewards/binary_reward/mean",
                         "health/groups_with_contrast", "completions/mean_length", "grad_norm"),
        ),
        Algorithm(
            "ppo", family="policy_gradient", config_class="custom_losses.ppo.trainer:PPOConfig",
            trainer_class="custom_losses.ppo.trainer:PPOTrainer",
            paper="Schulman et al. 2017, Proximal Policy Optimization Algorithms; Schulman et al. 2016 (GAE); "
                  "Ouyang et al. 2022 (InstructGPT)", chapter="6",
            # A value model (a copy of the policy with a Linear(hidden, 1) head), GAE (gamma 1.0, lambda 0.98,
            # no whitening), grpo's clipped term + 0.5 x clipped value loss (0.4), seq-mean of the sum;
            # KL (beta 0) in the reward. Book run ku3r3g9j.
            defaults={"advantage_estimator": "raw", "loss_type": "grpo", "importance_sampling_level": "token",
                      "epsilon": 0.2, "epsilon_high": 0.2, "kl_in_reward": True, "vf_coef": 0.5,
                      "cliprange_value": 0.4, "gamma": 1.0, "lam": 0.98, "whiten_advantages": False},
            key_metrics=("reward", "rewards/correctness_reward/mean", "value_loss", "policy_loss",
                         "value/explained_variance", "grad_norm"),
        ),
        # --- supervised fine-tuning (book chapter 4) ---------------------------------------
        Algorithm(
            "sft", family="sft", config_class="custom_losses.sft.config:BookSFTConfig",
            trainer_class="custom_losses.sft.trainer:BookSFTTrainer",
            paper="Ouyang et al. 2022, Training language models to follow instructions (InstructGPT); "
                  "Wei et al. 2022, Finetuned Language Models Are Zero-Shot Learners (instruction tuning)",
            chapter="4",
            # Loss on the final assistant turn only (TRL's completion-only loss on prompt/completion rows), the mean
            # of micro-batch means, whole optimizer steps per epoch, the book's warmup. Book run nybj8sdx.
            defaults={"completion_only_loss": True, "packing": False, "book_lr_schedule": True,
                      "drop_partial_steps": True},
            key_metrics=("grad_norm", "learning_rate", "mean_token_accuracy"),
        ),
        # --- reward models (book chapter 5) ----------------------------------------------
        Algorithm(
            "preference_rm", family="reward_model", config_class="custom_losses.reward_models.trainers:PreferenceRMConfig",
            trainer_class="trl:RewardTrainer",
            paper="Bradley & Terry 1952; Ouyang et al. 2022 (InstructGPT): pairwise preference reward model",
            chapter="5", key_metrics=("accuracy", "margin", "eval_accuracy", "eval_margin"),
        ),
        Algorithm(
            "orm", family="reward_model", config_class="custom_losses.reward_models.trainers:OutcomeRMConfig",
            trainer_class="custom_losses.reward_models.trainers:OutcomeRMTrainer",
            paper="Cobbe et al. 2021, Training Verifiers to Solve Math Word Problems (outcome reward model)",
            chapter="5", key_metrics=("accuracy", "eval_top1_accuracy", "eval_pairwise_accuracy"),
        ),
        Algorithm(
            "prm", family="reward_model", config_class="custom_losses.reward_models.trainers:ProcessRMConfig",
            trainer_class="custom_losses.reward_models.trainers:ProcessRMTrainer",
            paper="Lightman et al. 2023, Let's Verify Step by Step (process reward model)",
            chapter="5", key_metrics=("step_accuracy", "eval_step_accuracy"),
        ),
    ]
}
