"""BookSFTConfig: TRL's SFTConfig plus what the book's SFT needs and TRL does not offer."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import SFTConfig

from custom_losses.schedules import BookLRScheduleArguments
from custom_losses.sft.steps import PARTIAL_STEP_SCALES


@dataclass
class BookSFTConfig(BookLRScheduleArguments, SFTConfig):
    chat_template_from: str | None = field(
        default=None,
        metadata={"help": "Copy ONLY the chat template string of this tokenizer (hub id or path) onto the model's "
                  "tokenizer: no tokens added, no embedding resize (the book, for OLMo-2 base). TRL's "
                  "`chat_template_path` with a tokenizer instead adds the source's tokens and resizes the "
                  "embeddings (to a multiple of 64)."},
    )
    drop_partial_steps: bool = field(
        default=False,
        metadata={"help": "Each epoch yields only whole optimizer steps (per-device batch x accumulation x world "
                  "size rows); the leftover rows of an epoch's shuffle are dropped, as the book's SFT does. "
                  "false: a partial last step is taken (the book's rejection sampling; transformers' default), its "
                  "loss scaled by partial_step_scale."},
    )
    partial_step_scale: str = field(
        default="accumulation",
        metadata={"help": "How the micro-batch losses of a partial last step (fewer micro-batches than "
                  "gradient_accumulation_steps; drop_partial_steps false) are scaled: 'accumulation' (the book's "
                  "rejection sampling: each divided by gradient_accumulation_steps, so the short step has a smaller "
                  "gradient) or 'taken' (transformers: divided by the micro-batches the step has).",
                  "choices": list(PARTIAL_STEP_SCALES)},
    )

    def __post_init__(self):
        super().__post_init__()
        if self.partial_step_scale not in PARTIAL_STEP_SCALES:
            raise ValueError(f"partial_step_scale must be one of {PARTIAL_STEP_SCALES}, got "
                             f"{self.partial_step_scale!r}")
