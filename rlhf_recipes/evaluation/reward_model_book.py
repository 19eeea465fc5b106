"""The book's reward-model numbers (chapter 5) and a scored demo, on a tokenized held-out split.

`evaluate`: pairwise accuracy and margin (preference), best-of-group and pairwise accuracy (outcome), step
accuracy (process). `demo`: a correct and a perturbed answer scored side by side, and held-out rows. Training
writes both into final_results.json (families/reward_model.py); `rlhf-recipes evaluate` adds intervals
(evaluation/reward_models.py).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rlhf_recipes.data.sources import FIXTURES


def pair_rewards(model, dataset, pad_id: int, batch_size: int) -> tuple[list[float], list[float]]:
    """The rewards of a tokenized preference split's chosen and of its rejected sequences."""
    from rewards.reward_model_scoring import sequence_rewards

    chosen, rejected = list(dataset["chosen_ids"]), list(dataset["rejected_ids"])
    rewards = sequence_rewards(model, chosen + rejected, pad_id, batch_size)
    return rewards[: len(chosen)], rewards[len(chosen):]


def step_predictions(model, dataset, pad_id: int, batch_size: int) -> tuple[list[int], list[int]]:
    """(the argmax of bad/neutral/good, the label) at every labelled step of a tokenized process split."""
    from rewards.reward_model_scoring import step_probabilities

    ids, labels = list(dataset["input_ids"]), list(dataset["labels"])
    positions = [[i for i, y in enumerate(lab) if y != -100] for lab in labels]
    probs = step_probabilities(model, ids, positions, pad_id, batch_size)
    predictions = [max(range(3), key=p.__getitem__) for row in probs for p in row]
    return predictions, [lab[i] for lab, pos in zip(labels, positions) for i in pos]


def evaluate(info: dict, model, tokenizer, dataset, batch_size: int = 8) -> dict[str, Any]:
    """The book's evaluation numbers on a tokenized split (every process scores all of it)."""
    from custom_losses.reward_models.losses import preference_metrics, rollout_metrics, step_metrics
    from rewards.reward_model_scoring import rollout_rewards

    pad_id = tokenizer.pad_token_id
    kind = info["kind"]
    if kind == "preference":
        return preference_metrics(*pair_rewards(model, dataset, pad_id, batch_size))
    if kind == "outcome":
        scores = rollout_rewards(model, list(dataset["input_ids"]), list(dataset["completion_mask"]), pad_id,
                                 batch_size, info.get("score_reduction", "last"))
        return rollout_metrics(scores, dataset["rewards"], dataset["group"])
    return step_metrics(*step_predictions(model, dataset, pad_id, batch_size))


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


def _pair_item(what: str, prompt, better, worse, scores: list[float], k: int) -> dict[str, Any]:
    """The k-th scored (better, worse) pair of `scores` (better at 2k, worse at 2k + 1)."""
    sa, sb = scores[2 * k], scores[2 * k + 1]
    return {"example": what, "prompt": _clip(prompt), "better": _clip(better), "worse": _clip(worse),
            "score_better": round(sa, 4), "score_worse": round(sb, 4), "prefers_better": sa > sb}


def shows_book_demo(recipe) -> bool:
    """The demo scores GSM8K solutions and a written explanation: it says nothing about an RM trained on data a
    source generates from a task (the nano profile's rollouts and pairs sampled from a policy), whose held-out
    rows are shown instead (and, for rollouts, ranked by its score: evaluation/best_of_n.py)."""
    from rlhf_recipes.data.sources import SOURCES

    source = SOURCES.get(recipe.args.dataset)
    return source is None or source.generate is None


def demo(info: dict, model, tokenizer, eval_rows=None, system_prompt: str | None = None) -> list[dict[str, Any]]:
    """A few scored examples: the book's correct-vs-perturbed answer, and held-out rows."""
    from rewards.reward_model_encoding import encode_rollout, encode_sequence, encode_steps, truncate
    from rewards.reward_model_scoring import rollout_rewards, sequence_rewards, step_probabilities

    kind, pad_id = info["kind"], tokenizer.pad_token_id
    max_length, mode = info.get("max_length"), info.get("truncation_mode", "keep_start")
    if kind == "preference":
        pairs = [("written: a good vs a poor explanation", [{"role": "user", "content": _EXPLAIN_PROMPT}],
                  [{"role": "assistant", "content": _GOOD_EXPLANATION}],
                  [{"role": "assistant", "content": _POOR_EXPLANATION}])]
        held_out = eval_rows.select(range(min(2, len(eval_rows)))).to_list() if eval_rows is not None else []
        for i, row in enumerate(held_out):
            pairs.append((f"held-out pair {i} (chosen vs rejected)", row.get("prompt"), row["chosen"], row["rejected"]))
        seqs = [truncate(encode_sequence(tokenizer, p, c), max_length, mode) for _, p, a, b in pairs for c in (a, b)]
        scores = sequence_rewards(model, seqs, pad_id)
        return [_pair_item(what, prompt, a, b, scores, k) for k, (what, prompt, a, b) in enumerate(pairs)]

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
        return [_pair_item(f"GSM8K test: correct vs perturbed ({what})", question, good, bad, scores, k)
                for k, (question, good, bad, what) in enumerate(questions)]

    # process: per-step P(good) of a correct and a perturbed solution, split one line per step
    template, sep = info["prompt_template"], info["step_separator"]
    traces = []
    for question, good, bad, what in questions:
        # the perturbation describes the perturbed trace only ("final answer 18 -> 21")
        for label, solution in (("correct", good), (f"perturbed ({what})", bad)):
            lines = [line for line in solution.split("\n") if line.strip()]
            steps = lines[:-1] + ["# Answer\n\n" + lines[-1].replace("####", "").strip()]
            traces.append((f"GSM8K test, {label}", question, steps))
    encoded = [encode_steps(tokenizer, q, s, template, sep) for _, q, s in traces]
    probs = step_probabilities(model, [e[0] for e in encoded], [e[1] for e in encoded], pad_id)
    items = []
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
    best_of_n = results.get("best_of_n")
    if best_of_n:
        lines.append(f"best-of-{best_of_n['rollouts_per_problem']} selection (best_of_n_* above): "
                     f"{best_of_n['problems']} problems, {best_of_n['construction']}")
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
