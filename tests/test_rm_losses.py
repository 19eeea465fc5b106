"""Reward-model losses and evaluation metrics against their formulas, on fixed tensors."""

from __future__ import annotations

import math
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from custom_losses.reward_models.losses import (
    bradley_terry_loss, last_token_hits, preference_metrics, rollout_metrics, step_ce_loss, step_metrics,
    token_bce_loss,
)
from rewards.reward_model_scoring import rollout_scores


def softplus(x: float) -> float:  # -log(sigmoid(-x)) = log(1 + e^x)
    return math.log1p(math.exp(x))


def test_bradley_terry_is_minus_log_sigmoid_of_the_reward_difference():
    r_c = torch.tensor([2.0, -1.0, 0.5, 10.0])
    r_r = torch.tensor([1.0, 0.0, 0.5, -10.0])
    expected = [-math.log(1 / (1 + math.exp(-(c - r)))) for c, r in zip(r_c.tolist(), r_r.tolist())]
    assert bradley_terry_loss(r_c, r_r).tolist() == pytest.approx(expected, rel=1e-6)
    assert bradley_terry_loss(r_c, r_r)[2].item() == pytest.approx(math.log(2))  # a tie costs log 2
    margin = torch.tensor([0.5, 0.0, 1.0, 0.0])
    expected = [softplus(-(c - r - m)) for c, r, m in zip(r_c.tolist(), r_r.tolist(), margin.tolist())]
    assert bradley_terry_loss(r_c, r_r, margin).tolist() == pytest.approx(expected, rel=1e-6)


def test_trl_reward_trainer_loss_is_the_book_bradley_terry_loss():
    """TRL's RewardTrainer.compute_loss (used as is for preference_rm) = mean of bradley_terry_loss."""
    from trl import RewardTrainer

    rewards = torch.tensor([[1.5], [0.2], [-0.3], [0.9], [0.7], [0.2]])  # 3 chosen, then 3 rejected

    class Model(torch.nn.Module):
        training = True

        def forward(self, **inputs):
            return SimpleNamespace(logits=rewards)

    model = Model()
    stub = SimpleNamespace(
        model=model, args=SimpleNamespace(center_rewards_coefficient=None),
        accelerator=SimpleNamespace(gather=lambda t: t, gather_for_metrics=lambda t: t),
        _metrics={"train": defaultdict(list)}, _total_train_tokens=0, _tp_size=1,
    )
    inputs = {"input_ids": torch.zeros(6, 4, dtype=torch.long), "attention_mask": torch.ones(6, 4)}
    loss = RewardTrainer.compute_loss(stub, model, inputs)
    expected = bradley_terry_loss(rewards[:3, 0], rewards[3:, 0]).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert stub._metrics["train"]["accuracy"] == [pytest.approx(1 / 3)]
    assert stub._metrics["train"]["margin"] == [pytest.approx((0.6 - 0.5 - 0.5) / 3)]


def test_token_bce_is_the_mean_over_completion_tokens_against_the_rollout_label():
    logits = torch.tensor([[0.3, -1.0, 2.0, 0.5], [1.0, -0.5, 0.0, 4.0]])
    targets = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]])

    def bce(z, y):
        p = 1 / (1 + math.exp(-z))
        return -(y * math.log(p) + (1 - y) * math.log(1 - p))

    terms = [bce(-1.0, 1), bce(2.0, 1), bce(0.0, 0), bce(4.0, 0)]
    assert token_bce_loss(logits, targets, mask).item() == pytest.approx(sum(terms) / 4, rel=1e-6)
    # Tokens outside the mask (prompt, padding) do not matter.
    changed = logits.clone()
    changed[0, 0], changed[0, 3], changed[1, 0] = 50.0, -50.0, -9.0
    assert token_bce_loss(changed, targets, mask).item() == pytest.approx(sum(terms) / 4, rel=1e-6)
    # A partial-credit reward is labelled as the book's train_orm.py labels it, int(reward): 0.7 -> 0, 1.0 -> 1.
    partial = token_bce_loss(logits, torch.tensor([1.0, 0.7]), mask).item()
    assert partial == pytest.approx(sum(terms) / 4, rel=1e-6)
    assert token_bce_loss(logits, torch.tensor([0.999, 0.0]), mask).item() == pytest.approx(
        sum(bce(z, 0) for z in (-1.0, 2.0, 0.0, 4.0)) / 4, rel=1e-6)


