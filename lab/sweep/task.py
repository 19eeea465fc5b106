"""`--slurm`: one SLURM job array, a task per run, each carrying its run to done through the executor's `run_one`.

The array is plain sbatch (no scheduler of ours, no extra package): `DIR/sweep.sbatch` with `--array=0-(N-1)`;
task i runs `python -m lab.sweep.task DIR i` (`main` here), which reads job i from
`DIR/sweep_jobs.json`. A task whose run already finished exits at once, an interrupted one resumes, so resubmitting
the same file is safe.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from rlhf_recipes.run_folder import EXIT_INTERRUPTED, EXIT_STILL_RUNNING
from rlhf_recipes.tools.document import write_result
from lab.executor import Job, run_one

JOBS_FILE = "sweep_jobs.json"
SBATCH_FILE = "sweep.sbatch"


def sbatch_text(sweep_dir: Path, count: int, name: str, options: list[str], workdir: Path) -> str:
    lines = ["#!/bin/bash",
             f"# A sweep as one SLURM job array: task i carries run i of {JOBS_FILE} to done (trains, resumes or",
             "# only evaluates it). Resubmitting this file is safe: finished runs are skipped.",
             "# Written by `rlhf-recipes sweep ... --slurm`; gather the results with",
             "# `rlhf-recipes sweep DIR --report`.",
             f"#SBATCH --job-name={name}",
             f"#SBATCH --array=0-{count - 1}",
             f"#SBATCH --output={sweep_dir.resolve()}/slurm/%A_%a.out",
             *(f"#SBATCH {option}" for option in options),
             "",
             "set -euo pipefail",
             f"cd {shlex.quote(str(workdir))}",
             (f"exec {shlex.quote(sys.executable)} -m lab.sweep.task "
              f"{shlex.quote(str(sweep_dir.resolve()))} \"$SLURM_ARRAY_TASK_ID\""), ""]
    return "\n".join(lines)


def write_and_submit(sweep_dir: Path, jobs: list[Job], launcher: str | None, options: list[str], name: str) -> int:
    """Write the array and submit it with sbatch when it is on PATH; else print the command. Returns an exit code."""
    rows = [{**asdict(job), "folder": str(job.folder.resolve())} for job in jobs]
    write_result({"launcher": launcher, "jobs": rows}, sweep_dir / JOBS_FILE)
    (sweep_dir / "slurm").mkdir(exist_ok=True)
    path = sweep_dir / SBATCH_FILE
    path.write_text(sbatch_text(sweep_dir, len(jobs), name, options, Path.cwd()), encoding="utf-8")
    os.chmod(path, 0o755)
    print(f"wrote {path}: a job array of {len(jobs)} task(s), one per run")
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        print(f"sbatch is not on PATH here: submit it from a SLURM login node with\n  sbatch {path}")
        return 0
    done = subprocess.run([sbatch, str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"error: sbatch {path} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}",
              file=sys.stderr)
        return 1
    print(done.stdout.strip())
    print(f"when the array is done (or at any time): rlhf-recipes sweep {sweep_dir} --report")
    return 0


def main(argv: list[str] | None = None) -> int:
    """One array task: run INDEX of DIR's sweep_jobs.json carried to done."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m lab.sweep.task SWEEP_DIR TASK_INDEX", file=sys.stderr)
        return 2
    data = json.loads((Path(argv[0]) / JOBS_FILE).read_text())
    job = Job.from_json(data["jobs"][int(argv[1])])
    outcome = run_one(job, data["launcher"])
    error = f": {outcome.error}" if outcome.error else ""
    print(f"{outcome.status} {job.name} ({outcome.did}, {outcome.wall_s:.0f} s){error}; log: {job.log}")
    return {"finished": 0, "interrupted": EXIT_INTERRUPTED, "still running": EXIT_STILL_RUNNING}.get(outcome.status, 1)


if __name__ == "__main__":
    sys.exit(main())
