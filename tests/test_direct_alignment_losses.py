"""Direct-alignment losses against the book's formulas (reference/book.md, chapter 8 table).

Two layers: the pure functions on fixed tensors (hand-computed values and edge cases), and
each algorithm's trainer — TRL's native option or our subclass — on a real tiny batch with a
reference model that differs from the policy, compared with the formula applied to log-probs
computed here independently.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from custom_losses.direct_alignment.losses import (
    AVERAGED_LOGRATIO_LOSSES, REFERENCE_FREE_LOSSES, apo_down_loss, apo_zero_loss, cdpo_loss, dpo_loss, ipo_loss,
    kto_loss, log1mexp, orpo_loss, simpo_loss,
)
from rlhf_recipes.registry import ALGORITHMS

LR_C = torch.tensor([0.5, -1.0, 2.0, 0.0])
LR_R = torch.tensor([-0.5, 0.3, 2.0, 0.0])


def logsig(x: float) -> float:
    return -math.log1p(math.exp(-x))


def test_dpo_matches_formula_by_hand():
    got = dpo_loss(LR_C, LR_R, beta=0.1)
    expected = [-logsig(0.1 * (c - r)) for c, r in zip(LR_C.tolist(), LR_R.tolist())]
    assert torch.allclose(got, torch.tensor(expected), atol=1e-6)
    assert got[3].item() == pytest.approx(math.log(2))  # equal log-ratios: log 2


def test_cdpo_mixes_both_label_directions():
    eps, beta = 0.1, 0.1
    got = cdpo_loss(LR_C, LR_R, beta, eps)
    d = [beta * (c - r) for c, r in zip(LR_C.tolist(), LR_R.tolist())]
    expected = [(1 - eps) * -logsig(x) + eps * -logsig(-x) for x in d]
    assert torch.allclose(got, torch.tensor(expected), atol=1e-6)
    assert torch.allclose(cdpo_loss(LR_C, LR_R, beta, 0.0), dpo_loss(LR_C, LR_R, beta))
    # With eps > 0 an infinitely confident margin is penalised instead of driving the loss to 0.
    assert cdpo_loss(torch.tensor([500.0]), torch.tensor([0.0]), 1.0, 0.1).item() > 10


def test_ipo_uses_summed_log_ratios():
    beta = 0.1
    got = ipo_loss(LR_C, LR_R, beta)
    expected = [(c - r - 1 / (2 * beta)) ** 2 for c, r in zip(LR_C.tolist(), LR_R.tolist())]
    assert torch.allclose(got, torch.tensor(expected), atol=1e-5)
    # Minimum exactly at the target margin 1/(2 beta) = 5.
    assert ipo_loss(torch.tensor([5.0]), torch.tensor([0.0]), beta).item() == pytest.approx(0.0, abs=1e-9)


def test_log1mexp_is_stable_at_both_ends():
    x = torch.tensor([-1e-7, -0.1, -0.6931, -0.7, -5.0, -50.0], dtype=torch.float64)
    assert torch.allclose(log1mexp(x), torch.log(1 - torch.exp(x)), rtol=1e-6)
    assert torch.isfinite(log1mexp(torch.tensor([-1e-30, -1e4]))).all()


def test_orpo_formula_and_clamp():
    a_c = torch.tensor([-0.5, -2.0, 0.0])  # 0.0 would be log p = 0: must be clamped to -1e-6
    a_r = torch.tensor([-1.0, -1.0, -3.0])
    nll = -a_c
    loss, log_odds = orpo_loss(a_c, a_r, nll, beta=0.1)
    c = a_c.clamp(max=-1e-6).double()
    r = a_r.double()
    expected_odds = (c - torch.log1p(-torch.exp(c))) - (r - torch.log1p(-torch.exp(r)))
    assert torch.allclose(log_odds.double(), expected_odds, rtol=1e-5)
    assert torch.allclose(loss.double(), nll.double() - 0.1 * F.logsigmoid(expected_odds), rtol=1e-5)
    assert torch.isfinite(loss).all()


def test_kto_reference_point_and_weights():
    lr_c = torch.tensor([1.0, 2.0])
    lr_r = torch.tensor([0.5, 1.5])  # mean 1.0 > 0: KL point is 1.0
    loss, kl = kto_loss(lr_c, lr_r, beta=0.5, desirable_weight=2.0, undesirable_weight=1.0)
    assert kl.item() == pytest.approx(1.0)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    chosen = sum(1 - sig(0.5 * (c - 1.0)) for c in (1.0, 2.0)) / 2
    rejected = sum(1 - sig(0.5 * (1.0 - r)) for r in (0.5, 1.5)) / 2
    assert loss.item() == pytest.approx(2.0 * chosen + rejected, rel=1e-6)
    # Negative mean rejected log-ratio: the reference point is clamped at 0.
    _, kl0 = kto_loss(lr_c, torch.tensor([-1.0, -3.0]), beta=0.5)
    assert kl0.item() == 0.0


def test_apo_losses_match_the_book_by_hand():
    """No constant: TRL's apo_zero / apo_down log the book's value + 1."""
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    zero = apo_zero_loss(LR_C, LR_R, beta=0.1)
    down = apo_down_loss(LR_C, LR_R, beta=0.1)
    for i, (c, r) in enumerate(zip(LR_C.tolist(), LR_R.tolist())):
        assert zero[i].item() == pytest.approx(-sig(0.1 * c) + sig(0.1 * r), abs=1e-7)
        assert down[i].item() == pytest.approx(sig(0.1 * c) - sig(0.1 * (c - r)), abs=1e-7)
    # Equal log-ratios of 0: apo_zero is exactly 0, apo_down is 0.5 - 0.5 = 0.
    assert zero[3].item() == 0.0 and down[3].item() == 0.0


def test_apo_gradients_are_trls():
    """Same gradients as TRL's 1 - sigmoid(b lr_c) + sigmoid(b lr_r) and sigmoid(b lr_c) + 1 - sigmoid(b D)."""
    for name, fn in (("apo_zero", apo_zero_loss), ("apo_down", apo_down_loss)):
        c1, r1 = LR_C.clone().requires_grad_(), LR_R.clone().requires_grad_()
        fn(c1, r1, 0.1).sum().backward()
        c2, r2 = LR_C.clone().requires_grad_(), LR_R.clone().requires_grad_()
        b = 0.1
        trl = {"apo_zero": 1 - torch.sigmoid(b * c2) + torch.sigmoid(b * r2),
               "apo_down": torch.sigmoid(b * c2) + 1 - torch.sigmoid(b * (c2 - r2))}[name]
        trl.sum().backward()
        assert torch.allclose(c1.grad, c2.grad) and torch.allclose(r1.grad, r2.grad), name


