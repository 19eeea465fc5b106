"""Learning-rate schedules of the book's own code, as pure functions (no trainer, no torch state).

The book's warmup starts at lr (k+1)/(W+1), not at 0 as transformers' `linear` and
`constant_with_warmup` schedules do, and it takes W = int(ratio * T) (transformers rounds up).
Used by SFT (chapter 4); generic so that direct alignment (chapter 8) can use it too.
"""

from __future__ import annotations

from functools import partial


def book_warmup_steps(warmup: float, total_steps: int) -> int:
    """W from a recipe's `warmup_steps`: a float < 1 is a ratio, W = int(ratio * T) (floored, as the book does;
    transformers' get_warmup_steps takes the ceiling); a value >= 1 is a step count."""
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    return int(warmup * total_steps) if warmup < 1 else int(warmup)


def book_warmup_linear(step: int, warmup_steps: int, total_steps: int) -> float:
    """The LR multiplier at optimizer step `step` (0-based) of the book's warmup + linear decay.

    With W = warmup_steps and T = total_steps:
        step k <  W:  (k + 1) / (W + 1)      (the first step is 1/(W+1), not 0)
        step k >= W:  (T - k) / (T - W)      (1.0 at k = W, falling linearly; 1/(T-W) at the last step k = T-1)
    W = 0 is no warmup: (T - k) / T from the first step.
    """
    if total_steps <= 0 or not 0 <= warmup_steps < total_steps:
        raise ValueError(f"need 0 <= warmup_steps < total_steps, got W={warmup_steps}, T={total_steps}")
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    return max(0.0, (total_steps - step) / (total_steps - warmup_steps))


def book_warmup_linear_scheduler(optimizer, warmup_steps: int, total_steps: int, last_epoch: int = -1):
    """A LambdaLR over `book_warmup_linear` (a functools.partial, so the scheduler's state_dict saves and loads)."""
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(optimizer, partial(book_warmup_linear, warmup_steps=warmup_steps, total_steps=total_steps),
                    last_epoch=last_epoch)


__all__ = ["book_warmup_steps", "book_warmup_linear", "book_warmup_linear_scheduler"]
