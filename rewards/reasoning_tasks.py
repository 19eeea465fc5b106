"""Verifiable rewards for reasoning-gym tasks, as the RLHF book computes them (chapter 6).

Each row of the `reasoning_gym` data source carries two columns that these functions read:
  rg_dataset  the reasoning-gym composite spec as JSON: {"size", "seed", "datasets": [{"name",
              "weight", "config"}]}, i.e. the recipe's `dataset_kwargs` and `num_samples`
  rg_index    the row's index in that composite dataset
The entry is regenerated from them (reasoning-gym is deterministic per seed and index) and
scored by the composite's own `score_answer`, which forwards to the task that made it: the
book's code path, never a re-implementation, for any reasoning-gym task.

The book's per-completion signals:
  correctness = score_answer(text of the LAST <answer>...</answer>, entry), 0 without one
  format      = 0.25 for each of <think>, </think>, <answer>, </answer> present
  total       = correctness + penalty + 0.5 * format     (penalty: DAPO's overlong penalty, else 0)
  binary      = correctness * [format == 1]              (keeps partial credit, despite its name)
"""

from __future__ import annotations

import functools
import json
import logging

from rewards.text import completion_text

logger = logging.getLogger(__name__)

FORMAT_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
FORMAT_WEIGHT = 0.5  # the book's weight of the format score in the total


def composite_spec(tasks: list[dict], size: int, seed: int) -> str:
    """The canonical JSON of a composite dataset: the key under which rows and rewards meet."""
    specs = [{"name": t["name"], "weight": t.get("weight", 1), "config": t.get("config") or {}} for t in tasks]
    return json.dumps({"size": int(size), "seed": int(seed), "datasets": specs}, sort_keys=True)


@functools.lru_cache(maxsize=16)
def composite_dataset(spec_json: str):
    """reasoning-gym's composite dataset for a spec (as the book builds it: seeded, sized, weighted)."""
    import reasoning_gym
    from reasoning_gym.composite import DatasetSpec

    spec = json.loads(spec_json)
    datasets = [DatasetSpec(name=d["name"], weight=d["weight"], config=dict(d["config"])) for d in spec["datasets"]]
    return reasoning_gym.create_dataset("composite", size=spec["size"], seed=spec["seed"], datasets=datasets)


@functools.lru_cache(maxsize=65536)
def composite_entry(spec_json: str, index: int) -> dict:
    return composite_dataset(spec_json)[int(index)]


def extract_last_answer(text: str) -> str | None:
    """Text inside the last <answer>...</answer> pair (reasoning-gym's own extractor), or None."""
    from reasoning_gym.utils import extract_answer

    return extract_answer(text)


def score_completion(text: str, spec_json: str, index: int) -> float:
    answer = extract_last_answer(text)
    if answer is None:
        return 0.0
    entry = composite_entry(spec_json, int(index))
    try:
        return float(composite_dataset(spec_json).score_answer(answer, entry))
    except Exception as e:  # a scorer choking on a malformed answer must not end the run
        task = entry.get("metadata", {}).get("source_dataset", "?")
        logger.warning("%s.score_answer raised %s on answer %r; scored 0", task, type(e).__name__, answer[:80])
        return 0.0


def _columns(n: int, rg_dataset, rg_index) -> tuple[list, list]:
    if rg_dataset is None or rg_index is None:
        raise ValueError(
            "correctness needs the columns `rg_dataset` and `rg_index`, which the `reasoning_gym` data "
            "source provides; is the recipe's dataset `reasoning_gym`?"
        )
    if not (len(rg_dataset) == len(rg_index) == n):
        raise ValueError(f"got {n} completions but {len(rg_dataset)} rg_dataset / {len(rg_index)} rg_index values")
    return rg_dataset, rg_index


def format_score(text: str) -> float:
    return float(sum(0.25 for tag in FORMAT_TAGS if tag in text))


def correctness_reward(completions, rg_dataset=None, rg_index=None, **kwargs) -> list[float]:
    """The task's own score_answer on the last <answer> tag's text; 0.0 without a complete tag."""
    specs, indices = _columns(len(completions), rg_dataset, rg_index)
    return [score_completion(completion_text(c), s, i) for c, s, i in zip(completions, specs, indices)]


def format_reward(completions, **kwargs) -> list[float]:
    """0.25 for each of <think>, </think>, <answer>, </answer> that appears (max 1.0)."""
    return [format_score(completion_text(c)) for c in completions]


def total_reward(completions, rg_dataset=None, rg_index=None, **kwargs) -> list[float]:
    """The book's total as one function: correctness + 0.5 * format (no length penalty).

    Recipes usually list correctness_reward and format_reward with weights 1.0 and 0.5
    instead, so each is logged separately; TRL's `reward` is then this same total.
    """
    correctness = correctness_reward(completions, rg_dataset, rg_index)
    return [c + FORMAT_WEIGHT * format_score(completion_text(x)) for c, x in zip(correctness, completions)]


def binary_reward(completions, rg_dataset=None, rg_index=None, **kwargs) -> list[float]:
    """correctness * [all four format tags present]: MaxRL's signal (keeps partial credit)."""
    correctness = correctness_reward(completions, rg_dataset, rg_index)
    return [c if format_score(completion_text(x)) == 1.0 else 0.0 for c, x in zip(correctness, completions)]
