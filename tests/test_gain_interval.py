"""The gain's interval over seeds AND problems (lab/stats.py) against hand computations on fixed
arrays, its edge cases, and the `learns` it gives nano-book's table. Pure numbers: milliseconds."""

from __future__ import annotations

import pytest

from lab.stats import (
    gain_interval,
    gain_interval_from_seed_intervals,
    gain_over_seeds,
    seed_interval,
)

T2, T3, T4, T199 = 4.302653, 3.182446, 2.776445, 1.971957  # Student t(0.975, df)


def test_seeds_and_problems_each_add_their_part_by_hand():
    d = [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]]
    # seed means .5, .25, .75: var 0.0625 / 3 seeds = 0.0208333; problem means 1, 2/3, 1/3, 0: var 0.185185 / 4
    # problems = 0.0462963; half = sqrt(T2^2 * 0.0208333 + T3^2 * 0.0462963) = 0.924430
    out = gain_interval(d)
    assert out["mean"] == pytest.approx(0.5) and out["n"] == 3 and out["problems"] == 4
    assert out["seed_part"] == pytest.approx(0.0208333, abs=1e-6)
    assert out["problem_part"] == pytest.approx(0.0462963, abs=1e-6)
    assert out["low"] == pytest.approx(0.5 - 0.924430, abs=1e-5) and out["high"] == pytest.approx(0.5 + 0.924430, abs=1e-5)
    seeds_only = seed_interval([0.5, 0.25, 0.75])  # half T2 * 0.25 / sqrt(3) = 0.621034: never wider than ours
    assert out["low"] < seeds_only["low"] and "seeds and problems" in out["method"]


def test_seeds_that_agree_still_carry_the_problems_noise():
    """Three seeds with the same per-seed gain (ORPO and KTO on nano): the seed interval has zero width, this one
    does not: problem means 1, 0, 1, 0 (var 1/3, / 4 problems), half T3 * sqrt(1/12) = 0.918693."""
    d = [[1, 0, 1, 0]] * 3
    assert seed_interval([0.5, 0.5, 0.5])["low"] == 0.5  # what the seeds alone said
    out = gain_interval(d)
    assert out["seed_part"] == 0.0 and out["high"] - out["low"] == pytest.approx(2 * 0.918693, abs=1e-5)


def test_all_identical_is_zero_width_and_one_seed_is_problems_only():
    same = gain_interval([[0.2, 0.2, 0.2]] * 3)
    assert same["low"] == same["high"] == pytest.approx(0.2)
    assert gain_over_seeds([{"gain": 0.2, "interval": [0.2, 0.2], "problems": 3, "differences": [0.2] * 3}])["learns"]
    assert not gain_over_seeds([{"gain": 0.0, "interval": [0, 0], "problems": 3, "differences": [0.0] * 3}])["learns"]
    one = gain_interval([[1, 0, 0, 1, 1]])  # var 0.3 / 5 problems = 0.06, half T4 * sqrt(0.06) = 0.680087
    assert one["mean"] == pytest.approx(0.6) and one["low"] == pytest.approx(0.6 - 0.680087, abs=1e-5)
    assert "one seed" in one["method"] and "not measured" in one["method"]
    with pytest.raises(ValueError, match="seeds x problems"):
        gain_interval([])


def test_from_recorded_intervals_every_seed_touching_zero_is_no_claim():
    """SimPO's shape: three seeds with the same gain, each seed's own interval over problems [0, +0.2]: se 0.2 /
    (2 x 1.959964) = 0.0510213, half T199 * 0.0510213 = 0.100612, so the low end is below zero (the seeds alone
    gave [+0.1, +0.1] and called it learning)."""
    out = gain_interval_from_seed_intervals([0.1, 0.1, 0.1], [[0.0, 0.2]] * 3, problems=200)
    assert out["low"] == pytest.approx(0.1 - 0.100612, abs=1e-5) and out["low"] < 0
    assert "no per-problem values recorded" in out["method"]
    # seeds that differ add their part: gains .1, .2, .3 (var 0.01 / 3), each +-0.05 (se 0.0255107)
    spread = gain_interval_from_seed_intervals([0.1, 0.2, 0.3], [[g - 0.05, g + 0.05] for g in (0.1, 0.2, 0.3)], 40)
    half = (T2 ** 2 * 0.01 / 3 + 2.022691 ** 2 * 0.0255107 ** 2) ** 0.5  # t(0.975, 39) = 2.022691
    assert spread["low"] == pytest.approx(0.2 - half, abs=1e-5)


def test_gain_over_seeds_uses_per_problem_values_only_when_every_seed_has_them():
    runs = [{"gain": 0.5, "interval": [0.45, 0.55], "problems": 4, "differences": [1, 0, 1, 0]} for _ in range(3)]
    assert gain_over_seeds(runs)["method"] == gain_interval([[1, 0, 1, 0]] * 3)["method"]
    assert gain_over_seeds(runs)["learns"] is False  # the problems' noise: [-0.42, +1.42]
    runs[1] = {**runs[1], "differences": None}  # one seed evaluated before per-problem values were recorded
    assert "no per-problem values recorded" in gain_over_seeds(runs)["method"]
    nothing = [{"gain": g, "interval": None, "problems": 4} for g in (0.2, 0.22, 0.24)]
    assert gain_over_seeds(nothing)["method"] == "95% t interval over seeds only"


