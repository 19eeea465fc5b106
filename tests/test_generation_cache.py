"""The growing KV cache (rlhf_recipes/generation.py use_growing_kv_cache): every logit of a generation is bitwise the
one transformers' plain cache gives, greedy and sampled, left-padded, several completions per prompt, past the
buffer's headroom; a training forward (gradients on) keeps the plain concatenation."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny(_tiny_cache):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(_tiny_cache)
    tokenizer.padding_side = "left"
    return AutoModelForCausalLM.from_pretrained(_tiny_cache, dtype=torch.float32).eval(), tokenizer


def _generate(model, tokenizer, layer, n: int, sample: bool, new_tokens: int):
    import torch
    from transformers import GenerationConfig, cache_utils

    plain = cache_utils.DYNAMIC_LAYER_TYPE_MAPPING["full_attention"]
    texts = ["a short prompt", "a much longer prompt that pads the other one on the left", "three"]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_return_sequences=n,
                              do_sample=sample, temperature=0.7 if sample else None, top_p=None, top_k=None,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                              output_logits=True, return_dict_in_generate=True)
    cache_utils.DYNAMIC_LAYER_TYPE_MAPPING["full_attention"] = layer
    try:
        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(**inputs, generation_config=config)
    finally:
        cache_utils.DYNAMIC_LAYER_TYPE_MAPPING["full_attention"] = plain
    return out


@pytest.mark.parametrize("n, sample, new_tokens", [(1, False, 12), (4, True, 12), (2, True, 80)])  # 80: past headroom
def test_the_growing_cache_gives_bitwise_the_plain_caches_logits(tiny, n, sample, new_tokens):
    import torch
    from transformers import cache_utils

    from rlhf_recipes.generation import use_growing_kv_cache

    use_growing_kv_cache()
    growing = cache_utils.DYNAMIC_LAYER_TYPE_MAPPING["full_attention"]
    assert growing is not cache_utils.DynamicLayer and issubclass(growing, cache_utils.DynamicLayer)
    model, tokenizer = tiny
    plain = _generate(model, tokenizer, cache_utils.DynamicLayer, n, sample, new_tokens)
    grown = _generate(model, tokenizer, growing, n, sample, new_tokens)
    assert type(grown.cache.layers[0]) is growing and type(plain.cache.layers[0]) is cache_utils.DynamicLayer
    assert torch.equal(plain.sequences, grown.sequences) and len(plain.logits) == len(grown.logits) == new_tokens
    assert all(torch.equal(a, b) for a, b in zip(plain.logits, grown.logits))


def test_a_training_forward_keeps_the_plain_concatenation(tiny):
    import torch
    from transformers import DynamicCache

    from rlhf_recipes.generation import use_growing_kv_cache

    use_growing_kv_cache()
    model, tokenizer = tiny
    ids = tokenizer(["a prompt to train on"], return_tensors="pt", add_special_tokens=False)["input_ids"]
    cache = DynamicCache(config=model.config)
    model(input_ids=ids, cache=cache, use_cache=True).logits.sum().backward()
    layer = cache.layers[0]
    assert layer.keys.requires_grad and layer.keys.is_contiguous() and getattr(layer, "_view", None) is None
    model.zero_grad()
    with torch.no_grad():  # the same model generating: the keys live in the growing buffer
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, cache=cache, use_cache=True)
    assert cache.layers[0]._view is not None
