"""`rlhf-recipes compare`: reference runs mapped onto our axes, verdicts, and run-vs-run views.

All offline. The wandb histories under tests/fixtures/wandb/ are constructed (see
make_fixtures.py there): they copy the layouts of wandb's exports, not any book data; so are the histories of the
book's three published reward-model runs (1g3y9bcc, 3gkoqb7f, iv4d966d) at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlhf_recipes.tools.compare import CompareError, compare_local_runs, compare_with_reference, references
from rlhf_recipes.tools.compare.load import load_reference_csvs, load_run, read_metrics_jsonl
from rlhf_recipes.tools.compare.references import (
    SPECS,
    align_reference,
    book_step_to_optimizer_step,
    count_optimizer_steps,
    lookup,
    optimizer_steps_per_rollout,
)
from rlhf_recipes.tools.compare.verdict import (
    OUTSIDE,
    WITHIN,
    compare_to_reference,
    final_mean,
    noise_sigma,
    shared_window,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "wandb"
API_GRPO = FIXTURES / "api_history_grpo.csv"
UI_AVG_TOTAL = FIXTURES / "ui_export_grpo_avg_total.csv"
UI_LOSS = FIXTURES / "ui_export_grpo_loss.csv"
UI_TWO_RUNS = FIXTURES / "ui_export_two_runs_avg_total.csv"
API_DPO = FIXTURES / "api_history_dpo.csv"
ROLLOUTS, K = 40, 4  # the constructed grpo history: 40 rollouts x 4 optimizer steps


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """No test may reach wandb: the probe says offline and a fetch fails loudly."""
    monkeypatch.setattr(references, "network_available", lambda timeout=0: (False, "tests run offline"))

    def _refuse(path):
        raise AssertionError(f"a test tried to fetch {path} from wandb")

    monkeypatch.setattr(references, "fetch_history", _refuse)


# --- helpers: runs in the recipe runner's exact output format -----------------------------


def write_run(run_dir: Path, algorithm: str, rows: list[dict]) -> Path:
    """metrics.jsonl rows as TrainerCallback.on_log writes them, plus the closing summary
    row, final_results.json and config.yaml."""
    run_dir.mkdir(parents=True)
    last = max(r["step"] for r in rows)
    summary = {"step": last, "epoch": 1.0, "train_runtime": 12.3, "train_loss": 0.5,
               "train_samples_per_second": 9.9, "total_flos": 0.0}
    with (run_dir / "metrics.jsonl").open("w") as f:
        for row in [*rows, summary]:
            f.write(json.dumps(row) + "\n")
    final = {"algorithm": algorithm, "model": "tiny", "dataset": "fixture", "world_size": 1,
             "effective_batch_size": 8, "steps": last, "wall_seconds": 12.3,
             "final_metrics": {}, "profile": "tiny"}
    (run_dir / "final_results.json").write_text(json.dumps(final))
    (run_dir / "config.yaml").write_text(f"algorithm: {algorithm}\n")
    return run_dir


def grpo_rows_from_fixture(reward_shift: float = 0.0) -> list[dict]:
    """Our GRPO run that logged exactly the constructed reference: TRL logs a generation's
    rewards on the first optimizer step that trains on it, in the same row as that step's loss."""
    ref = pd.read_csv(API_GRPO).set_index("_step")
    rows = []
    for r in range(ROLLOUTS):
        reward_row = ref.loc[r * (K + 1)]
        for j in range(1, K + 1):
            update_row = ref.loc[r * (K + 1) + j]
            row = {"step": r * K + j, "epoch": 0.1, "loss": update_row["loss"],
                   "grad_norm": update_row["grad_norm"], "learning_rate": 5e-6}
            if j == 1:
                row.update({
                    "reward": reward_row["avg_total"] + reward_shift,
                    "reward_std": 0.1,
                    "rewards/correctness_reward/mean": reward_row["avg_correctness"],
                    "rewards/format_reward/mean": reward_row["avg_format"],
                    "completions/mean_length": 100.0,
                })
            rows.append(row)
    return rows


def da_rows(steps: int, accuracy_end: float, kl: bool = False) -> list[dict]:
    rows = []
    for s in range(1, steps + 1):
        row = {"step": s, "epoch": s / steps, "loss": 0.7 - 0.01 * s, "grad_norm": 1.0,
               "learning_rate": 5e-6, "rewards/chosen": 0.01 * s, "rewards/rejected": -0.01 * s,
               "rewards/margins": 0.02 * s, "rewards/accuracies": 0.5 + (accuracy_end - 0.5) * s / steps,
               "logps/chosen": -100.0, "logps/rejected": -120.0}
        if kl:
            row["kl"] = 0.001 * s
        rows.append(row)
    return rows


# --- references.py: transcribed facts ------------------------------------------------------


