"""Preference pairs built from a reasoning-gym task: a correct and an incorrect completion sampled from the
recipe's starting model, labelled by the task's own scorer (the nano profile's direct-alignment data).

The book's direct-alignment runs read human or AI preferences (UltraFeedback). The book's task, spell_backward,
has a verifier instead, so the pairs come from the model being aligned, as on-policy preference data does:
  1. draw `num_samples` prompts of the recipe's composite (reasoning_gym.build_rows: the same prompts the
     `reasoning_gym` adapter builds for policy gradients);
  2. sample ROLLOUTS_PER_PROMPT completions per prompt from `model_name_or_path` (the policy's starting point,
     and DPO's reference) and score each with the task's scorer (data/sampled_rollouts.py: reasoning-gym's
     score_answer on the last <answer>, the book's correctness reward; cached on disk);
  3. a prompt gives one pair when its samples hold both a correct (score 1) and an incorrect (score < 1)
     completion: chosen = the correct completion sampled most often, rejected = the incorrect one sampled most
     often (ties: the first sampled). The most frequent mistake is the one the model is most likely to make,
     greedy decoding included, so it is the preference that most needs to flip; the most frequent correct
     answer is the model's own most likely way of being right (for spell_backward, the one right answer).
     Completions that ran out of tokens are left out: the chat template would close them with an end token
     the model never produced. Prompts the model always or never solves give no pair (counted in the log).

Recipe keys (as for `reasoning_gym`):
  dataset: reasoning_gym_preferences
  num_samples: 3000                    # prompts drawn; about a fifth give a pair on the nano base
  dataset_kwargs: {tasks: [{name: spell_backward, config: {min_word_len: 3, max_word_len: 8}}], seed: 42}
  system_prompt: DeepSeekZero

Held-out pairs (`rlhf-recipes evaluate`, evaluation/heldout.py): the same construction on the held-out draw the
reasoning-gym evaluator uses (seed + HELDOUT_SEED_OFFSET), prompts that are also training prompts skipped.
Columns: prompt (system + user messages), chosen and rejected (one assistant message each), as ultrafeedback's.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from rlhf_recipes.data.base import DataError, DataSource
from rlhf_recipes.data.reasoning_gym import HELDOUT_SEED_OFFSET, questions, system_prompt_text, training_seed

if TYPE_CHECKING:
    from datasets import Dataset

logger = logging.getLogger(__name__)

# Sampling, measured on the nano base (200 prompts x 8, greedy exact match 21%): temperature 0.3 gives a pair
# on 71/200 prompts (sample exact match 21.5%, close to greedy: the pairs are the base's own likely answers);
# 0.6 also gives 71/200 but its samples are half as often right (10.6%), i.e. further from what greedy
# decoding does; 0.8 gives 50/200. top_p 0.95 cuts the tail of letter soup.
ROLLOUTS_PER_PROMPT = 8
SAMPLING = {"temperature": 0.3, "top_p": 0.95}
MAX_NEW_TOKENS = 24  # the nano base answers in ~14 tokens (the policy-gradient nano overlay's completion budget)
CORRECT = 1.0  # the scorer's full score: an exact answer


def preference_pair(row: dict[str, Any]) -> dict[str, Any] | None:
    """One pair from a prompt's scored samples (sampled_rollouts' row), or None when it has no contrast."""
    kept = [(text, score) for text, score, cut in zip(row["completions"], row["scores"], row["truncated"]) if not cut]
    correct = Counter(text for text, score in kept if score >= CORRECT)
    wrong = Counter(text for text, score in kept if score < CORRECT)
    if not correct or not wrong:
        return None
    reply = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    return {"prompt": row["prompt"], "chosen": reply(correct.most_common(1)[0][0]),
            "rejected": reply(wrong.most_common(1)[0][0])}


def sampled_pairs(recipe, size: int, seed: int,
                  skip: set[str] = frozenset()) -> tuple[list[dict[str, Any]], int, int]:
    """(pairs, prompts without a pair, prompts skipped) from `size` prompts of the composite drawn with `seed`,
    sampled from the recipe's starting model; prompts whose question is in `skip` are left out before pairing."""
    from rlhf_recipes.data.sampled_rollouts import sampled_rollouts
    from rlhf_recipes.models import resolve_model_path

    rows = sampled_rollouts(recipe, resolve_model_path(recipe.model.model_name_or_path), size=size, seed=seed,
                            n=ROLLOUTS_PER_PROMPT, max_new_tokens=MAX_NEW_TOKENS, sampling=SAMPLING)
    kept = [r for r in rows if r["prompt"][-1]["content"] not in skip]
    pairs = [p for p in map(preference_pair, kept) if p is not None]
    return pairs, len(kept) - len(pairs), len(rows) - len(kept)