def test_simpo_matches_formula_with_gamma_as_a_ratio():
    a_c, a_r = torch.tensor([-1.0, -0.2, -3.0]), torch.tensor([-1.5, -0.2, -1.0])
    got = simpo_loss(a_c, a_r, beta=2.0, gamma_beta_ratio=0.5)
    expected = [-logsig(2.0 * (c - r) - 0.5 * 2.0) for c, r in zip(a_c.tolist(), a_r.tolist())]
    assert torch.allclose(got, torch.tensor(expected), atol=1e-6)
    # gamma 0, equal log-probs: log 2.
    assert simpo_loss(torch.tensor([-1.0]), torch.tensor([-1.0]), 2.0, 0.0).item() == pytest.approx(math.log(2))


def test_kto_single_pair_reference_point_is_the_mean_of_both_log_ratios():
    """The book: one pair in the micro-batch -> KL = clamp(mean(lr_c, lr_r), min 0), not clamp(lr_r)."""
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    loss, kl = kto_loss(torch.tensor([3.0]), torch.tensor([-1.0]), beta=0.5)
    assert kl.item() == pytest.approx(1.0)  # (3 - 1) / 2; the rejected one alone would clamp to 0
    assert loss.item() == pytest.approx((1 - sig(0.5 * (3.0 - 1.0))) + (1 - sig(0.5 * (1.0 + 1.0))), rel=1e-6)
    _, kl0 = kto_loss(torch.tensor([-3.0]), torch.tensor([1.0]), beta=0.5)
    assert kl0.item() == 0.0  # mean -1: clamped
    # Two pairs or more: the rejected ones only.
    _, kl2 = kto_loss(torch.tensor([3.0, 5.0]), torch.tensor([-1.0, 2.0]), beta=0.5)
    assert kl2.item() == pytest.approx(0.5)


def test_kto_reference_point_carries_no_gradient():
    lr_c = torch.tensor([1.0, 2.0], requires_grad=True)
    lr_r = torch.tensor([0.5, 1.5], requires_grad=True)
    loss, _ = kto_loss(lr_c, lr_r, beta=0.5)
    loss.backward()
    # With KL detached, d/d lr_r_i of mean_i(1 - sigmoid(beta (KL - lr_r_i))) = beta s_i (1 - s_i) / n.
    # Were KL not detached, the chosen term would add a gradient through mean(lr_r) as well.
    s = torch.sigmoid(0.5 * (1.0 - torch.tensor([0.5, 1.5])))
    assert torch.allclose(lr_r.grad, 0.5 * s * (1 - s) / 2, atol=1e-6)


