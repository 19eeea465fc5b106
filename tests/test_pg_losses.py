"""Policy-gradient math (book chapter 6) against its formulas, on fixed tensors.

Covers every advantage estimator and objective, the aggregations and KL estimators, the
edge cases (all-equal rewards, one-token completions, empty masks, an all-zero MaxRL group),
that TRL's native loss types compute exactly the book's math where the registry maps onto
them (and differ where we subclass), the health checks and the rollout store.
"""

from __future__ import annotations

import math
import sqlite3
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from custom_losses.policy_gradient.advantages import (
    centered_advantages, compute_advantages, groups_with_contrast, maxrl_advantages, raw_advantages,
    rloo_advantages, zscore_advantages,
)
from custom_losses.policy_gradient.objectives import (
    cispo_loss, clipped_surrogate_loss, gspo_loss, kl_estimate, policy_gradient_loss, sapo_loss, seq_mean,
    sequence_kl, token_mean,
)
from custom_losses.policy_gradient.health import (
    RolloutStore, check_logprobs, is_truncated, repetition_score, rollout_health_metrics,
)

R = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 2.0, 2.0, 2.0])  # two groups of 4; the second all equal


# --- advantages ---------------------------------------------------------------------------


def test_raw_advantage_is_the_reward():
    assert torch.equal(raw_advantages(R), R)
    assert compute_advantages("raw", R, 1).tolist() == R.tolist()  # REINFORCE: groups of one


def test_rloo_is_reward_minus_mean_of_the_others():
    adv = rloo_advantages(R, 4)
    for i in range(4):
        others = [R[j].item() for j in range(4) if j != i]
        assert adv[i].item() == pytest.approx(R[i].item() - sum(others) / 3)
    assert adv[:4].tolist() == pytest.approx([4 / 3 * (r - 0.5) for r in R[:4].tolist()])
    assert torch.equal(adv[4:], torch.zeros(4))  # all-equal group: no signal


def test_zscore_uses_unbiased_std_and_book_eps():
    adv = zscore_advantages(R, 4)
    g = R[:4]
    std = math.sqrt(sum((x - 0.5) ** 2 for x in g.tolist()) / 3)  # Bessel: n - 1
    assert adv[:4].tolist() == pytest.approx([(x - 0.5) / (std + 1e-8) for x in g.tolist()], rel=1e-6)
    assert torch.equal(adv[4:], torch.zeros(4))  # all equal -> 0 / eps = 0, not NaN
    # TRL's eps (1e-4) is an option and gives a (slightly) different value.
    trl = zscore_advantages(R, 4, eps=1e-4)
    assert trl[0].item() == pytest.approx((1.0 - 0.5) / (std + 1e-4))
    assert trl[0].item() != adv[0].item()


def test_zscore_eps_matters_for_nearly_equal_rewards():
    # With the book's 1e-8 a group whose rewards differ by 1e-6 is still scaled to |A| ~ 0.85;
    # TRL's 1e-4 all but silences it. This is why the eps is the book's by default.
    rewards = torch.tensor([1.0, 1.0 + 1e-6, 1.0, 1.0 + 1e-6], dtype=torch.float64)
    std = math.sqrt(4 * 0.5e-6 ** 2 / 3)
    assert zscore_advantages(rewards, 4, eps=1e-8).abs().max().item() == pytest.approx(0.5e-6 / (std + 1e-8))
    assert zscore_advantages(rewards, 4, eps=1e-4).abs().max().item() < 0.01


def test_centered_and_maxrl():
    assert centered_advantages(R, 4)[:4].tolist() == pytest.approx([0.5, -0.5, 0.0, 0.0])
    b = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # second group: no success at all
    adv = maxrl_advantages(b, 4)
    assert adv[:4].tolist() == pytest.approx([(1 - 0.25) / 0.25, -1.0, -1.0, -1.0])
    assert torch.equal(adv[4:], torch.zeros(4))  # mean 0 -> 0, not NaN
    assert torch.isfinite(adv).all()
    # partial credit is kept: b in [0, 1]
    assert maxrl_advantages(torch.tensor([0.4, 0.0]), 2).tolist() == pytest.approx([1.0, -1.0])


