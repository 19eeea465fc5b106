"""The nano base is built to a held-out target, not to a step count (rlhf_recipes/evaluation/target.py): the rule on
made-up curves, the cache key, the caption of nano-book's table, and one cheap real build of the nano SFT recipe
(6 steps from the untrained nano model, ~30 s) whose saved model is the kept checkpoint, not the last one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import RECIPES


def goal(**kwargs):
    from rlhf_recipes.evaluation.target import Goal

    return Goal(**{"target": 0.20, "band": (0.15, 0.25), "every": 2, **kwargs})


def test_keeps_the_checkpoint_closest_to_the_target_inside_the_band_and_stops_past_it():
    from rlhf_recipes.evaluation.target import select

    steep = [(120, 0.05), (122, 0.08), (124, 0.12), (126, 0.16), (128, 0.185), (130, 0.23), (132, 0.27),
             (134, 0.20)]  # the last one is never seen: the build stopped at 132, the first value above the band
    assert select(steep, goal()) == {"step": 128, "value": 0.185, "stopped_at": 132}
    # a dip back down after the target counts as long as the curve stays inside the band
    wobbly = [(2, 0.10), (4, 0.24), (6, 0.17), (8, 0.21), (10, 0.30)]
    assert select(wobbly, goal()) == {"step": 8, "value": 0.21, "stopped_at": 10}
    # equally close: the earliest is kept (0.25 and 0.75 are exact in binary)
    assert select([(5, 0.25), (10, 0.75), (15, 0.9)], goal(target=0.5, band=(0.2, 0.8)))["step"] == 5
    # the ceiling reached inside the band: the closest so far
    assert select([(2, 0.16), (4, 0.18)], goal())["step"] == 4


def test_evaluates_sparsely_far_below_the_band_and_every_step_from_fine_from_on():
    from rlhf_recipes.evaluation.target import TargetSelection

    rule = TargetSelection(goal(every=10, fine_from=0.05, fine_every=1))
    assert [s for s in range(1, 31) if rule.due(s)] == [10, 20, 30]
    rule.observe(10, 0.0)
    assert not rule.due(11)
    rule.observe(20, 0.06)  # at or above fine_from: every step from here on, also if the next value dips
    assert rule.due(21)
    rule.observe(21, 0.04)
    assert rule.due(22)


@pytest.mark.parametrize("curve, says", [
    ([(2, 0.02), (4, 0.08), (6, 0.12)], "raise max_steps"),  # ended below the band
    ([(2, 0.10), (4, 0.31)], "evaluate more often"),  # one evaluation jumped over the band
    ([(2, 0.40)], "2: 0.400"),  # above the band at the first evaluation
])
def test_no_checkpoint_inside_the_band_is_an_error_that_shows_the_curve(curve, says):
    from rlhf_recipes.evaluation.target import TargetMissed, select

    with pytest.raises(TargetMissed, match=says):
        select(curve, goal())


def test_a_goal_whose_target_lies_outside_its_band_is_refused():
    with pytest.raises(ValueError, match="outside its band"):
        goal(target=0.3)
    with pytest.raises(ValueError, match="at least 1"):
        goal(every=0)
    with pytest.raises(ValueError, match="expected heldout .* or validation"):
        goal(split="valid")


@pytest.mark.parametrize("field, says", [('"split": "valid"', "split 'valid'"),
                                         ('"splt": "validation"', "unexpected keyword argument 'splt'")])
def test_a_bad_heldout_target_names_the_key_before_any_model_loads(field, says):
    """The recipe key's goal, wrong: a RecipeError naming `heldout_target` and the goal's fields (the runner prints
    it as one line), raised where the run builds its callbacks, before the model loads (rlhf_recipes/train.py)."""
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.errors import RecipeError
    from rlhf_recipes.run_evaluations import heldout_target

    recipe = load_recipe([str(RECIPES / "nano_sft.yaml"), "--heldout_target", f'{{"target": 0.2, {field}}}',
                          "--output_dir", "unused"], construct=False)
    with pytest.raises(RecipeError, match=f"`heldout_target`: .*{says}.*fields: target, band, .*split"):
        heldout_target(recipe, [str(RECIPES / "nano_sft.yaml")])


def test_the_base_cache_key_follows_the_goal(monkeypatch):
    """A base built to another goal (or an old step-count base) is never reused: the goal is in the key."""
    from rlhf_recipes import nano

    before, sdpo_before = nano.base_fingerprint(), nano.sdpo_base_fingerprint()
    monkeypatch.setattr(nano, "BASE_GOAL", {**nano.BASE_GOAL, "target": 0.25})
    assert nano.base_fingerprint() != before and nano.sdpo_base_fingerprint() != sdpo_before  # nano-sdpo: from nano


def test_nano_book_table_shows_the_base_as_its_build_measured_it():
    from rich.console import Console

    from lab.nano_book import table

    record = {"metric": "exact_match", "value": 0.205, "interval": [0.153, 0.268], "step": 148,
              "goal": {"target": 0.2, "band": [0.15, 0.25], "every": 2, "problems": 200},
              "built_by": {"recipe": "recipes/nano_sft.yaml"}, "machine": {"processor": "CPU X", "torch_threads": 1}}
    console = Console(record=True, width=200)
    console.print(table([], base=record))
    text = " ".join(console.export_text().split())  # the caption wraps at the table's width
    assert "20.5% held-out exact_match [15.3, 26.8]" in text and "step 148 of recipes/nano_sft.yaml" in text
    assert "closest to 20% inside [15%, 25%]" in text and "on 200 problems," in text
    # A base chosen on validation problems says so: its number is not the base column's (the test problems).
    console = Console(record=True, width=200)
    console.print(table([], base={**record, "goal": {**record["goal"], "split": "validation"}}))
    text = " ".join(console.export_text().split())
    assert "on 200 validation problems (the base column: the test problems)" in text


@pytest.mark.slow  # a real (short) SFT build with its held-out evaluations: ~30 s
def test_a_real_build_saves_the_kept_checkpoint_and_records_it(tmp_path):
    """The nano SFT recipe for 6 steps from the untrained model, evaluated every 2 steps on 20 held-out problems
    with a target of 0% (the untrained model's): all three evaluations lie in the band, the first is kept, and the
    saved weights are bit-identical to a plain 2-step run of the same recipe (the evaluations leave training's
    random stream alone), not to the 6 steps trained."""
    from safetensors.torch import load_file

    from rlhf_recipes.evaluation.target import RECORD
    from rlhf_recipes.nano import nano_init_path, run_sft
    from rlhf_recipes.train import main

    nano_init_path()
    small = ("--num_samples", "400")
    built = tmp_path / "built"
    built.mkdir()
    run_sft("nano_sft", built, {"target": 0.0, "band": [0.0, 0.0], "every": 2, "problems": 20},
            ("--max_steps", "6", *small))
    record = json.loads((built / RECORD).read_text())
    assert [s for s, _ in record["curve"]] == [2, 4, 6] and record["step"] == 2 and record["steps_trained"] == 6
    assert record["value"] == 0.0 and record["heldout"]["problems"] == 20
    assert record["built_by"]["overrides"] == ["--max_steps", "6", *small]  # no temporary folder in the record
    metrics = [json.loads(line) for line in (built / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "eval/exact_match" in m] == [2, 4, 6]  # logged like eval_every's
    for steps in ("2", "6"):
        assert main([str(RECIPES / "nano_sft.yaml"), "--max_steps", steps, *small,
                     "--output_dir", str(tmp_path / steps)]) == 0
    kept, two, six = (load_file(str(Path(d) / "model.safetensors")) for d in (built, tmp_path / "2", tmp_path / "6"))
    assert all((kept[k] == two[k]).all() for k in two)
    assert any(not (kept[k] == six[k]).all() for k in six)


@pytest.mark.slow  # a real (short) SFT build, measured at the end: ~30 s
def test_without_a_target_the_build_trains_its_steps_and_is_measured_at_the_end(tmp_path):
    """nano-sdpo's kind of goal (target None, the SDPO recipe's held-out problems): no evaluation during the run,
    one at the end, recorded for the last step."""
    from rlhf_recipes.evaluation.target import RECORD
    from rlhf_recipes.nano import SDPO_BASE_GOAL, nano_init_path, run_sft

    nano_init_path()
    built = tmp_path / "built"
    built.mkdir()
    run_sft("nano_sft", built, {**SDPO_BASE_GOAL, "problems": 20}, ("--max_steps", "2", "--num_samples", "200"))
    record = json.loads((built / RECORD).read_text())
    assert record["step"] == record["steps_trained"] == 2 and record["curve"] == [[2, record["value"]]]
    assert record["goal"]["recipe"] == "sdpo" and record["heldout"]["problems"] == 20
    assert not any("eval/exact_match" in line for line in (built / "metrics.jsonl").read_text().splitlines())
