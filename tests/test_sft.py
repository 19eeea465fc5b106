"""SFT (book chapter 4): the schedule formula, the completion mask, the dropped rows, whole-step epochs,
the mean of micro-batch means, and the recipe end to end (tiny profile; resume; two processes)."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch

from conftest import RECIPES, launch, losses_after, read_metrics, resume_copy, run_recipe
from custom_losses.schedules import book_warmup_linear, book_warmup_linear_scheduler, book_warmup_steps
from custom_losses.sft.sampler import WholeStepSampler

FIXTURE = RECIPES.parent / "rlhf_recipes" / "data" / "fixtures" / "no_robots" / "train.jsonl"
OUTPUT_FILES = ("config.yaml", "metrics.jsonl", "final_results.json", "curves.png")

# allenai/OLMo-2-0425-1B-SFT's chat template (the Tulu format), which the book copies onto OLMo-2 base.
OLMO2_SFT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<|system|>\n' + "
    "message['content'] + '\n' }}{% elif message['role'] == 'user' %}{{ '<|user|>\n' + message['content'] + '\n' }}"
    "{% elif message['role'] == 'assistant' %}{% if not loop.last %}{{ '<|assistant|>\n'  + message['content'] + "
    "eos_token + '\n' }}{% else %}{{ '<|assistant|>\n'  + message['content'] + eos_token }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}{% endfor %}"
)


def fixture_rows() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------------------
# The schedule


def test_book_schedule_formula():
    T, W = 888, 88  # the book's run: 3 x 296 steps, W = int(0.1 T)
    assert book_warmup_steps(0.1, T) == W  # transformers' get_warmup_steps takes the ceiling: 89
    assert book_warmup_steps(5, T) == 5 and book_warmup_steps(0.0, T) == 0
    assert book_warmup_linear(0, W, T) == pytest.approx(1 / 89)  # the first step is not 0
    assert book_warmup_linear(1, W, T) == pytest.approx(2 / 89)
    assert book_warmup_linear(W - 1, W, T) == pytest.approx(88 / 89)
    assert book_warmup_linear(W, W, T) == 1.0
    assert book_warmup_linear(500, W, T) == pytest.approx(388 / 800)
    assert book_warmup_linear(T - 1, W, T) == pytest.approx(1 / 800)  # the last step
    # No warmup: the decay starts at the first step.
    assert [book_warmup_linear(k, 0, 4) for k in range(4)] == [1.0, 0.75, 0.5, 0.25]
    with pytest.raises(ValueError):
        book_warmup_linear(0, 4, 4)


def test_book_scheduler_steps_and_resumes():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=5e-6)
    sched = book_warmup_linear_scheduler(opt, warmup_steps=2, total_steps=6)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])  # the LR the optimizer step uses
        opt.step()
        sched.step()
    assert seen == pytest.approx([5e-6 * f for f in (1 / 3, 2 / 3, 1.0, 3 / 4, 2 / 4, 1 / 4)])
    # A scheduler restored from its state_dict continues the same curve.
    opt2 = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=5e-6)
    first = book_warmup_linear_scheduler(opt2, 2, 6)
    for _ in range(3):
        opt2.step()
        first.step()
    restored_opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=5e-6)
    restored = book_warmup_linear_scheduler(restored_opt, 2, 6)
    restored.load_state_dict(first.state_dict())
    restored_opt.param_groups[0]["lr"] = restored.get_last_lr()[0]
    assert restored_opt.param_groups[0]["lr"] == pytest.approx(5e-6 * 3 / 4)


# --------------------------------------------------------------------------------------
# Data: the adapter, the dropped rows, the completion mask


def test_adapter_drops_rows_not_ending_with_the_assistant(caplog):
    from datasets import Dataset

    from rlhf_recipes.data.no_robots import SOURCE
    from rlhf_recipes.data.sources import DataError, normalize_rows

    rows = fixture_rows()
    not_assistant = sum(r["messages"][-1]["role"] != "assistant" for r in rows)
    assert not_assistant == 2
    with caplog.at_level(logging.WARNING):
        out = normalize_rows(Dataset.from_list(rows), SOURCE, "fixture")
    assert len(out) == len(rows) - 2
    assert "dropped 2 of 36 rows" in caplog.text and "last message is not the assistant's" in caplog.text
    # prompt = every message before the last; completion = the final assistant turn, system turns kept.
    kept = [r for r in rows if r["messages"][-1]["role"] == "assistant"]
    for row, norm in zip(kept, out):
        assert norm["prompt"] == row["messages"][:-1] and norm["completion"] == row["messages"][-1:]
    assert any(n["prompt"][0]["role"] == "system" and len(n["prompt"]) > 2 for n in out)
    bad = Dataset.from_list([{**rows[0], "messages": [{"role": "user"}]}])
    with pytest.raises(DataError, match="row 1:"):
        normalize_rows(bad, SOURCE, "bad")


def _prepared_example(tokenizer, row: dict, tmp_path):
    """The row as TRL's SFTTrainer tokenizes and labels it, through BookSFTTrainer."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM

    from custom_losses.sft.config import BookSFTConfig
    from custom_losses.sft.trainer import BookSFTTrainer
    from rlhf_recipes.data.no_robots import normalize
    from rlhf_recipes.tiny import tiny_model_path

    args = BookSFTConfig(output_dir=str(tmp_path), completion_only_loss=True, max_length=2048, report_to="none",
                         use_cpu=True, bf16=False)
    trainer = BookSFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_path()), args=args,
                             train_dataset=Dataset.from_list([normalize(row)]), processing_class=tokenizer)
    return trainer.train_dataset[0]


