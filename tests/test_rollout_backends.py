"""Rollout backends (rollout_backend, custom_losses/policy_gradient/rollout_backends.py).

A backend only chooses the engine that samples tokens; rewards, advantages and the loss (its
log-probs from the training forward at temperature 1) must not change with it. On the CPU:
  static_cache         samples exactly what hf samples: the same seeded run, compared row by row
  continuous_batching  its own scheduler draws random numbers in its own order, so its tokens
                       differ: the engine's greedy tokens are compared with generate's, and a
                       run whose engine replays generate's samples (fixed completions) must match
                       the hf run in every reward, advantage and loss
  vllm_*               need vLLM and a GPU: their TRL options and their errors are checked up to
                       the point where vLLM would start
"""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest
import torch

import rewards
from conftest import low_token_fraction, read_metrics, run_recipe
from custom_losses.policy_gradient import rollout_backends
from rlhf_recipes.config import RecipeError, load_recipe
from rlhf_recipes.registry import ALGORITHMS

# A reward a random tiny model already varies on (about half its tokens have a low id), so that
# advantages and losses are not all zero; temperature 1 so that the sampled and scored distributions agree.
SIGNAL = ["--reward_funcs", "[low_token_fraction]", "--reward_weights", "[1.0]", "--temperature", "1.0"]


def rollouts(out):
    con = sqlite3.connect(out / "rollouts.sqlite")
    query = "SELECT step, prompt, completion, reward, advantage, length FROM rollouts ORDER BY id"
    return con.execute(query).fetchall()


def losses(out):
    return [(r["step"], r["loss"]) for r in read_metrics(out) if "loss" in r]


def assert_same_run(a, b):
    rows_a, rows_b = rollouts(a), rollouts(b)
    assert len(rows_a) == len(rows_b) == 32  # one rollout batch of 4 prompts x 8
    for x, y in zip(rows_a, rows_b):
        assert x[:3] == y[:3] and x[5] == y[5]  # step, prompt, completion, length
        assert x[3] == pytest.approx(y[3], abs=1e-6) and x[4] == pytest.approx(y[4], abs=1e-5)  # reward, advantage
    la, lb = losses(a), losses(b)
    assert [s for s, _ in la] == [s for s, _ in lb] == [1, 2, 3, 4]
    assert [v for _, v in la] == pytest.approx([v for _, v in lb], abs=1e-5)


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    rewards.register(low_token_fraction, replace=True)
    out = tmp_path_factory.mktemp("backends") / "hf"
    results = run_recipe("grpo.yaml", out, *SIGNAL)
    assert results["steps"] == 4
    advantages = [row[4] for row in rollouts(out)]
    assert any(abs(a) > 0.1 for a in advantages), "the reward gives no contrast: the comparison would be vacuous"
    assert any(abs(v) > 1e-4 for _, v in losses(out))
    return out


def test_static_cache_run_equals_hf(hf_run, tmp_path):
    rewards.register(low_token_fraction, replace=True)
    out = tmp_path / "static"
    run_recipe("grpo.yaml", out, *SIGNAL, "--rollout_backend", "static_cache")
    assert_same_run(hf_run, out)


