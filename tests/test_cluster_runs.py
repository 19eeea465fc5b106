"""What a cluster job needs from a run: one command for every attempt (`--resume auto`), a checkpoint before the
time limit and a requeue (accelerate_configs/slurm/multinode.sbatch, run against stand-ins for `srun` and
`scontrol`), the console kept in the run folder (console.log), and a learning rate changed on resume that is the
rate trained, not only the one recorded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import RECIPES, ROOT, read_metrics
from rlhf_recipes.checkpoints import TRAINER_STATE
from rlhf_recipes.train import main as train

SIX = ["--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2"]


def tiny(out: Path, *extra: str) -> list[str]:
    return [str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--output_dir", str(out), *extra]


def losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(out) if "loss" in r}


@pytest.fixture(scope="module")
def started_by_auto(tmp_path_factory):
    """`--resume auto` into a folder that does not exist yet: the run starts (6 steps, a checkpoint every 2)."""
    out = tmp_path_factory.mktemp("auto") / "run"
    assert train(tiny(out, *SIX, "--resume", "auto")) == 0
    return out


def test_resume_auto_starts_resumes_from_the_newest_complete_checkpoint_and_refuses_a_finished_run(
        started_by_auto, tmp_path, capsys, caplog):
    reference = started_by_auto
    assert json.loads((reference / "final_results.json").read_text())["steps"] == 6
    assert {"checkpoint-4", "checkpoint-6"} <= {p.name for p in reference.glob("checkpoint-*")}

    # Killed while saving checkpoint-6 (no trainer_state.json yet): the same command continues from checkpoint-4.
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / "final_results.json").unlink()
    (out / "checkpoint-6" / TRAINER_STATE).unlink()
    assert train(tiny(out, *SIX, "--resume", "auto")) == 0
    assert f"--resume auto: skipping {out / 'checkpoint-6'}: no trainer_state.json" in caplog.text, caplog.text
    assert losses(out) == pytest.approx(losses(reference), rel=1e-4)  # steps 5-6 again, the same losses
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1, 2, 3, 4, 5, 6]

    # Finished: the same command again is refused in one line, and the folder is left as it was.
    before = (out / "final_results.json").read_text()
    assert train(tiny(out, *SIX, "--resume", "auto")) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and f"--resume auto: {out} holds a finished run" in err[0] and "--overwrite" in err[0], err
    assert (out / "final_results.json").read_text() == before

    # A finished run whose checkpoints were pruned: plain --resume says it is finished, not "no complete checkpoint".
    pruned = tmp_path / "pruned"
    shutil.copytree(out, pruned, ignore=shutil.ignore_patterns("checkpoint-*"))
    assert train(tiny(pruned, *SIX, "--resume")) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and f"--resume: {pruned} holds a finished run" in err[0] and "--overwrite" in err[0], err

    # Stopped before its first checkpoint (config.yaml, no checkpoint): the same command starts it over.
    again = tmp_path / "again"
    shutil.copytree(reference, again, ignore=shutil.ignore_patterns("checkpoint-*", "final_results.json"))
    assert train(tiny(again, *SIX, "--resume", "auto")) == 0
    assert losses(again) == pytest.approx(losses(reference), rel=1e-4)


def test_a_learning_rate_changed_on_resume_is_the_rate_trained(started_by_auto, tmp_path):
    """Before: config.yaml recorded the new rate while the restored scheduler kept training at the old one."""
    reference = started_by_auto
    out = tmp_path / "run"
    shutil.copytree(reference, out, ignore=shutil.ignore_patterns("checkpoint-6", "final_results.json"))
    assert train([str(out / "config.yaml"), "--resume", "--allow_changes", "--learning_rate", "1e-4"]) == 0
    assert yaml.safe_load((out / "config.yaml").read_text())["resumed_with_changes"] == [
        {"step": 4, "key": "learning_rate", "old": 5e-6, "new": 1e-4}]
    old = {r["step"]: r["learning_rate"] for r in read_metrics(reference) if "learning_rate" in r}
    new = {r["step"]: r["learning_rate"] for r in read_metrics(out) if "learning_rate" in r}
    assert {s: new[s] for s in (1, 2, 3, 4)} == pytest.approx({s: old[s] for s in (1, 2, 3, 4)})
    # The same schedule from step 5 on, 20x higher: the book's warmup-then-linear shape continues at the new peak.
    assert {s: new[s] for s in (5, 6)} == pytest.approx({s: old[s] * 20 for s in (5, 6)}, rel=1e-6)
    assert losses(out)[6] != pytest.approx(losses(reference)[6], rel=1e-4)


def test_the_console_log_is_kept_in_the_run_folder_and_appended_on_resume(started_by_auto, tmp_path):
    """The run's log lines (ours, TRL's, transformers' warnings) land in console.log as they are logged; a resume
    appends under its own header."""
    out = tmp_path / "run"
    shutil.copytree(started_by_auto, out, ignore=shutil.ignore_patterns("checkpoint-6", "final_results.json"))
    log = out / "console.log"
    first = log.read_text()
    assert first.startswith("==== ") and " started: recipes/run.py " in first
    assert train([str(out / "config.yaml"), "--resume"]) == 0
    text = log.read_text()
    assert text.startswith(first), "a resume appends"
    resumed = text[len(first):]
    assert resumed.startswith("==== ") and "resumed from checkpoint-4: recipes/run.py" in resumed.splitlines()[0]
    assert f"INFO rlhf_recipes: done: {out / 'final_results.json'}" in resumed, resumed[-2000:]


def test_the_console_log_keeps_the_last_lines_of_a_run_that_dies_hard(tmp_path):
    """A run killed without a stop (a segfault, an NCCL abort, os._exit) still has its last logged lines in
    console.log: each record is flushed as it is written."""
    log = tmp_path / "console.log"
    script = ("import logging, os\n"
              "from pathlib import Path\n"
              "from rlhf_recipes.console_log import ConsoleLog\n"
              f"ConsoleLog(Path({str(log)!r}), 'started')\n"
              "logging.getLogger('rlhf_recipes').warning('the last line before the crash')\n"
              "logging.getLogger('transformers.trainer').warning('a library warning')\n"
              "os._exit(3)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    text = log.read_text()
    assert text.startswith("==== ") and "the last line before the crash" in text and "a library warning" in text


# --------------------------------------------------------------------------------------
# The SLURM script: a signal before the time limit, a checkpoint, a requeue, and the same command resuming


# `srun`: its command once per node, each in its own process group; a signal srun gets is passed on to every
# process of each task, as slurmstepd does (proctrack/cgroup). `scontrol`: this host's name; a requeue is recorded.
FAKE_SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((node = 0; node < SLURM_NNODES; node++)); do SLURM_NODEID=$node setsid "$@" & pids+=($!); done
trap 'for p in "${pids[@]}"; do kill -USR1 -- "-$p" 2>/dev/null; done' USR1
status=0
for pid in "${pids[@]}"; do
  while true; do s=0; wait "$pid" || s=$?; if [ $s -gt 128 ] && kill -0 "$pid" 2>/dev/null; then continue; fi; break; done
  [ $s -eq 0 ] || status=1
done
exit $status
"""
FAKE_SCONTROL = """#!/bin/bash
if [ "$1" = requeue ]; then echo "$@" >> "$REQUEUES"; exit 0; fi
echo 127.0.0.1
"""
ONE_PROCESS = "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nnum_machines: 1\nnum_processes: 1\n" \
              "mixed_precision: 'no'\nuse_cpu: true\n"