def test_completion_mask_is_the_final_assistant_turn(tmp_path):
    from transformers import AutoTokenizer

    from rlhf_recipes.models import copy_chat_template
    from rlhf_recipes.tiny import tiny_model_path

    # A system turn and two exchanges: only the SECOND answer is the target.
    row = next(r for r in fixture_rows() if r["messages"][0]["role"] == "system" and len(r["messages"]) == 5)
    messages, answer = row["messages"], row["messages"][-1]["content"]

    # The OLMo-2 SFT template (what the book's run trains with), copied the way the recipe does.
    donor = AutoTokenizer.from_pretrained(tiny_model_path())
    donor.chat_template = OLMO2_SFT_TEMPLATE
    donor.save_pretrained(tmp_path / "donor")
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    tokenizer.bos_token = "<|endoftext|>"  # OLMo-2's bos; the tiny tokenizer has none
    size = len(tokenizer)
    copy_chat_template(tokenizer, str(tmp_path / "donor"))
    assert tokenizer.chat_template == OLMO2_SFT_TEMPLATE and len(tokenizer) == size  # nothing added

    example = _prepared_example(tokenizer, row, tmp_path / "olmo")
    ids, labels = example["input_ids"], example["labels"]
    target = [i for i, y in zip(ids, labels) if y != -100]
    start = next(k for k, y in enumerate(labels) if y != -100)
    assert all(y != -100 for y in labels[start:]) and labels[start:] == ids[start:]  # one contiguous span, at the end
    assert tokenizer.decode(target) == answer + tokenizer.eos_token  # exactly the content and its end token
    assert target[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids[:start]) == tokenizer.apply_chat_template(
        messages[:-1], tokenize=False, add_generation_prompt=True)
    # The first answer, with its own end token, is context, not target.
    first_answer = messages[2]["content"]
    assert first_answer in tokenizer.decode(ids[:start]) and first_answer not in tokenizer.decode(target)

    # The tiny profile's ChatML template: the same rule (template(messages) minus template(prompt)) also takes
    # the newline ChatML writes after <|im_end|>.
    chatml = AutoTokenizer.from_pretrained(tiny_model_path())
    example = _prepared_example(chatml, row, tmp_path / "chatml")
    target = [i for i, y in zip(example["input_ids"], example["labels"]) if y != -100]
    assert chatml.decode(target) == answer + "<|im_end|>\n"


# --------------------------------------------------------------------------------------
# Whole optimizer steps per epoch


def test_whole_step_sampler_drops_the_leftover():
    # The book: ~9.5k rows, 32 per step -> 296 steps per epoch (transformers: ceil(2375 / 8) = 297).
    sampler = WholeStepSampler(9500, 32, seed=42)
    assert sampler.steps_per_epoch == 296 and len(sampler) == 9472 and 3 * sampler.steps_per_epoch == 888
    small = WholeStepSampler(23, 4, seed=0)
    epochs = []
    for epoch in range(2):
        small.set_epoch(epoch)
        order = list(small)
        assert len(order) == 20 and len(set(order)) == 20 and set(order) <= set(range(23))
        assert order == list(small)  # the same epoch gives the same order (resume, every process)
        epochs.append(order)
    assert epochs[0] != epochs[1]
    follows = WholeStepSampler(23, 4, seed=0, epoch_of=lambda: 1)
    assert list(follows) == epochs[1]
    with pytest.raises(ValueError, match="fewer than one optimizer step"):
        WholeStepSampler(3, 4)


