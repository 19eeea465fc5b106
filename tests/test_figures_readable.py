"""Figures people can read: ten seed bands are split into small multiples, identical runs both show, a sweep's
training curve ends where its table's final value is, step axes are whole numbers, and curves.png names its run.
Each figure is drawn from recorded data (reference_runs/) or a fake run folder and inspected through matplotlib."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ROOT

NANO = ROOT / "reference_runs" / "nano"


@pytest.fixture
def drawn(monkeypatch):
    """The figures a plot function saves, kept open for inspection (savefig still writes the file)."""
    from matplotlib.figure import Figure

    figures = []
    real = Figure.savefig

    def keep(self, *args, **kwargs):
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _axes(figure):
    return [a for sub in [figure, *figure.subfigs] for a in sub.axes] if figure.subfigs else figure.axes


def _integer_ticks(axis) -> bool:
    return all(float(t).is_integer() for t in axis.get_xticks())


def test_the_nano_book_figure_puts_each_band_in_its_own_panel_and_shows_identical_runs(tmp_path, drawn):
    from matplotlib.collections import PolyCollection

    from lab.nano_book import identical_to, plot

    rows = json.loads((NANO / "nano_book_direct_alignment.json").read_text())["algorithms"]
    assert identical_to(rows) == {"apo_zero": "kto"}  # the shipped runs: KTO's and APO-zero's curves are equal
    plot(rows, tmp_path / "da.png", "direct_alignment")
    figure = drawn[-1]
    upper, lower = figure.subfigs
    heldout = upper.axes[0]
    # Before: 9 min-max bands stacked on the held-out panel.
    assert not [c for c in heldout.collections if isinstance(c, PolyCollection)]
    small = lower.axes
    assert len(small) == 2 * len(rows)  # two held-out metrics x nine algorithms, each its own band
    assert all(len([c for c in a.collections if isinstance(c, PolyCollection)]) == 1 for a in small)
    # Before: APO-zero drawn exactly under KTO with the same style, a legend entry for a line nobody saw.
    lines = {line.get_label(): line for line in heldout.get_lines()}
    kto, apo = lines["kto"], lines["apo_zero (= kto: identical runs)"]
    assert (kto.get_linestyle(), kto.get_marker()) != (apo.get_linestyle(), apo.get_marker())
    assert all(_integer_ticks(a) for a in _axes(figure))

    pg = json.loads((NANO / "nano_book_policy_gradient.json").read_text())["algorithms"]
    plot(pg, tmp_path / "pg.png", "policy_gradient")
    upper, lower = drawn[-1].subfigs
    assert not [c for c in upper.axes[0].collections if isinstance(c, PolyCollection)] and len(lower.axes) == 10


def _sweep_report(folder: Path, final: float) -> dict:
    stats = {"n": 1, "mean": final, "std": None, "low": None, "high": None, "per_seed": {"0": final}}
    return {"key_metric": "final/rewards/correctness_reward/mean", "training_metric": "rewards/correctness_reward/mean",
            "sweep": {"recipe": "recipes/grpo.yaml", "profile": "tiny", "grid": {"learning_rate": ["1e-5"]},
                      "seeds": [0]},
            "runs": [{"cell": "learning_rate=1e-5", "seed": 0, "folder": folder.name, "status": "finished"}],
            "cells": [{"cell": "learning_rate=1e-5", "params": {"learning_rate": "1e-5"},
                       "metrics": {"final/rewards/correctness_reward/mean": stats}}]}


@pytest.mark.parametrize("logs", [2, 60])
def test_a_sweeps_training_curve_ends_at_its_tables_final_value_when_runs_are_short(tmp_path, drawn, logs):
    """Before: 2 logs (0, then 0.75) drawn as a running mean of 10 ended at 0.375 beside a table saying 0.75."""
    from lab.sweep.plot import plot

    run = tmp_path / "run"
    run.mkdir()
    values = [0.0] * (logs - 1) + [0.75]
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s + 1, "rewards/correctness_reward/mean": v}) + "\n"
                                               for s, v in enumerate(values)))
    plot(_sweep_report(run, 0.75), tmp_path, tmp_path / "sweep.png")
    training = drawn[-1].axes[1]
    curve = training.get_lines()[0].get_ydata()
    if logs < 50:
        assert curve[-1] == pytest.approx(0.75) and "every log" in training.get_ylabel()
    else:  # long runs are smoothed, and the label says how the curve and the table differ
        assert curve[-1] == pytest.approx(0.075) and "the table's final/ is the last log" in training.get_ylabel()
    assert _integer_ticks(training)


def test_curves_png_names_the_run_folder_and_profile(tmp_path):
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.train import curves_title

    out = tmp_path / "dpo-run"
    recipe = load_recipe([str(ROOT / "recipes" / "dpo.yaml"), "--profile", "tiny", "--output_dir", str(out)],
                         construct=False)
    assert curves_title(recipe, out) == f"{out}: dpo (dpo.yaml, profile tiny)"
