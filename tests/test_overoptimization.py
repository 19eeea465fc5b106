"""rlhf-recipes overoptimization: the KL of best-of-n, the best-of-n pick, the sampled KL, the fits on synthetic data
with known coefficients, the rows' bookkeeping, and the tiny run end to end (docs/overoptimization.md)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch

from lab import kl
from lab.overoptimization import formulas, rows
from lab.overoptimization.cli import document, main
from lab.overoptimization.plan import PROFILES, Profile, Proxy


def test_kl_of_best_of_n_is_log_n_minus_n_minus_1_over_n():
    assert kl.kl_best_of_n(1) == 0.0
    assert kl.kl_best_of_n(2) == pytest.approx(math.log(2) - 0.5)
    assert kl.kl_best_of_n(64) == pytest.approx(4.158883 - 0.984375, abs=1e-6)
    values = [kl.kl_best_of_n(n) for n in (1, 2, 4, 8, 16, 32, 64)]
    assert values == sorted(values)
    with pytest.raises(ValueError, match="n >= 1"):
        kl.kl_best_of_n(0)


def _brute_force_pick(proxy, gold, n):
    """Every n-subset equally likely; the subset's highest proxy wins, ties shared equally."""
    picks = []
    for subset in itertools.combinations(range(len(proxy)), n):
        top = max(proxy[i] for i in subset)
        tied = [i for i in subset if proxy[i] == top]
        picks.append(np.mean([gold[i] for i in tied]))
    return float(np.mean(picks))


def test_best_of_n_pick_equals_the_average_over_every_subset():
    proxy = [0.3, 1.2, -0.5, 1.2, 0.7, 0.0]  # a tie at the top
    gold = [1.0, 0.0, 0.5, 1.0, 0.25, 0.0]
    assert kl.best_of_n_pick(proxy, gold, 1)[0] == pytest.approx(np.mean(gold))
    for n in range(1, 7):
        assert kl.best_of_n_pick(proxy, gold, n)[0] == pytest.approx(_brute_force_pick(proxy, gold, n))
    assert kl.best_of_n_pick(proxy, gold, 6) == pytest.approx((0.5, 1.2))  # the two tied at 1.2: mean gold
    assert kl.best_of_n_weights(64, 8).sum() == pytest.approx(1.0)