def test_published_run_ids_match_book_md():
    expected = {"reinforce": "0uqbq4oz", "rloo": "07xeasn8", "ppo": "ku3r3g9j", "grpo": "vjp7lgdi",
                "drgrpo": "a1swuynq", "gspo": "10sxytli", "cispo": "6dg0m06n", "sapo": "79608nwk",
                "dapo": "db1pipip", "maxrl": "fdowf1se", "preference_rm": "1g3y9bcc",
                "orm": "3gkoqb7f", "prm": "iv4d966d", "sft": "nybj8sdx",
                # direct alignment (the book's code/direct_alignment/README.md); no cdpo run
                "dpo": "fzy8k8go", "dpo_norm": "giyhitjw", "ipo": "5s29syo6", "simpo": "ftv5rs3x",
                "orpo": "o38ffli5", "kto": "hgqrkfi6", "apo_zero": "3m2uiyw3", "apo_down": "tqzkmyi6",
                # rejection sampling, one run per selection rule
                "rejection_sampling_top_per_prompt": "ohm3xnga", "rejection_sampling_random_per_prompt": "y3pbcla7",
                "rejection_sampling_top_k_overall": "w75hklzs", "rejection_sampling_random_k_overall": "egeyr1q3"}
    assert {a: s.run_id for a, s in SPECS.items() if s.run_id} == expected
    assert lookup("grpo").wandb_path == "rlhf-book/core/vjp7lgdi"
    assert lookup("dpo").wandb_path == "rlhf-book/core/fzy8k8go"
    assert lookup("dr_grpo").algorithm == "drgrpo"
    assert lookup("cdpo").run_id is None  # the book publishes no cDPO run


def test_optimizer_steps_per_rollout_follow_the_books_loop():
    # buffer / micro-batch 2 / 4 micro-batches per step
    assert optimizer_steps_per_rollout(4, 8) == 4
    assert optimizer_steps_per_rollout(8, 1) == 1  # reinforce
    assert optimizer_steps_per_rollout(16, 1) == 2  # ppo


def test_book_step_formula_places_reward_rows_on_the_first_step_of_their_rollout():
    # k=4: steps 0..9 are R U U U U R U U U U
    assert book_step_to_optimizer_step(np.arange(10), 4).tolist() == [1, 1, 2, 3, 4, 5, 5, 6, 7, 8]
    # reinforce, k=1: R U R U
    assert book_step_to_optimizer_step(np.arange(4), 1).tolist() == [1, 1, 2, 2]
    is_update = np.array([False, True, True, False, True, False])
    assert count_optimizer_steps(is_update).tolist() == [1, 1, 2, 3, 3, 4]


# --- load.py + references.py's alignment on the fixture CSVs -------------------------------------------------


def _expected_grpo():
    ref = pd.read_csv(API_GRPO)
    rollout_rows = ref[ref["avg_total"].notna()]
    update_rows = ref[ref["loss"].notna()]
    reward_steps = [r * K + 1 for r in range(ROLLOUTS)]
    return reward_steps, rollout_rows, update_rows


def test_api_history_csv_maps_names_and_counts_optimizer_steps():
    history = load_reference_csvs([API_GRPO])
    assert history.complete
    assert "_runtime" not in history.frame.columns  # bookkeeping dropped
    aligned = align_reference(history, lookup("grpo"))
    assert aligned.x_mapping.startswith("counted")
    reward_steps, rollout_rows, update_rows = _expected_grpo()

    reward = aligned.metrics["reward"]
    assert reward.book == "avg_total"
    assert reward.steps.tolist() == reward_steps
    np.testing.assert_allclose(reward.values, rollout_rows["avg_total"])
    corr = aligned.metrics["rewards/correctness_reward/mean"]
    np.testing.assert_allclose(corr.values, rollout_rows["avg_correctness"])
    loss = aligned.metrics["loss"]
    assert loss.steps.tolist() == list(range(1, ROLLOUTS * K + 1))
    np.testing.assert_allclose(loss.values, update_rows["loss"])
    assert "rewards/penalty_reward/mean" not in aligned.metrics  # not logged: not invented


def test_ui_exports_of_two_charts_merge_into_the_same_alignment():
    history = load_reference_csvs([UI_AVG_TOTAL, UI_LOSS])
    assert set(history.frame.columns) == {"_step", "avg_total", "loss"}
    aligned = align_reference(history, lookup("grpo"))
    api = align_reference(load_reference_csvs([API_GRPO]), lookup("grpo"))
    for metric in ("reward", "loss"):
        np.testing.assert_array_equal(aligned.metrics[metric].steps, api.metrics[metric].steps)
        np.testing.assert_allclose(aligned.metrics[metric].values, api.metrics[metric].values)


def test_single_ui_chart_uses_the_rollout_structure_formula():
    history = load_reference_csvs([UI_AVG_TOTAL])
    assert not history.complete  # only every 5th wandb step: counting is impossible
    aligned = align_reference(history, lookup("grpo"))
    assert "s // 5" in aligned.x_mapping
    assert aligned.metrics["reward"].steps.tolist() == _expected_grpo()[0]


def test_sampled_loss_export_still_lands_on_the_right_optimizer_steps(tmp_path):
    # wandb's UI samples long histories; keep every 3rd loss point of the export.
    ui = pd.read_csv(UI_LOSS)
    sampled = ui.iloc[::3]
    path = tmp_path / "loss_sampled.csv"
    sampled.to_csv(path, index=False)
    aligned = align_reference(load_reference_csvs([path]), lookup("grpo"))
    full = align_reference(load_reference_csvs([API_GRPO]), lookup("grpo")).metrics["loss"]
    expected = dict(zip(full.steps, full.values))
    got = aligned.metrics["loss"]
    assert len(got.steps) == len(sampled)
    for step, value in zip(got.steps, got.values):
        assert expected[step] == pytest.approx(value)


