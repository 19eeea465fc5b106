"""Held-out evaluation (rlhf-recipes evaluate, rlhf_recipes/evaluation/): every family end to end on tiny runs,
the held-out promise, reproducibility, interval coverage, periodic evaluation, quantization, bad inputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import RECIPES, read_metrics, run_recipe
from rlhf_recipes.evaluation import intervals

CONTRACT = ("name", "algorithm", "family", "model", "baseline_model", "metrics", "baseline", "difference", "intervals",
            "settings", "data", "throughput", "versions", "created")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny runs shared by the tests below, each trained once (GRPO with periodic evaluation on)."""
    root = tmp_path_factory.mktemp("evaluate")
    extra = {"grpo": ("--eval_every", "2", "--eval_problems", "4")}
    cache: dict[str, object] = {}

    def get(recipe: str):
        if recipe not in cache:
            out = root / recipe
            run_recipe(f"{recipe}.yaml", out, *extra.get(recipe, ()))
            cache[recipe] = out
        return cache[recipe]

    return get


def evaluate(*argv: str) -> int:
    from rlhf_recipes.tools.cli import main

    return main(["evaluate", *map(str, argv)])


def saved(run, name: str = "heldout") -> dict:
    return json.loads((run / "eval" / f"{name}.json").read_text())


def _check_contract(result: dict, baseline: bool) -> None:
    for key in CONTRACT:
        assert key in result, key
    assert set(result["intervals"]) <= set(result["metrics"])
    for metric, bound in result["intervals"].items():
        value = result["metrics"][metric]
        assert bound["method"] and bound["low"] <= value + 1e-9 and value <= bound["high"] + 1e-9, (metric, bound)
    assert result["versions"]["torch"] and result["versions"]["transformers"] and result["versions"]["trl"]
    assert result["throughput"]["problems_per_s"] > 0
    # each unweighted metric per problem (what an interval over several runs on the same problems needs): its mean is
    # the reported metric, for the model and, beside it, its baseline on the same problems
    recorded = [("per_problem", result["metrics"])] + ([("baseline_per_problem", result["baseline"])] if baseline else [])
    for key, means in recorded:
        for metric, values in result[key].items():
            assert sum(values) / len(values) == pytest.approx(means[metric], abs=1e-5), (key, metric)
    if baseline:
        assert set(result["baseline_per_problem"]) == set(result["per_problem"])
        assert result["baseline_model"] == "tiny" and set(result["difference"]) >= set(result["intervals"])
        for metric, d in result["difference"].items():
            if d["low"] is not None:
                assert d["low"] <= d["value"] + 1e-9 <= d["high"] + 2e-9, (metric, d)
    else:
        assert result["baseline"] is None and result["difference"] is None


# --- policy gradients on reasoning-gym ---------------------------------------------------------


def test_reasoning_heldout_shares_no_prompt_with_training():
    """A task with few distinct questions (3-letter words): overlaps are certain, counted and dropped."""
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.evaluation import EvalOptions
    from rlhf_recipes.registry import evaluator_for

    tasks = '{"tasks": [{"name": "spell_backward", "config": {"min_word_len": 3, "max_word_len": 3}}]}'
    recipe = load_recipe([str(RECIPES / "grpo.yaml"), "--profile", "tiny", "--num_samples", "200",
                          "--dataset_kwargs", tasks])
    problems, data = evaluator_for(recipe, EvalOptions(num_problems=40)).data()
    trained = {row["prompt"][-1]["content"] for row in load_splits(recipe)[0]}
    heldout = [row["prompt"][-1]["content"] for row in problems]
    assert len(heldout) == data["problems"] == 40 and len(set(heldout)) == 40
    assert not set(heldout) & trained
    assert data["overlaps_dropped"] > 0 and data["seed"] != data["training_seed"]
    assert problems[0]["prompt"][0]["role"] == "system"  # the adapter's own prompt: the training system prompt
    # ~1200 three-letter words: 2000 training draws leave fewer than the 1000 test problems, so no validation split
    crowded = load_recipe([str(RECIPES / "grpo.yaml"), "--profile", "tiny", "--num_samples", "2000",
                           "--dataset_kwargs", tasks], construct=False)
    with pytest.raises(Exception, match="no validation split"):
        evaluator_for(crowded, EvalOptions(split="validation", num_problems=40)).data()


