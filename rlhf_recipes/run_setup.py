"""A run's folder: where it writes, what it resumes from, and that a failed start leaves no trace.

The rules, so that a folder always says exactly what ran:
- a new run into a folder that holds a run is refused, unless --overwrite or --resume;
- --overwrite moves the old run aside and deletes it only once the new run has started, so a
  start that fails puts the old run back as it was;
- --resume continues from the newest COMPLETE checkpoint (checkpoints.py), saying which newer
  ones it skipped and why, and refuses settings that would change the run's meaning (the old
  and new value of each key); --allow_changes accepts them and config.yaml records both;
- a start that fails before training removes what it wrote (config.yaml, a folder it made).
Loads nothing heavy: called before torch or transformers are imported.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlhf_recipes.checkpoints import checkpoint_step, find_resumable_checkpoint, incomplete_reason, is_checkpoint_dir
from rlhf_recipes.config import Recipe, RecipeError
from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.report import read_metrics, write_config

logger = logging.getLogger(__name__)

# Keys that may differ between a run and its resumption: they change how a run is logged, saved or
# watched, not what it computes. Every other key changing is refused without --allow_changes.
HARMLESS_ON_RESUME = frozenset({
    "logging_steps", "logging_first_step", "logging_strategy", "save_steps", "save_strategy", "save_total_limit",
    "report_to", "wandb_project", "wandb_mode", "run_name", "disable_tqdm", "log_samples_every", "log_samples_count",
    "dataloader_num_workers", "per_device_eval_batch_size", "eval_steps", "stop_on_health_warning", "allow_changes",
    "resolved_from", "output_dir",  # a moved run folder resumes where it now is
    "eval_every", "eval_problems",  # held-out evaluation restores the random state it uses (evaluation/callback.py)
})


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def read_run_config(output_dir: Path) -> dict[str, Any] | None:
    path = output_dir / "config.yaml"
    if not path.exists():
        return None
    return yaml.safe_load(path.read_text()) or {}


def meaning_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, old, new) for every key whose value differs and that changes what the run computes."""
    keys = sorted((set(old) | set(new)) - HARMLESS_ON_RESUME - {"resumed_with_changes"})
    return [(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)]


@dataclass
class RunFolder:
    """The output folder of one run, prepared but not yet written (see `claim`)."""

    output_dir: Path
    checkpoint: Path | None = None
    resolved: dict[str, Any] = field(default_factory=dict)
    _created_dir: bool = False
    _aside: Path | None = None  # the previous run, moved here by --overwrite until the new one starts
    _wrote_config: bool = False
    _previous_config: str | None = None
    _previous_config_times: tuple[int, int] | None = None  # (atime, mtime) in ns, restored with its text

    def claim(self, recipe: Recipe) -> None:
        """Make the folder this run's: move an overwritten run aside, write config.yaml (rank 0 only)."""
        if not is_main_process():
            return
        self._created_dir = not self.output_dir.exists()
        if recipe.args.overwrite and (self.output_dir / "config.yaml").exists() and not recipe.args.resume:
            self._aside = self.output_dir.parent / f".{self.output_dir.name}.overwritten"
            if self._aside.exists():
                shutil.rmtree(self._aside)
            self._aside.mkdir()
            for entry in self.output_dir.iterdir():
                entry.rename(self._aside / entry.name)
        config = self.output_dir / "config.yaml"
        self._previous_config = config.read_text() if config.exists() else None
        if config.exists():
            self._previous_config_times = (config.stat().st_atime_ns, config.stat().st_mtime_ns)
        self._wrote_config = True  # set first: a write cut short by a full disk is undone by `abandon` too
        write_config(recipe, self.output_dir, self.resolved)

    def started(self) -> None:
        """Training has begun: the overwritten run is deleted for good."""
        if self._aside is not None and self._aside.exists():
            n = sum(1 for p in self._aside.iterdir() if is_checkpoint_dir(p))
            shutil.rmtree(self._aside)
            logger.info("--overwrite: removed the previous run in %s (%d checkpoint(s))", self.output_dir, n)
        self._aside = None

    def abandon(self) -> None:
        """The start failed: leave the folder as it was found."""
        if not is_main_process() or not self._wrote_config:
            return
        config = self.output_dir / "config.yaml"
        if self._previous_config is not None:
            atomic_write_text(config, self._previous_config)
            # Its time too: config.yaml newer than final_results.json means "a start in progress" to the tools
            # (rlhf_recipes/tools/run_folder.py), and this start never happened.
            os.utime(config, ns=self._previous_config_times)
        elif config.exists():
            config.unlink()
        if self._aside is not None and self._aside.exists():
            for entry in list(self.output_dir.iterdir()):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            for entry in self._aside.iterdir():
                entry.rename(self.output_dir / entry.name)
            self._aside.rmdir()
        if self._created_dir and self.output_dir.exists() and not any(self.output_dir.iterdir()):
            self.output_dir.rmdir()


