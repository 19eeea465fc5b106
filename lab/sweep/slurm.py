"""`--slurm`: the sweep as ONE SLURM job array through submitit (a task per run), each task carrying its run to done
with the executor's `run_one`, and requeued with its run checkpointed when SLURM preempts it or its time runs out.

submitit writes the sbatch file, submits it (`map_array`; `--slurm_array_parallelism N` runs at most N tasks at
once), and runs each task as `python -m submitit.core._submit DIR/slurm` under srun; its files (the task's pickle,
logs `<job>_<task>_0_log.out/err`, result) are in DIR/slurm. Before the time limit or a preemption SLURM sends
submitit's signal (SIGUSR2, `signal_delay_s` = 90 s ahead); submitit calls `SweepTask.checkpoint`, which forwards
ONE SIGTERM to the run (the runner finishes its optimizer step, saves a checkpoint and exits: callbacks.py's
InterruptCallback), waits for it, and hands submitit the same task, which requeues it (`scontrol requeue`). The
requeued task finds the run interrupted with a complete checkpoint and resumes it (`--resume`: run_one's next_step);
a finished run's task exits at once.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from submitit.helpers import Checkpointable, DelayedSubmission

from lab.executor import Job, Outcome, run_one
from rlhf_recipes.errors import RecipeError

SLURM_FOLDER = "slurm"
STOP_WAIT_S = 75  # how long a checkpoint waits on the run: inside submitit's 90 s between its signal and the kill
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


class SweepTask(Checkpointable):
    """One array task, `task(job, launcher)`: submitit calls `checkpoint(job, launcher)` on its preemption signal."""

    def __getstate__(self):  # submitit pickles the callable: nothing of a running task goes with it
        return {}

    def __setstate__(self, state):
        pass

    def __call__(self, job: Job, launcher: str | None) -> str:
        # The run is waited on in a thread: submitit's signal handler runs in the main thread, and a Popen.wait
        # interrupted there could not be re-entered by the handler to wait for the run's save.
        self._proc: subprocess.Popen | None = None
        outcome: list[Outcome] = []

        def carry() -> None:  # the run stays in the task's process group: SLURM's own signals reach it too
            outcome.append(run_one(job, launcher, started=self._started, own_session=False))

        # daemon: a task requeued while its run would not stop exits without waiting on it
        worker = threading.Thread(target=carry, daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(timeout=1.0)  # the main thread stays free for submitit's handler
        if not outcome:  # run_one raised (its traceback is above): submitit records the task as failed
            raise RuntimeError(f"{job.name}: the task could not carry its run (see the traceback above)")
        (result,) = outcome
        error = f": {result.error}" if result.error else ""
        line = f"{result.status} {job.name} ({result.did}, {result.wall_s:.0f} s){error}; log: {job.log}"
        print(line, flush=True)
        if result.status != "finished":  # submitit records the task as failed, with this line
            raise RuntimeError(line)
        return line

    def _started(self, proc: subprocess.Popen | None) -> None:
        if proc is not None:  # kept once it ends too: checkpoint() may come while the thread reaps it
            self._proc = proc

    def checkpoint(self, job: Job, launcher: str | None) -> DelayedSubmission:
        """Preempted or out of time: the run saves a checkpoint and stops; the same task is requeued (resumes it)."""
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            print(f"preempted or out of time: asking {job.name} to save a checkpoint and stop", flush=True)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                print(f"{job.name} did not stop within {STOP_WAIT_S} s; requeued: it resumes from its last complete "
                      "checkpoint", flush=True)
        return DelayedSubmission(SweepTask(), job, launcher)


def minutes(value: str) -> int:
    """SLURM's --time (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in whole minutes, as submitit's `time` (ours:
    submitit takes minutes and reads them to tell a time limit from a preemption, and parses no SLURM time)."""
    match = _TIME.fullmatch(value.strip())
    if match is None:
        raise RecipeError(f"--slurm_option=--time={value}: expected SLURM's time, e.g. 90, 12:00:00 or 1-00:00:00")
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        h, m, s = int(first), int(second or 0), int(third or 0)
    elif third is not None:  # HH:MM:SS
        h, m, s = int(first), int(second), int(third)
    else:  # MM[:SS]
        h, m, s = 0, int(first), int(second or 0)
    return max(1, int(days or 0) * 1440 + h * 60 + m + (1 if s else 0))


def slurm_parameters(options: list[str], name: str, parallelism: int | None) -> dict[str, object]:
    """`--slurm_option=--key=value` lines as submitit's SlurmExecutor parameters: its own where it has one
    (`--cpus-per-task=8` -> cpus_per_task=8, `--time=12:00:00` -> time=720 minutes), else additional_parameters
    (written as `#SBATCH --key=value` all the same)."""
    from submitit.slurm.slurm import _get_default_parameters  # private, but submitit's only list of them

    known = _get_default_parameters()
    params: dict[str, object] = {"job_name": name, "additional_parameters": {}}
    for option in options:
        key, sep, value = option.removeprefix("--").partition("=")
        if not option.startswith("--") or not key:
            raise RecipeError(f"--slurm_option={option}: expected --key=value (an sbatch option, e.g. --gres=gpu:1)")
        attr = key.replace("-", "_")
        if attr in ("array", "output", "error", "signal"):
            raise RecipeError(f"--slurm_option={option}: the sweep sets --{key} itself (the array: one task per run, "
                              "--slurm_array_parallelism N for how many at once)")
        parsed: object = True if not sep else minutes(value) if attr == "time" else \
            int(value) if value.isdigit() else value
        if attr in known and attr != "additional_parameters":
            params[attr] = parsed
        else:
            params["additional_parameters"][key] = parsed
    if "time" not in params:  # submitit's default is 5 minutes: every task would be killed early
        raise RecipeError("--slurm: give each task's time limit, e.g. --slurm_option=--time=12:00:00 (a run's wall "
                          "time plus its evaluation; a task out of time is checkpointed and requeued)")
    if parallelism is not None:
        if parallelism < 1:
            raise RecipeError(f"--slurm_array_parallelism: expected a number of tasks at once >= 1, got {parallelism}")
        params["array_parallelism"] = parallelism
    return params


def submit(sweep_dir: Path, jobs: list[Job], launcher: str | None, params: dict) -> int:
    """Submit the array with submitit (`params`: slurm_parameters') when sbatch is on PATH; else say how to.
    Returns an exit code."""
    if shutil.which("sbatch") is None or shutil.which("srun") is None:
        print(f"sbatch/srun are not on PATH here: run this same command on a SLURM login node (submitit submits the "
              f"array of {len(jobs)} task(s) from there); `rlhf-recipes sweep {sweep_dir} --report` gathers it")
        return 0
    import submitit

    executor = submitit.SlurmExecutor(folder=sweep_dir.resolve() / SLURM_FOLDER)
    executor.update_parameters(**params)
    jobs = [dataclasses.replace(job, folder=job.folder.resolve()) for job in jobs]
    try:
        submitted = executor.map_array(SweepTask(), jobs, [launcher] * len(jobs))
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError) as e:
        lines = str(e).strip().splitlines()
        print(f"error: submitting the array failed: {lines[-1] if lines else type(e).__name__}", file=sys.stderr)
        return 1
    first = submitted[0].job_id.split("_")[0]
    print(f"submitted job array {first}: {len(submitted)} task(s), one per run; submitit's files and each task's "
          f"output: {sweep_dir / SLURM_FOLDER}")
    print(f"when the array is done (or at any time): rlhf-recipes sweep {sweep_dir} --report")
    return 0

