"""`rlhf-recipes sweep` for real on the tiny profile: a 2 x 2 DPO sweep on 2 workers (evaluated, resumable,
widened by a seed), a sweep stopped by SIGTERM that the same command resumes from the runs' checkpoints, and the
SLURM array submitted through submitit to a fake `sbatch` on PATH, one of its tasks run as SLURM would, and a task
preempted, requeued and resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlhf_recipes.run_folder import read_metrics

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
DPO = str(RECIPES / "dpo.yaml")
STEPS = 40  # the stopped sweep's run length


def _sweep(capfd, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    """`rlhf-recipes sweep ARGS` through the installed command's entry point, in this process, with PATH replaced by
    `path` while it runs; its runs are processes of their own as always. (A sweep process of its own cost seconds of
    imports for each call; the stopped sweep below is one, as it must be to take a signal.)"""
    from rlhf_recipes.tools.cli import main

    argv, old_path = sys.argv[:], os.environ["PATH"]
    capfd.readouterr()
    try:
        os.environ["PATH"] = path or old_path
        code = main(["sweep", *args])
    finally:
        sys.argv[:], os.environ["PATH"] = argv, old_path  # the command names itself in sys.argv for argparse
    out = capfd.readouterr()
    return subprocess.CompletedProcess(["rlhf-recipes", "sweep", *args], code, out.out, out.err)


def _mtimes(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.glob("*/seed-*/final_results.json")}


@pytest.mark.slow  # 6 tiny runs, each evaluated, 2 at a time: ~1.5-2 min
def test_a_2x2_sweep_on_two_workers_is_evaluated_resumable_and_widens(tmp_path, capfd):
    out = tmp_path / "sweep"
    args = [DPO, "--profile", "tiny", "--grid", "beta=0.05,0.5", "--seeds", "2", "--workers", "2", "--out", str(out)]
    done = _sweep(capfd, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    for cell in ("beta=0.05", "beta=0.5"):
        for seed in (0, 1):
            run = out / cell / f"seed-{seed}"
            config = yaml.safe_load((run / "config.yaml").read_text())
            assert config["seed"] == seed and config["beta"] == float(cell.split("=")[1])
            assert json.loads((run / "final_results.json").read_text())["status"] == "finished"
            assert "implicit_accuracy" in json.loads((run / "eval" / "sweep.json").read_text())["metrics"]
    report = json.loads((out / "sweep.json").read_text())
    assert report["key_metric"] == "gain/implicit_accuracy" and len(report["cells"]) == 2 and len(report["pairs"]) == 1
    assert all(c["metrics"]["final/loss"]["n"] == 2 for c in report["cells"])
    assert "beta=0.05" in done.stdout and (out / "sweep.png").stat().st_size > 10_000
    first = _mtimes(out)

    again = _sweep(capfd, *args)  # the same command: nothing runs again
    assert again.returncode == 0 and _mtimes(out) == first and "start " not in again.stderr

    wider = _sweep(capfd, *args[:-4], "--seeds", "3", "--workers", "2", "--out", str(out), "--no-evaluate")
    assert wider.returncode == 0, wider.stderr[-3000:]
    now = _mtimes(out)
    assert {k: now[k] for k in first} == first and len(now) == 6  # only seed 2 of each cell ran
    report = json.loads((out / "sweep.json").read_text())
    assert [c["metrics"]["final/loss"]["n"] for c in report["cells"]] == [3, 3]


@pytest.mark.slow  # 40 steps, stopped and resumed: ~1 min
def test_a_stopped_sweep_resumes_its_runs_from_their_checkpoints(tmp_path):
    """SIGTERM to the sweep: the running run saves a checkpoint and stops, the sweep exits 130; the same command
    resumes it (--resume, from that checkpoint) to the end, every optimizer step logged exactly once, then evaluates
    it (the run and its evaluation share a process: the signal reached the run through it)."""
    out = tmp_path / "sweep"
    # 40 steps (~1 s each on a CPU): SIGTERM lands after the 5th, well before the end (200 cost CI ~2.5 minutes)
    args = [sys.executable, "-m", "rlhf_recipes.tools.cli", "sweep", DPO, "--profile", "tiny",
            "--max_steps", str(STEPS), "--workers", "1", "--out", str(out)]
    sweep = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = out / "default" / "seed-0" / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and len(read_metrics(metrics)) < 5:
        time.sleep(0.5)
    assert len(read_metrics(metrics)) >= 5, "the run never started logging"
    sweep.send_signal(signal.SIGTERM)
    output, _ = sweep.communicate(timeout=240)
    assert sweep.returncode == 130, output[-3000:]
    run = out / "default" / "seed-0"
    assert json.loads((run / "final_results.json").read_text())["status"] == "interrupted"
    checkpoints = sorted(run.glob("checkpoint-*"))
    assert checkpoints, "the interrupted run saved no checkpoint"
    stopped_at = int(checkpoints[-1].name.split("-")[1])
    assert stopped_at < STEPS

    resumed = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    commands = [c.splitlines()[0] for c in (out / "default" / "seed-0.log").read_text().split("\n$ ")[1:]]
    assert "train_then_evaluate" in commands[-2] and "--resume" in commands[-2].split("--then-evaluate")[0]
    assert commands[-1].startswith("rlhf-recipes evaluate ") and (run / "eval" / "sweep.json").exists()
    assert json.loads((run / "final_results.json").read_text())["steps"] == STEPS
    steps = [r["step"] for r in read_metrics(metrics) if "loss" in r]
    assert steps == list(range(1, STEPS + 1))


# Stand-ins for SLURM's commands (submitit calls sbatch to submit, needs srun on PATH, and its task requeues itself
# with scontrol): sbatch records its file and answers as sbatch does; srun runs the command into its --output and
# --error files.
FAKE_SBATCH = """#!/bin/sh
echo "$@" >> "$SBATCH_CALLS"
echo 'Submitted batch job 4242'
"""
FAKE_SRUN = r"""#!/bin/bash
out=/dev/stdout; err=/dev/stderr
while [[ "$1" == --* ]]; do case "$1" in --output) out=$2; shift 2 ;; --error) err=$2; shift 2 ;; *) shift ;; esac; done
name() { local p=${1//\%A/$SLURM_ARRAY_JOB_ID}; p=${p//\%a/$SLURM_ARRAY_TASK_ID}; p=${p//\%j/$SLURM_JOB_ID}
         echo "${p//\%t/0}"; }
exec "$@" >> "$(name "$out")" 2>> "$(name "$err")"
"""
FAKE_SCONTROL = """#!/bin/sh
echo "$@" >> "$REQUEUES"
"""


def _slurm(tmp_path: Path, monkeypatch) -> dict[str, str]:
    """An environment whose PATH has the fake sbatch, srun and scontrol (their files named in this process's too)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("SBATCH_CALLS", str(tmp_path / "sbatch_calls"))
    monkeypatch.setenv("REQUEUES", str(tmp_path / "requeues"))
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _as_slurm_runs(task: int, array: str = "4242") -> dict[str, str]:
    """What SLURM sets for array task `task` of a one-node, one-task job, as submitit's SlurmJobEnvironment reads it."""
    return {"SLURM_JOB_ID": str(int(array) + 1 + task), "SLURM_ARRAY_JOB_ID": array, "SLURM_ARRAY_TASK_ID": str(task),
            "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NTASKS": "1",
            "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "node1"}


def test_slurm_submits_one_job_array_through_submitit_and_a_task_runs_as_slurm_would(tmp_path, capfd,
                                                                                       monkeypatch):
    out = tmp_path / "sweep"
    env = _slurm(tmp_path, monkeypatch)
    done = _sweep(capfd, DPO, "--profile", "tiny", "--grid", "beta=0.05,0.5", "--seeds", "2", "--no-evaluate",
                  "--out", str(out), "--slurm", "--slurm_option=--gres=gpu:1", "--slurm_option=--time=01:00:00",
                  "--slurm_option=--exclusive", "--slurm_array_parallelism", "2", path=env["PATH"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "submitted job array 4242: 4 task(s)" in done.stdout
    (submitted,) = Path(env["SBATCH_CALLS"]).read_text().split()
    text = Path(submitted).read_text()
    for line in ("#SBATCH --array=0-3%2", "#SBATCH --gres=gpu:1", "#SBATCH --time=60", "#SBATCH --exclusive",
                 "#SBATCH --signal=USR2@90", "-m submitit.core._submit"):
        assert line in text, text
    assert not list(out.glob("*/seed-*/config.yaml"))  # submitting trains nothing here

    # Task 2 as SLURM runs it: the submitted file, with the array task's environment.
    task = subprocess.run(["bash", submitted], env={**env, **_as_slurm_runs(2)}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert task.returncode == 0, task.stdout[-2000:] + task.stderr[-2000:]
    assert [p for p in out.glob("*/seed-*/final_results.json")] == [out / "beta=0.5" / "seed-0" / "final_results.json"]
    assert "finished beta=0.5/seed-0 (trained" in (out / "slurm" / "4242_2_0_log.out").read_text()
    assert (out / "slurm" / "4242_2_0_result.pkl").exists()  # submitit's record of the task's success

    bad = _sweep(capfd, DPO, "--profile", "tiny", "--no-evaluate", "--out", str(tmp_path / "bad"), "--slurm",
                 "--slurm_option=--array=0-9", path=env["PATH"])
    assert bad.returncode == 2 and "the sweep sets --array itself" in bad.stderr
    untimed = _sweep(capfd, DPO, "--profile", "tiny", "--no-evaluate", "--out", str(tmp_path / "bad"), "--slurm",
                     path=env["PATH"])  # submitit's default, 5 minutes, would kill every run early
    assert untimed.returncode == 2 and "--slurm_option=--time=" in untimed.stderr and untimed.stderr.count("\n") == 1
    without = _sweep(capfd, DPO, "--profile", "tiny", "--no-evaluate", "--out", str(tmp_path / "other"), "--slurm",
                     "--slurm_option=--time=30", path="/usr/bin:/bin")
    assert without.returncode == 0 and "run this same command on a SLURM login node" in without.stdout


@pytest.mark.slow  # 40 tiny steps, preempted after 5 and requeued, then resumed to the end: ~1-2 min
def test_a_preempted_slurm_task_checkpoints_its_run_requeues_and_the_requeued_task_resumes_it(tmp_path, capfd,
                                                                                             monkeypatch):
    """SIGUSR2 (submitit's signal, which SLURM sends to every process of the task, `--signal=USR2@90`) while the run
    trains: submitit calls the task's checkpoint, which has the run save a checkpoint and stop, then requeues the
    task (`scontrol requeue 4242_0`); the requeued task, run again, resumes the run to the end, each step logged
    once."""
    out = tmp_path / "sweep"
    env = _slurm(tmp_path, monkeypatch)
    done = _sweep(capfd, DPO, "--profile", "tiny", "--max_steps", str(STEPS), "--seeds", "2", "--no-evaluate",
                  "--out", str(out), "--slurm", "--slurm_option=--time=30", path=env["PATH"])
    assert done.returncode == 0, done.stderr[-3000:]
    (submitted,) = Path(env["SBATCH_CALLS"]).read_text().split()
    # the batch shell itself is not signalled (SLURM signals the task's processes): it ignores USR2 here
    task = subprocess.Popen(["bash", "-c", 'trap "" USR2; exec bash "$0"', submitted], env={**env, **_as_slurm_runs(0)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    metrics = out / "default" / "seed-0" / "metrics.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline and len(read_metrics(metrics)) < 5:
        assert task.poll() is None, task.communicate()[0][-3000:]
        time.sleep(0.5)
    assert len(read_metrics(metrics)) >= 5, "the run never started logging"
    os.killpg(task.pid, signal.SIGUSR2)  # every process of the task: submitit's, and the run's (which ignores it)
    task.communicate(timeout=240)
    log = (out / "slurm" / "4242_0_0_log.out").read_text() + (out / "slurm" / "4242_0_0_log.err").read_text()
    assert Path(env["REQUEUES"]).read_text().split() == ["requeue", "4242_0"], log[-3000:]
    run = out / "default" / "seed-0"
    results = json.loads((run / "final_results.json").read_text())
    assert results["status"] == "interrupted" and results["steps"] < STEPS, log[-3000:]
    assert (run / f"checkpoint-{results['steps']}").is_dir()

    again = subprocess.run(["bash", submitted], env={**env, **_as_slurm_runs(0)}, capture_output=True, text=True,
                           timeout=600, check=False)  # the requeued task: same job id, the checkpointed pickle
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    commands = [c.splitlines()[0] for c in (out / "default" / "seed-0.log").read_text().split("\n$ ")[1:]]
    assert "--resume" in commands[-1]
    assert json.loads((run / "final_results.json").read_text())["steps"] == STEPS
    assert [r["step"] for r in read_metrics(metrics) if "loss" in r] == list(range(1, STEPS + 1))