def test_reward_row_spacing_in_the_data_overrides_a_wrong_structure(tmp_path):
    # A reinforce-shaped export (1 optimizer step per rollout: R U R U ...) given as grpo.
    path = tmp_path / "r.csv"
    pd.DataFrame({"Step": [0, 2, 4, 6], "x - avg_total": [1.0, 2.0, 3.0, 4.0]}).to_csv(path, index=False)
    aligned = align_reference(load_reference_csvs([path]), lookup("grpo"))
    assert aligned.metrics["reward"].steps.tolist() == [1, 2, 3, 4]
    assert any("2 wandb steps apart" in n for n in aligned.notes)


def test_ui_export_with_two_runs_needs_a_run_name():
    with pytest.raises(CompareError, match="constructed-grpo, constructed-other"):
        load_reference_csvs([UI_TWO_RUNS])
    history = load_reference_csvs([UI_TWO_RUNS], run_name="constructed-other")
    # The other run's points sit at steps 2, 7, ... (empty cells elsewhere were dropped).
    assert history.frame["_step"].tolist()[:3] == [2, 7, 12]
    mine = load_reference_csvs([UI_TWO_RUNS], run_name="constructed-grpo")
    np.testing.assert_allclose(mine.frame["avg_total"], pd.read_csv(UI_AVG_TOTAL).iloc[:, 1])


def test_csv_without_a_step_column_explains_how_to_export(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text('"Relative Time (Process)","x - avg_total"\n1.0,0.5\n')
    with pytest.raises(CompareError, match="X axis = Step"):
        load_reference_csvs([path])


def test_direct_alignment_rescalings_are_applied():
    history = load_reference_csvs([API_DPO])
    assert "samples" not in history.frame.columns  # a table blob is not a metric
    raw = pd.read_csv(API_DPO)
    dpo = align_reference(history, lookup("dpo")).metrics
    assert dpo["grad_norm"].steps.tolist() == list(range(1, 31))  # step=global_step: identity
    np.testing.assert_allclose(dpo["grad_norm"].values, raw["grad_norm"] * 8)  # x accumulation
    np.testing.assert_allclose(dpo["rewards/margins"].values, raw["margins"])
    np.testing.assert_allclose(dpo["rewards/accuracies"].values, raw["accuracy"])
    simpo = align_reference(history, lookup("simpo")).metrics
    np.testing.assert_allclose(simpo["rewards/margins"].values, raw["margins"] * 2.0)  # x beta
    cdpo = align_reference(history, lookup("cdpo")).metrics
    np.testing.assert_allclose(cdpo["grad_norm"].values, raw["grad_norm"] * 4)


def test_reward_model_names_map_by_rule(tmp_path):
    path = tmp_path / "rm.csv"
    pd.DataFrame({"_step": [1, 2, 25], "train/accuracy": [0.5, 0.6, None],
                  "train/reward_margin": [0.1, 0.2, None], "val/accuracy": [None, None, 0.7],
                  "val/step_accuracy": [None, None, 0.4]}).to_csv(path, index=False)
    metrics = align_reference(load_reference_csvs([path]), lookup("prm")).metrics
    assert metrics["accuracy"].values.tolist() == [0.5, 0.6]
    assert metrics["margin"].values.tolist() == [0.1, 0.2]
    assert metrics["eval_accuracy"].steps.tolist() == [25]
    assert metrics["eval_step_accuracy"].values.tolist() == [0.4]  # val/* -> eval_* by rule


def test_metrics_jsonl_merges_eval_rows_and_keeps_the_summary_apart(tmp_path):
    run = write_run(tmp_path / "rm", "preference_rm", [
        {"step": 1, "epoch": 0.5, "loss": 0.7, "accuracy": 0.5, "margin": 0.0},
        {"step": 2, "epoch": 1.0, "loss": 0.6, "accuracy": 0.75, "margin": 0.3},
        {"step": 2, "epoch": 1.0, "eval_loss": 0.65, "eval_accuracy": 0.6},
    ])
    frame = read_metrics_jsonl(run / "metrics.jsonl")
    assert frame.loc[2, "accuracy"] == 0.75 and frame.loc[2, "eval_accuracy"] == 0.6
    assert frame["loss"].dropna().tolist() == [0.7, 0.6]  # the summary row has train_loss only


def test_metrics_jsonl_of_a_killed_run_reads_up_to_its_torn_last_row(tmp_path):
    """A run killed mid-append leaves a torn last row: compared on what it logged (the run folder's reader);
    a bad row before the last is one line naming the file."""
    run = write_run(tmp_path / "rm", "preference_rm", [{"step": 1, "loss": 0.7}, {"step": 2, "loss": 0.6}])
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 3, "lo')
    assert read_metrics_jsonl(metrics)["loss"].tolist() == [0.7, 0.6]
    metrics.write_text('{"step": 1, "lo\n{"step": 2, "loss": 0.6}\n')
    with pytest.raises(CompareError, match="metrics.jsonl: a row before the last is not valid JSON"):
        read_metrics_jsonl(metrics)


# --- verdict.py ------------------------------------------------------------------------------


def _noisy_ramp(n: int, sigma: float, seed: int, slope: float = 0.01):
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1, dtype=float)
    return steps, 1.0 + slope * steps + rng.normal(0, sigma, n)