def test_sequence_kl_on_fixed_tensors():
    from rlhf_recipes.generation import sequence_kl  # the one KL under sampled_kl and evaluate's quantization KL

    p = torch.log(torch.tensor([[[0.75, 0.25], [0.75, 0.25]], [[0.5, 0.5], [0.9, 0.1]]]))
    q = torch.log(torch.tensor([[[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]]))
    ids = torch.tensor([[0, 1], [1, 0]])
    mask = torch.tensor([[1, 1], [1, 0]])  # the second completion has one token
    exact, ratio = sequence_kl(p, q, ids, mask)
    token = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert exact == pytest.approx([2 * token, 0.0], abs=1e-6)
    assert ratio == pytest.approx([math.log(1.5) + math.log(0.5), 0.0], abs=1e-6)


def test_pairwise_accuracy_against_the_gold_ordering():
    assert formulas.pairwise_accuracy([3, 2, 1], [1.0, 0.5, 0.0]) == 1.0
    assert formulas.pairwise_accuracy([1, 2, 3], [1.0, 0.5, 0.0]) == 0.0
    assert formulas.pairwise_accuracy([1, 1], [1.0, 0.0]) == 0.5  # a proxy tie: half
    assert formulas.pairwise_accuracy([5, 1, 3], [1.0, 0.0, 0.0]) == 1.0  # the equal-gold pair is not counted
    assert formulas.pairwise_accuracy([1, 2], [0.5, 0.5]) is None


def test_fits_recover_known_coefficients():
    rng = np.random.default_rng(0)
    d = np.linspace(0, 3, 25)
    bon = formulas.fit_best_of_n(d, formulas.gold_best_of_n(d, 0.5, 0.2) + rng.normal(0, 0.005, d.size))
    assert bon["alpha"] == pytest.approx(0.5, abs=0.02) and bon["beta"] == pytest.approx(0.2, abs=0.01)
    assert bon["r2"] > 0.99 and bon["peak_d"] == pytest.approx(1.25, abs=0.1) and bon["peak_in_range"]
    d = np.linspace(0, 5, 25)
    rl = formulas.fit_rl(d, formulas.gold_rl(d, 0.6, 0.3) + rng.normal(0, 0.005, d.size))
    assert rl["alpha"] == pytest.approx(0.6, abs=0.02) and rl["beta"] == pytest.approx(0.3, abs=0.02)
    assert rl["peak_d"] == pytest.approx(math.e, rel=0.1) and rl["peak_kl"] == pytest.approx(rl["peak_d"] ** 2)
    falling = formulas.fit_best_of_n(d, formulas.gold_best_of_n(d, -0.01, 0.03))
    assert falling["peak_d"] == 0.0 and falling["peak_in_range"]  # falls from the start: the peak is the start
    rising = formulas.fit_rl(d, 0.1 * d)  # never turns: no peak
    assert not rising["peak_in_range"]
    assert formulas.fit_best_of_n([0, 1, 2], [0, 0, 0])["flat"]
    assert formulas.fit_rl([0, 1], [0, 0.1]) is None  # two coefficients need a third point


def _synthetic():
    """2 problems x 4 base samples, two proxies; an RL run measured at steps 5 and 10 (gold up, then down)."""
    base = {"problems": {"problems": 2}, "sampling": {"temperature": 1.0},
            "gold": [[1.0, 0.0, 0.5, 0.0], [0.0, 0.0, 1.0, 0.5]],
            "proxy": {"good": [[4, 1, 3, 0], [0, 1, 4, 3]], "bad": [[0, 4, 1, 3], [4, 3, 0, 1]]}}
    run = {"steps": {"10": {"gold": [[0.0, 0.0], [0.0, 0.0]], "kl": [[2.0, 2.0], [4.0, 4.0]],
                            "kl_logratio": [[2.1, 1.9], [4.0, 4.0]], "proxy": [[5, 5], [5, 5]], "tokens": [[9, 9]] * 2},
                     "5": {"gold": [[1.0, 1.0], [1.0, 1.0]], "kl": [[0.5, 0.5], [0.5, 0.5]],
                           "kl_logratio": [[0.5, 0.5], [0.5, 0.5]], "proxy": [[4, 4], [4, 4]],
                           "tokens": [[9, 9]] * 2}}}
    return base, run


def test_best_of_n_rows_bookkeeping():
    base, _ = _synthetic()
    good = rows.best_of_n_rows(base, "good", [1, 2, 4])
    assert [r["n"] for r in good] == [1, 2, 4] and all(r["proxy_name"] == "good" for r in good)
    assert [r["kl"] for r in good] == [kl.kl_best_of_n(n) for n in (1, 2, 4)]
    assert good[0]["gold"] == pytest.approx(np.mean(base["gold"]))  # n = 1: a random sample
    assert good[-1]["gold"] == 1.0 and good[-1]["proxy"] == 4.0  # n = all: the proxy's top sample, right on both
    assert rows.best_of_n_rows(base, "bad", [4])[0]["gold"] == 0.0  # the bad proxy's top samples are wrong
    assert good[0]["proxy_z"] == pytest.approx(0.0) and good[-1]["proxy_z"] > 0
    assert rows.proxy_accuracy(base, "good")["mean"] > rows.proxy_accuracy(base, "bad")["mean"]


def test_trajectory_rows_turn_and_fits_bookkeeping():
    base, run = _synthetic()
    traj = rows.trajectory_rows(base, run, "good", proxy_name="good", run="rl/good")
    assert [r["step"] for r in traj] == [0, 5, 10]  # step 0 (the base) first, then numeric order
    assert traj[0]["kl"] == 0.0 and traj[0]["gold"] == pytest.approx(np.mean(base["gold"]))
    assert traj[2]["kl"] == 3.0 and traj[2]["d"] == pytest.approx(math.sqrt(3.0)) and traj[2]["kl_logratio"] == 3.0
    assert all(r["proxy_name"] == "good" and r["run"] == "rl/good" for r in traj)
    assert traj[1]["gold"] == 1.0 and traj[2]["proxy"] == 5.0
    seen = rows.turn(base, run, traj)
    assert seen["peak_step"] == 5 and seen["last_minus_peak"] == -1.0 and seen["falls"]
    fitted = rows.fits(traj, "proxy_name", "rl")
    assert list(fitted) == ["good"] and fitted["good"]["points"] == 3
    no_proxy = rows.trajectory_rows(base, run, None, run="dpo-beta1")
    assert "proxy" not in no_proxy[1] and no_proxy[1]["run"] == "dpo-beta1"


def test_the_document_holds_relative_paths_only(tmp_path):
    base, run = _synthetic()
    profile = Profile("synthetic", proxies=(Proxy("good", "preference_rm"), Proxy("bad", "orm")), rl=(),
                      direct=(("dpo", (1.0,)),), direct_overrides=(), problems=2, best_of_n_samples=4, samples=2)
    measured = {tmp_path / "rl" / "good": run, tmp_path / "direct_alignment" / "dpo-beta1": run}
    doc = document(profile, tmp_path, base, measured, 1.0)
    assert [r["n"] for r in doc["best_of_n"]] == [1, 2, 4, 1, 2, 4]
    assert {r["proxy_name"] for r in doc["rl"]} == {"good"} and len(doc["direct_alignment"]) == 3
    assert set(doc["fits"]["best_of_n"]) == {"good", "bad"} and set(doc["fits"]["direct_alignment"]) == {"dpo-beta1"}
    assert doc["proxies"][0]["run"] == "proxies/good" and doc["rl"][0]["run"] == "rl/good"
    assert str(tmp_path) not in json.dumps(doc)


def test_bad_workers_is_one_line_before_anything_runs(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["--profile", "tiny", "--out", str(tmp_path / "o"), "--workers", "0"])
    assert e.value.code == 2 and "--workers must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # the whole tiny study (gold RM, proxies, policies): ~40 s
def test_tiny_run_end_to_end(tmp_path):
    out = tmp_path / "oo"
    assert main(["--profile", "tiny", "--out", str(out), "--workers", "2"]) == 0
    text = (out / "overoptimization.json").read_text()
    doc = json.loads(text)
    profile = PROFILES["tiny"]
    assert [r["n"] for r in doc["best_of_n"]] == profile.ns == [1, 2, 4, 8]
    assert doc["best_of_n"][-1]["proxy"] > doc["best_of_n"][0]["proxy"]  # the pick of 8 scores higher by its proxy
    assert [r["step"] for r in doc["rl"]] == [0, 1, 2, 3, 4] and all(r["kl"] >= 0 for r in doc["rl"])
    assert {r["run"] for r in doc["direct_alignment"]} == {"dpo-beta0.1", "dpo-beta1"}
    assert set(doc["fits"]) == {"best_of_n", "rl", "direct_alignment"}
    assert str(tmp_path) not in text and (out / "overoptimization.png").stat().st_size > 10_000
    assert "best-of-n" in (out / "overoptimization.txt").read_text()


def test_the_proxies_train_before_the_rl_runs_that_read_them(tmp_path):
    from lab.overoptimization.plan import phases

    nano = PROFILES["nano"]
    first, second = phases(nano, tmp_path, workers=2)
    assert [j.name for j in first[:3]] == ["proxy/preference_rm-1000", "proxy/preference_rm-3000", "proxy/orm"]
    assert not any(j.name.startswith("rl/") for j in first)
    rl = [j for j in second if j.name.startswith("rl/")]
    assert len(rl) == 3 and len(second) % 2 == 0  # one direct-alignment run fills the second worker
    assert len(first) + len(second) == 3 + 3 + 8 and len({j.folder for j in first + second}) == 14
    for job in rl:  # the proxy alone, weight 1: never the gold scorer
        args = list(job.train)
        reward = args[args.index("--reward_funcs") + 1]
        assert reward == f"rm:{tmp_path / 'proxies' / job.name.split('/')[1]}"
        assert args[args.index("--reward_weights") + 1] == "1.0"
    assert nano.ns == [1, 2, 4, 8, 16, 32, 64]
