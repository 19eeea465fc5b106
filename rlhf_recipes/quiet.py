"""What a process's start prints and loads that says nothing about the run (LOGLEVEL=DEBUG shows the lines).

Left out of a run's process that does not use them (`leave_out_unused`), though installed: bitsandbytes (QLoRA,
`evaluate --quantize`), which peft imports whenever it is installed and which imports torch's compiler stack
(torch._inductor) as it loads, and wandb, which TRL imports whenever it is installed. Measured on this project's
shared 2-core CPU, a tiny GRPO run from `python recipes/run.py recipes/grpo.yaml --profile tiny`, three times each
way (user + sys CPU seconds, /usr/bin/time): 12.9 / 11.7 / 11.2 with both left out, 15.0 / 13.7 / 15.6 with both
loaded (this function made a no-op): ~2.8 CPU-s off the start of every run of one process (a launch's processes
keep both: below).

Silenced lines, each a known, harmless message, with why it is harmless:
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
import sys
import warnings

NOISE_LOGS = {
    "bitsandbytes": "from kernels-community",
    "bitsandbytes.backends.cpu.ops": "from kernels-community",
    "DeepSpeed": "Setting accelerator to CPU",
    "transformers.trainer": "missing keys in the checkpoint model loaded: ['lm_head.weight']",
}
NOISE_WARNINGS = (
    r".*'pin_memory' argument is set as true but no accelerator is found.*",
    r".*`is_gradient_checkpointing` is deprecated.*",
    r".*truncation mode is deprecated and will be removed.*",
)


def quiet_known_noise() -> None:
    if os.environ.get("LOGLEVEL", "").upper() == "DEBUG":
        return
    for name, text in NOISE_LOGS.items():
        logging.getLogger(name).addFilter(lambda record, text=text: text not in record.getMessage())
    for pattern in NOISE_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # simpo runs TRL's experimental CPOTrainer on purpose


def explain_once(recipe) -> None:
    """The one line that replaces a silenced warning which concerns a recipe's own choice."""
    if recipe.setting("truncation_mode") == "keep_end":
        logging.getLogger("rlhf_recipes").info(
            "truncation_mode keep_end: long examples are cut from the left, as the book does (TRL 1.16 deprecates "
            "this mode; it is kept on purpose)")


# Installed, yet imported by other libraries whether a run uses them or not.
UNUSED_UNLESS_NEEDED = ("bitsandbytes", "wandb")
# Each of these reads whether those are installed once, when it is imported. (Not TRL's own package, which a recipe's
# reading imports for ModelConfig: its trainers read it through transformers and peft, listed here.)
_READ_AT_IMPORT = ("transformers", "peft", "accelerate", *UNUSED_UNLESS_NEEDED)


def leave_out_unused(needed: set[str]) -> None:
    """A run's process starts without bitsandbytes unless it loads quantized weights, and without wandb unless it
    reports there (`needed`: preflight.needed_packages): each marked absent in sys.modules (Python's own "not
    installed": importing it raises ImportError), so transformers, peft and TRL take their paths without it. Only
    at the entry of a process that runs one recipe (train.cli), before any of them is imported (not, then, in a
    machine's first run, whose recipe reading imports TRL to fill the config schema's cache: config_schema.py),
    and only in a run of one process: the processes of a launch keep every library. (With both left out, one
    2-process ZeRO-3 launch of a CI run aborted at exit after finishing, rank 1: "terminate called without an
    active exception", not seen in 20 earlier CI runs nor in 16 repeats of that launch here, idle or loaded; its
    cause was not found.)"""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 or any(name in sys.modules for name in _READ_AT_IMPORT):
        return
    for name in UNUSED_UNLESS_NEEDED:
        if name not in needed:
            sys.modules[name] = None
