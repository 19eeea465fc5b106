"""One held-out evaluation, start to finish: the model (and the baseline, or its quantized copy) scored on the same
problems, summarized with intervals, as the document saved to RUN_DIR/eval/<name>.json.

The comparison is one of:
  none          the model alone;
  baseline      the recipe's starting model (`model_name_or_path`) scored the same way: before / after;
  quantization  the same model unquantized (before) and loaded in int8 / int4 (after); for a policy, also
                KL(unquantized || quantized) per token on the unquantized model's own greedy completions.
"""

from __future__ import annotations

import copy
import datetime
import logging
import time
from typing import Any

from rlhf_recipes.evaluation.base import EvalOptions, Evaluator, Scores, difference, summarize
from rlhf_recipes.generation import free_memory
from rlhf_recipes.json_safe import json_safe

logger = logging.getLogger(__name__)

KL_PROMPTS = 64  # prompts whose own completions measure KL(unquantized || quantized)


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("torch", "transformers", "trl", "accelerate", "peft", "datasets", "reasoning_gym", "math-verify",
                 "bitsandbytes", "rlhf-recipes"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _timed_score(evaluator: Evaluator, model, tokenizer) -> Scores:
    start = time.perf_counter()
    scores = evaluator.score(model, tokenizer)
    seconds = time.perf_counter() - start
    problems = len(next(iter(scores.per_problem.values()), [])) or len(evaluator.data()[0])
    scores.throughput = {**scores.throughput, "problems": problems, "seconds": round(seconds, 3),
                         "problems_per_s": round(problems / seconds, 3) if seconds else None}
    return scores


def quantization_kl(evaluator: Evaluator, full, quantized, tokenizer, seed: int) -> dict[str, float] | None:
    """KL(unquantized || quantized) per token, on the unquantized model's greedy completions of the prompts."""
    from rlhf_recipes.generation import generate, pair_kl, prompt_ids

    prompts = evaluator.prompts()
    if prompts is None:
        return None
    chats, kwargs, max_new_tokens = prompts
    chats = chats[:KL_PROMPTS]
    outputs = generate(full, tokenizer, chats, n=1, batch_size=evaluator.options.batch_size,
                       max_new_tokens=max_new_tokens, chat_template_kwargs=kwargs, desc="KL completions", seed=seed)
    # on the host: a real vocabulary's log-probs, twice
    kl = pair_kl(full, quantized, prompt_ids(tokenizer, chats, kwargs), [o[0]["ids"] for o in outputs],
                 tokenizer.pad_token_id, evaluator.options.batch_size, device="cpu")
    tokens = sum(n for _, _, n in kl)
    return {"kl_per_token": sum(v for v, _, _ in kl) / max(tokens, 1),
            "kl_per_sequence": sum(v for v, _, _ in kl) / max(len(kl), 1), "kl_prompts": len(kl), "kl_tokens": tokens}


def per_problem(scores: Scores) -> dict[str, list[float]]:
    """Each unweighted metric's value on each problem, in the problem order (a few KB for 200 problems): what an
    interval over several runs on the same problems needs (the nano-book and sweep reports' interval over seeds and
    problems)."""
    return {name: [round(float(v), 6) for v in values] for name, values in scores.per_problem.items()
            if name not in scores.weights}


def evaluate(recipe, evaluator: Evaluator, model_path: str, baseline: bool = False) -> dict[str, Any]:
    """Score `model_path` (and its baseline or unquantized self) on the evaluator's held-out problems."""
    from dataclasses import replace

    options: EvalOptions = evaluator.options
    _, data = evaluator.data()
    comparison = "quantization" if options.quantize else "baseline" if baseline else "none"
    before = before_path = kl = None
    if comparison == "quantization":
        full_evaluator = copy.copy(evaluator)  # the same problems and family hooks, loading the model unquantized
        full_evaluator.options = replace(options, quantize=None)
        full_evaluator._data = evaluator._data
        full_model, full_tokenizer = full_evaluator.load(model_path)
        before, before_path = _timed_score(full_evaluator, full_model, full_tokenizer), f"{model_path} (unquantized)"
    elif baseline:
        before_path = recipe.model.model_name_or_path
        base_model, base_tokenizer = evaluator.load_baseline(before_path)
        before = _timed_score(evaluator, base_model, base_tokenizer)
        del base_model, base_tokenizer
        free_memory()
    model, tokenizer = evaluator.load(model_path)
    after = _timed_score(evaluator, model, tokenizer)
    if comparison == "quantization":
        kl = quantization_kl(evaluator, full_model, model, tokenizer, options.seed)
        if kl is not None:
            after.fixed.update(kl)
            before.fixed.update({k: 0.0 for k in kl if k.startswith("kl_per")})
        del full_model
        free_memory()

    metrics, bounds = summarize(after, options.seed)
    result: dict[str, Any] = {
        "name": options.name,
        "algorithm": recipe.algorithm.name,
        "family": evaluator.family_name,
        "recipe": recipe.source,
        "evaluation": evaluator.kind,
        "comparison": comparison,
        "model": str(model_path),
        "baseline_model": None if before_path is None else str(before_path),
        "metrics": metrics,
        "baseline": None,
        "difference": None,
        "intervals": bounds,
        "settings": {**options.settings(), "decoding": after.decoding, "confidence": 0.95},
        "data": data,
        "throughput": after.throughput,
        "versions": versions(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "samples": after.samples,
        "per_problem": per_problem(after),
    }
    if before is not None:
        result["baseline"], result["baseline_intervals"] = summarize(before, options.seed)
        result["difference"] = difference(after, before, options.seed)
        result["baseline_throughput"] = before.throughput
        result["baseline_samples"] = before.samples
        result["baseline_per_problem"] = per_problem(before)
    if after.details:
        result["details"] = after.details
    if before is not None and before.details:
        result["baseline_details"] = before.details
    return json_safe(result)
