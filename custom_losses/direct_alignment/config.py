"""Direct-alignment configs: ScheduledDPOConfig (TRL's DPOConfig + the book's LR schedule option) and
BookDPOConfig (that + the choice of one of the book's losses, losses.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import DPOConfig

from custom_losses.direct_alignment.losses import BOOK_LOSSES
from custom_losses.schedules import BookLRScheduleArguments


@dataclass
class ScheduledDPOConfig(BookLRScheduleArguments, DPOConfig):
    """TRL's DPOConfig plus `book_lr_schedule` / `book_lr_shape` (custom_losses/schedules.py)."""


@dataclass
class BookDPOConfig(ScheduledDPOConfig):
    """DPOConfig plus the book's losses that TRL does not compute the same way."""

    book_loss: str = field(
        default="dpo",
        metadata={"help": f"Which book loss to use: {', '.join(BOOK_LOSSES)}. Replaces `loss_type`."},
    )
    gamma_beta_ratio: float = field(
        default=0.5,
        metadata={"help": "SimPO: the target margin as a gamma/beta ratio (the book's and the SimPO paper's "
                  "`gamma`, 0.5); the loss shifts beta * (a_c - a_r) by gamma_beta_ratio * beta."},
    )
    desirable_weight: float = field(default=1.0, metadata={"help": "KTO: weight of the chosen (desirable) term."})
    undesirable_weight: float = field(default=1.0, metadata={"help": "KTO: weight of the rejected term."})

    def __post_init__(self):
        if self.book_loss not in BOOK_LOSSES:
            raise ValueError(f"book_loss must be one of {BOOK_LOSSES}, got {self.book_loss!r}")
        if not 0 <= self.label_smoothing < 0.5:  # cdpo's eps: the assumed share of flipped labels
            raise ValueError(f"cdpo needs 0 <= label_smoothing < 0.5, got {self.label_smoothing}")
        super().__post_init__()
