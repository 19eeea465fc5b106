"""Held-out evaluation of direct-alignment runs (DPO and relatives): preference accuracy, margins, win rate.

Problems: held-out preference pairs (rlhf_recipes/evaluation/heldout.py). Per pair, from sequence log-probs
of the chosen and rejected completions (the prompt rendered with the chat template, as TRL's DPOTrainer does):
  implicit_accuracy   the DPO implicit reward r = beta * (log pi(y|x) - log ref(y|x)) ranks chosen above
                      rejected (a tie counts 1/2, so the reference model itself scores exactly 0.5); for an
                      algorithm that averages log-probs (the registry's `averages_logprobs`: DPO-norm) the
                      log-ratio is divided by the completion's tokens, as its training loss and logged rewards;
                      for a reference-free algorithm (SimPO, ORPO: no reference in the registry) r is the mean
                      token log-prob of the completion (SimPO's reward, without its beta);
  implicit_margin     r(chosen) - r(rejected);
  logprob_accuracy    log pi(chosen) > log pi(rejected) under the policy alone (no reference: meaningful for the
                      starting model too);
and with `--judge rm:PATH` (a trained reward model), on the held-out prompts: the policy's greedy completion
and the reference model's greedy completion are scored by the RM, and
  win_rate            1 when the policy's scores above the reference's, 1/2 on a tie, else 0.
"""

from __future__ import annotations

from rlhf_recipes.evaluation.base import EvalError, EvalOptions, Evaluator, Scores


class PreferenceEvaluator(Evaluator):
    default_problems = 500

    @property
    def kind(self) -> str:
        """What is reported: the win rate only with a judge (--judge rm:PATH)."""
        judged = ", judged win rate" if self.options.judge else ""
        return f"held-out preference pairs: implicit-reward accuracy and margins{judged}"

    def check(self) -> None:
        judge = self.options.judge
        if judge is None:
            return
        from rewards.reward_model import RM_PREFIX
        from rewards.reward_model_files import resolve_reward_model_dir
        from rlhf_recipes.model_checks import check_model_folder

        if not judge.startswith(RM_PREFIX):
            raise EvalError(f"--judge {judge}: expected rm:PATH, a trained reward model's folder (e.g. "
                            "rm:outputs/preference_rm)")
        try:
            folder = resolve_reward_model_dir(judge[len(RM_PREFIX):])
        except ValueError as e:
            raise EvalError(f"--judge: {e}") from None
        check_model_folder(folder, "--judge")

    def build_data(self):
        from rlhf_recipes.evaluation.heldout import heldout_rows

        return heldout_rows(self.recipe, self.num_problems())

    def reference(self):
        """The starting model (the DPO reference), loaded once, unquantized."""
        if getattr(self, "_reference", None) is None:
            from rlhf_recipes.evaluation.loading import load_causal_lm

            options = EvalOptions(**{**self.options.settings(), "quantize": None})
            self._reference = load_causal_lm(self.recipe.model.model_name_or_path, self.recipe, options)
        return self._reference

    def logprobs(self, model, tokenizer, problems) -> dict[str, list[tuple[float, int]]]:
        from rlhf_recipes.generation import chat_ids, completion_logprobs

        max_length = self.recipe.setting("max_length")
        out = {}
        for side in ("chosen", "rejected"):
            pairs = [chat_ids(tokenizer, list(r["prompt"]), list(r[side])) for r in problems]
            out[side] = completion_logprobs(model, [p for p, _ in pairs], [c for _, c in pairs],
                                            tokenizer.pad_token_id, self.options.batch_size, max_length, desc=side)
        return out

    def score(self, model, tokenizer) -> Scores:
        problems, _ = self.data()
        policy = self.logprobs(model, tokenizer, problems)
        reference_free = not self.recipe.algorithm.reference_model
        averaged = self.recipe.algorithm.averages_logprobs
        beta = float(self.recipe.setting("beta"))  # the run's own, 0 included (a tie on every pair, reported as such)
        if reference_free:
            rewards = {s: [lp / max(n, 1) for lp, n in policy[s]] for s in policy}
        else:
            ref_model, ref_tokenizer = self.reference()
            ref = self.logprobs(ref_model, ref_tokenizer, problems)
            # the same completion tokens under both models: one length divides the log-ratio
            rewards = {s: [beta * (a[0] - b[0]) / (max(a[1], 1) if averaged else 1) for a, b in zip(policy[s], ref[s])]
                       for s in policy}
        margins = [c - r for c, r in zip(rewards["chosen"], rewards["rejected"])]
        per_problem = {
            "implicit_accuracy": [1.0 if m > 0 else 0.5 if m == 0 else 0.0 for m in margins],
            "implicit_margin": margins,
            "logprob_accuracy": [float(c[0] > r[0]) for c, r in zip(policy["chosen"], policy["rejected"])],
        }
        scores = Scores(per_problem=per_problem, rates=frozenset({"logprob_accuracy"}),
                        decoding={"implicit_reward": "mean token log-prob" if reference_free else f"beta {beta} x "
                                  "log-ratio to the reference" + (", averaged over the completion's tokens"
                                                                  if averaged else ""),
                                  "max_length": self.recipe.setting("max_length")})
        if self.options.judge:
            self.judge(model, tokenizer, problems, scores)
        return scores

    def max_new_tokens(self) -> int:
        return self.options.max_new_tokens or 256

    def judge(self, model, tokenizer, problems, scores: Scores) -> None:
        from rewards.reward_model import RM_PREFIX, reward_model_reward
        from rlhf_recipes.generation import generate, throughput

        prompts = [list(r["prompt"]) for r in problems]
        stats: dict = {}
        common = dict(n=1, batch_size=self.options.batch_size, max_new_tokens=self.max_new_tokens())
        mine = [g[0]["text"] for g in generate(model, tokenizer, prompts, desc="policy", stats=stats, **common)]
        if getattr(self, "_reference_texts", None) is None:
            ref_model, ref_tokenizer = self.reference()
            self._reference_texts = [g[0]["text"] for g in generate(ref_model, ref_tokenizer, prompts,
                                                                     desc="reference", **common)]
        rm = reward_model_reward(self.options.judge[len(RM_PREFIX):], batch_size=self.options.batch_size)
        as_messages = lambda texts: [[{"role": "assistant", "content": t}] for t in texts]  # noqa: E731
        a = rm(completions=as_messages(mine), prompts=prompts)
        b = rm(completions=as_messages(self._reference_texts), prompts=prompts)
        scores.per_problem["win_rate"] = [1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(a, b)]
        scores.per_problem["judge_reward"] = list(a)
        scores.decoding["judge"] = {"reward_model": self.options.judge, "decoding": "greedy",
                                    "max_new_tokens": self.max_new_tokens()}
        scores.throughput = throughput(len(problems), stats)
        scores.samples = [{"prompt": p[-1]["content"][:300], "policy": m[:400], "reference": r[:400],
                           "policy_reward": x, "reference_reward": y}
                          for p, m, r, x, y in list(zip(prompts, mine, self._reference_texts, a, b))[:self.options.samples]]

    def prompts(self):
        problems, _ = self.data()
        return [list(r["prompt"]) for r in problems], None, self.max_new_tokens()