def _book_column(formula, rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """The book's way (policy_gradients/utils.py): one prompt's rewards as a (G, 1) column, reduced over dim 0."""
    return torch.cat([formula(rewards[i:i + group_size].reshape(-1, 1))
                      for i in range(0, rewards.numel(), group_size)]).reshape(-1)


BOOK_FORMULAS = {
    "zscore": lambda r: (r - r.mean(dim=0, keepdim=True)) / (r.std(dim=0, keepdim=True) + 1e-8),
    "center": lambda r: r - r.mean(dim=0, keepdim=True),
    "rloo": lambda r: (r.shape[0] / (r.shape[0] - 1)) * (r - r.mean(dim=0, keepdim=True)),
}


@pytest.mark.parametrize("name", sorted(BOOK_FORMULAS))
def test_group_advantages_equal_the_books_column_computation_to_the_bit(name):
    """Many groups in one call give each group exactly what the book computes for that prompt alone, partial-credit
    totals and all-equal groups included."""
    torch.manual_seed(0)
    for group_size, groups in [(8, 16), (4, 3), (2, 5)]:
        partial = (torch.randint(0, 11, (group_size * groups,)) / 10 + 0.5 * torch.randint(0, 2, (group_size * groups,)))
        for rewards in (torch.rand(group_size * groups), partial.float()):
            expected = _book_column(BOOK_FORMULAS[name], rewards, group_size)
            assert torch.equal(compute_advantages(name, rewards, group_size), expected)


def test_zscore_of_an_all_equal_fractional_group_is_the_books_residue_not_ulp_over_eps():
    """Eight rollouts with the same partial credit (1.2 = 0.7 correctness + 0.5 format): a row-wise (N/G, G) reduction
    put the std at exactly 0 with the mean an ulp off, so every rollout got 11.9; the book's column gives 0.87."""
    for value in [i / 20 for i in range(31)]:
        rewards = torch.full((4 * 8,), value)
        adv = zscore_advantages(rewards, 8)
        assert adv.abs().max().item() < 0.9, value
        assert torch.equal(adv, _book_column(BOOK_FORMULAS["zscore"], rewards, 8))


@pytest.mark.parametrize("name", ["rloo", "zscore"])
def test_group_estimators_reject_single_rollouts(name):
    with pytest.raises(ValueError, match="at least 2"):
        compute_advantages(name, R, 1)


def test_groups_must_divide_and_contrast_is_detected():
    with pytest.raises(ValueError, match="groups of 3"):
        compute_advantages("zscore", R, 3)
    with pytest.raises(ValueError, match="unknown advantage"):
        compute_advantages("ppo", R, 4)
    assert groups_with_contrast(R, 4).tolist() == [True, False]


# --- objectives and aggregation -----------------------------------------------------------

LOGP = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]])
OLD = torch.tensor([[-1.5, -1.9, -0.5], [-0.1, -0.2, -9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])  # second sequence: 2 tokens
ADV = torch.tensor([1.0, -2.0])


def _manual(fn):
    return torch.tensor([[fn(LOGP[b, t].item(), OLD[b, t].item(), ADV[b].item()) for t in range(3)] for b in range(2)])


def test_policy_gradient_is_minus_logp_times_advantage():
    assert torch.allclose(policy_gradient_loss(LOGP, ADV), _manual(lambda lp, o, a: -lp * a))


def test_clipped_surrogate_clips_both_sides():
    def ref(lp, o, a, lo=0.2, hi=0.28):
        r = math.exp(lp - o)
        return -min(r * a, min(max(r, 1 - lo), 1 + hi) * a)

    assert torch.allclose(clipped_surrogate_loss(LOGP, OLD, ADV, 0.2, 0.28), _manual(ref))
    # r = e^0.5 = 1.65 with A > 0 is clipped at 1.28; r = e^-0.5 = 0.61 with A < 0 at 0.8
    zeros = torch.tensor([[0.0, 0.0]])
    out = clipped_surrogate_loss(zeros, torch.tensor([[-0.5, 0.5]]), torch.tensor([1.0]), 0.2, 0.28)
    assert out[0, 0].item() == pytest.approx(-1.28)
    neg = clipped_surrogate_loss(torch.tensor([[0.0]]), torch.tensor([[0.5]]), torch.tensor([-1.0]), 0.2, 0.28)
    assert neg.item() == pytest.approx(0.8)


def test_gspo_uses_one_ratio_per_sequence_over_its_tokens():
    out = gspo_loss(LOGP, OLD, ADV, MASK, 0.2, 0.2)
    assert out.shape == (2, 1)
    s0 = math.exp(((-1.0 + 1.5) + (-2.0 + 1.9) + 0.0) / 3)
    s1 = math.exp(((-0.3 + 0.1) + (-0.7 + 0.2)) / 2)  # the masked third token does not count
    assert out[0, 0].item() == pytest.approx(-min(s0 * 1.0, min(max(s0, 0.8), 1.2) * 1.0))
    assert out[1, 0].item() == pytest.approx(-min(s1 * -2.0, min(max(s1, 0.8), 1.2) * -2.0))


def test_cispo_clips_two_sided_and_stops_the_gradient_through_the_weight():
    logp = LOGP.clone().requires_grad_(True)
    out = cispo_loss(logp, OLD, ADV, 0.2, 0.4)

    def ref(lp, o, a):
        return -min(max(math.exp(lp - o), 0.8), 1.4) * a * lp

    assert torch.allclose(out, _manual(ref))
    out.sum().backward()
    weight = torch.exp(LOGP - OLD).clamp(0.8, 1.4)
    assert torch.allclose(logp.grad, -weight * ADV.unsqueeze(1))  # d/dlogp = -sg(w) * A only


def test_sapo_gate_and_temperatures():
    out = sapo_loss(LOGP, OLD, ADV, 1.0, 1.05)

    def ref(lp, o, a):
        tau = 1.0 if a > 0 else 1.05
        return -(1 / (1 + math.exp(-tau * (math.exp(lp - o) - 1)))) * 4 / tau * a

    assert torch.allclose(out, _manual(ref), atol=1e-6)
    # on-policy (r = 1) the gate is sigmoid(0) * 4 / tau = 2 / tau
    assert sapo_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([1.0])).item() == pytest.approx(-2.0)