def test_grpo_before_after_end_to_end(runs, capsys):
    run = runs("grpo")
    assert evaluate(run, "--baseline", "--k", "2", "--num_problems", "6") == 0
    printed = capsys.readouterr().out
    assert "before" in printed and "difference" in printed and "problems/s" in printed
    result = saved(run)
    _check_contract(result, baseline=True)
    assert result["family"] == "policy_gradient" and result["data"]["problems"] == 6
    assert len(result["per_problem"]["exact_match"]) == len(result["baseline_per_problem"]["exact_match"]) == 6
    assert {"exact_match", "mean_score", "format_rate", "mean_length", "pass@2", "pass@1_sampled"} <= set(
        result["metrics"])
    assert result["intervals"]["exact_match"]["method"] == "wilson"
    assert result["intervals"]["mean_score"]["method"].startswith("bootstrap")
    sampled = result["settings"]["decoding"]["sampled"]
    assert sampled["temperature"] == 0.6 and sampled["top_p"] == 0.95 and sampled["samples_per_problem"] == 2
    assert result["settings"]["decoding"]["greedy"]["chat_template_kwargs"] == {"enable_thinking": True}
    assert 0 < result["metrics"]["mean_length"] <= 16  # the tiny recipe's max_completion_length


def test_same_seed_gives_the_same_numbers(runs, tmp_path):
    run = runs("grpo")
    results = []
    for name in ("first", "second"):
        assert evaluate(run, "--k", "2", "--num_problems", "4", "--seed", "3", "--output", tmp_path / f"{name}.json") == 0
        results.append(json.loads((tmp_path / f"{name}.json").read_text()))
    for key in ("metrics", "intervals", "data", "samples"):
        assert results[0][key] == results[1][key], key


def test_periodic_evaluation_logs_eval_metrics(runs):
    rows = read_metrics(runs("grpo"))
    evals = [r for r in rows if "eval/exact_match" in r]
    assert [r["step"] for r in evals] == [2, 4]  # eval_every 2 over the tiny profile's 4 steps
    assert all(0 <= r["eval/format_rate"] <= 1 and r["eval/mean_length"] > 0 for r in evals)
    assert [r["step"] for r in rows if "loss" in r] == [1, 2, 3, 4]  # no training row lost to the eval rows


def test_quantized_policy_reports_kl_to_the_unquantized_one(runs):
    run = runs("grpo")
    assert evaluate(run, "--quantize", "int4", "--num_problems", "4", "--name", "int4") == 0
    result = saved(run, "int4")
    assert result["comparison"] == "quantization" and result["baseline_model"].endswith("(unquantized)")
    assert result["settings"]["quantize"] == "int4"
    assert result["metrics"]["kl_tokens"] > 0 and 0 < result["metrics"]["kl_per_token"] < 1


def test_sdpo_evaluates_the_same_task(tmp_path):
    """A model path with --recipe (here the untrained tiny model): no run folder needed."""
    out = tmp_path / "sdpo.json"
    assert evaluate("tiny", "--recipe", RECIPES / "sdpo.yaml", "--profile", "tiny", "--num_problems", "3",
                    "--output", out) == 0
    result = json.loads(out.read_text())
    _check_contract(result, baseline=False)
    assert result["family"] == "self_distillation" and result["model"] == "tiny"


def test_data_files_given_are_evaluated_as_they_are(tmp_path):
    """--data_files on the command line: the user's own held-out rows, every one, said so in the result."""
    out, rows = tmp_path / "sft.json", RECIPES.parent / "rlhf_recipes" / "data" / "fixtures" / "no_robots" / "test.jsonl"
    assert evaluate("tiny", "--recipe", RECIPES / "sft.yaml", "--profile", "tiny", "--data_files", rows,
                    "--max_new_tokens", "4", "--output", out) == 0
    data = json.loads(out.read_text())["data"]
    assert data["split"] == "data_files" and data["problems"] == 6 and str(rows) in data["construction"]


# --- the other families ------------------------------------------------------------------------