def test_orm_accuracy_and_ranking_read_a_partial_reward_as_the_books_label():
    """last_token_hits counts a rollout right when its prediction (logit > 0) equals its label int(reward), the book's
    `preds == sequence_labels` (a label of 2 is never matched); rollout_metrics' outcome is bool(int(reward))."""
    logits = torch.tensor([[0.0, 2.0], [0.0, 2.0], [0.0, -2.0], [0.0, 2.0]])
    mask = torch.tensor([[0, 1], [0, 1], [0, 1], [0, 1]])
    assert last_token_hits(logits, torch.tensor([1.0, 0.7, 0.7, 2.0]), mask).tolist() == [True, False, True, False]
    m = rollout_metrics([0.9, 0.2], [0.7, 1.0], [0, 0])  # the 0.7 rollout is the wrong one: scoring it higher loses
    assert m["top1_accuracy"] == 0.0 and m["pairwise_accuracy"] == 0.0


def test_token_bce_without_completion_tokens_is_zero_and_differentiable():
    logits = torch.randn(2, 3, requires_grad=True)
    loss = token_bce_loss(logits, torch.tensor([1.0, 0.0]), torch.zeros(2, 3))
    loss.backward()
    assert loss.item() == 0.0 and torch.all(logits.grad == 0)


def test_step_ce_only_at_separator_positions():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 3)
    labels = torch.full((2, 5), -100)
    labels[0, 2], labels[0, 4], labels[1, 3] = 2, 0, 1  # good, bad, neutral
    expected = []
    for b, t in ((0, 2), (0, 4), (1, 3)):
        z = logits[b, t].tolist()
        expected.append(-(z[labels[b, t]] - math.log(sum(math.exp(v) for v in z))))
    assert step_ce_loss(logits, labels).item() == pytest.approx(sum(expected) / 3, rel=1e-5)
    changed = logits.clone()
    changed[0, 0] += 100.0
    changed[1, 4] -= 100.0
    assert step_ce_loss(changed, labels).item() == pytest.approx(sum(expected) / 3, rel=1e-5)
    empty = torch.randn(1, 4, 3, requires_grad=True)
    loss = step_ce_loss(empty, torch.full((1, 4), -100))
    loss.backward()
    assert loss.item() == 0.0


def test_rollout_scores_mean_and_last_over_the_completion():
    logits = torch.tensor([[5.0, 0.0, math.log(3.0), 9.0]])
    mask = torch.tensor([[0, 1, 1, 0]])
    assert rollout_scores(logits, mask, "mean").item() == pytest.approx((0.5 + 0.75) / 2)
    assert rollout_scores(logits, mask, "last").item() == pytest.approx(0.75)
    # The default is the book's: the last completion token.
    assert rollout_scores(logits, mask).item() == pytest.approx(0.75)


def test_orm_scores_by_the_last_token_by_default():
    """The book's ORM evaluation: sigmoid of the LAST completion token's logit; `mean` stays an option."""
    from custom_losses.reward_models.config import OutcomeRMConfig
    from rlhf_recipes.config import load_recipe

    assert OutcomeRMConfig(output_dir="/tmp/unused", use_cpu=True).score_reduction == "last"
    assert load_recipe(["recipes/orm.yaml", "--bf16", "false"]).training.score_reduction == "last"
    assert load_recipe(["recipes/orm.yaml", "--bf16", "false", "--score_reduction", "mean"]
                       ).training.score_reduction == "mean"


def test_preference_metrics():
    m = preference_metrics([1.0, 0.0, 2.0, 0.5], [0.0, 1.0, 1.0, 0.5])
    assert m["accuracy"] == 0.5  # the tie counts as wrong
    assert m["margin"] == pytest.approx((1 - 1 + 1 + 0) / 4)
    assert m["loss"] == pytest.approx(sum(softplus(-d) for d in (1, -1, 1, 0)) / 4)
    assert m["num_pairs"] == 4


def test_rollout_metrics_top1_and_pairwise():
    #            prompt 0: 3 rollouts      prompt 1: 2 rollouts   prompt 2: all wrong
    scores = [0.9, 0.2, 0.6, 0.3, 0.8, 0.5, 0.4]
    rewards = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    groups = [0, 0, 0, 1, 1, 2, 2]
    m = rollout_metrics(scores, rewards, groups)
    assert m["top1_accuracy"] == pytest.approx(1 / 3)  # prompt 0 right, prompt 1 wrong, prompt 2 has no right answer
    assert m["num_pairs"] == 3  # (0.9 vs 0.2), (0.6 vs 0.2), (0.3 vs 0.8)
    assert m["pairwise_accuracy"] == pytest.approx(2 / 3)
    assert m["random_top1"] == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)
    assert m["oracle_top1"] == pytest.approx(2 / 3)
    assert m["num_prompts"] == 3 and m["num_rollouts"] == 7


