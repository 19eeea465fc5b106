"""Reward-model inputs: how rows become token ids, batches and scores.

One place for the text layout of each reward model, shared by training, evaluation and the
reward function that scores a policy's completions (rewards/reward_model.py), so a trained
RM is always read the way it was trained:
  preference  the whole conversation, prompt + response, through the tokenizer's chat
              template; the reward is the head at the last non-pad token;
  outcome     chat-templated prompt with the generation prompt, then the completion text and
              EOS (what a policy emitted); the completion tokens are scored;
  process     `prompt_template` with the problem, then each step + separator; the last token
              of each separator carries that step's label.
Over-long sequences are truncated (preference, outcome) and pairs that become identical are
dropped and counted; process examples over the limit are dropped (truncating them would cut
labeled steps off). Every builder returns length statistics for the run's log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import torch

from rewards.text import completion_text

STEP_RATINGS = (-1, 0, 1)
STEP_CLASS_NAMES = ("bad", "neutral", "good")  # class index = rating + 1
IGNORE_INDEX = -100


DEFAULT_PROMPT_TEMPLATE = "Problem: {problem}\nReasoning trace:\n"  # the book's PRM prompt
DEFAULT_STEP_SEPARATOR = "\n<step>\n"  # the book's PRM step separator


def infer_info(config) -> dict[str, Any]:
    """For a reward model saved without `reward_model` in its config: guess the kind from the head."""
    arch = " ".join(getattr(config, "architectures", None) or [])
    if "SequenceClassification" in arch:
        return {"kind": "preference", "max_length": None, "truncation_mode": "keep_start"}
    if "TokenClassification" in arch:
        kind = "outcome" if config.num_labels == 1 else "process"
        info = {"kind": kind, "max_length": None, "truncation_mode": "keep_start", "score_reduction": "mean"}
        if kind == "process":
            info.update(prompt_template=DEFAULT_PROMPT_TEMPLATE, step_separator=DEFAULT_STEP_SEPARATOR)
        return info
    raise ValueError(f"not a reward model: architectures {arch or 'unknown'} (expected *ForSequenceClassification "
                     "or *ForTokenClassification)")


# --------------------------------------------------------------------------------------
# Text -> ids


def is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value)


def _as_messages(value: Any, role: str) -> list[dict[str, str]]:
    return value if is_messages(value) else [{"role": role, "content": value}]


def chat_ids(tokenizer, messages: list[dict[str, str]], add_generation_prompt: bool = False) -> list[int]:
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=add_generation_prompt, return_dict=True
    )
    return list(out["input_ids"])


def text_ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_sequence(tokenizer, prompt: Any, completion: Any) -> list[int]:
    """Preference RM input: the whole conversation (chat template when the tokenizer has one)."""
    if tokenizer.chat_template is not None:
        prompt = [] if prompt is None or prompt == "" else _as_messages(prompt, "user")
        return chat_ids(tokenizer, prompt + _as_messages(completion, "assistant"))
    if is_messages(prompt) or is_messages(completion):
        raise ValueError("conversational data needs a tokenizer with a chat template")
    ids = text_ids(tokenizer, (prompt or "") + completion)
    return ids if ids and ids[-1] == tokenizer.eos_token_id else ids + [tokenizer.eos_token_id]


def prompt_ids(tokenizer, prompt: Any) -> list[int]:
    """Outcome RM prompt: chat template with the generation prompt, as the policy saw it."""
    if tokenizer.chat_template is not None:
        return chat_ids(tokenizer, _as_messages(prompt, "user"), add_generation_prompt=True)
    if is_messages(prompt):
        raise ValueError("conversational data needs a tokenizer with a chat template")
    return text_ids(tokenizer, prompt)


def encode_rollout(tokenizer, prompt: Any, completion: Any,
                   prompt_cache: list[int] | None = None) -> tuple[list[int], int]:
    """Outcome RM input: (prompt ids + completion ids + EOS, index of the first completion token)."""
    p = prompt_cache if prompt_cache is not None else prompt_ids(tokenizer, prompt)
    c = text_ids(tokenizer, completion_text(completion)) + [tokenizer.eos_token_id]
    return list(p) + c, len(p)


def encode_steps(tokenizer, problem: str, steps: list[str], prompt_template: str,
                 separator: str) -> tuple[list[int], list[int]]:
    """Process RM input: (ids, position of the last token of each step's separator)."""
    ids = text_ids(tokenizer, prompt_template.format(problem=problem))
    positions = []
    for step in steps:
        ids += text_ids(tokenizer, step.strip() + separator)
        positions.append(len(ids) - 1)
    return ids, positions


def split_steps(text: str, separator: str) -> list[str]:
    """A completion's steps: split on the separator when it is there, else on blank lines."""
    for sep in (separator, "\n\n"):
        if sep in text:
            parts = [p.strip() for p in text.split(sep)]
            return [p for p in parts if p]
    return [text.strip()] if text.strip() else []


def truncate(ids: list[int], max_length: int | None, mode: str) -> list[int]:
    if max_length is None or len(ids) <= max_length:
        return ids
    return ids[:max_length] if mode == "keep_start" else ids[len(ids) - max_length:]


# --------------------------------------------------------------------------------------
# Rows -> examples (+ statistics)


def length_stats(lengths: list[int], max_length: int | None) -> dict[str, float]:
    """Token lengths BEFORE truncation: mean, p99, max and the fraction over max_length."""
    if not lengths:
        return {"sequences": 0}
    a = np.asarray(lengths)
    return {
        "sequences": int(len(a)),
        "mean": round(float(a.mean()), 1),
        "p99": round(float(np.percentile(a, 99)), 1),
        "max": int(a.max()),
        "max_length": max_length,
        "fraction_truncated": round(float((a > max_length).mean()), 4) if max_length else 0.0,
    }


def preference_examples(rows: Iterable[dict], tokenizer, max_length: int | None, truncation_mode: str):
    """prompt/chosen/rejected rows -> ({chosen_ids, rejected_ids[, margin]} examples, stats)."""
    examples, lengths, dropped = [], [], 0
    for row in rows:
        prompt = row.get("prompt")
        chosen = encode_sequence(tokenizer, prompt, row["chosen"])
        rejected = encode_sequence(tokenizer, prompt, row["rejected"])
        lengths += [len(chosen), len(rejected)]
        chosen = truncate(chosen, max_length, truncation_mode)
        rejected = truncate(rejected, max_length, truncation_mode)
        if chosen == rejected:
            dropped += 1  # no signal: both sides read the same tokens
            continue
        example = {"chosen_ids": chosen, "rejected_ids": rejected}
        if row.get("margin") is not None:
            example["margin"] = float(row["margin"])
        examples.append(example)
    stats = {"pairs": len(examples), "dropped": {"identical after truncation": dropped} if dropped else {},
             "lengths": length_stats(lengths, max_length)}
    return examples, stats


def rollout_examples(rows: Iterable[dict], tokenizer, max_length: int | None, truncation_mode: str,
                     max_rollouts: int | None = None):
    """prompt/completions/rewards rows -> one {input_ids, completion_mask, rewards, group} per rollout."""
    examples, lengths, dropped = [], [], 0
    for group, row in enumerate(rows):
        completions, rewards = row["completions"], row["rewards"]
        if max_rollouts is not None:
            completions, rewards = completions[:max_rollouts], rewards[:max_rollouts]
        cached = prompt_ids(tokenizer, row["prompt"])
        for completion, reward in zip(completions, rewards):
            ids, start = encode_rollout(tokenizer, row["prompt"], completion, cached)
            lengths.append(len(ids))
            mask = [0] * start + [1] * (len(ids) - start)
            ids, mask = truncate(ids, max_length, truncation_mode), truncate(mask, max_length, truncation_mode)
            if not any(mask):
                dropped += 1
                continue
            examples.append({"input_ids": ids, "completion_mask": mask, "rewards": float(reward), "group": group})
    stats = {"rollouts": len(examples),
             "dropped": {"no completion token left after truncation": dropped} if dropped else {},
             "lengths": length_stats(lengths, max_length)}
    return examples, stats


def step_examples(rows: Iterable[dict], tokenizer, max_length: int | None, max_steps: int, prompt_template: str,
                  separator: str):
    """prompt/completions/labels rows (ratings -1/0/+1) -> {input_ids, labels, group} examples.

    A solution longer than `max_steps` becomes several examples of at most `max_steps` steps,
    each starting from the prompt (the book's chunking). Examples over `max_length` are dropped.
    """
    examples, lengths, dropped = [], [], 0
    for group, row in enumerate(rows):
        steps, ratings = row["completions"], row["labels"]
        for start in range(0, len(steps), max_steps):
            ids, positions = encode_steps(tokenizer, row["prompt"], steps[start:start + max_steps], prompt_template,
                                          separator)
            lengths.append(len(ids))
            if max_length is not None and len(ids) > max_length:
                dropped += 1
                continue
            labels = [IGNORE_INDEX] * len(ids)
            for pos, rating in zip(positions, ratings[start:start + max_steps]):
                labels[pos] = STEP_RATINGS.index(rating)
            examples.append({"input_ids": ids, "labels": labels, "group": group})
    stats = {"examples": len(examples), "dropped": {"longer than max_length": dropped} if dropped else {},
             "lengths": length_stats(lengths, max_length)}
    return examples, stats


# --------------------------------------------------------------------------------------
# Batches


def pad(sequences: list[list[int]], value: int | float, dtype=torch.long) -> torch.Tensor:
    width = max(len(s) for s in sequences)
    out = torch.full((len(sequences), width), value, dtype=dtype)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = torch.as_tensor(s, dtype=dtype)
    return out


def _ids_and_mask(sequences: list[list[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
    return {"input_ids": pad(sequences, pad_token_id),
            "attention_mask": pad([[1] * len(s) for s in sequences], 0)}


@dataclass
class RolloutCollator:
    """ORM batches: right-padded ids, attention and completion masks, correctness, prompt group."""

    pad_token_id: int

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = _ids_and_mask([e["input_ids"] for e in examples], self.pad_token_id)
        batch["completion_mask"] = pad([e["completion_mask"] for e in examples], 0)
        batch["rewards"] = torch.tensor([e["rewards"] for e in examples], dtype=torch.float)
        batch["group"] = torch.tensor([e["group"] for e in examples], dtype=torch.long)
        return batch


@dataclass
class StepCollator:
    """PRM batches: right-padded ids and attention mask; labels padded with -100."""

    pad_token_id: int

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = _ids_and_mask([e["input_ids"] for e in examples], self.pad_token_id)
        batch["labels"] = pad([e["labels"] for e in examples], IGNORE_INDEX)
        return batch


# --------------------------------------------------------------------------------------
# Scores


def rollout_scores(logits: torch.Tensor, mask: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """(B, T) token logits -> (B,) rollout scores in [0, 1]: sigmoid averaged over the completion
    tokens ('mean', the book's scoring) or at the last completion token ('last')."""
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
        batch = _ids_and_mask([sequences[i] for i in idx], pad_token_id)
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
                    batch_size: int = 8, reduction: str = "mean") -> list[float]:
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


MERGED_SUBDIR = "merged"  # where a LoRA reward model's run also saves the merged model


def resolve_reward_model_dir(path: str) -> str:
    """The directory holding the full model: `path`, or `path/merged` for a LoRA run."""
    from pathlib import Path

    p = Path(path)
    if (p / "config.json").is_file():
        return str(p)
    if (p / MERGED_SUBDIR / "config.json").is_file():
        return str(p / MERGED_SUBDIR)
    if (p / "adapter_config.json").is_file():
        raise ValueError(f"{path} holds a LoRA adapter but no merged model: merge it into its base model "
                         f"(peft's merge_and_unload) and save it to {p / MERGED_SUBDIR}")
    raise ValueError(f"{path}: no saved reward model there (expected config.json, e.g. the output_dir of a "
                     "preference_rm / hh_rm / orm / prm run)")


def load_reward_model(path: str, dtype: str | None = None):
    """(model, tokenizer, info) of a saved reward model; `info` says how it reads its input."""
    from transformers import (
        AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer,
    )

    path = resolve_reward_model_dir(path)
    config = AutoConfig.from_pretrained(path)
    info = getattr(config, "reward_model", None) or infer_info(config)
    cls = AutoModelForSequenceClassification if info["kind"] == "preference" else AutoModelForTokenClassification
    model = cls.from_pretrained(path, dtype=getattr(torch, dtype) if isinstance(dtype, str) else dtype)
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
    on the step separator, else on blank lines); 0.0 for a completion without any step.
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
        return rollout_rewards(model, seqs, masks, pad_id, batch_size, info.get("score_reduction", "mean"))
    separator = info.get("step_separator", DEFAULT_STEP_SEPARATOR)
    template = info.get("prompt_template", DEFAULT_PROMPT_TEMPLATE)
    seqs, positions, scored = [], [], []
    for k, (p, c) in enumerate(zip(prompts, completions)):
        steps = split_steps(completion_text(c), separator)
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