def test_noise_sigma_sees_the_noise_not_the_trend():
    _, values = _noisy_ramp(2000, sigma=0.1, seed=0, slope=0.01)
    assert np.std(values) > 5  # the ramp dominates the raw spread ...
    assert noise_sigma(values) == pytest.approx(0.1, rel=0.1)  # ... but not the estimate
    assert np.isnan(noise_sigma(np.array([1.0, 2.0])))


def test_copy_of_the_reference_is_within_and_a_shifted_one_is_not():
    ref = _noisy_ramp(500, sigma=0.05, seed=1)
    copy = compare_to_reference("reward", "copy", ref, ref)
    assert copy.verdict == WITHIN and copy.diff == 0.0
    assert copy.window == (450.1, 500.0)
    assert copy.n_reference == 50
    sigma = noise_sigma(ref[1][ref[0] >= 450.1])
    assert copy.sigma == pytest.approx(sigma) and copy.band == pytest.approx(2 * sigma)

    shifted = compare_to_reference("reward", "shifted", (ref[0], ref[1] + 5 * sigma), ref)
    assert shifted.verdict == OUTSIDE and shifted.diff == pytest.approx(5 * sigma)
    nudged = compare_to_reference("reward", "nudged", (ref[0], ref[1] + 1 * sigma), ref)
    assert nudged.verdict == WITHIN  # one sigma is inside a two-sigma band

    # Another noisy draw of the same curve (another seed) stays within the band.
    other = _noisy_ramp(500, sigma=0.05, seed=2)
    assert compare_to_reference("reward", "seed2", other, ref).verdict == WITHIN


def test_a_shorter_run_is_compared_where_it_stopped():
    ref = (np.arange(1, 1001, dtype=float), np.arange(1, 1001, dtype=float) / 1000)
    short = (ref[0][:100], ref[1][:100])
    assert shared_window(short[0], ref[0]) == pytest.approx((90.1, 100.0))
    c = compare_to_reference("reward", "short", short, ref)
    assert c.reference == pytest.approx(np.mean(np.arange(91, 101) / 1000))
    assert c.within  # the same curve, judged at step 100, not at the book's step 1000


def test_flat_reference_copy_is_within_and_too_few_points_get_no_verdict():
    flat = (np.arange(1.0, 11.0), np.ones(10))
    assert compare_to_reference("acc", "r", flat, flat).within is True
    assert compare_to_reference("acc", "r", (flat[0], flat[1] + 0.01), flat).within is False
    sparse = (np.array([1.0, 5.0]), np.array([0.1, 0.2]))
    c = compare_to_reference("acc", "r", flat, sparse)
    assert c.within is None and c.verdict.startswith("n/a")
    assert compare_to_reference("acc", "r", (np.array([50.0]), np.array([1.0])), flat).verdict.startswith("n/a")


def test_final_mean_uses_each_runs_own_last_tenth():
    steps = np.arange(1.0, 101.0)
    assert final_mean(steps, steps) == (pytest.approx(np.mean(np.arange(91, 101))), 10)


# --- end to end ------------------------------------------------------------------------------


def test_run_vs_reference_csv_end_to_end(tmp_path):
    same = write_run(tmp_path / "grpo-same", "grpo", grpo_rows_from_fixture())
    shifted = write_run(tmp_path / "grpo-shifted", "grpo", grpo_rows_from_fixture(reward_shift=1.0))
    report = compare_with_reference([same, shifted], reference="grpo", reference_csvs=[API_GRPO],
                                    out_dir=tmp_path / "out")
    verdicts = {(c.metric, c.run): c for c in report.comparisons}
    for metric in ("reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean",
                   "loss", "grad_norm"):
        assert verdicts[(metric, "grpo-same")].verdict == WITHIN
        assert verdicts[(metric, "grpo-same")].diff == pytest.approx(0.0, abs=1e-12)
    assert verdicts[("reward", "grpo-shifted")].verdict == OUTSIDE
    assert verdicts[("reward", "grpo-shifted")].diff == pytest.approx(1.0)
    assert verdicts[("loss", "grpo-shifted")].verdict == WITHIN
    # Reward rows sit at optimizer steps 1, 5, ..., 157: the window is the last 10% of
    # [1, 157] = [141.4, 157], holding the rows of rollouts 36-39 (book steps 180..195).
    reward = verdicts[("reward", "grpo-same")]
    assert reward.window == (pytest.approx(141.4), 157.0) and reward.n_reference == 4
    ref = pd.read_csv(API_GRPO)
    expected_ref = ref.loc[ref["_step"].isin([180, 185, 190, 195]), "avg_total"].mean()
    assert reward.reference == pytest.approx(expected_ref)
    assert verdicts[("loss", "grpo-same")].window == (pytest.approx(144.1), 160.0)

    assert report.figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads(report.summary_file.read_text())
    assert summary["reference"]["algorithm"] == "grpo"
    assert summary["reference"]["x_mapping"].startswith("counted")
    assert "within the reference's band" in report.table_file.read_text()


# The book's policy-gradient names before its PR #391 (2026-05-03), which its published runs carry.
OLD_BOOK_NAMES = {"avg_total": "avg_reward", "avg_correctness": "avg_correctness_reward",
                  "avg_format": "avg_format_reward"}