def test_rollout_metrics_count_ties_as_the_book():
    """The book's train_orm.py: top-1 averages the correctness of the rollouts tied at the top score; a tied
    (correct, incorrect) pair counts 0.5. Hand-computed from those definitions."""
    #          prompt 0: 2 tied at top (1 right)   prompt 1: 3 tied at top (2 right)   prompt 2: no tie
    scores = [0.7, 0.7, 0.1,                      0.4, 0.4, 0.4,                      0.9, 0.9, 0.3]
    rewards = [1, 0, 0,                            1, 1, 0,                            1, 1, 0]
    groups = [0, 0, 0, 1, 1, 1, 2, 2, 2]
    m = rollout_metrics(scores, rewards, groups)
    assert m["top1_accuracy"] == pytest.approx((1 / 2 + 2 / 3 + 1) / 3)
    # pairs: p0 (0.7 vs 0.7)=0.5, (0.7 vs 0.1)=1; p1 (0.4 vs 0.4) x2 = 0.5 each; p2 (0.9 vs 0.3) x2 = 1 each
    assert m["num_pairs"] == 6
    assert m["pairwise_accuracy"] == pytest.approx((0.5 + 1 + 0.5 + 0.5 + 1 + 1) / 6)
    assert m["mean_score_correct"] == pytest.approx((0.7 + 0.4 + 0.4 + 0.9 + 0.9) / 5)
    assert m["mean_score_incorrect"] == pytest.approx((0.7 + 0.1 + 0.4 + 0.3) / 4)


def test_orm_train_accuracy_is_per_sequence_at_the_last_token():
    """The book's train/accuracy (since its PR #517): sigmoid(z) > 0.5 at each rollout's last token vs its label."""
    logits = torch.tensor([[9.0, -2.0, 3.0, 0.0],    # last completion token (t=2) says right; label right
                           [9.0, 5.0, -1.0, -4.0],   # last (t=3) says wrong; label right
                           [0.0, -3.0, -3.0, 2.0],   # last (t=3) says right; label wrong
                           [-1.0, -1.0, -1.0, -1.0]])  # no completion token: not counted
    targets = torch.tensor([1.0, 1.0, 0.0, 0.0])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0]])
    assert last_token_hits(logits, targets, mask).tolist() == [True, False, False, False]
    from custom_losses.reward_models.trainers import OutcomeRMTrainer

    class Model(torch.nn.Module):
        def forward(self, **inputs):
            return SimpleNamespace(logits=logits[..., None])

    model = Model()
    stub = SimpleNamespace(model=model, args=SimpleNamespace(score_reduction="last"),
                           accelerator=SimpleNamespace(gather_for_metrics=lambda t: t),
                           _metrics={"train": defaultdict(list)})
    stub._record = lambda *a: OutcomeRMTrainer._record(stub, *a)
    inputs = {"input_ids": torch.zeros(4, 4, dtype=torch.long), "attention_mask": torch.ones(4, 4),
              "completion_mask": mask, "rewards": targets}
    OutcomeRMTrainer.compute_loss(stub, model, inputs)
    assert stub._metrics["train"]["accuracy"] == [pytest.approx(1 / 3)]  # 1 of the 3 rollouts with tokens
    # per token, the old meaning of the name: row 0 1/2, row 1 1/3 (only 5.0), row 2 3/4 (z = 0 says wrong: right)
    assert stub._metrics["train"]["token_accuracy"] == [pytest.approx(5 / 9)]


def test_orm_evaluation_logs_the_books_mean_scores_at_every_evaluation():
    from custom_losses.reward_models.trainers import OutcomeRMTrainer

    pred = SimpleNamespace(predictions=[0.8, 0.2, 0.6], label_ids=([1.0, 0.0, 1.0], [0, 0, 1]))
    out = OutcomeRMTrainer.compute_eval_metrics(None, pred)
    assert out["reward_correct_mean"] == pytest.approx(0.7) and out["reward_incorrect_mean"] == pytest.approx(0.2)
    assert out["top1_accuracy"] == 1.0 and out["pairwise_accuracy"] == 1.0
    only_right = SimpleNamespace(predictions=[0.8, 0.6], label_ids=([1.0, 1.0], [0, 1]))
    assert "reward_incorrect_mean" not in OutcomeRMTrainer.compute_eval_metrics(None, only_right)  # as the book