def test_seq_mean_and_token_mean():
    x = torch.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 99.0]])
    assert seq_mean(x, MASK).item() == pytest.approx(((1 + 2 + 3) / 3 + (10 + 20) / 2) / 2)
    assert token_mean(x, MASK).item() == pytest.approx((1 + 2 + 3 + 10 + 20) / 5)
    # (B, 1) per-sequence values broadcast over the mask
    assert seq_mean(torch.tensor([[2.0], [4.0]]), MASK).item() == pytest.approx(3.0)


def test_one_token_completions_and_empty_masks():
    one = torch.tensor([[1, 0, 0], [1, 0, 0]])
    x = torch.tensor([[3.0, 7.0, 7.0], [5.0, 7.0, 7.0]])
    assert seq_mean(x, one).item() == pytest.approx(4.0)
    assert token_mean(x, one).item() == pytest.approx(4.0)
    empty = torch.tensor([[1, 1, 0], [0, 0, 0]])  # second sequence has no tokens: contributes 0
    assert seq_mean(x, empty).item() == pytest.approx(((3 + 7) / 2 + 0) / 2)
    assert token_mean(x, torch.zeros(2, 3, dtype=torch.long)).item() == 0.0  # no NaN
    logp = torch.zeros(2, 3, requires_grad=True)
    loss = seq_mean(policy_gradient_loss(logp, torch.ones(2)), torch.zeros(2, 3))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logp.grad, torch.zeros(2, 3))
    # GSPO with an empty sequence: ratio 1, finite
    assert torch.isfinite(gspo_loss(LOGP, OLD, ADV, torch.zeros(2, 3), 0.2, 0.2)).all()


