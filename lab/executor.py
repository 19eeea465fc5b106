"""The one place that launches, resumes and collects many runs: sweeps, nano-book, the HH pipeline, SLURM tasks.

A `Job` is one normal run of the runner (`recipes/run.py RECIPE ...`) in its own folder, optionally followed by
`rlhf-recipes evaluate RUN --baseline` (in the run's own process when no launcher is given: train_then_evaluate.py).
`run_one` carries a job from wherever its folder stands to done:
  - finished, evaluated (or no evaluation asked): nothing to do, never run again;
  - finished, not evaluated: only the evaluation;
  - started, with a complete checkpoint: `--resume` (an interrupted run continues exactly);
  - started, without one (killed before its first save): `--overwrite`, from the start;
  - new: a plain start.
A folder whose run has other settings than the job's is refused before anything runs (`check_settings`).
`Executor` runs jobs W at once (threads per run split so workers x threads <= cores; one GPU each where GPUs are
visible): concurrent.futures' thread pool, each worker thread waiting on its run's process (the runs are the
runner's own command lines, not Python callables, so a ProcessPoolExecutor does not serve). It shows a live table,
keeps going when a run fails, and on Ctrl-C / SIGTERM sends every running run ONE SIGTERM (it saves a checkpoint and
stops; the next invocation resumes it).
Each job's output (training, then evaluation) goes to `<folder>.log` beside its folder: it survives the runner's
--overwrite, which replaces the folder's content.
"""

from __future__ import annotations

import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rlhf_recipes.checkpoints import find_resumable_checkpoint
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.paths import RECIPES_DIR
from rlhf_recipes.run_folder import (
    EXIT_INTERRUPTED, EXIT_STILL_RUNNING, FINAL_RESULTS_FILE, has_config, read_config, read_results, run_finished,
)
from rlhf_recipes.run_lock import live_holder
from rlhf_recipes.run_setup import meaning_changes
from lab.train_then_evaluate import THEN_EVALUATE, command_header

STILL_RUNNING = "still running"


@dataclass(frozen=True)
class Job:
    name: str  # shown in the progress table and in errors
    folder: Path  # the run's output_dir
    train: tuple[str, ...]  # the runner's arguments, recipe first, without --output_dir
    evaluate: tuple[str, ...] | None = None  # extra `rlhf-recipes evaluate RUN --baseline` arguments; None: none
    eval_name: str = "sweep"  # the evaluation's file: <folder>/eval/<eval_name>.json

    @property
    def log(self) -> Path:
        return self.folder.parent / f"{self.folder.name}.log"

    @property
    def eval_output(self) -> Path:
        return self.folder / "eval" / f"{self.eval_name}.json"


@dataclass
class Outcome:
    job: Job
    status: str  # finished | failed | interrupted | still running (another live process holds the run's folder)
    did: str  # nothing | evaluated | trained | resumed | restarted
    wall_s: float = 0.0
    error: str | None = None


def next_step(job: Job, overwrite: bool = False) -> str:
    """done | evaluate | resume | restart | train: what carries the job's folder to done (overwrite: start over)."""
    if overwrite and has_config(job.folder):
        return "restart"
    if run_finished(job.folder):
        return "evaluate" if job.evaluate is not None and not job.eval_output.exists() else "done"
    if not has_config(job.folder):
        return "train"
    return "resume" if find_resumable_checkpoint(job.folder).checkpoint is not None else "restart"


def check_settings(job: Job) -> None:
    """The run already in the job's folder computes what the job asks; else a RecipeError naming the keys."""
    old = read_config(job.folder)
    if old is None:
        return
    from rlhf_recipes.config import load_recipe

    new = load_recipe([*job.train, "--output_dir", str(job.folder)], construct=False).resolved
    changes = meaning_changes(old, new)
    if changes:
        listed = "; ".join(f"`{k}` {o!r} -> {n!r}" for k, o, n in changes[:4])
        raise RecipeError(f"{job.folder} holds a run with other settings than this one asks ({listed}"
                          f"{' ...' if len(changes) > 4 else ''}); use another output folder, or --overwrite to "
                          "train it again")


