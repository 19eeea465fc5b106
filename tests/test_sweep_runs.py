"""`rlhf-recipes sweep` for real on the tiny profile: a 2 x 2 DPO sweep on 2 workers (evaluated, resumable,
widened by a seed), a sweep stopped by SIGTERM that the same command resumes from the runs' checkpoints, and the
SLURM array written, submitted to a fake `sbatch` on PATH, and one of its tasks run as SLURM would."""

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


def test_slurm_writes_one_job_array_submits_it_and_a_task_runs_as_slurm_would(tmp_path, capfd):
    out = tmp_path / "sweep"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch_calls"
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\necho 'Submitted batch job 4242'\n")
    (bin_dir / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = _sweep(capfd, DPO, "--profile", "tiny", "--grid", "beta=0.05,0.5", "--seeds", "2", "--no-evaluate",
                  "--out", str(out), "--slurm", "--slurm_option=--gres=gpu:1", "--slurm_option=--time=01:00:00",
                  path=env["PATH"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Submitted batch job 4242" in done.stdout
    sbatch = out / "sweep.sbatch"
    assert calls.read_text().split() == [str(sbatch)]
    text = sbatch.read_text()
    assert "#SBATCH --array=0-3" in text and "#SBATCH --gres=gpu:1" in text and "#SBATCH --time=01:00:00" in text
    assert not list(out.glob("*/seed-*/config.yaml"))  # submitting trains nothing here

    # Task 2 as SLURM runs it: the script, with SLURM_ARRAY_TASK_ID set.
    task = subprocess.run(["bash", str(sbatch)], env={**env, "SLURM_ARRAY_TASK_ID": "2"}, capture_output=True,
                          text=True, timeout=600, check=False)
    assert task.returncode == 0, task.stdout[-2000:] + task.stderr[-2000:]
    jobs = json.loads((out / "sweep_jobs.json").read_text())["jobs"]
    ran = Path(jobs[2]["folder"])
    assert ran == (out / "beta=0.5" / "seed-0").resolve() and (ran / "final_results.json").exists()
    assert [p for p in out.glob("*/seed-*/final_results.json")] == [out / "beta=0.5" / "seed-0" / "final_results.json"]

    without = _sweep(capfd, DPO, "--profile", "tiny", "--no-evaluate", "--out", str(tmp_path / "other"), "--slurm",
                     path="/usr/bin:/bin")
    assert without.returncode == 0 and "sbatch is not on PATH" in without.stdout