def _write_rows(path, n: int):
    rows = [r for r in fixture_rows() if r["messages"][-1]["role"] == "assistant"][:n]
    assert len(rows) == n
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("drop, expected", [("true", 2 * 5), ("false", 2 * 6)])
def test_steps_per_epoch_on_a_constructed_dataset(drop, expected, tmp_path):
    # 23 rows, 4 per optimizer step (2 x 2 accumulation), 2 epochs: 5 whole steps per epoch, 3 rows left over.
    data = _write_rows(tmp_path / "rows.jsonl", 23)
    out = tmp_path / "run"
    results = run_recipe("sft.yaml", out, "--data_files", str(data), "--max_steps", "-1", "--num_train_epochs", "2",
                         "--drop_partial_steps", drop)
    assert results["steps"] == expected
    epochs = [r["epoch"] for r in read_metrics(out) if "loss" in r]
    assert epochs[-1] == pytest.approx(2.0)
    if drop == "true":
        assert results["data"]["steps_per_epoch"] == 5 and results["data"]["rows_dropped_per_epoch"] == 3


def test_trainer_sampler_follows_the_epoch_of_the_global_step(tmp_path):
    """After a resume mid-epoch, accelerate's set_epoch does not reach a sampler under its process shard:
    the trainer gives the sampler its epoch from the optimizer steps taken."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from custom_losses.sft.config import BookSFTConfig
    from custom_losses.sft.trainer import BookSFTTrainer
    from rlhf_recipes.data.no_robots import normalize
    from rlhf_recipes.tiny import tiny_model_path

    rows = [normalize(r) for r in fixture_rows() if r["messages"][-1]["role"] == "assistant"][:23]
    args = BookSFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, gradient_accumulation_steps=2,
                         report_to="none", use_cpu=True, bf16=False, max_length=256, drop_partial_steps=True, seed=7)
    trainer = BookSFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_path()), args=args,
                             train_dataset=Dataset.from_list(rows), processing_class=AutoTokenizer.from_pretrained(
                                 tiny_model_path()))
    trainer.get_train_dataloader()
    sampler = trainer._whole_step_sampler
    assert sampler.steps_per_epoch == 5 and len(sampler) == 20
    reference = WholeStepSampler(23, 4, seed=7)
    for step, epoch in ((0, 0), (4, 0), (5, 1), (7, 1), (10, 2)):
        trainer.state.global_step = step
        reference.set_epoch(epoch)
        assert list(sampler) == list(reference), (step, epoch)
    reference.set_epoch(0)
    assert list(sampler) != list(reference)


# --------------------------------------------------------------------------------------
# The step's loss: the mean of the micro-batch means


def test_step_loss_is_the_mean_of_micro_batch_means(tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from custom_losses.sft.config import BookSFTConfig
    from custom_losses.sft.trainer import BookSFTTrainer
    from rlhf_recipes.data.no_robots import normalize
    from rlhf_recipes.tiny import tiny_model_path

    path = tiny_model_path()

    def peaked_model():
        # A random tiny model predicts nearly uniformly (every token's loss ~ log V), which makes both reductions
        # agree; larger (tied) embeddings spread the per-token losses so that they differ.
        model = AutoModelForCausalLM.from_pretrained(path)
        with torch.no_grad():
            model.get_input_embeddings().weight.mul_(8.0)
        return model

    tokenizer = AutoTokenizer.from_pretrained(path)
    # Two micro-batches of one row each: a one-word answer and a long one (few vs many target tokens).
    short = next(r for r in fixture_rows() if r["messages"][-1]["content"] == "Negative.")
    long = max(fixture_rows(), key=lambda r: len(r["messages"][-1]["content"]) if r["messages"][-1]["role"] == "assistant"
               else 0)
    rows = [normalize(short), normalize(long)]
    args = BookSFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=1, gradient_accumulation_steps=2,
                         max_steps=1, logging_steps=1, learning_rate=1e-3, report_to="none", save_strategy="no",
                         use_cpu=True, max_length=256, drop_partial_steps=True, book_lr_schedule=True,
                         completion_only_loss=True, bf16=False)  # TRL's default bf16 autocasts, also on CPU
    trainer = BookSFTTrainer(model=peaked_model(), args=args, train_dataset=Dataset.from_list(rows),
                             processing_class=tokenizer)
    assert trainer.model_accepts_loss_kwargs is False
    # The two micro-batches of the first step, from the trainer's own dataloader (same sampler, epoch 0).
    loader = iter(trainer.get_train_dataloader())
    micro = [next(loader), next(loader)]
    trainer.train()
    logged = next(r["loss"] for r in trainer.state.log_history if "loss" in r)

    model = peaked_model()  # the weights before the step
    means, sums, counts = [], [], []
    with torch.no_grad():
        for batch in micro:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
            labels = batch["labels"][:, 1:]
            mask = labels != -100
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none")
            sums.append((nll * mask).sum().item())
            counts.append(mask.sum().item())
            means.append(sums[-1] / counts[-1])
    assert sorted(counts)[1] > 10 * sorted(counts)[0]  # otherwise both reductions agree and the test could not tell them apart
    book = sum(means) / len(means)
    token_mean = sum(sums) / sum(counts)  # transformers' default over the accumulated step
    assert abs(book - token_mean) > 0.01 * book
    assert logged == pytest.approx(book, rel=1e-5)


# --------------------------------------------------------------------------------------
# The recipe end to end


def test_recipe_runs_end_to_end(tmp_path, caplog):
    out = tmp_path / "sft"
    with caplog.at_level(logging.INFO):
        results = run_recipe("sft.yaml", out, "--warmup_steps", "0.5", "--max_grad_norm", "0.01")
    for name in OUTPUT_FILES:
        assert (out / name).is_file(), f"{name} missing"
    assert results["algorithm"] == "sft" and results["steps"] == 4 and not results["interrupted"]
    assert results["world_size"] == 1 and results["effective_batch_size"] == 4
    assert results["gradient_accumulation_steps"] == 2
    assert "dropped 2 of 36 rows" in caplog.text  # rows not ending with the assistant, counted in the log
    assert results["data"] == {"examples": 34, "cut_by_max_length": 0, "steps_per_epoch": 8,
                               "rows_dropped_per_epoch": 2}
    rows = [r for r in read_metrics(out) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for r in rows:
        assert {"loss", "grad_norm", "learning_rate", "epoch"} <= set(r) and math.isfinite(r["loss"])
    assert all(r["grad_norm"] > 0.01 for r in rows)  # the norm before clipping (clipped to 0.01)
    # T = 4, W = int(0.5 x 4) = 2: the book's warmup from lr/3, then linear decay; the logged LR is the step's.
    assert [r["learning_rate"] for r in rows] == pytest.approx([5e-6 * f for f in (1 / 3, 2 / 3, 1.0, 0.5)])
    assert [r["epoch"] for r in rows] == pytest.approx([0.125, 0.25, 0.375, 0.5])


def test_resume_mid_second_epoch_is_exact(tmp_path):
    # 8 steps per epoch: checkpoint 9 lies in epoch 1, where the sampler's order comes from the global step.
    out = tmp_path / "straight"
    run_recipe("sft.yaml", out, "--max_steps", "11", "--save_strategy", "steps", "--save_steps", "3",
               "--learning_rate", "1e-3")
    resumed = tmp_path / "resumed"
    results = resume_copy(out, resumed, 9)
    assert results["steps"] == 11
    expected, got = losses_after(out, 9), losses_after(resumed, 9)
    assert sorted(got) == [10, 11]
    for step in got:
        assert got[step] == pytest.approx(expected[step], rel=1e-5), step


@pytest.mark.multiprocess
def test_two_processes_keep_the_effective_batch(tmp_path):
    """Under ZeRO-3 (the family's sharded run). SFT's trainer over two DDP processes is rejection sampling's SFT
    stage (tests/test_rejection_sampling.py), and DDP's effective batch is checked against one process step by step
    in tests/test_multinode.py; what depends on the world size here (accumulation, steps per epoch) is computed
    the same way under either."""
    out = tmp_path / "zero3"
    launch("zero3_2proc.yaml", "sft.yaml", out)
    results = json.loads((out / "final_results.json").read_text())
    assert results["world_size"] == 2  # a silent fallback to one process would show 1
    assert results["effective_batch_size"] == 4 and results["gradient_accumulation_steps"] == 1
    assert results["steps"] == 4 and results["data"]["steps_per_epoch"] == 8
    assert all(math.isfinite(r["loss"]) for r in read_metrics(out) if "loss" in r)