def test_step_metrics():
    predictions = [[2, 2, 0, -100], [1, 0, -100, -100]]
    labels = [[2, 0, 0, -100], [1, 2, -100, -100]]
    m = step_metrics(predictions, labels)
    assert m["step_accuracy"] == pytest.approx(3 / 5)
    assert m["majority_baseline"] == pytest.approx(2 / 5)
    assert m["recall_bad"] == 0.5 and m["recall_neutral"] == 1.0 and m["recall_good"] == 0.5
    assert m["num_steps"] == 5


# ---------------------------------------------------------------------------------------
# The PRM's learning rate: the book's torch LinearLR(start_factor 0.1, total_iters W), then constant.


def test_prm_warmup_formula():
    from custom_losses.schedules import book_warmup_constant

    W = 10
    assert book_warmup_constant(0, W) == pytest.approx(0.1)  # starts at 0.1 lr, not 0
    assert book_warmup_constant(5, W) == pytest.approx(0.1 + 0.9 * 5 / 10)
    assert book_warmup_constant(W - 1, W) == pytest.approx(0.1 + 0.9 * 9 / 10)
    assert book_warmup_constant(W, W) == 1.0 and book_warmup_constant(10 * W, W) == 1.0  # then held
    assert [book_warmup_constant(k, 0) for k in range(3)] == [1.0, 1.0, 1.0]  # no warmup: constant
    with pytest.raises(ValueError):
        book_warmup_constant(0, 4, start_factor=0.0)


def test_preference_rm_warms_up_over_the_books_int_of_the_ratio():
    """The book's train_preference_rm.py: W = int(0.1 T) before transformers' linear schedule; transformers' own
    get_warmup_steps takes the ceiling (T = 564: 57 where the book has 56)."""
    import math

    from transformers import Trainer

    from rlhf_recipes.config import load_recipe

    args = load_recipe(["recipes/preference_rm.yaml", "--bf16", "false"]).training
    assert args.lr_scheduler_type == "linear" and args.warmup_steps == 0.1
    assert math.ceil(564 * 0.1) == 57 and args.get_warmup_steps(564) == int(564 * 0.1) == 56
    assert args.get_warmup_steps(450) == 45  # 0.1 * 450 = 45.00000000000001: the ceiling would give 46
    stub = SimpleNamespace(args=args, lr_scheduler=None)  # transformers' own scheduler asks the args for W
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = Trainer.create_scheduler(stub, 564, optimizer)
    lrs = []
    for _ in range(58):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[56] == 1.0 and lrs[55] == pytest.approx(55 / 56)


def test_prm_recipe_schedule_is_torch_linear_lr_then_constant():
    """The recipe's scheduler gives, step for step, the LR of torch's LinearLR(0.1, W) (the book's)."""
    from custom_losses.schedules import BookLRScheduleMixin
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.registry import import_object

    recipe = load_recipe(["recipes/prm.yaml", "--bf16", "false"])
    assert issubclass(import_object(recipe.algorithm.trainer_class), BookLRScheduleMixin)
    args = recipe.training
    assert args.book_lr_schedule and args.book_lr_shape == "warmup_constant" and args.warmup_steps == 0.1
    T, W = 125, 12  # int(0.1 x 125)
    ours_p, book_p = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    ours_opt = torch.optim.SGD([ours_p], lr=args.learning_rate)
    book_opt = torch.optim.SGD([book_p], lr=args.learning_rate)
    stub = SimpleNamespace(args=args, lr_scheduler=None)
    ours = BookLRScheduleMixin.create_scheduler(stub, T, ours_opt)
    book = torch.optim.lr_scheduler.LinearLR(book_opt, start_factor=0.1, total_iters=W)
    lrs = []
    for _ in range(T):
        lrs.append(ours_opt.param_groups[0]["lr"])
        assert lrs[-1] == pytest.approx(book_opt.param_groups[0]["lr"], rel=1e-9)
        for opt, sched in ((ours_opt, ours), (book_opt, book)):
            opt.step()
            sched.step()
    lr = args.learning_rate
    assert [lrs[0], lrs[W - 1], lrs[W], lrs[-1]] == pytest.approx([0.1 * lr, lr * (0.1 + 0.9 * 11 / 12), lr, lr])
