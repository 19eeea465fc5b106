"""Held-out evaluation on reasoning-gym tasks (policy gradients, SDPO, rejection sampling on nano): the book's task,
problems it never trained on.

The held-out split: the recipe's own composite (its `dataset_kwargs` tasks and configs) drawn with another
seed, HELDOUT_SEED_OFFSET above the training seed (dataset_kwargs.seed, else the recipe's seed). Every
held-out question is compared with the training questions (the recipe's `num_samples` entries) and a
question that also appears there is skipped and another drawn; the count of skipped ones is in the result.
Prompts are built by the data adapter itself (rlhf_recipes/data/reasoning_gym.build_rows: the same system
prompt), rendered with the recipe's chat_template_kwargs, and scored by reasoning-gym's own score_answer on
the text of the last <answer> tag (rewards/reasoning_tasks.py, the training reward's code path).
`--split validation`: the problems of the same draw from position VALIDATION_FROM on (the test problems are its first
VALIDATION_FROM, so the two never share a problem): where a choice is made, e.g. the nano base's checkpoint.

Per problem, greedy: score (partial credit), exact (score == 1), format (all four tags), length (tokens);
with k > 0, k completions sampled at the recipe's temperature / top_p / top_k / min_p: pass@k (unbiased
estimator from the k samples) and pass@1_sampled (the share of the k that are exact).
"""

from __future__ import annotations

from typing import Any

# held-out seed = training seed + HELDOUT_SEED_OFFSET; its problems from VALIDATION_FROM on are the validation split
from rlhf_recipes.data.reasoning_gym import HELDOUT_SEED_OFFSET, VALIDATION_FROM
from rlhf_recipes.evaluation.base import EvalError, Evaluator, Scores
from rlhf_recipes.evaluation.intervals import pass_at_k


class ReasoningGymEvaluator(Evaluator):
    kind = "reasoning-gym held-out problems, scored by the task's score_answer"
    default_problems = 200
    splits = ("heldout", "validation")

    def build_data(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        from rlhf_recipes.data.reasoning_gym import build_rows, questions, training_seed, unseen

        recipe, n = self.recipe, self.num_problems()
        if n > VALIDATION_FROM:
            raise EvalError(f"--num_problems {n}: at most {VALIDATION_FROM} reasoning-gym problems (the held-out "
                            f"draw's problems from {VALIDATION_FROM} on are the validation split)")
        start = VALIDATION_FROM if self.options.split == "validation" else 0
        seed = training_seed(recipe)
        trained = questions(recipe, recipe.args.num_samples or 0, seed)
        heldout_seed = seed + HELDOUT_SEED_OFFSET
        wanted = start + n  # distinct non-training problems of the draw, of which the last n are this split's
        size = wanted + max(8, wanted // 4)
        while True:
            kept, overlaps = unseen(build_rows(recipe, size, heldout_seed), trained, wanted)
            if len(kept) == wanted or size >= 16 * (wanted + 8):
                break
            size *= 2
        if start and len(kept) <= start:
            raise EvalError(f"{recipe.source}: the task config has {len(kept)} distinct held-out problems, all of them "
                            f"test problems (the first {VALIDATION_FROM}): no validation split; use --split heldout")
        kept = kept[start:]
        if not kept:
            raise EvalError(f"{recipe.source}: every held-out problem drawn also appears in training; the task "
                            "config has too few distinct questions for a held-out split")
        assert not {r["prompt"][-1]["content"] for r in kept} & trained  # the held-out promise
        data = {"source": "reasoning_gym", "tasks": (recipe.args.dataset_kwargs or {}).get("tasks"),
                "split": "validation" if start else "heldout", "seed": heldout_seed, "training_seed": seed,
                "training_problems": recipe.args.num_samples, "problems": len(kept),
                "overlaps_dropped": overlaps,
                "construction": f"the recipe's composite drawn with seed {seed} + {HELDOUT_SEED_OFFSET}; questions "
                                "that appear among the training questions skipped (and counted), others drawn"
                                + (f"; the validation split: its distinct problems {start + 1}-{start + len(kept)} "
                                   f"(the first {VALIDATION_FROM} are the test problems)" if start else "")}
        return kept, data

    def max_new_tokens(self) -> int:
        # the evaluation's own budget (rejection sampling), else the completion budget
        value = self.recipe.setting
        return self.options.max_new_tokens or value("eval_max_new_tokens") or value("max_completion_length") or 256

    def sampling(self) -> dict[str, Any]:
        value = self.recipe.setting
        return {"temperature": value("temperature", 1.0), "top_p": value("top_p", 1.0),
                "top_k": value("top_k") or None, "min_p": value("min_p") or None}

    def prompts(self):
        problems, _ = self.data()
        return [list(r["prompt"]) for r in problems], self.chat_template_kwargs(), self.max_new_tokens()

    def grade(self, completion: str, problem: dict[str, Any]) -> dict[str, Any]:
        """reasoning-gym's score_answer on the last <answer> tag (partial credit); correct: a score of 1."""
        from rewards.reasoning_tasks import score_completion

        score = score_completion(completion, problem["rg_dataset"], problem["rg_index"])
        return {"score": score, "correct": score == 1.0}

    def score(self, model, tokenizer) -> Scores:
        from rewards.reasoning_tasks import format_score
        from rlhf_recipes.generation import generate, throughput

        problems, _ = self.data()
        o, kwargs = self.options, self.chat_template_kwargs()
        chats = [list(r["prompt"]) for r in problems]
        stats: dict = {}
        greedy = generate(model, tokenizer, chats, n=1, batch_size=o.batch_size, max_new_tokens=self.max_new_tokens(),
                          chat_template_kwargs=kwargs, desc="greedy", seed=o.seed, stats=stats)
        scores = [self.grade(g[0]["text"], r)["score"] for g, r in zip(greedy, problems)]
        per_problem = {
            "exact_match": [float(s == 1.0) for s in scores],
            "mean_score": scores,
            "format_rate": [float(format_score(g[0]["text"]) == 1.0) for g in greedy],
            "mean_length": [float(g[0]["tokens"]) for g in greedy],
            "truncated_rate": [float(g[0]["truncated"]) for g in greedy],
        }
        rates = {"exact_match", "format_rate", "truncated_rate"}
        decoding = {"greedy": {"max_new_tokens": self.max_new_tokens(), "chat_template_kwargs": kwargs}}
        if o.k > 0:
            sampled = generate(model, tokenizer, chats, n=o.k, batch_size=max(1, o.batch_size // o.k) or 1,
                               max_new_tokens=self.max_new_tokens(), chat_template_kwargs=kwargs, desc=f"sample x{o.k}",
                               seed=o.seed + 1, stats=stats, **self.sampling())
            correct = [sum(self.grade(c["text"], r)["correct"] for c in group)
                       for group, r in zip(sampled, problems)]
            per_problem[f"pass@{o.k}"] = [pass_at_k(o.k, c, o.k) for c in correct]
            per_problem["pass@1_sampled"] = [pass_at_k(o.k, c, 1) for c in correct]
            decoding["sampled"] = {"samples_per_problem": o.k, **self.sampling()}
        samples = [{"question": r["prompt"][-1]["content"][:300], "answer": r["answer"],
                    "completion": g[0]["text"][:500], "score": s}
                   for r, g, s in list(zip(problems, greedy, scores))[:o.samples]]
        return Scores(per_problem=per_problem, rates=frozenset(rates), decoding=decoding,
                      throughput=throughput(len(problems), stats), samples=samples)

