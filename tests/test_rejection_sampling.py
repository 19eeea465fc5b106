"""Rejection sampling (book chapter 9): the four selection rules and the answer grading against the book's
formulas on fixed rows, the recipes' book settings, and a recipe end to end on the tiny profile (its stage
files, a re-run that skips finished stages, and an exact resume of the SFT stage); the stages shared out across
processes in chunks that a re-run reads back, and the refusal of DeepSpeed ZeRO-3."""

from __future__ import annotations

import json
import logging
import random
import shutil

import pytest

from conftest import RECIPES, launch, losses_after, read_metrics, run_recipe

from custom_losses.rejection_sampling import grading, selection

RULES = ("top_per_prompt", "top_k_overall", "random_per_prompt", "random_k_overall")


def records(matrix):
    return [{"question": f"Q{i}", "answer": str(i), "completions": [f"y{i},{j}" for j in range(len(r))],
             "rewards": r} for i, r in enumerate(matrix)]


# Ties inside a prompt (prompt 0: 0.9 twice; prompt 2: all equal) and across prompts (0.9 in prompts 0 and 1).
TIED = records([[0.1, 0.9, 0.3, 0.9], [0.9, 0.2, 0.8, 0.5], [0.4, 0.4, 0.4, 0.4]])
# The chapter's worked example (M=5 prompts, N=4 completions), with the book's expected picks.
CHAPTER = records([[0.7, 0.3, 0.5, 0.2], [0.4, 0.8, 0.6, 0.5], [0.9, 0.3, 0.4, 0.7], [0.2, 0.5, 0.8, 0.6],
                   [0.5, 0.4, 0.3, 0.6]])


# --- selection rules -------------------------------------------------------------------------
def test_top_per_prompt_is_the_first_argmax():
    assert selection.top_per_prompt(TIED, k=1000, seed=42) == [(0, 1), (1, 0), (2, 0)]
    assert selection.top_per_prompt(CHAPTER, 5, 42) == [(0, 0), (1, 1), (2, 0), (3, 2), (4, 3)]
    # the formula: per prompt, list.index(max) -- the first index of the maximum
    for recs in (TIED, CHAPTER):
        assert selection.top_per_prompt(recs, 0, 0) == [(i, r["rewards"].index(max(r["rewards"])))
                                                         for i, r in enumerate(recs)]


def test_top_k_overall_is_a_stable_descending_sort():
    # 0.9 three times: prompt-major order (0,1), (0,3), (1,0); then 0.8; a prompt repeats, prompt 2 is absent
    assert selection.top_k_overall(TIED, k=5, seed=42) == [(0, 1), (0, 3), (1, 0), (1, 2), (1, 3)]
    assert selection.top_k_overall(CHAPTER, 5, 42) == [(2, 0), (1, 1), (3, 2), (0, 0), (2, 3)]  # the book's
    # ties at the cut keep the earlier: k=8 ends inside prompt 2's four equal rewards 0.4
    picked = selection.top_k_overall(TIED, k=8, seed=0)
    assert picked[-3:] == [(2, 0), (2, 1), (2, 2)] and (2, 3) not in picked
    assert selection.top_k_overall(TIED, k=100, seed=0)[-1] == (0, 0)  # k above M x N: all 12, lowest last
    assert len(selection.top_k_overall(TIED, k=100, seed=0)) == 12


def test_random_per_prompt_is_one_rng_in_prompt_order():
    rng = random.Random(42)
    expected = [(i, rng.randrange(4)) for i in range(5)]
    assert selection.random_per_prompt(CHAPTER, k=1000, seed=42) == expected
    assert selection.random_per_prompt(CHAPTER, 1000, 7) != expected  # the seed matters
    assert [i for i, _ in selection.random_per_prompt(TIED, 0, 42)] == [0, 1, 2]  # one pair per prompt


def test_random_k_overall_is_a_sample_of_all_pairs():
    flat = [(i, j) for i in range(5) for j in range(4)]
    assert selection.random_k_overall(CHAPTER, k=5, seed=42) == random.Random(42).sample(flat, 5)
    picked = selection.random_k_overall(CHAPTER, k=20, seed=42)
    assert sorted(picked) == flat and picked != flat  # all distinct pairs, shuffled
    assert len(selection.random_k_overall(CHAPTER, k=100, seed=42)) == 20  # capped at M x N


