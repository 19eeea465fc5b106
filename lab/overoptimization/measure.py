"""Measuring models on the held-out prompts: samples, their gold scores, proxy scores and KL from the base.

Every measurement uses the same held-out problems: the policy-gradient recipe's held-out draw
(evaluation/reasoning.py: the task's composite drawn with seed + 1000003, no training question among them), so
none of the proxies' pairs or rollouts, the RL prompts or the direct-alignment pairs is measured on.
  gold    the task's own scorer on the completion (rewards/reasoning_tasks.score_completion: reasoning-gym's
          score_answer on the last <answer>, partial credit in [0, 1]; the book's correctness reward);
  proxy   a learned reward model scoring the completion exactly as the RL reward `rm:<proxy>` does;
  kl      per completion sampled from pi, the sum over its tokens of the exact next-token KL(pi || pi_base), both
          at the sampling temperature without the cut (lab/kl.py's sampled_kl), averaged: the KL from the base along
          the policy's own samples.
Every model samples as the RL recipe samples (nano: temperature 0.6, top-k 20, top-p 0.95): the policy as it is
used, and the base as best-of-n draws from it. Without the cut, the tail of a trained policy's distribution is
garbage that training never sampled: measured on the nano held-out problems, GRPO trained on the gold reward
itself (400 steps, +27.5 points of greedy exact match) scores a gold of 0.75 with the cut (the base: 0.64) but
0.55 without it (the base: 0.58) and 0.07 at temperature 1 (the base: 0.24).
Each measurement is a file, so an interrupted command reuses what it measured.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from rlhf_recipes.checkpoints import incomplete_reason
from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.run_folder import read_results


def heldout(profile: str, problems: int):
    """(problems, their description, chat_template_kwargs, max_new_tokens, sampling): the held-out draw of the
    policy-gradient recipe under the profile, and its sampling settings (temperature, top_p, top_k, min_p)."""
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.evaluation import EvalOptions
    from rlhf_recipes.evaluation.reasoning import ReasoningGymEvaluator
    from rlhf_recipes.paths import recipe_path

    recipe = load_recipe([str(recipe_path("grpo")), "--profile", profile])
    evaluator = ReasoningGymEvaluator(recipe, EvalOptions(num_problems=problems))
    rows, data = evaluator.data()
    return rows, data, evaluator.chat_template_kwargs(), evaluator.max_new_tokens(), evaluator.sampling()


def _load(path: str):
    from rlhf_recipes.tools.policy import load_policy

    return load_policy(path, dtype="float32", device=None)


def sample(model, tokenizer, rows, k: int, kwargs, max_new_tokens: int, sampling: dict[str, Any],
           seed: int) -> list[list[dict[str, Any]]]:
    from rlhf_recipes.generation import generate

    return generate(model, tokenizer, [list(r["prompt"]) for r in rows], n=k, batch_size=max(1, 64 // k),
                    max_new_tokens=max_new_tokens, chat_template_kwargs=kwargs, desc=f"sample x{k}", seed=seed,
                    **sampling)


def gold(rows, groups) -> list[list[float]]:
    from rewards.reasoning_tasks import score_completion

    return [[score_completion(c["text"], r["rg_dataset"], r["rg_index"]) for c in group]
            for r, group in zip(rows, groups)]


def proxy(path: str, rows, groups) -> list[list[float]]:
    """The proxy's scores, computed by the very reward function GRPO trains with (`rm:<path>`)."""
    from rewards.reward_model import reward_model_reward

    reward = reward_model_reward(path, batch_size=64, device="cpu", dtype="float32")
    prompts = [list(r["prompt"]) for r, group in zip(rows, groups) for _ in group]
    completions = [[{"role": "assistant", "content": c["text"]}] for group in groups for c in group]
    return _regroup(reward(completions, prompts=prompts), groups)


