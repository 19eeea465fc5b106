"""SDPO (book chapter 12): the loss against its formula, the choice of groups and demonstrations, the teacher
prompt, and the recipe end to end (tiny profile, resume, 2 processes)."""

from __future__ import annotations

import json
import math
import types

import pytest
import torch

from conftest import launch, losses_after, read_metrics, resume_copy, run_recipe
from custom_losses.sdpo.groups import NotEnoughSuccessfulGroups, PromptStream, collect_groups, first_success
from custom_losses.sdpo.losses import book_completion_mask, group_token_mean, topk_tail_reverse_kl


# --- the loss ---------------------------------------------------------------------------------

def direct_topk_tail_kl(student_logits, teacher_logits, k):
    """The formula, one position at a time, in float64: sum_{i in topk(p_s) + tail} p_s(i) (log p_s(i) - log p_t(i))."""
    out = torch.zeros(student_logits.shape[:-1], dtype=torch.float64)
    for pos in torch.cartesian_prod(*[torch.arange(n) for n in student_logits.shape[:-1]]):
        pos = tuple(pos.tolist())
        ps = torch.softmax(student_logits[pos].double(), -1)
        pt = torch.softmax(teacher_logits[pos].double(), -1)
        top = sorted(range(ps.numel()), key=lambda i: -ps[i].item())[:k]
        s = [ps[i].item() for i in top] + [1.0 - sum(ps[i].item() for i in top)]
        t = [pt[i].item() for i in top] + [1.0 - sum(pt[i].item() for i in top)]
        out[pos] = sum(a * (math.log(a) - math.log(b)) for a, b in zip(s, t) if a > 0)
    return out


def test_topk_tail_reverse_kl_is_the_formula():
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(2, 3, 50, generator=g) * 2, torch.randn(2, 3, 50, generator=g) * 2
    got = topk_tail_reverse_kl(student, teacher, k=20)
    assert got.shape == (2, 3)
    torch.testing.assert_close(got.double(), direct_topk_tail_kl(student, teacher, 20), atol=1e-5, rtol=1e-4)
    assert (got >= -1e-6).all()  # a KL between two (k+1)-bucket distributions
    assert topk_tail_reverse_kl(student, student, k=20).abs().max() < 1e-6


def test_topk_tail_reverse_kl_equals_trl():
    from trl.experimental.sdpo.loss_utils import compute_topk_self_distillation_loss

    g = torch.Generator().manual_seed(1)
    student, teacher = torch.randn(4, 7, 64, generator=g), torch.randn(4, 7, 64, generator=g)
    trl = compute_topk_self_distillation_loss(student, teacher, distillation_topk=20, distillation_alpha=1.0,
                                              distillation_add_tail=True)
    torch.testing.assert_close(topk_tail_reverse_kl(student, teacher, 20), trl)


def test_topk_tail_reverse_kl_in_bf16_is_the_books_bf16_arithmetic():
    """The book's SDPOLoss works in the logits' dtype (bf16 on a GPU): top-k of the logits minus their log-sum-exp,
    a tail bucket, torch's kl_div, all in bf16. Ours upcast to float32 first and gave other numbers (0.288 where the
    book's loss is 0.293 on one bf16 batch)."""
    import torch.nn.functional as F

    def book_tail(log_probs):
        log_sum = log_probs.logsumexp(dim=-1, keepdim=True).clamp(max=-1e-7)
        return torch.cat([log_probs, torch.log(-torch.expm1(log_sum))], dim=-1)

    g = torch.Generator().manual_seed(3)
    student = (torch.randn(8, 6, 500, generator=g) * 3).to(torch.bfloat16)
    teacher = (student.float() + torch.randn(8, 6, 500, generator=g)).to(torch.bfloat16)
    top, index = student.topk(20, dim=-1)
    s_logp = book_tail(top - student.logsumexp(dim=-1, keepdim=True))
    t_logp = book_tail(teacher.gather(-1, index) - teacher.logsumexp(dim=-1, keepdim=True))
    book = F.kl_div(t_logp, s_logp, reduction="none", log_target=True).sum(-1)
    got = topk_tail_reverse_kl(student, teacher, k=20)
    assert got.dtype == torch.bfloat16 and torch.equal(got, book)
    upcast = topk_tail_reverse_kl(student.float(), teacher.float(), k=20)
    assert not torch.equal(got.float(), upcast)  # the float32 numbers are not the book's bf16 ones


