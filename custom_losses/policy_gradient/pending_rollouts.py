"""Exact resume inside a rollout batch: a checkpoint keeps the rollouts its remaining optimizer steps need.

GRPOTrainer generates one rollout batch and trains on it for `steps_per_generation x num_iterations` micro-steps
(the book's shape: 4 optimizer steps per batch, the first on-policy). Its buffer of that batch (`_buffered_inputs`)
and its micro-step counter (`_step`) are not part of a checkpoint, so a run resumed from a checkpoint saved inside
a batch generated a new batch (other completions, from the already-updated policy) and, with the counter back at
0, trained on the wrong slices of it: every loss after the checkpoint differed from the uninterrupted run's.

Here a checkpoint saves, per process, the micro-step counter and, when the checkpoint falls inside a rollout batch,
the buffered batch itself (prompts, completions, masks, advantages, old and reference log-probs: everything the
remaining steps read). A resumed run puts both back before its first step, so it trains on the same slices of the
same rollouts as the uninterrupted run; the rest (weights, optimizer, scheduler, RNG, data position) the Trainer
restores as at any checkpoint. The file is a few MB at most (token ids and per-token floats of one rollout batch)
and is listed and checksummed in the checkpoint's manifest like every other file.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

PENDING_FILE = "pending_rollouts-{rank}.pt"  # one per process: each holds its own share of the batch


class PendingRolloutsMixin:
    """Saves and restores GRPOTrainer's buffered rollout batch and micro-step counter with each checkpoint."""

    def _generate_every(self) -> int:
        return self.args.steps_per_generation * self.num_iterations

    def _save_optimizer_and_scheduler(self, output_dir: str) -> None:
        super()._save_optimizer_and_scheduler(output_dir)
        inside = self._buffered_inputs is not None and self._step % self._generate_every() != 0
        state = {"step": self._step, "generate_every": self._generate_every(),
                 "buffered_inputs": self._buffered_inputs if inside else None}
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)  # another process may not have created it yet
        torch.save(state, folder / PENDING_FILE.format(rank=self.accelerator.process_index))

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = Path(checkpoint) / PENDING_FILE.format(rank=self.accelerator.process_index)
        if not path.exists():
            logger.warning("%s has no %s (saved by an older version, or by another number of processes): a resume "
                           "inside a rollout batch generates a new batch, so the steps up to the next batch differ "
                           "from an uninterrupted run's", checkpoint, path.name)
            return
        # Loaded on the CPU, then moved: a map_location of accelerate's device ("cpu:0" under several CPU processes)
        # is one torch.load cannot restore to.
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state["generate_every"] != self._generate_every():
            logger.warning("%s was saved with %d micro-steps per rollout batch, this run has %d: its pending "
                           "rollouts are not used", checkpoint, state["generate_every"], self._generate_every())
            return
        self._step = state["step"]
        self._buffered_inputs = _to_device(state["buffered_inputs"], self.accelerator.device)
        if self._buffered_inputs is not None:
            done = self._step % self._generate_every()
            logger.info("resuming inside a rollout batch: %d of its %d micro-steps done, the rest train on its saved "
                        "rollouts", done, self._generate_every())


def _to_device(value, device):
    """Every tensor in a (nested) batch, on `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(v, device) for v in value)
    return value