# ---------------------------------------------------------------------------------------
# The trainers on a real batch: TRL's native options and our subclass.


def _independent_logps(model, batch):
    """Summed and averaged response log-probs for [chosen..., rejected...], computed from scratch."""
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    mask = batch["completion_mask"][:, 1:].float()
    summed = (logp * mask).sum(1)
    return summed, summed / mask.sum(1)


def _trainer_and_batch(algorithm: str, tmp_path, *overrides: str, models=None):
    """The algorithm's trainer on the tiny profile, its policy, its reference and its first batch; `models`: the
    (policy, reference) to reuse, else the tiny model and a perturbed copy."""
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.families.direct_alignment import FAMILY
    from rlhf_recipes.models import load_causal_lm, load_tokenizer
    from rlhf_recipes.registry import import_object

    recipe = load_recipe([f"recipes/{algorithm}.yaml", "--profile", "tiny", "--output_dir", str(tmp_path),
                          *overrides])
    tokenizer = load_tokenizer(recipe.model)
    train, _ = load_splits(recipe)
    if models is None:
        policy = load_causal_lm(recipe.model)
        reference = copy.deepcopy(policy)
        torch.manual_seed(1)
        with torch.no_grad():  # make the policy differ from the reference so log-ratios are not 0
            for p in policy.parameters():
                p.add_(0.05 * torch.randn_like(p))
    else:
        policy, reference = models
    trainer_class = import_object(recipe.algorithm.trainer_class)
    trainer = trainer_class(model=policy, ref_model=reference, args=recipe.training, train_dataset=train,
                            processing_class=tokenizer, **FAMILY.trainer_kwargs(recipe, trainer_class))
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer, policy, reference, batch


BOOK_FORMULA = {
    "dpo": lambda c, r, a_c, a_r, b: -F.logsigmoid(b * (c - r)).mean(),
    "dpo_norm": lambda c, r, a_c, a_r, b: -F.logsigmoid(b * (a_c - a_r)).mean(),
    "cdpo": lambda c, r, a_c, a_r, b: (0.9 * -F.logsigmoid(b * (c - r)) + 0.1 * -F.logsigmoid(-b * (c - r))).mean(),
    "ipo": lambda c, r, a_c, a_r, b: ((c - r - 1 / (2 * b)) ** 2).mean(),
    "apo_zero": lambda c, r, a_c, a_r, b: (-torch.sigmoid(b * c) + torch.sigmoid(b * r)).mean(),
    "apo_down": lambda c, r, a_c, a_r, b: (torch.sigmoid(b * c) - torch.sigmoid(b * (c - r))).mean(),
    "kto": lambda c, r, a_c, a_r, b: (
        (1 - torch.sigmoid(b * (c - r.mean().clamp(min=0)))).mean()
        + (1 - torch.sigmoid(b * (r.mean().clamp(min=0) - r))).mean()
    ),
}