def prepare_output_dir(recipe: Recipe) -> RunFolder:
    """Decide where the run writes and what it resumes from; refuse what would lose or mix runs.

    Writes nothing: `RunFolder.claim` does, once the data and model have been checked."""
    output_dir = Path(recipe.value("output_dir"))
    resume = recipe.args.resume
    folder = RunFolder(output_dir, resolved=dict(recipe.resolved))
    if resume:
        if recipe.args.overwrite:
            raise RecipeError("--resume and --overwrite contradict each other: continue the run, or start it over")
        if resume == "latest":
            point = find_resumable_checkpoint(output_dir)
            for skipped, reason in point.skipped:
                logger.warning("--resume: skipping %s: %s", skipped, reason)
            checkpoint = point.checkpoint
            if checkpoint is None:
                raise RecipeError(
                    f"--resume: no complete checkpoint in {output_dir}"
                    + (f" ({len(point.skipped)} incomplete)" if point.skipped else "")
                    + ". Checkpoints are written on Ctrl-C/SIGTERM and every `save_steps` when save_strategy is "
                    "'steps'; start over with --overwrite."
                )
        else:
            checkpoint = Path(resume)
            if not checkpoint.is_dir() or not is_checkpoint_dir(checkpoint):
                raise RecipeError(f"--resume {resume}: not a checkpoint-<step> folder. Use --resume alone for the "
                                  f"newest complete checkpoint in {output_dir}")
            reason = incomplete_reason(checkpoint)
            if reason:
                raise RecipeError(f"--resume {resume}: incomplete checkpoint ({reason}). Use --resume alone to "
                                  "continue from the newest complete one")
        checkpoint_step(checkpoint)
        folder.checkpoint = checkpoint
        old = read_run_config(output_dir)
        if old is not None:
            changes = meaning_changes(old, recipe.resolved)
            if changes and not recipe.args.allow_changes:
                listed = "; ".join(f"`{k}` {o!r} -> {n!r}" for k, o, n in changes)
                raise RecipeError(
                    f"--resume would change what {output_dir} computes: {listed}. Resume with the run's own "
                    f"settings (python recipes/run.py {output_dir / 'config.yaml'} --resume), or add --allow_changes "
                    "to continue with the new values (config.yaml then records both)"
                )
            if changes:
                step = checkpoint_step(checkpoint)
                logger.warning("--resume --allow_changes: %s. The optimizer and scheduler state restored from %s "
                               "keep their saved values.", ", ".join(f"{k} {o!r} -> {n!r}" for k, o, n in changes),
                               checkpoint)
                folder.resolved = {**old, **recipe.resolved, "resumed_with_changes": [
                    *old.get("resumed_with_changes", []),
                    *({"step": step, "key": k, "old": o, "new": n} for k, o, n in changes)]}
            else:
                folder.resolved = {**recipe.resolved, **({"resumed_with_changes": old["resumed_with_changes"]}
                                                         if "resumed_with_changes" in old else {})}
    # Only the main process judges: the others would see the config.yaml it has just written.
    elif is_main_process() and (output_dir / "config.yaml").exists() and not recipe.args.overwrite:
        raise RecipeError(
            f"{output_dir} already holds a run. Continue it with --resume, start over with --overwrite, "
            "or pick another --output_dir."
        )
    return folder


def configure_reporting(recipe: Recipe) -> None:
    """wandb reads its settings from the environment; set them from the recipe before the Trainer starts."""
    if recipe.args.wandb_project:
        os.environ["WANDB_PROJECT"] = recipe.args.wandb_project
    if recipe.args.wandb_mode:
        os.environ["WANDB_MODE"] = recipe.args.wandb_mode
    # wandb's files belong with the run they log (<output_dir>/wandb), even when one process runs several recipes.
    os.environ["WANDB_DIR"] = str(recipe.value("output_dir"))


def first_logged_loss(path: Path) -> float | None:
    """The loss of a run's first logged step (metrics.jsonl), or None."""
    return next((float(r["loss"]) for r in read_metrics(path) if isinstance(r.get("loss"), (int, float))), None)


def run_callbacks(recipe: Recipe, folder: RunFolder):
    """The callbacks every run gets (imports transformers)."""
    from rlhf_recipes.callbacks import (
        CheckpointManifestCallback, HealthCallback, InterruptCallback, MetricsFileCallback, StartedCallback,
    )

    interrupt = InterruptCallback()
    resume_step = checkpoint_step(folder.checkpoint) if folder.checkpoint else None
    health = HealthCallback(stop=recipe.args.stop_on_health_warning,
                            start_loss=first_logged_loss(folder.output_dir / "metrics.jsonl") if resume_step else None)
    # Health first: the health/* flags it adds to a step's logs then land in metrics.jsonl.
    callbacks = [StartedCallback(folder.started), health, MetricsFileCallback(folder.output_dir / "metrics.jsonl",
                 resume_step), interrupt, CheckpointManifestCallback()]
    return callbacks, interrupt, health
