"""`compare` against the book's three published reward-model runs (1g3y9bcc, 3gkoqb7f, iv4d966d).

They come from the book's April 2026 code, which logged unprefixed `loss`, `accuracy`, `step_accuracy` and
`reward_margin` (its later code logs train/* and val/*), and ran other settings than the recipes (the ORM run is
another experiment). The histories here are constructed in that layout: no book data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlhf_recipes.tools.compare import compare_with_reference, wandb_source
from rlhf_recipes.tools.compare.align import align_reference
from rlhf_recipes.tools.compare.load import load_reference_csvs
from rlhf_recipes.tools.compare.references import lookup

STEPS = 40
# algorithm -> (the old run's columns -> the metric of ours each must align to)
OLD_NAMES = {
    "preference_rm": {"loss": "loss", "accuracy": "accuracy", "reward_margin": "margin"},
    "orm": {"loss": "loss", "accuracy": "token_accuracy"},  # the old ORM's accuracy was per token
    "prm": {"loss": "loss", "step_accuracy": "step_accuracy"},
}


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    monkeypatch.setattr(wandb_source, "network_available", lambda timeout=0: (False, "tests run offline"))


def old_history(path: Path, algorithm: str) -> Path:
    """An API history CSV as the April 2026 scripts logged it: one row per optimizer step (step=global_step)."""
    steps = np.arange(1, STEPS + 1)
    frame = pd.DataFrame({"_step": steps})
    for i, name in enumerate(OLD_NAMES[algorithm]):
        frame[name] = 0.5 + 0.01 * steps + 0.1 * i
    frame.to_csv(path, index=False)
    return path


def our_run(run_dir: Path, algorithm: str, reference: Path) -> Path:
    """Our run that logged the reference's numbers under our names (metrics.jsonl, final_results.json)."""
    ref = pd.read_csv(reference)
    run_dir.mkdir(parents=True)
    rows = [{"step": int(r["_step"]), "epoch": 1.0,
             **{ours: float(r[book]) for book, ours in OLD_NAMES[algorithm].items()}} for _, r in ref.iterrows()]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "final_results.json").write_text(json.dumps({"algorithm": algorithm, "steps": STEPS,
                                                            "final_metrics": {}, "profile": None}))
    (run_dir / "config.yaml").write_text(f"algorithm: {algorithm}\n")
    return run_dir


@pytest.mark.parametrize("algorithm", sorted(OLD_NAMES))
def test_the_books_old_unprefixed_names_align(algorithm, tmp_path):
    csv = old_history(tmp_path / "old.csv", algorithm)
    aligned = align_reference(load_reference_csvs([csv]), lookup(algorithm))
    assert {ours: am.book for ours, am in aligned.metrics.items()} == {
        ours: book for book, ours in OLD_NAMES[algorithm].items()}
    assert aligned.metrics["loss"].steps.tolist() == list(range(1, STEPS + 1))  # step=global_step, as ours
    assert any("unprefixed" in note for note in aligned.notes)


@pytest.mark.parametrize("algorithm", sorted(OLD_NAMES))
def test_compare_says_the_books_rm_run_is_an_older_setup(algorithm, tmp_path):
    csv = old_history(tmp_path / "old.csv", algorithm)
    run = our_run(tmp_path / algorithm, algorithm, csv)
    report = compare_with_reference([run], reference=algorithm, reference_csvs=[csv], out_dir=tmp_path / "out")
    assert {c.metric for c in report.comparisons} == set(OLD_NAMES[algorithm].values())
    assert "older setup" in report.title
    assert any(note.startswith(f"older setup: the book's run {lookup(algorithm).run_id}") for note in report.notes)
    assert "older setup" in report.table_file.read_text()
    assert json.loads(report.summary_file.read_text())["reference"]["setup"].startswith("older setup")


def test_the_orm_run_is_named_a_different_experiment():
    note = lookup("orm").run_setup
    assert "Qwen3-1.7B-Base" in note and "synthetic wrong answers" in note and "1e-4" in note
