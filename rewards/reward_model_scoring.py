"""A saved reward model: loading it, and scoring token ids or (prompt, completion) pairs with it.

Batches are sorted by length, run without gradients in eval mode, and read as each kind was
trained (rewards/reward_model_encoding.py): a preference RM's scalar at the last non-pad token,
an outcome RM's token probabilities over the completion, a process RM's class probabilities at
each step separator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rewards.reward_model_files import resolve_reward_model_dir
from rewards.zero3 import replicated_under_zero3
from rewards.text import completion_text
from rewards.reward_model_encoding import (
    DEFAULT_PROMPT_TEMPLATE, DEFAULT_STEP_SEPARATOR, encode_rollout, encode_sequence, encode_steps,
    completion_steps, is_messages, truncate,
)


# --------------------------------------------------------------------------------------
# Batches and scores


def pad(sequences: list[list[int]], value: int | float, dtype=torch.long) -> torch.Tensor:
    width = max(len(s) for s in sequences)
    out = torch.full((len(sequences), width), value, dtype=dtype)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = torch.as_tensor(s, dtype=dtype)
    return out


def ids_and_mask(sequences: list[list[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
    return {"input_ids": pad(sequences, pad_token_id),
            "attention_mask": pad([[1] * len(s) for s in sequences], 0)}


def rollout_scores(logits: torch.Tensor, mask: torch.Tensor, reduction: str = "last") -> torch.Tensor:
    """(B, T) token logits -> (B,) rollout scores in [0, 1]: sigmoid at the last completion token ('last',
    the book's code) or averaged over the completion tokens ('mean')."""
    probs = torch.sigmoid(logits.float())
    mask = mask.to(probs.dtype)
    if reduction == "mean":
        return (probs * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    positions = torch.arange(mask.size(-1), device=mask.device)
    last = (positions * mask).argmax(-1)
    return probs.gather(-1, last[:, None]).squeeze(-1)


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def _batched(model, sequences: list[list[int]], pad_token_id: int, batch_size: int, extra=None):
    """Yield (indices, batch, logits) over `sequences`, batched by similar length."""
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    device = _device(model)
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        batch = ids_and_mask([sequences[i] for i in idx], pad_token_id)
        if extra is not None:
            batch.update(extra(idx))
        batch = {key: v.to(device) for key, v in batch.items()}
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
        yield idx, batch, logits.float()


class _eval_mode:
    def __init__(self, model):
        self.model, self.was_training = model, model.training

    def __enter__(self):
        self.model.eval()

    def __exit__(self, *exc):
        self.model.train(self.was_training)


def sequence_rewards(model, sequences: list[list[int]], pad_token_id: int, batch_size: int = 8) -> list[float]:
    """Preference RM: one scalar reward per sequence (the head at the last non-pad token)."""
    out = [0.0] * len(sequences)
    with _eval_mode(model):
        for idx, _, logits in _batched(model, sequences, pad_token_id, batch_size):
            for i, r in zip(idx, logits[:, 0].tolist()):
                out[i] = r
    return out


def rollout_rewards(model, sequences: list[list[int]], masks: list[list[int]], pad_token_id: int,
                    batch_size: int = 8, reduction: str = "last") -> list[float]:
    """Outcome RM: one score in [0, 1] per rollout (see `rollout_scores`)."""
    out = [0.0] * len(sequences)
    with _eval_mode(model):
        extra = lambda idx: {"completion_mask": pad([masks[i] for i in idx], 0)}  # noqa: E731
        for idx, batch, logits in _batched(model, sequences, pad_token_id, batch_size, extra):
            scores = rollout_scores(logits.squeeze(-1), batch["completion_mask"], reduction)
            for i, s in zip(idx, scores.tolist()):
                out[i] = s
    return out


def step_probabilities(model, sequences: list[list[int]], positions: list[list[int]], pad_token_id: int,
                       batch_size: int = 8) -> list[list[list[float]]]:
    """Process RM: per sequence, per step, the (bad, neutral, good) probabilities."""
    out: list[list[list[float]]] = [[] for _ in sequences]
    with _eval_mode(model):
        for idx, _, logits in _batched(model, sequences, pad_token_id, batch_size):
            probs = logits.softmax(-1)
            for row, i in enumerate(idx):
                out[i] = probs[row, positions[i]].tolist()
    return out


# --------------------------------------------------------------------------------------
# A saved reward model, scoring (prompt, completion) pairs


def infer_info(config) -> dict[str, Any]:
    """For a reward model saved without `reward_model` in its config: guess the kind from the head."""
    arch = " ".join(getattr(config, "architectures", None) or [])
    if "SequenceClassification" in arch:
        return {"kind": "preference", "max_length": None, "truncation_mode": "keep_start"}
    if "TokenClassification" in arch:
        kind = "outcome" if config.num_labels == 1 else "process"
        info = {"kind": kind, "max_length": None, "truncation_mode": "keep_start", "score_reduction": "last"}
        if kind == "process":
            info.update(prompt_template=DEFAULT_PROMPT_TEMPLATE, step_separator=DEFAULT_STEP_SEPARATOR)
        return info
    raise ValueError(f"not a reward model: architectures {arch or 'unknown'} (expected *ForSequenceClassification "
                     "or *ForTokenClassification)")


def load_reward_model(path: str, dtype: str | None = None, **from_pretrained):
    """(model, tokenizer, info) of a saved reward model; `info` says how it reads its input.

    `from_pretrained`: further loading options (e.g. a quantization_config and device_map for evaluation)."""
    from transformers import (
        AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer,
    )

    path = resolve_reward_model_dir(path)
    config = AutoConfig.from_pretrained(path)
    info = getattr(config, "reward_model", None) or infer_info(config)
    cls = AutoModelForSequenceClassification if info["kind"] == "preference" else AutoModelForTokenClassification
    if isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    # Never a DeepSpeed engine: under ZeRO-3 (a GRPO/PPO run's `rm:` reward) it must still hold its whole weights.
    with replicated_under_zero3():
        model = cls.from_pretrained(path, **{"dtype": dtype, **from_pretrained})
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, info


def _problem_text(prompt: Any) -> str:
    """The question a PRM sees: the last user message of a conversation, or the text itself."""
    if is_messages(prompt):
        users = [m.get("content") or "" for m in prompt if m.get("role") == "user"]
        return users[-1] if users else ""
    return prompt or ""


def score_completions(info: dict, model, tokenizer, prompts: list[Any], completions: list[Any],
                      batch_size: int = 8) -> list[float]:
    """One reward per (prompt, completion), read the way the RM was trained (see the module doc).

    preference: the scalar reward; outcome: the rollout score in [0, 1]; process: the
    probability that no step is bad, prod_steps (1 - P(bad)), over the completion's steps (split
    on the step separator, else on blank lines; or its answer's characters, info["step_split"]); 0.0 for a
    completion without any step.
    """
    kind, pad_id = info["kind"], tokenizer.pad_token_id
    max_length, mode = info.get("max_length"), info.get("truncation_mode", "keep_start")
    if prompts is None:
        prompts = [""] * len(completions)
    if kind == "preference":
        seqs = [truncate(encode_sequence(tokenizer, p, c), max_length, mode) for p, c in zip(prompts, completions)]
        return sequence_rewards(model, seqs, pad_id, batch_size)
    if kind == "outcome":
        seqs, masks = [], []
        for p, c in zip(prompts, completions):
            ids, start = encode_rollout(tokenizer, p, c)
            mask = [0] * start + [1] * (len(ids) - start)
            ids, mask = truncate(ids, max_length, mode), truncate(mask, max_length, mode)
            if not any(mask):  # the prompt alone fills max_length: score the last token
                mask[-1] = 1
            seqs.append(ids)
            masks.append(mask)
        return rollout_rewards(model, seqs, masks, pad_id, batch_size, info.get("score_reduction", "last"))
    separator = info.get("step_separator", DEFAULT_STEP_SEPARATOR)
    template = info.get("prompt_template", DEFAULT_PROMPT_TEMPLATE)
    seqs, positions, scored = [], [], []
    for k, (p, c) in enumerate(zip(prompts, completions)):
        steps = completion_steps(completion_text(c), separator, info.get("step_split", "separator"))
        if not steps:
            continue
        ids, pos = encode_steps(tokenizer, _problem_text(p), steps, template, separator)
        if max_length is not None and len(ids) > max_length:  # score the steps that fit
            ids, pos = ids[:max_length], [q for q in pos if q < max_length] or [max_length - 1]
        seqs.append(ids)
        positions.append(pos)
        scored.append(k)
    out = [0.0] * len(completions)
    for k, probs in zip(scored, step_probabilities(model, seqs, positions, pad_id, batch_size)):
        out[k] = float(np.prod([1.0 - p[0] for p in probs]))
    return out
