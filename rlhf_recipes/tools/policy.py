"""The one loader of a trained policy for the many-run tools: a full model folder, a LoRA adapter folder (merged
into its base), or a hub id, in eval mode without gradients."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_policy(path: str | Path, dtype: Any = None, device: Any = "default", revision: str | None = None):
    """`dtype`: a torch dtype, a name ('float32', 'auto'), or None (bf16 on a GPU, fp32 on a CPU). `device`:
    'default' (the GPU if there is one), a device, or None (where from_pretrained put it). `revision`: a hub model's
    (a run's `model_revision`, for the base its LoRA adapter trained on)."""
    import torch
    from transformers import AutoModelForCausalLM

    if dtype is None:
        dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    elif isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    folder = Path(str(path))
    if (folder / "adapter_config.json").exists() and not (folder / "config.json").exists():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(str(folder), dtype=dtype).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, revision=revision)
    if device is not None:
        model = model.to(("cuda" if torch.cuda.is_available() else "cpu") if device == "default" else device)
    return model.eval().requires_grad_(False)