def generate(recipe) -> "Dataset":
    from datasets import Dataset

    where, args = recipe.source, recipe.args
    if args.num_samples is None or args.num_samples <= 0:
        raise DataError(f"{where}: reasoning_gym_preferences samples its pairs: set `num_samples` > 0 (prompts "
                        "drawn; about a fifth give a pair on the nano base)")
    pairs, unpaired, _ = sampled_pairs(recipe, args.num_samples, training_seed(recipe))
    if not pairs:
        raise DataError(f"{where}: none of the {args.num_samples} prompts got both a correct and an incorrect "
                        f"completion in {ROLLOUTS_PER_PROMPT} samples from `{recipe.model.model_name_or_path}`; "
                        "the model is always or never right on this task: draw more prompts or start from another "
                        "model")
    logger.warning("%s: %d preference pairs from %d prompts (%d had no correct/incorrect contrast in %d samples)",
                   where, len(pairs), args.num_samples, unpaired, ROLLOUTS_PER_PROMPT)
    return Dataset.from_list(pairs)


def heldout(recipe, count: int | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`count` pairs built the same way on the reasoning-gym evaluator's held-out draw, none on a training
    prompt; the draw grows until it gives `count` pairs (or reaches 64 prompts per pair asked for)."""
    from rlhf_recipes.errors import EvalError

    count = count or 200
    seed = training_seed(recipe) + HELDOUT_SEED_OFFSET
    trained = questions(recipe, recipe.args.num_samples or 0, training_seed(recipe))
    # About a fifth of the prompts give a pair on the shipped nano base (122 of 600 training prompts, 175 of 800
    # held-out ones): 8x gives the count at the first draw. A draw that falls short is drawn again, twice as large.
    size = 8 * count
    while True:
        pairs, unpaired, skipped = sampled_pairs(recipe, size, seed, skip=trained)
        if len(pairs) >= count or size >= 64 * count:
            break
        size *= 2
    if not pairs:
        raise EvalError(f"{recipe.source}: no held-out prompt got both a correct and an incorrect completion in "
                        f"{ROLLOUTS_PER_PROMPT} samples from `{recipe.model.model_name_or_path}`")
    pairs = pairs[:count]
    data = {"source": "reasoning_gym_preferences", "tasks": (recipe.args.dataset_kwargs or {}).get("tasks"),
            "split": "heldout", "seed": seed, "problems": len(pairs), "prompts_drawn": size,
            "prompts_without_pair": unpaired,
            "overlaps_dropped": skipped, "sampled_from": recipe.model.model_name_or_path,
            "sampling": {"rollouts_per_prompt": ROLLOUTS_PER_PROMPT, "max_new_tokens": MAX_NEW_TOKENS, **SAMPLING},
            "construction": f"prompts of the recipe's composite drawn with seed {seed - HELDOUT_SEED_OFFSET} + "
                            f"{HELDOUT_SEED_OFFSET}, training prompts skipped; per prompt {ROLLOUTS_PER_PROMPT} "
                            "completions sampled from the starting model and scored by the task's scorer; chosen = "
                            "the most frequent correct one, rejected = the most frequent incorrect one"}
    return pairs, data


SOURCE = DataSource(
    name="reasoning_gym_preferences",
    columns=("prompt", "chosen", "rejected"),
    generate=generate,
    heldout=heldout,
    system_prompt_text=system_prompt_text,
)