@pytest.mark.parametrize("algorithm", sorted(BOOK_FORMULA))
def test_trainer_loss_is_the_book_formula(algorithm, tmp_path):
    trainer, policy, reference, batch = _trainer_and_batch(algorithm, tmp_path)
    policy.train()
    loss = trainer.compute_loss(policy, batch).item()
    pol_sum, pol_avg = _independent_logps(policy, batch)
    ref_sum, ref_avg = _independent_logps(reference, batch)
    lr = pol_sum - ref_sum
    lr_avg = pol_avg - ref_avg
    c, r = lr.chunk(2)
    a_c, a_r = lr_avg.chunk(2)
    assert (c - r).abs().max() > 1e-3, "policy and reference must differ for this test to mean anything"
    expected = BOOK_FORMULA[algorithm](c, r, a_c, a_r, trainer.beta).item()
    assert loss == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_dpo_norm_is_trls_sigmoid_norm_loss_with_the_books_averaged_rewards(tmp_path):
    """DPO-norm on BookDPOTrainer computes TRL's sigmoid_norm loss on the same batch and models, but logs rewards/*
    as beta x the AVERAGED log-ratios (the book's use_average_logprob), where sigmoid_norm logs beta x the SUMMED
    ones (about the response length larger)."""
    ours, policy, reference, batch = _trainer_and_batch("dpo_norm", tmp_path / "ours")
    trl, *_ = _trainer_and_batch("dpo", tmp_path / "trl", "--loss_type", "[sigmoid_norm]", "--beta", str(ours.beta),
                                 models=(policy, reference))
    assert type(trl).__name__ == "ScheduledDPOTrainer" and trl.loss_types == ["sigmoid_norm"]
    policy.train()
    our_loss, trl_loss = ours.compute_loss(policy, batch).item(), trl.compute_loss(policy, batch).item()
    assert our_loss == pytest.approx(trl_loss, rel=1e-5, abs=1e-6)

    pol_sum, pol_avg = _independent_logps(policy, batch)
    ref_sum, ref_avg = _independent_logps(reference, batch)
    c, r = (pol_sum - ref_sum).chunk(2)
    a_c, a_r = (pol_avg - ref_avg).chunk(2)
    beta = ours.beta
    logged = {name: ours._metrics["train"][name][-1] for name in ("rewards/chosen", "rewards/rejected",
                                                                   "rewards/margins", "rewards/accuracies")}
    assert logged["rewards/chosen"] == pytest.approx((beta * a_c).mean().item(), rel=1e-4, abs=1e-6)
    assert logged["rewards/rejected"] == pytest.approx((beta * a_r).mean().item(), rel=1e-4, abs=1e-6)
    assert logged["rewards/margins"] == pytest.approx((beta * (a_c - a_r)).mean().item(), rel=1e-4, abs=1e-6)
    assert logged["rewards/accuracies"] == pytest.approx((a_c > a_r).float().mean().item())
    trl_margins = trl._metrics["train"]["rewards/margins"][-1]
    assert trl_margins == pytest.approx((beta * (c - r)).mean().item(), rel=1e-4, abs=1e-6)
    assert abs(trl_margins) > 3 * abs(logged["rewards/margins"]), "sigmoid_norm's summed margins are the larger"


def test_every_book_loss_has_its_trainer_line():
    """BookDPOConfig accepts the names in losses.BOOK_LOSSES; BookDPOTrainer calls each through its tables."""
    from custom_losses.direct_alignment.losses import BOOK_LOSSES
    from custom_losses.direct_alignment.trainer import AVERAGED_LOSSES, LOGRATIO_LOSSES

    assert set(BOOK_LOSSES) == set(LOGRATIO_LOSSES) | set(AVERAGED_LOSSES), \
        "a book loss needs its name in losses.BOOK_LOSSES and its line in trainer.py's LOGRATIO_LOSSES (or " \
        "AVERAGED_LOSSES)"
    assert set(AVERAGED_LOSSES) == set(REFERENCE_FREE_LOSSES) and set(AVERAGED_LOGRATIO_LOSSES) <= set(LOGRATIO_LOSSES)


def test_the_registry_says_which_book_losses_average_as_the_trainer_does():
    """The held-out evaluator reads the registry's `averages_logprobs`, the trainer its book_loss: the same losses."""
    book = {name: a for name, a in ALGORITHMS.items() if "book_loss" in a.defaults}
    averaged = {a.defaults["book_loss"] for a in book.values() if a.averages_logprobs}
    assert averaged == set(AVERAGED_LOGRATIO_LOSSES) | set(REFERENCE_FREE_LOSSES)
    assert ALGORITHMS["dpo_norm"].averages_logprobs and not ALGORITHMS["dpo"].averages_logprobs


def test_orpo_trainer_is_reference_free_and_matches_formula(tmp_path):
    trainer, policy, reference, batch = _trainer_and_batch("orpo", tmp_path)
    assert trainer.ref_model is None
    loss = trainer.compute_loss(policy, batch).item()
    _, avg = _independent_logps(policy, batch)
    a_c, a_r = avg.chunk(2)
    expected, _ = orpo_loss(a_c, a_r, -a_c, beta=trainer.beta)
    assert loss == pytest.approx(expected.mean().item(), rel=1e-4)


def test_simpo_trainer_is_reference_free_and_matches_formula(tmp_path):
    trainer, policy, reference, batch = _trainer_and_batch("simpo", tmp_path)
    assert trainer.ref_model is None
    loss = trainer.compute_loss(policy, batch).item()
    _, avg = _independent_logps(policy, batch)
    a_c, a_r = avg.chunk(2)
    beta, ratio = trainer.beta, trainer.args.gamma_beta_ratio
    assert (beta, ratio) == (2.0, 0.5)  # the book's
    expected = -F.logsigmoid(beta * (a_c - a_r) - ratio * beta).mean()
    assert loss == pytest.approx(expected.item(), rel=1e-4)