def test_topk_covering_almost_all_mass_stays_finite():
    """20 tokens hold all but ~1e-13 of the student's mass: the tail bucket is clamped, not log 0."""
    student = torch.full((1, 2, 30), -30.0)
    student[..., :20] = 0.0
    teacher = torch.randn(1, 2, 30, generator=torch.Generator().manual_seed(2))
    student.requires_grad_(True)
    got = topk_tail_reverse_kl(student, teacher, k=20)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.double(), direct_topk_tail_kl(student.detach(), teacher, 20), atol=1e-5, rtol=1e-5)
    got.sum().backward()
    assert torch.isfinite(student.grad).all()


def direct_group_token_mean(per_token, mask, group):
    means = []
    for start in range(0, per_token.size(0), group):
        values = [per_token[r, t].item() for r in range(start, start + group) for t in range(per_token.size(1))
                  if mask[r, t]]
        means.append(sum(values) / len(values) if values else 0.0)
    return sum(means) / len(means)


def test_group_token_mean_is_the_formula():
    g = torch.Generator().manual_seed(3)
    per_token = torch.rand(8, 6, generator=g)
    mask = (torch.rand(8, 6, generator=g) > 0.3).long()
    mask[0] = 0  # a fully masked rollout
    got = group_token_mean(per_token, mask, group_size=4)
    assert got.item() == pytest.approx(direct_group_token_mean(per_token, mask, 4), rel=1e-6)
    # not TRL's per-sequence mean: longer completions weigh more within the group
    seq = ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    assert abs(got.item() - seq.item()) > 1e-4


def test_group_with_all_rollouts_masked_but_one():
    per_token = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    mask = torch.zeros(4, 6, dtype=torch.long)
    mask[0, :2] = 1  # group 0 (rows 0-1): only row 0's first 2 tokens
    mask[2, :3] = 1  # group 1 (rows 2-3): only row 2's first 3 tokens
    got = group_token_mean(per_token, mask, group_size=2)
    expected = ((0 + 1) / 2 + (12 + 13 + 14) / 3) / 2
    assert got.item() == pytest.approx(expected)
    assert got.item() == pytest.approx(direct_group_token_mean(per_token, mask, 2))
    masked_values = per_token.clone()
    masked_values[mask == 0] = 1e9  # masked positions never count
    assert group_token_mean(masked_values, mask, 2).item() == pytest.approx(expected)


def test_group_token_mean_needs_whole_groups():
    with pytest.raises(ValueError):
        group_token_mean(torch.zeros(3, 2), torch.ones(3, 2), group_size=2)


def test_book_mask_drops_an_end_token_equal_to_pad():
    pad, im_end = 0, 9
    ids = torch.tensor([[5, 6, im_end, pad], [5, pad, pad, pad], [5, 6, 7, 8]])
    trl_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])  # TRL: up to and including the first end
    assert book_completion_mask(ids, trl_mask, pad).tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]


# --- which groups, which demonstration ----------------------------------------------------------

def test_first_success_is_the_demonstration():
    assert first_success([0.2, 1.0, 1.0, 0.0], 1.0) == 1
    assert first_success([0.9, 0.99], 1.0) is None
    assert first_success([1.0], 1.0) == 0


def constructed_draw(reward_table):
    """draw(n) over a fixed list of groups' rewards, in order; payload = the prompt's index."""
    cursor = {"next": 0}

    def draw(n):
        out = []
        for _ in range(n):
            i = cursor["next"]
            cursor["next"] += 1
            out.append((i, torch.tensor(reward_table[i % len(reward_table)])))
        return out

    return draw, cursor


def test_groups_without_a_success_are_redrawn():
    table = [[0, 0, 0], [0.5, 1, 0], [0, 0, 0], [0, 0, 0], [1, 1, 1], [0, 0.9, 0], [0, 0, 1], [1, 0, 0]]
    draw, cursor = constructed_draw(table)
    got = collect_groups(draw, need=3, threshold=1.0, max_draws=1600)
    assert got.accepted == [1, 4, 6]  # the first three groups with a success, in draw order
    assert got.skipped == 4 and got.drawn == 7 and got.discarded == 0
    assert cursor["next"] == 7  # nothing drawn beyond the third success


