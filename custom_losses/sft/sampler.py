"""A training sampler that yields, per epoch, only whole optimizer steps.

The book's SFT loop drops the micro-batches left over at an epoch's end (9.5k no_robots rows,
32 per step: 296 optimizer steps per epoch). transformers instead takes a last, partial
optimizer step (297). This sampler shuffles all rows each epoch and yields only the first
floor(N / S) * S indices, S = sequences per optimizer step across all processes
(per-device batch x accumulation x world size). accelerate then cuts them into micro-batches
and deals them round-robin to the processes, so every process gets exactly
floor(N / S) x accumulation micro-batches, and transformers counts floor(N / S) steps per epoch.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch
from torch.utils.data import Sampler


class WholeStepSampler(Sampler[int]):
    """Shuffle `num_rows` indices with seed + epoch; keep only whole optimizer steps of `step_size` rows.

    The permutation depends only on (seed, epoch), so every process sees the same order (accelerate's
    sharding needs that) and a resumed run sees the order the interrupted one saw. The epoch is
    `epoch_of()` when given (the trainer derives it from its global step, which also holds after a
    resume mid-epoch, where accelerate's set_epoch does not reach a sharded sampler), else the
    value last passed to `set_epoch`.
    """

    def __init__(self, num_rows: int, step_size: int, seed: int = 0, shuffle: bool = True,
                 epoch_of: Callable[[], int] | None = None):
        if step_size <= 0:
            raise ValueError(f"step_size must be positive, got {step_size}")
        if num_rows < step_size:
            raise ValueError(
                f"{num_rows} training rows are fewer than one optimizer step ({step_size} sequences): with the "
                "leftover dropped there would be nothing to train on")
        self.num_rows, self.step_size, self.seed, self.shuffle = num_rows, step_size, seed, shuffle
        self.epoch_of = epoch_of
        self.epoch = 0

    @property
    def steps_per_epoch(self) -> int:
        return self.num_rows // self.step_size

    @property
    def dropped_per_epoch(self) -> int:
        return self.num_rows - len(self)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.steps_per_epoch * self.step_size

    def __iter__(self) -> Iterator[int]:
        epoch = self.epoch_of() if self.epoch_of is not None else self.epoch
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            order = torch.randperm(self.num_rows, generator=generator)
        else:
            order = torch.arange(self.num_rows)
        return iter(order[: len(self)].tolist())