def test_simpo_cuts_a_long_pair_from_the_left_keeping_the_response(tmp_path):
    """The book cuts prompt+response from the LEFT (CPOTrainer kept the prompt and cut the response's end)."""
    trainer, _, _, _ = _trainer_and_batch("simpo", tmp_path)
    collator, max_length = trainer.data_collator, trainer.args.max_length
    assert trainer.args.truncation_mode == "keep_end"
    prompt = list(range(100, 100 + max_length))  # the prompt alone fills max_length
    chosen, rejected = [7, 8, 9, 10], [11, 12]
    out = collator([{"prompt_ids": prompt, "chosen_ids": chosen, "rejected_ids": rejected}])
    ids, mask = out["input_ids"], out["completion_mask"]
    assert ids.shape[1] == max_length
    assert ids[0, -4:].tolist() == chosen and mask[0, -4:].tolist() == [1] * 4  # the whole response, at the end
    assert ids[0, 0].item() == prompt[4]  # the prompt's start was cut
    n_r = int(out["attention_mask"][1].sum())
    assert ids[1, n_r - 2:n_r].tolist() == rejected and mask[1].sum().item() == 2


# ---------------------------------------------------------------------------------------
# The book's LR schedule (custom_losses/schedules.py) on every direct-alignment trainer.

DIRECT_ALIGNMENT = tuple(name for name, a in ALGORITHMS.items() if a.family == "direct_alignment")


def _lrs(trainer_or_stub, create, steps: int) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=trainer_or_stub.args.learning_rate)
    sched = create(steps, opt)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])  # the LR this optimizer step uses
        opt.step()
        sched.step()
    return lrs


@pytest.mark.parametrize("algorithm", DIRECT_ALIGNMENT)
def test_every_direct_alignment_recipe_uses_the_books_warmup(algorithm):
    """W = int(0.1 T); lr (k+1)/(W+1) for k < W (not 0 at the first step: transformers' `linear`), then lr (T-k)/(T-W)."""
    from types import SimpleNamespace

    from custom_losses.schedules import BookLRScheduleMixin
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.registry import import_object

    recipe = load_recipe([f"recipes/{algorithm}.yaml", "--bf16", "false"])
    assert issubclass(import_object(recipe.algorithm.trainer_class), BookLRScheduleMixin)
    args = recipe.training
    assert args.book_lr_schedule and args.book_lr_shape == "warmup_linear" and args.warmup_steps == 0.1
    stub = SimpleNamespace(args=args, lr_scheduler=None)
    T, W, lr = 300, 30, args.learning_rate
    lrs = _lrs(stub, lambda n, opt: BookLRScheduleMixin.create_scheduler(stub, n, opt), T)
    assert lrs[0] == pytest.approx(lr / (W + 1))
    assert lrs[W - 1] == pytest.approx(lr * W / (W + 1))
    assert lrs[W] == pytest.approx(lr)
    assert lrs[T - 1] == pytest.approx(lr / (T - W))


def test_an_epoch_with_a_partial_accumulation_step_counts_t_as_the_book(tmp_path):
    """The book's cDPO run: 250 micro-batches, accumulation 4, one epoch. Its loop counts T = 250 // 4 = 62 optimizer
    steps (W = 6) and takes the leftover 2 micro-batches as a 63rd step at the schedule's end, lr 0; transformers
    counts 63 steps (the lr at step 30 was lr 33/57 where the book's is lr 32/56)."""
    trainer, *_ = _trainer_and_batch("cdpo", tmp_path)
    trainer.args.max_steps, trainer.args.num_train_epochs, trainer.args.gradient_accumulation_steps = -1, 1, 4
    trainer.args.warmup_steps = 0.1
    dataloader = torch.utils.data.DataLoader(list(range(250)), batch_size=1)
    *_, max_steps = trainer.set_initial_training_values(trainer.args, dataloader)
    assert max_steps == 63  # transformers' count: the partial step is a step
    lr = trainer.args.learning_rate
    lrs = _lrs(trainer, trainer.create_scheduler, max_steps)
    assert lrs[0] == pytest.approx(lr / 7) and lrs[6] == pytest.approx(lr)
    assert lrs[30] == pytest.approx(lr * 32 / 56)
    assert lrs[61] == pytest.approx(lr / 56) and lrs[62] == 0.0


def test_dpo_trainer_creates_the_books_schedule(tmp_path):
    """On a real (TRL-native loss) DPO trainer: its create_scheduler is the book's, not transformers' linear."""
    trainer, *_ = _trainer_and_batch("dpo", tmp_path)
    T, W, lr = 20, 2, trainer.args.learning_rate
    lrs = _lrs(trainer, trainer.create_scheduler, T)
    assert [lrs[0], lrs[1], lrs[2], lrs[-1]] == pytest.approx([lr / 3, 2 * lr / 3, lr, lr / 18])
