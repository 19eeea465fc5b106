"""Callbacks every run gets: metrics on disk, clean interruption, resumable checkpoints, health.

They are the difference between a run you can trust and one you have to babysit: metrics
land in metrics.jsonl as they arrive, Ctrl-C or SIGTERM ends the run at the next optimizer
step with a checkpoint, and a checkpoint counts only once it is completely written.
"""

from __future__ import annotations

import json
import math
import re
import signal
from pathlib import Path

from transformers import TrainerCallback

COMPLETE_MARKER = "checkpoint_complete"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_step(path: str | Path) -> int:
    m = _CHECKPOINT.match(Path(path).name)
    if not m:
        raise ValueError(f"{path} is not a checkpoint-<step> directory")
    return int(m.group(1))


def find_resumable_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest checkpoint whose save finished; half-written ones (a kill mid-save) are skipped."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    done = [p for p in root.iterdir() if _CHECKPOINT.match(p.name) and (p / COMPLETE_MARKER).exists()]
    return max(done, key=checkpoint_step, default=None)


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
            # Rows logged after the checkpoint we resume from will be logged again: keep one copy.
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= self.resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        row = {"step": state.global_step, "epoch": state.epoch, **logs}
        with self.path.open("a") as f:
            f.write(json.dumps(row, default=float) + "\n")


class InterruptCallback(TrainerCallback):
    """Ctrl-C / SIGTERM: finish the current optimizer step, save a checkpoint, stop.

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
            for sig in (signal.SIGINT, signal.SIGTERM):
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


class CheckpointMarkerCallback(TrainerCallback):
    """Marks a checkpoint complete once the Trainer has written all of it (on_save runs after)."""

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                (folder / COMPLETE_MARKER).write_text(str(state.global_step))


class FiniteLossCallback(TrainerCallback):
    """Stops a run whose loss went NaN/inf with an error, instead of training on garbage."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            raise FloatingPointError(
                f"loss is {loss} at step {state.global_step}: the run diverged. Lower the learning rate, check the "
                "data for empty responses, or resume from the last checkpoint with --resume."
            )
