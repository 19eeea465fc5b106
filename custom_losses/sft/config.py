"""BookSFTConfig: TRL's SFTConfig plus what the book's SFT needs and TRL does not offer."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import SFTConfig

from custom_losses.schedules import BookLRScheduleArguments


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
                  "size rows); the leftover rows of an epoch's shuffle are dropped, as the book does. "
                  "transformers' default takes a partial last step."},
    )
