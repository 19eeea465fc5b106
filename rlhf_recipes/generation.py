"""Batched generation and scoring of completions: what every held-out evaluation of a policy runs, and what the
data builders that sample a saved model run (data/sampled_rollouts.py). A ground-floor module: it imports nothing
of rlhf_recipes (only the floor below: custom_losses' shared prefill), so data/ and evaluation/ both lean on it
without data/ reaching up into evaluation/.
"""

from __future__ import annotations

import copy
import os
import time
from typing import Any


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
    """n completions per chat (greedy when `sampling` is empty), in left-padded batches under a tqdm bar, ended by
    the model's own end tokens; per chat a list of {"text", "ids" (up to and including the end token), "tokens",
    "truncated"} (truncated: no end token within max_new_tokens). `stats` gets the seconds and generated tokens
    (the result's throughput)."""
    import torch
    from tqdm.auto import tqdm

    from custom_losses.policy_gradient.shared_prefill import prefill_once_per_prompt

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
            with torch.no_grad(), prefill_once_per_prompt(model):  # n > 1: each prompt prefilled once
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
    """A (prompt, completion) conversation -> prompt ids and completion ids, the way TRL's trainers split them
    (the prompt rendered with the generation prompt; the completion is the rest)."""
    prompt_part = prompt_text(tokenizer, prompt, chat_template_kwargs)
    full = tokenizer.apply_chat_template([*prompt, *completion], tokenize=False, **(chat_template_kwargs or {}))
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
                        batch_size: int, max_length: int | None = None, desc: str = "log-probs",
                        temperature: float = 1.0) -> list[tuple[float, int]]:
    """(sum of log-probs, number of tokens) of each completion given its prompt (prompts cut on the left to
    fit max_length, then completions on the right), the next-token distribution at `temperature`."""
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
        logp = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
        token_logp = logp.gather(-1, ids[:, 1:].to(device).unsqueeze(-1)).squeeze(-1).cpu()
        for i, (p, c) in enumerate(pairs):
            if not c:
                out.append((0.0, 0))
                continue
            out.append((float(token_logp[i, len(p) - 1:len(p) + len(c) - 1].sum()), len(c)))
    return out


def sequence_kl(policy_logp, ref_logp, ids, mask) -> tuple[list[float], list[float]]:
    """Per completion (rows of `ids`, sampled from the policy; `mask` 1 on its tokens): (sum over its tokens of
    KL(pi(.|prefix) || pi_ref(.|prefix)), sum of log pi(y_t) - log pi_ref(y_t) at the sampled tokens).
    `policy_logp`, `ref_logp`: [batch, tokens, vocab] log-softmax at the positions that predict `ids`.
    Both sums are unbiased estimates of the sequence KL; the first has less variance and is never negative."""
    mask = mask.to(policy_logp.dtype)
    exact = (policy_logp.exp() * (policy_logp - ref_logp)).sum(-1)
    picked = (policy_logp - ref_logp).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return (exact * mask).sum(-1).tolist(), (picked * mask).sum(-1).tolist()


def pair_kl(policy, ref, prompt_ids: list[list[int]], completion_ids: list[list[int]], pad_id: int,
            batch_size: int, temperature: float = 1.0, device=None) -> list[tuple[float, float, int]]:
    """Per (prompt, completion sampled from `policy`): sequence_kl's two sums and the completion's token count, both
    models' next-token distributions at `temperature` (no top-k / top-p cut: a cut would make the KL infinite
    wherever the two cuts differ), compared on `device` (default: the policy's; "cpu" keeps the two [batch, tokens,
    vocab] tensors off an accelerator, as the quantization KL of a real model needs)."""
    import torch

    models = [(model, next(model.parameters()).device) for model in (policy, ref)]  # each where its weights are
    device = device or models[0][1]
    out: list[tuple[float, float, int]] = []
    for start in range(0, len(prompt_ids), batch_size):
        chunk = list(zip(prompt_ids[start:start + batch_size], completion_ids[start:start + batch_size]))
        ids, mask = _right_padded([p + c for p, c in chunk], pad_id)
        completion = torch.zeros_like(mask[:, 1:])  # 1 where position t predicts a completion token
        for i, (p, c) in enumerate(chunk):
            completion[i, len(p) - 1:len(p) + len(c) - 1] = 1
        targets, completion = ids[:, 1:].to(device), completion.to(device)
        with torch.no_grad():
            logps = [torch.log_softmax(model(input_ids=ids.to(where), attention_mask=mask.to(where))
                                       .logits[:, :-1].float().to(device) / temperature, -1)
                     for model, where in models]
        exact, ratio = sequence_kl(logps[0], logps[1], targets, completion)
        out += [(e, r, len(c)) for e, r, (_, c) in zip(exact, ratio, chunk)]
    return out


def free_memory() -> None:
    """Give back the memory of models the caller has just dropped (one model at a time on the device)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def throughput(problems: int, stats: dict) -> dict[str, float]:
    seconds = stats.get("seconds", 0.0)
    tokens = stats.get("generated_tokens", 0)
    return {"problems": problems, "generation_seconds": round(seconds, 3), "generated_tokens": tokens,
            "problems_per_s": round(problems / seconds, 3) if seconds else None,
            "generated_tokens_per_s": round(tokens / seconds, 1) if seconds else None}
