"""The one place that knows algorithm names, and every fact about each algorithm.

Each entry says which TRL config class and trainer class run the algorithm (TRL's own where
it computes the book's math exactly, ours in custom_losses/ where it does not), which
family builds its data and trainer (rlhf_recipes/families/<family>.py), the values that
make it this algorithm rather than its neighbour (`defaults`, applied before the recipe's
own values), what its memory plan needs to know (a reference model or not, full logits),
and what its run plots. What the book published for it (run ids, batch shape, metric maps, final
numbers) is rlhf_recipes/book_reference.py's, read by the tools only. Tools ask here; none keeps its
own table of algorithms.
Classes are named by import path so that validating a recipe does not import every trainer
(config_schema.import_object turns one into a class when a run needs it).

Adding an algorithm: one entry here + one recipes/<name>.yaml (+ a loss function and a
trainer subclass in custom_losses/ when TRL lacks it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rlhf_recipes.config_schema import import_object  # noqa: F401  (tools name classes through the registry)
from rlhf_recipes.families import (direct_alignment, policy_gradient, rejection_sampling, reward_model,
                                   self_distillation, sft)
from rlhf_recipes.families.base import Family


class Fixed(NamedTuple):
    """A key the algorithm's loss does not read: only `accepted` is taken (another value is refused, saying `why`),
    while every key of `when` has that value (an empty `when`: always)."""

    accepted: Any
    why: str
    when: dict[str, Any] = {}


@dataclass(frozen=True)
class Algorithm:
    name: str
    family: str  # a name of FAMILY_OBJECTS (below)
    config_class: str  # "module:Class"
    trainer_class: str  # "module:Class"
    paper: str
    chapter: str
    defaults: dict[str, Any] = field(default_factory=dict)
    key_metrics: tuple[str, ...] = ()  # plotted in curves.png next to the loss
    reference_model: bool = True  # the loss compares with a frozen reference policy (False: reference-free)
    # Response log-probs averaged over their tokens, not summed (the book's use_average_logprob): in the loss, the
    # logged rewards and the held-out implicit reward (evaluation/preferences.py).
    averages_logprobs: bool = False
    materializes_full_logits: bool = False  # the trainer builds (tokens x vocabulary) logits, no fused head
    aliases: tuple[str, ...] = ()  # other spellings users and tools may use
    fixed: dict[str, Fixed] = field(default_factory=dict)  # keys its loss does not read (config.load_recipe refuses)


# The families, in the order tools list them: name -> the family object (families/base.py), imported here by name
# (a family module imports TRL only inside its hooks).
FAMILY_OBJECTS: dict[str, Family] = {f.name: f for f in (policy_gradient.FAMILY, direct_alignment.FAMILY,
                                                         reward_model.FAMILY, sft.FAMILY, rejection_sampling.FAMILY,
                                                         self_distillation.FAMILY)}
FAMILIES: tuple[str, ...] = tuple(FAMILY_OBJECTS)


def family_named(family: str) -> Family:
    """The family object of that name: its hooks, and the facts tools ask (families/base.py)."""
    return FAMILY_OBJECTS[family]


def family_of(algorithm: Algorithm) -> Family:
    """The family object of an algorithm."""
    return FAMILY_OBJECTS[algorithm.family]


def evaluator_for(recipe, options):
    """The held-out evaluator of the recipe's family, checked (EvalError before any model loads)."""
    return family_of(recipe.algorithm).held_out_evaluator(recipe, options)


# --- Class paths: each trainer's written once ----------------------------------------------
# TRL's DPOTrainer and loss, plus the book's LR schedule option (custom_losses/schedules.py).
_TRL_DPO = dict(config_class="custom_losses.direct_alignment.config:ScheduledDPOConfig",
                trainer_class="custom_losses.direct_alignment.trainer:ScheduledDPOTrainer")
_BOOK_DPO = dict(config_class="custom_losses.direct_alignment.config:BookDPOConfig",
                 trainer_class="custom_losses.direct_alignment.trainer:BookDPOTrainer")
_BOOK_GRPO = dict(config_class="custom_losses.policy_gradient.config:BookGRPOConfig",
                  trainer_class="custom_losses.policy_gradient.trainer:BookGRPOTrainer")