def _seed_row(differences: list[float]) -> dict:
    """One seed's nano-book row (tests/test_nano_book_seeds.py) with its per-problem gains recorded."""
    from test_nano_book_seeds import _row

    gain = sum(differences) / len(differences)
    return {**_row(gain), "problems": len(differences), "differences": {"exact_match": differences}}


def test_nano_book_learns_column_follows_the_interval_over_seeds_and_problems():
    from rlhf_recipes.tools.document import render_text
    from lab.nano_book import over_seeds, table

    agree = over_seeds([_seed_row([1, 0, 1, 0, 0])] * 3)  # three equal seeds on 5 problems: +0.4 +- 0.68
    m = agree["metrics"]["exact_match"]
    assert m["gain"] == pytest.approx(0.4) and m["gain_interval"][0] < 0 < m["gain_interval"][1]
    assert agree["learns"] is False and m["learns"] is False and "seeds and problems" in m["interval"]
    clear = over_seeds([_seed_row([1] * 9 + [0]), _seed_row([1] * 10), _seed_row([1] * 8 + [0, 0])])
    assert clear["learns"] is True and "differences" not in clear["per_seed"][0]
    rendered = render_text([table([agree, clear])])
    text = " ".join(rendered.split())
    assert "interval over seeds and problems" in text and "gain interval: 95% t interval over seeds and problems" \
        in text
    learns = [line.split("│")[-3].strip() for line in rendered.splitlines() if line.startswith("│")]
    assert learns == ["no", "yes"]


def _evaluated_run(folder, after: list[float], before: list[float]) -> None:
    """A finished sweep run whose evaluation recorded per-problem values (as `rlhf-recipes evaluate` writes them)."""
    import json

    gain = sum(after) / len(after) - sum(before) / len(before)
    (folder / "eval").mkdir(parents=True)
    (folder / "config.yaml").write_text("algorithm: dpo\n")
    (folder / "final_results.json").write_text(json.dumps({"status": "finished", "final_metrics": {"loss": 0.5}}))
    (folder / "eval" / "sweep.json").write_text(json.dumps({
        "metrics": {"exact_match": sum(after) / len(after)}, "data": {"problems": len(after)},
        "difference": {"exact_match": {"value": gain, "low": gain - 0.01, "high": gain + 0.01}},
        "per_problem": {"exact_match": after}, "baseline_per_problem": {"exact_match": before}}))


def test_sweep_report_gives_gains_the_same_interval_and_learns(tmp_path):
    """A sweep's gain/<m> gets nano-book's interval and `learns`: two cells x three seeds on the same 4 problems; the
    cell whose seeds agree (zero seed spread) is not called learning, as the seeds alone would have; sweep.json keeps
    the per-seed gains but not the per-problem values (they stay in each run's evaluation)."""
    import json
    from pathlib import Path

    from lab.sweep import report, spec

    dpo = str(Path(__file__).resolve().parent.parent / "recipes" / "dpo.yaml")
    s = spec.SweepSpec(recipe=dpo, profile="tiny", grid={"beta": ["0.1", "0.5"]}, seeds=[0, 1, 2])
    base = [0.0, 0.0, 0.0, 0.0]
    for seed in range(3):
        _evaluated_run(tmp_path / "beta=0.1" / f"seed-{seed}", [1, 0, 1, 0], base)  # +0.5 each: noise of problems
        _evaluated_run(tmp_path / "beta=0.5" / f"seed-{seed}", [1, 1, 1, 1], base)  # +1 on every problem
    result = report.build(s, tmp_path)
    cells = {c["cell"]: c["metrics"]["gain/exact_match"] for c in result["cells"]}
    noisy = gain_interval([[1, 0, 1, 0]] * 3)
    assert cells["beta=0.1"]["low"] == pytest.approx(noisy["low"]) and cells["beta=0.1"]["learns"] is False
    assert cells["beta=0.1"]["std"] == 0.0  # what the seeds alone see
    assert cells["beta=0.5"]["low"] == cells["beta=0.5"]["high"] == 1.0 and cells["beta=0.5"]["learns"] is True
    rendered = report.text(result)
    lines = [line for line in rendered.splitlines() if line.startswith("│")]
    assert [line.split("│")[-2].strip() for line in lines[:2]] == ["yes", "no"]  # ranked: beta=0.5 first
    assert "interval over seeds and problems" in " ".join(rendered.split())
    report.write(s, tmp_path)
    written = json.loads((tmp_path / "sweep.json").read_text())
    assert written["runs"][0]["gains"]["gain/exact_match"]["gain"] == 0.5
    assert "differences" not in written["runs"][0]["gains"]["gain/exact_match"]
