"""Rollouts sampled from a policy on a reasoning-gym task and scored by the task's own scorer, cached on disk.

The raw material of the nano profile's preference pairs (direct alignment) and reward-model data (ORM, PRM):
the issue asks for pairs and rollouts "sampled from the base, labelled by the task's scorer", the way the book
builds its ORM data (RLHF-Book/gsm8k-qwen3-0.6B-rollouts: a policy's samples, graded by the answer checker).

`sampled_rollouts(recipe, model_path, size=, seed=, n=, ...)` draws `size` problems of the recipe's composite
(reasoning_gym.build_rows, so the same prompts the `reasoning_gym` adapter and the held-out evaluator build;
the held-out evaluator's draw is seed + 1000003), samples `n` completions per prompt from `model_path`, and
scores each with rewards.reasoning_tasks.score_completion (reasoning-gym's score_answer on the last <answer>,
the book's correctness reward). One row per prompt: the build_rows columns + `completions` (str) + `scores`
(float in [0, 1]) + `truncated` (bool).

The sampling runs on one torch thread whatever the run's count (restored afterwards): a CPU's thread count
changes the arithmetic's last bits, and over thousands of draws some completions, so the same recipe trained with
4 threads, or by a sweep worker with 1, would otherwise get other pairs; one is the count the shipped nano runs
sampled with (docs/nano.md). Sampling costs minutes on a CPU, so the rows are cached under the cache root
(tiny.cache_root), keyed by what decides them only: the weights' bytes (a checksum: not the folder's path or
mtime, so another checkout or a rebuilt identical base reuses them), the task spec, size, seed, n and the sampling
settings; a file lock makes concurrent callers wait for one sampling run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_VERSION = 1  # bump when what is sampled or scored below changes, to invalidate caches
SAMPLING_THREADS = 1  # torch's CPU threads while sampling: the shipped nano runs' count (docs/nano.md)


def _model_fingerprint(model_path: str) -> str:
    """The weights files' names and checksums: a retrained base gets new rows, a copy of the same one does not."""
    folder = Path(model_path)
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    if not files:
        return str(folder.resolve())
    digests = []
    for path in files:  # a few MB for nano's bases: milliseconds
        with open(path, "rb") as f:
            digests.append([path.name, hashlib.file_digest(f, "sha256").hexdigest()[:16]])
    return json.dumps(digests)


@contextmanager
def torch_threads(count: int):
    """torch's intra-op CPU threads set to `count` inside, the caller's count restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _template_kwargs(recipe) -> dict | None:
    return recipe.setting("chat_template_kwargs")  # a TRL config's field; not every family has it (None then)


def cache_key(recipe, model_path: str, *, size: int, seed: int, n: int, max_new_tokens: int,
              sampling: dict[str, Any], dataset_kwargs: dict[str, Any] | None = None) -> str:
    blob = json.dumps([_VERSION, _model_fingerprint(model_path),
                       recipe.args.dataset_kwargs if dataset_kwargs is None else dataset_kwargs,
                       recipe.args.system_prompt, size, seed, n, max_new_tokens, sampling, _template_kwargs(recipe)],
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def generate_from(model_path: str, chats: list[list[dict]], **generate_kwargs) -> list[list[dict[str, Any]]]:
    """rlhf_recipes.generation.generate with the saved model and tokenizer at `model_path`, loaded in fp32: the
    starting model's own completions that a sampled data source (here, data/reasoning_gym_sdpo_sft.py) builds on."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlhf_recipes.generation import generate

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    return generate(model, tokenizer, chats, **generate_kwargs)


def _sample(recipe, model_path: str, *, size: int, seed: int, n: int, max_new_tokens: int,
            sampling: dict[str, Any], batch_size: int, dataset_kwargs: dict[str, Any] | None) -> list[dict[str, Any]]:
    from rewards.reasoning_tasks import score_completion
    from rlhf_recipes.data.reasoning_gym import build_rows

    rows = build_rows(recipe, size, seed, dataset_kwargs).to_list()
    with torch_threads(SAMPLING_THREADS):  # the same rows whatever the run's thread count (module docstring)
        groups = generate_from(model_path, [r["prompt"] for r in rows], n=n, batch_size=batch_size,
                               max_new_tokens=max_new_tokens, chat_template_kwargs=_template_kwargs(recipe),
                               desc=f"sample {n} rollouts per prompt", seed=seed, **sampling)
    out = []
    for row, group in zip(rows, groups):
        texts = [g["text"] for g in group]
        out.append({**row, "completions": texts,
                    "scores": [score_completion(t, row["rg_dataset"], row["rg_index"]) for t in texts],
                    "truncated": [g["truncated"] for g in group]})
    return out


def sampled_rollouts(recipe, model_path: str, *, size: int, seed: int, n: int, max_new_tokens: int,
                     sampling: dict[str, Any], batch_size: int = 64,
                     dataset_kwargs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """`size` problems (seed `seed`) x `n` completions sampled from `model_path`, scored; cached on disk.
    `dataset_kwargs`: the composite's tasks and seed, where they are not the recipe's own dataset_kwargs as they
    stand (a source with keys of its own removes them first; build_rows' `kwargs`)."""
    from filelock import FileLock

    from rlhf_recipes.tiny import cache_root

    key = cache_key(recipe, model_path, size=size, seed=seed, n=n, max_new_tokens=max_new_tokens, sampling=sampling,
                    dataset_kwargs=dataset_kwargs)
    path = cache_root() / f"rollouts-{key}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            print(f"sampling {size} prompts x {n} rollouts from {model_path} (once, cached) -> {path}",
                  file=sys.stderr, flush=True)
            rows = _sample(recipe, model_path, size=size, seed=seed, n=n, max_new_tokens=max_new_tokens,
                           sampling=sampling, batch_size=batch_size, dataset_kwargs=dataset_kwargs)
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
            os.replace(tmp, path)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
