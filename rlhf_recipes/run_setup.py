"""A run's folder: where it writes, what it resumes from, how it ended, and that a failed start leaves no trace.

The rules, so that a folder always says exactly what ran:
- a new run into a folder that holds a run is refused, unless --overwrite (which removes the old run) or --resume;
- final_results.json says `running` from the start (its `starts`: when each start began, what it resumed from,
  how long it took) and finished / interrupted / stopped / failed at the end; a run killed outright still says
  `running`, and its free lock (run_lock.py) tells a tool it is not;
- --resume continues from the newest COMPLETE checkpoint (checkpoints.py), saying which newer
  ones it skipped and why, and refuses settings that would change the run's meaning (the old
  and new value of each key); --allow_changes accepts them, config.yaml records both, and a
  changed learning rate takes effect (callbacks.LearningRateChange rescales the restored scheduler);
- --resume auto (a requeued cluster job's one command) resumes when a complete checkpoint is there,
  starts when none is (a run that never saved one is started over), and refuses a finished run;
- a start that fails before training puts back what it wrote (config.yaml, final_results.json, console.log's
  new lines, a folder it made);
- one process at a time: the main process holds the folder's lock (run_lock.py) from before it reads the folder
  until the run ends, so a second start into a running folder is refused naming who holds it.
Loads nothing heavy: called before torch or transformers are imported.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlhf_recipes.checkpoints import (
    checkpoint_step, find_resumable_checkpoint, incomplete_reason, is_checkpoint_dir, read_record,
)
from rlhf_recipes.config import Recipe, RecipeError
from rlhf_recipes.console_log import ConsoleLog
from rlhf_recipes.disk import atomic_write_text, disk_full
from rlhf_recipes.paths import unwritable_reason
from rlhf_recipes.run_folder import (
    CONFIG_FILE, EXIT_INTERRUPTED, FINAL_RESULTS_FILE, METRICS_FILE, SavedRun, read_config, read_metrics, run_finished,
    write_config, write_final_results, write_running,
)
from rlhf_recipes.run_lock import HOLDER_FILE, LOCK_FILE, RunLock

CONSOLE_LOG = "console.log"  # the main process's log lines, kept with the run (console_log.py)

logger = logging.getLogger(__name__)
LOCK_FILES = (LOCK_FILE, HOLDER_FILE)  # the folder's lock stays where it is when --overwrite removes a run

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


def record_settings(folder: "RunFolder") -> dict[str, Any]:
    """What each checkpoint records of the settings the run used to reach it (callbacks.RunRecord)."""
    return {"settings": {k: v for k, v in folder.resolved.items() if k != "resumed_with_changes"},
            "settings_changes": folder.resolved.get("resumed_with_changes", [])}


def meaning_changes(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, old, new) for every key whose value differs and that changes what the run computes."""
    keys = sorted((set(old) | set(new)) - HARMLESS_ON_RESUME - {"resumed_with_changes"})
    return [(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)]


def report_error(error: Exception | str) -> None:
    """One line on stderr, from the main process only: under a launcher every rank finds the same mistake."""
    if is_main_process():
        print(f"error: {error}", file=sys.stderr)
        logger.debug("the error's traceback (LOGLEVEL=DEBUG)", exc_info=error if isinstance(error, Exception) else None)