def test_history_with_the_books_old_names_compares_every_reward(tmp_path):
    old = tmp_path / "old_names.csv"
    frame = pd.read_csv(API_GRPO).rename(columns=OLD_BOOK_NAMES)
    frame["avg_response_penalty"] = np.where(frame["avg_reward"].notna(), -0.1, np.nan)
    frame["avg_binary_reward"] = np.where(frame["avg_reward"].notna(), 0.3, np.nan)
    frame.to_csv(old, index=False)
    aligned = align_reference(load_reference_csvs([old]), lookup("grpo"))
    assert {name: am.book for name, am in aligned.metrics.items()} == {
        "reward": "avg_reward", "rewards/correctness_reward/mean": "avg_correctness_reward",
        "rewards/format_reward/mean": "avg_format_reward",
        "rewards/overlong_penalty_reward/mean": "avg_response_penalty",
        "rewards/binary_reward/mean": "avg_binary_reward", "loss": "loss", "grad_norm": "grad_norm"}
    np.testing.assert_allclose(aligned.metrics["rewards/correctness_reward/mean"].values,
                               _expected_grpo()[1]["avg_correctness"])
    assert any("before 2026-05-03" in n and "avg_correctness_reward" in n for n in aligned.notes)

    run = write_run(tmp_path / "grpo", "grpo", grpo_rows_from_fixture())
    report = compare_with_reference([run], reference="grpo", reference_csvs=[old], out_dir=tmp_path / "out")
    compared = {c.metric for c in report.comparisons if c.within}
    assert {"reward", "rewards/correctness_reward/mean", "rewards/format_reward/mean"} <= compared
    assert "avg_correctness_reward" in report.table_file.read_text()  # the table names the book's key


def test_history_with_the_books_current_names_is_said_so():
    aligned = align_reference(load_reference_csvs([API_GRPO]), lookup("grpo"))
    assert any("since 2026-05-03" in n for n in aligned.notes)


def test_rejection_sampling_runs_compare_their_sft_stage(tmp_path):
    """The book's rejection-sampling loop logs a selection row (wandb step 0), then sft/loss and sft/grad_norm
    per optimizer step, then test_accuracy: a made-up history in that layout."""
    steps = 20
    loss = 1.0 - 0.02 * np.arange(1, steps + 1) + np.random.default_rng(0).normal(0, 0.02, steps)
    frame = pd.DataFrame({"_step": range(steps + 2),
                          "selection/num_pairs": [1000.0] + [np.nan] * (steps + 1),
                          "sft/loss": [np.nan, *loss, np.nan], "sft/grad_norm": [np.nan, *(loss + 1.0), np.nan],
                          "test_accuracy": [np.nan] * (steps + 1) + [0.79]})
    path = tmp_path / "rs.csv"
    frame.to_csv(path, index=False)
    aligned = align_reference(load_reference_csvs([path]), lookup("rejection_sampling_top_per_prompt"))
    assert set(aligned.metrics) == {"loss", "grad_norm"}
    assert aligned.metrics["loss"].steps.tolist() == list(range(1, steps + 1))  # wandb step k = optimizer step k
    np.testing.assert_allclose(aligned.metrics["loss"].values, loss)
    rows = [{"step": s, "epoch": s / steps, "loss": float(loss[s - 1]), "grad_norm": float(loss[s - 1] + 1.0),
             "learning_rate": 5e-6}
            for s in range(1, steps + 1)]
    run = write_run(tmp_path / "rs-run", "rejection_sampling_top_per_prompt", rows)
    report = compare_with_reference([run], reference_csvs=[path], out_dir=tmp_path / "out")
    assert {c.metric for c in report.comparisons} == {"loss", "grad_norm"}  # before: nothing was compared


def test_reward_function_named_differently_is_found_by_pattern(tmp_path):
    rows = grpo_rows_from_fixture()
    for row in rows:
        if "rewards/correctness_reward/mean" in row:
            row["rewards/spell_correctness/mean"] = row.pop("rewards/correctness_reward/mean")
    run = write_run(tmp_path / "grpo", "grpo", rows)
    report = compare_with_reference([run], reference_csvs=[API_GRPO], out_dir=tmp_path / "out")
    assert any(c.metric == "rewards/correctness_reward/mean" and c.within for c in report.comparisons)
    assert any("used rewards/spell_correctness/mean" in n for n in report.notes)


def test_cached_reference_is_used_without_network(tmp_path):
    cache = tmp_path / "reference_runs"
    cache.mkdir()
    shutil.copy(API_GRPO, cache / "grpo-vjp7lgdi.csv")
    run = write_run(tmp_path / "grpo", "grpo", grpo_rows_from_fixture())
    report = compare_with_reference([run], reference="grpo", cache_dir=cache, out_dir=tmp_path / "o")
    assert all(c.within for c in report.comparisons)
    assert "cached from wandb rlhf-book/core/vjp7lgdi" in report.notes[0]


