"""GSM8K held-out evaluation (rejection sampling, policy gradients on GSM8K): the book's greedy exact match.

Problems: the first N questions of the test split (`eval_split`, default test; the tiny profile reads the
real test rows shipped in data/fixtures/gsm8k/test.jsonl), through the gsm8k adapter with the recipe's
system prompt. GSM8K's test split is disjoint from its train split by construction; the questions are
still compared with the training ones and any shared one dropped (counted).
Per problem, greedy: exact_match (the book's grading: the last \\boxed{} or last number, numerically equal,
custom_losses/rejection_sampling/grading.py; the recipe's `boxed_rule`, default the book's one level of nested
braces inside \\boxed{}), math_verify (math-verify's parse/verify of the gold answer
against the completion: equivalence, not string match), length (tokens).
"""

from __future__ import annotations

from typing import Any

from rlhf_recipes.evaluation.base import Evaluator, Scores

DEFAULT_SPLIT = "test"


def boxed_rule(recipe) -> str:
    """The recipe's \\boxed{} rule (rejection sampling's `boxed_rule`); the book's for recipes without one."""
    from custom_losses.rejection_sampling.grading import DEFAULT_BOXED_RULE

    return recipe.setting("boxed_rule") or DEFAULT_BOXED_RULE


def grade(completion: str, gold: str, rule: str | None = None) -> dict[str, Any]:
    from math_verify import parse, verify

    from custom_losses.rejection_sampling import grading

    rule = rule or grading.DEFAULT_BOXED_RULE
    predicted = grading.extract_answer(completion, rule)
    try:  # math-verify's equivalence of the completion's final answer with the gold number
        equivalent = bool(verify(parse(gold), parse(completion)))
    except Exception:  # a parser failing on odd text is a wrong answer, not a crash
        equivalent = False
    return {"predicted": predicted, "correct": grading.is_correct(predicted, gold), "math_verify": equivalent,
            "boxed_rule": rule}


class Gsm8kEvaluator(Evaluator):
    kind = "GSM8K test questions, greedy exact match"
    default_problems = None  # the whole split

    def split(self) -> str:
        return self.recipe.setting("eval_split") or DEFAULT_SPLIT

    def num_problems(self) -> int | None:
        return self.options.num_problems or self.recipe.setting("eval_questions")

    def build_data(self):
        from rlhf_recipes.data import SOURCES, load_splits
        from rlhf_recipes.data.sources import read_split

        # the first N questions of the split (the tiny profile: the fixture file of that split)
        rows = read_split(SOURCES["gsm8k"], self.split(), f"gsm8k/{self.split()}.jsonl", self.num_problems(),
                          self.recipe.args.system_prompt, tiny=self.recipe.tiny)[0].to_list()
        train = load_splits(self.recipe)[0]
        trained = {r["prompt"][-1]["content"] for r in train if isinstance(r.get("prompt"), list)}
        kept = [r for r in rows if r["prompt"][-1]["content"] not in trained]
        data = {"source": "gsm8k", "split": self.split(), "seed": None, "problems": len(kept),
                "overlaps_dropped": len(rows) - len(kept),
                "construction": f"the first {len(rows)} questions of GSM8K's {self.split()} split, minus any that "
                                "is also a training question"}
        return kept, data

    def max_new_tokens(self) -> int:
        value = self.recipe.setting
        return self.options.max_new_tokens or value("eval_max_new_tokens") or value("max_completion_length") or 512

    def grade(self, completion: str, problem: dict[str, Any]) -> dict[str, Any]:
        return grade(completion, problem["answer"], boxed_rule(self.recipe))

    def grading(self) -> str:
        """Which rule graded exact_match, for final_results.json and the results table."""
        from custom_losses.rejection_sampling.grading import BOXED_RULE_HELP

        rule = boxed_rule(self.recipe)
        return f"boxed_rule {rule}: {BOXED_RULE_HELP[rule]}"

    def prompts(self):
        problems, _ = self.data()
        return [list(r["prompt"]) for r in problems], self.chat_template_kwargs(), self.max_new_tokens()

    def score(self, model, tokenizer) -> Scores:
        from rlhf_recipes.generation import generate, throughput

        problems, _ = self.data()
        stats: dict = {}
        answers = generate(model, tokenizer, [list(r["prompt"]) for r in problems], n=1,
                           batch_size=self.options.batch_size, max_new_tokens=self.max_new_tokens(),
                           chat_template_kwargs=self.chat_template_kwargs(), desc="greedy", stats=stats)
        graded = [self.grade(a[0]["text"], r) for a, r in zip(answers, problems)]
        per_problem = {
            "exact_match": [float(g["correct"]) for g in graded],
            "math_verify": [float(g["math_verify"]) for g in graded],
            "mean_length": [float(a[0]["tokens"]) for a in answers],
            "truncated_rate": [float(a[0]["truncated"]) for a in answers],
        }
        samples = [{"question": r["prompt"][-1]["content"][:300], "gold": r["answer"],
                    "completion": a[0]["text"][:500], **g}
                   for r, a, g in list(zip(problems, answers, graded))[:self.options.samples]]
        return Scores(per_problem=per_problem, rates=frozenset({"exact_match", "math_verify", "truncated_rate"}),
                      decoding={"greedy": {"max_new_tokens": self.max_new_tokens(),
                                           "chat_template_kwargs": self.chat_template_kwargs()}},
                      throughput=throughput(len(problems), stats), samples=samples)
