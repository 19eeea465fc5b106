"""A run's folder: where it writes, what it resumes from, and that a failed start leaves no trace.

The rules, so that a folder always says exactly what ran:
- a new run into a folder that holds a run is refused, unless --overwrite or --resume;
- --overwrite moves the old run aside and deletes it only once the new run has started, so a
  start that fails puts the old run back as it was;
- --resume continues from the newest COMPLETE checkpoint (checkpoints.py), saying which newer
  ones it skipped and why, and refuses settings that would change the run's meaning (the old
  and new value of each key); --allow_changes accepts them, config.yaml records both, and a
  changed learning rate takes effect (callbacks.LearningRateChange rescales the restored scheduler);
- --resume auto (a requeued cluster job's one command) resumes when a complete checkpoint is there,
  starts when none is (a run that never saved one is started over), and refuses a finished run;
- a start that fails before training removes what it wrote (config.yaml, a folder it made);
- one process at a time: the main process holds the folder's lock (run_lock.py) from before it reads the folder
  until the run ends, so a second start into a running folder is refused naming who holds it.
Loads nothing heavy: called before torch or transformers are imported.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhf_recipes.checkpoints import (
    checkpoint_step, find_resumable_checkpoint, incomplete_reason, is_checkpoint_dir, read_manifest, settings_hash,
)
from rlhf_recipes.config import Recipe, RecipeError
from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.paths import unwritable_reason
from rlhf_recipes.run_folder import (
    CONFIG_FILE, FINAL_RESULTS_FILE, METRICS_FILE, SavedRun, read_config, read_metrics, run_finished, write_config,
)
from rlhf_recipes.run_lock import HOLDER_FILE, LOCK_FILE, RunLock

CONSOLE_LOG = "console.log"  # the main process's console, kept with the run (console_log.py)

logger = logging.getLogger(__name__)
LOCK_FILES = (LOCK_FILE, HOLDER_FILE)  # the folder's lock stays where it is when --overwrite moves a run aside

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


def meaning_hash(settings: dict[str, Any]) -> str:
    """The hash of the settings that change what a run computes (every key but the harmless ones)."""
    return settings_hash({k: v for k, v in settings.items() if k not in HARMLESS_ON_RESUME | {"resumed_with_changes"}})


def manifest_settings(folder: "RunFolder") -> dict[str, Any]:
    """What a checkpoint's manifest records of the settings the run used to reach it (CheckpointManifestCallback)."""
    settings = {k: v for k, v in folder.resolved.items() if k != "resumed_with_changes"}
    return {"settings_sha256": meaning_hash(settings), "settings": settings,
            "settings_changes": folder.resolved.get("resumed_with_changes", [])}


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
    lock: RunLock | None = None  # held by the main process from `prepare_output_dir` until `release`/`abandon`
    _created_dir: bool = False
    _aside: Path | None = None  # the previous run, moved here by --overwrite until the new one starts
    _wrote_config: bool = False
    _previous_config: str | None = None
    _previous_config_times: tuple[int, int] | None = None  # (atime, mtime) in ns, restored with its text
    auto: bool = False  # --resume auto: every rank takes the main process's choice, a checkpoint or none
    replace_previous: bool = False  # --resume auto found no complete checkpoint: the old start is replaced
    learning_rate_change: tuple[float, float] | None = None  # (old, new): --resume --allow_changes --learning_rate
    _console_log_size: int | None = None  # console.log's size before this start (None: there was none)

    def claim(self, recipe: Recipe) -> None:
        """Make the folder this run's: move an overwritten run aside, write config.yaml (rank 0 only)."""
        if not is_main_process():
            return
        if self.lock is None:
            self._created_dir = not self.output_dir.exists()
        replace = (recipe.args.overwrite and not recipe.args.resume) or self.replace_previous
        if replace and (self.output_dir / CONFIG_FILE).exists():
            self._aside = self.output_dir.parent / f".{self.output_dir.name}.overwritten"
            if self._aside.exists():
                shutil.rmtree(self._aside)
            self._aside.mkdir()
            for entry in self.output_dir.iterdir():
                if entry.name not in LOCK_FILES:  # the lock stays: this start holds it
                    entry.rename(self._aside / entry.name)
        config = self.output_dir / CONFIG_FILE
        if config.exists():
            self._previous_config = config.read_text()
            self._previous_config_times = (config.stat().st_atime_ns, config.stat().st_mtime_ns)
        self._wrote_config = True  # set first: a write cut short by a full disk is undone by `abandon` too
        write_config(recipe, self.output_dir, self.resolved)
        self._console_log_size = self.console_log.stat().st_size if self.console_log.exists() else None

    @property
    def console_log(self) -> Path:
        return self.output_dir / CONSOLE_LOG

    def started(self) -> None:
        """Training has begun: the overwritten run is deleted for good."""
        if self._aside is not None and self._aside.exists():
            n = sum(1 for p in self._aside.iterdir() if is_checkpoint_dir(p))
            shutil.rmtree(self._aside)
            logger.info("--overwrite: removed the previous run in %s (%d checkpoint(s))", self.output_dir, n)
        self._aside = None

    def agree_on_checkpoint(self) -> None:
        """Under several processes, every rank resumes from the checkpoint the main process verified (its choice is
        broadcast once the process group is up; the other ranks only checked sizes)."""
        import torch.distributed as dist

        if (self.checkpoint is None and not self.auto) or not (dist.is_available() and dist.is_initialized()) or \
                dist.get_world_size() < 2:
            return
        choice = [str(self.checkpoint) if self.checkpoint else None]
        dist.broadcast_object_list(choice, src=0)
        self.checkpoint = Path(choice[0]) if choice[0] else None

    def release(self) -> None:
        """The run has ended (however): let go of the folder's lock."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def abandon(self) -> None:
        """The start failed: leave the folder as it was found, then let go of its lock."""
        try:
            self._put_back()
        finally:
            if self.lock is not None:
                self.lock.drop(remove=True)
                self.lock = None
            if self._created_dir and self.output_dir.exists() and not any(self.output_dir.iterdir()):
                self.output_dir.rmdir()

    def _put_back(self) -> None:
        if not is_main_process() or not self._wrote_config:
            return
        config = self.output_dir / CONFIG_FILE
        if self._previous_config is not None:
            atomic_write_text(config, self._previous_config)
            # Its time too: config.yaml newer than final_results.json means "a start in progress" to the tools
            # (rlhf_recipes/run_folder.py), and this start never happened.
            os.utime(config, ns=self._previous_config_times)
        elif config.exists():
            config.unlink()
        # What this start wrote to the console log goes too
        if self._console_log_size is None:
            self.console_log.unlink(missing_ok=True)
        elif self.console_log.exists():
            os.truncate(self.console_log, self._console_log_size)
        if self._aside is not None and self._aside.exists():
            for entry in list(self.output_dir.iterdir()):
                if entry.name not in LOCK_FILES:
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            for entry in self._aside.iterdir():
                entry.rename(self.output_dir / entry.name)
            self._aside.rmdir()


def prepare_output_dir(recipe: Recipe, command: str = "") -> RunFolder:
    """Take the folder's lock, decide where the run writes and what it resumes from; refuse what would lose or
    mix runs.

    Writes only the lock (undone by `RunFolder.abandon`): `RunFolder.claim` writes the run's files, once the data
    and model have been checked. `command` is what the lock's holder file says is running."""
    output_dir = Path(recipe.setting("output_dir"))
    folder = RunFolder(output_dir, resolved=dict(recipe.resolved))
    # An output_dir that cannot be written gets no lock: check_inputs names the problem in one line.
    if is_main_process() and unwritable_reason(output_dir) is None:
        folder.lock = RunLock(output_dir, command).acquire()
        folder._created_dir = folder.lock.created_folder
    try:
        _decide(recipe, folder)
    except BaseException:
        folder.abandon()
        raise
    return folder


