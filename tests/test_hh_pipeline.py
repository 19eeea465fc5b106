"""The classic two-phase pipeline on HH-RLHF, end to end on the tiny profile: a reward model, then PPO and
GRPO against it and DPO on the same pairs, evaluated side by side on held-out prompts."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
import yaml
from conftest import read_metrics

from lab.kl import kl_best_of_n as best_of_n_kl
from lab.pipeline import parse, run_pipeline, win_rate


def test_win_rate_and_best_of_n_kl():
    assert win_rate([1.0, 0.0, 2.0, 0.5], [0.5, 0.5, 2.0, 1.0]) == pytest.approx((1 + 0 + 0.5 + 0) / 4)
    assert best_of_n_kl(1) == 0.0 and best_of_n_kl(4) == pytest.approx(math.log(4) - 0.75)


def test_the_sampled_kl_is_the_log_ratio_of_the_two_models_log_probs():
    """lab/kl.py's sampled_kl (the pipeline's and the over-optimization study's one KL): its log-ratio sum is
    log pi(y|x) - log ref(y|x) as completion_logprobs gives them, whatever the batch; its exact part is >= 0."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlhf_recipes.generation import completion_logprobs
    from rlhf_recipes.tiny import tiny_model_path
    from lab.kl import sampled_kl

    ref = AutoModelForCausalLM.from_pretrained(tiny_model_path()).eval()
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_path()).eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for w in policy.parameters():
            w.add_(0.05 * torch.randn_like(w))
    vocab = ref.config.vocab_size
    prompts = [[int(t) for t in torch.randint(1, vocab, (n,))] for n in (3, 7, 5)]
    completions = [[int(t) for t in torch.randint(1, vocab, (n,))] for n in (4, 2, 6)]
    exact, ratio = sampled_kl(policy, ref, prompts, completions, pad_id=0, batch_size=2)
    logp = [[total for total, _ in completion_logprobs(m, prompts, completions, 0, 3)] for m in (policy, ref)]
    assert ratio == pytest.approx([a - b for a, b in zip(*logp)], abs=1e-4)
    assert all(e >= 0 for e in exact) and max(exact) > 1e-3
    assert sampled_kl(policy, ref, prompts, completions, pad_id=0, batch_size=3) == \
        (pytest.approx(exact, abs=1e-5), pytest.approx(ratio, abs=1e-5))
    # exact=False (the pipeline's: one model's full-vocabulary log-softmax alive at a time): the same log-ratio
    assert sampled_kl(policy, ref, prompts, completions, pad_id=0, batch_size=2, exact=False) == \
        ([], pytest.approx(ratio, abs=1e-5))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    out = tmp_path_factory.mktemp("hh")
    # A larger learning rate than the recipes' so that 4 tiny steps move the policies measurably.
    fast = [arg for stage in ("ppo", "grpo", "dpo") for arg in ("--stage-args", stage, "--learning_rate 1e-3")]
    return out, run_pipeline(parse(["hh", "--profile", "tiny", "--out", str(out), "--in-process", "--best-of", "4",
                                    *fast]))


@pytest.mark.slow  # the whole tiny pipeline: a reward model, then PPO, GRPO and DPO (module-scoped, once)
def test_pipeline_trains_every_stage_on_the_rms_split(pipeline):
    out, results = pipeline
    for stage in ("hh_rm", "ppo", "grpo", "dpo"):
        final = json.loads((out / stage / "final_results.json").read_text())
        assert final["steps"] == 4 and not final["interrupted"], stage
    assert json.loads((out / "hh_rm" / "final_results.json").read_text())["algorithm"] == "preference_rm"
    # Each stage ran its own recipe file (config.yaml records where it was resolved from).
    for stage, recipe in (("hh_rm", "hh_rm.yaml"), ("ppo", "hh_ppo.yaml"), ("grpo", "hh_grpo.yaml"),
                          ("dpo", "hh_dpo.yaml")):
        resolved_from = yaml.safe_load((out / stage / "config.yaml").read_text())["resolved_from"]
        assert Path(resolved_from).name == recipe, (stage, resolved_from)
    assert json.loads((out / "ppo" / "final_results.json").read_text())["value_model"]["kind"] == "separate"
    for method in ("ppo", "grpo"):  # optimized against the trained RM, with a KL penalty to the reference
        logged = {k for r in read_metrics(out / method) for k in r}
        assert "rewards/rm_hh_rm/mean" in logged and "kl" in logged, method
    # The held-out prompts are the RM's held-out pairs' prompts, never trained on.
    evaluated = results["evaluation"]["prompts"]
    rm_eval = json.loads((out / "hh_rm" / "final_results.json").read_text())["data"]["eval"]["rows"]
    assert evaluated == rm_eval > 0
    from rewards.text import prompt_text
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits

    train, held_out = load_splits(load_recipe([str(out / "ppo" / "config.yaml"), "--profile", "tiny"]))
    assert len(held_out) == evaluated
    train_prompts = {prompt_text(p) for p in train["prompt"]}
    held_out_prompts = {prompt_text(p) for p in held_out["prompt"]}
    con = sqlite3.connect(out / "ppo" / "rollouts.sqlite")
    generated_for = {row[0] for row in con.execute("SELECT prompt FROM rollouts")}
    assert generated_for and generated_for <= train_prompts and not generated_for & held_out_prompts


@pytest.mark.slow  # the whole tiny pipeline: a reward model, then PPO, GRPO and DPO (module-scoped, once)
def test_pipeline_table_has_every_method_and_the_reference(pipeline):
    out, results = pipeline
    rows = {r["method"]: r for r in results["methods"]}
    assert list(rows) == ["reference", "ppo", "grpo", "dpo", "best_of_4"]
    assert rows["reference"]["kl"] == 0.0 and rows["reference"]["win_rate"] == 0.5
    for name, row in rows.items():
        assert math.isfinite(row["mean_reward"]) and 0.0 <= row["win_rate"] <= 1.0, name
        assert math.isfinite(row["kl"]), name
    assert rows["best_of_4"]["kl"] == pytest.approx(math.log(4) - 0.75)
    assert any(abs(rows[m]["kl"]) > 1e-4 for m in ("ppo", "grpo", "dpo"))  # the trained policies moved
    saved = json.loads((out / "pipeline_results.json").read_text())
    assert [r["method"] for r in saved["methods"]] == list(rows)
    assert saved["reward_model"]["evaluation"]["num_pairs"] > 0
    table = (out / "pipeline_table.txt").read_text()
    for name in rows:
        assert name in table
    assert (out / "pipeline.png").stat().st_size > 10_000


@pytest.mark.slow  # the whole tiny pipeline: a reward model, then PPO, GRPO and DPO (module-scoped, once)
def test_pipeline_keeps_finished_stages(pipeline, capsys):
    out, _ = pipeline
    before = {s: (out / s / "final_results.json").stat().st_mtime for s in ("hh_rm", "ppo", "grpo", "dpo")}
    results = run_pipeline(parse(["hh", "--profile", "tiny", "--out", str(out), "--in-process", "--best-of", "1",
                                  "--eval-prompts", "3"]))
    assert {s: (out / s / "final_results.json").stat().st_mtime for s in before} == before  # nothing retrained
    assert [r["method"] for r in results["methods"]] == ["reference", "ppo", "grpo", "dpo"]
    assert results["evaluation"]["prompts"] == 3
    assert "win-rate" in capsys.readouterr().out