def kl(policy, base, tokenizer, rows, groups, kwargs, temperature: float) -> tuple[list, list]:
    """Per sample: (sum of exact token KLs, sum of log-ratios) of KL(policy || base) at the sampling temperature
    without the cut, along the policy's own samples (lab/kl.py's sampled_kl)."""
    from rlhf_recipes.generation import prompt_ids
    from lab.kl import sampled_kl

    prompts = prompt_ids(tokenizer, [list(r["prompt"]) for r in rows], kwargs)
    exact, ratio = sampled_kl(policy, base, [p for p, group in zip(prompts, groups) for _ in group],
                              [c["ids"] for group in groups for c in group], tokenizer.pad_token_id, temperature)
    return _regroup(exact, groups), _regroup(ratio, groups)


def _regroup(flat: list[float], groups) -> list[list[float]]:
    ends = list(itertools.accumulate(len(g) for g in groups))
    return [flat[end - len(g):end] for g, end in zip(groups, ends)]


def _write(path: Path, value: dict[str, Any]) -> dict[str, Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(value))  # whole or absent: an interrupted measurement is measured again
    return value


def measure_base(out: Path, profile: str, base: str, proxies: dict[str, str], problems: int, samples: int,
                 seed: int) -> dict[str, Any]:
    """The base's `samples` completions per held-out problem, with gold and every proxy's scores: the raw material
    of best-of-n (and of every curve's starting point). Cached in `out`; a proxy added later is scored on the
    cached samples."""
    if out.exists():
        done = json.loads(out.read_text(encoding="utf-8"))
        missing = {name: path for name, path in proxies.items() if name not in done["proxy"]}
        if missing:
            rows = heldout(profile, problems)[0]
            groups = [[{"text": t} for t in g] for g in done["texts"]]
            done["proxy"].update({name: proxy(path, rows, groups) for name, path in missing.items()})
            _write(out, done)
        return done
    from transformers import AutoTokenizer

    rows, data, kwargs, max_new, sampling = heldout(profile, problems)
    tokenizer = AutoTokenizer.from_pretrained(base)
    groups = sample(_load(base), tokenizer, rows, samples, kwargs, max_new, sampling, seed)
    return _write(out, {"problems": data, "samples_per_problem": samples, "sampling": sampling, "seed": seed,
                        "gold": gold(rows, groups), "proxy": {name: proxy(path, rows, groups)
                                                              for name, path in proxies.items()},
                        "tokens": [[c["tokens"] for c in g] for g in groups],
                        "texts": [[c["text"] for c in g] for g in groups]})


def checkpoints(run: Path) -> list[tuple[int, Path]]:
    """(step, folder) of the run's complete checkpoints, and its final model if no checkpoint holds its last step."""
    found = sorted((int(c.name.split("-")[1]), c) for c in run.glob("checkpoint-*") if incomplete_reason(c) is None)
    results = read_results(run)  # absent while the run trains: its checkpoints so far
    final = results.get("steps") if results else None
    if final and final not in {s for s, _ in found}:
        found.append((int(final), run))
    return found


def measure_run(out: Path, run: Path, profile: str, base: str, proxy_path: str | None, problems: int, samples: int,
                seed: int) -> dict[str, Any]:
    """Every checkpoint of a run: per held-out problem its samples' gold, KL from the base and (for RL) the
    proxy it trained against. Cached in `out`, step by step."""
    from transformers import AutoTokenizer

    done = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {"steps": {}}
    todo = [(s, c) for s, c in checkpoints(run) if str(s) not in done["steps"]]
    if not todo:
        return done
    rows, data, kwargs, max_new, sampling = heldout(profile, problems)
    tokenizer = AutoTokenizer.from_pretrained(base)
    reference = _load(base)
    for step, folder in todo:
        policy = _load(str(folder))
        groups = sample(policy, tokenizer, rows, samples, kwargs, max_new, sampling, seed)
        exact, ratio = kl(policy, reference, tokenizer, rows, groups, kwargs, sampling["temperature"])
        done["steps"][str(step)] = {"gold": gold(rows, groups), "kl": exact, "kl_logratio": ratio,
                                    "proxy": proxy(proxy_path, rows, groups) if proxy_path else None,
                                    "tokens": [[c["tokens"] for c in g] for g in groups]}
        done.update(problems=data, samples_per_problem=samples, sampling=sampling, seed=seed)
        _write(out, done)
        del policy
    return done