def test_draw_limit_is_an_error():
    draw, _ = constructed_draw([[0, 0], [0, 0], [1, 0]])
    with pytest.raises(NotEnoughSuccessfulGroups, match="after 5 prompts"):
        collect_groups(draw, need=3, threshold=1.0, max_draws=5)


def test_processes_draw_alike_and_a_done_process_discards():
    draw, _ = constructed_draw([[1, 0]])  # every group succeeds
    other_needs = iter([3, 1])  # another process still misses 3, then 1
    got = collect_groups(draw, need=1, threshold=1.0, max_draws=100,
                         world_max=lambda mine: max(mine, next(other_needs, 0)))
    assert got.accepted == [0] and got.drawn == 4 and got.discarded == 3


def test_prompt_stream_shards_and_replays():
    a = PromptStream(10, seed=42)
    first = [a.take_for(2, world=2, rank=r) for r in range(2)]
    assert first[0] != first[1]
    b = PromptStream(10, seed=42)
    b.take(9)
    c = PromptStream(10, seed=42)
    c.replay(9)
    assert b.take(15) == c.take(15)  # across the epoch boundary too
    assert sorted(PromptStream(10, 0).take(10)) == list(range(10))


# --- the teacher prompt (TRL's builder with the book's templates) -------------------------------

def fake_trainer(tokenizer, max_reprompt_len, tmp_path, group=4):
    from accelerate import Accelerator
    from trl.experimental.sdpo.sdpo_trainer import SDPOTrainer

    from custom_losses.sdpo.config import BookSDPOConfig

    args = BookSDPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=group, num_generations=group,
                          max_reprompt_len=max_reprompt_len, report_to="none", use_cpu=True)
    trainer = types.SimpleNamespace(args=args, accelerator=Accelerator(cpu=True), model=types.SimpleNamespace(training=True),
                                    num_generations=group, _tokenizer=tokenizer, processing_class=tokenizer,
                                    chat_template_kwargs={"enable_thinking": True})
    trainer._tokenize_prompts_untruncated = types.MethodType(SDPOTrainer._tokenize_prompts_untruncated, trainer)
    return trainer


@pytest.fixture
def tokenizer(_tiny_cache):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_tiny_cache)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def build_teacher(tokenizer, tmp_path, rewards, max_reprompt_len=1024):
    from trl.experimental.sdpo.sdpo_trainer import SuccessfulRolloutTeacherContextBuilder

    trainer = fake_trainer(tokenizer, max_reprompt_len, tmp_path)
    question = "Spell this word backward (example: sun -> nus): level"
    prompt = [{"role": "system", "content": "Think first."}, {"role": "user", "content": question}]
    texts = [f"<think>try {i}</think><answer>lev{i}</answer>" for i in range(4)]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(map(len, ids))
    completion_ids = torch.tensor([x + [tokenizer.pad_token_id] * (width - len(x)) for x in ids])
    completion_mask = (torch.arange(width)[None] < torch.tensor([len(x) for x in ids])[:, None]).long()
    out = SuccessfulRolloutTeacherContextBuilder(trainer).build(
        {"completion_ids": completion_ids, "completion_mask": completion_mask}, [prompt] * 4,
        torch.tensor(rewards, dtype=torch.float32), feedbacks=[None] * 4)
    return out, prompt, question, texts, completion_ids