def test_pairs_of_and_dispatch():
    rows = selection.pairs_of(TIED, selection.select("top_per_prompt", TIED, 1000, 42))
    assert [(r["question"], r["completion"], r["reward"]) for r in rows] == [
        ("Q0", "y0,1", 0.9), ("Q1", "y1,0", 0.9), ("Q2", "y2,0", 0.4)]
    with pytest.raises(ValueError, match="unknown selection rule"):
        selection.select("top_everything", TIED, 1, 1)


# --- grading -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, answer", [
    ("so the total is \\boxed{72}.", "72"),
    ("first \\boxed{3}, then I checked: \\boxed{5}", "5"),  # the LAST boxed
    ("\\boxed{\\frac{1}{2}} hmm", "2"),  # nested braces: the last number inside
    ("\\boxed{\\text{\\$1,234.50}}", "1234.50"),  # commas removed, decimals kept
    ("\\boxed{-7}", "-7"),  # negative
    ("She pays $1,200 in rent and $35 for power, so 1,235 dollars", "1235"),  # no boxed: last number of the text
    ("\\boxed{12} and then 99 more words 100", "12"),  # a boxed wins over later numbers
    ("\\boxed{x+y}", "x+y"),  # a boxed without a number: its text
    ("the answer is \\boxed{4", "4"),  # unclosed boxed: no boxed, last number of the text
    ("no numbers at all", None),
    ("", None),
])
def test_extract_answer(text, answer):
    assert grading.extract_answer(text) == answer


def test_correct_within_1e_6_of_the_gold_number():
    assert grading.is_correct("18", "18") and grading.is_correct("18.0000001", "18")
    assert not grading.is_correct("18.00001", "18") and not grading.is_correct("-18", "18")
    assert grading.is_correct("1234.50", "1234.5") and not grading.is_correct(None, "3")
    assert grading.is_correct("x+y", " x+y ") and not grading.is_correct("x+y", "3")
    assert grading.accuracy(["\\boxed{18}", "it is 17", "nothing"], ["18", "18", "18"]) == pytest.approx(1 / 3)


@pytest.mark.parametrize("text, book, nested", [
    ("\\boxed{\\frac{1}{2}}", "2", "2"),  # one level of braces: both rules read it
    ("\\boxed{\\frac{\\sqrt{3}}{2}} so 7", "7", "2"),  # two levels: the book's rule sees no boxed, last number
    ("\\boxed{3} then \\boxed{\\text{\\textbf{5}}}", "3", "5"),  # ... or the earlier boxed it can read
    ("\\boxed{\\text{\\$1,234.50}}", "1234.50", "1234.50"),
])
def test_the_books_boxed_rule_reads_one_level_of_braces(text, book, nested):
    assert grading.extract_answer(text) == book  # the default is the book's
    assert grading.extract_answer(text, "book") == book and grading.extract_answer(text, "nested") == nested
    assert grading.accuracy([text], [book]) == 1.0 and grading.accuracy([text], [book], "nested") == (book == nested)


def test_boxed_rule_is_a_recipe_option_with_a_one_line_error(tmp_path):
    from rlhf_recipes.config import load_recipe

    path = str(RECIPES / "rejection_sampling_top_per_prompt.yaml")
    base = [path, "--profile", "tiny", "--output_dir", str(tmp_path)]
    assert load_recipe(base).training.boxed_rule == "book"
    assert load_recipe([*base, "--boxed_rule", "nested"]).training.boxed_rule == "nested"
    from rlhf_recipes.errors import RecipeError

    with pytest.raises(RecipeError, match="boxed_rule must be one of book, nested, got 'deep'"):
        load_recipe([*base, "--boxed_rule", "deep"])
    with pytest.raises(ValueError, match="boxed_rule must be one of book, nested"):
        grading.extract_answer("x", "deep")


