"""What the memory plan needs to know of a family's runs: what is held, and what goes through one forward.

The planner's facts, kept beside the planner (and not on `Family`, whose hooks are the run's own): a change to the
plan's model of memory never edits the training core. Families are named as the registry names them; a family not
listed here gets the defaults (one sequence per example, the LM head, TRL's trainer, no reference, no generation).
"""

from __future__ import annotations

# Training samples completions from the policy: a generation phase (KV cache, sampling) beside the training step.
GENERATES_ROLLOUTS = frozenset({"policy_gradient", "self_distillation"})


def generates_rollouts(recipe) -> bool:
    return recipe.algorithm.family in GENERATES_ROLLOUTS


def sequences_per_example(recipe) -> int:
    """Sequences one training example puts through the forward: chosen and rejected for a pair."""
    family = recipe.algorithm.family
    if family == "direct_alignment":
        return 2
    if family == "reward_model":
        from rlhf_recipes.data.reward_model_examples import rm_kind

        return 2 if rm_kind(recipe) == "preference" else 1  # a preference pair, or one rollout / solution
    return 1


def scoring_head(recipe) -> tuple[int, bool] | None:
    """(labels, bias) of the classification head trained instead of the LM head; None: the LM head. The book's
    reward head: Linear(hidden, 1) without bias, or Linear(hidden, 3) with bias for a PRM."""
    if recipe.algorithm.family != "reward_model":
        return None
    from rlhf_recipes.data.reward_model_examples import rm_kind
    from rlhf_recipes.families.reward_model import NUM_LABELS

    kind = rm_kind(recipe)
    return NUM_LABELS[kind], kind == "process"


def trains_with_trl_trainer(recipe) -> bool:
    """The trainer is one of TRL's (or a subclass): it casts LoRA adapters to bf16 under QLoRA and keeps the base
    dtype under ZeRO-3 (the ORM/PRM's plain transformers.Trainer leaves PEFT's fp32)."""
    if recipe.algorithm.family != "reward_model":
        return True
    from rlhf_recipes.data.reward_model_examples import rm_kind

    return rm_kind(recipe) == "preference"


def reference_model(recipe, peft: bool) -> bool:
    """A frozen copy of the policy is held in memory during training."""
    family, training = recipe.algorithm.family, recipe.training
    if family == "direct_alignment":
        # Unless the loss is reference-free (the registry's `reference_model`), the adapter is disabled instead
        # (LoRA), or the reference log-probs are computed before training.
        return (not peft and recipe.algorithm.reference_model
                and not getattr(training, "precompute_ref_log_probs", False))
    if family == "policy_gradient":
        # Only for a KL penalty (beta != 0), and not with LoRA (the adapter is disabled to score it).
        return not peft and getattr(training, "beta", 0.0) != 0.0
    return False


def reference_note(recipe, peft: bool) -> str | None:
    """Why the reference is kept or not, where that is worth a line in the memory plan."""
    family, training = recipe.algorithm.family, recipe.training
    if family == "direct_alignment":
        if reference_model(recipe, peft):
            return "reference model kept in memory (use_peft or precompute_ref_log_probs would avoid it)"
        why = ("reference-free loss" if not recipe.algorithm.reference_model else
               "LoRA: the reference is the base model with the adapter disabled" if peft else
               "reference log-probs precomputed before training")
        return f"no reference model ({why})"
    if family == "policy_gradient" and not reference_model(recipe, peft):
        return ("no reference model (beta = 0)" if getattr(training, "beta", 0.0) == 0 else
                "no reference model (LoRA: the adapter is disabled to score the reference)")
    return None


def learned_reward_models(recipe) -> list[str]:
    """Paths of the trained reward models a policy gradient loads for inference (reward functions `rm:<path>`)."""
    if recipe.algorithm.family != "policy_gradient":
        return []
    from rewards.reward_model import RM_PREFIX

    specs = getattr(recipe.training, "reward_funcs", None) or []
    return [spec[len(RM_PREFIX):] for spec in specs if isinstance(spec, str) and spec.startswith(RM_PREFIX)]