def _decide(recipe: Recipe, folder: RunFolder) -> None:
    output_dir, resume = folder.output_dir, recipe.args.resume
    if not resume:
        # Only the main process judges: the others would see the config.yaml it has just written.
        if is_main_process() and (output_dir / CONFIG_FILE).exists() and not recipe.args.overwrite:
            raise RecipeError(holds_a_run(output_dir))
        return
    flag = "--resume auto" if resume == "auto" else "--resume"
    if recipe.args.overwrite:
        raise RecipeError(f"{flag} and --overwrite contradict each other: continue the run, or start it over")
    # The main process reads every file of a checkpoint against its checksum; the others check sizes only and
    # take the main process's choice once they can talk to it (RunFolder.agree_on_checkpoint).
    checksums = is_main_process()
    if resume == "auto":
        folder.auto = True
        # Rerunning the same command must not train a finished run a second time.
        try:
            finished = run_finished(output_dir)
        except (OSError, ValueError):  # unreadable: not a finished run
            finished = False
        if finished:
            raise RecipeError(f"--resume auto: {output_dir} holds a finished run ({output_dir / FINAL_RESULTS_FILE}); "
                              "nothing to resume. Use its model as it is, start over with --overwrite, or pick "
                              "another --output_dir")
    if resume in ("auto", "latest"):
        point = find_resumable_checkpoint(output_dir, checksums=checksums)
        for skipped, reason in point.skipped:
            logger.warning("%s: skipping %s: %s", flag, skipped, reason)
        folder.checkpoint = point.checkpoint
    else:
        checkpoint = Path(resume)
        if not checkpoint.is_dir() or not is_checkpoint_dir(checkpoint):
            raise RecipeError(f"--resume {resume}: not a checkpoint-<step> folder. Use --resume alone for the "
                              f"newest complete checkpoint in {output_dir}")
        reason = incomplete_reason(checkpoint, checksums=checksums)
        if reason:
            raise RecipeError(f"--resume {resume}: incomplete or damaged checkpoint ({reason}). Use --resume alone "
                              "to continue from the newest one that verifies")
        folder.checkpoint = checkpoint
    if folder.checkpoint is None and resume == "auto":
        # None is there, or none verifies: nothing of the old start can be continued, so the run starts over.
        if (output_dir / CONFIG_FILE).exists() and is_main_process():
            logger.warning("--resume auto: no complete checkpoint in %s: starting the run over", output_dir)
            folder.replace_previous = True
        return
    if folder.checkpoint is None and point.skipped:
        listed = "; ".join(f"{p.name} ({why})" for p, why in point.skipped)
        raise RecipeError(f"--resume: no complete checkpoint in {output_dir} verifies: {listed}. Start over with "
                          "--overwrite, or copy a good checkpoint back in from a backup")
    if folder.checkpoint is None:
        raise RecipeError(f"--resume: no complete checkpoint in {output_dir}. Checkpoints are written on "
                          "Ctrl-C/SIGTERM and every `save_steps` when save_strategy is 'steps'; start over with "
                          "--overwrite.")
    _compare_settings(recipe, folder)