def train_command(job: Job, step: str, launcher: str | None = None, then_evaluate: bool = False) -> list[str]:
    """The run's command; then_evaluate (no launcher): the run and its evaluation in one process
    (train_then_evaluate.py: the evaluation does not import everything again)."""
    start = shlex.split(launcher) if launcher else [sys.executable]
    extra = {"resume": ["--resume"], "restart": ["--overwrite"], "train": []}[step]
    run = [*job.train, "--output_dir", str(job.folder), *extra]
    if then_evaluate:
        return [sys.executable, "-m", "lab.train_then_evaluate", *run, THEN_EVALUATE,
                *evaluate_args(job)]
    # recipes/run.py by absolute path: runs land where the user stands, whatever the launcher's working dir
    return [*start, str(RECIPES_DIR / "run.py"), *run]


def evaluate_args(job: Job) -> list[str]:
    return [str(job.folder), "--baseline", "--output", str(job.eval_output), *(job.evaluate or ())]


# The child's first act before it becomes the run: prctl(PR_SET_PDEATHSIG, SIGTERM), then exec. A tiny Python of
# its own, not subprocess's preexec_fn: preexec_fn is unsafe in a process with threads (Python's subprocess docs),
# and the executor starts every run from a worker thread. It also ignores SIGUSR2, submitit's preemption signal,
# which SLURM may send to every process of the task: the task forwards ONE SIGTERM to the run (lab/sweep/slurm.py).
_END_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)\n"  # 1: PR_SET_PDEATHSIG
    "if os.getppid() != int(sys.argv[1]): sys.exit(143)\n"  # the parent died before the prctl: nobody would signal
    "signal.signal(signal.SIGUSR2, signal.SIG_IGN)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n")


def ending_with_this_process(command: list[str]) -> list[str]:
    """`command`, started so that the kernel sends it SIGTERM when this process dies, however it dies (SIGKILL, the
    OOM killer): a killed sweep leaves no run training on (and holding GPU memory) as an orphan.

    PR_SET_PDEATHSIG, kept over a process group killed on exit (start_new_session + killpg in a finally/atexit):
    no exit code of ours runs when the sweep is SIGKILLed, and the kernel acts at the moment of death with no
    watchdog process that could die too. It survives the exec (the flag is cleared only for set-uid binaries) and
    fires when the THREAD that started the child ends (each worker thread waits on its child for the child's whole
    life); it reaches the direct child only (the runner, or a launcher such as accelerate/torchrun, which pass
    SIGTERM on to their ranks). SIGTERM, not SIGKILL: the runner saves a checkpoint and stops, so the next
    invocation resumes. Unchanged where prctl does not exist (not Linux)."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-S", "-c", _END_WITH_PARENT, str(os.getpid()), *command]


def _run_logged(command: list[str], log: Path, env: dict[str, str] | None,
                started: Callable[[subprocess.Popen | None], None] | None, own_session: bool) -> int:
    with open(log, "a", encoding="utf-8") as out:
        out.write(command_header(command))
        out.flush()
        # Under the Executor a session of its own: Ctrl-C in the terminal reaches the executor, which forwards ONE
        # signal (a second one would skip the run's checkpoint save). Alone (the pipeline, a SLURM task) the run
        # stays in the caller's process group and gets the terminal's or scheduler's signals.
        proc = subprocess.Popen(ending_with_this_process(command), stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=own_session)
        started = started or (lambda proc: None)
        started(proc)
        try:
            return proc.wait()
        finally:
            started(None)


def run_one(job: Job, launcher: str | None = None, env: dict[str, str] | None = None,
            started: Callable[[subprocess.Popen | None], None] | None = None,
            stopping: Callable[[], bool] = lambda: False, overwrite: bool = False,
            own_session: bool = False) -> Outcome:
    """Carry one job to done (module docstring). Never raises for a run that fails: the Outcome says why.
    `started(proc)` / `started(None)` as each process starts and ends; own_session (the Executor's runs) starts
    them in a session of their own."""
    begin = time.perf_counter()
    step = next_step(job, overwrite)
    if step == "done":
        return Outcome(job, "finished", "nothing")
    holder = live_holder(job.folder)
    if holder is not None:  # e.g. a run of a killed sweep still saving its checkpoint, or one started by hand
        return Outcome(job, STILL_RUNNING, "nothing", 0.0,
                       f"still running in its folder: {holder.describe()}; left alone (not failed): run this "
                       "command again once it has ended, or stop it")
    job.folder.parent.mkdir(parents=True, exist_ok=True)
    did = "evaluated"
    if step != "evaluate":
        did = {"resume": "resumed", "restart": "restarted", "train": "trained"}[step]
        # One process for both unless a launcher starts the run, or the evaluation quantizes (the run's process
        # leaves bitsandbytes out unless the run itself loads quantized weights: quiet.leave_out_unused).
        together = job.evaluate is not None and launcher is None and "--quantize" not in job.evaluate
        code = _run_logged(train_command(job, step, launcher, then_evaluate=together), job.log, env, started,
                           own_session)
        finished = run_finished(job.folder)
        if code == EXIT_INTERRUPTED or (code != 0 and stopping()):
            return Outcome(job, "interrupted", did, time.perf_counter() - begin,
                           "stopped during its evaluation; the next invocation evaluates it" if finished else
                           "stopped by a signal; the next invocation resumes it from its checkpoint"
                           if next_step(job) == "resume" else "stopped by a signal before its first checkpoint "
                           "(the runner takes the signal with a save only once training has begun); the next "
                           "invocation starts it again")
        if not finished or (code != 0 and not together):
            return Outcome(job, "failed", did, time.perf_counter() - begin,
                           f"training exited {code}" + ("" if read_results(job.folder) is not None
                                                        else f" before writing {FINAL_RESULTS_FILE}"))
        if together:  # the run finished: the exit code is its evaluation's
            return _evaluated(job, did, code, begin, stopped=False)
    if job.evaluate is None:
        return Outcome(job, "finished", did, time.perf_counter() - begin)
    if stopping():
        return Outcome(job, "interrupted", did, time.perf_counter() - begin, "stopped before its evaluation")
    code = _run_logged([sys.executable, "-m", "rlhf_recipes.tools.cli", "evaluate", *evaluate_args(job)], job.log,
                       env, started, own_session)
    return _evaluated(job, did, code, begin, stopped=stopping())


def _evaluated(job: Job, did: str, code: int, begin: float, stopped: bool) -> Outcome:
    """The job's outcome once its evaluation (in the run's process or its own) exited with `code`."""
    if code == 0 and job.eval_output.exists():
        return Outcome(job, "finished", did, time.perf_counter() - begin)
    return Outcome(job, "interrupted" if stopped else "failed", did, time.perf_counter() - begin,
                   f"rlhf-recipes evaluate failed (exit {code}; its output is in {job.log})")


def visible_gpus() -> list[str]:
    """GPU ids a worker can be pinned to: CUDA_VISIBLE_DEVICES, else nvidia-smi's list; none on a CPU machine."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return [g for g in given.split(",") if g.strip()]
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(listed.splitlines()) if line.startswith("GPU ")]