# --- KL estimators --------------------------------------------------------------------------


def test_kl_estimators_follow_the_book():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    x = logp - ref
    assert torch.allclose(kl_estimate(logp, ref, "k1"), -x)
    assert torch.allclose(kl_estimate(logp, ref, "k2"), x ** 2 / 2)
    assert torch.allclose(kl_estimate(logp, ref, "k3"), torch.exp(x) - 1 - x)
    with pytest.raises(ValueError, match="unknown KL"):
        kl_estimate(logp, ref, "k4")


def test_k3_uses_expm1_and_stays_non_negative_near_zero():
    x = torch.tensor([1e-4, 3e-5, 1e-6, -1e-6, -2e-5], dtype=torch.float32)
    k3 = kl_estimate(x, torch.zeros_like(x), "k3")
    assert (k3 >= 0).all()
    assert torch.allclose(k3[:2].double(), (x[:2].double() ** 2) / 2, rtol=1e-2)  # k3 ~ x^2/2 near 0
    naive = torch.exp(x) - 1 - x
    assert (naive < 0).any()  # the naive form goes negative in float32: why the book uses expm1


def test_sequence_kl_is_masked_mean():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [0.0, 0.0, 0.0]])
    ref = torch.zeros(2, 3)
    out = sequence_kl(logp, ref, MASK, "k1")
    assert out.tolist() == pytest.approx([2.0, 0.0])


# --- TRL's native losses compute the book's math where the registry maps onto them ------


def _trl_loss(loss_type, importance_sampling_level="token", eps_high=0.2, accumulation=1):
    from trl import GRPOTrainer

    logp = LOGP.clone().requires_grad_(True)
    stub = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.ones_like(logp), None),
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level=importance_sampling_level, beta=0.0, loss_type=loss_type,
        epsilon_low=0.2, epsilon_high=eps_high, use_vllm=False, vllm_importance_sampling_correction=False,
        args=SimpleNamespace(delta=None, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, steps_per_generation=1),
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=accumulation,
        max_completion_length=3, _entropy_bonus_enabled=False, _metrics={"train": defaultdict(list)},
        accelerator=SimpleNamespace(num_processes=1, reduce=lambda t, reduction="sum": t, gather=lambda t: t),
    )
    inputs = {
        "prompt_ids": torch.ones(2, 1, dtype=torch.long), "prompt_mask": torch.ones(2, 1, dtype=torch.long),
        "completion_ids": torch.ones(2, 3, dtype=torch.long), "completion_mask": MASK,
        "advantages": ADV, "old_per_token_logps": OLD, "num_items_in_batch": MASK.sum(),
    }
    return GRPOTrainer._compute_loss(stub, None, inputs), logp


@pytest.mark.parametrize(
    "loss_type, level, eps_high, book",
    [
        ("grpo", "token", 0.2, lambda lp: seq_mean(clipped_surrogate_loss(lp, OLD, ADV, 0.2, 0.2), MASK)),
        ("grpo", "sequence", 0.2, lambda lp: seq_mean(gspo_loss(lp, OLD, ADV, MASK, 0.2, 0.2), MASK)),
        ("sapo", "token", 0.2, lambda lp: seq_mean(sapo_loss(lp, OLD, ADV, 1.0, 1.05), MASK)),
        ("bnpo", "token", 0.28, lambda lp: token_mean(clipped_surrogate_loss(lp, OLD, ADV, 0.2, 0.28), MASK)),
    ],
    ids=["grpo", "gspo", "sapo", "dapo(bnpo)"],
)
def test_trl_native_loss_equals_the_book(loss_type, level, eps_high, book):
    trl, logp = _trl_loss(loss_type, level, eps_high)
    trl.backward()
    ours_logp = LOGP.clone().requires_grad_(True)
    ours = book(ours_logp)
    ours.backward()
    assert trl.item() == pytest.approx(ours.item(), rel=1e-6)
    assert torch.allclose(logp.grad, ours_logp.grad, atol=1e-7)
    # TRL divides by the accumulation steps, as the book divides by batch_acc
    assert _trl_loss(loss_type, level, eps_high, accumulation=4)[0].item() == pytest.approx(ours.item() / 4, rel=1e-6)


