"""One prefill per distinct prompt when transformers `generate` samples a rollout batch.

A rollout batch holds each prompt num_generations times in a row (8 in the book's loop), and `generate` prefills
every row: the prompt's keys and values are computed 8 times over. Inside `prefill_once_per_prompt(model)`, the
model's prefill runs on the distinct rows only (a row is its input ids, attention mask and every other per-row
input) and the result (the KV cache and the last position's logits) is copied to each repeat before decoding
starts. Decoding, sampling and everything after it are untouched.

Nothing about the numbers changes: a row's forward pass does not depend on the other rows in its batch (tested:
tests/test_shared_prefill.py compares the sampled tokens with and without it, bit for bit), so each repeat gets the
cache the full prefill would have given it. Measured on the nano GRPO run (16 prompts x 8, ~40-token prompts, 2 CPU
threads): the prefill of a rollout batch 71 ms -> 9 ms, its generate 186 -> 131 ms (`python -m
benchmarks.shared_prefill`). Used by the policy-gradient and SDPO trainers and by rlhf_recipes.generation.

It steps aside (the full prefill runs) wherever the premise is not plain: no repeated row, a cache that is not a
fresh DynamicCache (the static_cache backend, a resumed cache), inputs_embeds, attentions or hidden states asked
for, or a transformers whose `generate` has no `_prefill` step to replace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def distinct_rows(batch_inputs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(first, inverse): `first` indexes one row of each distinct kind (first occurrence, in order), and row i is
    distinct row inverse[i]. None when no row repeats or an input cannot be compared exactly."""
    if any(t.is_floating_point() for t in batch_inputs):
        return None
    rows = torch.cat([t.reshape(t.size(0), -1).to(torch.long) for t in batch_inputs], dim=1)
    unique, inverse = torch.unique(rows, dim=0, return_inverse=True)
    count = unique.size(0)
    if count == rows.size(0):
        return None
    positions = torch.arange(rows.size(0), device=rows.device)
    first_of = torch.full((count,), rows.size(0), dtype=torch.long, device=rows.device)
    first_of.scatter_reduce_(0, inverse, positions, reduce="amin")
    order = torch.argsort(first_of)  # distinct rows in order of first appearance
    rank = torch.empty_like(order)
    rank[order] = torch.arange(count, device=rows.device)
    return first_of[order], rank[inverse]


def _plan(input_ids, generation_config, model_kwargs, is_first_iteration):
    from transformers import DynamicCache

    cache = model_kwargs.get("cache")
    if not is_first_iteration or type(cache) is not DynamicCache or cache.get_seq_length() != 0:
        return None
    chunked = getattr(generation_config, "prefill_chunk_size", None) is not None
    if model_kwargs.get("inputs_embeds") is not None or chunked or generation_config.output_attentions \
            or generation_config.output_hidden_states:
        return None
    batch = input_ids.size(0)
    per_row = [v for v in model_kwargs.values() if isinstance(v, torch.Tensor)]
    if any(v.dim() == 0 or v.size(0) != batch for v in per_row):
        return None  # an input that is not one entry per row: nothing to split safely
    return distinct_rows([input_ids, *per_row])


@contextlib.contextmanager
def prefill_once_per_prompt(model) -> Iterator[None]:
    """While inside, `model.generate` prefills each distinct row once (module docstring). A PEFT model generates
    through its base model, whose prefill is the one replaced."""
    if callable(getattr(model, "get_base_model", None)):
        model = model.get_base_model()
    original = getattr(model, "_prefill", None)
    if original is None:
        yield
        return

    def prefill(input_ids, generation_config, model_kwargs, is_first_iteration=True):
        plan = _plan(input_ids, generation_config, model_kwargs, is_first_iteration)
        if plan is None:
            return original(input_ids, generation_config, model_kwargs, is_first_iteration)
        first, inverse = plan  # _plan checked that every tensor input has one entry per row
        distinct = {k: v[first] if isinstance(v, torch.Tensor) else v for k, v in model_kwargs.items()}
        outputs = original(input_ids[first], generation_config, distinct, is_first_iteration)
        outputs["logits"] = outputs["logits"][inverse]
        model_kwargs["cache"].batch_select_indices(inverse)  # the same cache object, now one entry per row
        return outputs

    model._prefill = prefill  # the instance's attribute shadows the class's method
    try:
        yield
    finally:
        del model._prefill
