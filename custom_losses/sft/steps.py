"""How a partial last optimizer step scales its micro-batch losses (pure; BookSFTTrainer applies it).

An epoch whose micro-batches do not fill the last accumulation window ends with a step of `taken` <
`accumulation` micro-batches. The book's rejection sampling divides every micro-batch loss by the full
accumulation count (`loss / cfg.batch_acc`, also in the last, shorter step); transformers divides by the
micro-batches the step has.
"""

from __future__ import annotations

PARTIAL_STEP_SCALES = ("accumulation", "taken")


def micro_batch_divisor(taken: int, accumulation: int, scale: str) -> int:
    """What each micro-batch loss of an optimizer step of `taken` micro-batches is divided by."""
    if scale == "accumulation":
        return accumulation
    if scale == "taken":
        return taken
    raise ValueError(f"partial_step_scale must be one of {PARTIAL_STEP_SCALES}, got {scale!r}")
