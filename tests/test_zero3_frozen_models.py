"""Frozen models loaded next to a DeepSpeed ZeRO-3 engine (a reward model scoring rollouts, PPO's value model)
must hold their whole weights: transformers partitions every model it loads while a ZeRO-3 config is registered,
and a model that is not an engine never gathers its shards. And the families that cannot run under ZeRO-3 say so
before anything loads."""

from __future__ import annotations

import json
import math

import pytest

from conftest import launch, read_metrics


@pytest.fixture
def tiny_rm(tmp_path):
    """A preference reward model folder as a reward-model run leaves it: the tiny backbone with a one-logit
    head (random: this is about loading and scoring, not about what it scores)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlhf_recipes.tiny import tiny_model_path

    folder = tmp_path / "tiny_rm"
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_path(), num_labels=1)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model_path()).save_pretrained(folder)
    return folder


def test_a_reward_model_loads_whole_while_a_zero3_config_is_registered(tiny_rm):
    """In-process: the state transformers is in during a ZeRO-3 run (its weakref to the DeepSpeed config set)."""
    pytest.importorskip("deepspeed")
    from transformers.integrations import deepspeed as hf_deepspeed
    from transformers.integrations import HfDeepSpeedConfig

    from rewards.reward_model import reward_from_spec

    config = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1})
    try:
        assert hf_deepspeed.is_deepspeed_zero3_enabled()
        reward = reward_from_spec(f"rm:{tiny_rm}", batch_size=2, device="cpu")
        scores = reward(prompts=["Hi"] * 2, completions=["Hello there.", "No."])
        assert hf_deepspeed.is_deepspeed_zero3_enabled(), "the guard must restore the ZeRO-3 registration"
    finally:  # a failure's traceback must not keep ZeRO-3 registered for the worker's later tests
        del config
        hf_deepspeed.unset_hf_deepspeed_config()
    assert len(scores) == 2 and all(math.isfinite(s) for s in scores)
    assert all(p.dim() >= 1 and p.numel() > 0 for p in reward.scorer.model.parameters())


@pytest.mark.slow
@pytest.mark.multiprocess
def test_hh_grpo_with_a_reward_model_under_zero3_two_processes(tiny_rm, tmp_path):
    """hh_grpo's `rm:` reward, loaded at the first reward call inside a ZeRO-3 run, scores every rollout; one
    optimizer step. Without the guard the scorer's embedding is an empty shard: `'weight' must be 2-D`."""
    out = tmp_path / "hh_grpo"
    launch("zero3_2proc.yaml", "hh_grpo.yaml", out, "--reward_funcs", f"rm:{tiny_rm}",
           "--generation_batch_size", "16", "--max_steps", "1", timeout=420)
    results = json.loads((out / "final_results.json").read_text())
    assert results["world_size"] == 2 and results["steps"] == 1 and not results["interrupted"]
    logged = [r["rewards/rm_tiny_rm/mean"] for r in read_metrics(out) if "rewards/rm_tiny_rm/mean" in r]
    assert logged and all(math.isfinite(x) for x in logged)
