"""Which prompt groups SDPO trains on (RLHF book, chapter 12): pure logic, no model.

A group (one prompt's rollouts) is ACCEPTED when at least one rollout succeeds (reward >= the
threshold); a group with no success is SKIPPED and another prompt drawn, until the step has its
groups, or the draw limit is reached (an error, as in the book). The teacher's demonstration is the
group's FIRST successful rollout, shared by all its rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch


class NotEnoughSuccessfulGroups(RuntimeError):
    pass


def first_success(rewards: Iterable[float], threshold: float) -> int | None:
    """Index of the first rollout with reward >= threshold (the demonstration), or None."""
    for i, reward in enumerate(rewards):
        if float(reward) >= threshold:
            return i
    return None


@dataclass
class Collected:
    accepted: list[Any] = field(default_factory=list)  # the draw's payloads, in draw order
    drawn: int = 0  # prompts drawn by this process
    skipped: int = 0  # drawn groups without a success
    discarded: int = 0  # successful groups drawn beyond this process's need (other processes still short)
    rounds: int = 0


def collect_groups(draw: Callable[[int], list[tuple[Any, torch.Tensor]]], need: int, threshold: float,
                   max_draws: int, world_max: Callable[[int], int] = lambda n: n) -> Collected:
    """Draw prompt groups until `need` of them have a success.

    draw(n) draws n fresh prompts and returns (payload, rewards of the group's rollouts) for each, in
    draw order. Drawing n = (groups still missing) at a time accepts the same groups as the book's one
    prompt at a time. `world_max` makes every process draw the same number each round (the maximum
    still missing on any process; a process that is done discards what it draws); with one process
    it is the identity. Raises NotEnoughSuccessfulGroups once `max_draws` prompts were drawn without
    reaching `need`.
    """
    out = Collected()
    while True:
        want = world_max(need - len(out.accepted))
        if want <= 0:
            return out
        if out.drawn >= max_draws:
            raise NotEnoughSuccessfulGroups(
                f"only {len(out.accepted)} of {need} prompt groups had a rollout with reward >= {threshold} after "
                f"{out.drawn} prompts drawn (max_draws {max_draws}): the model rarely solves the task; lower "
                "success_reward_threshold or raise max_draws")
        want = min(want, max_draws - out.drawn)
        out.rounds += 1
        for payload, rewards in draw(want):
            out.drawn += 1
            if first_success(rewards.tolist(), threshold) is None:
                out.skipped += 1
            elif len(out.accepted) < need:
                out.accepted.append(payload)
            else:
                out.discarded += 1


class PromptStream:
    """Prompts in seeded shuffled passes over the training set, continuing across steps and epochs.

    Every process holds the same stream; a round of `per_process` draws on each process takes the
    next world x per_process indices, process r the r-th slice. `taken` (all processes) is what a
    checkpoint saves: replaying it puts a resumed stream where the saved one was.
    """

    def __init__(self, size: int, seed: int):
        self.size, self.seed = size, seed
        self.order: list[int] = []
        self.epoch = 0
        self.taken = 0

    def take(self, count: int) -> list[int]:
        while len(self.order) < count:
            generator = torch.Generator().manual_seed(self.seed + 104729 * self.epoch)
            self.order += torch.randperm(self.size, generator=generator).tolist()
            self.epoch += 1
        taken, self.order = self.order[:count], self.order[count:]
        self.taken += count
        return taken

    def take_for(self, per_process: int, world: int, rank: int) -> list[int]:
        indices = self.take(per_process * world)
        return indices[rank * per_process:(rank + 1) * per_process]

    def replay(self, taken: int) -> None:
        self.order, self.epoch, self.taken = [], 0, 0
        self.take(taken)