@dataclass
class Ending:
    """How the run ended, for RunFolder.end: `trainer` is set once training begins (before it, a failure undoes
    the start); `status` and `extra` go into final_results.json."""

    trainer: Any = None
    status: str = "failed"
    extra: dict[str, Any] = field(default_factory=dict)
    written: bool = False  # final_results.json already says how it ended
    together: bool = False  # a failure every rank reached: they leave together once the results are written

    def failed(self, error: BaseException, folder: "RunFolder | None") -> int:
        """A failure the runner understands: one line and its exit code (a user's mistake 2, an interrupted start
        130, a run that failed 1); anything else raises on, its traceback whole, after final_results.json says
        `failed` with the error."""
        where = disk_full(error, folder.output_dir if folder else None)
        if self.trainer is None:  # before training: nothing of this start is kept (RunFolder.end)
            if isinstance(error, RecipeError):
                report_error(error)
                return 2
            if isinstance(error, KeyboardInterrupt):
                report_error("interrupted before training began; nothing of this start was kept (run the same "
                             "command again to start it)")
                return EXIT_INTERRUPTED
            if where is None:
                raise error
            report_error(f"no space left on device while writing {where}; nothing was started")
            return 1
        if not isinstance(error, (FloatingPointError, RecipeError)) and where is None:
            self.extra = {"error": f"{type(error).__name__}: {error}"}
            raise error
        self.status, reason, hint = "failed", str(error), ""
        if isinstance(error, FloatingPointError):  # a NaN / inf loss, gradient, weight or reward
            hint = "; add --allow_changes --learning_rate LOWER to continue at a lower rate"
        point = find_resumable_checkpoint(folder.output_dir)
        if where is not None:
            reason = f"no space left on device while writing {where}"
            if is_main_process():  # a torn save would be skipped by --resume anyway: its space is the results'
                for torn, why in point.skipped:
                    if why.startswith("no trainer_state.json"):
                        shutil.rmtree(torn, ignore_errors=True)
        last_good = point.checkpoint
        self.extra = {"error": reason, "last_good_checkpoint": last_good.name if last_good else None}
        for callback in self.trainer.callback_handler.callbacks:  # end the progress bar's line: the error gets its own
            if getattr(callback, "training_bar", None) is not None:
                callback.training_bar.close()
                callback.training_bar = None
        keep = (f"the last good checkpoint, {last_good.name}, is kept (--resume continues from it{hint})"
                if last_good else "no checkpoint was saved before it")
        report_error(f"{reason}; {keep}")
        self.together = True
        return 1

    def leave_together(self) -> None:
        """Ranks leave together and close the process group themselves: a rank that exits while another still
        writes results can abort in the communication backend's teardown."""
        self.trainer.accelerator.wait_for_everyone()
        self.trainer.accelerator.end_training()