def test_trl_cispo_and_dr_grpo_differ_from_the_book():
    trl, _ = _trl_loss("cispo", eps_high=0.4)
    book = seq_mean(cispo_loss(LOGP, OLD, ADV, 0.2, 0.4), MASK)
    assert trl.item() != pytest.approx(book.item(), rel=1e-3)  # one-sided clamp, global token mean
    trl, _ = _trl_loss("dr_grpo")
    book = seq_mean(clipped_surrogate_loss(LOGP, OLD, ADV, 0.2, 0.2), MASK)
    assert trl.item() != pytest.approx(book.item(), rel=1e-3)  # divides by B * max length


# --- our objectives' plumbing in BookGRPOTrainer --------------------------------------------


def _book_stub(objective, loss_type="grpo", beta=0.0, accumulation=2, old=OLD):
    from custom_losses.policy_gradient.trainer import BookGRPOTrainer

    class Stub:
        _book_objective_loss = BookGRPOTrainer._book_objective_loss
        _loss_mask = BookGRPOTrainer._loss_mask
        _loss_normalizer = BookGRPOTrainer._loss_normalizer
        _global_masked_mean = BookGRPOTrainer._global_masked_mean
        _entropy_mask = BookGRPOTrainer._entropy_mask
        _entropy_bonus = BookGRPOTrainer._entropy_bonus

    stub = Stub()
    logp = LOGP.clone().requires_grad_(True)
    stub._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.ones_like(logp), None)
    stub.args = SimpleNamespace(book_objective=objective, kl_in_reward=False, kl_estimator="k3")
    stub.beta, stub.loss_type, stub.epsilon_low, stub.epsilon_high = beta, loss_type, 0.2, 0.4
    stub.top_entropy_quantile, stub.entropy_coef, stub.use_vllm = 1.0, 0.0, False  # TRL's options, off
    stub.model = SimpleNamespace(training=True)
    stub.current_gradient_accumulation_steps = accumulation
    stub._metrics = {"train": defaultdict(list)}
    stub.accelerator = SimpleNamespace(reduce=lambda t, reduction="sum": t)
    inputs = {
        "prompt_ids": torch.ones(2, 1, dtype=torch.long), "prompt_mask": torch.ones(2, 1, dtype=torch.long),
        "completion_ids": torch.ones(2, 3, dtype=torch.long), "completion_mask": MASK, "advantages": ADV,
        "old_per_token_logps": old, "ref_per_token_logps": torch.full((2, 3), -1.0),
    }
    return stub._book_objective_loss(None, inputs), stub


def test_book_objectives_through_the_trainer_plumbing():
    loss, stub = _book_stub("policy_gradient")
    assert loss.item() == pytest.approx(seq_mean(policy_gradient_loss(LOGP, ADV), MASK).item() / 2)
    loss, stub = _book_stub("cispo")
    assert loss.item() == pytest.approx(seq_mean(cispo_loss(LOGP, OLD, ADV, 0.2, 0.4), MASK).item() / 2)
    assert "cispo_clip_ratio" in stub._metrics["train"]
    loss, _ = _book_stub("policy_gradient", loss_type="bnpo")
    assert loss.item() == pytest.approx(token_mean(policy_gradient_loss(LOGP, ADV), MASK).item() / 2)
    # on-policy batch (TRL skips old log-probs): the ratio is 1, so CISPO is the plain policy gradient
    loss, _ = _book_stub("cispo", old=None)
    assert loss.item() == pytest.approx(seq_mean(policy_gradient_loss(LOGP, ADV), MASK).item() / 2)
    # KL in the loss, per token, with the book's k3
    loss, stub = _book_stub("policy_gradient", beta=0.1)
    kl = kl_estimate(LOGP, torch.full((2, 3), -1.0), "k3")
    expected = seq_mean(policy_gradient_loss(LOGP, ADV) + 0.1 * kl, MASK).item() / 2
    assert loss.item() == pytest.approx(expected)
    assert stub._metrics["train"]["kl"]


