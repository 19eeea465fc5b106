"""PPO's value model: building it, running it, saving and restoring it.

Two layouts (PPOConfig.share_value_backbone):
  separate (the book)  a full copy of a causal LM whose LM head is replaced by Linear(hidden, 1):
                       transformers' *ForTokenClassification with one label, no bias, no
                       classifier dropout, the head re-initialised as a fresh torch nn.Linear
                       (when the checkpoint has no trained head). Loaded from
                       `value_model_path` (default: the policy's own checkpoint). With LoRA
                       on the policy it gets the same LoRA adapters, and a fully trained head.
  shared               only Linear(hidden, 1) (fp32), on the policy's last hidden states: no
                       second backbone in memory; the value loss also trains the policy's
                       backbone (or its LoRA adapters).
The value at completion token t is read from the hidden state of the position BEFORE t (the
state the token is generated from), the same positions the policy's log-probs come from.

Saved as <dir>/value_model/: save_pretrained (separate; the adapter only under LoRA) or
value_head.safetensors (shared), plus ppo_value.json saying which.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rewards.zero3 import replicated_under_zero3  # the value model is not a DeepSpeed engine: whole weights

logger = logging.getLogger(__name__)

VALUE_SUBDIR = "value_model"
INFO_FILE = "ppo_value.json"
HEAD_FILE = "value_head.safetensors"
OPTIMIZER_FILE = "value_optimizer.pt"
SCHEDULER_FILE = "value_scheduler.pt"


class ValueHead(nn.Module):
    """Linear(hidden, 1) without bias, in fp32, on hidden states the policy's backbone computed."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.score = nn.Linear(hidden_size, 1, bias=False, dtype=torch.float32)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.score(hidden_states.to(self.score.weight.dtype)).squeeze(-1)


def hidden_size_of(model) -> int:
    config = model.config
    return (config.get_text_config() if hasattr(config, "get_text_config") else config).hidden_size


def backbone_of(policy) -> nn.Module:
    """The decoder stack whose last hidden states feed the LM head (and the shared value head)."""
    from accelerate.utils import is_peft_model

    model = policy.get_base_model() if is_peft_model(policy) else policy
    return model.base_model


def value_peft_config(peft_config):
    """The policy's LoRA settings for the value model: a token-classification task whose head trains fully."""
    if peft_config is None:
        return None
    config = copy.deepcopy(peft_config)
    config.task_type = "TOKEN_CLS"
    config.modules_to_save = sorted(set(config.modules_to_save or []) | {"score"})
    excluded = config.exclude_modules
    if isinstance(excluded, str):
        logger.warning("value model LoRA: exclude_modules is a regex (%s); make sure it excludes `score`", excluded)
    else:
        config.exclude_modules = sorted(set(excluded or []) | {"score"})
    return config


def load_value_model(path: str, pad_token_id: int | None, seed: int, init_kwargs: dict[str, Any] | None = None,
                     peft_config=None):
    """A causal LM checkpoint (or a trained reward model) as a value model with one output per token."""
    from transformers import AutoConfig, AutoModelForTokenClassification

    init_kwargs = dict(init_kwargs or {})
    config = AutoConfig.from_pretrained(path, num_labels=1, revision=init_kwargs.get("revision"))
    config.token_classification_bias = False  # the book's Linear(hidden, 1)
    config.classifier_dropout = 0.0  # the book's head has no dropout
    with replicated_under_zero3():
        model, info = AutoModelForTokenClassification.from_pretrained(
            path, config=config, output_loading_info=True, **init_kwargs
        )
    if any(key.startswith("score.") for key in info.get("missing_keys", ())):
        # A fresh head, as the book creates one: torch's default nn.Linear initialisation.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.score.reset_parameters()
    else:
        logger.info("value model: the head of %s is kept (a trained reward model?)", path)
    if pad_token_id is not None:
        model.config.pad_token_id = pad_token_id
    peft = value_peft_config(peft_config)
    if peft is not None:
        from peft import get_peft_model

        model = get_peft_model(model, peft)
    return model


def count_trainable(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


# --------------------------------------------------------------------------------------
# Saving and restoring


def save_value_model(module: nn.Module, directory: str | Path, kind: str, base: str | None) -> Path:
    """Write the value model (unwrapped) to `directory`/value_model; returns that folder."""
    from accelerate.utils import is_peft_model
    from safetensors.torch import save_file

    target = Path(directory) / VALUE_SUBDIR
    if target.is_dir():  # a run started over (--overwrite) must not leave another layout's files behind
        shutil.rmtree(target)
    target.mkdir(parents=True, exist_ok=True)
    if kind == "shared":
        save_file({k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}, str(target / HEAD_FILE))
    else:
        module.save_pretrained(str(target))
    info = {"kind": kind, "base": base, "peft": bool(is_peft_model(module)),
            "note": "PPO value model. separate: a *ForTokenClassification checkpoint (LoRA: an adapter on `base`); "
                    "shared: value_head.safetensors, Linear(hidden, 1) on the policy's last hidden states."}
    (target / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return target


def _read_safetensors_dir(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        state.update(load_file(str(file)))
    return state


def restore_value_weights(module: nn.Module, directory: str | Path, kind: str) -> None:
    """Load the weights saved by `save_value_model` into `module` (unwrapped), in place."""
    from accelerate.utils import is_peft_model

    folder = Path(directory) / VALUE_SUBDIR
    if kind == "shared":
        from safetensors.torch import load_file

        module.load_state_dict(load_file(str(folder / HEAD_FILE)))
        return
    if is_peft_model(module):
        from peft import set_peft_model_state_dict

        state = _read_safetensors_dir(folder)
        result = set_peft_model_state_dict(module, state)
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise RuntimeError(f"{folder}: unexpected keys in the value adapter: {unexpected[:5]}")
        return
    state = _read_safetensors_dir(folder)
    missing, unexpected = module.load_state_dict(state, strict=False)
    # Tied or non-persistent entries may be absent from a saved checkpoint; real weights may not.
    real_missing = [k for k in missing if not k.endswith("rotary_emb.inv_freq")]
    if real_missing or unexpected:
        raise RuntimeError(f"{folder}: value model weights do not match (missing {real_missing[:5]}, unexpected "
                           f"{unexpected[:5]})")
