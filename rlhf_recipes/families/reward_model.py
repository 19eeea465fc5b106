"""Reward models (book chapter 5): Bradley-Terry preference RM, outcome RM (ORM), process RM (PRM).

The algorithm's config class says which kind it trains (`rm_kind`):
  preference  AutoModelForSequenceClassification, 1 label: a linear head on the last non-pad
              token; TRL's RewardTrainer on pre-tokenized pairs (truncated, not dropped);
  outcome     AutoModelForTokenClassification, 1 label: one logit per token (OutcomeRMTrainer);
  process     AutoModelForTokenClassification, 3 labels (bad/neutral/good) (ProcessRMTrainer).
Rows are tokenized here, once per run, with the layout of rewards/reward_model_encoding.py;
the run's log gets the token-length statistics and the count of dropped examples. At the end
of training `final_results` evaluates the model on the held-out split (pairwise accuracy and
margin, top-1 / pairwise accuracy over rollouts, step accuracy) and scores a correct and a
perturbed answer (the book's demo); `rlhf-recipes evaluate` does the same for a saved model.
The family's hooks (`RewardModels`, at the end) override rlhf_recipes/families/base.py's defaults.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

from rlhf_recipes.data.base import DataError
from rlhf_recipes.data.sources import FIXTURES
from rlhf_recipes.families.base import Family

logger = logging.getLogger(__name__)

TINY_OVERLAY = {  # on top of config.TINY_COMMON
    "num_samples": 48,
    "eval_fraction": 0.25,
    "max_steps": 4,
    "per_device_train_batch_size": 2,
    "per_device_eval_batch_size": 4,
    "effective_batch_size": 4,
    "max_length": 256,
    "eval_steps": 2,
}

NUM_LABELS = {"preference": 1, "outcome": 1, "process": 3}
STEP_LABELS = {0: "bad", 1: "neutral", 2: "good"}


def _kind(recipe) -> str:
    return type(recipe.training).rm_kind


def reward_model_info(recipe) -> dict[str, Any]:
    """How this RM reads its input; saved in the model's config.json (`reward_model`) so a
    saved RM is scored the way it was trained, wherever it is loaded."""
    cfg, kind = recipe.training, _kind(recipe)
    info: dict[str, Any] = {"kind": kind, "algorithm": recipe.algorithm.name, "max_length": cfg.max_length,
                            "truncation_mode": cfg.truncation_mode}
    if kind == "outcome":
        info["score_reduction"] = cfg.score_reduction
    if kind == "process":
        info.update(prompt_template=cfg.prompt_template, step_separator=cfg.step_separator)
    return info


# --------------------------------------------------------------------------------------
# Data


def tokenize_split(recipe, tokenizer, rows, split: str):
    """Normalized rows -> (tokenized Dataset, statistics); logs the statistics once."""
    from datasets import Dataset

    from custom_losses.reward_models.data import preference_examples, rollout_examples, step_examples

    cfg, kind = recipe.training, _kind(recipe)
    rows = rows.to_list() if hasattr(rows, "to_list") else list(rows)
    if kind == "preference":
        examples, stats = preference_examples(rows, tokenizer, cfg.max_length, cfg.truncation_mode)
    elif kind == "outcome":
        examples, stats = rollout_examples(rows, tokenizer, cfg.max_length, cfg.max_rollouts_per_prompt)
    else:
        examples, stats = step_examples(rows, tokenizer, cfg.max_length, cfg.max_reasoning_steps,
                                        cfg.prompt_template, cfg.step_separator)
    stats = {"rows": len(rows), **stats}
    _log_stats(split, stats)
    if not examples:
        raise DataError(f"{recipe.source}: no {split} examples left after tokenization: {stats}")
    return Dataset.from_list(examples), stats


def _log_stats(split: str, stats: dict) -> None:
    import os

    if int(os.environ.get("RANK", "0")) != 0:
        return
    lengths = stats.get("lengths", {})
    count = {k: v for k, v in stats.items() if k not in ("lengths", "dropped", "rows")}
    logger.info(
        "%s data: %d rows -> %s; dropped %s; tokens per sequence before truncation: mean %s, p99 %s, max %s; "
        "%.1f%% over max_length %s",
        split, stats["rows"], ", ".join(f"{v} {k}" for k, v in count.items()), stats.get("dropped") or "none",
        lengths.get("mean"), lengths.get("p99"), lengths.get("max"), 100 * lengths.get("fraction_truncated", 0.0),
        lengths.get("max_length"),
    )
    for reason, n in (stats.get("dropped") or {}).items():
        logger.warning("%s data: dropped %d examples: %s", split, n, reason)


# --------------------------------------------------------------------------------------
# Evaluation


def evaluate(info: dict, model, tokenizer, dataset, batch_size: int = 8) -> dict[str, Any]:
    """The book's evaluation numbers on a tokenized split (every process scores all of it)."""
    from custom_losses.reward_models.losses import preference_metrics, rollout_metrics, step_metrics
    from rewards.reward_model_scoring import rollout_rewards, sequence_rewards, step_probabilities

    pad_id = tokenizer.pad_token_id
    kind = info["kind"]
    if kind == "preference":
        chosen, rejected = list(dataset["chosen_ids"]), list(dataset["rejected_ids"])
        rewards = sequence_rewards(model, chosen + rejected, pad_id, batch_size)
        return preference_metrics(rewards[: len(chosen)], rewards[len(chosen):])
    if kind == "outcome":
        scores = rollout_rewards(model, list(dataset["input_ids"]), list(dataset["completion_mask"]), pad_id,
                                 batch_size, info.get("score_reduction", "last"))
        return rollout_metrics(scores, dataset["rewards"], dataset["group"])
    ids, labels = list(dataset["input_ids"]), list(dataset["labels"])
    positions = [[i for i, y in enumerate(lab) if y != -100] for lab in labels]
    probs = step_probabilities(model, ids, positions, pad_id, batch_size)
    predictions = [max(range(3), key=p.__getitem__) for row in probs for p in row]
    truth = [lab[i] for lab, pos in zip(labels, positions) for i in pos]
    return step_metrics(predictions, truth)