# --- configuration --------------------------------------------------------------------------


def _config(tmp_path, **kw):
    from custom_losses.policy_gradient.config import BookGRPOConfig

    base = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, per_device_train_batch_size=2,
                gradient_accumulation_steps=4, generation_batch_size=32, num_generations=8)
    return BookGRPOConfig(**{**base, **kw})


def test_config_validates_book_options(tmp_path):
    cfg = _config(tmp_path, num_generations=1, generation_batch_size=8, advantage_estimator="raw",
                  book_objective="policy_gradient")
    assert cfg.num_generations == 1 and cfg.steps_per_generation == 4  # REINFORCE passes TRL's check
    with pytest.raises(ValueError, match="only advantage_estimator 'raw'"):
        _config(tmp_path, num_generations=1, generation_batch_size=8)
    with pytest.raises(ValueError, match="Did you mean `correctness_reward`"):
        _config(tmp_path, reward_funcs=["correctnes_reward"])
    with pytest.raises(ValueError, match="reward_weights has 1 values"):
        _config(tmp_path, reward_weights=[1.0])
    with pytest.raises(ValueError, match="advantage_reward `binary_reward` is not among"):
        _config(tmp_path, advantage_reward="binary_reward")
    with pytest.raises(ValueError, match="whole optimizer steps"):
        _config(tmp_path, generation_batch_size=20, num_generations=4)
    with pytest.raises(ValueError, match="aggregation"):
        _config(tmp_path, book_objective="cispo", loss_type="dapo")
    with pytest.raises(ValueError, match="kl_estimator"):
        _config(tmp_path, kl_estimator="kl3")


# --- health checks and the rollout store ----------------------------------------------------


def test_repetition_and_truncation():
    assert repetition_score(list(range(20))) == 0.0
    assert repetition_score([7] * 20) == pytest.approx(1 - 1 / 17)
    assert repetition_score([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]) > 0.5
    assert repetition_score([1, 2]) == 0.0  # too short to judge
    assert is_truncated([5, 6, 7], stop_ids=[9]) and not is_truncated([5, 6, 9], stop_ids=[9])
    m = rollout_health_metrics([4, 16], [False, True], [0.0, 0.9], [True, False, True, True])
    assert m == {"health/mean_completion_length": 10.0, "health/truncated_fraction": 0.5,
                 "health/repetition": 0.45, "health/degenerate_fraction": 0.5, "health/groups_with_contrast": 0.75}


def test_check_logprobs():
    mask = torch.tensor([[1, 1, 0]])
    check_logprobs(torch.tensor([[-1.0, -0.0, 5.0]]), mask, "x")  # masked positive value ignored
    with pytest.raises(FloatingPointError, match="must be <= 0"):
        check_logprobs(torch.tensor([[-1.0, 0.3, 0.0]]), mask, "x")
    with pytest.raises(FloatingPointError, match="NaN/inf"):
        check_logprobs(torch.tensor([[float("nan"), -1.0, 0.0]]), mask, "x")


def test_rollout_store_roundtrip_and_resume(tmp_path):
    path = tmp_path / "rollouts.sqlite"
    store = RolloutStore(path, ["correctness_reward", "format_reward"])
    row = dict(prompt="p", completion="c", reward=1.5, advantage=0.3, length=4, truncated=False, repetition=0.0,
               kept=True, group_index=0, generation=1, prompt_json=[{"role": "user", "content": "p"}],
               rewards={"correctness_reward": 1.0, "format_reward": 1.0})
    store.add([{**row, "step": 0}, {**row, "step": 4, "advantage": float("nan")}])
    store.close()
    resumed = RolloutStore(path, ["correctness_reward", "format_reward"], start_step=4)  # rows from step 4 re-run
    assert resumed.count() == 1
    resumed.close()
    con = sqlite3.connect(path)
    assert con.execute("SELECT step, correctness_reward, reward, kept FROM rollouts").fetchall() == [(0, 1.0, 1.5, 1)]
    assert RolloutStore(path, ["correctness_reward"]).count() == 0  # a fresh run starts over


