"""GSM8K answer extraction and correctness, as the book's rejection-sampling evaluation does it.

    extract_answer: the content of the LAST \\boxed{...} the `boxed_rule` recognises; its last number (commas
        removed), or, when it holds no number, its stripped text (commas removed); with no recognised
        \\boxed{} at all, the last number of the whole text; None when there is none.
    is_correct: |float(predicted) - float(gold)| < 1e-6; when either is not a number, the stripped strings
        must be equal; None is never correct.

Two rules for what counts as a \\boxed{...} (BOXED_RULES):
    book    (default) the book's code (rejection_sampling's answer extraction, a regular expression): the
            content may hold brace groups ONE level deep (\\boxed{\\frac{1}{2}} is read), not deeper; a
            \\boxed{} nested two deep (\\boxed{\\frac{\\sqrt{3}}{2}}) is not recognised at all, so an earlier
            \\boxed{} or the last number of the text is graded instead. Of the non-overlapping matches
            scanned from the left, the last one is taken.
    nested  ours before: any depth of balanced braces, the last \\boxed{ whose braces close.
"""

from __future__ import annotations

import re
from typing import Sequence

NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
BOXED = "\\boxed{"
TOLERANCE = 1e-6
# A brace-free character, or a brace group holding only brace-free characters: one level of nesting.
BOOK_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")
BOXED_RULES = ("book", "nested")
DEFAULT_BOXED_RULE = "book"
BOXED_RULE_HELP = {
    "book": "the last \\boxed{} with braces at most one level deep inside, as the book's code",
    "nested": "the last \\boxed{} with balanced braces of any depth inside (not the book's)",
}


def check_rule(boxed_rule: str) -> str:
    if boxed_rule not in BOXED_RULES:
        raise ValueError(f"boxed_rule must be one of {', '.join(BOXED_RULES)}, got {boxed_rule!r}")
    return boxed_rule


def last_boxed_nested(text: str) -> str | None:
    """The content of the last \\boxed{...} whose braces close (any depth), or None."""
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


def last_boxed_book(text: str) -> str | None:
    """The content of the last \\boxed{...} with at most one level of braces inside, or None."""
    found = BOOK_BOXED.findall(text)
    return found[-1] if found else None


def last_boxed(text: str, boxed_rule: str = DEFAULT_BOXED_RULE) -> str | None:
    return last_boxed_book(text) if check_rule(boxed_rule) == "book" else last_boxed_nested(text)


def extract_answer(text: str, boxed_rule: str = DEFAULT_BOXED_RULE) -> str | None:
    inside = last_boxed(text, boxed_rule)
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


def accuracy(completions: Sequence[str], golds: Sequence[str], boxed_rule: str = DEFAULT_BOXED_RULE) -> float:
    """Share of completions whose extracted answer is correct."""
    if len(completions) != len(golds):
        raise ValueError(f"{len(completions)} completions for {len(golds)} gold answers")
    return sum(is_correct(extract_answer(c, boxed_rule), g)
               for c, g in zip(completions, golds)) / max(1, len(golds))
