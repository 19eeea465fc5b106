"""Batched generation and scoring of completions: what every held-out evaluation of a policy runs, and what the
data builders that sample a saved model run (data/sampled_rollouts.py). A ground-floor module: it imports nothing
of the project, so data/ and evaluation/ both lean on it without data/ reaching up into evaluation/.

generate          n completions per chat (greedy, or sampled with the given settings), left-padded batches
                  under a tqdm bar, the model's own end tokens; each completion with its text, its token ids
                  (up to and including the end token) and whether it ran out of tokens; `stats` gets the
                  seconds and generated tokens (the result's throughput).
prompt_ids        each chat's prompt token ids, rendered as `generate` renders it.
chat_ids          a (prompt, completion) conversation -> prompt ids and completion ids, the way TRL's trainers
                  split them (the prompt rendered with the generation prompt; the completion is the rest).
completion_logprobs  sum and count of log p(y_t | x, y_<t) over each completion's tokens, at temperature 1.
use_growing_kv_cache  every later `generate` of this process (TRL's rollouts too) keeps its keys and values in
                  buffers written in place, not concatenated anew at every token.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any


_GROWING_LAYER = None


def use_growing_kv_cache() -> None:
    """Make transformers' default generation cache (DynamicCache, full-attention layers) write each token's keys and
    values into a buffer with room to grow, and hand attention a view of the filled part, instead of concatenating
    the whole cache anew at every token (`torch.cat` per layer and step: a fifth of a small model's sampling time on
    a CPU, and a fresh allocation each time). The attention sees the same values in the same shape, so every logit is
    bitwise the one the plain cache gives (tests/test_generation_cache.py). With gradients on (a training forward
    that builds a cache) the plain concatenation runs. Registered through transformers' own per-layer-type mapping
    (what a DynamicCache built from a model config instantiates), once per process; idempotent."""
    global _GROWING_LAYER
    if _GROWING_LAYER is not None:
        return
    import torch
    from transformers import cache_utils

    plain = cache_utils.DYNAMIC_LAYER_TYPE_MAPPING["full_attention"]
    if plain is not cache_utils.DynamicLayer:  # another registration (a model's own layer type): leave it
        _GROWING_LAYER = plain
        return

    class GrowingKVLayer(cache_utils.DynamicLayer):
        headroom = 64  # tokens of room added at each (re)allocation: a small model's whole completion, usually

        def lazy_initialization(self, key_states, value_states):
            super().lazy_initialization(key_states, value_states)
            self._buffers = self._view = None

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            if torch.is_grad_enabled() and (key_states.requires_grad or value_states.requires_grad):
                return super().update(key_states, value_states, *args, **kwargs)
            used = self.keys.shape[-2] if self.keys.numel() else 0
            total = used + key_states.shape[-2]
            # A buffer too small, or keys replaced behind it (crop, reorder, batch select, offload): start a new one
            # from the keys as they stand.
            if self._view is None or self.keys is not self._view[0] or total > self._buffers[0].shape[-2]:
                batch, heads, _, dim = key_states.shape
                shape = (batch, heads, total + self.headroom, dim)
                self._buffers = (key_states.new_empty(shape), value_states.new_empty(shape))
                if used:
                    self._buffers[0][..., :used, :].copy_(self.keys)
                    self._buffers[1][..., :used, :].copy_(self.values)
            keys, values = self._buffers
            keys[..., used:total, :].copy_(key_states)
            values[..., used:total, :].copy_(value_states)
            self.keys, self.values = keys[..., :total, :], values[..., :total, :]
            self._view = (self.keys, self.values)
            return self.keys, self.values

    cache_utils.DYNAMIC_LAYER_TYPE_MAPPING["full_attention"] = GrowingKVLayer
    _GROWING_LAYER = GrowingKVLayer


def prompt_text(tokenizer, chat: list[dict], chat_template_kwargs: dict | None) -> str:
    return tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True,
                                         **(chat_template_kwargs or {}))


def prompt_ids(tokenizer, chats: list[list[dict]], chat_template_kwargs: dict | None) -> list[list[int]]:
    """Token ids of each chat rendered with the generation prompt (what `generate` feeds the model)."""
    return [tokenizer(prompt_text(tokenizer, chat, chat_template_kwargs), add_special_tokens=False)["input_ids"]
            for chat in chats]


def generate(model, tokenizer, chats: list[list[dict]], *, n: int, batch_size: int, max_new_tokens: int,
             chat_template_kwargs: dict | None = None, desc: str = "generate", seed: int | None = None,
             stats: dict | None = None, **sampling) -> list[list[dict[str, Any]]]:
    """n completions per chat (greedy when `sampling` is empty); per chat a list of {"text", "ids", "tokens",
    "truncated"} (truncated: no end token within max_new_tokens)."""
    import torch
    from tqdm.auto import tqdm

    use_growing_kv_cache()
    # The model's own generation config (its end tokens: Qwen3 stops at <|im_end|> and <|endoftext|>), with
    # these settings on top; greedy clears the model's default sampling settings.
    config = copy.deepcopy(model.generation_config)
    greedy = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None, "min_p": None}
    sampling = {k: v for k, v in sampling.items() if v is not None}
    config.update(max_new_tokens=max_new_tokens, num_return_sequences=n, pad_token_id=tokenizer.pad_token_id,
                  use_cache=True, **({"do_sample": True, **sampling} if sampling else greedy))
    if config.eos_token_id is None:
        config.eos_token_id = tokenizer.eos_token_id
    end = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    end_ids = torch.tensor(end)
    if seed is not None:
        torch.manual_seed(seed)
    was_training, side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"
    out: list[list[dict[str, Any]]] = []
    start_time, generated = time.perf_counter(), 0
    try:
        for start in tqdm(range(0, len(chats), batch_size), desc=desc, unit="batch",
                          disable=int(os.environ.get("RANK", "0")) != 0):
            texts = [prompt_text(tokenizer, c, chat_template_kwargs) for c in chats[start:start + batch_size]]
            inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.no_grad():
                ids = model.generate(**inputs, generation_config=config)[:, inputs["input_ids"].shape[1]:].cpu()
            is_end = torch.isin(ids, end_ids)
            ended = is_end.any(dim=1).tolist()
            lengths = torch.where(is_end.any(dim=1), is_end.int().argmax(dim=1) + 1, ids.shape[1]).tolist()
            decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
            for i in range(len(texts)):
                group = []
                for k in range(i * n, (i + 1) * n):
                    generated += lengths[k]
                    group.append({"text": decoded[k], "ids": ids[k, :lengths[k]].tolist(), "tokens": lengths[k],
                                  "truncated": not ended[k]})
                out.append(group)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    if stats is not None:
        stats["seconds"] = stats.get("seconds", 0.0) + time.perf_counter() - start_time
        stats["generated_tokens"] = stats.get("generated_tokens", 0) + generated
    return out


def chat_ids(tokenizer, prompt: list[dict], completion: list[dict],
             chat_template_kwargs: dict | None = None) -> tuple[list[int], list[int]]:
    kwargs = chat_template_kwargs or {}
    prompt_part = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True, **kwargs)
    full = tokenizer.apply_chat_template([*prompt, *completion], tokenize=False, **kwargs)
    prompt_ids = tokenizer(prompt_part, add_special_tokens=False)["input_ids"]
    full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    if full_ids[:len(prompt_ids)] != prompt_ids:  # a template that re-renders earlier turns: split on text
        return prompt_ids, tokenizer(full[len(prompt_part):], add_special_tokens=False)["input_ids"]
    return prompt_ids, full_ids[len(prompt_ids):]


def _right_padded(rows: list[list[int]], pad_id: int):
    """(ids, attention mask) of token rows, right-padded: each row's completion ends its real tokens."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, :len(r)] = 1
    return ids, mask


