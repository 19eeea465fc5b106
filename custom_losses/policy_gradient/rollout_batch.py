"""Rollout batches as dicts of tensors: select rows, mask them out, concatenate with padding.

A batch is what GRPOTrainer's `_generate_and_score_completions` returns: per-row tensors
(prompts left-padded, completions right-padded), per-row lists, and batch-level values.
"""

from __future__ import annotations

from typing import Any

import torch

LEFT_PADDED = ("prompt_ids", "prompt_mask")


def select_rows(batch: dict[str, Any], rows: torch.Tensor | slice | list[int]) -> dict[str, Any]:
    size = batch["completion_ids"].size(0)
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == size:
            out[key] = value[rows]
        elif isinstance(value, list) and len(value) == size:
            idx = range(size)[rows] if isinstance(rows, slice) else rows
            out[key] = [value[i] for i in idx]
        else:
            out[key] = value
    return out


def masked_out(batch: dict[str, Any]) -> dict[str, Any]:
    """The same rows with no loss: completion mask and advantages zeroed (a dropped group used as filler)."""
    out = dict(batch)
    out["completion_mask"] = torch.zeros_like(batch["completion_mask"])
    out["advantages"] = torch.zeros_like(batch["advantages"])
    return out


def _pad_to(t: torch.Tensor, length: int, value: float, left: bool) -> torch.Tensor:
    missing = length - t.size(1)
    if missing <= 0:
        return t
    pad = t.new_full((t.size(0), missing, *t.shape[2:]), value)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def concat_rollouts(parts: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Concatenate rollout batches along the batch dim: prompts left-padded, completions right-padded."""
    out = {}
    for key, first in parts[0].items():
        values = [p[key] for p in parts]
        if first is None:
            out[key] = None
        elif isinstance(first, torch.Tensor) and first.dim() == 0:
            out[key] = first
        elif isinstance(first, torch.Tensor) and first.dim() >= 2:
            length = max(v.size(1) for v in values)
            pad = pad_token_id if key in ("prompt_ids", "completion_ids") else 0
            out[key] = torch.cat([_pad_to(v, length, pad, key in LEFT_PADDED) for v in values], dim=0)
        elif isinstance(first, torch.Tensor):
            out[key] = torch.cat(values, dim=0)
        elif isinstance(first, list):
            out[key] = [x for v in values for x in v]
        else:
            out[key] = first
    return out
