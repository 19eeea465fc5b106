"""Reward models on the nano profile: the ORM trains on rollouts sampled from the nano base (spell_backward, scored
by the task's scorer) and picks a correct rollout more often than a random pick, on held-out problems; the PRM's
steps (the answer's characters) and labels; the preference RM reads nano's pairs. The PRM's training run is not here (about
twice the ORM's time, over the CI budget): docs/nano.md has its measured numbers.

The nano base is the one tests/test_nano.py builds (cached for the session under RLHF_RECIPES_CACHE); the rollouts
are sampled once and cached there too (about 20 s: 1000 training prompts and 250 held-out ones, x 8).
"""

from __future__ import annotations

import json

import pytest

from conftest import RECIPES

# One epoch instead of the nano profile's two: 225 optimizer steps of 32 rollouts, on the profile's 1000 prompts x 8.
SHORT = ["--profile", "nano", "--num_train_epochs", "1"]
# Measured from the shipped base (19.5% on the validation problems), one epoch, best-of-8 over a random pick on 200
# held-out problems: training seed 7 (the recipe's, this test) +0.030 [-0.004, +0.064]; seeds 0 / 1 / 2 +0.050
# [+0.016, +0.084] / +0.035 [-0.000, +0.073] / +0.010 [-0.021, +0.042] (random pick 15.0% on each). Every seed gains,
# but at one epoch the paired interval reaches below zero on three of four seeds: a floor on it would fail whenever a
# change moves the run as a seed does. The floor is half the lowest seed's gain (a margin of 0.005). (From the
# earlier base, 20.0% on the test problems: seeds 7 / 0 / 1 / 2 +0.051 / +0.031 / +0.016 / +0.046, floor 0.008.)
MARGIN = 0.005


def test_prm_steps_are_the_answers_characters_labelled_until_the_first_error():
    from rewards.reward_model_encoding import ANSWER_END_STEP, answer_character_steps
    from rlhf_recipes.data.reasoning_gym_rollouts import step_labels

    assert answer_character_steps("<think>\n\n</think>\n<answer>olleh</answer>") == [*"olleh", ANSWER_END_STEP]
    assert answer_character_steps("<answer>olleh") == []  # no closed answer: no steps
    assert step_labels("olleh", "olleh") == [1, 1, 1, 1, 1, 1]  # every letter, then the end: good
    assert step_labels("oLlEh", "olleh") == [1, 1, 1, 1, 1, 1]  # case-insensitive, as the task's scorer
    assert step_labels("olxeh", "olleh") == [1, 1, -1]  # the first wrong letter ends the trajectory
    assert step_labels("oll", "olleh") == [1, 1, 1, -1]  # too short: the end step is bad
    assert step_labels("ollehh", "olleh") == [1, 1, 1, 1, 1, -1]  # too long: the letter past the end is bad


def test_a_saved_prm_cuts_completions_the_way_it_was_trained():
    from rewards.reward_model_encoding import ANSWER_END_STEP, completion_steps

    text = "<think>\n\n</think>\n<answer>abc</answer>"
    assert completion_steps(text, "\n<step>\n", "answer_characters") == ["a", "b", "c", ANSWER_END_STEP]
    assert completion_steps("one\n\ntwo", "\n<step>\n") == ["one", "two"]  # the book's default is unchanged


def test_best_of_n_picks_the_top_score_and_compares_with_a_random_pick_and_the_oracle():
    from rlhf_recipes.evaluation.best_of_n import selection

    out = selection(scores=[[0.1, 0.9, 0.5], [0.7, 0.2], [0.3, 0.3]], correct=[[0, 1, 0], [0, 1], [0, 0]])
    assert out["best_of_n_accuracy"] == [1.0, 0.0, 0.0]
    assert out["random_pick_accuracy"] == pytest.approx([1 / 3, 0.5, 0.0])
    assert out["oracle_accuracy"] == [1.0, 1.0, 0.0]
    assert out["best_of_n_gain"] == pytest.approx([2 / 3, -0.5, 0.0])


