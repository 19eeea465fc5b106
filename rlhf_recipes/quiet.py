"""Silence the lines every run printed that say nothing about the run (LOGLEVEL=DEBUG shows them all).

Each entry is a known, harmless message, with why it is harmless:
- bitsandbytes on a CPU machine: its optional `kernels` package is missing (only 4-bit CPU matmuls use it);
- DeepSpeed's "Setting accelerator to CPU" on a machine without a GPU (it is imported by transformers);
- torch's pin_memory warning on a machine without a GPU (pinning only helps host-to-GPU copies);
- transformers' `is_gradient_checkpointing` deprecation (raised inside TRL, not by our code);
- "missing keys ['lm_head.weight']" when a checkpoint of a model with tied input/output embeddings is
  loaded: the head IS the embedding matrix, which was loaded;
- TRL's "you are importing from trl.experimental" (simpo's CPOTrainer lives there; the docs say so);
- TRL's deprecation of truncation_mode keep_end: the book cuts from the left, so recipes keep it on
  purpose; `explain_once` below says so once per run instead.
"""

from __future__ import annotations

import logging
import os
import warnings

NOISE_LOGS = {
    "bitsandbytes": "from kernels-community",
    "DeepSpeed": "Setting accelerator to CPU",
    "transformers.trainer": "missing keys in the checkpoint model loaded: ['lm_head.weight']",
}
NOISE_WARNINGS = (
    r".*'pin_memory' argument is set as true but no accelerator is found.*",
    r".*`is_gradient_checkpointing` is deprecated.*",
    r".*truncation mode is deprecated and will be removed.*",
)


class _Drop(logging.Filter):
    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def quiet_known_noise() -> None:
    if os.environ.get("LOGLEVEL", "").upper() == "DEBUG":
        return
    for name, text in NOISE_LOGS.items():
        log = logging.getLogger(name)
        log.addFilter(_Drop(text))
        for child in ("backends.cpu.ops",) if name == "bitsandbytes" else ():
            logging.getLogger(f"{name}.{child}").addFilter(_Drop(text))
    for pattern in NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # simpo runs TRL's experimental CPOTrainer on purpose


def explain_once(recipe) -> None:
    """The one line that replaces a silenced warning which concerns a recipe's own choice."""
    if recipe.value("truncation_mode") == "keep_end":
        logging.getLogger("rlhf_recipes").info(
            "truncation_mode keep_end: long examples are cut from the left, as the book does (TRL 1.16 deprecates "
            "this mode; it is kept on purpose)")