@dataclass
class RunFolder:
    """The output folder of one run, prepared but not yet written (see `claim`)."""

    output_dir: Path
    checkpoint: Path | None = None
    resolved: dict[str, Any] = field(default_factory=dict)
    lock: RunLock | None = None  # held by the main process from `prepare_output_dir` until `end`
    recipe: Recipe | None = None  # set by `claim`
    auto: bool = False  # --resume auto: every rank takes the main process's choice, a checkpoint or none
    replace_previous: bool = False  # --resume auto found no complete checkpoint: the old start is replaced
    learning_rate_change: tuple[float, float] | None = None  # (old, new): --resume --allow_changes --learning_rate
    starts: list[dict[str, Any]] = field(default_factory=list)  # final_results.json's `starts`, this one last
    _found: dict[str, bytes | None] = field(default_factory=dict)  # the files `claim` rewrites, as it found them
    _console: ConsoleLog | None = None
    _clock: float = field(default_factory=time.monotonic)  # this start's beginning
    _training_began: float | None = None

    def claim(self, recipe: Recipe) -> None:
        """Make the folder this run's (rank 0 only): remove an overwritten run, write config.yaml, final_results.json
        `running`, and start console.log."""
        self.recipe = recipe
        if not is_main_process():
            return
        replace = (recipe.args.overwrite and not recipe.args.resume) or self.replace_previous
        if replace and (self.output_dir / CONFIG_FILE).exists():
            removed = sum(1 for p in self.output_dir.iterdir() if is_checkpoint_dir(p))
            for entry in self.output_dir.iterdir():
                if entry.name not in LOCK_FILES:  # the lock stays: this start holds it
                    shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            logger.info("--overwrite: removed the previous run in %s (%d checkpoint(s))", self.output_dir, removed)
        for name in (CONFIG_FILE, FINAL_RESULTS_FILE, CONSOLE_LOG):
            path = self.output_dir / name
            self._found[name] = path.read_bytes() if path.is_file() else None
        previous = (SavedRun(self.output_dir).raw_results or {}) if self.checkpoint else {}
        self.starts = [s for s in previous.get("starts", []) if isinstance(s, dict)] + [{
            "at": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "resumed_from": self.checkpoint.name if self.checkpoint
            else None, "seconds": None, "train_seconds": None}]
        write_config(recipe, self.output_dir, self.resolved)
        write_running(recipe, self.output_dir, self.starts)
        what = f"resumed from {self.checkpoint.name}" if self.checkpoint else "started"
        self._console = ConsoleLog(self.output_dir / CONSOLE_LOG, f"{what}: {self.lock.command if self.lock else ''}")

    def started(self) -> None:
        """Training has begun (callbacks.StartedCallback): its seconds count from here."""
        self._training_began = time.monotonic()

    def timed_starts(self) -> list[dict[str, Any]]:
        """`starts`, this one's seconds so far filled in (the whole start's, and its training's)."""
        now = time.monotonic()
        self.starts[-1].update(seconds=round(now - self._clock, 2), train_seconds=round(
            now - self._training_began, 2) if self._training_began is not None else 0.0)
        return self.starts

    def save_progress(self) -> None:
        """At each checkpoint: final_results.json, still `running`, gets the seconds so far (a killed start keeps
        what it had reached)."""
        if is_main_process() and self.recipe is not None:
            write_running(self.recipe, self.output_dir, self.timed_starts())

    def write_results(self, recipe: Recipe, ending: Ending) -> None:
        if is_main_process():
            starts = self.timed_starts()
            total = round(sum(s.get("seconds") or 0 for s in starts), 2)  # loading included
            write_final_results(recipe, ending.trainer, self.output_dir, sum(s.get("train_seconds") or 0 for s in
                                starts), status=ending.status, extra={**ending.extra, "starts": starts,
                                                                      "total_seconds": total})
        ending.written = True

    def agree_on_checkpoint(self) -> None:
        """Under several processes, every rank resumes from the checkpoint the main process chose (its choice is
        broadcast once the process group is up)."""
        import torch.distributed as dist

        if (self.checkpoint is None and not self.auto) or not (dist.is_available() and dist.is_initialized()) or \
                dist.get_world_size() < 2:
            return
        choice = [str(self.checkpoint) if self.checkpoint else None]
        dist.broadcast_object_list(choice, src=0)
        self.checkpoint = Path(choice[0]) if choice[0] else None

    def end(self, ending: Ending) -> None:
        """However the run ended: final_results.json says how (a start that failed before training is undone
        instead), console.log stops, the lock goes."""
        try:
            if ending.trainer is None:
                self._undo()
            elif not ending.written:
                try:
                    self.write_results(self.recipe, ending)
                except OSError as e:
                    if disk_full(e) is None:
                        raise
                    report_error("final_results.json could not be written either (no space left on device): "
                                 "rlhf-recipes runs shows the run as killed")
            if ending.together:
                ending.leave_together()
        finally:
            if self._console is not None:
                self._console.stop()
            if self.lock is not None:
                self.lock.release(put_back=ending.trainer is None)
                if ending.trainer is None and self.lock.created_folder:
                    shutil.rmtree(self.output_dir, ignore_errors=True)  # this start made it: nothing else is in it
                self.lock = None

    def _undo(self) -> None:
        """The start failed before training: the files it rewrote go back to what it found (or away)."""
        if self._console is not None:
            self._console.stop()
            self._console = None
        for name, found in self._found.items():
            path = self.output_dir / name
            if found is None:
                path.unlink(missing_ok=True)
            elif name == CONSOLE_LOG:
                os.truncate(path, len(found))
            else:
                atomic_write_text(path, found.decode())