def test_direct_alignment_implicit_reward_and_judged_win_rate(runs):
    dpo, rm = runs("dpo"), runs("preference_rm")
    assert evaluate(dpo, "--baseline", "--judge", f"rm:{rm}", "--max_new_tokens", "8") == 0
    result = saved(dpo)
    _check_contract(result, baseline=True)
    assert result["data"]["split"] == "after_training_rows" and result["data"]["problems"] > 0
    # The reference against itself: every implicit reward is 0, a tie, which counts 1/2.
    assert result["baseline"]["implicit_accuracy"] == 0.5 and result["baseline"]["implicit_margin"] == 0
    assert result["baseline"]["win_rate"] == 0.5  # the reference's greedy completions against themselves
    assert 0 <= result["metrics"]["win_rate"] <= 1
    assert result["settings"]["decoding"]["judge"]["reward_model"] == f"rm:{rm}"
    assert result["evaluation"].endswith("judged win rate")


def test_an_evaluation_without_a_judge_does_not_announce_a_win_rate(runs):
    """The title and the result's `evaluation` name the win rate only when a judge measured one."""
    dpo = runs("dpo")
    assert evaluate(dpo, "--num_problems", "4", "--name", "nojudge") == 0
    result = saved(dpo, "nojudge")
    assert "win rate" not in result["evaluation"] and "win_rate" not in result["metrics"]


def test_sft_heldout_loss_and_perplexity(runs):
    run = runs("sft")
    assert evaluate(run, "--baseline", "--max_new_tokens", "8") == 0
    result = saved(run)
    _check_contract(result, baseline=True)
    assert result["data"]["split"] == "test"  # no_robots' own test split (its fixture in the tiny profile)
    m = result["metrics"]
    assert m["perplexity"] == pytest.approx(math.exp(m["loss"]), rel=1e-6)
    assert result["intervals"]["perplexity"]["low"] <= m["perplexity"] <= result["intervals"]["perplexity"]["high"]
    assert m["loss"] != result["baseline"]["loss"]  # four steps moved the held-out loss, a little
    assert result["samples"] and "completion" in result["samples"][0]


def test_reward_model_baseline_and_int8(runs, capsys):
    run = runs("preference_rm")
    final = json.loads((run / "final_results.json").read_text())
    capsys.readouterr()
    assert evaluate(run, "--baseline") == 0
    printed = capsys.readouterr().out
    assert sum(line.lstrip("│ ").startswith("margin ") for line in printed.splitlines()) == 1  # once, in the table
    result = saved(run)
    _check_contract(result, baseline=True)
    assert result["metrics"]["accuracy"] == pytest.approx(final["evaluation"]["accuracy"], abs=1e-6)
    assert result["baseline"]["margin"] != result["metrics"]["margin"]  # the untrained head scores differently
    assert evaluate(run, "--quantize", "int8", "--name", "int8") == 0
    quantized = saved(run, "int8")
    assert quantized["baseline"]["accuracy"] == pytest.approx(result["metrics"]["accuracy"])  # unquantized = trained
    assert "accuracy" in quantized["difference"]


def test_rejection_sampling_gsm8k_matches_its_stage_six(runs):
    run = runs("rejection_sampling_top_per_prompt")
    final = json.loads((run / "final_results.json").read_text())
    assert evaluate(run, "--baseline") == 0
    result = saved(run)
    _check_contract(result, baseline=True)
    assert result["data"]["split"] == "test" and result["data"]["problems"] == final["eval_questions"]
    assert result["metrics"]["exact_match"] == pytest.approx(final["test_accuracy"])  # the same greedy grading
    assert result["baseline"]["exact_match"] == pytest.approx(final["base_test_accuracy"])
    assert result["intervals"]["math_verify"]["method"] == "wilson"


def test_compare_lists_heldout_results(runs, tmp_path):
    from rlhf_recipes.tools.compare.report import compare_local_runs

    run = runs("grpo")
    if not (run / "eval" / "heldout.json").exists():
        assert evaluate(run, "--num_problems", "4") == 0
    report = compare_local_runs([run], out_dir=tmp_path)
    names = [row[0] for row in report.rows]
    # the held-out evaluation and the periodic one during training (eval_problems 4), each with its problem count
    assert "eval/exact_match (periodic, 4 problems)" in names
    assert any(name.startswith("heldout: exact_match (") and name.endswith(" problems)") for name in names), names
    summary = json.loads((tmp_path / "compare.json").read_text())
    assert "exact_match" in summary["heldout"][run.name]["heldout"]["metrics"]


