"""Rejection sampling's stage files, and stages shared out across processes in chunks that survive a crash.

A stage (generate, score, evaluate, select) ends in one file in output_dir, written by the main process. A
re-run (`--resume`) that finds the file reads it and skips the stage; the main process's view decides, and its
rows are broadcast, so every process takes the same branch and holds the same rows.

The long stages (1: sampling, 2-3: reward-model scoring, 6: the base evaluation) are cut into chunks of a fixed
number of prompts, chunk c going to process c % world_size. Each process writes each finished chunk to
<stage file>.parts/<first>-<end>.jsonl and, on a re-run, reads the chunks it finds there instead of computing them
again; the chunks are then gathered (in chunk order) to every process and the main process writes the stage
file. So no process waits long for another (on one GPU stage 1 of the book's recipes takes ~40 minutes, longer
than the default 30-minute timeout of a collective), and a crash loses at most one chunk per process.

The chunks do not depend on the number of processes, and a sampled chunk draws from its own seed (from the run's
seed and the chunk's first prompt), so 1, 2 or 8 processes, and a run resumed from chunk files, write the same
rows on the same hardware.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)

Rows = list[dict[str, Any]]


# --- files -----------------------------------------------------------------------------------
def read_jsonl(path: Path) -> Rows:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: Rows) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)  # a stage's (or a chunk's) file exists only once it is complete


def parts_dir(path: Path) -> Path:
    """Where a stage's finished chunks wait until the stage file is written."""
    return path.with_name(path.name + ".parts")


def chunk_seed(seed: int, first: int) -> int:
    """The sampling seed of the chunk that starts at prompt `first`: a hash of (run seed, first), so chunks draw
    independent streams whichever process samples them."""
    import numpy as np

    return int(np.random.SeedSequence([seed, first]).generate_state(1)[0])


# --- processes -------------------------------------------------------------------------------
class Processes:
    """This process's place among the run's processes, and the collectives the stages use (none with one)."""

    def __init__(self, alone: bool = False):
        """alone: this process works by itself (the others are elsewhere), as if it were the only one."""
        from accelerate import PartialState

        state = PartialState()
        self.rank, self.world, self.is_main = state.process_index, state.num_processes, state.is_main_process
        if alone:
            self.rank, self.world, self.is_main = 0, 1, True
        self.state = state

    def broadcast(self, value):
        """The main process's `value`, in every process."""
        if self.world == 1:
            return value
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([value])[0]

    def all_gather(self, value) -> list:
        """Every process's `value`, in rank order, in every process."""
        if self.world == 1:
            return [value]
        from accelerate.utils import gather_object

        return gather_object([value])

    def barrier(self) -> None:
        if self.world > 1:
            self.state.wait_for_everyone()


# --- stages ----------------------------------------------------------------------------------
def stage(path: Path, name: str, compute: Callable[[], Rows], still_valid: Callable[[Rows], bool] = lambda rows: True,
          processes: Processes | None = None, parts: Path | None = None) -> Rows:
    """The rows of a stage: read from `path` when a previous run finished it (and `still_valid` accepts its
    rows), else computed (by every process: `compute` may share the work out) and written by the main process.
    `parts`: the stage's chunk folder, removed once the stage file is written."""
    procs = processes or Processes()
    found = None
    if procs.is_main and path.exists():
        rows = read_jsonl(path)
        if still_valid(rows):
            found = rows
        else:
            logger.info("stage %s: %s is from another training step, computed again", name, path)
    found = procs.broadcast(found)
    if found is not None:
        if procs.is_main:
            logger.info("stage %s: found %s, skipped", name, path)
        return found
    if procs.is_main:
        logger.info("stage %s: running", name)
    rows = compute()
    if procs.is_main:
        write_jsonl(path, rows)
        logger.info("stage %s: wrote %s (%d rows)", name, path, len(rows))
    if parts is not None:
        procs.barrier()  # the stage file is written before any chunk is removed
        shutil.rmtree(parts, ignore_errors=True)
    return rows


def sharded(name: str, items: Sequence[Any], chunk_size: int, compute_chunk: Callable[[int, list], Rows],
            processes: Processes, parts: Path | None = None, noun: str = "prompts") -> Rows:
    """compute_chunk(first, items[first:first + chunk_size]) -> one row per item, for this process's chunks
    (chunk c of process c % world); every process gets all rows, in item order. With `parts`, each chunk is
    written there when done and read back instead of computed on a re-run."""
    chunks = [(first, list(items[first:first + chunk_size])) for first in range(0, len(items), chunk_size)]
    mine = chunks[processes.rank::processes.world]
    if parts is not None:
        parts.mkdir(parents=True, exist_ok=True)
    done: dict[int, Rows] = {}
    reused = 0
    for first, chunk in mine:
        file = None if parts is None else parts / f"{first:07d}-{first + len(chunk):07d}.jsonl"
        if file is not None and file.exists():
            rows = read_jsonl(file)
            if len(rows) == len(chunk):
                done[first], reused = rows, reused + 1
                continue
        rows = compute_chunk(first, chunk)
        if len(rows) != len(chunk):
            raise RuntimeError(f"stage {name}: chunk at {first} gave {len(rows)} rows for {len(chunk)} {noun}")
        if file is not None:
            write_jsonl(file, rows)
        done[first] = rows
    spans = ", ".join(f"{first}-{first + len(chunk)}" for first, chunk in mine) or "none"
    logger.info("stage %s: process %d of %d did %s %s (%d of %d chunks; %d read from an earlier run's chunk files)",
                name, processes.rank, processes.world, noun, spans, len(mine), len(chunks), reused)
    merged: dict[int, Rows] = {}
    for part in processes.all_gather(done):
        merged.update(part)
    return [row for first in sorted(merged) for row in merged[first]]
