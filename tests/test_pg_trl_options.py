"""TRL options that only TRL's own loss reads: in every policy-gradient recipe each one acts or is refused.

Config-level walk (no model, no data) over every policy-gradient algorithm x every such option, and the loss
of our own objectives with the options that act there, against hand-computed values.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from custom_losses.policy_gradient.objectives import policy_gradient_loss, seq_mean
from custom_losses.policy_gradient.trl_options import OPTIONS
from rlhf_recipes.config import load_recipe
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.registry import ALGORITHMS

POLICY_GRADIENT = sorted(name for name, a in ALGORITHMS.items() if a.family == "policy_gradient")
SET_VALUES = {  # a value that switches each option on
    "top_entropy_quantile": "0.2", "entropy_coef": "0.01", "use_adaptive_entropy": "true", "delta": "4.0",
    "off_policy_mask_threshold": "0.5", "importance_sampling_level": "sequence", "use_bias_correction_kl": "true",
}


# Which option acts (True) or must be refused (False), per algorithm. Written out by hand, NOT from
# trl_options.py, so a wrong entry there fails here. Derived from:
# - TRL 1.16 GRPOTrainer._compute_loss: top_entropy_quantile (entropy_mask), entropy_coef and
#   use_adaptive_entropy (the entropy bonus), off_policy_mask_threshold and importance_sampling_level (the
#   ratio) are read for every loss_type; delta only in the clipped branch (loss_type grpo, bnpo, dr_grpo, dapo,
#   luspo), not sapo's; use_bias_correction_kl only inside `if self.beta != 0.0`, and BookGRPOTrainer sets
#   self.beta = 0 around TRL's loss (our KL term replaces it), so it never acts.
# - our objectives (BookGRPOTrainer._book_objective_loss for policy_gradient / cispo, PPOTrainer's loss) call
#   only _entropy_mask (top_entropy_quantile) and _entropy_bonus (constant entropy_coef); none reads the rest.
# The recipes' objective / loss_type: reinforce, rloo, maxrl: policy_gradient; cispo: cispo; ppo: ppo's own;
# grpo, drgrpo, gspo: TRL loss_type grpo; dapo: bnpo; sapo: sapo (asserted in test_every_option_is_walked).
OPTION_ORDER = ("top_entropy_quantile", "entropy_coef", "use_adaptive_entropy", "delta",
                "off_policy_mask_threshold", "importance_sampling_level", "use_bias_correction_kl")
_OWN = (True, True, False, False, False, False, False)  # our objectives: the entropy mask and constant bonus
_TRL_CLIPPED = (True, True, True, True, True, True, False)
_TRL_SAPO = (True, True, True, False, True, True, False)
ACTS = {
    "reinforce": _OWN, "rloo": _OWN, "maxrl": _OWN, "cispo": _OWN, "ppo": _OWN,
    "grpo": _TRL_CLIPPED, "drgrpo": _TRL_CLIPPED, "gspo": _TRL_CLIPPED, "dapo": _TRL_CLIPPED,
    "sapo": _TRL_SAPO,
}
OBJECTIVE_AND_LOSS_TYPE = {
    "reinforce": ("policy_gradient", "grpo"), "rloo": ("policy_gradient", "grpo"),
    "maxrl": ("policy_gradient", "grpo"), "cispo": ("cispo", "grpo"), "ppo": ("ppo", "grpo"),
    "grpo": (None, "grpo"), "drgrpo": (None, "grpo"), "gspo": (None, "grpo"), "dapo": (None, "bnpo"),
    "sapo": (None, "sapo"),
}


def test_every_option_is_walked():
    assert set(SET_VALUES) == set(OPTIONS) == set(OPTION_ORDER)
    assert set(ACTS) == set(POLICY_GRADIENT)  # a new algorithm needs its row above


@pytest.mark.parametrize("algorithm", sorted(OBJECTIVE_AND_LOSS_TYPE))
def test_the_matrix_rows_match_the_recipes(algorithm):
    training = load_recipe([f"recipes/{algorithm}.yaml", "--profile", "tiny"]).training
    objective = getattr(training, "own_objective", None) or training.book_objective
    assert (objective, training.loss_type) == OBJECTIVE_AND_LOSS_TYPE[algorithm]


@pytest.mark.parametrize("option", sorted(SET_VALUES))
@pytest.mark.parametrize("algorithm", POLICY_GRADIENT)
def test_each_trl_option_acts_or_is_refused_in_one_line(algorithm, option):
    should_act = ACTS[algorithm][OPTION_ORDER.index(option)]
    argv = [f"recipes/{algorithm}.yaml", "--profile", "tiny", f"--{option}", SET_VALUES[option]]
    if option == "use_adaptive_entropy":  # TRL checks the adaptive controller's target next to it
        argv += ["--entropy_target", "0.5"]
    try:
        training = load_recipe(argv).training
    except RecipeError as e:
        message = str(e)
        assert "\n" not in message and option in message and f"recipes/{algorithm}.yaml" in message
        assert not should_act, f"{algorithm}: {option} acts, yet it was refused"
        return
    assert should_act, f"{algorithm} accepted {option} which its objective ignores"
    assert str(getattr(training, option)).lower() == SET_VALUES[option] or float(getattr(training, option)) == float(
        SET_VALUES[option])


@pytest.mark.parametrize("algorithm, option", [
    ("reinforce", "delta"), ("rloo", "use_adaptive_entropy"), ("maxrl", "off_policy_mask_threshold"),
    ("cispo", "importance_sampling_level"), ("sapo", "delta"), ("grpo", "use_bias_correction_kl"), ("ppo", "delta"),
])
def test_the_refusals_today_and_what_they_say(algorithm, option):
    """The cases that were silently ignored: each is now one line naming the option and the objective."""
    argv = [f"recipes/{algorithm}.yaml", "--profile", "tiny", f"--{option}", SET_VALUES[option]]
    if option == "use_adaptive_entropy":
        argv += ["--entropy_target", "0.5"]
    with pytest.raises(RecipeError, match=option) as err:
        load_recipe(argv).training
    assert "remove it" in str(err.value)


# --- the options that act in our own objectives: the same math as TRL's ----------------------------

LOGP = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, -9.0]])
ADV = torch.tensor([[1.0], [-0.5]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
ENTROPY = torch.tensor([[0.1, 2.0, 0.5], [3.0, 0.2, 9.9]])  # the masked-out 9.9 must not count


def _loss(objective="policy_gradient", quantile=1.0, coef=0.0, accumulation=2):
    from trl import GRPOTrainer

    from custom_losses.policy_gradient.trainer import BookGRPOTrainer

    class Stub:
        _book_objective_loss = BookGRPOTrainer._book_objective_loss
        _loss_mask = BookGRPOTrainer._loss_mask
        _loss_normalizer = BookGRPOTrainer._loss_normalizer
        _global_masked_mean = BookGRPOTrainer._global_masked_mean
        _entropy_mask = BookGRPOTrainer._entropy_mask
        _entropy_bonus = BookGRPOTrainer._entropy_bonus
        get_high_entropy_mask = GRPOTrainer.get_high_entropy_mask

    stub = Stub()
    stub._get_per_token_logps_and_entropies = lambda *a, **k: (LOGP, ENTROPY, None)
    stub.args = SimpleNamespace(book_objective=objective, kl_in_reward=False, kl_estimator="k3")
    stub.beta, stub.loss_type, stub.epsilon_low, stub.epsilon_high = 0.0, "grpo", 0.2, 0.4
    stub.top_entropy_quantile, stub.entropy_coef, stub.use_vllm = quantile, coef, False
    stub.model = SimpleNamespace(training=True)
    stub.current_gradient_accumulation_steps = accumulation
    stub._metrics = {"train": defaultdict(list)}
    stub.accelerator = SimpleNamespace(reduce=lambda t, reduction="sum": t, gather=lambda t: t,
                                       pad_across_processes=lambda t, **k: t)
    inputs = {
        "prompt_ids": torch.ones(2, 1, dtype=torch.long), "prompt_mask": torch.ones(2, 1, dtype=torch.long),
        "completion_ids": torch.ones(2, 3, dtype=torch.long), "completion_mask": MASK, "advantages": ADV,
        "old_per_token_logps": LOGP,
    }
    return stub._book_objective_loss(None, inputs).item()


@pytest.mark.parametrize("objective", ["policy_gradient", "cispo"])
def test_top_entropy_quantile_keeps_the_policy_term_on_the_high_entropy_tokens(objective):
    # top 40%: the 0.6-quantile of the masked entropies, sorted 0.1 0.2 0.5 2.0 3.0, by torch's linear
    # interpolation: position 0.6 * 4 = 2.4 -> 0.5 + 0.4 * (2.0 - 0.5) = 1.1
    keep = torch.tensor([[0, 1, 0], [1, 0, 0]])  # entropy >= 1.1: 2.0 and 3.0
    expected = seq_mean(policy_gradient_loss(LOGP, ADV) * keep, MASK).item() / 2  # the ratio is 1 (old = logp)
    assert _loss(objective, quantile=0.4) == pytest.approx(expected)
    assert _loss(objective) == pytest.approx(seq_mean(policy_gradient_loss(LOGP, ADV), MASK).item() / 2)


def test_entropy_coef_subtracts_the_mean_entropy_of_the_acting_tokens():
    plain = seq_mean(policy_gradient_loss(LOGP, ADV), MASK).item()
    mean_entropy = (0.1 + 2.0 + 0.5 + 3.0 + 0.2) / 5
    assert _loss(coef=0.1) == pytest.approx((plain - 0.1 * mean_entropy) / 2)
    # with the 80/20 mask, the bonus acts on the same tokens as the policy term (as TRL)
    keep = torch.tensor([[0, 1, 0], [1, 0, 0]])
    masked = seq_mean(policy_gradient_loss(LOGP, ADV) * keep, MASK).item()
    assert _loss(quantile=0.4, coef=0.1) == pytest.approx((masked - 0.1 * (2.0 + 3.0) / 2) / 2)