# --- intervals -------------------------------------------------------------------------------


def test_wilson_covers_a_known_rate_near_nominal():
    rng = np.random.default_rng(0)
    for rate, n in ((0.1, 40), (0.5, 25), (0.9, 60)):
        hits = 0
        for successes in rng.binomial(n, rate, size=2000):
            low, high = intervals.wilson(int(successes), n)
            hits += low <= rate <= high
        assert 0.92 <= hits / 2000 <= 0.98, (rate, n, hits / 2000)


def test_intervals_keep_the_numbers_of_the_hand_written_formulas():
    """Pinned from the hand-written Wilson formula and numpy percentile bootstrap that scipy replaced: the same
    math (Wilson) and the same draws (scipy's bootstrap takes rng.integers(0, n, (draws, n)) from the seeded
    generator, as the old code did), so the shipped intervals did not move."""
    assert intervals.wilson(3, 10) == pytest.approx((0.10779126740630102, 0.6032218525388546), abs=1e-12)
    assert intervals.wilson(0, 10) == pytest.approx((0.0, 0.27753279986288915), abs=1e-12)
    assert intervals.wilson(10, 10) == pytest.approx((0.7224672001371109, 1.0), abs=1e-12)
    assert intervals.wilson(123, 200, 0.9) == pytest.approx((0.557227811707593, 0.6697023413418087), abs=1e-12)
    v, w = [0.1, 0.9, 0.4, 0.7, 0.3, 0.0, 1.0, 0.55], [3, 1, 4, 1, 5, 9, 2, 6]
    after = [x + 0.1 * (i % 3) for i, x in enumerate(v)]
    assert intervals.bootstrap(v, 0) == pytest.approx((0.26859375000000024, 0.7312500000000001), abs=1e-12)
    assert intervals.bootstrap(v, 3, w, np.exp) == pytest.approx((1.1544104070924566, 1.8322848258482507), abs=1e-12)
    assert intervals.paired_bootstrap(after, v, 0) == pytest.approx(
        (0.08750000000000002, 0.03749999999999998, 0.13750000000000007), abs=1e-12)
    assert intervals.paired_bootstrap(after, v, 5, w, w[::-1], np.exp, 0.9, 500) == pytest.approx(
        (0.0816863740103555, -0.08132758600748814, 0.2677990124630046), abs=1e-12)
    assert intervals.bootstrap([0.3], 0) == (0.3, 0.3) and math.isnan(intervals.bootstrap([], 0)[0])
    assert intervals.paired_bootstrap([0.5], [0.3], 0) == pytest.approx((0.2, 0.2, 0.2))
    with pytest.raises(TypeError):  # a count, not a mean: a fractional "success" is a caller's bug
        intervals.wilson(2.5, 10)


def test_bootstrap_covers_a_known_mean_near_nominal():
    """A scorer with a known mean (partial scores ~ Beta(2, 3): mean 0.4), problems drawn afresh each time."""
    rng = np.random.default_rng(1)
    hits = paired_hits = 0
    reps = 300
    for rep in range(reps):
        scores = rng.beta(2, 3, size=60)
        low, high = intervals.bootstrap(scores, seed=rep, draws=1000)
        hits += low <= 0.4 <= high
        # paired: after = before + 0.1 + noise on the same problems; the difference's truth is 0.1
        after = scores + 0.1 + rng.normal(0, 0.05, size=60)
        _, low, high = intervals.paired_bootstrap(after, scores, seed=rep, draws=1000)
        paired_hits += low <= 0.1 <= high
    assert 0.89 <= hits / reps <= 0.99 and 0.89 <= paired_hits / reps <= 0.99, (hits / reps, paired_hits / reps)


