"""Rejection sampling (book chapter 9): sample, score, select, fine-tune, evaluate.

The book's six stages, mapped onto the runner's one linear pipeline (train.py: data -> model ->
trainer -> train -> final results) without a second entry point:
  data        the GSM8K train prompts, through the ordinary `gsm8k` adapter (system prompt,
              first `num_samples` rows): the prompts of stage 1;
  model       `load_model` loads the base policy once. Stages 1 and 6 (base) only sample from it,
              so the weights the SFT stage starts from are still exactly the base checkpoint: a
              fresh copy, without loading the policy twice;
  trainer     `build_trainer` runs stages 1-4 before it builds the SFT trainer, because the SFT
              stage's training rows ARE stage 4's output:
                1 generate  N completions per prompt            -> rollouts.jsonl
                2-3 score   reward-model logit per completion   -> scored.jsonl (the per-prompt cache);
                            or, with `reward_func` (the nano profile), the task's verifier
                4 select    the recipe's rule (selection.py)    -> selection.jsonl
                6 (base)    greedy accuracy of the base policy  -> eval_base.jsonl
  train       5: BookSFTTrainer (custom_losses/sft/) on the selection, resumable like any run;
  results     6 (tuned): `final_results` evaluates the trained policy -> eval_tuned.jsonl, and puts
              test_accuracy (tuned) and base_test_accuracy in final_results.json.
Stages 4 (its statistics) and 6 grade with the held-out evaluator of the prompts' task (`task_evaluator`: GSM8K
for the book's recipes, reasoning-gym spell_backward on nano), the one `rlhf-recipes evaluate` uses.
Each stage writes its file atomically (a .tmp renamed) and a re-run (`--resume`) that finds the
file reads it instead of recomputing ("stage ...: found ..., skipped" in the log). Stages 1, 2-3 (with a reward
model) and 6 (base) are shared out across the processes in chunks of `rollout_batch_size` prompts (or
`eval_generation_batch_size` questions), and stages 1 and 2-3 keep each finished chunk, so a crash costs one chunk,
not the stage (rejection_sampling_stages.py); the result does not depend on the number of processes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from rewards.reward_model import RM_PREFIX
from rlhf_recipes.generation import free_memory, generate
from rlhf_recipes.families.base import Family
from rlhf_recipes.families.rejection_sampling_stages import Processes, chunk_seed, parts_dir, read_jsonl, sharded, stage
from rlhf_recipes.families.sft import SupervisedFineTuning

logger = logging.getLogger(__name__)

ROLLOUTS, SCORED, SELECTION = "rollouts.jsonl", "scored.jsonl", "selection.jsonl"
EVAL_BASE, EVAL_TUNED = "eval_base.jsonl", "eval_tuned.jsonl"
TINY_RM = "tiny"


# --- stage 2: the reward model ---------------------------------------------------------------
def tiny_reward_model():
    """A stand-in for AceMath-7B-RM with its interface (a sequence classifier, one logit): the tiny policy's
    backbone with a score head drawn from a fixed seed. Deterministic: the same weights in every process."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlhf_recipes.tiny import tiny_model_path

    from transformers.utils import logging as hf_logging

    path = tiny_model_path()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the score head is missing from the causal LM's files, by design
    try:
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    finally:
        hf_logging.set_verbosity(verbosity)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.score.weight.copy_(torch.randn(model.score.weight.shape, generator=generator))
    return model, AutoTokenizer.from_pretrained(path)