def holds_a_run(output_dir: Path) -> str:
    """The refusal of a plain start into a folder that holds a run. A finished run has no checkpoint to continue
    (--resume would only say so), so it is offered a new folder instead."""
    try:
        finished = SavedRun(Path(output_dir)).finished
    except (OSError, ValueError):  # unreadable: not a finished run
        finished = False
    if finished:
        names = (f"{output_dir}-rerun{n if n > 1 else ''}" for n in range(1, 1000))
        free = next(name for name in names if not Path(name).exists())
        return (f"{output_dir} already holds a finished run. Run it again into a new folder with --output_dir "
                f"{free}, or replace it with --overwrite.")
    return (f"{output_dir} already holds a run. Continue it with --resume, start over with --overwrite, "
            "or pick another --output_dir.")


def _compare_settings(recipe: Recipe, folder: RunFolder) -> None:
    """A resume continues with the settings the run used up to its checkpoint: those its manifest records (a
    checkpoint from before manifests had settings: config.yaml's). Any difference that changes what the run
    computes (a command-line value, or config.yaml edited by hand) is refused, naming each key, unless
    --allow_changes: then config.yaml and the next checkpoints' manifests record it with the step it took effect."""
    output_dir, checkpoint = folder.output_dir, folder.checkpoint
    step = checkpoint_step(checkpoint)
    config = read_config(output_dir)
    manifest = read_manifest(checkpoint) or {}
    used = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else config
    if used is None:
        return
    recorded = manifest.get("settings_changes") if "settings" in manifest else (config or {}).get(
        "resumed_with_changes")
    recorded = list(recorded or [])
    if manifest.get("settings_sha256") == meaning_hash(recipe.resolved):
        changes = []
    else:
        changes = meaning_changes(used, recipe.resolved)
    if changes and not recipe.args.allow_changes:
        listed = "; ".join(f"`{k}` {o!r} -> {n!r}" for k, o, n in changes)
        edited = config is not None and "settings" in manifest and meaning_changes(used, config)
        where = (f" ({output_dir / 'config.yaml'} was edited after {checkpoint.name} was saved: the values on the "
                 f"left are the ones the run used, from its manifest)") if edited else ""
        raise RecipeError(
            f"--resume would change what {output_dir} computes: {listed}{where}. Resume with the settings the run "
            f"used (undo the edit, drop the flag), or add --allow_changes to continue with the new values (config.yaml "
            f"and the next checkpoints' manifests then record each change and step {step}, where it took effect)"
        )
    if changes:
        logger.warning("--resume --allow_changes: %s, from step %d (a new learning_rate rescales the restored "
                       "scheduler: it takes effect from the next step)", ", ".join(f"{k} {o!r} -> {n!r}" for k, o, n
                                                                                 in changes), step)
        lr = next(((o, n) for k, o, n in changes if k == "learning_rate"), None)
        if lr is not None and isinstance(lr[0], (int, float)) and isinstance(lr[1], (int, float)):
            folder.learning_rate_change = (float(lr[0]), float(lr[1]))
        recorded += [{"step": step, "key": k, "old": o, "new": n} for k, o, n in changes]
    base = {**used, **recipe.resolved} if changes else dict(recipe.resolved)
    folder.resolved = {**base, **({"resumed_with_changes": recorded} if recorded else {})}


