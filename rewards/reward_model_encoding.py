"""How a reward model reads its input: the text layout of each kind, as token ids.

One place for the layout, shared by training (custom_losses/reward_models/data.py), evaluation
and the reward function that scores a policy's completions (rewards/reward_model.py), so a
trained RM is always read the way it was trained:
  preference  the whole conversation, prompt + response, through the tokenizer's chat
              template; the reward is the head at the last non-pad token;
  outcome     chat-templated prompt with the generation prompt, then the completion text and
              EOS (what a policy emitted); the completion tokens are scored;
  process     `prompt_template` with the problem, then each step + separator; the last token
              of each separator carries that step's label.
"""

from __future__ import annotations

from typing import Any

from rewards.text import completion_text

DEFAULT_PROMPT_TEMPLATE = "Problem: {problem}\nReasoning trace:\n"  # the book's PRM prompt
DEFAULT_STEP_SEPARATOR = "\n<step>\n"  # the book's PRM step separator
# How a process RM splits a completion into steps: on the separator (else blank lines), as the book's PRM800K
# solutions are written; or the characters of the last <answer>, then the end of the answer (a spelled answer,
# e.g. reasoning-gym spell_backward on the nano profile, whose think block is empty).
STEP_SPLITS = ("separator", "answer_characters")
ANSWER_END_STEP = "</answer>"


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


def answer_character_steps(text: str) -> list[str]:
    """Each character of the completion's last <answer>, then ANSWER_END_STEP (the step where the answer ends,
    which a too-short answer gets wrong); [] without an answer."""
    from rewards.reasoning_tasks import extract_last_answer

    answer = extract_last_answer(text)
    return [] if answer is None else [*answer, ANSWER_END_STEP]


def completion_steps(text: str, separator: str, step_split: str = "separator") -> list[str]:
    """A completion's steps, split the way the process RM was trained (STEP_SPLITS)."""
    return answer_character_steps(text) if step_split == "answer_characters" else split_steps(text, separator)


def truncate(ids: list[int], max_length: int | None, mode: str) -> list[int]:
    if max_length is None or len(ids) <= max_length:
        return ids
    return ids[:max_length] if mode == "keep_start" else ids[len(ids) - max_length:]
