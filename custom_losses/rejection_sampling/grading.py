"""GSM8K answer extraction and correctness, as the book's rejection-sampling evaluation does it.

    extract_answer: the content of the LAST \\boxed{...} (nested braces allowed); its last number (commas
        removed), or, when it holds no number, its stripped text (commas removed); with no \\boxed{} at all,
        the last number of the whole text; None when there is none.
    is_correct: |float(predicted) - float(gold)| < 1e-6; when either is not a number, the stripped strings
        must be equal; None is never correct.
"""

from __future__ import annotations

import re
from typing import Sequence

NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
BOXED = "\\boxed{"
TOLERANCE = 1e-6


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} whose braces close, or None."""
    start = text.rfind(BOXED)
    while start != -1:
        depth, i = 1, start + len(BOXED)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len(BOXED):i - 1]
        start = text.rfind(BOXED, 0, start)  # unclosed: the one before it
    return None


def extract_answer(text: str) -> str | None:
    inside = last_boxed(text)
    if inside is not None:
        numbers = NUMBER.findall(inside)
        if numbers:
            return numbers[-1].replace(",", "")
        return inside.strip().replace(",", "") or None
    numbers = NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def is_correct(predicted: str | None, gold: str) -> bool:
    if predicted is None:
        return False
    try:
        return abs(float(predicted) - float(gold)) < TOLERANCE
    except ValueError:
        return predicted.strip() == gold.strip()


def accuracy(completions: Sequence[str], golds: Sequence[str]) -> float:
    """Share of completions whose extracted answer is correct."""
    if len(completions) != len(golds):
        raise ValueError(f"{len(completions)} completions for {len(golds)} gold answers")
    return sum(is_correct(extract_answer(c), g) for c, g in zip(completions, golds)) / max(1, len(golds))
