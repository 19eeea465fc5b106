"""Where a saved reward model lives: a run's output_dir, or its merged/ copy for a LoRA run.

Path logic only (no torch), so recipes can be checked against it before anything loads."""

from __future__ import annotations

from pathlib import Path

MERGED_SUBDIR = "merged"  # where a LoRA reward model's run also saves the merged model


def resolve_reward_model_dir(path: str) -> str:
    """The directory holding the full model: `path`, or `path/merged` for a LoRA run."""
    p = Path(path)
    if (p / "config.json").is_file():
        return str(p)
    if (p / MERGED_SUBDIR / "config.json").is_file():
        return str(p / MERGED_SUBDIR)
    if (p / "adapter_config.json").is_file():
        raise ValueError(f"{path} holds a LoRA adapter but no merged model: merge it into its base model "
                         f"(peft's merge_and_unload) and save it to {p / MERGED_SUBDIR}")
    raise ValueError(f"{path}: no saved reward model there (expected config.json, e.g. the output_dir of a "
                     "preference_rm / hh_rm / orm / prm run)")


def full_model(name: str) -> str:
    """A model to load: a local folder resolved as above (a LoRA run's merged/ copy), anything else (a hub id) as
    it is. A ValueError where the folder holds no full model."""
    folder = Path(name).expanduser()
    return resolve_reward_model_dir(str(folder)) if folder.is_dir() else name