def load_reward_model(spec: str, dtype, trust_remote_code: bool = False):
    """`tiny`, `rm:<folder>`, a folder or a hub id -> (sequence classifier with one logit, its tokenizer)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if spec == TINY_RM:
        model, tokenizer = tiny_reward_model()
    else:
        path = spec[len(RM_PREFIX):] if spec.startswith(RM_PREFIX) else spec
        merged = Path(path) / "merged"
        path = str(merged) if merged.is_dir() else path
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=dtype,
                                                                   trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:  # the classifier finds each row's last token through it
        model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def score(model, tokenizer, chats: list[list[dict]], batch_size: int) -> list[float]:
    """The reward model's single logit for each whole chat (system, question, completion); rows are sorted by
    length into batches (less padding) and padded on the left."""
    import torch
    from tqdm.auto import tqdm

    ids = [tokenizer.encode(tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=False),
                            add_special_tokens=False) for c in chats]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    rewards = [0.0] * len(ids)
    pad = tokenizer.pad_token_id
    for start in tqdm(range(0, len(order), batch_size), desc="score", unit="batch",
                      disable=int(os.environ.get("RANK", "0")) != 0):
        batch = order[start:start + batch_size]
        width = max(len(ids[i]) for i in batch)
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, i in enumerate(batch):
            input_ids[row, width - len(ids[i]):] = torch.tensor(ids[i])
            mask[row, width - len(ids[i]):] = 1
        with torch.no_grad():
            logits = model(input_ids=input_ids.to(model.device), attention_mask=mask.to(model.device)).logits
        for i, value in zip(batch, logits[:, 0].float().cpu().tolist()):
            rewards[i] = value
    return rewards


# --- the family --------------------------------------------------------------------------------
class RejectionSampling(SupervisedFineTuning):
    name = "rejection_sampling"

    # --- stages 1-4 (and the base evaluation) ---
    def build_trainer(self, recipe, model, tokenizer, train, eval, callbacks):
        from accelerate import PartialState

        state = PartialState()
        if model.device != state.device:
            model.to(state.device)
        selection = self.prepare(recipe, model, tokenizer, train)  # every process takes its share of the stages
        return super().build_trainer(recipe, model, tokenizer, self.sft_rows(recipe, selection), eval, callbacks)

    def prepare(self, recipe, model, tokenizer, prompts) -> list[dict[str, Any]]:
        """Stages 1-4 and the base evaluation; returns the selection rows (selection.jsonl)."""
        from custom_losses.rejection_sampling.selection import pairs_of, select

        cfg, out = recipe.training, Path(recipe.training.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        procs = Processes()
        chats = [list(row["prompt"]) for row in prompts]
        rows = list(prompts)

        def generate_chunk(first: int, chunk: list[int]) -> list[dict[str, Any]]:
            # One generate call (rollout_batch_size prompts) from the chunk's own seed: the same completions
            # whichever process draws them, and whether or not the run was interrupted before.
            samples = generate(model, tokenizer, [chats[i] for i in chunk], n=cfg.num_completions,
                               batch_size=cfg.rollout_batch_size, max_new_tokens=cfg.rollout_max_new_tokens,
                               chat_template_kwargs={"enable_thinking": cfg.enable_thinking}, desc="generate",
                               seed=chunk_seed(cfg.seed, first), temperature=cfg.rollout_temperature,
                               top_p=cfg.rollout_top_p, top_k=cfg.rollout_top_k, min_p=cfg.rollout_min_p or None)
            # "columns": what a prompt row carries for its task's checker besides the prompt and the answer
            # (reasoning-gym's rg_dataset and rg_index), kept with each rollout so that a verifier can score it later
            return [{"question": chats[i][-1]["content"], "answer": rows[i]["answer"],
                     "columns": {k: v for k, v in rows[i].items() if k not in ("prompt", "answer")},
                     "completions": [s["text"] for s in group], "truncated": [s["truncated"] for s in group]}
                    for i, group in zip(chunk, samples)]

        parts = parts_dir(out / ROLLOUTS)
        generated = stage(out / ROLLOUTS, "1 generate", lambda: sharded(
            "1 generate", range(len(chats)), cfg.rollout_batch_size, generate_chunk, procs, parts), processes=procs,
            parts=parts)
        if cfg.evaluate_base:
            self.evaluate(recipe, model, tokenizer, out / EVAL_BASE, "6 evaluate base", processes=procs)

        def scored():
            if cfg.reward_func is not None:  # the task's own checker (the nano profile): no model to load
                rewards = iter(verifier_scores(cfg.reward_func, generated))
                per_prompt = [[next(rewards) for _ in rec["completions"]] for rec in generated]
            else:
                per_prompt = [r["rewards"] for r in sharded("2-3 score", generated, cfg.rollout_batch_size,
                                                            score_chunk, procs, parts_dir(out / SCORED))]
                if "rm" in loaded:
                    del loaded["rm"]
                    free_memory()
            return [{**rec, "rewards": r} for rec, r in zip(generated, per_prompt)]

        loaded: dict[str, Any] = {}  # the reward model, loaded by a process at its first chunk to score

        def score_chunk(first: int, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if "rm" not in loaded:
                rm, rm_tokenizer = load_reward_model(cfg.reward_model, model.dtype, cfg.reward_model_trust_remote_code)
                loaded["rm"] = (rm.to(model.device), rm_tokenizer)
            rm, rm_tokenizer = loaded["rm"]
            flat = [[*chats[first + j], {"role": "assistant", "content": c}]
                    for j, rec in enumerate(records) for c in rec["completions"]]
            rewards = iter(score(rm, rm_tokenizer, flat, cfg.score_batch_size))
            return [{"rewards": [next(rewards) for _ in rec["completions"]]} for rec in records]

        records = stage(out / SCORED, "2-3 score and cache", scored, processes=procs,
                        parts=None if cfg.reward_func is not None else parts_dir(out / SCORED))
        selection = stage(out / SELECTION, f"4 select ({cfg.selection_rule})",
                          lambda: pairs_of(records, select(cfg.selection_rule, records, cfg.selection_k,
                                                           cfg.selection_seed)), processes=procs)
        grader = self.task_evaluator(recipe)  # the task's grading, as stage 6 grades

        def is_correct(completion: str, record: dict[str, Any]) -> bool:
            return bool(grader.grade(completion, {**record.get("columns", {}), "answer": record["answer"]})["correct"])

        correct = [[is_correct(c, r) for c in r["completions"]] for r in records]
        self.stage_stats = {
            "rollouts": {
                "prompts": len(records), "completions": sum(len(c) for c in correct),
                "truncated": sum(sum(r.get("truncated", [])) for r in generated),
                "correct_fraction": sum(map(sum, correct)) / max(1, sum(map(len, correct))),
                # prompts with a correct AND an incorrect completion: where the rule can matter (the book logs it)
                "decidable_fraction": sum(any(c) and not all(c) for c in correct) / max(1, len(correct)),
                "mean_reward": sum(sum(r["rewards"]) for r in records) / max(1, sum(map(len, correct))),
            },
            "selection": {
                "rule": cfg.selection_rule, "pairs": len(selection),
                "distinct_prompts": len({s["prompt_index"] for s in selection}),
                "correct_fraction": sum(is_correct(s["completion"], records[s["prompt_index"]])
                                        for s in selection) / max(1, len(selection)),
                "mean_reward": sum(s["reward"] for s in selection) / max(1, len(selection)),
            },
        }
        logger.info("rejection sampling: %s", self.stage_stats)
        return selection

    def sft_rows(self, recipe, selection):
        """Stage 5's rows: prompt = [system, question] rendered with enable_thinking as in generation (so an
        empty think block is prompt), completion = the selected completion (TRL adds its end token)."""
        from datasets import Dataset

        from rlhf_recipes.data.sources import chat_prompt  # [system, question] as the data source builds it

        kwargs = {"enable_thinking": recipe.training.enable_thinking}
        return Dataset.from_list([{"prompt": chat_prompt(recipe, s["question"]),
                                   "completion": [{"role": "assistant", "content": s["completion"]}],
                                   "chat_template_kwargs": kwargs} for s in selection])

    # --- stage 6 ---
    def task_evaluator(self, recipe):
        """Stage 6's evaluator: the held-out evaluation of the prompts' task with stage 6's settings (the same
        problems `rlhf-recipes evaluate` scores); a task without one is a one-line error."""
        from rlhf_recipes.errors import RecipeError
        from rlhf_recipes.evaluation import EvalOptions

        cfg = recipe.training
        options = EvalOptions(num_problems=cfg.eval_questions, batch_size=cfg.eval_generation_batch_size,
                              max_new_tokens=cfg.eval_max_new_tokens)
        evaluator = self.evaluator(recipe, options)
        if evaluator is None:
            raise RecipeError(f"{recipe.where('dataset')}: rejection sampling grades and evaluates the task of its "
                              f"prompts; `{recipe.args.dataset}` has no grader (use gsm8k or reasoning_gym)")
        return evaluator

    def evaluate(self, recipe, model, tokenizer, path: Path, name: str, step: int = 0,
                 processes: Processes | None = None) -> list[dict[str, Any]]:
        """Greedy answers to the held-out questions of the task (GSM8K's test split; spell_backward's held-out
        draw on nano), graded by the task's evaluator (evaluation/gsm8k.py: the book's grading; evaluation/
        reasoning.py: score_answer); each row records the optimizer `step` of the weights, so a file of other
        weights is not taken for this one. The questions are shared out across `processes` (every process must
        call this then), in chunks of eval_generation_batch_size: one generate call each, as on one process."""

        evaluator = self.task_evaluator(recipe)
        grading = evaluator.grading()  # rows graded by another rule (e.g. boxed_rule changed) are graded again
        procs = processes or Processes(alone=True)
        batch_size = recipe.training.eval_generation_batch_size

        def compute():
            problems, _ = evaluator.data()
            chats, kwargs, max_new_tokens = evaluator.prompts()

            def answer_chunk(first: int, chunk: list[int]) -> list[dict[str, Any]]:
                answers = generate(model, tokenizer, [chats[i] for i in chunk], n=1, batch_size=batch_size,
                                   max_new_tokens=max_new_tokens, chat_template_kwargs=kwargs,
                                   desc=name.split(" ", 1)[1])
                return [{"question": problems[i]["prompt"][-1]["content"], "gold": problems[i]["answer"],
                         "completion": answer["text"], **evaluator.grade(answer["text"], problems[i]), "step": step,
                         "grading": grading} for i, (answer,) in zip(chunk, answers)]

            return sharded(name, range(len(problems)), batch_size, answer_chunk, procs, noun="questions")

        return stage(path, name, compute, processes=procs,
                     still_valid=lambda rows: all(r.get("step") == step and r.get("grading") == grading for r in rows))

    def final_results(self, recipe, trainer) -> dict[str, Any]:
        """Stage 6 on the trained policy; test_accuracy (tuned) next to base_test_accuracy."""
        results = super().final_results(recipe, trainer)
        if not trainer.is_world_process_zero():
            return results
        out = Path(recipe.training.output_dir)
        # The main process alone, as the final results are written (the others wait at the run's last barrier).
        tuned = self.evaluate(recipe, trainer.model, trainer.processing_class, out / EVAL_TUNED, "6 evaluate tuned",
                              step=trainer.state.global_step)
        base = read_jsonl(out / EVAL_BASE) if (out / EVAL_BASE).exists() else None

        def accuracy(rows):
            return None if rows is None else sum(r["correct"] for r in rows) / max(1, len(rows))

        return {**results, "test_accuracy": accuracy(tuned), "base_test_accuracy": accuracy(base),
                "eval_questions": len(tuned), "eval_task": self.task_evaluator(recipe).kind,
                "grading": self.task_evaluator(recipe).grading(),
                **getattr(self, "stage_stats", {})}

    # Stage 6 as a held-out evaluation, by the task the prompts come from: greedy exact match on GSM8K's test
    # questions (the book's recipes), or on spell_backward's held-out draw (reasoning_gym: the nano profile). That is
    # Family's default, which the SFT family in between replaces.
    evaluator = Family.evaluator


def verifier_scores(name: str, records: list[dict[str, Any]]) -> list[float]:
    """Stages 2-3 with a verifiable reward instead of a reward model: the registered reward function `name`
    (rewards/) on every completion, given its prompt's answer and task columns, in prompt-major order."""
    import rewards

    (func,) = rewards.build_reward_funcs([name])
    scores: list[float] = []
    for rec in records:
        n = len(rec["completions"])
        columns = {k: [v] * n for k, v in {**rec.get("columns", {}), "answer": rec["answer"]}.items()}
        scores.extend(float(x) for x in func(completions=list(rec["completions"]), **columns))
    return scores


FAMILY = RejectionSampling()
