"""Learning-rate schedules of the book's own code: pure functions, their torch schedulers, and the
option + trainer mixin that put them on any transformers Trainer.

The book's warmup starts at lr (k+1)/(W+1) (SFT, chapter 4; direct alignment, chapter 8) or at
0.1 lr (the PRM, chapter 5: torch LinearLR, then constant), not at 0 as transformers' `linear` and
`constant_with_warmup` schedules do, and it takes W = int(ratio * T) (transformers rounds up).

A trainer gets them by subclassing `BookLRScheduleMixin` (before the Trainer class) and a config by
subclassing `BookLRScheduleArguments` (before the TrainingArguments class); the option is
`book_lr_schedule: true` and, for the shape, `book_lr_shape` (BOOK_LR_SHAPES).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from functools import partial

logger = logging.getLogger(__name__)


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


def book_warmup_constant(step: int, warmup_steps: int, start_factor: float = 0.1) -> float:
    """The LR multiplier at optimizer step `step` (0-based) of the book's PRM schedule: torch's
    LinearLR(start_factor, end_factor=1, total_iters=W), then constant.

        step k <  W:  start_factor + (1 - start_factor) * k / W     (the first step is 0.1, not 0)
        step k >= W:  1.0
    W = 0 is no warmup (the book then makes no scheduler): 1.0 from the first step.
    """
    if warmup_steps < 0 or not 0 < start_factor <= 1:
        raise ValueError(f"need warmup_steps >= 0 and 0 < start_factor <= 1, got {warmup_steps}, {start_factor}")
    if step >= warmup_steps:
        return 1.0
    return start_factor + (1.0 - start_factor) * step / warmup_steps


def book_warmup_constant_scheduler(optimizer, warmup_steps: int, total_steps: int | None = None,
                                   last_epoch: int = -1):
    """A LambdaLR over `book_warmup_constant` (`total_steps` is not used: the LR holds after the warmup)."""
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(optimizer, partial(book_warmup_constant, warmup_steps=warmup_steps), last_epoch=last_epoch)


# The book's schedule shapes, by the name a recipe gives in `book_lr_shape`.
BOOK_LR_SCHEDULERS = {
    "warmup_linear": book_warmup_linear_scheduler,  # SFT, direct alignment: (k+1)/(W+1), then (T-k)/(T-W)
    "warmup_constant": book_warmup_constant_scheduler,  # PRM: 0.1 -> 1 over W steps, then 1
}
BOOK_LR_SHAPES = tuple(BOOK_LR_SCHEDULERS)


class BookWarmupSteps:
    """W = int(ratio * T) for a warmup ratio, as every schedule of the book's code takes it, also under transformers'
    own schedulers (its TrainingArguments.get_warmup_steps takes the ceiling: the book's preference RM, 564 steps
    at ratio 0.1, warms up over 56 steps, transformers' over 57). List it before the TrainingArguments class."""

    def get_warmup_steps(self, num_training_steps: int) -> int:
        return book_warmup_steps(self.warmup_steps, num_training_steps)


@dataclass
class BookLRScheduleArguments(BookWarmupSteps):
    """The recipe options; list this class BEFORE the TrainingArguments class in a config's bases."""

    book_lr_schedule: bool = field(
        default=False,
        metadata={"help": "The book's LR schedule (custom_losses/schedules.py), shape `book_lr_shape`, with "
                  "W = int(warmup_steps * T) for a ratio. Replaces lr_scheduler_type."},
    )
    book_lr_shape: str = field(
        default="warmup_linear",
        metadata={"help": "warmup_linear: lr (k+1)/(W+1) for k < W, then lr (T-k)/(T-W) (the book's SFT and "
                  "direct alignment); warmup_constant: torch LinearLR from 0.1 lr to lr over W steps, then "
                  "constant (the book's PRM).", "choices": list(BOOK_LR_SHAPES)},
    )

    def __post_init__(self):
        if self.book_lr_shape not in BOOK_LR_SHAPES:
            raise ValueError(f"book_lr_shape must be one of {BOOK_LR_SHAPES}, got {self.book_lr_shape!r}")
        if self.book_lr_schedule and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0 for book_lr_schedule, got {self.warmup_steps}")
        super().__post_init__()


class BookLRScheduleMixin:
    """`create_scheduler` for a transformers Trainer: the book's schedule when `args.book_lr_schedule`.

    The book's SFT and direct-alignment loops count T = (micro-batches per epoch // accumulation) x epochs: an
    epoch's last, partial accumulation step is not in T, so the run's last step trains at the schedule's end, lr 0
    (the book's cDPO run: 250 micro-batches, accumulation 4, T = 62 and a 63rd step at lr 0). transformers counts
    that step in T; with an epoch-based run (no max_steps) the warmup_linear shape takes the book's T."""

    _book_full_steps: int | None = None

    def set_initial_training_values(self, args, dataloader):
        values = super().set_initial_training_values(args, dataloader)
        self._book_full_steps = None
        if args.max_steps <= 0 and dataloader is not None and hasattr(dataloader, "__len__"):
            per_epoch = len(dataloader) // args.gradient_accumulation_steps
            self._book_full_steps = math.floor(per_epoch * args.num_train_epochs) or None
        return values

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if not getattr(self.args, "book_lr_schedule", False):
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            book_steps = getattr(self, "_book_full_steps", None)
            if self.args.book_lr_shape == "warmup_linear" and book_steps:
                num_training_steps = book_steps
            warmup = book_warmup_steps(self.args.warmup_steps, num_training_steps)
            factory = BOOK_LR_SCHEDULERS[self.args.book_lr_shape]
            self.lr_scheduler = factory(optimizer or self.optimizer, warmup, num_training_steps)
            self._created_lr_scheduler = True
            if self.args.process_index == 0:
                logger.info("book_lr_schedule (%s): %d warmup steps of %d (lr_scheduler_type %s is not used)",
                            self.args.book_lr_shape, warmup, num_training_steps, self.args.lr_scheduler_type)
        return self.lr_scheduler


__all__ = ["BookWarmupSteps", "book_warmup_steps", "book_warmup_linear", "book_warmup_linear_scheduler", "book_warmup_constant",
           "book_warmup_constant_scheduler", "BOOK_LR_SCHEDULERS", "BOOK_LR_SHAPES", "BookLRScheduleArguments",
           "BookLRScheduleMixin"]
