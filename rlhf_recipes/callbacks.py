"""Callbacks every run gets: metrics on disk, clean interruption, resumable checkpoints, health.

They are the difference between a run you can trust and one you have to babysit: metrics
land in metrics.jsonl as they arrive, Ctrl-C or SIGTERM ends the run at the next optimizer
step with a checkpoint, each checkpoint records the run's settings and its files (checkpoints.py),
and a loss that goes non-finite or explodes, or gradients that vanish while the loss moves,
are reported the step they happen.
"""

from __future__ import annotations

import json
import logging
import math
import re
import signal
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from rlhf_recipes.checkpoints import RECORD, TRAINER_STATE
from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.run_folder import read_metrics
from rlhf_recipes.signals import INTERRUPT_SIGNALS

logger = logging.getLogger(__name__)


class StartedCallback(TrainerCallback):
    """Calls `on_started` once training begins (final_results.json's `train_seconds` count from there)."""

    def __init__(self, on_started):
        self.on_started = on_started

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.on_started()


class MetricsFileCallback(TrainerCallback):
    """Appends every log event to <output_dir>/metrics.jsonl as {"step", "epoch", ...metrics}."""

    def __init__(self, path: str | Path, resume_step: int | None = None):
        self.path = Path(path)
        self.resume_step = resume_step

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.resume_step is None:
            self.path.write_text("")
        elif self.path.exists():
            # Rows logged after the checkpoint we resume from will be logged again: keep one copy (and drop a
            # row torn by a full disk or a kill, which read_metrics skips).
            kept = [row for row in read_metrics(self.path) if row.get("step", 0) <= self.resume_step]
            atomic_write_text(self.path, "".join(json.dumps(row, default=float) + "\n" for row in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        row = {"step": state.global_step, "epoch": state.epoch, **logs}
        try:
            with self.path.open("a") as f:
                f.write(json.dumps(row, default=float) + "\n")
        except OSError as e:  # a write error names no file: say which one (the runner's one-line report uses it)
            raise OSError(e.errno, e.strerror, str(self.path)) from e


# The signals that end a run with a checkpoint: Ctrl-C, `kill`, and SIGUSR1, which a cluster sends ahead of a time
# limit (accelerate_configs/slurm/multinode.sbatch: `--signal=B:USR1@300`, passed on to the training processes).


class InterruptCallback(TrainerCallback):
    """Ctrl-C / SIGTERM / SIGUSR1: finish the current optimizer step, save a checkpoint, stop.

    A second signal restores the default handler, so pressing Ctrl-C twice still kills.
    Under several processes the flag is all-reduced each step, so every rank stops at the
    same step even if only one received the signal.
    """

    def __init__(self):
        self.requested = False
        self.interrupted = False
        self._previous = {}

    def _handle(self, signum, frame):
        self.requested = True
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def on_train_begin(self, args, state, control, **kwargs):
        try:
            for sig in INTERRUPT_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread (e.g. a notebook worker): no handler
            pass

    def _any_rank_requested(self) -> bool:
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return self.requested
        flag = torch.tensor([1.0 if self.requested else 0.0])
        if dist.get_backend() == "nccl":
            flag = flag.cuda()
        dist.all_reduce(flag)
        return bool(flag.item() > 0)

    def on_step_end(self, args, state, control, **kwargs):
        if self._any_rank_requested():
            self.interrupted = True
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class LearningRateChange(TrainerCallback):
    """--resume --allow_changes --learning_rate NEW: the optimizer and scheduler restored from the checkpoint hold
    the old rate, so the change would be recorded but not trained. Once they are loaded (before the first resumed
    step), every rate they hold is scaled by NEW / OLD: the schedule continues from where it was, at the new peak.
    Each scheduler here is a LambdaLR (transformers' and custom_losses/schedules.py's), whose rate is
    base_lr x factor(step), so scaling base_lrs scales every later step."""

    def __init__(self, old: float, new: float):
        self.old, self.new = old, new

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
        ratio = self.new / self.old
        for group in optimizer.param_groups:
            group["lr"] *= ratio
            if "initial_lr" in group:
                group["initial_lr"] *= ratio
        # Under DeepSpeed the trainer holds accelerate's wrapper (DeepSpeedSchedulerWrapper, no base_lrs of its
        # own) around the LambdaLR that the engine steps: scale the one inside, or the next step restores the rate.
        while lr_scheduler is not None and not hasattr(lr_scheduler, "base_lrs") and hasattr(lr_scheduler, "scheduler"):
            lr_scheduler = lr_scheduler.scheduler
        if lr_scheduler is not None and hasattr(lr_scheduler, "base_lrs"):
            lr_scheduler.base_lrs = [lr * ratio for lr in lr_scheduler.base_lrs]
            lr_scheduler._last_lr = [lr * ratio for lr in lr_scheduler.get_last_lr()]
        elif lr_scheduler is not None:
            raise RuntimeError(f"--allow_changes learning_rate: cannot rescale a {type(lr_scheduler).__name__}; "
                               "resume without changing the learning rate")
        logger.info("learning rate %g -> %g: the restored optimizer and scheduler are rescaled by %g", self.old,
                    self.new, ratio)


class RunCardCallback(TrainerCallback):
    """The run folder's README.md is ours (model_card.py): written after TRL's draft, at every save."""

    def __init__(self, write_card):
        self.write_card = write_card

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.write_card(f"saved up to checkpoint-{state.global_step}")


_OTHER_RANKS = re.compile(r"^(rng_state|pending_rollouts)[-_]0*[1-9]\d*\.pth?$")


class RunRecord(TrainerCallback, ExportableState):
    """What a checkpoint records of the run, inside its own trainer_state.json (transformers asks an ExportableState
    callback for its `state()` just before it writes that file, the save's last): the settings the run used to reach
    it (run_setup.py compares them on resume) and the size of every file the save has written (checkpoints.py)."""

    def __init__(self, settings: dict):
        self.settings = settings  # {"settings", "settings_changes"}: run_setup.record_settings
        self._folder = self._state = None

    def on_train_begin(self, args, state, control, **kwargs):
        # A checkpoint from before this record resumes too: the Trainer updates only the records its state holds.
        state.stateful_callbacks.setdefault(RECORD, self.state())
        self._folder, self._state = Path(args.output_dir), state

    def state(self) -> dict:
        files = None
        if self._folder is not None:
            folder = self._folder / f"checkpoint-{self._state.global_step}"
            # Not trainer_state.json (being written; a re-save's old one), nor another rank's own file (its RNG
            # state, its pending rollouts: that rank may still be writing it, no barrier comes before this)
            files = {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*"))
                     if p.is_file() and p.name != TRAINER_STATE and not _OTHER_RANKS.match(p.name)}
        return {"args": {**self.settings, "files": files}, "attributes": {}}


class HealthCallback(TrainerCallback):
    """Watches the logged loss and gradient norm; reports trouble as it happens.

    - a non-finite loss, gradient norm or trainable weight stops the run with an error (training on it would
      only spread NaNs); the runner reports it as a failed run in one line (train.py);
    - a loss that explodes against its own start: |loss - start| > EXPLODE x max(|start|, 1), where
      start is the first logged loss; the floor of 1 keeps a loss that starts near zero (policy
      gradients) from being flagged for ordinary noise;
    - a gradient norm that collapses to zero while the loss still moves (a detached graph, a
      frozen model, an underflow).
    Each is a warning on the console and a `health/<check>` = 1 in that step's metrics row; with
    `stop_on_health_warning` the run stops at the first one (final_results.json says why).
    """

    EXPLODE = 10.0

    def __init__(self, stop: bool = False, start_loss: float | None = None):
        self.stop = stop
        self.start_loss = start_loss  # a resumed run passes its first logged loss, so the baseline survives resume
        self.previous_loss: float | None = None
        self.stopped_because: str | None = None

    def _warn(self, logs: dict, state, control, check: str, message: str) -> None:
        logs[f"health/{check}"] = 1.0
        if state.is_world_process_zero:  # rich: the warning stands out of the progress bar's lines
            from rich.console import Console
            from rich.markup import escape

            Console(stderr=True).print(f"[bold yellow]health warning[/] step {state.global_step}: {escape(message)}")
        if self.stop and self.stopped_because is None:
            self.stopped_because = f"{check} at step {state.global_step}: {message}"
            control.should_training_stop = True

    def on_step_end(self, args, state, control, model=None, **kwargs):
        # The logged loss cannot be trusted to show a NaN: the Trainer's logging_nan_inf_filter replaces a
        # non-finite loss by the mean of the finite ones. The weights can: once the optimizer has written a NaN
        # or inf into them every later step is garbage. Checked every optimizer step, before the step is logged
        # or saved, so no checkpoint ever holds them (a min/max reduction per tensor, one sync).
        name = first_nonfinite_parameter(model) if model is not None else None
        if name is not None:
            raise FloatingPointError(f"the weights are not finite after step {state.global_step} (first: {name}): "
                                     "the run diverged; lower the learning rate")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:
            return
        loss, grad_norm = logs["loss"], logs.get("grad_norm")
        if not math.isfinite(loss):
            raise FloatingPointError(
                f"loss is {loss} at step {state.global_step}: the run diverged. Lower the learning rate, check the "
                "data for empty responses, or resume from the last checkpoint with --resume."
            )
        if grad_norm is not None and not math.isfinite(grad_norm):
            raise FloatingPointError(f"gradient norm is {grad_norm} at step {state.global_step}: the run diverged; "
                                     "lower the learning rate or check the data")
        if self.start_loss is None:
            self.start_loss = loss
        elif abs(loss - self.start_loss) > self.EXPLODE * max(abs(self.start_loss), 1.0):
            self._warn(logs, state, control, "loss_exploded",
                       f"loss {loss:.4g} against {self.start_loss:.4g} at the start: lower the learning rate, or "
                       "check the data")
        moved = self.previous_loss is not None and abs(loss - self.previous_loss) > 1e-6
        if grad_norm is not None and math.isfinite(grad_norm) and grad_norm < 1e-10 and moved:
            self._warn(logs, state, control, "zero_grad_norm",
                       f"gradient norm {grad_norm:.3g} while the loss moved ({self.previous_loss:.4g} -> {loss:.4g}): "
                       "no gradient reaches the weights (a detached loss, frozen parameters or an underflow)")
        self.previous_loss = loss


def first_nonfinite_parameter(model) -> str | None:
    """The name of the first trainable parameter holding a NaN or inf, or None (frozen weights are not checked:
    the optimizer never writes them, and a 4-bit base would cost a dequantization). Under ZeRO-3 a parameter is an
    empty placeholder between forwards and this rank's shard is its `ds_tensor`: the shard is what is checked (a
    rank that finds a NaN raises, and the launcher stops the others)."""
    import torch

    params = [(n, getattr(p, "ds_tensor", p)) for n, p in model.named_parameters() if p.requires_grad]
    params = [(n, p) for n, p in params if p.numel()]
    if not params:
        return None
    with torch.no_grad():
        device = params[0][1].device
        # min and max propagate NaN and show inf, and reduce without a tensor-sized temporary (isfinite(p) would
        # allocate one the size of the largest weight, e.g. an embedding, every step).
        flags = torch.stack([torch.isfinite(torch.stack(torch.aminmax(p.detach()))).all().to(device)
                             for _, p in params])
        if bool(flags.all()):
            return None
        return params[int((~flags).nonzero()[0, 0])][0]
