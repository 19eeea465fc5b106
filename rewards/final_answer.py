"""GSM8K-style final-answer reward, checked with math-verify (symbolic, not string, equality).

The final answer of a completion is, in order of preference: the text after its last
"#### " marker (GSM8K's own convention, which the book's ORM prompt asks for), the last
\\boxed{...}, the last <answer>...</answer>, else the last number in the text. The gold
answer is the `answer` column: either the bare final answer or a full GSM8K solution
ending in "#### <answer>".
"""

from __future__ import annotations

import re

from rewards.text import completion_text

_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def gold_final_answer(answer: str) -> str:
    """'... #### 72' -> '72'; a bare answer is returned stripped."""
    if "####" in answer:
        answer = answer.rsplit("####", 1)[1]
    return answer.strip().replace(",", "")


def final_answer_span(text: str) -> str | None:
    """The part of a completion that states its final answer, or None when there is none."""
    if "####" in text:
        tail = text.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0].strip() if tail else None
    boxed = text.rfind("\\boxed")
    if boxed >= 0:
        return text[boxed:]
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return tags[-1].strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def is_equivalent(gold: str, predicted: str) -> bool:
    from math_verify import parse, verify

    try:
        gold_parsed = parse(gold)
        pred_parsed = parse(predicted.replace(",", "").replace("$", "") if "\\boxed" not in predicted else predicted)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(verify(gold_parsed, pred_parsed))
    except Exception:  # math-verify timeouts or parser errors on garbage text: not a match
        return False


def gsm8k_reward(completions, answer=None, **kwargs) -> list[float]:
    """1.0 when the completion's final answer equals the gold answer (math-verify), else 0.0."""
    if answer is None:
        raise ValueError("gsm8k_reward needs the `answer` column (gold final answer), which the gsm8k source provides")
    if len(answer) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(answer)} answers")
    scores = []
    for completion, gold in zip(completions, answer):
        span = final_answer_span(completion_text(completion))
        scores.append(1.0 if span is not None and is_equivalent(gold_final_answer(str(gold)), span) else 0.0)
    return scores