# --- recipes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("rule", RULES)
def test_recipe_resolves_with_the_books_settings(rule, tmp_path):
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.book_reference import book_reference
    from rlhf_recipes.registry import ALGORITHMS

    book = {"top_per_prompt": ("ohm3xnga", 0.790), "random_per_prompt": ("y3pbcla7", 0.795),
            "top_k_overall": ("w75hklzs", 0.800), "random_k_overall": ("egeyr1q3", 0.770)}[rule]
    path = str(RECIPES / f"rejection_sampling_{rule}.yaml")
    recipe = load_recipe([path, "--bf16", "false", "--output_dir", str(tmp_path)])  # bf16 needs a GPU
    t, a = recipe.training, recipe.args
    assert t.selection_rule == rule and book_reference(recipe.algorithm.name).runs == (book[0],)
    assert book_reference(recipe.algorithm.name).results == {"test_accuracy": book[1], "base_test_accuracy": 0.760}
    assert recipe.model.model_name_or_path == "Qwen/Qwen3-1.7B" and a.dataset == "gsm8k" and a.num_samples == 1000
    assert a.system_prompt == "Please reason step by step, and check your final answer within \\boxed{}."
    assert (t.num_completions, t.rollout_temperature, t.rollout_top_p, t.rollout_top_k, t.rollout_min_p,
            t.rollout_max_new_tokens, t.enable_thinking) == (8, 0.8, 0.95, 20, 0.0, 512, False)
    assert t.reward_model == "nvidia/AceMath-7B-RM" and (t.selection_k, t.selection_seed, t.seed) == (1000, 42, 42)
    assert (t.learning_rate, t.lr_scheduler_type.value, t.warmup_steps, t.max_grad_norm, t.weight_decay) == (
        5e-6, "constant", 0, 1.0, 0.0)
    assert (t.per_device_train_batch_size, t.gradient_accumulation_steps, t.num_train_epochs) == (2, 4, 2)
    # The book's batching (rejection_sampling/config.py and configs/*.yaml): 8 prompts per generate call, 2
    # sequences per reward-model forward; the SFT takes an epoch's partial last step, each loss / batch_acc.
    assert (t.rollout_batch_size, t.score_batch_size) == (8, 2)
    assert (t.drop_partial_steps, t.partial_step_scale) == (False, "accumulation")
    assert (t.max_length, t.truncation_mode, t.completion_only_loss) == (1024, "keep_end", True)
    assert (t.eval_questions, t.eval_split, t.eval_max_new_tokens) == (200, "test", 512)
    assert ALGORITHMS[recipe.algorithm.name].family == "rejection_sampling"
    assert load_recipe([path, "--profile", "tiny", "--output_dir", str(tmp_path)]).training.reward_model == "tiny"


def test_the_books_batching_is_the_default(tmp_path):
    from custom_losses.rejection_sampling.config import RejectionSamplingConfig
    from rlhf_recipes.registry import ALGORITHMS

    cfg = RejectionSamplingConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert (cfg.rollout_batch_size, cfg.score_batch_size, cfg.partial_step_scale) == (8, 2, "accumulation")
    for rule in RULES:
        defaults = ALGORITHMS[f"rejection_sampling_{rule}"].defaults
        assert defaults["drop_partial_steps"] is False and defaults["partial_step_scale"] == "accumulation"


def test_micro_batch_divisor_of_a_partial_step():
    from custom_losses.sft.steps import micro_batch_divisor

    # A whole step of 4 micro-batches: both divide by 4. A last step of 1 micro-batch out of 4: the book's
    # rejection sampling divides by 4 (loss / cfg.batch_acc), transformers by 1.
    assert [micro_batch_divisor(4, 4, s) for s in ("accumulation", "taken")] == [4, 4]
    assert [micro_batch_divisor(1, 4, s) for s in ("accumulation", "taken")] == [4, 1]
    with pytest.raises(ValueError, match="partial_step_scale"):
        micro_batch_divisor(1, 4, "mean")


