"""Reward-model recipes end to end on the tiny profile; evaluation; a trained RM as a GRPO reward."""

from __future__ import annotations

import json
import math

import pytest

from conftest import RECIPES, launch, read_metrics, run_recipe
from rlhf_recipes.config import load_recipe
from rlhf_recipes.registry import ALGORITHMS

FAMILY = sorted(name for name, a in ALGORITHMS.items() if a.family == "reward_model")
OUTPUT_FILES = ("config.yaml", "metrics.jsonl", "final_results.json", "curves.png", "config.json", "model.safetensors")


def test_family_is_complete():
    assert FAMILY == ["orm", "preference_rm", "prm"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each reward-model recipe once, on the tiny profile (shared by the tests below)."""
    root = tmp_path_factory.mktemp("rm")
    cache: dict[str, tuple] = {}

    def get(recipe: str):
        if recipe not in cache:
            out = root / recipe
            cache[recipe] = (out, run_recipe(f"{recipe}.yaml", out))
        return cache[recipe]

    return get


def _check_run(out, results, algorithm):
    for name in OUTPUT_FILES:
        assert (out / name).is_file(), f"{name} missing"
    assert results["algorithm"] == algorithm and results["steps"] == 4 and not results["interrupted"]
    rows = read_metrics(out)
    train = [r for r in rows if "loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3, 4] and all(math.isfinite(r["loss"]) for r in train)
    evals = [r for r in rows if "eval_loss" in r]
    assert [r["step"] for r in evals] == [2, 4]  # the tiny profile evaluates every 2 steps
    for metric in ALGORITHMS[algorithm].key_metrics:
        assert any(metric in r for r in rows), f"{metric} not logged"
    saved = json.loads((out / "config.json").read_text())["reward_model"]
    assert saved["algorithm"] == algorithm and saved["max_length"] == 256
    for split in ("train", "eval"):
        lengths = results["data"][split]["lengths"]
        assert lengths["sequences"] > 0 and 0 < lengths["mean"] <= lengths["p99"] <= lengths["max"]
        assert 0.0 <= lengths["fraction_truncated"] <= 1.0
    return train, evals


def test_preference_rm_end_to_end(runs):
    out, results = runs("preference_rm")
    train, evals = _check_run(out, results, "preference_rm")
    ev = results["evaluation"]
    assert ev["num_pairs"] == results["data"]["eval"]["pairs"] == 12  # 48 tiny rows, eval_fraction 0.25
    assert 0.0 <= ev["accuracy"] <= 1.0 and math.isfinite(ev["margin"])
    assert ev["loss"] == pytest.approx(evals[-1]["eval_loss"], rel=1e-4)  # TRL's own eval, same pairs, same model
    assert {"accuracy", "margin"} <= set(train[-1])
    demo = results["demo"]
    assert demo[0]["example"].startswith("written") and len(demo) == 3
    assert all(isinstance(d["prefers_better"], bool) and math.isfinite(d["score_better"]) for d in demo)


def test_evaluate_rm_command_reproduces_the_final_evaluation(runs, capsys):
    out, results = runs("preference_rm")
    from rlhf_recipes.tools.cli import main as rlhf_recipes

    assert rlhf_recipes(["evaluate", str(out), "--batch_size", "3"]) == 0
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "margin" in printed and "demo: written" in printed
    saved = json.loads((out / "eval" / "heldout.json").read_text())
    details = saved["details"]
    assert details["kind"] == "preference" and details["split"] == "eval"
    for key in ("accuracy", "margin", "num_pairs"):
        assert details["evaluation"][key] == pytest.approx(results["evaluation"][key], abs=1e-5)
    assert saved["metrics"]["accuracy"] == pytest.approx(results["evaluation"]["accuracy"], abs=1e-5)
    # The wrong recipe for this model is refused with a clear message.
    assert rlhf_recipes(["evaluate", str(out), "--recipe", str(RECIPES / "prm.yaml"), "--profile", "tiny"]) == 2
    assert "is a preference reward model" in capsys.readouterr().err


def test_hh_rm_truncates_and_drops_identical_pairs(runs):
    out, results = runs("hh_rm")
    _check_run(out, results, "preference_rm")
    data = results["data"]
    dropped = sum(data[s]["dropped"].get("identical after truncation", 0) for s in ("train", "eval"))
    assert dropped > 0  # the tiny profile's 256 tokens cut long dialogues before their last turn
    assert data["train"]["pairs"] + data["eval"]["pairs"] + dropped == data["train"]["rows"] + data["eval"]["rows"]
    assert data["eval"]["lengths"]["fraction_truncated"] > 0
    assert results["evaluation"]["num_pairs"] == data["eval"]["pairs"]


def test_orm_end_to_end(runs):
    out, results = runs("orm")
    _, evals = _check_run(out, results, "orm")
    ev = results["evaluation"]
    # 6 held-out prompts; under the book's long system prompt the tiny byte-level tokenizer pushes every rollout of
    # some of them past max_length (skipped, as the book does), so fewer prompts are ranked.
    assert 2 <= ev["num_prompts"] <= results["data"]["eval"]["rows"] == 6
    assert ev["num_rollouts"] == results["data"]["eval"]["rollouts"]
    for key in ("top1_accuracy", "pairwise_accuracy", "random_top1", "oracle_top1"):
        assert 0.0 <= ev[key] <= 1.0
        # Trainer's distributed eval loop and the final evaluation pool the same predictions.
        assert ev[key] == pytest.approx(evals[-1][f"eval_{key}"], abs=1e-6)
    assert [d["example"].startswith("GSM8K test: correct vs perturbed") for d in results["demo"]] == [True, True]


def test_prm_end_to_end(runs):
    out, results = runs("prm")
    _, evals = _check_run(out, results, "prm")
    ev = results["evaluation"]
    assert ev["num_steps"] > 0 and 0.0 <= ev["step_accuracy"] <= 1.0
    assert ev["step_accuracy"] == pytest.approx(evals[-1]["eval_step_accuracy"], abs=1e-6)
    assert ev["majority_baseline"] == pytest.approx(evals[-1]["eval_majority_baseline"], abs=1e-6)
    demo = results["demo"]
    assert len(demo) == 4 and all(len(d["p_good"]) == len(d["steps"]) for d in demo)
    # the perturbation is named on the perturbed trace, not on the correct one ("correct (final answer 18 -> 21)")
    assert [d["example"] == "GSM8K test, correct" for d in demo] == [True, False, True, False]
    assert all(d["example"].startswith("GSM8K test, perturbed (final answer ") for d in demo[1::2])
    assert json.loads((out / "config.json").read_text())["id2label"] == {"0": "bad", "1": "neutral", "2": "good"}


@pytest.mark.multiprocess
def test_orm_two_processes_evaluates_like_one(runs, tmp_path):
    """ZeRO-3 over 2 gloo processes: same effective batch, and the same held-out numbers as one process, from a
    final evaluation on partitioned weights (the reward-model family's ZeRO-3 run; DDP's gathering of evaluation
    rows is the same accelerate call)."""
    _, single = runs("orm")
    out = tmp_path / "orm_zero3"
    launch("zero3_2proc.yaml", "orm.yaml", out)
    results = json.loads((out / "final_results.json").read_text())
    assert results["world_size"] == 2 and results["effective_batch_size"] == 4
    assert results["steps"] == single["steps"] and not results["interrupted"]
    assert all(math.isfinite(r["loss"]) for r in read_metrics(out) if "loss" in r)
    last_eval = [r for r in read_metrics(out) if "eval_loss" in r][-1]
    for key in ("top1_accuracy", "pairwise_accuracy", "num_rollouts"):
        assert results["evaluation"][key] == pytest.approx(single["evaluation"][key], abs=1e-4)
    for key in ("top1_accuracy", "pairwise_accuracy"):  # gathered across both processes without duplicates
        assert last_eval[f"eval_{key}"] == pytest.approx(results["evaluation"][key], abs=1e-6)


def test_trained_rm_scores_completions_in_a_grpo_run(runs, tmp_path):
    """Phase 2 of the classic pipeline: the tiny HH reward model is the reward of a tiny GRPO run."""
    import rewards
    from rewards.reward_model import reward_from_spec

    rm_dir, _ = runs("hh_rm")
    reward = reward_from_spec(f"rm:{rm_dir}", batch_size=4)
    assert reward.__name__ == "rm_hh_rm"
    direct = reward(prompts=[[{"role": "user", "content": "How do I bake bread?"}]] * 2,
                    completions=[[{"role": "assistant", "content": "Mix flour, water, yeast; knead; bake."}],
                                 [{"role": "assistant", "content": "No."}]])
    assert len(direct) == 2 and all(math.isfinite(x) for x in direct) and direct[0] != direct[1]
    rewards.register(reward)
    try:
        out = tmp_path / "grpo"
        run_recipe("grpo.yaml", out, "--reward_funcs", reward.__name__, "--reward_weights", "1.0")
    finally:
        rewards.REWARDS.pop(reward.__name__, None)
    logged = [r for r in read_metrics(out) if f"rewards/{reward.__name__}/mean" in r]
    assert logged and all(math.isfinite(r[f"rewards/{reward.__name__}/mean"]) for r in logged)
    assert reward.scorer.model is not None and not reward.scorer.model.training


def test_lora_reward_model_is_merged_for_evaluation_and_rewards(tmp_path):
    from rewards.reward_model import reward_from_spec

    out = tmp_path / "lora"
    results = run_recipe("preference_rm.yaml", out, "--use_peft", "true", "--lora_r", "4",
                         "--lora_target_modules", "q_proj,v_proj")
    assert (out / "adapter_config.json").is_file() and (out / "merged" / "config.json").is_file()
    assert json.loads((out / "merged" / "config.json").read_text())["reward_model"]["kind"] == "preference"
    assert results["evaluation"]["num_pairs"] == 12
    reward = reward_from_spec(f"rm:{out}")
    assert reward.__name__ == "rm_lora" and len(reward(prompts=["Hi"], completions=["Hello"])) == 1
    # The same folder as PPO's value model (hh_ppo.yaml's InstructGPT start): its merged/ copy, not the bare adapter
    # folder, which failed in the trainer with a traceback ("Unrecognized model ... no model_type in config.json").
    ppo = run_recipe("ppo.yaml", tmp_path / "ppo", "--value_model_path", str(out), "--max_steps", "1")
    assert ppo["value_model"]["starts_from"] == str(out / "merged")


@pytest.mark.parametrize("recipe, option, value, message", [
    ("prm.yaml", "prompt_template", "no placeholder", "must contain '{problem}'"),
    ("prm.yaml", "max_reasoning_steps", "0", "max_reasoning_steps must be >= 1"),
    ("orm.yaml", "score_reduction", "max", "score_reduction must be one of"),
    ("preference_rm.yaml", "truncation_mode", "middle", "truncation_mode must be one of"),
])
def test_invalid_options_are_refused_before_loading(recipe, option, value, message, tmp_path, capsys):
    run_recipe(recipe, tmp_path / "bad", f"--{option}", value, expect=2)
    assert message in capsys.readouterr().err


def _resolved(recipe: str) -> dict:
    # The real recipes train in bf16, which TrainingArguments refuses on a CPU-only machine.
    r = load_recipe([str(RECIPES / recipe), "--bf16", "false"])
    return {**r.resolved, "gradient_accumulation_steps": r.training.gradient_accumulation_steps}


@pytest.mark.parametrize("recipe", ["preference_rm.yaml", "orm.yaml", "prm.yaml", "hh_rm.yaml"])
def test_reward_models_keep_fp32_weights_under_bf16_autocast(recipe):
    """The book (a66b0bf): fp32 weights and optimizer state, bf16 autocast for compute."""
    import yaml

    raw = yaml.safe_load((RECIPES / recipe).read_text())
    assert raw["dtype"] == "float32" and raw["bf16"] is True
    assert load_recipe([str(RECIPES / recipe), "--bf16", "false"]).model.dtype == "float32"


def test_recipes_carry_the_books_settings():
    bt = _resolved("preference_rm.yaml")
    assert {k: bt[k] for k in ("model_name_or_path", "dataset", "dataset_shuffle_seed", "num_samples", "eval_fraction",
                               "max_length", "learning_rate", "per_device_train_batch_size",
                               "gradient_accumulation_steps", "num_train_epochs", "warmup_steps", "weight_decay",
                               "max_grad_norm", "truncation_mode")} == {
        "model_name_or_path": "Qwen/Qwen3-0.6B-Base", "dataset": "ultrafeedback", "dataset_shuffle_seed": 123,
        "num_samples": 5000, "eval_fraction": 0.1, "max_length": 512, "learning_rate": 5e-5,
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 8, "num_train_epochs": 2,
        "warmup_steps": 0.1, "weight_decay": 0.01, "max_grad_norm": 0.0, "truncation_mode": "keep_start"}
    hh = _resolved("hh_rm.yaml")
    assert hh["dataset"] == "hh_rlhf" and hh["algorithm"] == "preference_rm"
    orm = _resolved("orm.yaml")
    assert (orm["model_name_or_path"], orm["num_samples"], orm["max_rollouts_per_prompt"], orm["learning_rate"],
            orm["per_device_train_batch_size"], orm["gradient_accumulation_steps"], orm["num_train_epochs"]) == (
        "Qwen/Qwen3-0.6B", 2000, 100, 1e-5, 1, 32, 1)
    assert orm["system_prompt"] == ("Solve the math problem step by step. End with exactly one line in the form "
                                    "#### <number>. Do not write anything after that line.")  # the book's, word for word
    prm = _resolved("prm.yaml")
    assert (prm["model_name_or_path"], prm["num_samples"], prm["max_reasoning_steps"], prm["learning_rate"],
            prm["per_device_train_batch_size"], prm["gradient_accumulation_steps"], prm["num_train_epochs"],
            prm["step_separator"], prm["prompt_template"]) == (
        "Qwen/Qwen3-0.6B-Base", 2000, 12, 5e-5, 1, 16, 1, "\n<step>\n", "Problem: {problem}\nReasoning trace:\n")
