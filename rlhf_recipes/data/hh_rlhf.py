"""Anthropic/hh-rlhf -> conversational prompt/chosen/rejected (`hh_rlhf`), or the prompt alone (`hh_rlhf_prompts`).

Each side is one string "\\n\\nHuman: ...\\n\\nAssistant: ...". Both sides share every
turn but the last Assistant turn: that shared prefix is the prompt.

`hh_rlhf_prompts` is for policy gradients against a reward model (the classic pipeline): the same rows, parsing
and drops as the pairs, keeping only `prompt`. With the same `dataset_shuffle_seed`, `num_samples` and
`eval_fraction`, a policy recipe on `hh_rlhf_prompts` and a reward-model or DPO recipe on `hh_rlhf` split the rows
identically, so the held-out prompts are the prompts of the held-out pairs (`rlhf-recipes pipeline` relies on it).
"""

from __future__ import annotations

import re
from typing import Any

from rlhf_recipes.data.base import DROP, DataSource

_TURN = re.compile(r"\n\n(Human|Assistant): ")
_ROLES = {"Human": "user", "Assistant": "assistant"}


def parse_dialogue(text: str, column: str) -> list[dict[str, str]]:
    """"\\n\\nHuman: a\\n\\nAssistant: b" -> [{'role': 'user', ...}, {'role': 'assistant', ...}]."""
    if not isinstance(text, str):
        raise ValueError(f"column `{column}` must be a string, got {type(text).__name__}")
    parts = _TURN.split(text)
    if parts[0].strip() or len(parts) < 3:
        raise ValueError(f"column `{column}` must start with '\\n\\nHuman: ', got {text[:60]!r}")
    return [{"role": _ROLES[role], "content": content} for role, content in zip(parts[1::2], parts[2::2])]


def _ends_in_a_reply(response: list[dict[str, str]]) -> bool:
    return bool(response) and response[-1]["role"] == "assistant" and bool(response[-1]["content"].strip())


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    chosen = parse_dialogue(row["chosen"], "chosen")
    rejected = parse_dialogue(row["rejected"], "rejected")
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    # The prompt must end with the user's turn: back off to it if the sides also share part of the reply.
    while shared > 0 and chosen[shared - 1]["role"] != "user":
        shared -= 1
    if shared == 0:
        raise ValueError("chosen and rejected share no user turn to use as the prompt")
    if chosen[shared:] == rejected[shared:]:
        return {DROP: "identical chosen and rejected"}
    # Judge the reply's text, not the list: a side ending "\n\nAssistant: " parses as one assistant turn with
    # empty content (hh-rlhf harmless-base test row 87), a pair that would teach answering with nothing.
    if not _ends_in_a_reply(chosen[shared:]) or not _ends_in_a_reply(rejected[shared:]):
        return {DROP: "empty response"}
    return {"prompt": chosen[:shared], "chosen": chosen[shared:], "rejected": rejected[shared:]}


SOURCE = DataSource(
    name="hh_rlhf",
    hub_id="Anthropic/hh-rlhf",
    fixture="hh-rlhf/harmless-base-test.jsonl",
    columns=("chosen", "rejected"),
    normalize=normalize,
)


def normalize_prompt(row: dict[str, Any]) -> dict[str, Any]:
    pair = normalize(row)
    return pair if DROP in pair else {"prompt": pair["prompt"]}


PROMPTS_SOURCE = DataSource(
    name="hh_rlhf_prompts",
    hub_id=SOURCE.hub_id,
    fixture=SOURCE.fixture,
    columns=SOURCE.columns,
    normalize=normalize_prompt,
)
