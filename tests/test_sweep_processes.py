"""A sweep's runs as processes: a sweep killed hard takes its runs with it; a run still held by a live process is
reported as running (with its pid), not failed; `--report --metric` with a name no run logged says so; a sweep
file's `1e-5` is a number. Fake run commands (a launcher that sleeps), so each test takes seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlhf_recipes.run_folder import EXIT_STILL_RUNNING
from lab.executor import STILL_RUNNING, Executor, Job, run_one, run_plan
from lab.sweep import spec, state

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
DPO = str(RECIPES / "dpo.yaml")
ROOT = Path(__file__).resolve().parent.parent

# Stands in for the runner: says its pid in <output_dir>/pid, then "trains" for a minute.
FAKE_RUN = """
import os, sys, time
from pathlib import Path
out = Path(sys.argv[sys.argv.index("--output_dir") + 1])
out.mkdir(parents=True, exist_ok=True)
(out / "pid.tmp").write_text(str(os.getpid()))
os.replace(out / "pid.tmp", out / "pid")
time.sleep(60)
"""


def _wait_for(path: Path, timeout: float = 30.0) -> str:
    deadline = time.time() + timeout
    while not path.exists():
        assert time.time() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.05)
    return path.read_text()


def _process_alive(pid: int) -> bool:
    """The process runs: it exists and is not a zombie (killed, not yet reaped)."""
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not _process_alive(pid):  # a zombie (killed, not reaped) counts as gone
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow  # a real sweep started, killed and waited on: ~30 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_sweep_killed_hard_takes_its_runs_with_it(tmp_path):
    fake = tmp_path / "fake_run.py"
    fake.write_text(FAKE_RUN)
    runs = [tmp_path / "sweep" / f"seed-{i}" for i in range(2)]
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from lab.executor import Executor, Job
        jobs = [Job(f"seed-{{i}}", Path(p), ({DPO!r},)) for i, p in enumerate({[str(r) for r in runs]!r})]
        Executor(2, launcher=f"{{sys.executable}} {str(fake)!r}").run(jobs)
    """))
    sweep = subprocess.Popen([sys.executable, str(driver)], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    pids = []
    try:
        pids = [int(_wait_for(run / "pid")) for run in runs]
        assert all(_process_alive(pid) for pid in pids)
        sweep.send_signal(signal.SIGKILL)  # no handler, no cleanup: as the OOM killer or a node failure
        sweep.wait()
        assert all(_gone_within(pid, 5.0) for pid in pids), "a run of the killed sweep is still running (orphan)"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_run_held_by_a_live_process_is_running_with_its_pid_not_failed(tmp_path, capsys):
    folder = tmp_path / "sweep" / "beta=0.1" / "seed-0"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("algorithm: dpo\n")  # a started run: the sweep would resume or restart it
    holder = subprocess.Popen([sys.executable, "-c", (
        "import time; from rlhf_recipes.run_lock import RunLock\n"
        f"lock = RunLock({str(folder)!r}, 'recipes/run.py recipes/dpo.yaml').acquire(); print('held', flush=True); "
        "time.sleep(60)")], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        job = Job("beta=0.1/seed-0", folder, (DPO, "--profile", "tiny"))
        outcome = run_one(job)
        assert outcome.status == STILL_RUNNING and outcome.did == "nothing"
        assert f"pid {holder.pid}" in outcome.error and "not failed" in outcome.error
        assert not job.log.exists()  # nothing was started into the folder
        (outcome,) = Executor(1).run([job])
        assert outcome.status == STILL_RUNNING
        assert "0 failed, 1 still running elsewhere" in " ".join(capsys.readouterr().err.split())
        # a tool's plan: exit 75 (try again), not an error; overwrite: this stub config.yaml is not a full run's
        code, _ = run_plan([[job]], workers=1, title="plan", overwrite=True)
        err = capsys.readouterr().err
        assert code == EXIT_STILL_RUNNING == 75 and "error:" not in err and "beta=0.1/seed-0: still running" in err
    finally:
        holder.kill()
        holder.wait()


def test_report_with_a_metric_no_run_logged_names_the_ones_they_have(tmp_path, capsys):
    from test_sweep_bookkeeping import _fake_run

    from lab.sweep.cli import main

    state.save(spec.SweepSpec(recipe=DPO, profile="tiny", grid={"beta": ["0.1"]}, seeds=[0, 1]), tmp_path)
    for seed in (0, 1):
        _fake_run(tmp_path / "beta=0.1" / f"seed-{seed}", metrics={"loss": 0.5, "rewards/accuracies": 0.75})
    assert main([str(tmp_path), "--report", "--metric", "exact_matc"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--metric exact_matc: no run logged it" in err
    assert "the runs have: final/loss, final/rewards/accuracies" in err
    assert not (tmp_path / "sweep.txt").exists()  # no empty table written
    assert main([str(tmp_path), "--report", "--metric", "loss"]) == 0  # a logged one still ranks the report
    assert "final/loss" in (tmp_path / "sweep.txt").read_text()


def test_a_sweep_files_1e_5_is_a_number_as_the_runner_reads_it(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"recipe: {DPO}\nprofile: tiny\nparameters:\n  learning_rate: {{values: [1e-5, 2.0e-5]}}\n"
                    "  beta: {value: 5e-1}\n")
    s = spec.from_file(str(path))
    # YAML 1.1 (PyYAML) reads `1e-5` as the text "1e-5" but `2.0e-5` as a float: both are numbers now
    assert s.grid == {"learning_rate": ["1e-05", "2e-05"]} and s.overrides == ["--beta", "0.5"]
    assert [r.cell for r in s.runs()] == ["learning_rate=1e-05", "learning_rate=2e-05"]
    same = tmp_path / "same.yaml"
    same.write_text(path.read_text().replace("1e-5", "1.0e-5"))
    assert [r.cell for r in spec.from_file(str(same)).runs()] == [r.cell for r in s.runs()]
    recipe = s.recipe_of(s.runs()[0])
    assert recipe.training.learning_rate == pytest.approx(1e-5)
