"""`rlhf-recipes sweep` without training: the statistics against hand computations, cells and seeds, sweep files,
bad inputs (one line, exit 2, nothing written), what the executor does with each state of a run folder, the lock,
a failing run, and the report's numbers on made-up results."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlhf_recipes.errors import RecipeError
from lab.executor import Executor, Job, next_step, train_command
from lab.stats import few_seeds_warning, paired_difference, seed_interval
from lab.sweep import report, spec, state

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
DPO = str(RECIPES / "dpo.yaml")


# --- statistics ----------------------------------------------------------------------------------------------


def test_seed_interval_is_the_t_interval_computed_by_hand():
    # [1, 2, 3]: mean 2, sample std 1, t(0.975, df 2) = 4.302653 -> half-width 4.302653 / sqrt(3) = 2.484138
    out = seed_interval([1.0, 2.0, 3.0])
    assert out["n"] == 3 and out["mean"] == pytest.approx(2.0) and out["std"] == pytest.approx(1.0)
    assert out["low"] == pytest.approx(2 - 2.484138, abs=1e-6) and out["high"] == pytest.approx(2 + 2.484138, abs=1e-6)
    # two seeds: t(0.975, 1) = 12.7062; [0.4, 0.6]: mean 0.5, std 0.141421, half 12.7062 * 0.1 = 1.27062
    two = seed_interval([0.4, 0.6])
    assert two["low"] == pytest.approx(0.5 - 1.270620, abs=1e-5)
    one = seed_interval([0.7])
    assert one["mean"] == 0.7 and one["std"] is None and one["low"] is None
    same = seed_interval([0.5, 0.5, 0.5])
    assert same["low"] == same["high"] == 0.5
    assert seed_interval([])["mean"] is None


def test_paired_difference_uses_common_seeds_only():
    a = {0: 0.5, 1: 0.6, 2: 0.7, 3: 0.9}
    b = {0: 0.1, 1: 0.3, 2: 0.2}  # seed 3 missing in b: left out of the pairing
    out = paired_difference(a, b)
    diffs = [0.4, 0.3, 0.5]  # mean 0.4, std 0.1, half 4.302653 * 0.1 / sqrt(3) = 0.248414
    assert out["seeds"] == [0, 1, 2] and out["difference"] == pytest.approx(sum(diffs) / 3)
    assert out["low"] == pytest.approx(0.4 - 0.248414, abs=1e-6) and out["excludes_zero"] is True
    noisy = paired_difference({0: 0.1, 1: 0.9}, {0: 0.5, 1: 0.4})
    assert noisy["excludes_zero"] is False and noisy["low"] < 0 < noisy["high"]
    assert paired_difference({0: 1.0}, {0: 0.0})["excludes_zero"] is False  # one seed: no interval, no claim


def test_few_seeds_are_called_what_they_are():
    assert "12.7" in few_seeds_warning(2) and "5 or more" in few_seeds_warning(3)
    assert "no interval" in few_seeds_warning(1) and few_seeds_warning(5) is None


# --- what a sweep is -----------------------------------------------------------------------------------------


def test_cells_seeds_and_each_runs_arguments():
    s = spec.SweepSpec(recipe=DPO, profile="tiny", grid=spec.parse_grid(["beta=0.05,0.1", "learning_rate=1e-6,2e-6"]),
                       seeds=spec.parse_seeds(2, 5), overrides=["--max_steps", "3"])
    runs = s.runs()
    assert len(runs) == 8 and {r.seed for r in runs} == {5, 6}
    assert [r.cell for r in runs[::2]] == ["beta=0.05,learning_rate=1e-6", "beta=0.05,learning_rate=2e-6",
                                           "beta=0.1,learning_rate=1e-6", "beta=0.1,learning_rate=2e-6"]
    assert str(runs[1].relpath) == "beta=0.05,learning_rate=1e-6/seed-6"
    assert s.train_args(runs[1]) == [DPO, "--profile", "tiny", "--max_steps", "3", "--beta", "0.05",
                                     "--learning_rate", "1e-6", "--seed", "6"]
    assert spec.SweepSpec(recipe=DPO, seeds=[0, 1]).runs()[1].relpath == Path("default/seed-1")
    assert spec.cell_name({"data_files": "a/b c.jsonl"}) == "data_files=a_b_c.jsonl"


def test_a_wandb_grid_sweep_file_is_read(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(f"""program: recipes/run.py
method: grid
recipe: {DPO}
profile: tiny
metric: {{name: implicit_accuracy, goal: maximize}}
parameters:
  beta: {{values: [0.05, 0.1]}}
  seed: {{values: [3, 4]}}
  max_steps: {{value: 2}}
  reward_weights: {{value: [1.0, 0.5]}}