_PPO = dict(config_class="custom_losses.ppo.config:PPOConfig", trainer_class="custom_losses.ppo.trainer:PPOTrainer")
_BOOK_SFT = dict(config_class="custom_losses.sft.config:BookSFTConfig",
                 trainer_class="custom_losses.sft.trainer:BookSFTTrainer")
_BOOK_RS = dict(config_class="custom_losses.rejection_sampling.config:RejectionSamplingConfig",
                trainer_class="custom_losses.sft.trainer:BookSFTTrainer")
_PREFERENCE_RM = dict(config_class="custom_losses.reward_models.config:PreferenceRMConfig",
                      trainer_class="trl:RewardTrainer")
_OUTCOME_RM = dict(config_class="custom_losses.reward_models.config:OutcomeRMConfig",
                   trainer_class="custom_losses.reward_models.trainers:OutcomeRMTrainer")
_PROCESS_RM = dict(config_class="custom_losses.reward_models.config:ProcessRMConfig",
                   trainer_class="custom_losses.reward_models.trainers:ProcessRMTrainer")
_BOOK_SDPO = dict(config_class="custom_losses.sdpo.config:BookSDPOConfig",
                  trainer_class="custom_losses.sdpo.trainer:BookSDPOTrainer")

# --- What a family's entries share ---------------------------------------------------------
_DPO_METRICS = ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected")


def _direct_alignment(classes: dict[str, str], defaults: dict[str, Any], extra_metrics: tuple[str, ...] = (),
                      fixed: dict[str, Fixed] | None = None) -> dict[str, Any]:
    """Chapter 8. The book's LR schedule (warmup, then linear decay to 0) is each recipe's `book_lr_schedule`.
    On BookDPOTrainer, `book_loss` replaces TRL's `loss_type`, which is then refused rather than silently unread."""
    if classes is _BOOK_DPO:
        fixed = {"loss_type": Fixed(["sigmoid"], f"BookDPOTrainer runs the book's loss (book_loss "
                                                 f"{defaults['book_loss']}), which replaces TRL's loss_type; a TRL "
                                                 "loss runs through recipes/dpo.yaml"), **(fixed or {})}
    return dict(family="direct_alignment", chapter="8", **classes, key_metrics=_DPO_METRICS + extra_metrics,
                defaults=defaults, fixed=fixed or {})


def _policy_gradient(classes: dict[str, str] = _BOOK_GRPO, key_metrics: tuple[str, ...] | None = None,
                     middle: tuple[str, ...] = ()) -> dict[str, Any]:
    """Chapter 6. Key metrics: reward, correctness, `middle`, completion length, grad_norm (unless given whole)."""
    if key_metrics is None:
        key_metrics = ("reward", "rewards/correctness_reward/mean", *middle, "completions/mean_length", "grad_norm")
    return dict(family="policy_gradient", chapter="6", **classes, key_metrics=key_metrics)


def _reward_model(classes: dict[str, str], key_metrics: tuple[str, ...]) -> dict[str, Any]:
    """Chapter 5."""
    return dict(family="reward_model", chapter="5", **classes, key_metrics=key_metrics)


def _rejection_sampling(rule: str) -> dict[str, Any]:
    """Chapter 9: sample 8 completions per GSM8K prompt, score them with a reward model, keep those the
    selection `rule` picks (custom_losses/rejection_sampling/selection.py), SFT the base policy on them
    (BookSFTTrainer), evaluate test_accuracy (families/rejection_sampling.py)."""
    return dict(family="rejection_sampling", chapter="9", **_BOOK_RS,
                paper="Nakano et al. 2021 (WebGPT, best-of-n); Touvron et al. 2023 (Llama 2, rejection sampling "
                      "fine-tuning); Dong et al. 2023 (RAFT)",
                # The book's SFT stage takes the partial last step of an epoch, each micro-batch loss / batch_acc.
                defaults={"selection_rule": rule, "completion_only_loss": True, "packing": False,
                          "drop_partial_steps": False, "partial_step_scale": "accumulation"},
                key_metrics=("grad_norm", "learning_rate", "mean_token_accuracy"))


_FORMAT = "rewards/format_reward/mean"
_CONTRAST = "health/groups_with_contrast"