def evaluate_saved(path: str, recipe, split: str = "eval", batch_size: int = 8, dtype: str | None = None,
                   device: str | None = None) -> dict[str, Any]:
    """Evaluate a saved reward model on the recipe's held-out split ('eval') or on every row ('all')."""
    import torch
    from datasets import concatenate_datasets

    from rlhf_recipes.data import load_splits

    from rewards.reward_model_scoring import load_reward_model

    model, tokenizer, info = load_reward_model(path, dtype)
    if info["kind"] != _kind(recipe):
        raise ValueError(f"{path} is a {info['kind']} reward model but {recipe.source} trains a {_kind(recipe)} "
                         f"one (algorithm {recipe.algorithm.name}); pass the recipe it was trained with")
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    train, eval = load_splits(recipe)
    if split == "all":
        rows = train if eval is None else concatenate_datasets([train, eval])
    elif eval is None:
        raise ValueError(f"{recipe.source}: eval_fraction is 0, so there is no held-out split; use --split all "
                         "(e.g. with --data_files held_out.jsonl) or set --eval_fraction")
    else:
        rows = eval
    dataset, stats = tokenize_split(recipe, tokenizer, rows, split)
    return {
        "model": str(path),
        "recipe": recipe.source,
        "kind": info["kind"],
        "split": split,
        "data": stats,
        "evaluation": evaluate(info, model, tokenizer, dataset, batch_size),
        "demo": demo(info, model, tokenizer, rows, recipe.args.system_prompt),
    }


