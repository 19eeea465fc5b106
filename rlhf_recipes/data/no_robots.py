"""HuggingFaceH4/no_robots -> conversational prompt/completion for SFT (book chapter 4).

Real schema: prompt (str), prompt_id (str), messages (list of {"content", "role"}: an optional
system turn, then user/assistant turns), category (str). The book trains on the FINAL assistant
turn only: prompt = every message before it, completion = that turn. TRL's SFTTrainer then
tokenizes prompt = template(prompt, add_generation_prompt=True) and full = template(prompt +
completion) and puts the loss on full[len(prompt):]: the last answer's content and its end token.
Rows whose last message is not the assistant's carry no target and are dropped (counted in the log).
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.data.base import DROP, DataSource


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"column `messages` must be a non-empty list of {{'content', 'role'}}, got {value!r:.80}")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"column `messages`, message {i}: must be {{'content': str, 'role': str}}, got {m!r:.80}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    messages = _messages(row["messages"])
    if messages[-1]["role"] != "assistant":
        return {DROP: "last message is not the assistant's"}
    if len(messages) == 1:
        return {DROP: "no turn before the assistant's answer"}
    return {"prompt": messages[:-1], "completion": messages[-1:]}


SOURCE = DataSource(
    name="no_robots",
    hub_id="HuggingFaceH4/no_robots",
    fixture="no_robots/train.jsonl",
    columns=("prompt", "prompt_id", "messages", "category"),
    normalize=normalize,
    heldout_split="test",
    heldout_fixture="no_robots/test.jsonl",
)