ALGORITHMS: dict[str, Algorithm] = {
    a.name: a
    for a in [
        # --- direct alignment (book chapter 8) ------------------------------------------
        Algorithm(
            "dpo", **_direct_alignment(_TRL_DPO, {"loss_type": ["sigmoid"]}, fixed={
                "label_smoothing": Fixed(0.0, "TRL's sigmoid loss, which runs dpo, ignores it (the book's DPO with "
                                              "label smoothing is cDPO: recipes/cdpo.yaml)",
                                         {"loss_type": ["sigmoid"]})}),
            paper="Rafailov et al. 2023, Direct Preference Optimization",
        ),
        Algorithm(
            "cdpo", **_direct_alignment(_BOOK_DPO, {"book_loss": "cdpo", "label_smoothing": 0.1}),
            paper="Mitchell 2023, A note on DPO with noisy preferences (conservative DPO)",
        ),
        Algorithm(
            # BookDPOTrainer: TRL's sigmoid_norm computes this loss but logs rewards/* from the SUMMED log-ratios,
            # where the book logs the averaged ones it trains on.
            "dpo_norm", **_direct_alignment(_BOOK_DPO, {"book_loss": "dpo_norm"}, fixed={
                "label_smoothing": Fixed(0.0, "the book's DPO-norm loss does not read it (the book's DPO with label "
                                              "smoothing is cDPO: recipes/cdpo.yaml)")}),
            paper="Rafailov et al. 2023 (DPO) with length-averaged log-ratios",
            aliases=("dponorm", "sigmoid_norm"), averages_logprobs=True,
        ),
        Algorithm(
            "ipo", **_direct_alignment(_BOOK_DPO, {"book_loss": "ipo"}),
            paper="Azar et al. 2023, A General Theoretical Paradigm (IPO)",
        ),
        Algorithm(
            # Reference-free on BookDPOTrainer (averaged log-probs, DPOTrainer's keep_end left cut, as the book);
            # TRL's CPOTrainer would keep the prompt and cut the response's end.
            "simpo", **_direct_alignment(_BOOK_DPO, {"book_loss": "simpo"}),
            paper="Meng et al. 2024, SimPO: Simple Preference Optimization", reference_model=False,
            averages_logprobs=True,
        ),
        Algorithm(
            # BookDPOTrainer drops DPOTrainer's reference copy for orpo.
            "orpo", **_direct_alignment(_BOOK_DPO, {"book_loss": "orpo"},
                                        extra_metrics=("nll_loss", "log_odds_chosen")),
            paper="Hong et al. 2024, ORPO: Monolithic Preference Optimization", reference_model=False,
            averages_logprobs=True,
        ),
        Algorithm(
            "kto", **_direct_alignment(_BOOK_DPO, {"book_loss": "kto"}, extra_metrics=("kl",)),
            paper="Ethayarajh et al. 2024, KTO: Model Alignment as Prospect Theoretic Optimization",
        ),
        Algorithm(
            # BookDPOTrainer: TRL's apo_zero/apo_down add a constant 1 to the logged loss.
            "apo_zero", **_direct_alignment(_BOOK_DPO, {"book_loss": "apo_zero"}),
            paper="D'Oosterlinck et al. 2024, Anchored Preference Optimization (APO-zero)",
        ),
        Algorithm(
            "apo_down", **_direct_alignment(_BOOK_DPO, {"book_loss": "apo_down"}),
            paper="D'Oosterlinck et al. 2024, Anchored Preference Optimization (APO-down)",
        ),
        # --- policy gradients (book chapter 6) -------------------------------------------
        # One config and trainer (custom_losses/policy_gradient/) for all nine but PPO; `defaults` are
        # what makes each algorithm itself. Every entry: the book's seq-mean aggregation
        # (loss_type grpo) unless stated, log-probs at temperature 1, z-score eps 1e-8.
        Algorithm(
            "reinforce", **_policy_gradient(middle=(_FORMAT,)),
            paper="Williams 1992, Simple statistical gradient-following algorithms (REINFORCE)",
            defaults={"advantage_estimator": "raw", "book_objective": "policy_gradient", "kl_in_reward": True,
                      "loss_type": "grpo"},
        ),
        Algorithm(
            "rloo", **_policy_gradient(middle=(_FORMAT, _CONTRAST)),
            paper="Ahmadian et al. 2024, Back to Basics: Revisiting REINFORCE Style Optimization (RLOO)",
            defaults={"advantage_estimator": "rloo", "book_objective": "policy_gradient", "kl_in_reward": True,
                      "loss_type": "grpo"},
        ),
        Algorithm(
            "grpo", **_policy_gradient(middle=(_FORMAT, _CONTRAST)),
            paper="Shao et al. 2024, DeepSeekMath (Group Relative Policy Optimization)",
            defaults={"advantage_estimator": "zscore", "loss_type": "grpo", "importance_sampling_level": "token",
                      "epsilon": 0.2, "epsilon_high": 0.2},
        ),
        Algorithm(
            "drgrpo", **_policy_gradient(middle=(_FORMAT, _CONTRAST)),
            paper="Liu et al. 2025, Understanding R1-Zero-Like Training: A Critical Perspective (Dr. GRPO)",
            # TRL's own advantage with scale_rewards none is the book's R - mean; the book keeps
            # GRPO's seq-mean (TRL's loss_type dr_grpo divides by a constant instead).
            defaults={"advantage_estimator": "trl", "scale_rewards": "none", "loss_type": "grpo",
                      "epsilon": 0.2, "epsilon_high": 0.2},
            aliases=("dr_grpo",),
        ),
        Algorithm(
            "gspo", **_policy_gradient(middle=(_FORMAT, _CONTRAST)),
            paper="Zheng et al. 2025, Group Sequence Policy Optimization",
            defaults={"advantage_estimator": "zscore", "loss_type": "grpo", "importance_sampling_level": "sequence",
                      "epsilon": 0.2, "epsilon_high": 0.2},
        ),
        Algorithm(
            "cispo", **_policy_gradient(middle=(_FORMAT, "cispo_clip_ratio")),
            paper="MiniMax 2025, MiniMax-M1 (Clipped IS-weight Policy Optimization)",
            defaults={"advantage_estimator": "zscore", "book_objective": "cispo", "loss_type": "grpo",
                      "epsilon": 0.2, "epsilon_high": 0.4},
        ),
        Algorithm(
            "sapo", **_policy_gradient(middle=(_FORMAT, _CONTRAST)),
            paper="Gao et al. 2025, Soft Adaptive Policy Optimization (SAPO)",
            defaults={"advantage_estimator": "zscore", "loss_type": "sapo", "sapo_temperature_pos": 1.0,
                      "sapo_temperature_neg": 1.05},
        ),
        Algorithm(
            "dapo", **_policy_gradient(middle=("rewards/overlong_penalty_reward/mean",
                                               "dynamic_sampling/kept_groups_first_round")),
            paper="Yu et al. 2025, DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
            # TRL's bnpo is the book's token mean over the micro-batch (TRL's `dapo` normalizes
            # over the whole accumulated batch instead).
            defaults={"advantage_estimator": "zscore", "loss_type": "bnpo", "epsilon": 0.2, "epsilon_high": 0.28,
                      "dynamic_sampling": True},
            fixed={"beta": Fixed(0.0, "the book's DAPO loss has no KL term (its DAPOLoss reads no beta)")},
        ),
        Algorithm(
            "maxrl", **_policy_gradient(middle=("rewards/binary_reward/mean", _CONTRAST)),
            paper="Tajwar et al. 2026, Maximum Likelihood Reinforcement Learning (MaxRL)",
            defaults={"advantage_estimator": "maxrl", "advantage_reward": "binary_reward",
                      "book_objective": "policy_gradient", "loss_type": "grpo"},
            fixed={"beta": Fixed(0.0, "the book's MaxRL loss has no KL term (its MaxRLLoss reads no beta)")},
        ),
        Algorithm(
            "ppo", **_policy_gradient(classes=_PPO,
                key_metrics=("reward", "rewards/correctness_reward/mean", "value_loss", "policy_loss",
                             "value/explained_variance", "grad_norm")),
            paper="Schulman et al. 2017, Proximal Policy Optimization Algorithms; Schulman et al. 2016 (GAE); "
                  "Ouyang et al. 2022 (InstructGPT)",
            # A value model (a copy of the policy with a Linear(hidden, 1) head), GAE (gamma 1.0, lambda 0.98,
            # no whitening), grpo's clipped term + 0.5 x clipped value loss (0.4), seq-mean of the sum;
            # KL (beta 0) in the reward.
            defaults={"advantage_estimator": "raw", "loss_type": "grpo", "importance_sampling_level": "token",
                      "epsilon": 0.2, "epsilon_high": 0.2, "kl_in_reward": True, "vf_coef": 0.5,
                      "cliprange_value": 0.4, "gamma": 1.0, "lam": 0.98, "whiten_advantages": False,
                      "value_optimizer": "joint"},  # one Adam over policy + value, one joint clip (train.py)
        ),
        # --- supervised fine-tuning (book chapter 4) ---------------------------------------
        Algorithm(
            "sft", family="sft", **_BOOK_SFT,
            paper="Ouyang et al. 2022, Training language models to follow instructions (InstructGPT); "
                  "Wei et al. 2022, Finetuned Language Models Are Zero-Shot Learners (instruction tuning)",
            chapter="4",
            # Loss on the final assistant turn only (TRL's completion-only loss on prompt/completion rows), the mean
            # of micro-batch means, whole optimizer steps per epoch (the book's warmup: the recipe's book_lr_schedule).
            defaults={"completion_only_loss": True, "packing": False, "drop_partial_steps": True},
            key_metrics=("grad_norm", "learning_rate", "mean_token_accuracy"),
        ),
        # --- rejection sampling (book chapter 9) ------------------------------------------
        # One family, four selection rules: two use the reward model, two are their matched-size random controls.
        Algorithm("rejection_sampling_top_per_prompt", **_rejection_sampling("top_per_prompt")),
        Algorithm("rejection_sampling_random_per_prompt", **_rejection_sampling("random_per_prompt")),
        Algorithm("rejection_sampling_top_k_overall", **_rejection_sampling("top_k_overall")),
        Algorithm("rejection_sampling_random_k_overall", **_rejection_sampling("random_k_overall")),
        # --- self-distillation (book chapter 12) ------------------------------------------
        Algorithm(
            "sdpo", family="self_distillation", **_BOOK_SDPO,
            paper="Hübotter et al. 2026, Reinforcement Learning via Self-Distillation (SDPO)",
            chapter="12",
            # TRL's experimental SDPOTrainer computes the book's top-k + tail reverse KL only with these settings
            # (BookSDPOConfig's defaults, repeated here as what makes the run SDPO); BookSDPOTrainer adds the redraw
            # of groups without a success, the group token mean and the book's loss mask. No published run id.
            defaults={"distillation_mode": "topk_logits", "distillation_topk": 20, "distillation_add_tail": True,
                      "distillation_alpha": 1.0, "distillation_weight": 1.0, "teacher_model_kind": "live",
                      "dont_reprompt_on_self_success": False, "redraw_failed_groups": True,
                      "group_token_mean": True},
            key_metrics=("reward", "skipped", "self_distillation/distillation_loss", "completions/mean_length",
                         "grad_norm"),
            reference_model=False, materializes_full_logits=True,
        ),
        # --- reward models (book chapter 5) ----------------------------------------------
        Algorithm(
            "preference_rm", **_reward_model(_PREFERENCE_RM,
                                             ("accuracy", "margin", "eval_accuracy", "eval_margin")),
            paper="Bradley & Terry 1952; Ouyang et al. 2022 (InstructGPT): pairwise preference reward model",
            aliases=("reward", "reward_model", "rm", "bradley_terry", "bt_rm"),
        ),
        Algorithm(
            "orm", **_reward_model(_OUTCOME_RM,
                                   ("accuracy", "eval_top1_accuracy", "eval_pairwise_accuracy")),
            paper="Cobbe et al. 2021, Training Verifiers to Solve Math Word Problems (outcome reward model)",
        ),
        Algorithm(
            "prm", **_reward_model(_PROCESS_RM, ("step_accuracy", "eval_step_accuracy")),
            paper="Lightman et al. 2023, Let's Verify Step by Step (process reward model)",
        ),
    ]
}


def canonical_name(name: str) -> str:
    """An algorithm's registry name from any spelling: case, dashes, or one of its `aliases`."""
    key = name.strip().lower().replace("-", "_")
    for entry in ALGORITHMS.values():
        if key in entry.aliases:
            return entry.name
    return key