def _merged_for_scoring(recipe, trainer):
    """The trained model as one network. A LoRA run also saves its merged model to
    <output_dir>/merged, so `rlhf-recipes evaluate` and `rm:<output_dir>` rewards load it like a full one."""
    import os
    from pathlib import Path

    from accelerate.utils import is_peft_model

    from rewards.reward_model_files import MERGED_SUBDIR

    model = trainer.model
    if not is_peft_model(model):
        return model
    if getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False) or (
            trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3):
        logger.warning("LoRA reward model on a quantized or ZeRO-3 sharded base: not merged; merge the adapter in "
                       "%s into its base model to evaluate it or use it as a reward", trainer.args.output_dir)
        return model
    merged = model.merge_and_unload()
    if int(os.environ.get("RANK", "0")) == 0:
        target = Path(trainer.args.output_dir) / MERGED_SUBDIR
        merged.save_pretrained(target)
        trainer.processing_class.save_pretrained(target)
    return merged


# --------------------------------------------------------------------------------------
# Demo: a correct and a perturbed answer, scored


_EXPLAIN_PROMPT = "Explain what a prime number is, in simple terms."
_GOOD_EXPLANATION = ("A prime number is a whole number greater than 1 that can only be divided evenly by 1 and by "
                     "itself. For example, 7 is prime, because no other number divides it, but 8 is not: 2 and 4 "
                     "divide it.")
_POOR_EXPLANATION = "Prime numbers are a kind of number. They are used in math. I do not really know more about them."


