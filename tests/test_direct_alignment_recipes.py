"""Every direct-alignment recipe end to end on the tiny profile; multi-process; interrupt and resume."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import RECIPES, ROOT, read_metrics, run_recipe
from rlhf_recipes.registry import ALGORITHMS

FAMILY = sorted(name for name, a in ALGORITHMS.items() if a.family == "direct_alignment")
OUTPUT_FILES = ("config.yaml", "metrics.jsonl", "final_results.json", "curves.png")


def test_every_direct_alignment_algorithm_has_its_recipe():
    """The registry is the list: each of its direct-alignment entries has recipes/<name>.yaml of that algorithm, and
    every algorithm the book's facts name (rlhf_recipes/book_reference.py) is a registry entry."""
    import yaml

    from rlhf_recipes.book_reference import BOOK

    for name in FAMILY:
        assert yaml.safe_load((RECIPES / f"{name}.yaml").read_text())["algorithm"] == name
    assert FAMILY and set(BOOK) <= set(ALGORITHMS)


@pytest.mark.parametrize("algorithm", FAMILY)
def test_recipe_runs_end_to_end(algorithm, tmp_path):
    out = tmp_path / algorithm
    results = run_recipe(f"{algorithm}.yaml", out)
    for name in OUTPUT_FILES:
        assert (out / name).is_file(), f"{name} missing"
    assert results["algorithm"] == algorithm and results["steps"] == 4 and not results["interrupted"]
    assert results["world_size"] == 1 and results["effective_batch_size"] == 4
    rows = [r for r in read_metrics(out) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert all(math.isfinite(r["loss"]) for r in rows)
    for metric in ALGORITHMS[algorithm].key_metrics:
        assert metric in rows[-1], f"{metric} not logged; got {sorted(rows[-1])}"


def test_config_yaml_reruns_the_same_recipe(tmp_path):
    first = tmp_path / "first"
    run_recipe("ipo.yaml", first, "--learning_rate", "1e-5")
    import yaml

    saved = yaml.safe_load((first / "config.yaml").read_text())
    assert saved["algorithm"] == "ipo" and saved["learning_rate"] == 1e-5 and saved["profile"] == "tiny"
    again = run_recipe(first / "config.yaml", tmp_path / "again")
    assert again["algorithm"] == "ipo" and again["steps"] == 4


# DPO on 2 processes (DDP and ZeRO-3: world size 2, the effective batch kept, accumulation halved, every step run,
# the losses finite) is tests/test_scale.py's test_dpo_one_and_two_processes_give_the_same_steps, which also compares
# each step with one process's: one launch per config for both claims.


@pytest.mark.slow  # a run interrupted by a signal, then resumed: ~30 s
def test_interrupt_then_resume_loses_nothing(tmp_path):
    steps = "30"
    straight = tmp_path / "straight"
    run_recipe("dpo.yaml", straight, "--max_steps", steps)

    out = tmp_path / "interrupted"
    cmd = [sys.executable, str(RECIPES / "run.py"), str(RECIPES / "dpo.yaml"), "--profile", "tiny",
           "--max_steps", steps, "--output_dir", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "RLHF_RECIPES_CACHE": os.environ["RLHF_RECIPES_CACHE"]})
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        metrics = out / "metrics.jsonl"
        if metrics.exists() and sum(1 for _ in metrics.open()) >= 2:
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.05)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr[-3000:]
    stopped = json.loads((out / "final_results.json").read_text())
    assert stopped["interrupted"] and 2 <= stopped["steps"] < int(steps)
    checkpoint = out / f"checkpoint-{stopped['steps']}"
    assert (checkpoint / "trainer_state.json").exists()

    resumed = run_recipe(out / "config.yaml", out, "--resume")
    assert resumed["steps"] == int(steps) and not resumed["interrupted"]
    logged = [r["step"] for r in read_metrics(out) if "loss" in r]
    assert logged == list(range(1, int(steps) + 1)), "every step logged exactly once across the two runs"
    # Same data order and optimizer state: the resumed curve is the uninterrupted one.
    reference = {r["step"]: r["loss"] for r in read_metrics(straight) if "loss" in r}
    for row in read_metrics(out):
        if "loss" in row:
            assert row["loss"] == pytest.approx(reference[row["step"]], rel=1e-4, abs=1e-6), row["step"]


@pytest.mark.slow  # wandb's own service process starts and syncs offline: ~20 s under load, twice
def test_wandb_offline_logging_needs_no_network_and_a_resume_logs_into_the_same_run(tmp_path, monkeypatch):
    """A resumed run (a crash, a SLURM requeue with --resume auto) continues its wandb run: every start used to open
    a new one, so one run's curves were split across several wandb runs."""
    for key in ("WANDB_RUN_ID", "WANDB_RESUME"):  # restored after the test: a resume sets them in this process
        monkeypatch.delenv(key, raising=False)
    out = tmp_path / "wandb"
    run_recipe("dpo.yaml", out, "--report_to", "wandb", "--wandb_mode", "offline", "--wandb_project", "rlhf-test",
               "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1")
    (first,) = (out / "wandb").glob("offline-run-*")
    (out / "final_results.json").unlink()  # as a crash leaves it
    run_recipe(out / "config.yaml", out, "--resume", "--max_steps", "3", "--allow_changes")
    runs = sorted(p.name for p in (out / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and {name.rsplit("-", 1)[1] for name in runs} == {first.name.rsplit("-", 1)[1]}, runs