def completion_logprobs(model, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
                        batch_size: int, max_length: int | None = None, desc: str = "log-probs") -> list[tuple[float, int]]:
    """(sum of log-probs, number of tokens) of each completion given its prompt (prompts cut on the left to
    fit max_length, then completions on the right)."""
    import torch
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    out: list[tuple[float, int]] = []
    for start in tqdm(range(0, len(prompt_ids), batch_size), desc=desc, unit="batch",
                      disable=int(os.environ.get("RANK", "0")) != 0):
        pairs = []
        for p, c in zip(prompt_ids[start:start + batch_size], completion_ids[start:start + batch_size]):
            if max_length is not None and len(p) + len(c) > max_length:
                c = c[:max(1, max_length - min(len(p), max_length // 2))]
                p = p[-(max_length - len(c)):] if max_length - len(c) > 0 else p[-1:]
            pairs.append((p, c))
        ids, mask = _right_padded([p + c for p, c in pairs], pad_id)
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        token_logp = logp.gather(-1, ids[:, 1:].to(device).unsqueeze(-1)).squeeze(-1).cpu()
        for i, (p, c) in enumerate(pairs):
            if not c:
                out.append((0.0, 0))
                continue
            out.append((float(token_logp[i, len(p) - 1:len(p) + len(c) - 1].sum()), len(c)))
    return out


def token_kl(model_p, model_q, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
             batch_size: int) -> list[tuple[float, int]]:
    """Per completion: (sum over its tokens of KL(p || q) between the two next-token distributions, tokens)."""
    import torch

    out: list[tuple[float, int]] = []
    for start in range(0, len(prompt_ids), batch_size):
        rows = [(p, c) for p, c in zip(prompt_ids[start:start + batch_size], completion_ids[start:start + batch_size])]
        ids, mask = _right_padded([p + c for p, c in rows], pad_id)
        logs = []
        for model in (model_p, model_q):
            device = next(model.parameters()).device
            with torch.no_grad():
                logs.append(torch.log_softmax(model(input_ids=ids.to(device), attention_mask=mask.to(device))
                                              .logits.float().cpu(), dim=-1))
        kl = (logs[0].exp() * (logs[0] - logs[1])).sum(-1)  # [batch, positions]
        for i, (p, c) in enumerate(rows):
            out.append((float(kl[i, len(p) - 1:len(p) + len(c) - 1].sum()), len(c)))
    return out


def throughput(problems: int, stats: dict) -> dict[str, float]:
    seconds = stats.get("seconds", 0.0)
    tokens = stats.get("generated_tokens", 0)
    return {"problems": problems, "generation_seconds": round(seconds, 3), "generated_tokens": tokens,
            "problems_per_s": round(problems / seconds, 3) if seconds else None,
            "generated_tokens_per_s": round(tokens / seconds, 1) if seconds else None}
