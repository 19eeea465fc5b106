"""The book's figures in nano (docs/nano.md, "The book's figures in nano"): the lab's BOOK_FIGURES facts (lab/book_figures.py)
name keys that real nano runs log (the shipped reference runs, whatever their seed layout), and the figures draw
from the shipped runs (nano-figures' three and nano-book's book panel). No training here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NANO = REPO / "reference_runs" / "nano"
FIGURES = NANO / "figures"  # nano-figures' shipped runs: <algorithm>/ and the base's build, nano_sft_base/
BASE_RUN = "nano_sft_base"


def _book_figures():
    from lab.book_figures import BOOK_FIGURES
    from rlhf_recipes.registry import FAMILIES

    return [(f, BOOK_FIGURES[f]) for f in FAMILIES if f in BOOK_FIGURES]


def _shipped_runs(figure) -> list[Path]:
    """Every shipped run folder of the figure's algorithms (one per seed where seeds were shipped)."""
    if not figure.algorithms:
        return [FIGURES / BASE_RUN]
    found = []
    for algorithm in figure.algorithms:
        root = NANO / algorithm if (NANO / algorithm).exists() else FIGURES / algorithm
        found += sorted(p.parent for p in root.rglob("metrics.jsonl"))
    return found


def test_the_five_book_figures_are_in_the_registry_with_their_algorithms():
    from rlhf_recipes.registry import ALGORITHMS

    figures = {fig.name: (family, fig) for family, fig in _book_figures()}
    assert set(figures) == {"policy_gradients", "direct_alignment", "instruction_tuning", "rejection_sampling",
                            "distillation"}
    for name, (family, fig) in figures.items():
        assert fig.image == f"wandb_{name}.png"
        assert all(ALGORITHMS[a].family == family for a in fig.algorithms), name


@pytest.mark.parametrize("family", ["policy_gradient", "direct_alignment", "sft", "rejection_sampling",
                                    "self_distillation"])
def test_book_figure_keys_are_logged_by_the_shipped_runs(family):
    from lab.book_figures import BOOK_FIGURES
    from rlhf_recipes.run_folder import read_metrics

    figure = BOOK_FIGURES[family]
    runs = _shipped_runs(figure)
    assert runs and len({r.parent if r.name.startswith("seed-") else r for r in runs}) == max(
        1, len(figure.algorithms)), f"{family}: shipped runs {runs}"
    for run in runs:
        logged = {k for row in read_metrics(run / "metrics.jsonl") for k in row}
        wanted = [key for _, key in figure.panels] + ([figure.heldout_curve] if figure.heldout_curve else [])
        missing = [k for k in wanted if k not in logged]
        assert not missing, f"{run}: BOOK_FIGURES names {missing}, which the run never logged"
        if figure.heldout_final:
            final = json.loads((run / "final_results.json").read_text())
            assert all(isinstance(final[k], float) for k in figure.heldout_final), run


def test_nano_figures_draws_the_three_from_the_shipped_runs(tmp_path):
    from lab import nano_figures

    assert list(nano_figures.figures()) == ["instruction_tuning", "rejection_sampling", "distillation"]
    for name in nano_figures.figures():
        fig = nano_figures.figure_of(name)
        runs = [(nano_figures.label(a, name), FIGURES / a) for a in fig.algorithms] or [
            ("nano SFT base (build)", FIGURES / BASE_RUN)]
        png = nano_figures.draw(name, runs, tmp_path)
        assert png.stat().st_size > 20_000
        record = json.loads((tmp_path / f"nano_{name}.json").read_text())
        assert [r["name"] for r in record["runs"]] == [label for label, _ in runs]
        for run in record["runs"]:
            assert all(s["logs"] > 0 and isinstance(s["last_step"], int) for s in run["summary"].values())
    rs = json.loads((tmp_path / "nano_rejection_sampling.json").read_text())
    assert all(0 <= r["heldout"]["before"] <= 1 and 0 <= r["heldout"]["after"] <= 1 for r in rs["runs"])


def test_nano_book_draws_the_books_avg_reward_panel_from_the_shipped_runs(tmp_path):
    from lab import nano_book

    assert nano_book.training_keys("policy_gradient") == ["rewards/correctness_reward/mean", "reward"]
    assert nano_book.training_keys("direct_alignment") == ["rewards/accuracies"]  # the book's accuracy is ours
    run = next(p.parent for p in sorted((NANO / "grpo").rglob("metrics.jsonl")))
    curves = nano_book.curves(run, ("exact_match",), "rewards/correctness_reward/mean", ("reward",))
    assert len(curves["book"]["reward"]) == len(curves["training"]) > 0
    # the total reward (correctness + 0.5 x format) is never below the correctness reward alone
    assert all(t[1] >= c[1] - 1e-9 for t, c in zip(curves["book"]["reward"], curves["training"]))


def test_nano_figures_names_a_bad_figure_and_the_choices(capsys):
    from lab import nano_figures

    with pytest.raises(SystemExit):
        nano_figures.parse(["--figure", "policy_gradients"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--figure: policy_gradients unknown" in err and "rlhf-recipes nano-book --family" in err
