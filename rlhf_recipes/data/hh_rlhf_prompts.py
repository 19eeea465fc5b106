"""Anthropic/hh-rlhf as prompts only, for policy gradients against a reward model (the classic pipeline).

The same rows, parsing and drops as the `hh_rlhf` pairs adapter (rlhf_recipes/data/hh_rlhf.py),
keeping only `prompt`: the dialogue up to its last Human turn, as messages. With the same
`dataset_shuffle_seed`, `num_samples` and `eval_fraction`, a policy recipe on `hh_rlhf_prompts`
and a reward-model or DPO recipe on `hh_rlhf` split the rows identically, so the held-out
prompts are the prompts of the held-out pairs (`rlhf-recipes pipeline` relies on it).
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.data import hh_rlhf
from rlhf_recipes.data.base import DROP, DataSource


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    pair = hh_rlhf.normalize(row)
    if DROP in pair:
        return pair
    return {"prompt": pair["prompt"]}


SOURCE = DataSource(
    name="hh_rlhf_prompts",
    hub_id=hh_rlhf.SOURCE.hub_id,
    fixture=hh_rlhf.SOURCE.fixture,
    columns=hh_rlhf.SOURCE.columns,
    normalize=normalize,
)