@pytest.mark.parametrize("rollouts, message", [
    (None, "set dataset_kwargs.rollouts to a mapping"),
    ({"policy": "nano", "n": 8, "temperature": 0.3, "top_p": 0.95}, "keys \\['max_new_tokens'"),
    ({"policy": "nano", "n": "8", "temperature": 0.3, "top_p": 0.95, "max_new_tokens": 24}, "rollouts.n must be"),
    ({"policy": "nano", "n": 8, "temperature": 0, "top_p": 0.95, "max_new_tokens": 24}, "temperature > 0"),
])
def test_bad_rollout_settings_are_one_line_errors(rollouts, message):
    from types import SimpleNamespace

    from rlhf_recipes.data.base import DataError
    from rlhf_recipes.data.reasoning_gym_rollouts import rollout_settings

    kwargs = {"tasks": ["spell_backward"], **({"rollouts": rollouts} if rollouts is not None else {})}
    recipe = SimpleNamespace(source="r.yaml", args=SimpleNamespace(dataset="reasoning_gym_rollouts",
                                                                   dataset_kwargs=kwargs))
    with pytest.raises(DataError, match=message):
        rollout_settings(recipe)


def test_the_report_title_counts_the_split_and_the_best_of_n_problems_apart(capsys):
    """A reward model's report is over two sets: its split (the classifier's numbers) and best-of-N on held-out
    problems; the title said only the split's 100 where the best-of-8 rows are over 200 (the shipped ORM's)."""
    from rlhf_recipes.paths import REFERENCE_RUNS_DIR
    from rlhf_recipes.tools.evaluate import print_report

    result = json.loads((REFERENCE_RUNS_DIR / "nano" / "reward_models" / "orm" / "eval" / "heldout.json").read_text())
    print_report(result)
    out = " ".join(capsys.readouterr().out.split())
    assert "(100 problems; best-of-8 on 200 held-out problems, baseline)" in out


def test_preference_reward_models_train_on_the_nano_pairs():
    """A Bradley-Terry RM on nano reads the direct-alignment family's pairs (a correct and an incorrect sample of the
    nano base), on the policy-gradient runs' task and words; the ORM and PRM keep their rollouts."""
    from rlhf_recipes.config import load_recipe

    for name in ("preference_rm", "hh_rm"):
        recipe = load_recipe([str(RECIPES / f"{name}.yaml"), "--profile", "nano"], construct=False)
        assert recipe.args.dataset == "reasoning_gym_preferences" and recipe.model.model_name_or_path == "nano"
        assert recipe.args.dataset_kwargs["tasks"][0]["name"] == "spell_backward"
        assert "rollouts" not in recipe.args.dataset_kwargs  # the rollout sampler's settings are the ORM's
    orm = load_recipe([str(RECIPES / "orm.yaml"), "--profile", "nano"], construct=False)
    assert orm.args.dataset == "reasoning_gym_rollouts" and "rollouts" in orm.args.dataset_kwargs


def test_nano_orm_picks_the_correct_rollout_more_often_than_a_random_pick(nano_base, tmp_path):
    """A seeded one-epoch ORM on the nano base's rollouts: its best-of-8 pick on held-out problems (the held-out
    evaluator's draw, never trained on) beats the mean correctness of the 8 (a random pick's expected accuracy) by
    at least MARGIN (measured over seeds above), as `rlhf-recipes evaluate` reports it."""
    from conftest import assert_base_unmoved
    from rlhf_recipes.tools.evaluate import main as evaluate
    from rlhf_recipes.train import main as train

    assert_base_unmoved(nano_base, 0.195, "test_nano_orm_picks_the_correct_rollout_more_often_than_a_random_pick")
    run = tmp_path / "orm"
    assert train([str(RECIPES / "orm.yaml"), *SHORT, "--seed", "7", "--output_dir", str(run)]) == 0
    assert evaluate([str(run), "--output", str(run / "eval.json")]) == 0
    result = json.loads((run / "eval.json").read_text())
    metrics, gain = result["metrics"], result["intervals"]["best_of_n_gain"]
    assert result["details"]["best_of_n"]["problems"] == 200 and result["details"]["best_of_n"]["overlaps_dropped"] >= 0
    assert metrics["random_pick_accuracy"] <= metrics["oracle_accuracy"]
    assert result["details"]["demo"] == [] and result["samples"][0]["rollouts_by_score"]  # not the book's GSM8K demo
    shown = [text for sample in result["samples"] for text, _, _ in sample["rollouts_by_score"]]
    assert any(text.startswith("…") for text in shown)  # a cut rollout says so ("…ink>", not the model's "ink>")
    assert all(len(text) <= 40 for text in shown), shown
    assert metrics["best_of_n_gain"] >= MARGIN, (metrics, gain)
