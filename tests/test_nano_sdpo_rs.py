"""SDPO and rejection sampling on the nano profile: both resolve with the book's own settings on spell_backward;
rejection sampling scored by the task's verifier makes the nano base better at held-out problems; SDPO starts from
nano-sdpo, whose teacher reads the solution it is shown (the nano base's does not), and runs on real successes (the
book's threshold, not the tiny profile's stand-in).

The nano base and nano-sdpo (recipes/nano_sdpo_sft.yaml, ~3 minutes of one core) are built once per test session,
in the background from its start (conftest.py's `nano_base` and `nano_sdpo_base`), so CI rarely waits for them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import RECIPES, setting_of

RS_RULES = ("top_per_prompt", "random_per_prompt", "top_k_overall", "random_k_overall")


def test_sdpo_and_rejection_sampling_resolve_on_nano_with_their_own_settings():
    """The nano model and task; every registry default kept (the selection rule of each recipe, SDPO's
    distillation); SDPO keeps the book's success threshold (the tiny profile lowers it to 0); rejection sampling
    scores with the task's verifier, so no reward model is checked or loaded."""
    from rlhf_recipes.config import RecipeError, load_recipe
    from rlhf_recipes.registry import ALGORITHMS
    from rlhf_recipes.validation import check_inputs

    names = ["sdpo", *(f"rejection_sampling_{rule}" for rule in RS_RULES)]
    for name in names:
        recipe = load_recipe([str(RECIPES / f"{name}.yaml"), "--profile", "nano"])
        start = "nano-sdpo" if name == "sdpo" else "nano"  # SDPO's teacher must read its prompt (docs/nano.md)
        assert recipe.model.model_name_or_path == start and recipe.args.dataset == "reasoning_gym"
        assert recipe.args.dataset_kwargs["tasks"][0]["name"] == "spell_backward"
        for key, value in ALGORITHMS[name].defaults.items():
            assert setting_of(recipe, key) == value, (name, key)
        check_inputs(recipe)  # the recipe's hub reward model (AceMath) is not required: the verifier replaces it
    sdpo = load_recipe([str(RECIPES / "sdpo.yaml"), "--profile", "nano"])
    assert sdpo.training.success_reward_threshold == 1.0 and sdpo.training.redraw_failed_groups
    assert sdpo.training.per_device_train_batch_size % sdpo.training.num_generations == 0
    rs = load_recipe([str(RECIPES / "rejection_sampling_top_k_overall.yaml"), "--profile", "nano"])
    assert rs.training.reward_func == "correctness_reward" and rs.training.selection_rule == "top_k_overall"
    # a family still without a nano overlay (SFT: the nano base is its own recipe) is refused, naming these two
    with pytest.raises(RecipeError, match="does not run the sft family.*rejection_sampling, self_distillation"):
        load_recipe([str(RECIPES / "sft.yaml"), "--profile", "nano"], construct=False)


def test_rejection_sampling_on_nano_raises_heldout_exact_match(nano_base, tmp_path):
    """Sample 8 completions per prompt from the nano base for 2000 prompts, keep the best eighth of them by the
    book's correctness reward (top_k_overall at the book's ratio K / (prompts x N) = 2000 / 16000), SFT on them:
    held-out exact match rises over the base by at least 5 points with the paired 95% interval above zero, and
    stage 6 reports the same held-out spell_backward accuracy as `rlhf-recipes evaluate`.
    Measured from the shipped base (19.5% on the validation problems, 17.0% on these), training seeds 42 / 0 / 1 / 2:
    at 2000 prompts +16.0 / +19.5 / +13.0 / +10.5 points, the paired intervals' low ends +10.5 / +13.5 / +8.0 / +6.0
    (~90 s each); at 3000 prompts +16.0 / +18.0 / +19.0 / +15.0, low ends +10.5 / +12.5 / +14.0 / +9.5 (~2 minutes);
    at the overlay's 1000 prompts +6.0 / +10.0 / +7.5 / +7.0, low ends +2.0 / +5.5 / +3.5 / +3.0 (~50 s), the lowest
    only about 2 seed standard deviations above zero: too close to call in CI. The floor, +5 points, is under half
    the lowest seed's gain at 2000 prompts, and the test's own seed (42) is fixed. (The earlier base, 20.0% on these
    problems, at 3000 prompts: +9.0 / +14.5 / +11.0 / +10.5, reference_runs/sweeps/
    rejection_sampling-nano-3000-prompts; at 1000: +2.0 / -0.5 / +3.5 / +3.5.)"""
    from conftest import assert_base_unmoved
    from rlhf_recipes.tools.evaluate import main as evaluate
    from rlhf_recipes.train import main

    assert_base_unmoved(nano_base, 0.195, "test_rejection_sampling_on_nano_raises_heldout_exact_match")
    run = tmp_path / "rs"
    assert main([str(RECIPES / "rejection_sampling_top_k_overall.yaml"), "--profile", "nano", "--seed", "42",
                 "--num_samples", "2000", "--selection_k", "2000", "--output_dir", str(run)]) == 0
    final = json.loads((run / "final_results.json").read_text())
    assert final["eval_task"].startswith("reasoning-gym") and final["eval_questions"] == 200
    assert final["rollouts"]["completions"] == 16000 and final["selection"]["pairs"] == 2000
    # the selection holds more correct answers than the rollouts it was picked from: the verifier selected
    assert final["selection"]["correct_fraction"] > 2 * final["rollouts"]["correct_fraction"]
    output = tmp_path / "eval.json"
    assert evaluate([str(run), "--baseline", "--batch_size", "100", "--output", str(output)]) == 0
    result = json.loads(output.read_text())
    assert result["metrics"]["exact_match"] == pytest.approx(final["test_accuracy"])  # the same greedy grading
    assert result["baseline"]["exact_match"] == pytest.approx(final["base_test_accuracy"])
    gain = result["difference"]["exact_match"]
    assert gain["value"] >= 0.05 and gain["low"] > 0, gain


