"""One prefill per distinct prompt (custom_losses/policy_gradient/shared_prefill.py).

The promise is that nothing changes but the work: `generate` inside `prefill_once_per_prompt` samples the same
tokens, bit for bit, as without it, while its prefill runs on the distinct rows only. Both halves are checked
on a small random Qwen3 (the nano architecture) with left-padded prompts repeated as a rollout batch repeats them.
"""

from __future__ import annotations

import pytest
import torch
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

from custom_losses.policy_gradient.shared_prefill import distinct_rows, prefill_once_per_prompt

PAD, EOS = 0, 1


def test_distinct_rows_in_order_of_first_appearance():
    ids = torch.tensor([[5, 6], [3, 4], [5, 6], [3, 4], [9, 9], [5, 6]])
    mask = torch.ones_like(ids)
    first, inverse = distinct_rows([ids, mask])
    assert first.tolist() == [0, 1, 4]
    assert inverse.tolist() == [0, 1, 0, 1, 2, 0]
    assert torch.equal(ids[first][inverse], ids)


def test_a_row_is_all_of_its_inputs():
    ids = torch.tensor([[5, 6], [5, 6]])
    assert distinct_rows([ids, torch.tensor([[1, 1], [0, 1]])]) is None  # same ids, other padding: two rows
    assert distinct_rows([ids, torch.ones_like(ids)]) is not None


def test_nothing_to_share():
    assert distinct_rows([torch.tensor([[1, 2], [2, 1]])]) is None
    assert distinct_rows([torch.tensor([[1.0], [1.0]])]) is None  # floats are not compared


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                         pad_token_id=PAD, eos_token_id=EOS)
    return Qwen3ForCausalLM(config).eval()


def rollout_batch(prompts: int = 4, generations: int = 8):
    """Left-padded prompts of different lengths, each repeated `generations` times in a row (TRL's order)."""
    torch.manual_seed(1)
    ids = torch.randint(2, 64, (prompts, 12))
    mask = torch.ones_like(ids)
    for i in range(prompts):
        ids[i, :i], mask[i, :i] = PAD, 0
    return ids.repeat_interleave(generations, 0), mask.repeat_interleave(generations, 0)


def sample(model, ids, mask, **settings):
    config = GenerationConfig(**{"max_new_tokens": 10, "do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
                                 "pad_token_id": PAD, "eos_token_id": EOS, **settings})
    torch.manual_seed(2)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, generation_config=config)


def prefill_rows(model, run) -> tuple[torch.Tensor, list[int]]:
    """What `run` returns, and the batch size of each forward pass the model made."""
    rows = []
    hook = model.model.register_forward_pre_hook(lambda module, args, kwargs: rows.append(
        (kwargs.get("input_ids") if kwargs.get("input_ids") is not None else args[0]).shape), with_kwargs=True)
    try:
        return run(), rows
    finally:
        hook.remove()


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.6, "top_k": 20, "top_p": 0.95}])
def test_the_same_tokens_from_one_prefill_per_prompt(model, sampling):
    ids, mask = rollout_batch()
    full, full_shapes = prefill_rows(model, lambda: sample(model, ids, mask, **sampling))

    def shared_run():
        with prefill_once_per_prompt(model):
            return sample(model, ids, mask, **sampling)

    shared, shared_shapes = prefill_rows(model, shared_run)
    assert torch.equal(full, shared)
    assert full_shapes[0] == (32, 12) and shared_shapes[0] == (4, 12)  # the prefill: 32 rows before, 4 now
    assert [s[0] for s in shared_shapes[1:]] == [32] * (len(shared_shapes) - 1)  # every decoding step: all rows
    assert "_prefill" not in vars(model)  # the model's own method is back afterwards


def test_steps_aside_for_a_static_cache(model):
    ids, mask = rollout_batch()
    full = sample(model, ids, mask, cache_implementation="static")
    with prefill_once_per_prompt(model):
        shared, shapes = prefill_rows(model, lambda: sample(model, ids, mask, cache_implementation="static"))
    assert shapes[0][0] == 32  # the full prefill ran
    assert torch.equal(full, shared)


def test_distinct_prompts_prefill_as_before(model):
    ids, mask = rollout_batch(prompts=4, generations=1)
    full = sample(model, ids, mask)
    with prefill_once_per_prompt(model):
        shared, shapes = prefill_rows(model, lambda: sample(model, ids, mask))
    assert shapes[0][0] == 4 and torch.equal(full, shared)


def recorded_plans(monkeypatch) -> list[tuple[int, int | None]]:
    """(rows, distinct rows prefilled) of every generate call from now on."""
    from custom_losses.policy_gradient import shared_prefill

    plans = []

    def recorded(batch_inputs):
        plan = distinct_rows(batch_inputs)
        plans.append((batch_inputs[0].size(0), None if plan is None else len(plan[0])))
        return plan

    monkeypatch.setattr(shared_prefill, "distinct_rows", recorded)
    return plans


@pytest.mark.parametrize("lora", [[], ["--use_peft", "true"]], ids=["full", "lora"])
def test_the_policy_gradient_trainer_prefills_each_prompt_once(tmp_path, monkeypatch, lora):
    """A tiny GRPO run (one rollout batch of 4 prompts x 8) prefills 4 rows, not 32; with LoRA too, whose PEFT
    wrapper generates through its base model."""
    from conftest import run_recipe

    plans = recorded_plans(monkeypatch)
    run_recipe("grpo.yaml", tmp_path / "run", "--max_steps", "1", *lora)
    assert plans == [(32, 4)]


def test_the_sdpo_trainer_prefills_each_prompt_once(tmp_path, monkeypatch):
    """SDPO samples its groups through TRL's own generate call: one prefill per group there too."""
    from conftest import run_recipe

    plans = recorded_plans(monkeypatch)
    run_recipe("sdpo.yaml", tmp_path / "run", "--max_steps", "1")
    assert plans and all(distinct is not None and distinct < rows for rows, distinct in plans), plans


def test_the_held_out_sampler_prefills_each_prompt_once(monkeypatch):
    """rlhf_recipes.generation.generate (evaluation, best-of-n, the sampled datasets): n samples per prompt from
    one prefill per prompt, the same samples as n prefills gave."""
    import contextlib

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlhf_recipes import generation
    from rlhf_recipes.tiny import tiny_model_path

    path = tiny_model_path()
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    chats = [[{"role": "user", "content": text}] for text in ("spell sun", "a longer question here", "why")]

    def samples():
        return generation.generate(model, tokenizer, chats, n=4, batch_size=3, max_new_tokens=6, seed=0,
                                   temperature=1.0, top_k=0, top_p=1.0)

    shared, shapes = prefill_rows(model, samples)
    from custom_losses.policy_gradient import shared_prefill

    monkeypatch.setattr(shared_prefill, "prefill_once_per_prompt", lambda model: contextlib.nullcontext())
    full, full_shapes = prefill_rows(model, samples)
    assert shared == full
    assert full_shapes[0][0] == 12 and shapes[0][0] == 3


def test_the_benchmark_runs_and_checks_the_tokens(capsys):
    """`python -m benchmarks.shared_prefill` (benchmarks/MEASURED.md's numbers), on the tiny model, one repeat."""
    from benchmarks.shared_prefill import main

    assert main(["--model", "tiny", "--prompts", "3", "--generations", "4", "--max-new-tokens", "4",
                 "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "3 prompts x 4 rollouts" in out and "same tokens: yes" in out