def _replay_with_generate(model, inputs, generation_config=None, **kwargs):
    """What TRL's continuous-batching branch receives, produced by `generate` on the same prompts:
    completions up to and including the first EOS, as the engine returns them."""
    from trl.trainer.utils import pad

    prompts = [torch.tensor(ids) for ids in inputs]
    pad_id = generation_config.pad_token_id
    ids = pad(prompts, padding_value=pad_id, padding_side="left")
    mask = pad([torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left")
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=generation_config)[:, ids.size(1):]
    eos = set(generation_config.eos_token_id if isinstance(generation_config.eos_token_id, list)
              else [generation_config.eos_token_id])
    results = {}
    for i, row in enumerate(out.tolist()):
        cut = next((j + 1 for j, t in enumerate(row) if t in eos), len(row))
        results[f"req_{i}"] = SimpleNamespace(generated_tokens=row[:cut])
    return results


def test_continuous_batching_run_equals_hf_given_the_same_completions(hf_run, tmp_path, monkeypatch):
    from transformers import PreTrainedModel

    calls = []

    def replay(model, inputs, **kwargs):
        calls.append(len(inputs))
        return _replay_with_generate(model, inputs, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "generate_batch", replay, raising=False)
    rewards.register(low_token_fraction, replace=True)
    out = tmp_path / "cb"
    run_recipe("grpo.yaml", out, *SIGNAL, "--rollout_backend", "continuous_batching")
    assert calls == [32], "TRL's continuous-batching branch did not generate the rollout batch"
    assert_same_run(hf_run, out)


def test_continuous_batching_engine_generates_what_generate_does():
    """The real engine (no replay) on the tiny model: greedy tokens equal generate's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.generation import ContinuousBatchingConfig

    from rlhf_recipes.tiny import tiny_model_path

    path = tiny_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = [tokenizer(text).input_ids for text in ("Spell this word backward: level", "What is 2 + 3?", "hi")]
    config = GenerationConfig(max_new_tokens=12, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)
    engine = model.generate_batch(prompts, generation_config=config, progress_bar=False,
                                  continuous_batching_config=ContinuousBatchingConfig(num_blocks=16,
                                                                                      max_batch_tokens=256))
    expected = _replay_with_generate(model, prompts, generation_config=config)
    got = sorted((o.request_id, o.generated_tokens) for o in engine.values())
    assert [tokens for _, tokens in got] == [r.generated_tokens for r in expected.values()]
    assert all(len(tokens) > 0 for _, tokens in got)


# --- options and errors, for every backend (no generation) ----------------------------------


POLICY_GRADIENT = sorted(n for n, a in ALGORITHMS.items() if a.family == "policy_gradient")  # PPO included


@pytest.mark.parametrize("algorithm", POLICY_GRADIENT)
@pytest.mark.parametrize("name", sorted(rollout_backends.BACKENDS))
def test_backend_sets_trl_options(algorithm, name, tmp_path):
    training = load_recipe([f"recipes/{algorithm}.yaml", "--profile", "tiny", "--output_dir", str(tmp_path),
                            "--rollout_backend", name]).training
    chosen = rollout_backends.BACKENDS[name]
    for option, value in chosen.trl_options.items():
        assert getattr(training, option) == value, option
    assert training.cache_implementation == ("static" if name == "static_cache" else None)
    # the book's math: no reweighting by the sampler's log-probs, whatever the engine
    assert training.vllm_importance_sampling_correction is False
    assert training.logprobs_at_sampling_temperature is False


def test_recipe_help_lists_the_key(capsys):
    from rlhf_recipes.show import recipe_help

    assert "ppo" in POLICY_GRADIENT and len(POLICY_GRADIENT) >= 10
    for algorithm in POLICY_GRADIENT:
        # `--help --all` lists every key the algorithm takes (plain --help: the values this run resolves to)
        assert "--rollout_backend" in recipe_help([f"recipes/{algorithm}.yaml", "--help", "--all"]), algorithm


@pytest.mark.parametrize("extra, message", [
    (["--rollout_backend", "vllm"], "rollout_backend must be one of"),
    (["--rollout_backend", "continuous_batching", "--min_p", "0.1"], "cannot apply min_p 0.1"),
    (["--rollout_backend", "continuous_batching", "--repetition_penalty", "1.2"], "cannot apply repetition_penalty"),
    (["--rollout_backend", "hf", "--use_vllm", "true"], "use_vllm True contradicts rollout_backend 'hf'"),
    (["--rollout_backend", "static_cache", "--use_transformers_continuous_batching", "true"], "contradicts"),
    (["--cache_implementation", "static"], "rollout_backend 'static_cache'"),
    (["--rollout_backend", "vllm_server", "--vllm_importance_sampling_correction", "true"],
     "set logprobs_at_sampling_temperature true"),
    (["--rollout_backend", "vllm_colocate", "--off_policy_mask_threshold", "0.5"], "off_policy_mask_threshold"),
])
def test_settings_a_backend_cannot_honour_fail_before_loading(extra, message, tmp_path):
    with pytest.raises(RecipeError, match=message.replace("(", r"\(")):
        load_recipe(["recipes/grpo.yaml", "--profile", "tiny", "--output_dir", str(tmp_path), *extra])


def test_vllm_backend_stops_with_one_line_before_loading(tmp_path, capsys, monkeypatch):
    """On this machine (no vLLM, no GPU) a vLLM recipe stops in the runner's checks, not in TRL."""
    from rlhf_recipes import models
    from rlhf_recipes.train import main

    def no_load(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load_causal_lm", no_load)
    code = main(["recipes/grpo.yaml", "--profile", "tiny", "--output_dir", str(tmp_path / "v"),
                 "--rollout_backend", "vllm_colocate"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: ") and "rollout_backend" in err[-1]
    assert ("vllm" in err[-1]) and ("CUDA" in err[-1] or "not installed" in err[-1])


def test_environment_problems_are_named():
    problem = rollout_backends.environment_problem
    assert problem("hf") is None and problem("static_cache") is None
    assert problem("continuous_batching", dtype="float32", bf16=False) is None
    assert "casts the policy to bf16" in problem("continuous_batching", dtype="float32", bf16=True)
    if rollout_backends.importlib.util.find_spec("vllm") is None:
        assert "rlhf-recipes[vllm]" in problem("vllm_server")
    else:  # installed: then the GPU and the weights decide
        assert "CUDA" in problem("vllm_server", cuda_available=lambda: False)
        assert "8-bit" in problem("vllm_colocate", load_in_8bit=True, cuda_available=lambda: True)


@pytest.mark.skipif(not torch.cuda.is_available() or rollout_backends.importlib.util.find_spec("vllm") is None,
                    reason="vLLM generation needs the vllm package and a CUDA GPU (see docs/policy_gradients.md)")
def test_vllm_colocate_run_matches_rewards(tmp_path):
    rewards.register(low_token_fraction, replace=True)
    results = run_recipe("grpo.yaml", tmp_path / "vllm", *SIGNAL, "--rollout_backend", "vllm_colocate")
    assert results["steps"] == 4


def test_bench_ratios_compare_each_backend_with_hf_of_the_same_configuration():
    from benchmarks.families import _add_backend_ratios

    def row(algorithm, lora, backend, gen, step, peak):
        return {"algorithm": algorithm, "model": "m", "lora": lora, "attention": "sdpa", "rollout_backend": backend,
                "generated_tokens_per_s": gen, "step_s": step, "peak_allocated_gib": peak}

    rows = [row("grpo", False, "hf", 100.0, 8.0, 10.0), row("grpo", True, "hf", 50.0, 12.0, 5.0),
            row("grpo", False, "static_cache", 300.0, 4.0, 11.0), row("grpo", True, "vllm_colocate", 400.0, 3.0, 20.0),
            {"algorithm": "dpo", "model": "m", "lora": False, "attention": "sdpa", "rollout_backend": None,
             "generated_tokens_per_s": None, "step_s": 1.0, "peak_allocated_gib": 3.0}]
    _add_backend_ratios(rows)
    assert (rows[2]["generation_vs_hf"], rows[2]["step_speedup_vs_hf"], rows[2]["peak_vs_hf"]) == (3.0, 2.0, 1.1)
    assert (rows[3]["generation_vs_hf"], rows[3]["step_speedup_vs_hf"], rows[3]["peak_vs_hf"]) == (8.0, 4.0, 4.0)
    assert rows[0]["generation_vs_hf"] == 1.0 and "generation_vs_hf" not in rows[4]