@pytest.mark.parametrize("scale, divisor", [("accumulation", 4), ("taken", 1)])
def test_the_partial_last_steps_gradient_is_its_loss_over_the_accumulation(tmp_path, scale, divisor):
    """A last step of 1 micro-batch out of 4 (transformers sets current_gradient_accumulation_steps to 1 there):
    BookSFTTrainer's backward is that micro-batch's token-mean loss / 4 (the book's `loss / cfg.batch_acc`), and the
    value it returns for the log is the micro-batch's loss (the book logs the mean over the step's micro-batches)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from custom_losses.sft.config import BookSFTConfig
    from custom_losses.sft.trainer import BookSFTTrainer
    from rlhf_recipes.tiny import tiny_model_path

    rows = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
             "completion": [{"role": "assistant", "content": f"It is {2 * i}."}]} for i in range(5)]
    args = BookSFTConfig(output_dir=str(tmp_path), per_device_train_batch_size=1, gradient_accumulation_steps=4,
                         report_to="none", use_cpu=True, bf16=False, max_length=64, partial_step_scale=scale)
    trainer = BookSFTTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_path()), args=args,
                             train_dataset=Dataset.from_list(rows),
                             processing_class=AutoTokenizer.from_pretrained(tiny_model_path()))
    batch = next(iter(trainer.get_train_dataloader()))
    model = trainer.model
    trainer.current_gradient_accumulation_steps = 1
    logged = trainer.training_step(model, batch)
    ours = [p.grad.clone() for p in model.parameters()]
    assert trainer.current_gradient_accumulation_steps == 1
    model.zero_grad()
    loss = trainer.compute_loss(model, batch)
    (loss / divisor).backward()
    for a, b in zip(ours, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b)
    assert float(logged) == pytest.approx(float(loss.detach()), rel=1e-5)


def test_the_sft_stage_takes_the_partial_last_step(tmp_path):
    """6 pairs, 1 per micro-batch, 4 micro-batches per step: each epoch is a whole step and a partial one of 2
    micro-batches (the book's DataLoader drop_last=False and its `is_last_in_epoch` step): 2 epochs, 4 steps."""
    out = tmp_path / "partial"
    results = run_recipe("rejection_sampling_top_per_prompt.yaml", out, "--effective_batch_size", "4")
    assert results["selection"]["pairs"] == 6 and results["steps"] == 4
    epochs = [r["epoch"] for r in read_metrics(out) if "loss" in r]
    assert epochs[1] == pytest.approx(1.0) and epochs[-1] == pytest.approx(2.0)


def test_sft_rows_train_the_completion_and_end_token_only(tmp_path):
    """With a Qwen3-style template (thinking off: an empty think block after the generation prompt), the
    trained tokens are the completion and its end token: the think block belongs to the prompt."""
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.families.rejection_sampling import FAMILY
    from rlhf_recipes.models import load_causal_lm, load_tokenizer

    recipe = load_recipe([str(RECIPES / "rejection_sampling_top_per_prompt.yaml"), "--profile", "tiny",
                          "--output_dir", str(tmp_path)])
    tokenizer = load_tokenizer(recipe.model)
    tokenizer.chat_template = (
        "{%- for m in messages %}{%- if m['role'] == 'assistant' %}"
        "{{- '<|im_start|>assistant\n<think>\n\n</think>\n\n' + m['content'] + '<|im_end|>\n' }}"
        "{%- else %}{{- '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{%- endif %}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
        "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}"
        "{%- endif %}{%- endif %}")
    rows = FAMILY.sft_rows(recipe, [{"question": "What is 2 + 3?", "completion": "2 + 3 = 5, so \\boxed{5}"}])
    assert rows[0]["prompt"][0]["role"] == "system" and rows[0]["chat_template_kwargs"] == {"enable_thinking": False}
    # the SFT stage's trainer, built as the family builds it once the selection exists
    trainer = super(type(FAMILY), FAMILY).build_trainer(recipe, load_causal_lm(recipe.model), tokenizer, rows,
                                                        None, [])
    example = trainer.train_dataset[0]
    trained = [t for t, label in zip(example["input_ids"], example["labels"]) if label != -100]
    assert tokenizer.decode(trained) == "2 + 3 = 5, so \\boxed{5}<|im_end|>\n"
    assert "<think>" in tokenizer.decode(example["input_ids"]) and "think" not in tokenizer.decode(trained)


def test_a_missing_reward_model_is_a_one_line_error_before_anything_loads(tmp_path, capsys):
    run_recipe("rejection_sampling_top_k_overall.yaml", tmp_path / "run", "--reward_model", f"rm:{tmp_path}/no-rm",
               expect=2)
    assert "reward_model" in capsys.readouterr().err and not (tmp_path / "run" / "rollouts.jsonl").exists()


def test_zero3_is_a_one_line_error_before_anything_loads(tmp_path, monkeypatch, capsys):
    """What `accelerate launch --config_file accelerate_configs/zero3.yaml` sets: refused with the fix."""
    pytest.importorskip("deepspeed")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    run_recipe("rejection_sampling_top_per_prompt.yaml", tmp_path / "run", expect=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not run under DeepSpeed ZeRO-3" in err[0] and "4gpu.yaml" in err[0], err
    assert not (tmp_path / "run" / "rollouts.jsonl").exists()


def test_a_stage_in_chunks_reads_back_the_chunks_a_crashed_run_finished(tmp_path):
    """Chunks of 4 items: the chunk file an earlier run left (items 4-8) is read, not computed again; the others
    are computed and kept until the stage file is written, then the chunk folder goes."""
    from rlhf_recipes.families.rejection_sampling_stages import (
        Processes, parts_dir, read_jsonl, sharded, stage, write_jsonl,
    )

    path = tmp_path / "rollouts.jsonl"
    parts = parts_dir(path)
    parts.mkdir()
    write_jsonl(parts / "0000004-0000008.jsonl", [{"item": i, "by": "the crashed run"} for i in range(4, 8)])
    computed = []

    def compute_chunk(first, chunk):
        computed.append(first)
        assert not path.exists() and (parts / "0000004-0000008.jsonl").exists()
        return [{"item": i, "by": "this run"} for i in chunk]

    procs = Processes()
    rows = stage(path, "1 generate", lambda: sharded("1 generate", range(10), 4, compute_chunk, procs, parts),
                 processes=procs, parts=parts)
    assert computed == [0, 8] and [r["item"] for r in rows] == list(range(10))
    assert [r["by"] for r in rows] == ["this run"] * 4 + ["the crashed run"] * 4 + ["this run"] * 2
    assert read_jsonl(path) == rows and not parts.exists()


def test_chunk_seeds_differ_by_chunk_and_by_seed():
    from rlhf_recipes.families.rejection_sampling_stages import chunk_seed

    seeds = {chunk_seed(seed, first) for seed in (0, 1, 42) for first in (0, 8, 16)}
    assert len(seeds) == 9 and chunk_seed(42, 8) == chunk_seed(42, 8)


# --- end to end on the tiny profile ---------------------------------------------------------------
STAGE_FILES = ("rollouts.jsonl", "scored.jsonl", "selection.jsonl", "eval_base.jsonl")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """top_per_prompt on tiny: 6 fixture prompts x 4 completions; 6 pairs, 1 x 2 per step, 2 epochs = 6 steps,
    a checkpoint every 2 steps."""
    out = tmp_path_factory.mktemp("rs") / "top"
    results = run_recipe("rejection_sampling_top_per_prompt.yaml", out, "--save_strategy", "steps",
                         "--save_steps", "2")
    return out, results


def test_recipe_runs_every_stage(finished):
    out, results = finished
    for name in (*STAGE_FILES, "eval_tuned.jsonl", "config.yaml", "metrics.jsonl", "final_results.json",
                 "curves.png"):
        assert (out / name).is_file(), name
    from rlhf_recipes.families.rejection_sampling import read_jsonl

    scored = read_jsonl(out / "scored.jsonl")
    fixture = [json.loads(line) for line in (RECIPES.parent / "rlhf_recipes/data/fixtures/gsm8k/train.jsonl")
               .read_text().splitlines()[:6]]
    assert [r["question"] for r in scored] == [f["question"] for f in fixture]
    assert [r["answer"] for r in scored] == [f["answer"].rsplit("####", 1)[1].strip().replace(",", "")
                                             for f in fixture]
    assert all(len(r["completions"]) == len(r["rewards"]) == 4 for r in scored)
    picked = read_jsonl(out / "selection.jsonl")
    assert [(p["prompt_index"], p["completion_index"]) for p in picked] == selection.top_per_prompt(scored, 0, 0)
    assert [p["completion"] for p in picked] == [scored[p["prompt_index"]]["completions"][p["completion_index"]]
                                                 for p in picked]
    assert results["status"] == "finished" and results["steps"] == 6 and results["selection"]["pairs"] == 6
    assert max(r["step"] for r in read_metrics(out)) == 6
    assert 0.0 <= results["test_accuracy"] <= 1.0 and 0.0 <= results["base_test_accuracy"] <= 1.0
    assert results["eval_questions"] == 6 and len(read_jsonl(out / "eval_tuned.jsonl")) == 6

    from rlhf_recipes.tools.results import table

    text = table([str(out)])
    assert "rejection_sampling_top_per_prompt" in text and "0.790" in text and "0.760" in text
    assert text.splitlines()[0].split()[-3:] == ["profile", "graded", "by"] and " tiny " in text.splitlines()[-1]
    assert results["grading"].startswith("boxed_rule book") and "boxed_rule book" in text  # which rule graded it
    assert all(r["boxed_rule"] == "book" for r in read_jsonl(out / "eval_tuned.jsonl"))


def test_rerun_skips_finished_stages_and_resumes_sft_exactly(finished, tmp_path, caplog):
    """An SFT stage interrupted after checkpoint-2: --resume reads stages 1-4 from their files (not rewritten:
    same mtimes) and continues the SFT with the same losses as the uninterrupted run."""
    out, results = finished
    copy = tmp_path / "copy"
    after_step_2 = {"checkpoint-4", "checkpoint-6", "eval_tuned.jsonl", "final_results.json", "model.safetensors"}
    shutil.copytree(out, copy, ignore=lambda folder, names: after_step_2 & set(names) if folder == str(out) else [])
    with caplog.at_level(logging.INFO):
        resumed = run_recipe(copy / "config.yaml", copy, "--resume", str(copy / "checkpoint-2"))
    for name in ("1 generate", "6 evaluate base", "2-3 score and cache", "4 select (top_per_prompt)"):
        assert f"stage {name}: found" in caplog.text, name
    assert "stage 6 evaluate tuned: running" in caplog.text
    for name in STAGE_FILES:
        assert (copy / name).stat().st_mtime_ns == (out / name).stat().st_mtime_ns, name
    assert losses_after(copy, 2) == pytest.approx(losses_after(out, 2), rel=1e-5)
    assert resumed["steps"] == 6 and resumed["test_accuracy"] == results["test_accuracy"]
    assert (copy / "eval_tuned.jsonl").read_text() == (out / "eval_tuned.jsonl").read_text()


@pytest.mark.parametrize("rule, pairs", [("top_k_overall", 8), ("random_per_prompt", 6), ("random_k_overall", 8)])
def test_every_rule_runs_on_tiny(rule, pairs, tmp_path):
    """The other three recipes: the selection is the rule applied to the cache (K=8 on tiny), and the SFT stage
    takes 2 epochs of pairs / 2 steps."""
    from rlhf_recipes.families.rejection_sampling import read_jsonl

    out = tmp_path / rule
    results = run_recipe(f"rejection_sampling_{rule}.yaml", out)
    scored, picked = read_jsonl(out / "scored.jsonl"), read_jsonl(out / "selection.jsonl")
    assert [(p["prompt_index"], p["completion_index"]) for p in picked] == selection.RULES[rule](scored, 8, 42)
    assert results["selection"]["pairs"] == len(picked) == pairs and results["steps"] == 2 * pairs // 2
    assert 0.0 <= results["test_accuracy"] <= 1.0


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_share_the_stages_and_write_what_one_process_writes(finished, tmp_path):
    """2 gloo processes: process 1 generates and evaluates its own chunks (its log line says which), nobody waits
    for a whole stage, and the stage files are byte for byte those of the one-process run (the same seed per
    chunk, the same batches); the SFT stage then trains 6 steps on the same selection."""
    out = tmp_path / "two"
    result = launch("ddp_2proc.yaml", "rejection_sampling_top_per_prompt.yaml", out)
    log = result.stdout + result.stderr
    # tiny: 6 prompts in chunks of rollout_batch_size 4; 6 evaluation questions in chunks of 4
    assert "stage 1 generate: process 1 of 2 did prompts 4-6 (1 of 2 chunks" in log, log[-3000:]
    assert "stage 1 generate: process 0 of 2 did prompts 0-4 (1 of 2 chunks" in log
    assert "stage 2-3 score: process 1 of 2 did prompts 4-6" in log
    assert "stage 6 evaluate base: process 1 of 2 did questions 4-6" in log
    one, _ = finished
    for name in STAGE_FILES:
        assert (out / name).read_text() == (one / name).read_text(), name
    assert not list(out.glob("*.parts")), "chunk folders are removed once their stage file is written"
    results = json.loads((out / "final_results.json").read_text())
    assert results["world_size"] == 2 and results["status"] == "finished" and results["steps"] == 6