def _answer_logprobs(model_path: Path, words: int) -> list[tuple[float, float]]:
    """(log p(oracle answer | SDPO's teacher prompt showing it), log p(oracle answer | the bare question)) for
    `words` spell_backward problems (seed 7, not a training draw's seed), summed over the answer's tokens."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlhf_recipes.data.reasoning_gym import system_prompt_text
    from rlhf_recipes.data.reasoning_gym_sdpo_sft import teacher_prompt
    from rlhf_recipes.data.reasoning_gym_sft import COMPLETION
    from rlhf_recipes.generation import chat_ids
    from rewards.reasoning_tasks import composite_dataset, composite_spec

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    system = {"role": "system", "content": system_prompt_text("DeepSeekZero")}
    spec = [{"name": "spell_backward", "weight": 1, "config": {"min_word_len": 3, "max_word_len": 8}}]
    pairs = []
    for entry in composite_dataset(composite_spec(spec, size=words, seed=7)):
        answer = [{"role": "assistant", "content": COMPLETION.format(answer=entry["answer"])}]
        student = [system, {"role": "user", "content": entry["question"]}]
        scores = []
        for prompt in (teacher_prompt(student, entry["answer"]), student):
            prompt_ids, completion_ids = chat_ids(tokenizer, prompt, answer)
            with torch.no_grad():
                logits = model(torch.tensor([prompt_ids + completion_ids])).logits[0, len(prompt_ids) - 1:-1]
            scores.append(logits.log_softmax(-1).gather(1, torch.tensor(completion_ids)[:, None]).sum().item())
        pairs.append(tuple(scores))
    return pairs


def test_nano_sdpo_teacher_reads_the_solution(nano_base, nano_sdpo_base):
    """SDPO presupposes a teacher that reads the solution in its prompt. nano-sdpo's does: the oracle answer is more
    likely with SDPO's teacher prompt showing it than with the bare question, for at least 18 of 20 words (measured:
    20 of 20 at 48 rows a step, 40 of 40 at 64), where the nano base's is not (measured: 0 of 40). (That its student stays partly competent is checked
    on the SDPO run's baseline below: the same model on the same held-out problems.)"""
    reads = sum(teacher > student for teacher, student in _answer_logprobs(nano_sdpo_base, 20))
    nano_reads = sum(teacher > student for teacher, student in _answer_logprobs(nano_base, 20))
    assert reads >= 18 and nano_reads <= 5, (reads, nano_reads)


def test_sdpo_on_nano_learns_from_groups_with_a_real_success(nano_sdpo_base, tmp_path):
    """The overlay's run (40 steps from nano-sdpo, ~25 s): every accepted group holds a rollout with the book's full
    correctness (1.0) -- the base answers some prompts exactly, so nothing is faked as on tiny -- failed groups are
    redrawn, and held-out exact match and mean correctness rise over the start with their paired 95% intervals above
    zero. Measured on this 2-core machine: 27% -> 44.5%, +17.5 points [+12, +23.5]; mean score +0.088 [+0.065, +0.113]
    (from the nano base, whose teacher cannot read, the same run fell 21% -> 2.5%). The start, nano-sdpo, stays partly
    competent on bare questions thanks to its replay rows: its exact match (the baseline) is in the nano base's 10-40%
    band (measured 27%, nano 21%), so SDPO has room to learn.
    Re-measured from the shipped nano-sdpo (reference_runs/nano/bases/: 20.5% held-out exact match, its build's
    record, built from the shipped nano), training seeds 42 / 0 / 1: exact match +15.5 [+10.0, +21.0] / +11.5
    [+6.0, +17.5] / +18.0 [+12.5, +23.5] points, mean score +0.074 [+0.052, ...] / +0.065 [+0.040, ...] / +0.076
    [+0.053, ...], ~40 s each: the floors (each paired interval above zero) clear the lowest seed's low ends by 6.0
    points and 0.040; the test's seed (42) is fixed. (From the earlier nano-sdpo, 18.0%: +15.0 / +15.0 / +18.5.)"""
    from conftest import assert_base_unmoved
    from rlhf_recipes.run_folder import read_metrics
    from rlhf_recipes.tools.evaluate import main as evaluate
    from rlhf_recipes.train import main

    assert_base_unmoved(nano_sdpo_base, 0.205, "test_sdpo_on_nano_learns_from_groups_with_a_real_success")
    run = tmp_path / "sdpo"
    assert main([str(RECIPES / "sdpo.yaml"), "--profile", "nano", "--seed", "42", "--output_dir", str(run)]) == 0
    final = json.loads((run / "final_results.json").read_text())
    draws = final["prompt_draws"]
    groups = final["step_batch"]["groups"]
    steps = [m for m in read_metrics(run / "metrics.jsonl") if "self_distillation/success_group_fraction" in m]
    assert draws["drawn"] - draws["skipped"] - draws["discarded"] == len(steps) * groups  # accepted groups, all trained
    assert steps and all(m["self_distillation/success_group_fraction"] == 1.0 for m in steps)
    assert all(m["rewards/correctness_reward/mean"] > 0 for m in steps)
    output = tmp_path / "eval.json"
    assert evaluate([str(run), "--baseline", "--batch_size", "100", "--output", str(output)]) == 0
    result = json.loads(output.read_text())
    assert 0.10 <= result["baseline"]["exact_match"] <= 0.40, result["baseline"]
    difference = result["difference"]
    assert difference["exact_match"]["low"] > 0 and difference["mean_score"]["low"] > 0, difference