def test_no_network_and_no_csv_says_exactly_what_to_do(tmp_path):
    run = write_run(tmp_path / "grpo", "grpo", grpo_rows_from_fixture())
    with pytest.raises(CompareError) as err:
        compare_with_reference([run], reference="grpo", cache_dir=tmp_path / "empty")
    message = str(err.value)
    assert "tests run offline" in message
    assert "https://wandb.ai/rlhf-book/core/runs/vjp7lgdi" in message
    assert "--reference-csv" in message and "Export" in message
    assert "grpo-vjp7lgdi.csv" in message
    assert not (tmp_path / "empty").exists()  # nothing pretends to be a reference


def test_fetch_once_then_cache(tmp_path, monkeypatch):
    # What scan_history yields: only the keys logged in that row, plus wandb's own.
    ref = pd.read_csv(API_GRPO, index_col=0)
    rows = [{k: v for k, v in r.items() if pd.notna(v)} for r in ref.to_dict("records")]
    rows[0]["samples"] = {"_type": "table-file", "path": "media/table/x.json"}
    calls = []

    def fake_fetch(path):
        calls.append(path)
        return references._history_frame(rows)

    monkeypatch.setattr(references, "network_available", lambda timeout=0: (True, ""))
    monkeypatch.setattr(references, "fetch_history", fake_fetch)
    run = write_run(tmp_path / "grpo", "grpo", grpo_rows_from_fixture())
    cache = tmp_path / "cache"
    for _ in range(2):
        report = compare_with_reference([run], reference="grpo", cache_dir=cache, out_dir=tmp_path / "o")
        assert all(c.within for c in report.comparisons)
    assert calls == ["rlhf-book/core/vjp7lgdi"]  # fetched once, then read from the cache
    cached = pd.read_csv(cache / "grpo-vjp7lgdi.csv")
    assert "samples" not in cached.columns and len(cached) == ROLLOUTS * (K + 1)
    source = json.loads((cache / "grpo-vjp7lgdi.source.json").read_text())
    assert source["wandb_path"] == "rlhf-book/core/vjp7lgdi"


def test_reference_for_an_algorithm_without_a_published_run(tmp_path):
    run = write_run(tmp_path / "cdpo", "cdpo", da_rows(30, 0.8))
    with pytest.raises(CompareError, match="publishes no wandb run for cdpo"):
        compare_with_reference([run], reference="cdpo", cache_dir=tmp_path)
    # ... but a CSV of the book's code run by the user works, with the DPO maps.
    report = compare_with_reference([run], reference_csvs=[API_DPO], out_dir=tmp_path / "o")
    assert {c.metric for c in report.comparisons} >= {"rewards/accuracies", "rewards/margins", "grad_norm"}


def test_compare_reference_dpo_names_the_books_run(tmp_path, capsys):
    """`rlhf-recipes compare --reference dpo`: the book's DPO run fzy8k8go, even when it cannot be fetched."""
    from rlhf_recipes.tools.cli import main as rlhf_recipes

    run = write_run(tmp_path / "dpo", "dpo", da_rows(30, 0.8))
    assert rlhf_recipes(["compare", str(run), "--reference", "dpo", "--offline"]) == 2
    err = capsys.readouterr().err
    assert "fzy8k8go" in err and "publishes no wandb run" not in err


def test_reference_of_another_family_is_refused(tmp_path):
    run = write_run(tmp_path / "dpo", "dpo", da_rows(30, 0.8))
    with pytest.raises(CompareError, match="direct_alignment run"):
        compare_with_reference([run], reference="grpo", reference_csvs=[API_GRPO])


def test_several_local_runs_in_one_figure_and_table(tmp_path):
    runs = [write_run(tmp_path / name, name, da_rows(steps, acc, kl=kl))  # kl: only KTO logs it
            for name, steps, acc, kl in (("dpo", 50, 0.8, False), ("ipo", 50, 0.9, False), ("kto", 40, 0.7, True))]
    report = compare_local_runs(runs, out_dir=tmp_path / "all")
    assert report.headers == ["metric", "dpo", "ipo", "kto"]
    metrics = [row[0] for row in report.rows]
    assert metrics[:2] == ["rewards/accuracies", "rewards/margins"] and "kl" in metrics
    # dpo: last 10% of steps 1..50 = steps >= 45.1 -> 46..50
    expected = np.mean([0.5 + 0.3 * s / 50 for s in range(46, 51)])
    assert report.local_means[("rewards/accuracies", "dpo")] == pytest.approx(expected)
    assert ("kl", "dpo") not in report.local_means  # only kto logs kl
    summary = json.loads(report.summary_file.read_text())
    assert summary["final_means"]["rewards/accuracies"]["kto"] == pytest.approx(
        np.mean([0.5 + 0.2 * s / 40 for s in range(37, 41)]))
    assert report.figure.stat().st_size > 10_000