def test_pass_at_k_is_the_unbiased_estimator():
    from itertools import combinations

    for n, c, k in ((5, 2, 2), (6, 1, 3), (4, 0, 2), (4, 4, 1)):
        outcomes = [1] * c + [0] * (n - c)
        subsets = list(combinations(outcomes, k))
        assert intervals.pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_validation_problems_are_apart_from_the_test_problems_and_from_every_demonstration():
    """`--split validation` (where a choice is made, e.g. the nano base's checkpoint) and the test problems (what the
    tables report) never share a problem, neither is a training prompt, the test problems are the first N of their
    draw whatever N, and the validation problems lie inside the 2000 held-out draws the nano SFT recipes exclude
    from the base's demonstrations (recipes/nano_sft.yaml `exclude`)."""
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.data.reasoning_gym import VALIDATION_FROM, build_rows
    from rlhf_recipes.evaluation import EvalOptions
    from rlhf_recipes.registry import evaluator_for
    from rlhf_recipes.yaml_files import read_yaml

    recipe = load_recipe([str(RECIPES / "grpo.yaml"), "--profile", "nano", "--output_dir", "unused"],
                         construct=False)

    def questions(split, n):
        problems, data = evaluator_for(recipe, EvalOptions(split=split, num_problems=n)).data()
        assert data["split"] == split and data["problems"] == n == len({r["prompt"][-1]["content"] for r in problems})
        return [r["prompt"][-1]["content"] for r in problems]

    test, validation = questions("heldout", VALIDATION_FROM), questions("validation", 200)
    assert not set(test) & set(validation)
    assert questions("heldout", 200) == test[:200]  # the tables' 200 are the first of the draw
    trained = {row["prompt"][-1]["content"] for row in load_splits(recipe)[0]}
    assert not set(validation) & trained
    exclude = read_yaml(RECIPES / "nano_sft.yaml")["dataset_kwargs"]["exclude"]
    excluded = {r["prompt"][-1]["content"] for r in build_rows(recipe, exclude["size"], exclude["seed"])}
    assert set(validation) <= excluded and set(test) <= excluded
    with pytest.raises(Exception, match=f"at most {VALIDATION_FROM}"):
        questions("heldout", VALIDATION_FROM + 1)  # more would reach into the validation problems


# --- bad input: one line, exit 2, before any model loads ------------------------------------------