""")
    s = spec.from_file(str(path))
    assert s.grid == {"beta": ["0.05", "0.1"]} and s.seeds == [3, 4] and s.profile == "tiny"
    assert s.overrides == ["--max_steps", "2", "--reward_weights", "[1.0, 0.5]"] and s.metric == "implicit_accuracy"
    # the recipe may come from wandb's `command` instead
    path.write_text(f"method: grid\ncommand: [python, recipes/run.py, {DPO}, '${{args}}']\n"
                    "parameters: {beta: {values: [0.1]}}\nseeds: 2\n")
    assert spec.from_file(str(path)).recipe == DPO and spec.from_file(str(path)).seeds == [0, 1]


@pytest.mark.parametrize("text, message", [
    ("method: random\nrecipe: R\nparameters: {beta: {values: [0.1]}}", "only grid sweeps"),
    ("recipe: R\nparameters: {beta: {min: 0.01, max: 0.5}}", "needs `values: [...]` or `value: X`"),
    ("recipe: R\nparamters: {beta: {values: [0.1]}}", "Did you mean `parameters`?"),
    ("recipe: R\nearly_terminate: {type: hyperband}\nparameters: {beta: {values: [0.1]}}", "runs to its end"),
    ("parameters: {beta: {values: [0.1]}}", "no recipe"),
    ("recipe: R\nparameters: {beta: {values: []}}", "non-empty list"),
    ("recipe: R\nparameters: {seed: {values: [1.5]}}", "seeds must be integers"),
    ("recipe: R\nparameters: {output_dir: {value: x}}", "use --out DIR"),
    ("recipe: R\nparameters: [beta]", "must map each key"),
])
def test_bad_sweep_files_are_named(tmp_path, text, message):
    path = tmp_path / "sweep.yaml"
    path.write_text(text.replace("recipe: R", f"recipe: {DPO}"))
    with pytest.raises(RecipeError) as error:
        spec.from_file(str(path))
    assert message in str(error.value) and str(path) in str(error.value)


@pytest.mark.parametrize("argv, message", [
    (["--grid", "betta=0.1,0.2"], "Did you mean `beta`?"),
    (["--grid", "beta=abc"], "cell beta=abc: command line: `beta` must be"),
    (["--grid", "learning_rate=-1"], "learning_rate"),
    (["--grid", "beta="], "empty value"),
    (["--grid", "beta=0.1,,0.2"], "empty value"),
    (["--grid", "beta"], "expected KEY=V1,V2"),
    (["--grid", "beta=0.1", "--grid", "beta=0.2"], "swept twice"),
    (["--grid", "seed=1,2"], "use --seeds N"),
    (["--seeds", "0"], "number of seeds >= 1"),
    (["--first_seed", "4294967295", "--seeds", "2"], "must lie in 0..4294967295"),
    (["--workers", "0"], "--workers: expected"),
    (["--max_stepz", "3"], "Did you mean `max_steps`?"),
    # a misspelt flag of the sweep's own: the sweep's flag, said once where it was (not "command line: command line:")
    (["--seedz", "2"], "error: command line: unknown option `--seedz` for rlhf-recipes sweep. Did you mean `--seeds`?"),
])
def test_bad_input_is_one_line_before_anything_runs(tmp_path, capsys, argv, message):
    from lab.sweep.cli import main

    out = tmp_path / "sweep"
    assert main([DPO, "--profile", "tiny", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err, err
    assert not out.exists()


def test_unreadable_targets_are_named(tmp_path, capsys):
    from lab.sweep.cli import main

    broken = tmp_path / "broken.yaml"
    broken.write_text("parameters: [unclosed\n")
    for target, message in ((tmp_path / "missing.yaml", "no such recipe file"), (broken, "not valid YAML"),
                            (tmp_path, "not a sweep folder")):
        assert main([str(target)]) == 2
        err = capsys.readouterr().err
        assert message in err and str(target) in err


def test_report_of_a_missing_sweep_folder_says_sweep_folder(tmp_path, capsys):
    from lab.sweep.cli import main

    (tmp_path / "dpo-tiny").mkdir()
    assert main([str(tmp_path / "dpo-tin"), "--report"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path / 'dpo-tin'}: no such sweep folder. Did you mean `dpo-tiny`?"), err
    assert "recipe" not in err.split("--report")[0] and "\n" not in err


def test_report_of_a_kept_report_without_its_runs_leaves_it_as_it_is(tmp_path, capsys):
    """A shipped sweep (reference_runs/sweeps/*: its sweep_spec.json and report, no run folders) redrawn with --report
    was rewritten with empty cells ("0 seeds", metric None): now one line, and the report's files untouched."""
    import shutil

    from lab.sweep.cli import main

    shipped = Path(__file__).resolve().parents[1] / "reference_runs" / "sweeps" / "dpo_norm-nano-beta"
    kept = tmp_path / "kept"
    shutil.copytree(shipped, kept)
    before = {p.name: p.read_bytes() for p in kept.iterdir() if p.is_file()}
    assert main([str(kept), "--report"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {kept}: none of the sweep's") and "left as it is" in err and "\n" not in err, err
    assert {p.name: p.read_bytes() for p in kept.iterdir() if p.is_file()} == before


# --- the executor's bookkeeping -------------------------------------------------------------------------------


def _fake_run(folder: Path, status: str | None = "finished", evaluated: bool = False,
              checkpoint: bool = False, metrics: dict | None = None, gains: dict | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("algorithm: dpo\n")
    if checkpoint:
        (folder / "checkpoint-2").mkdir()
        from safetensors.numpy import save_file

        save_file({"w": np.zeros(2, dtype=np.float32)}, folder / "checkpoint-2" / "model.safetensors")
        (folder / "checkpoint-2" / "trainer_state.json").write_text("{}")  # transformers writes it last
    if status is not None:
        (folder / "final_results.json").write_text(json.dumps({"status": status, "wall_seconds": 1.5,
                                                               "final_metrics": metrics or {"loss": 0.5}}))
    if evaluated:
        (folder / "eval").mkdir()
        gains = gains or {}
        (folder / "eval" / "sweep.json").write_text(json.dumps({
            "metrics": {m: 0.5 + g for m, g in gains.items()},
            "difference": {m: {"value": g, "low": g - 0.1, "high": g + 0.1} for m, g in gains.items()}}))


def test_each_folder_state_gets_its_step(tmp_path):
    def job(name, evaluate=("--batch_size", "50")):
        return Job(name, tmp_path / name, (DPO, "--profile", "tiny"), evaluate)

    _fake_run(tmp_path / "done", evaluated=True)
    _fake_run(tmp_path / "unevaluated")
    _fake_run(tmp_path / "killed", status=None)
    _fake_run(tmp_path / "interrupted", status="interrupted", checkpoint=True)
    _fake_run(tmp_path / "failed", status="failed")
    assert next_step(job("done")) == "done" and next_step(job("unevaluated")) == "evaluate"
    assert next_step(job("unevaluated", evaluate=None)) == "done"  # no evaluation asked
    assert next_step(job("killed")) == "restart" and next_step(job("failed")) == "restart"
    assert next_step(job("interrupted")) == "resume" and next_step(job("new")) == "train"
    assert next_step(job("done"), overwrite=True) == "restart"
    assert train_command(job("interrupted"), "resume")[-1] == "--resume"
    assert train_command(job("killed"), "restart")[-1] == "--overwrite"
    assert train_command(job("new"), "train", "accelerate launch --num_processes 2")[:4] == [
        "accelerate", "launch", "--num_processes", "2"]


def test_each_run_gets_cores_over_workers_threads_unless_the_user_set_them(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert Executor(2)._env(0, [])["OMP_NUM_THREADS"] == "4" and Executor(16)._env(0, [])["MKL_NUM_THREADS"] == "1"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two sweeps side by side: the user's one thread per run wins
    assert Executor(2)._env(0, [])["OMP_NUM_THREADS"] == "1" == Executor(2)._env(1, [])["MKL_NUM_THREADS"]


def test_a_failing_run_does_not_stop_the_others_and_is_listed_with_its_log(tmp_path):
    """One job whose recipe does not exist (the runner exits 2), one already done: both are reported, the done
    one is not run again, and the failed one's log holds the runner's message."""
    _fake_run(tmp_path / "cell" / "seed-0", evaluated=True)
    done = Job("done", tmp_path / "cell" / "seed-0", (DPO,), ("--batch_size", "50"))
    broken = Job("broken", tmp_path / "cell" / "seed-1", (str(tmp_path / "nope.yaml"), "--profile", "tiny"))
    before = (done.folder / "final_results.json").stat().st_mtime_ns
    outcomes = Executor(workers=2).run([broken, done])
    assert [o.status for o in outcomes] == ["failed", "finished"] and outcomes[1].did == "nothing"
    assert "exited 2" in outcomes[0].error and "no such recipe file" in broken.log.read_text()
    assert (done.folder / "final_results.json").stat().st_mtime_ns == before


def test_a_run_and_its_evaluation_share_a_process_and_a_failed_evaluation_is_named_as_such(tmp_path):
    """Without a launcher a job's evaluation runs in its run's process (train_then_evaluate.py: no second round of
    imports); when the run finishes and its evaluation does not, the outcome blames the evaluation, not the
    training, and the next invocation only evaluates."""
    from lab.executor import run_one

    job = Job("bad-eval", tmp_path / "run", (DPO, "--profile", "tiny", "--max_steps", "1"), ("--k", "-1"))
    outcome = run_one(job)
    log = job.log.read_text()
    assert outcome.status == "failed" and outcome.did == "trained", outcome
    assert outcome.error.startswith("rlhf-recipes evaluate failed") and "training exited" not in outcome.error
    assert "train_then_evaluate" in log and "\n$ rlhf-recipes evaluate " in log and "--k" in log.split("\n$ ")[-1]
    assert next_step(job) == "evaluate"  # the run finished: only its evaluation is left


def test_a_plan_stops_at_a_phase_that_did_not_finish(tmp_path, capsys):
    """The pipeline's policies read its reward model (run_plan's stop_on_failure, as the pipeline calls it): a later
    phase is not started when an earlier one failed (it ran on before: the policies trained and failed after
    loading), and the exit code is the failure's."""
    from lab.executor import run_plan

    broken = Job("reward-model", tmp_path / "rm", (str(tmp_path / "nope.yaml"), "--profile", "tiny"))
    policy = Job("policy", tmp_path / "policy", (DPO, "--profile", "tiny"))
    code, outcomes = run_plan([[broken], [policy]], workers=1, title="plan", stop_on_failure=True)
    assert code == 1 and [(o.job.name, o.status) for o in outcomes] == [("reward-model", "failed")]
    assert not policy.log.exists() and not policy.folder.exists()
    err = capsys.readouterr().err
    assert "not started, as they read this phase's runs: policy" in err and "error: reward-model: failed" in err


def test_a_second_sweep_into_a_running_folder_is_refused_with_who_holds_it(tmp_path, capsys):
    """A real second process holds the folder's lock; the sweep says who and exits 2 without touching it."""
    from lab.sweep.cli import main

    out = tmp_path / "sweep"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from lab.sweep.state import SweepLock\n"
        f"with SweepLock(Path({str(out)!r})):\n    print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main([DPO, "--profile", "tiny", "--out", str(out), "--grid", "beta=0.1", "--no-evaluate"]) == 2
        err = capsys.readouterr().err
        assert "another sweep is writing into this folder" in err and f"pid {holder.pid}" in err
        assert not (out / "beta=0.1").exists()
    finally:
        holder.kill()
        holder.wait()
    with state.SweepLock(out):  # the holder is gone: the lock is free again
        pass


def test_sweep_numbers_keep_one_format_for_whole_and_missing_values():
    from lab.sweep.report import _num

    assert (_num(12345.0), _num(3.0, signed=True), _num(0.1234), _num(None), _num(float("nan"))) == \
        ("1.23e+04", "+3", "0.123", "-", "nan")


def test_another_sweep_in_the_same_folder_is_refused_but_wider_grids_and_seeds_merge(tmp_path):
    base = spec.SweepSpec(recipe=DPO, profile="tiny", grid={"beta": ["0.1"]}, seeds=[0])
    state.save(base, tmp_path)
    wider = spec.SweepSpec(recipe=DPO, profile="tiny", grid={"beta": ["0.2", "0.1"]}, seeds=[0, 1])
    merged = state.merged(wider, tmp_path, overwrite=False)
    assert merged.grid == {"beta": ["0.1", "0.2"]} and merged.seeds == [0, 1]
    other = spec.SweepSpec(recipe=DPO, profile="tiny", grid={"beta": ["0.1"]}, seeds=[0], overrides=["--max_steps", "9"])
    with pytest.raises(RecipeError, match="holds another sweep .*overrides"):
        state.merged(other, tmp_path, overwrite=False)
    assert state.merged(other, tmp_path, overwrite=True) is other


# --- the report on made-up results ----------------------------------------------------------------------------


def test_report_numbers_match_a_hand_computation(tmp_path):
    """Two cells x three seeds of made-up gains; one run of a third seed failed. The report's means, stds, intervals,
    ranking and paired difference are the hand-computed ones, and the failed run is listed with its log."""
    s = spec.SweepSpec(recipe=DPO, profile="tiny", grid={"beta": ["0.1", "0.5"]}, seeds=[0, 1, 2])
    gains = {"0.1": [0.10, 0.20, 0.30], "0.5": [0.30, 0.35, 0.40]}
    for value, per_seed in gains.items():
        for seed, gain in enumerate(per_seed):
            status = "failed" if (value, seed) == ("0.1", 2) else "finished"
            _fake_run(tmp_path / f"beta={value}" / f"seed-{seed}", status=status, evaluated=True,
                      gains={"implicit_accuracy": gain}, metrics={"loss": 1.0 - gain})
    result = report.build(s, tmp_path)
    assert result["key_metric"] == "gain/implicit_accuracy"
    best, worst = result["cells"]
    assert best["cell"] == "beta=0.5" and worst["cell"] == "beta=0.1"
    stats = best["metrics"]["gain/implicit_accuracy"]
    assert stats["mean"] == pytest.approx(0.35) and stats["std"] == pytest.approx(0.05)
    assert stats["high"] - stats["mean"] == pytest.approx(4.302653 * 0.05 / math.sqrt(3), abs=1e-6)
    assert worst["metrics"]["gain/implicit_accuracy"]["per_seed"] == {0: 0.10, 1: 0.20}  # the failed seed is out
    assert worst["metrics"]["final/loss"]["mean"] == pytest.approx(0.85)
    (pair,) = result["pairs"]  # seeds 0 and 1 in both: differences 0.20, 0.15 -> mean 0.175, std 0.035355
    assert pair["seeds"] == [0, 1] and pair["difference"] == pytest.approx(0.175)
    assert pair["high"] - pair["difference"] == pytest.approx(12.706205 * 0.0353553 / math.sqrt(2), abs=1e-5)
    assert pair["excludes_zero"] is False
    assert result["not_finished"] == [{"run": "beta=0.1/seed-2", "status": "failed", "log": "beta=0.1/seed-2.log"}]
    assert result["statistics"]["warning"].startswith("3 seeds per cell")
    text = report.text(result)
    assert "beta=0.5" in text and "0: +0.3, 1: +0.35, 2: +0.4" in text and "not finished: beta=0.1/seed-2" in text
    report.write(s, tmp_path)
    assert json.loads((tmp_path / "sweep.json").read_text())["cells"][0]["cell"] == "beta=0.5"
    assert (tmp_path / "sweep.png").stat().st_size > 10_000


def test_report_mode_redraws_a_sweep_folder_ranked_by_the_task_measure_into_out(tmp_path, capsys):
    """The default ranked metric is the task's held-out exact match (not DPO's implicit preference accuracy, which
    may rise while the task falls), the report says so; --metric re-ranks; --out writes the report elsewhere."""
    from lab.sweep.cli import main

    s = spec.SweepSpec(recipe=DPO, profile="tiny", grid={"beta": ["0.1"]}, seeds=[0, 1])
    state.save(s, tmp_path)
    for seed in (0, 1):
        _fake_run(tmp_path / "beta=0.1" / f"seed-{seed}", evaluated=True,
                  gains={"implicit_accuracy": 0.1 * seed, "exact_match": -0.2 * seed + 0.1})
    assert main([str(tmp_path), "--report"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "0: +0.1, 1: -0.1" in out and "ranked by gain/exact_match: the default, the family's task measure" in out
    report = json.loads((tmp_path / "sweep.json").read_text())
    assert report["key_metric"] == "gain/exact_match" and report["cells"][0]["learns"] is False
    assert main([str(tmp_path), "--report", "--metric", "implicit_accuracy"]) == 0  # re-ranked by another metric
    assert "0: +0, 1: +0.1" in capsys.readouterr().out
    report = json.loads((tmp_path / "sweep.txt").with_suffix(".json").read_text())
    assert report["key_metric"] == "gain/implicit_accuracy"
    assert report["cells"][0]["metrics"]["gain/implicit_accuracy"]["mean"] == pytest.approx(0.05)
    elsewhere = tmp_path / "elsewhere"
    before = (tmp_path / "sweep.json").read_text()
    assert main([str(tmp_path), "--report", "--out", str(elsewhere)]) == 0
    assert f"wrote {elsewhere / 'sweep.json'}" in capsys.readouterr().out
    assert json.loads((elsewhere / "sweep.json").read_text())["key_metric"] == "gain/exact_match"
    assert (elsewhere / "sweep.png").exists() and (tmp_path / "sweep.json").read_text() == before
    assert main([str(tmp_path), "--out", str(elsewhere)]) == 2  # running a sweep folder: --out would be ignored
    assert "a sweep folder runs in place" in capsys.readouterr().err


def test_held_out_values_pairs_and_the_figure_carry_the_interval_over_seeds_and_problems(tmp_path, monkeypatch):
    """Three seeds that agree on every problem (seed std 0): the held-out value's interval is not the zero-width
    seed interval but the one over seeds and problems, as the gain's is; the pair of cells too; sweep.png's legend
    names that interval, not "over seeds"."""
    from test_gain_interval import _evaluated_run

    from lab.stats import gain_interval
    from lab.sweep import plot as sweep_plot

    s = spec.SweepSpec(recipe=DPO, profile="tiny", grid={"beta": ["0.1", "0.5"]}, seeds=[0, 1, 2])
    for seed in range(3):
        _evaluated_run(tmp_path / "beta=0.1" / f"seed-{seed}", [1, 0, 1, 0], [0, 0, 0, 0])
        _evaluated_run(tmp_path / "beta=0.5" / f"seed-{seed}", [1, 1, 1, 0], [0, 0, 0, 0])
    result = report.build(s, tmp_path)
    cells = {c["cell"]: c["metrics"] for c in result["cells"]}
    held = cells["beta=0.1"]["heldout/exact_match"]
    assert held["std"] == 0.0 and held["over"] == "seeds and problems"
    assert held["low"] == pytest.approx(gain_interval([[1, 0, 1, 0]] * 3)["low"]) and held["low"] < held["high"]
    assert cells["beta=0.1"]["final/loss"]["over"] == "seeds"  # a training value: no problems
    (pair,) = result["pairs"]
    assert pair["over"] == "seeds and problems" and pair["low"] == pytest.approx(
        gain_interval([[0, 1, 0, 0]] * 3)["low"])
    text = " ".join(report.text(result).split())
    assert "[95%] of gain/exact_match, heldout/exact_match, a - b: over seeds and problems" in text
    labels = []
    monkeypatch.setattr(sweep_plot, "save_figure", lambda fig, path, title: labels.extend(
        t.get_text() for axis in fig.axes if axis.get_legend() for t in axis.get_legend().get_texts()))
    sweep_plot.plot(result, tmp_path, tmp_path / "sweep.png")
    assert "mean (95% interval over seeds and problems)" in labels, labels


def test_the_eta_is_unknown_until_a_run_finishes_then_lays_the_rest_onto_the_workers():
    """4 runs of ~5 min on 2 workers: no ETA before one has finished; with one run left, 100 s into it, 200 s (it
    was 100 s: the running run's rest divided by the 2 workers, as 1:41 was for runs of 5+ min)."""
    from lab.executor import Outcome
    from lab.progress import Progress

    jobs = [Job(f"run-{i}", Path(f"/nowhere/run-{i}"), (DPO,)) for i in range(4)]
    progress = Progress(jobs, 2, "sweep")
    assert progress.eta() is None and "ETA unknown until a run finishes" in progress.summary()
    for job in jobs[:3]:
        progress.start(job)
        progress.finish(Outcome(job, "finished", "trained", 300.0))
    progress.start(jobs[3])
    progress.running["run-3"] -= 100
    assert progress.eta() == pytest.approx(200, abs=2)


def test_slurm_options_map_onto_submitits_parameters():
    from lab.sweep.slurm import minutes, slurm_parameters

    assert [minutes(t) for t in ("90", "30:30", "12:00:00", "1-00", "1-02:03", "2-00:00:30")] == [
        90, 31, 720, 1440, 1563, 2881]
    params = slurm_parameters(["--time=01:00:00", "--cpus-per-task=8", "--gres=gpu:1", "--exclusive",
                               "--reservation=r1"], "sweep-x", 3)
    assert params == {"job_name": "sweep-x", "time": 60, "cpus_per_task": 8, "gres": "gpu:1", "exclusive": True,
                      "array_parallelism": 3, "additional_parameters": {"reservation": "r1"}}
    for options, message in ((["--time=soon"], "expected SLURM's time"), (["gres=gpu:1"], "expected --key=value"),
                             (["--time=5", "--output=x"], "sets --output itself"), ([], "--slurm_option=--time=")):
        with pytest.raises(RecipeError, match=message):
            slurm_parameters(options, "x", None)
    with pytest.raises(RecipeError, match="--slurm_array_parallelism"):
        slurm_parameters(["--time=5"], "x", 0)
