"""A reward that is NaN or inf is an error, not a number to average.

TRL turns a reward function's None ("does not apply to this completion") into NaN and then sums with
nansum, so a NaN a function *returns* was indistinguishable from None: it was dropped from the total
(a completion logged with the other functions' reward, e.g. 1.0) and stored as 0.0 in the rollouts
database. The two mean different things, so the check sits here, on the function's own return value,
where they still differ: None passes, a non-finite number stops the run naming the function and the
completion. An error rather than a warning because a reward function returning NaN has a bug; training
on the rest of its batch would hide it (docs/reliability.md).
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable


class NonFiniteReward(FloatingPointError):
    """A reward function returned NaN or inf (FloatingPointError: the runner reports non-finite values alike)."""


def _shown(completion: Any) -> str:
    """A completion's text, shortened for a one-line message (a conversational one: its last message)."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        completion = completion[-1].get("content", completion[-1])
    text = str(completion).replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."


def check_finite(name: str, values: list, completions: list | None) -> None:
    for i, value in enumerate(values):
        if value is None or isinstance(value, bool):
            continue
        try:
            finite = math.isfinite(float(value))
        except (TypeError, ValueError):
            continue  # not a number at all: TRL's own conversion reports it
        if not finite:
            shown = f" ({_shown(completions[i])!r})" if completions is not None and i < len(completions) else ""
            raise NonFiniteReward(
                f"reward function `{name}` returned {float(value)} for completion {i} of its batch{shown}: a reward "
                "must be a finite number, or None where it does not apply")


def finite_only(func: Callable[..., list]) -> Callable[..., list]:
    """`func` with its return values checked; keeps its __name__ (TRL logs rewards under it)."""
    if getattr(func, "_finite_only", False):
        return func
    if inspect.iscoroutinefunction(func):  # TRL runs async reward functions (LLM judges) on its own loop
        @functools.wraps(func)
        async def checked_async(*args, **kwargs):
            values = await func(*args, **kwargs)
            check_finite(func.__name__, values, kwargs.get("completions"))
            return values

        checked_async._finite_only = True
        return checked_async

    @functools.wraps(func)
    def checked(*args, **kwargs):
        values = func(*args, **kwargs)
        check_finite(func.__name__, values, kwargs.get("completions", args[0] if args else None))
        return values

    checked._finite_only = True
    return checked