def prepare_output_dir(recipe: Recipe, command: str = "") -> RunFolder:
    """Take the folder's lock, decide where the run writes and what it resumes from; refuse what would lose or
    mix runs.

    Writes only the lock (undone by `RunFolder.end`): `RunFolder.claim` writes the run's files, once the data
    and model have been checked. `command` is what the lock's holder file says is running."""
    output_dir = Path(recipe.setting("output_dir"))
    folder = RunFolder(output_dir, resolved=dict(recipe.resolved))
    # An output_dir that cannot be written gets no lock: check_inputs names the problem in one line.
    if is_main_process() and unwritable_reason(output_dir) is None:
        folder.lock = RunLock(output_dir, command).acquire()
    try:
        _decide(recipe, folder)
    except BaseException:
        folder.end(Ending())
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
    try:
        finished = run_finished(output_dir)
    except (OSError, ValueError):  # unreadable: not a finished run
        finished = False
    finished_run = (f"{flag}: {output_dir} holds a finished run ({output_dir / FINAL_RESULTS_FILE}); nothing to "
                    "resume. Use its model as it is, start over with --overwrite, or pick another --output_dir")
    if resume == "auto":
        folder.auto = True
        if finished:  # rerunning the same command must not train a finished run a second time
            raise RecipeError(finished_run)
    if resume in ("auto", "latest"):
        point = find_resumable_checkpoint(output_dir)
        for skipped, reason in point.skipped:
            logger.warning("%s: skipping %s: %s", flag, skipped, reason)
        folder.checkpoint = point.checkpoint
    else:
        checkpoint = Path(resume)
        if not checkpoint.is_dir() or not is_checkpoint_dir(checkpoint):
            raise RecipeError(f"--resume {resume}: not a checkpoint-<step> folder. Use --resume alone for the "
                              f"newest complete checkpoint in {output_dir}")
        reason = incomplete_reason(checkpoint)
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
    if folder.checkpoint is None and finished:  # its final model is there, not a checkpoint to continue
        raise RecipeError(finished_run)
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
    """A resume continues with the settings the run used up to its checkpoint: those it recorded in the checkpoint's
    trainer_state.json (callbacks.RunRecord; a checkpoint without a record: config.yaml's). Any difference that
    changes what the run computes (a command-line value, or config.yaml edited by hand) is refused, naming each key,
    unless --allow_changes: then config.yaml and the next checkpoints record it with the step it took effect."""
    output_dir, checkpoint = folder.output_dir, folder.checkpoint
    step = checkpoint_step(checkpoint)
    config = read_config(output_dir)
    record = read_record(checkpoint) or {}
    used = record.get("settings") if isinstance(record.get("settings"), dict) else config
    if used is None:
        return
    recorded = record.get("settings_changes") if "settings" in record else (config or {}).get("resumed_with_changes")
    recorded = list(recorded or [])
    changes = meaning_changes(used, recipe.resolved)
    if changes and not recipe.args.allow_changes:
        listed = "; ".join(f"`{k}` {o!r} -> {n!r}" for k, o, n in changes)
        edited = config is not None and "settings" in record and meaning_changes(used, config)
        where = (f" ({output_dir / 'config.yaml'} was edited after {checkpoint.name} was saved: the values on the "
                 f"left are the ones the run used, recorded in that checkpoint)") if edited else ""
        raise RecipeError(
            f"--resume would change what {output_dir} computes: {listed}{where}. Resume with the settings the run "
            f"used (undo the edit, drop the flag), or add --allow_changes to continue with the new values (config.yaml "
            f"and the next checkpoints then record each change and step {step}, where it took effect)"
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
        HealthCallback, InterruptCallback, LearningRateChange, MetricsFileCallback, RunCardCallback, RunRecord,
        StartedCallback,
    )

    interrupt = InterruptCallback()
    resume_step = checkpoint_step(folder.checkpoint) if folder.checkpoint else None
    start_loss = None
    if resume_step:  # a resumed run keeps its health baseline: the loss of its first logged step
        rows = read_metrics(folder.output_dir / METRICS_FILE)
        start_loss = next((float(r["loss"]) for r in rows if isinstance(r.get("loss"), (int, float))), None)
    health = HealthCallback(stop=recipe.args.stop_on_health_warning, start_loss=start_loss)

    def saved(state: str) -> None:  # at each checkpoint: the run card, and final_results.json's seconds so far
        write_run_card(recipe, folder.output_dir, state)
        folder.save_progress()

    # Health first: the health/* flags it adds to a step's logs then land in metrics.jsonl.
    callbacks = [StartedCallback(folder.started), health, MetricsFileCallback(folder.output_dir / METRICS_FILE,
                 resume_step), interrupt, RunRecord(record_settings(folder)),
                 RunCardCallback(saved)]
    if folder.learning_rate_change and folder.checkpoint:
        callbacks.append(LearningRateChange(*folder.learning_rate_change))
    return callbacks, interrupt, health


def write_run_card(recipe: Recipe, output_dir: Path, state: str) -> None:
    """<output_dir>/README.md: the hub's metadata and a short card, in place of TRL's draft (model_card.py)."""
    from rlhf_recipes.model_card import run_card

    settings = read_config(output_dir) or dict(recipe.resolved)
    atomic_write_text(output_dir / "README.md", run_card(settings, recipe.algorithm.name, output_dir, state))
