"""nano-book over training seeds, on the sweep's executor: the seed aggregation and its `learns` rule on made-up
numbers, and a real `nano-book --seeds 2` on two algorithms with a few steps each (2 workers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _row(gain: float, base: float = 0.2, steps: tuple = (5, 10)) -> dict:
    return {"algorithm": "grpo", "run": "r", "wall_s": 10.0, "learns": gain > 0, "problems": 40,
            "metrics": {"exact_match": {"base": base, "final": base + gain, "gain": gain,
                                        "gain_interval": [gain - 0.05, gain + 0.05]}},
            "curves": {"heldout": {"exact_match": [(s, base + gain * s / 10) for s in steps]},
                       "training": [(s, 0.5 + gain) for s in steps]}}


def test_seeds_are_combined_with_an_interval_over_seeds_and_problems_and_learns_needs_it_above_zero():
    from lab.nano_book import over_seeds

    # gains 0.10, 0.20, 0.30 (std 0.1), each +-0.05 over 40 problems (se 0.05 / 1.959964 = 0.0255107), no per-problem
    # values: half sqrt(4.302653^2 x 0.01 / 3 + 2.022691^2 x 0.0255107^2) = 0.253716 (tests/test_gain_interval.py)
    row = over_seeds([_row(0.10), _row(0.20), _row(0.30)])
    m = row["metrics"]["exact_match"]
    assert m["gain"] == pytest.approx(0.2) and m["gain_std"] == pytest.approx(0.1)
    assert m["gain_interval"][0] == pytest.approx(0.2 - 0.253716, abs=1e-5)
    assert row["learns"] is False  # every seed gained, but three seeds this spread do not exclude zero
    assert row["seeds"] == 3 and len(row["per_seed"]) == 3 and row["wall_s"] == 30.0
    assert over_seeds([_row(0.20), _row(0.22), _row(0.24)])["learns"] is True
    one = over_seeds([_row(0.2)])  # one seed: the problems' interval alone, as a run without --seeds
    assert one["learns"] is True and "one seed" in one["metrics"]["exact_match"]["interval"]
    assert over_seeds([_row(0.04)])["learns"] is False  # +0.04 +- 0.05 over problems
    # curves: the mean over seeds at the steps every seed logged
    uneven = over_seeds([_row(0.1), _row(0.3, steps=(5, 10, 15))])
    assert [s for s, _ in uneven["curves"]["heldout"]["exact_match"]] == [5, 10]
    assert uneven["curves"]["training"][0] == (5, pytest.approx(0.7))


def test_nano_book_with_seeds_runs_each_algorithm_per_seed_on_the_executor(nano_base, tmp_path, capsys):
    """Two algorithms x two seeds, 2 workers, 6 steps each: every run in <out>/<algorithm>/seed-<s> with its seed,
    its evaluation and its log beside it; the JSON keeps per algorithm `algorithm`, `learns` and each seed's numbers;
    the same command again trains nothing."""
    from lab.nano_book import main

    out = tmp_path / "book"
    argv = ["--algorithms", "grpo,rloo", "--seeds", "2", "--workers", "2", "--max_steps", "6", "--eval_every", "3",
            "--eval_problems", "8", "--num_problems", "24", "--out", str(out)]
    assert main(argv) == 0
    book = json.loads((out / "nano_book_policy_gradient.json").read_text())
    assert [a["algorithm"] for a in book["algorithms"]] == ["grpo", "rloo"]
    for row in book["algorithms"]:
        assert isinstance(row["learns"], bool) and row["seeds"] == 2 and len(row["per_seed"]) == 2
        gains = [s["metrics"]["exact_match"]["gain"] for s in row["per_seed"]]
        assert row["metrics"]["exact_match"]["gain"] == pytest.approx(sum(gains) / 2)
        for seed in (0, 1):
            run = out / row["algorithm"] / f"seed-{seed}"
            assert f"seed: {seed}\n" in (run / "config.yaml").read_text()
            assert (run / "eval" / "nano_book.json").exists() and Path(f"{run}.log").exists()
    table = " ".join((out / "nano_book_policy_gradient_table.txt").read_text().split())
    assert "mean of 2 training seeds" in table
    base = book["base"]["build"]  # the base as its build measured it (evaluation/target.py), also in the caption
    assert f"nano base: {100 * base['value']:.1f}% held-out exact_match" in table and base["step"] > 0
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/seed-*/final_results.json")}
    assert main(argv) == 0 and {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # --report: the same numbers from the run folders alone (per-problem values recorded: over seeds and problems)
    assert main([*argv, "--report"]) == 0 and {p: p.stat().st_mtime_ns for p in stamps} == stamps
    redrawn = json.loads((out / "nano_book_policy_gradient.json").read_text())
    assert redrawn["algorithms"] == book["algorithms"] and redrawn["base"] == book["base"]
    assert "seeds and problems" in book["algorithms"][0]["metrics"]["exact_match"]["interval"]
    assert main([*argv[:-1], str(tmp_path / "empty"), "--report"]) == 2  # nothing evaluated there: said, not drawn
    assert "no evaluated run in" in capsys.readouterr().err
    # Other settings into the same folder: refused before anything runs, naming the key (not silently reused).
    longer = [*argv[:argv.index("--max_steps") + 1], "7", *argv[argv.index("--max_steps") + 2:]]
    assert main(longer) == 2 and "max_steps" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
