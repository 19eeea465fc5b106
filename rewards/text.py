"""Getting plain text out of whatever TRL hands a reward function as a completion.

GRPOTrainer passes a string for standard prompts and a list of messages
(`[{"role": "assistant", "content": ...}]`) for conversational ones; content may itself be
a list of typed parts. Rewards look at the assistant's text only.
"""

from __future__ import annotations

from typing import Any


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # typed parts: [{"type": "text", "text": ...}, ...]
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def completion_text(completion: Any) -> str:
    """The text of one completion: a string, one message, or a list of messages (joined)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    if isinstance(completion, (list, tuple)):
        return "".join(_content_text(m.get("content")) if isinstance(m, dict) else _content_text(m) for m in completion)
    raise TypeError(f"a completion must be a string or a list of messages, got {type(completion).__name__}")


def prompt_text(prompt: Any) -> str:
    """The last user turn of a conversational prompt, or the prompt itself when it is a string."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return _content_text((users or list(prompt) or [{}])[-1].get("content"))
    return str(prompt)