def default_workers(jobs: int) -> int:
    """One run per GPU where there are GPUs; else one per core (each run then gets one thread)."""
    return max(1, min(jobs, len(visible_gpus()) or os.cpu_count() or 1))


class Executor:
    """Runs jobs W at a time (module docstring); `on_finish(outcome)` is called in this thread as each ends."""

    def __init__(self, workers: int, launcher: str | None = None, title: str = "runs", overwrite: bool = False):
        if workers < 1:
            raise RecipeError(f"--workers: expected a number of worker processes >= 1, got {workers}")
        self.workers, self.launcher, self.title, self.overwrite = workers, launcher, title, overwrite
        self._running: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def _env(self, slot: int, gpus: list[str]) -> dict[str, str]:
        # A user's OMP_NUM_THREADS wins (e.g. two sweeps side by side on one machine, each 1 thread per run):
        # more torch threads than cores makes every run several times slower, not a little.
        threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // self.workers))
        env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        if gpus and self.workers > 1 and self.launcher is None:
            env["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
        return env

    # Our own handler: concurrent.futures cannot stop work already running (cancel/shutdown drop only queued futures),
    # and each run must get exactly ONE SIGTERM to save its checkpoint.
    def _signal(self, signum, frame) -> None:
        if self._stop.is_set():  # a second Ctrl-C: stop at once, as the runner does
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self._stop.set()
        print(f"\n{signal.Signals(signum).name}: asking {len(self._running)} running run(s) to save a checkpoint "
              "and stop; the same command again resumes them", file=sys.stderr)
        with self._lock:
            for proc in self._running.values():
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def run(self, jobs: list[Job], on_finish: Callable[[Outcome], None] = lambda o: None) -> list[Outcome]:
        from lab.progress import Progress

        gpus = visible_gpus()
        slots: queue.SimpleQueue[int] = queue.SimpleQueue()  # a worker's slot: its GPU where GPUs are pinned
        for slot in range(self.workers):
            slots.put(slot)
        progress = Progress(jobs, self.workers, self.title)

        def work(job: Job) -> Outcome:
            if self._stop.is_set():
                return Outcome(job, "interrupted", "nothing", 0.0, "not started: the sweep was stopped")
            if next_step(job, self.overwrite) == "done":
                return Outcome(job, "finished", "nothing")
            slot = slots.get()
            progress.start(job)

            def started(proc):
                with self._lock:
                    if proc is None:
                        self._running.pop(slot, None)
                    else:
                        self._running[slot] = proc
                        if self._stop.is_set():  # the signal came while this run was starting
                            proc.send_signal(signal.SIGTERM)

            try:
                return run_one(job, self.launcher, self._env(slot, gpus), started, self._stop.is_set, self.overwrite,
                               own_session=True)
            except Exception as e:  # noqa: BLE001  (a folder we cannot read or write: this run fails, others go on)
                return Outcome(job, "failed", "nothing", 0.0, f"{type(e).__name__}: {e}")
            finally:
                slots.put(slot)

        handlers = {}
        if threading.current_thread() is threading.main_thread():
            handlers = {s: signal.signal(s, self._signal) for s in (signal.SIGINT, signal.SIGTERM)}
        outcomes: list[Outcome] = []
        try:
            # as_completed blocks on a lock that signals interrupt (their handler runs here, in the main thread);
            # the table redraws itself (Progress's Live), so nothing here polls
            with progress, ThreadPoolExecutor(max_workers=self.workers) as pool:
                for future in as_completed([pool.submit(work, job) for job in jobs]):
                    outcome = future.result()
                    outcomes.append(outcome)
                    progress.finish(outcome)
                    on_finish(outcome)
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        order = {job: i for i, job in enumerate(jobs)}
        return sorted(outcomes, key=lambda o: order[o.job])

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()


def run_plan(phases: list[list[Job]], *, workers: int | None, title: str, overwrite: bool = False,
             launcher: str | None = None, prepare: Callable[[], object] | None = None,
             on_finish: Callable[[Outcome], None] = lambda o: None,
             stop_on_failure: bool = False) -> tuple[int, list[Outcome]]:
    """A tool's plan on the executor: its phases one after another (a phase's jobs W at a time). stop_on_failure: every
    later job reads every earlier phase's runs (the pipeline's policies its one reward model), so a phase that did
    not finish ends the plan there: the later phases are named, not started (they would only fail after loading);
    without it the later phases run (the over-optimization study: an RL run needs only its own proxy, and the others
    go on). Runs kept from an earlier call must be the runs asked (else
    one line, exit 2, nothing run); `prepare` runs once before any job (the nano base built: every run would
    otherwise wait on its build's lock); each failure is named with its log.
    Returns (0 every job finished | 1 some failed | 75 only runs held by another live process left | 130
    interrupted | 2 bad input, the outcomes of the jobs started)."""
    todo = [job for phase in phases for job in phase]
    try:
        for job in [] if overwrite else todo:
            check_settings(job)  # a run kept from an earlier call must be the run this call asks for
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2, []
    if prepare is not None:
        prepare()
    if not todo:
        return 0, []
    executor = Executor(workers or default_workers(len(todo)), launcher, overwrite=overwrite, title=title)
    outcomes: list[Outcome] = []
    for number, phase in enumerate(phases):
        outcomes += executor.run(phase, on_finish=on_finish)
        if executor.stopped:
            return EXIT_INTERRUPTED, outcomes
        later = [job.name for rest in phases[number + 1:] for job in rest]
        if stop_on_failure and later and any(o.status != "finished" for o in outcomes):
            print(f"not started, as they read this phase's runs: {', '.join(later)}", file=sys.stderr)
            break
    unfinished = [o for o in outcomes if o.status != "finished"]
    for o in unfinished:  # the others stay reusable: the same command again runs only these
        what = o.job.name if o.status == STILL_RUNNING else f"error: {o.job.name}: {o.status}"  # held: not failed
        print(f"{what}: {o.error}; log: {o.job.log}", file=sys.stderr)
    elsewhere = all(o.status == STILL_RUNNING for o in unfinished)
    return (0 if not unfinished else EXIT_STILL_RUNNING if elsewhere else 1), outcomes