def test_concat_rollouts_pads_prompts_left_and_completions_right():
    from custom_losses.policy_gradient.rollout_batch import concat_rollouts, masked_out, select_rows

    a = {"prompt_ids": torch.tensor([[1, 2]]), "prompt_mask": torch.tensor([[1, 1]]),
         "completion_ids": torch.tensor([[3]]), "completion_mask": torch.tensor([[1]]),
         "advantages": torch.tensor([0.5]), "old_per_token_logps": torch.tensor([[-0.1]]),
         "num_items_in_batch": torch.tensor(1)}
    b = {"prompt_ids": torch.tensor([[4]]), "prompt_mask": torch.tensor([[1]]),
         "completion_ids": torch.tensor([[5, 6]]), "completion_mask": torch.tensor([[1, 1]]),
         "advantages": torch.tensor([-1.0]), "old_per_token_logps": torch.tensor([[-0.2, -0.3]]),
         "num_items_in_batch": torch.tensor(2)}
    out = concat_rollouts([a, masked_out(b)], pad_token_id=0)
    assert out["prompt_ids"].tolist() == [[1, 2], [0, 4]] and out["prompt_mask"].tolist() == [[1, 1], [0, 1]]
    assert out["completion_ids"].tolist() == [[3, 0], [5, 6]]
    assert out["completion_mask"].tolist() == [[1, 0], [0, 0]]  # the filler contributes no loss
    assert out["advantages"].tolist() == [0.5, 0.0]
    assert torch.allclose(out["old_per_token_logps"], torch.tensor([[-0.1, 0.0], [-0.2, -0.3]]))
    assert select_rows(out, slice(1, 2))["completion_ids"].tolist() == [[5, 6]]


def test_nonfinite_loss_is_skipped_like_the_book_then_fails_clearly():
    from custom_losses.policy_gradient.trainer import BookGRPOTrainer

    class Stub:
        _guard_loss = BookGRPOTrainer._guard_loss

    stub = Stub()
    stub.model = SimpleNamespace(training=True)
    stub.state = SimpleNamespace(global_step=3)
    stub._metrics = {"train": defaultdict(list)}
    stub._nonfinite_skips = 0
    stub.args = SimpleNamespace(nonfinite_loss="skip", max_nonfinite_skips=1)
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    stub._last_logps = logp
    finite = torch.tensor(0.5)
    assert stub._guard_loss(finite) is finite
    skipped = stub._guard_loss(torch.tensor(float("nan")))
    skipped.backward()
    assert skipped.item() == 0.0 and torch.equal(logp.grad, torch.zeros_like(logp))  # no NaN reaches the weights
    assert stub._metrics["train"]["health/nonfinite_loss_skipped"] == [0.0, 1.0]
    with pytest.raises(FloatingPointError, match="non-finite micro-batch losses so far: 2"):
        stub._guard_loss(torch.tensor(float("inf")))
    stub.args.nonfinite_loss, stub._nonfinite_skips = "error", 0
    with pytest.raises(FloatingPointError, match="loss is nan"):
        stub._guard_loss(torch.tensor(float("nan")))


def test_completions_are_decoded_as_raw_text_for_the_rewards():
    from custom_losses.policy_gradient.trainer import _decode_raw_text

    tokenizer = SimpleNamespace(response_template={"x": 1}, response_schema=None)
    _decode_raw_text(tokenizer, tools=None)
    assert tokenizer.response_template is None  # GRPOTrainer would otherwise strip <think> into a field
    with_tools = SimpleNamespace(response_template={"x": 1})
    _decode_raw_text(with_tools, tools=[print])
    assert with_tools.response_template == {"x": 1}  # tool calls need the parser
