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


def test_qlora_under_zero3_loads_without_a_device_map(monkeypatch):
    """4-bit weights on a GPU were always given a device_map (one GPU per process), which transformers refuses
    while a ZeRO-3 config is registered: a QLoRA run under zero3.yaml died at the model's load on any GPU machine.
    The CPU never took that branch; here torch says it has a GPU."""
    pytest.importorskip("deepspeed")
    import torch
    from transformers.integrations import deepspeed as hf_deepspeed
    from transformers.integrations import HfDeepSpeedConfig
    from accelerate import PartialState
    from trl import ModelConfig, get_quantization_config

    from rlhf_recipes.models import model_init_kwargs
    from rlhf_recipes.tiny import tiny_model_path

    qlora = ModelConfig(model_name_or_path=str(tiny_model_path()), use_peft=True, load_in_4bit=True, dtype="bfloat16")
    get_quantization_config(qlora), PartialState()  # their imports run before torch claims a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert model_init_kwargs(qlora)["device_map"] == {"": 0}  # DDP / one GPU: each process its own GPU
    config = HfDeepSpeedConfig({"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1})
    try:
        kwargs = model_init_kwargs(qlora)
    finally:
        del config
        hf_deepspeed.unset_hf_deepspeed_config()
    assert "device_map" not in kwargs and kwargs["quantization_config"].load_in_4bit


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_reward_model_scores_rollouts_under_zero3_two_processes(tiny_rm, tmp_path):
    """An `rm:` reward (hh_grpo's kind), loaded at the first reward call inside a ZeRO-3 run, scores every rollout.
    Without the guard the scorer's embedding is an empty shard: `'weight' must be 2-D`. The same launch is the
    suite's GRPO trainer under ZeRO-3: LoRA, reentrant checkpointing, and generation without gathering the weights
    (every rank steps generate() together; a hang would end at the timeout); DAPO, so that dynamic sampling's refill
    round (groups flat in correctness, which the random tiny model never gets right) is collective too; a rollout
    batch of 16 is 2 optimizer steps, both taken. (Generation with the full weights gathered: tests/test_scale.py's
    PPO, the same trainer.)"""
    out = tmp_path / "dapo"
    launch("zero3_2proc.yaml", "dapo.yaml", out, "--reward_funcs", f"[correctness_reward, rm:{tiny_rm}]",
           "--reward_weights", "[1.0, 1.0]", "--dynamic_sampling_reward", "correctness_reward",
           "--max_refill_rounds", "1", "--ds3_gather_for_generation", "false", "--use_peft", "true",
           "--activation_checkpointing", "true", "--generation_batch_size", "16", "--max_steps", "2", timeout=420)
    results = json.loads((out / "final_results.json").read_text())
    assert results["world_size"] == 2, "a silent fallback to one process"
    assert results["steps"] == 2 and not results["interrupted"]
    assert (out / "adapter_config.json").exists() and not (out / "model.safetensors").exists(), "LoRA saves its adapter"
    rows = read_metrics(out)
    logged = [r["rewards/rm_tiny_rm/mean"] for r in rows if "rewards/rm_tiny_rm/mean" in r]
    assert logged and all(math.isfinite(x) for x in logged)
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    first = next(r for r in rows if "dynamic_sampling/refill_rounds" in r)
    assert first["dynamic_sampling/refill_rounds"] == 1
