"""Steps of recipes/run.py that are not the pipeline itself: output dir, resume, reporting."""

from __future__ import annotations

import os
from pathlib import Path

from rlhf_recipes.callbacks import (
    CheckpointMarkerCallback, FiniteLossCallback, InterruptCallback, MetricsFileCallback,
    checkpoint_step, find_resumable_checkpoint,
)
from rlhf_recipes.config import Recipe, RecipeError
from rlhf_recipes.report import write_config


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def prepare_output_dir(recipe: Recipe) -> tuple[Path, Path | None]:
    """Decide where the run writes and what it resumes from; write config.yaml. Loads nothing heavy."""
    output_dir = Path(recipe.training.output_dir)
    resume = recipe.args.resume
    checkpoint = None
    if resume:
        checkpoint = find_resumable_checkpoint(output_dir) if resume == "latest" else Path(resume)
        if checkpoint is None or not checkpoint.is_dir():
            raise RecipeError(
                f"--resume: no complete checkpoint in {output_dir if resume == 'latest' else resume}. "
                "Checkpoints are written on Ctrl-C/SIGTERM and every `save_steps` when save_strategy is 'steps'."
            )
        checkpoint_step(checkpoint)  # validates the name
    # Only the main process judges: the others would see the config.yaml it has just written.
    elif is_main_process() and (output_dir / "config.yaml").exists() and not recipe.args.overwrite:
        raise RecipeError(
            f"{output_dir} already holds a run. Continue it with --resume, start over with --overwrite, "
            "or pick another --output_dir."
        )
    if is_main_process():
        write_config(recipe, output_dir)
    return output_dir, checkpoint


def configure_reporting(recipe: Recipe) -> None:
    """wandb reads its settings from the environment; set them from the recipe before the Trainer starts."""
    if recipe.args.wandb_project:
        os.environ["WANDB_PROJECT"] = recipe.args.wandb_project
    if recipe.args.wandb_mode:
        os.environ["WANDB_MODE"] = recipe.args.wandb_mode
    # wandb's files belong with the run they log (<output_dir>/wandb), even when one process runs several recipes.
    os.environ["WANDB_DIR"] = str(recipe.training.output_dir)


def run_callbacks(output_dir: Path, checkpoint: Path | None):
    interrupt = InterruptCallback()
    resume_step = checkpoint_step(checkpoint) if checkpoint else None
    callbacks = [MetricsFileCallback(output_dir / "metrics.jsonl", resume_step), interrupt,
                 CheckpointMarkerCallback(), FiniteLossCallback()]
    return callbacks, interrupt
