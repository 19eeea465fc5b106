"""One SLURM array task: `python -m rlhf_recipes.tools.sweep.task DIR INDEX` carries run INDEX of DIR to done."""

from __future__ import annotations

import sys
from pathlib import Path

from rlhf_recipes.run_folder import EXIT_INTERRUPTED, EXIT_STILL_RUNNING
from rlhf_recipes.tools.lab.executor import run_one
from rlhf_recipes.tools.sweep.slurm import read_job


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m rlhf_recipes.tools.sweep.task SWEEP_DIR TASK_INDEX", file=sys.stderr)
        return 2
    job, launcher = read_job(Path(argv[0]), int(argv[1]))
    outcome = run_one(job, launcher)
    error = f": {outcome.error}" if outcome.error else ""
    print(f"{outcome.status} {job.name} ({outcome.did}, {outcome.wall_s:.0f} s){error}; log: {job.log}")
    return {"finished": 0, "interrupted": EXIT_INTERRUPTED, "still running": EXIT_STILL_RUNNING}.get(outcome.status, 1)


if __name__ == "__main__":
    sys.exit(main())
