"""What every data adapter shares: the DataSource record, the schema error, and the DROP marker.

Each adapter (rlhf_recipes/data/<dataset>.py) builds one DataSource from these; sources.py
keeps the name -> adapter table and the loading, so adapters never import sources.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from rlhf_recipes.errors import RecipeError

if TYPE_CHECKING:
    from datasets import Dataset

DROP = "__drop__"  # normalize() returns {DROP: "reason"} for rows without signal


class DataError(RecipeError):
    """Data that does not fit the source's schema; the message names the row and column."""


@dataclass(frozen=True)
class DataSource:
    name: str
    columns: tuple[str, ...]  # required columns of the source schema
    hub_id: str | None = None
    fixture: str | None = None  # path under data/fixtures/
    normalize: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    default_split: str = "train"
    hub_config: str | None = None
    # Procedural sources (reasoning-gym) build their rows instead of reading a file.
    generate: Callable[[Any], "Dataset"] | None = None
    # The dataset's own held-out split, which held-out evaluation reads when the recipe held no rows out
    # (rlhf_recipes/evaluation/heldout.py), and its shipped fixture for the tiny profile.
    heldout_split: str | None = None
    heldout_fixture: str | None = None
    # A procedural source's own held-out rows: (recipe, count) -> (rows, description); e.g. preference pairs
    # sampled on a reasoning-gym task's held-out draw (data/reasoning_gym_preferences.py).
    heldout: Callable[[Any, int | None], tuple[list[dict[str, Any]], dict[str, Any]]] | None = None
    # The recipe's `system_prompt` -> the system message's text, where a source reads it as a name
    # (reasoning-gym: 'DeepSeekZero'); None: the text as written.
    system_prompt_text: Callable[[str | None], str | None] | None = None
    # Sources of rollouts sampled from a policy (data/reasoning_gym_rollouts.py): (recipe, count) -> (held-out
    # problems x n rollouts in the prompt/completions/rewards schema, their description), on which a reward
    # model's best-of-N pick is measured (evaluation/best_of_n.py).
    heldout_rollouts: Callable[[Any, int], tuple[list[dict[str, Any]], dict[str, Any]]] | None = None
    # A hub repo of raw JSONL files that `datasets` cannot merge into one split (their schemas differ):
    # split -> the files to read line by line, in this order (data/hub_files.py; PRM800K's phase files).
    hub_files: Callable[[str], tuple[str, ...]] | None = None