def sbatch_directives() -> list[str]:
    text = (ROOT / "accelerate_configs" / "slurm" / "multinode.sbatch").read_text()
    return [line.split("#", 2)[1].split()[1] for line in text.splitlines() if line.startswith("#SBATCH ")]


def test_the_sbatch_script_asks_for_a_signal_the_runs_stop_on_and_may_be_requeued():
    from rlhf_recipes.signals import INTERRUPT_SIGNALS

    directives = sbatch_directives()
    assert "--requeue" in directives
    wanted = next(d for d in directives if d.startswith("--signal="))
    name = wanted.removeprefix("--signal=").removeprefix("B:").split("@")[0]
    assert getattr(signal, f"SIG{name}") in INTERRUPT_SIGNALS, (wanted, INTERRUPT_SIGNALS)


@pytest.mark.slow
def test_the_sbatch_script_checkpoints_at_the_signal_requeues_and_the_same_command_resumes(tmp_path):
    bin_dir = tmp_path / "fake-slurm"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    config = tmp_path / "one_process.yaml"
    config.write_text(ONE_PROCESS)
    out, requeues = tmp_path / "run", tmp_path / "requeues"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{bin_dir}:{os.path.dirname(sys.executable)}:"
           f"{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node1", "SLURM_NNODES": "1", "SLURM_GPUS_ON_NODE": "1",
           "SLURM_JOB_ID": "4242", "ACCELERATE_CONFIG": str(config), "REQUEUES": str(requeues)}
    cmd = ["bash", "accelerate_configs/slurm/multinode.sbatch", "recipes/dpo.yaml", "--profile", "tiny",
           "--max_steps", "60", "--output_dir", str(out)]

    job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while not (out / "metrics.jsonl").exists() or not read_metrics(out):
        assert job.poll() is None and time.time() < deadline, job.communicate()[0][-3000:]
        time.sleep(0.2)
    job.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@300 does 5 minutes before the limit
    output = job.communicate(timeout=240)[0]
    results = json.loads((out / "final_results.json").read_text())
    assert results["status"] == "interrupted" and results["steps"] < 60, output[-3000:]
    stopped_at = results["steps"]
    assert (out / f"checkpoint-{stopped_at}" / TRAINER_STATE).exists()
    assert requeues.read_text().split() == ["requeue", "4242"], output[-3000:]

    # The requeued job: the same command continues from that checkpoint and finishes.
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert json.loads((out / "final_results.json").read_text())["status"] == "finished"
    steps = [r["step"] for r in read_metrics(out) if "loss" in r]
    assert steps == list(range(1, 61))
    log = (out / "console.log").read_text()
    headers = [line for line in log.splitlines() if line.startswith("==== ")]
    assert len(headers) == 2 and " started: " in headers[0], headers
    assert f" resumed from checkpoint-{stopped_at}: " in headers[1] and headers[1].endswith("--resume auto"), headers
    assert f"interrupted at step {stopped_at}" in log  # the run's own warning, from the first attempt's console


def test_a_learning_rate_change_reaches_the_scheduler_deepspeed_steps():
    """Under DeepSpeed the trainer holds accelerate's DeepSpeedSchedulerWrapper around the LambdaLR the engine steps
    (it has no base_lrs of its own): the change must scale the LambdaLR inside, or the engine's next step puts the
    old rate back. The same callback as a one-process run, on the wrapper the DeepSpeed path hands it."""
    import torch
    from accelerate.utils.deepspeed import DeepSpeedSchedulerWrapper

    from rlhf_recipes.callbacks import LearningRateChange

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    inner = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / 10)
    inner.step()  # one step into the schedule, as a restored checkpoint is
    wrapper = DeepSpeedSchedulerWrapper(inner, optimizer)
    LearningRateChange(old=1e-3, new=2e-2).on_train_begin(None, None, None, optimizer=optimizer, lr_scheduler=wrapper)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2e-2 * 0.9)
    inner.step()  # what the engine does at the next optimizer step
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2e-2 * 0.8)