@pytest.mark.parametrize("argv, expected", [
    (["/nonexistent/run"], "no such run folder"),
    (["tiny", "--recipe", RECIPES / "grpo.yaml", "--profile", "tiny", "--judge", "rm:x", "--output", "x.json"],
     "--judge"),
    (["tiny", "--recipe", RECIPES / "dpo.yaml", "--profile", "tiny", "--judge", "rm:/nonexistent",
      "--output", "x.json"], "--judge"),
    (["tiny", "--recipe", RECIPES / "dpo.yaml", "--profile", "tiny", "--judge", "outputs/rm", "--output", "x.json"],
     "expected rm:PATH"),
    (["tiny", "--recipe", RECIPES / "grpo.yaml", "--profile", "tiny", "--baseline", "--quantize", "int8"],
     "--quantize"),
    (["tiny", "--recipe", RECIPES / "grpo.yaml", "--profile", "tiny", "--k", "-1"], "--k"),
    (["tiny", "--recipe", RECIPES / "grpo.yaml", "--profile", "tiny"], "--output"),
    (["tiny", "--recipe", RECIPES / "hh_grpo.yaml", "--profile", "tiny", "--output", "x.json"],
     "no held-out evaluation"),
    (["tiny", "--recipe", RECIPES / "dpo.yaml", "--profile", "tiny", "--split", "validation", "--output", "x.json"],
     "--split validation: a `dpo` run's evaluation"),
    (["tiny", "--recipe", RECIPES / "grpo.yaml", "--profile", "tiny", "--split", "all", "--output", "x.json"],
     "has the split(s) heldout, validation"),
    # a misspelt flag of evaluate's own reaches the recipe as an override: the flag meant is named
    (["tiny", "--recipe", RECIPES / "dpo.yaml", "--profile", "tiny", "--baselin", "--output", "x.json"],
     "unknown option `--baselin` for rlhf-recipes evaluate. Did you mean `--baseline`?"),
])
def test_bad_input_is_one_line(argv, expected, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert evaluate(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and expected in err, err


@pytest.mark.parametrize("argv, expected", [
    (["nobody/not-a-model", "--recipe", RECIPES / "grpo.yaml"],
     "MODEL: `nobody/not-a-model` is not in the local model cache and HF_HUB_OFFLINE is set"),
    # --baseline loads the recipe's starting model too
    (["tiny", "--recipe", RECIPES / "dpo.yaml", "--profile", "tiny", "--model_name_or_path", "nobody/not-a-model",
      "--baseline"], "command line: `model_name_or_path`: `nobody/not-a-model` is not in the local model cache"),
])
def test_a_hub_model_not_cached_offline_is_one_line_before_loading(argv, expected, capsys, tmp_path, monkeypatch):
    """Offline, a hub id that is not cached was a minute of retries and two tracebacks: the runner's line instead."""
    import huggingface_hub.constants

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    assert evaluate(*argv, "--output", "x.json") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and expected in err, err
    assert "hf download nobody/not-a-model" in err and not (tmp_path / "x.json").exists()


def test_eval_every_is_range_checked(tmp_path, capsys):
    run_recipe("grpo.yaml", tmp_path / "bad", "--eval_every", "-1", expect=2)
    assert "`eval_every` must be" in capsys.readouterr().err


def test_implicit_reward_uses_the_runs_beta_even_when_it_is_zero():
    """The preference evaluator's implicit reward is beta x the log-ratio with the run's beta as given: a beta of 0
    ranks no pair (every margin 0, accuracy 0.5); it was silently turned into 0.1 (`beta or 0.1`)."""
    from types import SimpleNamespace

    from rlhf_recipes.evaluation.options import EvalOptions
    from rlhf_recipes.evaluation.preferences import PreferenceEvaluator

    logprobs = {"policy": {"chosen": [(-1.0, 2)], "rejected": [(-3.0, 2)]},
                "reference": {"chosen": [(-2.0, 2)], "rejected": [(-2.0, 2)]}}

    class Fake(PreferenceEvaluator):
        def data(self):
            return [{"prompt": [], "chosen": [], "rejected": []}], {}

        def reference(self):
            return "reference", None

        def logprobs(self, model, tokenizer, problems):
            return logprobs[model]

    for beta, margin in ((0.0, 0.0), (0.5, 1.0)):
        recipe = SimpleNamespace(algorithm=SimpleNamespace(reference_model=True, averages_logprobs=False),
                                 training=SimpleNamespace(), setting={"beta": beta}.get)
        scores = Fake(recipe, EvalOptions()).score("policy", None)
        assert scores.per_problem["implicit_margin"] == [margin], beta
    # DPO-norm (the registry's averages_logprobs): the log-ratio per completion token, as its loss and logged rewards
    recipe = SimpleNamespace(algorithm=SimpleNamespace(reference_model=True, averages_logprobs=True),
                             training=SimpleNamespace(), setting={"beta": 0.5}.get)
    scores = Fake(recipe, EvalOptions()).score("policy", None)
    assert scores.per_problem["implicit_margin"] == [0.5]  # 0.5 x ((-1 + 2) / 2 - (-3 + 2) / 2)
    assert "averaged over the completion's tokens" in scores.decoding["implicit_reward"]


def test_a_weights_file_cut_short_is_one_line_naming_it(tmp_path, capsys):
    """A model.safetensors cut short (a save killed mid-write) was safetensors' traceback at load: one line naming
    the file, the bytes it has and what to do, before the recipe is built."""
    import os
    import shutil

    from rlhf_recipes.tiny import tiny_model_path

    run = tmp_path / "run"
    shutil.copytree(tiny_model_path(), run / "checkpoint-4")
    weights = run / "checkpoint-4" / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    shutil.copytree(tiny_model_path(), run / "checkpoint-2")
    assert evaluate(run / "checkpoint-4", "--recipe", RECIPES / "grpo.yaml", "--profile", "tiny",
                    "--output", tmp_path / "x.json") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"MODEL: {weights} is cut short or corrupt" in err, err
    assert f"{run / 'checkpoint-2'}" in err and not (tmp_path / "x.json").exists()