def _gsm8k_demo_questions(n: int = 2) -> list[tuple[str, str, str, str]]:
    """(question, correct solution, perturbed solution, description) from real GSM8K test rows."""
    rows = [json.loads(line) for line in (FIXTURES / "gsm8k" / "test.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for row in rows[:n]:
        solution = re.sub(r"<<[^>]*>>", "", row["answer"]).strip()
        body, gold = solution.rsplit("####", 1)
        gold = gold.strip()
        wrong = str(int(float(gold.replace(",", ""))) + 3)
        out.append((row["question"], solution, f"{body.rstrip()}\n#### {wrong}", f"final answer {gold} -> {wrong}"))
    return out


def _clip(text: Any, n: int = 160) -> str:
    if isinstance(text, list):
        text = " | ".join(f"{m.get('role')}: {m.get('content')}" for m in text)
    text = str(text).replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 3] + "..."


def demo(info: dict, model, tokenizer, eval_rows=None, system_prompt: str | None = None) -> list[dict[str, Any]]:
    """A few scored examples: the book's correct-vs-perturbed answer, and held-out rows."""
    from rewards.reward_model_encoding import encode_rollout, encode_sequence, encode_steps, truncate
    from rewards.reward_model_scoring import rollout_rewards, sequence_rewards, step_probabilities

    kind, pad_id = info["kind"], tokenizer.pad_token_id
    max_length, mode = info.get("max_length"), info.get("truncation_mode", "keep_start")
    items: list[dict[str, Any]] = []
    if kind == "preference":
        pairs = [("written: a good vs a poor explanation", [{"role": "user", "content": _EXPLAIN_PROMPT}],
                  [{"role": "assistant", "content": _GOOD_EXPLANATION}],
                  [{"role": "assistant", "content": _POOR_EXPLANATION}])]
        held_out = eval_rows.select(range(min(2, len(eval_rows)))).to_list() if eval_rows is not None else []
        for i, row in enumerate(held_out):
            pairs.append((f"held-out pair {i} (chosen vs rejected)", row.get("prompt"), row["chosen"], row["rejected"]))
        seqs = [truncate(encode_sequence(tokenizer, p, c), max_length, mode) for _, p, a, b in pairs for c in (a, b)]
        scores = sequence_rewards(model, seqs, pad_id)
        for k, (what, prompt, a, b) in enumerate(pairs):
            sa, sb = scores[2 * k], scores[2 * k + 1]
            items.append({"example": what, "prompt": _clip(prompt), "better": _clip(a), "worse": _clip(b),
                          "score_better": round(sa, 4), "score_worse": round(sb, 4), "prefers_better": sa > sb})
        return items

    questions = _gsm8k_demo_questions()
    if kind == "outcome":
        sys_msg = [{"role": "system", "content": system_prompt}] if system_prompt else []
        seqs, masks = [], []
        for question, good, bad, _ in questions:
            for completion in (good, bad):
                ids, start = encode_rollout(tokenizer, sys_msg + [{"role": "user", "content": question}], completion)
                mask = [0] * start + [1] * (len(ids) - start)
                seqs.append(truncate(ids, max_length, mode))
                masks.append(truncate(mask, max_length, mode))
        scores = rollout_rewards(model, seqs, masks, pad_id, reduction=info.get("score_reduction", "last"))
        for k, (question, good, bad, what) in enumerate(questions):
            sa, sb = scores[2 * k], scores[2 * k + 1]
            items.append({"example": f"GSM8K test: correct vs perturbed ({what})", "prompt": _clip(question),
                          "better": _clip(good), "worse": _clip(bad), "score_better": round(sa, 4),
                          "score_worse": round(sb, 4), "prefers_better": sa > sb})
        return items

    # process: per-step P(good) of a correct and a perturbed solution, split one line per step
    template, sep = info["prompt_template"], info["step_separator"]
    traces = []
    for question, good, bad, what in questions:
        for label, solution in (("correct", good), ("perturbed", bad)):
            lines = [line for line in solution.split("\n") if line.strip()]
            steps = lines[:-1] + ["# Answer\n\n" + lines[-1].replace("####", "").strip()]
            traces.append((f"GSM8K test, {label} ({what})", question, steps))
    encoded = [encode_steps(tokenizer, q, s, template, sep) for _, q, s in traces]
    probs = step_probabilities(model, [e[0] for e in encoded], [e[1] for e in encoded], pad_id)
    for (what, question, steps), p in zip(traces, probs):
        p_good = [round(x[2], 4) for x in p]
        p_bad = [round(x[0], 4) for x in p]
        solution_score = math.prod(1 - b for b in p_bad)
        items.append({"example": what, "prompt": _clip(question), "steps": [_clip(s, 80) for s in steps],
                      "p_good": p_good, "p_bad": p_bad, "p_no_bad_step": round(solution_score, 4)})
    return items


def format_report(results: dict[str, Any]) -> str:
    """A plain-text table of the evaluation numbers and the demo."""
    lines = []
    evaluation = results.get("evaluation") or {}
    if evaluation:
        width = max(len(k) for k in evaluation)
        lines.append("evaluation")
        for k, v in evaluation.items():
            lines.append(f"  {k:<{width}}  {v:.4f}" if isinstance(v, float) else f"  {k:<{width}}  {v}")
    for item in results.get("demo") or []:
        lines.append(f"demo: {item['example']}")
        lines.append(f"  prompt: {item['prompt']}")
        if "steps" in item:
            for step, g, b in zip(item["steps"], item["p_good"], item["p_bad"]):
                lines.append(f"  P(good) {g:.3f}  P(bad) {b:.3f}  {step}")
            lines.append(f"  P(no bad step) = {item['p_no_bad_step']:.4f}")
        else:
            lines.append(f"  {item['score_better']:+.4f}  better: {item['better']}")
            lines.append(f"  {item['score_worse']:+.4f}  worse:  {item['worse']}")
            lines.append(f"  prefers the better one: {item['prefers_better']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# The family


class RewardModels(Family):
    name = "reward_model"
    tiny_overlay = TINY_OVERLAY
    trains_reward_model = True
    book_logs_prefixed = True
    compare_metrics = ("accuracy", "margin", "loss", "eval_accuracy", "eval_loss")

    def sequences_per_example(self, recipe) -> int:
        return 2 if _kind(recipe) == "preference" else 1  # a preference pair, or one rollout / solution

    def scoring_head(self, recipe) -> tuple[int, bool] | None:
        """The book's head: Linear(hidden, 1) without bias, or Linear(hidden, 3) with bias for a PRM."""
        kind = _kind(recipe)
        return NUM_LABELS[kind], kind == "process"

    def trains_with_trl_trainer(self, recipe) -> bool:
        return _kind(recipe) == "preference"  # ORM/PRM: our plain transformers.Trainer subclasses

    def load_model(self, recipe, tokenizer):
        from transformers import (
            AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification, set_seed,
        )

        from rlhf_recipes.models import model_init_kwargs, resolve_model_path

        kind = _kind(recipe)
        path = resolve_model_path(recipe.model.model_name_or_path)
        kwargs = model_init_kwargs(recipe.model)
        set_seed(recipe.training.seed)  # the new head's initialisation
        config = AutoConfig.from_pretrained(path, revision=recipe.model.model_revision, num_labels=NUM_LABELS[kind])
        if kind == "preference":
            from trl.trainer.reward_trainer import suppress_seqcls_warning

            with suppress_seqcls_warning():
                model = AutoModelForSequenceClassification.from_pretrained(path, config=config, **kwargs)
        else:
            if kind == "process":
                config.id2label, config.label2id = dict(STEP_LABELS), {v: k for k, v in STEP_LABELS.items()}
            # The book's head: Linear(hidden, 1) without bias for one output, with bias for three.
            config.token_classification_bias = kind == "process"
            model = AutoModelForTokenClassification.from_pretrained(path, config=config, **kwargs)
        model.config.pad_token_id = tokenizer.pad_token_id
        model.config.reward_model = reward_model_info(recipe)
        return model

    def peft_config(self, recipe):
        """LoRA for a classification task: the new head trains in full and is saved with the adapter."""
        from trl import get_peft_config

        peft_config = get_peft_config(recipe.model)
        if peft_config is not None:  # a classification task, and the new head trains and is saved with the adapter
            if str(peft_config.task_type) in ("CAUSAL_LM", "TaskType.CAUSAL_LM"):  # ModelConfig's default
                peft_config.task_type = "SEQ_CLS" if _kind(recipe) == "preference" else "TOKEN_CLS"
            peft_config.modules_to_save = sorted(set(peft_config.modules_to_save or []) | {"score"})
            # The head trains in full; with `all-linear` targets it would also get a LoRA adapter of its own.
            peft_config.exclude_modules = sorted(set(peft_config.exclude_modules or []) | {"score"})
            if recipe.model.load_in_4bit and recipe.model.dtype != "bfloat16":
                from rlhf_recipes.config import RecipeError

                raise RecipeError(
                    f"{recipe.source}: load_in_4bit with dtype {recipe.model.dtype}: TRL casts the trainable head to "
                    "bfloat16, which then mismatches the hidden states. Use `dtype: bfloat16` for QLoRA reward models."
                )
        return peft_config

    def build_trainer(self, recipe, model, tokenizer, train, eval, callbacks):
        """Rows tokenized here, once per run; then the common construction with this family's peft_config."""
        train_set, train_stats = tokenize_split(recipe, tokenizer, train, "train")
        eval_set, eval_stats = tokenize_split(recipe, tokenizer, eval, "eval") if eval is not None else (None, None)
        trainer = super().build_trainer(recipe, model, tokenizer, train_set, eval_set, callbacks)
        trainer.rm_data_stats = {"train": train_stats, "eval": eval_stats}
        trainer.rm_eval_rows = eval
        return trainer

    def final_results(self, recipe, trainer) -> dict[str, Any]:
        """Evaluation numbers and demo scores for final_results.json."""
        model = _merged_for_scoring(recipe, trainer)
        info = getattr(model.config, "reward_model", None) or reward_model_info(recipe)
        out: dict[str, Any] = {"data": getattr(trainer, "rm_data_stats", None)}
        batch = recipe.training.per_device_eval_batch_size
        if trainer.eval_dataset is not None:
            out["evaluation"] = evaluate(info, model, trainer.processing_class, trainer.eval_dataset, batch)
        else:
            logger.warning("no eval split (eval_fraction 0): final_results.json has no evaluation numbers")
        out["demo"] = demo(info, model, trainer.processing_class, getattr(trainer, "rm_eval_rows", None),
                           recipe.args.system_prompt)
        return out

    def evaluator(self, recipe, options):
        """The book's numbers on the held-out split, with intervals (rlhf_recipes/evaluation/reward_models.py)."""
        from rlhf_recipes.evaluation.reward_models import RewardModelEvaluator

        return RewardModelEvaluator(recipe, options)


FAMILY = RewardModels()