def expected_teacher_ids(tokenizer, prompt, question, demonstration):
    user = question + "\n\nCorrect solution:\n\n" + demonstration + "\n\nCorrectly solve the original question."
    return tokenizer.apply_chat_template([prompt[0], {"role": "user", "content": user}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True, enable_thinking=True)["input_ids"]


def test_teacher_prompt_is_the_books_text_with_the_first_success(tokenizer, tmp_path):
    out, prompt, question, texts, completion_ids = build_teacher(tokenizer, tmp_path, [0.5, 1.0, 1.0, 0.0])
    demo = tokenizer.decode(tokenizer(texts[1], add_special_tokens=False)["input_ids"], skip_special_tokens=True)
    assert "<think>" in demo  # the demonstration keeps its thinking
    expected = expected_teacher_ids(tokenizer, prompt, question, demo)
    width = completion_ids.size(1)
    for row in range(4):  # all rollouts share the demonstration, the successful ones included
        mask = out["teacher_attention_mask"][row].bool()
        ids = out["teacher_input_ids"][row][mask].tolist()
        teacher_prompt = out["teacher_input_ids"][row, :-width][out["teacher_attention_mask"][row, :-width].bool()]
        assert teacher_prompt.tolist() == expected
        assert out["teacher_input_ids"][row, -width:].tolist() == completion_ids[row].tolist()  # + the student's
        assert ids[:len(expected)] == expected
    assert out["self_distillation_mask"].tolist() == [1.0] * 4


def test_teacher_prompt_is_cut_on_the_left(tokenizer, tmp_path):
    out, prompt, question, texts, completion_ids = build_teacher(tokenizer, tmp_path, [0.0, 0.0, 1.0, 0.0],
                                                                 max_reprompt_len=20)
    demo = tokenizer.decode(tokenizer(texts[2], add_special_tokens=False)["input_ids"], skip_special_tokens=True)
    full = expected_teacher_ids(tokenizer, prompt, question, demo)
    assert len(full) > 20
    width = completion_ids.size(1)
    teacher_prompt = out["teacher_input_ids"][0, :-width][out["teacher_attention_mask"][0, :-width].bool()]
    assert teacher_prompt.tolist() == full[-20:]  # the end (the instruction, the generation prompt) is kept


# --- the recipe -----------------------------------------------------------------------------------

def test_recipe_runs_on_tiny_profile(tmp_path):
    out = tmp_path / "sdpo"
    results = run_recipe("sdpo.yaml", out)
    assert results["algorithm"] == "sdpo" and results["steps"] == 2 and results["status"] == "finished"
    assert results["step_batch"] == {"groups": 2, "rollouts_per_group": 4, "completions": 8}
    assert results["prompt_draws"]["drawn"] == 4 and results["prompt_draws"]["skipped"] == 0
    metrics = [r for r in read_metrics(out) if "loss" in r]
    assert len(metrics) == 2
    for row in metrics:
        for key in ("loss", "grad_norm", "learning_rate", "reward", "skipped", "rewards/correctness_reward/mean",
                    "self_distillation/distillation_loss"):
            assert key in row, key
        assert math.isfinite(row["loss"]) and row["loss"] >= 0 and row["learning_rate"] == pytest.approx(1e-6)
    for name in ("config.yaml", "metrics.jsonl", "final_results.json", "curves.png"):
        assert (out / name).exists()


def even_prompt_success(prompts, completions, **kwargs):
    """Test reward: 1.0 for every rollout of a prompt whose question has an even length, else 0."""
    return [float(len(p[-1]["content"]) % 2 == 0) for p in prompts]


def test_failed_groups_are_redrawn_and_reward_is_over_accepted_groups(tmp_path):
    import rewards

    rewards.register(even_prompt_success, replace=True)
    out = tmp_path / "redraw"
    results = run_recipe("sdpo.yaml", out, "--reward_funcs", "[even_prompt_success]",
                         "--success_reward_threshold", "1.0", "--max_steps", "3")
    rows = [r for r in read_metrics(out) if "loss" in r]
    assert all(r["reward"] == 1.0 for r in rows)  # only accepted groups are averaged
    draws = results["prompt_draws"]
    assert draws["drawn"] == 6 + draws["skipped"] and draws["skipped"] == sum(r["skipped"] for r in rows) > 0


def test_resume_is_exact(tmp_path):
    out, resumed = tmp_path / "full", tmp_path / "resumed"
    run_recipe("sdpo.yaml", out, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2")
    assert json.loads((out / "checkpoint-2" / "sdpo_state.json").read_text()) == {"prompts_taken": 4}
    resume_copy(out, resumed, 2)
    expected, got = losses_after(out, 2), losses_after(resumed, 2)
    assert expected.keys() == got.keys() == {3, 4}
    assert got == pytest.approx(expected, rel=1e-5)


@pytest.mark.multiprocess
def test_two_processes_under_zero3(tmp_path):
    """Two processes keep the step's groups (one each, no accumulation) and train under ZeRO-3 (sharded weights,
    generation with them gathered)."""
    out = tmp_path / "zero3"
    launch("zero3_2proc.yaml", "sdpo.yaml", out)
    results = json.loads((out / "final_results.json").read_text())
    assert results["world_size"] == 2 and results["gradient_accumulation_steps"] == 1 and results["steps"] == 2
    assert results["step_batch"]["groups"] == 2
    assert all(math.isfinite(r["loss"]) for r in read_metrics(out) if "loss" in r)
