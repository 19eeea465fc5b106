"""Held-out evaluation of SFT runs: loss and perplexity on held-out conversations, and sample generations.

Problems: held-out prompt/completion conversations (rlhf_recipes/evaluation/heldout.py; no_robots' test
split for the book's recipe). Per conversation: the mean negative log-likelihood of the completion's tokens
(the final assistant turn, end token included, the prompt rendered as TRL's SFTTrainer renders it), weighted
by its token count, so
  loss        the token-weighted mean NLL over all held-out completion tokens (nats per token; TRL's eval_loss);
  perplexity  exp(loss);
  token_accuracy  the share of completion tokens that are the model's argmax prediction (token-weighted).
A few greedy generations on held-out prompts are kept in the result's samples.
"""

from __future__ import annotations

from rlhf_recipes.evaluation.base import Evaluator, Scores, _exp


class SftEvaluator(Evaluator):
    kind = "held-out conversations: completion loss and perplexity"
    default_problems = 500

    def build_data(self):
        from rlhf_recipes.evaluation.heldout import heldout_rows

        return heldout_rows(self.recipe, self.num_problems())

    def load(self, path: str):
        model, tokenizer = super().load(path)
        template_from = self.recipe.setting("chat_template_from")
        if tokenizer.chat_template is None and template_from:  # a base model: the template training copied
            from rlhf_recipes.models import copy_chat_template

            copy_chat_template(tokenizer, template_from)
        return model, tokenizer

    def max_new_tokens(self) -> int:
        return self.options.max_new_tokens or 256

    def score(self, model, tokenizer) -> Scores:
        import torch
        from tqdm.auto import tqdm

        from rlhf_recipes.generation import chat_ids, generate, throughput

        problems, _ = self.data()
        max_length = self.recipe.setting("max_length")
        nll, tokens, correct = [], [], []
        device = next(model.parameters()).device
        for row in tqdm(problems, desc="held-out loss", unit="conversation"):
            prompt, completion = chat_ids(tokenizer, list(row["prompt"]), list(row["completion"]))
            ids = (prompt + completion)[:max_length] if max_length else prompt + completion
            n = len(ids) - len(prompt)
            if n <= 0:  # the prompt alone fills max_length: TRL drops such rows too
                continue
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, len(prompt) - 1:-1].float()
            targets = torch.tensor(ids[len(prompt):], device=device)
            nll.append(float(torch.nn.functional.cross_entropy(logits, targets)))
            correct.append(float((logits.argmax(-1) == targets).float().mean()))
            tokens.append(float(n))
        stats: dict = {}
        shown = problems[:self.options.samples]
        outputs = generate(model, tokenizer, [list(r["prompt"]) for r in shown], n=1,
                           batch_size=self.options.batch_size, max_new_tokens=self.max_new_tokens(), desc="samples",
                           stats=stats) if shown else []
        samples = [{"prompt": r["prompt"][-1]["content"][:300], "reference": r["completion"][-1]["content"][:300],
                    "completion": o[0]["text"][:500]} for r, o in zip(shown, outputs)]
        return Scores(per_problem={"loss": nll, "token_accuracy": correct},
                      weights={"loss": tokens, "token_accuracy": tokens}, derived={"perplexity": ("loss", _exp)},
                      fixed={"completion_tokens": sum(tokens)},
                      decoding={"samples": {"decoding": "greedy", "max_new_tokens": self.max_new_tokens()},
                                "max_length": max_length},
                      throughput=throughput(len(nll), stats), samples=samples)

    def prompts(self):
        problems, _ = self.data()
        return [list(r["prompt"]) for r in problems], None, self.max_new_tokens()
