"""Frozen models beside a DeepSpeed ZeRO-3 engine: loaded whole, and the ZeRO-3 settings a run is under.

During a ZeRO-3 run transformers holds a weak reference to the DeepSpeed config (TrainingArguments sets it
whenever accelerate launches with DeepSpeed, whatever `zero3_init_flag` says), and every `from_pretrained` then
partitions the model it loads (deepspeed.zero.Init). That is right for the model the engine trains; a model
loaded beside it and never wrapped in an engine (a reward model scoring rollouts, PPO's separate value model)
keeps only empty shards and fails at its first forward (`'weight' must be 2-D`). Such loads go through
`replicated_under_zero3`.

It lives on the lowest floor (rewards/) because both the reward-model scorer (rewards/) and PPO's value model
(custom_losses/) need it, and one copy of a guard that touches a transformers internal is easier to keep right
than two.
"""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def replicated_under_zero3():
    """Load a model whole even when a DeepSpeed ZeRO-3 config is registered (restored afterwards)."""
    from transformers.integrations import deepspeed as hf_deepspeed

    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


def zero3_launch() -> bool:
    """This process was started for DeepSpeed ZeRO stage 3: by `accelerate launch` with a ZeRO-3 config (its
    environment), or with transformers' ZeRO-3 config already registered. Read from the environment, so it
    answers before any model loads."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true" \
            and os.environ.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3":
        return True
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()
