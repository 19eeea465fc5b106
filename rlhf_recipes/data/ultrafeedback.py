"""argilla/ultrafeedback-binarized-preferences-cleaned -> conversational prompt/chosen/rejected.

Real schema: `chosen` and `rejected` are message lists, the user turn then the assistant
turn; `prompt` is the user text. The book uses no system prompt.
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.data.base import DROP, DataSource


def _assistant_reply(messages: Any, column: str) -> list[dict[str, str]]:
    if not isinstance(messages, list) or len(messages) < 2:
        raise ValueError(f"column `{column}` must be a list of at least 2 messages (user, assistant), got {messages!r:.80}")
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant" or not isinstance(last.get("content"), str):
        raise ValueError(f"column `{column}`: last message must be {{'role': 'assistant', 'content': str}}, got {last!r:.80}")
    return [{"role": "assistant", "content": last["content"]}]


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    prompt = row["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"column `prompt` must be a non-empty string, got {prompt!r:.80}")
    chosen = _assistant_reply(row["chosen"], "chosen")
    rejected = _assistant_reply(row["rejected"], "rejected")
    if chosen == rejected:
        return {DROP: "identical chosen and rejected"}
    if not chosen[0]["content"].strip() or not rejected[0]["content"].strip():
        return {DROP: "empty response"}  # as hh_rlhf; a local file's empty reply is an error before loading
    return {"prompt": [{"role": "user", "content": prompt}], "chosen": chosen, "rejected": rejected}


SOURCE = DataSource(
    name="ultrafeedback",
    hub_id="argilla/ultrafeedback-binarized-preferences-cleaned",
    fixture="ultrafeedback/train.jsonl",
    columns=("prompt", "chosen", "rejected"),
    normalize=normalize,
)