def test_installed_command_runs_and_reports_errors(tmp_path):
    runs = [write_run(tmp_path / n, n, da_rows(20, 0.8)) for n in ("dpo", "ipo")]
    env = {**os.environ, "PYTHONPATH": ""}  # the command must find the package by itself
    command = str(Path(sys.executable).parent / "rlhf-recipes")  # installed by pyproject's [project.scripts]
    done = subprocess.run([command, "compare", *map(str, runs)], check=False,
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "rewards/accuracies" in done.stdout
    assert (runs[0] / "compare" / "compare.png").exists()  # default --out: <first run>/compare

    failed = subprocess.run([command, "compare", str(runs[0]), "--reference", "cdpo"], check=False,
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert failed.returncode == 2
    assert "--reference-csv" in failed.stderr and "Traceback" not in failed.stderr



# --- with the real runner ---------------------------------------------------------------------


def test_tiny_profile_runs_compare_end_to_end(tmp_path):
    from conftest import run_recipe  # the shared helper: runs recipes/run.py in this process

    runs = ("dpo", "ipo")
    for name in runs:
        run_recipe(f"{name}.yaml", tmp_path / name)
    report = compare_local_runs([tmp_path / name for name in runs], out_dir=tmp_path / "cmp")
    assert report.headers == ["metric", *runs]
    metrics = [row[0] for row in report.rows]
    assert metrics[:2] == ["rewards/accuracies", "rewards/margins"]
    for name in runs:
        _, values = load_run(tmp_path / name).series("loss")
        assert np.all(np.isfinite(values)) and len(values) >= 2
        assert report.local_means[("loss", name)] == pytest.approx(values[-1])  # tiny: last 10% = last step
    assert report.figure.read_bytes()[:4] == b"\x89PNG"


# --- --reference nano: this project's recorded nano runs -------------------------------------------------


def _nano_run_copy(tmp_path: Path, algorithm: str, reward_shift: float) -> Path:
    """A user's nano run: the recorded run's folder (seed 0) with its training reward shifted (a different run)."""
    from rlhf_recipes.tools.compare.report import NANO_RUNS_DIR

    run = tmp_path / f"{algorithm}-nano"
    shutil.copytree(NANO_RUNS_DIR / algorithm / "seed-0", run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    for row in rows:
        if "reward" in row:
            row["reward"] += reward_shift
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_reference_nano_lays_a_nano_run_over_the_recorded_one(tmp_path, capsys):
    from rlhf_recipes.tools.compare.cli import main

    run = _nano_run_copy(tmp_path, "grpo", reward_shift=0.25)
    assert main([str(run), "--reference", "nano", "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "project nano run: grpo/seed-0" in out and "not the book's" in out
    summary = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    paths = [Path(r["path"]).resolve() for r in summary["runs"]]
    recorded = REPO / "reference_runs" / "nano" / "grpo"
    assert paths == [run.resolve(), *[(recorded / f"seed-{s}").resolve() for s in range(3)]]  # every recorded seed
    means = summary["final_means"]["reward"]
    assert means["grpo-nano"] == pytest.approx(means["project nano run: grpo/seed-0"] + 0.25)
    assert "heldout" in summary["heldout"]["project nano run: grpo/seed-2"]  # the recorded held-out results ride along


def test_reference_nano_puts_a_users_evaluation_on_the_recorded_runs_rows(tmp_path, capsys):
    """`evaluate RUN --baseline` writes eval/heldout.json, nano-book wrote the recorded runs' to eval/nano_book.json:
    the same evaluation (both name themselves `heldout`) shares one row per metric, not two disjoint sets."""
    from rlhf_recipes.tools.compare.cli import main

    run = _nano_run_copy(tmp_path, "grpo", reward_shift=0.0)
    (run / "eval" / "nano_book.json").rename(run / "eval" / "heldout.json")
    assert main([str(run), "--reference", "nano", "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "exact_match" in line and line.lstrip("│ ").startswith("heldout:")]
    assert rows and not any("nano_book:" in line for line in out.splitlines())
    assert "-" not in rows[0].split("│")[2]  # the user's column has a value on the recorded runs' row


def test_reference_nano_names_what_is_missing_and_flags_non_nano_runs(tmp_path):
    from rlhf_recipes.tools.compare.report import compare_with_nano_runs

    root = tmp_path / "recorded"
    shutil.copytree(REPO / "reference_runs" / "nano" / "grpo", root / "grpo")
    unrecorded = tmp_path / "kto-run"
    unrecorded.mkdir()
    (unrecorded / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
    (unrecorded / "config.yaml").write_text("algorithm: kto\nprofile: tiny\n")
    with pytest.raises(CompareError, match=r"no recorded nano run of `kto` .*recorded: grpo\)"):
        compare_with_nano_runs([unrecorded], root=root)

    tiny_grpo = _nano_run_copy(tmp_path, "grpo", reward_shift=0.0)
    config = (tiny_grpo / "config.yaml").read_text().replace("profile: nano", "profile: tiny")
    (tiny_grpo / "config.yaml").write_text(config)
    report = compare_with_nano_runs([tiny_grpo], out_dir=tmp_path / "cmp", root=root)
    assert any("is not a --profile nano run" in n and "profile: tiny" in n for n in report.notes)


def test_reference_to_the_book_on_a_nano_run_points_to_reference_nano(tmp_path):
    run = _nano_run_copy(tmp_path, "grpo", reward_shift=0.0)
    report = compare_with_reference([run], reference_csvs=[API_GRPO], out_dir=tmp_path / "cmp")
    assert any("--reference nano" in n for n in report.notes)


# --- the book's reward-model runs --------------------------------------------------------------------------
# They come from the book's April 2026 code, which logged unprefixed `loss`, `accuracy`, `step_accuracy` and
# `reward_margin` (its later code logs train/* and val/*), and ran other settings than the recipes (the ORM run is
# another experiment).

RM_STEPS = 40
# algorithm -> (the old run's columns -> the metric of ours each must align to)
OLD_RM_NAMES = {
    "preference_rm": {"loss": "loss", "accuracy": "accuracy", "reward_margin": "margin"},
    "orm": {"loss": "loss", "accuracy": "token_accuracy"},  # the old ORM's accuracy was per token
    "prm": {"loss": "loss", "step_accuracy": "step_accuracy"},
}


def old_rm_history(path: Path, algorithm: str) -> Path:
    """An API history CSV as the April 2026 scripts logged it: one row per optimizer step (step=global_step)."""
    steps = np.arange(1, RM_STEPS + 1)
    frame = pd.DataFrame({"_step": steps})
    for i, name in enumerate(OLD_RM_NAMES[algorithm]):
        frame[name] = 0.5 + 0.01 * steps + 0.1 * i
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("algorithm", sorted(OLD_RM_NAMES))
def test_the_books_old_unprefixed_names_align(algorithm, tmp_path):
    csv = old_rm_history(tmp_path / "old.csv", algorithm)
    aligned = align_reference(load_reference_csvs([csv]), lookup(algorithm))
    assert {ours: am.book for ours, am in aligned.metrics.items()} == {
        ours: book for book, ours in OLD_RM_NAMES[algorithm].items()}
    assert aligned.metrics["loss"].steps.tolist() == list(range(1, RM_STEPS + 1))  # step=global_step, as ours
    assert any("unprefixed" in note for note in aligned.notes)


@pytest.mark.parametrize("algorithm", sorted(OLD_RM_NAMES))
def test_compare_says_the_books_rm_run_is_an_older_setup(algorithm, tmp_path):
    csv = old_rm_history(tmp_path / "old.csv", algorithm)
    # Our run that logged the reference's numbers under our names.
    names = OLD_RM_NAMES[algorithm]
    run = write_run(tmp_path / algorithm, algorithm, [
        {"step": int(r["_step"]), "epoch": 1.0, **{ours: float(r[book]) for book, ours in names.items()}}
        for _, r in pd.read_csv(csv).iterrows()])
    report = compare_with_reference([run], reference=algorithm, reference_csvs=[csv], out_dir=tmp_path / "out")
    assert {c.metric for c in report.comparisons} == set(OLD_RM_NAMES[algorithm].values())
    assert "older setup" in report.title
    assert any(note.startswith(f"older setup: the book's run {lookup(algorithm).run_id}") for note in report.notes)
    assert "older setup" in report.table_file.read_text()
    assert json.loads(report.summary_file.read_text())["reference"]["setup"].startswith("older setup")


def test_the_orm_run_is_named_a_different_experiment():
    note = lookup("orm").run_setup
    assert "Qwen3-1.7B-Base" in note and "synthetic wrong answers" in note and "1e-4" in note


def test_dpo_norms_rewards_are_aligned_with_the_books():
    """DPO-norm runs on BookDPOTrainer, which logs rewards/* from the AVERAGED log-ratios it trains on, as the book
    (use_average_logprob): compare lays them over the book's, unscaled, like DPO's."""
    from rlhf_recipes.book_reference import book_reference

    rewards = {m.ours: m for m in book_reference("dpo_norm").metrics if m.ours.startswith("rewards/")}
    assert set(rewards) == {"rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected"}
    assert all(m.scale == 1.0 for m in rewards.values())
    assert "loss" in {m.ours for m in book_reference("dpo_norm").metrics}


def test_reference_nano_draws_the_seeds_as_one_smoothed_band_and_names_the_periodic_evaluation(tmp_path,
                                                                                                 monkeypatch):
    """The recorded seeds were three raw, noisy coloured lines that hid the user's run, and eval/* (the periodic
    evaluation on eval_problems problems) read like the held-out 200: the seeds are one grey mean in their min-max
    band, every curve smoothed alike (said in each title and the legend), and eval/* rows and panels say what they
    are."""
    from rlhf_recipes.tools.compare import report

    drawn = {}
    monkeypatch.setattr(report, "draw", lambda panels, path, title: drawn.update(panels=panels, title=title))
    run = _nano_run_copy(tmp_path, "grpo", reward_shift=0.05)
    result = report.compare_with_nano_runs([run], out_dir=tmp_path / "cmp")
    assert drawn["title"] == "grpo-nano vs project nano runs: grpo, 3 seed(s)"
    reward = next(p for p in drawn["panels"] if p.title.startswith("reward "))
    seeds, mine = reward.lines
    assert seeds.reference and seeds.label.startswith("project nano runs: grpo, 3 seed(s): their mean (line) and "
                                                      "min-max (band), smoothed")
    assert "[smoothed:" in reward.title and mine.raw is not None and seeds.low is not None
    assert np.all(seeds.low <= seeds.values + 1e-12) and np.all(seeds.values <= seeds.high + 1e-12)
    assert np.ptp(np.diff(mine.values)) < np.ptp(np.diff(mine.raw))  # smoothed: smaller step-to-step jumps
    periodic = next(p for p in drawn["panels"] if p.title.startswith("eval/exact_match"))
    assert periodic.title == "eval/exact_match (periodic, 100 problems)" and periodic.lines[1].raw is None
    names = [row[0] for row in result.rows]
    assert "eval/exact_match (periodic, 100 problems)" in names and "heldout: exact_match (200 problems)" in names