_WANDB_RESUME_SET: dict[str, str] = {}  # what configure_reporting put in the environment for a resumed run


def configure_reporting(recipe: Recipe, resuming: bool = False) -> None:
    """wandb reads its settings from the environment; set them from the recipe before the Trainer starts. A resumed
    run logs on into its wandb run (the id of <output_dir>/wandb/latest-run), not into a new one beside it."""
    if recipe.args.wandb_project:
        os.environ["WANDB_PROJECT"] = recipe.args.wandb_project
    if recipe.args.wandb_mode:
        os.environ["WANDB_MODE"] = recipe.args.wandb_mode
    # wandb's files belong with the run they log (<output_dir>/wandb), even when one process runs several recipes.
    os.environ["WANDB_DIR"] = str(recipe.setting("output_dir"))
    from rlhf_recipes.preflight import reports_to_wandb

    if resuming and "WANDB_RUN_ID" not in os.environ and reports_to_wandb(recipe.setting("report_to")):
        latest = Path(recipe.setting("output_dir")) / "wandb" / "latest-run"  # wandb's link: [offline-]run-<time>-<id>
        if latest.is_symlink():
            _WANDB_RESUME_SET.update(WANDB_RUN_ID=os.readlink(latest).rsplit("-", 1)[-1], WANDB_RESUME="allow")
            os.environ.update(_WANDB_RESUME_SET)


def end_wandb_run() -> None:
    """transformers' WandbCallback leaves its wandb run open when training ends (the process's exit closes it), and
    wandb reads its environment once per process (wandb.setup): a process that runs another recipe next would log it
    into this one's run, with this one's project, folder and id. Both end here, and the resume id it was given."""
    for key, value in _WANDB_RESUME_SET.items():  # the next recipe in this process is not this resume
        if os.environ.get(key) == value:
            del os.environ[key]
    _WANDB_RESUME_SET.clear()
    wandb = sys.modules.get("wandb")  # None where the run left it out (quiet.leave_out_unused)
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish()
        wandb.teardown()


def run_callbacks(recipe: Recipe, folder: RunFolder):
    """The callbacks every run gets (imports transformers)."""
    from rlhf_recipes.callbacks import (
        CheckpointManifestCallback, HealthCallback, InterruptCallback, LearningRateChange, MetricsFileCallback,
        RunCardCallback, StartedCallback,
    )

    interrupt = InterruptCallback()
    resume_step = checkpoint_step(folder.checkpoint) if folder.checkpoint else None
    start_loss = None
    if resume_step:  # a resumed run keeps its health baseline: the loss of its first logged step
        rows = read_metrics(folder.output_dir / METRICS_FILE)
        start_loss = next((float(r["loss"]) for r in rows if isinstance(r.get("loss"), (int, float))), None)
    health = HealthCallback(stop=recipe.args.stop_on_health_warning, start_loss=start_loss)
    # Health first: the health/* flags it adds to a step's logs then land in metrics.jsonl.
    callbacks = [StartedCallback(folder.started), health, MetricsFileCallback(folder.output_dir / METRICS_FILE,
                 resume_step), interrupt, CheckpointManifestCallback(manifest_settings(folder)),
                 RunCardCallback(lambda state: write_run_card(recipe, folder.output_dir, state))]
    if folder.learning_rate_change and folder.checkpoint:
        callbacks.append(LearningRateChange(*folder.learning_rate_change))
    return callbacks, interrupt, health


def write_run_card(recipe: Recipe, output_dir: Path, state: str) -> None:
    """<output_dir>/README.md: the hub's metadata and a short card, in place of TRL's draft (model_card.py)."""
    from rlhf_recipes.model_card import run_card

    settings = read_config(output_dir) or dict(recipe.resolved)
    atomic_write_text(output_dir / "README.md", run_card(settings, recipe.algorithm.name, output_dir, state))
