"""The nano profile: its SFT base builds deterministically to its held-out target, and GRPO makes it better at the
book's task (spell_backward), measured by the held-out evaluation with the book's correctness reward.

The base is built once per test session (recipes/nano_sft.yaml through the runner, about a minute on one thread;
conftest.py's `nano_base`, started in the background at the session's start).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import RECIPES, setting_of

GRPO_STEPS = 160  # 40 rollout batches on the nano overlay: ~1 minute on one CPU thread


def _evaluate(*argv: str) -> dict:
    from rlhf_recipes.tools.evaluate import main

    output = Path(argv[argv.index("--output") + 1])
    assert main(list(argv)) == 0
    return json.loads(output.read_text())


def test_tokenizer_spells_words_letter_by_letter_and_keeps_the_prompt_short():
    from rlhf_recipes.data.reasoning_gym import system_prompt_text
    from rlhf_recipes.nano import QUESTION_PREFIX, build_tokenizer

    tokenizer = build_tokenizer()
    chat = [{"role": "system", "content": system_prompt_text("DeepSeekZero")},
            {"role": "user", "content": QUESTION_PREFIX + "appall"}]
    prompt = tokenizer(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))["input_ids"]
    assert len(prompt) < 45  # the ~350-byte system prompt and the question prefix are one token each
    answer = tokenizer("<answer>llappa</answer>")["input_ids"]
    assert tokenizer.convert_ids_to_tokens(answer) == ["<answer>", *"llappa", "</answer>"]


def test_nano_profile_layers_like_tiny_and_keeps_the_algorithms_settings():
    """Every policy-gradient recipe resolves on nano: the embedded model, the book's task in the nano word range,
    the algorithm's own registry defaults untouched; a family without a nano overlay is refused in one line."""
    from rlhf_recipes.config import RecipeError, load_recipe
    from rlhf_recipes.registry import ALGORITHMS
    from lab.nano_book import nano_algorithms

    names = nano_algorithms()
    assert names == [n for n, a in ALGORITHMS.items() if a.family == "policy_gradient"] and "dpo" not in names
    for name in names:
        recipe = load_recipe([str(RECIPES / f"{name}.yaml"), "--profile", "nano"], construct=False)
        assert recipe.model.model_name_or_path == "nano" and recipe.origin["learning_rate"].startswith(
            "profile nano (")
        assert recipe.args.dataset_kwargs["tasks"][0]["name"] == "spell_backward"
        for key, value in ALGORITHMS[name].defaults.items():
            assert setting_of(recipe, key) == value, (name, key)
        assert setting_of(recipe, "generation_batch_size") % setting_of(recipe, "effective_batch_size") == 0
    explicit = load_recipe([str(RECIPES / "grpo.yaml"), "--profile", "nano", "--learning_rate", "3e-5"],
                           construct=False)
    assert setting_of(explicit, "learning_rate") == 3e-5  # the command line still wins over the profile
    with pytest.raises(RecipeError, match="profile `nano` does not run the sft family"):
        load_recipe([str(RECIPES / "sft.yaml"), "--profile", "nano"], construct=False)
    # nano swaps the data for spell_backward: a recipe rewarded by a learned RM (the HH pipeline's) is refused
    with pytest.raises(RecipeError, match="learned reward model `rm:outputs/hh_rm` does not score"):
        load_recipe([str(RECIPES / "hh_grpo.yaml"), "--profile", "nano"], construct=False)


def test_nano_base_is_built_by_the_sft_recipe_to_its_heldout_target(nano_base, tmp_path):
    """The base is the SFT recipe's run, kept at the step whose exact match on the validation problems was closest
    to the target (rlhf_recipes/evaluation/target.py), and `rlhf-recipes evaluate --split validation` gives the
    number its record states."""
    import yaml

    from rlhf_recipes.evaluation.target import RECORD
    from rlhf_recipes.nano import BASE_GOAL

    record = yaml.safe_load((nano_base / "config.yaml").read_text())  # the SFT run's resolved recipe
    assert record["algorithm"] == "sft" and record["resolved_from"].endswith("nano_sft.yaml")
    built = json.loads((nano_base / RECORD).read_text())
    low, high = BASE_GOAL["band"]
    assert low <= built["value"] <= high and built["step"] < record["max_steps"], built["curve"]
    assert built["heldout"]["split"] == BASE_GOAL["split"] == "validation"  # chosen on problems no table reports
    result = _evaluate("nano", "--recipe", str(RECIPES / "grpo.yaml"), "--profile", "nano", "--batch_size", "50",
                       "--split", "validation", "--output", str(tmp_path / "base.json"))
    assert result["data"]["problems"] == 200 and result["metrics"]["format_rate"] > 0.9
    assert result["metrics"]["exact_match"] == built["value"], (result["metrics"], built["value"])


def test_torch_threads_sets_the_runs_cpu_threads_and_the_shipped_nano_runs_name_theirs(nano_base, tmp_path):
    """`torch_threads` (the count changes a CPU run's last bits, so a re-run with another count drifts from the
    original): the run and its evaluation set it whatever the process had, final_results.json records the count a
    run trained with, 0 is refused in one line; every shipped nano run's config.yaml names the one thread it ran
    with, so re-running it gives its numbers on any machine with the same kind of CPU."""
    import torch

    from rlhf_recipes.config import RecipeError, load_recipe
    from rlhf_recipes.paths import REFERENCE_RUNS_DIR
    from rlhf_recipes.train import main

    assert load_recipe([str(RECIPES / "grpo.yaml"), "--profile", "nano"], construct=False).args.torch_threads is None
    with pytest.raises(RecipeError, match="torch_threads"):
        load_recipe([str(RECIPES / "grpo.yaml"), "--profile", "nano", "--torch_threads", "0"], construct=False)
    shipped = sorted((REFERENCE_RUNS_DIR / "nano").glob("**/config.yaml"))
    runs = [c for c in shipped if "bases" not in c.parts and "nano_sft_base" not in c.parts]
    assert len(runs) >= 57 and all(load_recipe([str(c)], construct=False).args.torch_threads == 1 for c in runs)
    run = tmp_path / "grpo"
    import rlhf_recipes.registry as registry

    building_data = []  # the threads while the evaluation builds its held-out data (an ORM's: sampled rollouts)

    def evaluator_for(recipe, options, _real=registry.evaluator_for):
        evaluator = _real(recipe, options)
        data = evaluator.data
        evaluator.data = lambda *a, **k: (building_data.append(torch.get_num_threads()), data(*a, **k))[1]
        return evaluator

    try:
        torch.set_num_threads(2)
        assert main([str(RECIPES / "grpo.yaml"), "--profile", "nano", "--max_steps", "1", "--torch_threads", "1",
                     "--output_dir", str(run)]) == 0
        assert json.loads((run / "final_results.json").read_text())["torch_threads"] == 1
        torch.set_num_threads(2)
        registry.evaluator_for, real = evaluator_for, registry.evaluator_for
        try:
            _evaluate(str(run), "--num_problems", "4", "--output", str(tmp_path / "eval.json"))
        finally:
            registry.evaluator_for = real
        assert building_data and set(building_data) == {1}  # the run's config.yaml says 1, before its data
    finally:
        torch.set_num_threads(1)  # this test process's own count (conftest)


def test_sampled_rollouts_are_the_same_whatever_the_threads_and_wherever_the_checkout(tmp_path, monkeypatch):
    """The rollout cache was keyed on torch's thread count and the model folder's path and mtime, so a plain
    `train --profile nano` (every core), a sweep worker (1 thread) and another checkout each re-sampled 3,000 prompts
    x 8 and trained on their own pairs. The rows are sampled on one thread (the shipped runs' count), the caller's
    count restored, and keyed on the weights' bytes: the same recipe gives the same data on one machine."""
    import os
    import shutil

    import torch

    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import sampled_rollouts
    from rlhf_recipes.tiny import tiny_model_path

    recipe = load_recipe([str(RECIPES / "dpo.yaml"), "--profile", "nano"], construct=False)
    here, there = tmp_path / "checkout-a" / "base", tmp_path / "checkout-b" / "base"
    shutil.copytree(tiny_model_path(), here)
    shutil.copytree(tiny_model_path(), there)
    os.utime(there / "model.safetensors", (0, 0))  # another checkout's file times
    key = lambda model: sampled_rollouts.cache_key(recipe, str(model), size=8, seed=0, n=2,
                                                   max_new_tokens=4, sampling={})
    threads_while_sampling = []

    def fake_generate(model_path, chats, n, **kwargs):
        threads_while_sampling.append(torch.get_num_threads())
        return [[{"text": "<answer>1</answer>", "truncated": False}] * n for _ in chats]

    monkeypatch.setattr(sampled_rollouts, "generate_from", fake_generate)
    keys = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            keys += [key(here), key(there)]
            sampled_rollouts._sample(recipe, str(here), size=2, seed=0, n=2, max_new_tokens=4, sampling={},
                                     batch_size=2, dataset_kwargs=None)
            assert torch.get_num_threads() == threads  # the caller's count, restored
    finally:
        torch.set_num_threads(1)  # this test process's own count (conftest)
    assert len(set(keys)) == 1 and threads_while_sampling == [1, 1]
    with open(there / "model.safetensors", "r+b") as f:  # other weights: other rows
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x01\x02\x03")
    assert key(there) != keys[0]


def test_nano_book_and_nano_figures_reuse_the_shipped_runs():
    """Their jobs ask what the shipped runs ran (one torch thread included), so `--out reference_runs/nano` reuses
    every finished run instead of refusing it as a run with other settings."""
    from rlhf_recipes.paths import REFERENCE_RUNS_DIR
    from lab import nano_book, nano_figures
    from lab.executor import check_settings

    out = REFERENCE_RUNS_DIR / "nano"
    jobs = [job for family in ("policy_gradient", "direct_alignment")
            for job in nano_book.jobs(nano_book.parse(["--family", family, "--seeds", "3", "--out", str(out)]))]
    jobs += nano_figures.jobs(nano_figures.parse(["--figure", "rejection_sampling,distillation",
                                                  "--out", str(out / "figures")]))
    assert len(jobs) == 62 and all((job.folder / "config.yaml").exists() for job in jobs)
    for job in jobs:
        check_settings(job)  # raises, naming the keys, for a kept run with other settings


def test_nano_sft_is_deterministic(nano_base, tmp_path):
    """Two short runs of the base's recipe give the same weights, bit for bit (the base is rebuilt anywhere)."""
    from safetensors.torch import load_file

    from rlhf_recipes.nano import nano_init_path
    from rlhf_recipes.train import main

    weights = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main([str(RECIPES / "nano_sft.yaml"), "--max_steps", "3", "--num_samples", "400",
                     "--output_dir", str(out)]) == 0
        weights.append(load_file(str(out / "model.safetensors")))
    assert weights[0].keys() == weights[1].keys()
    assert all((weights[0][k] == weights[1][k]).all() for k in weights[0])
    init = load_file(str(Path(nano_init_path()) / "model.safetensors"))
    assert any(not (init[k] == weights[0][k]).all() for k in init)  # and training did change them


def test_grpo_on_nano_raises_heldout_correctness(nano_base, tmp_path):
    """A short seeded GRPO run raises the held-out mean of the book's correctness reward (reasoning-gym's
    score_answer, partial credit) by at least 0.025 over the base, with the paired 95% interval above zero.
    Measured from the shipped base (chosen on validation problems: 19.5% there, 17.0% on these test problems), 160
    steps, training seeds 0 / 1 / 2 / 42 (this test's): +0.056 / +0.076 / +0.050 / +0.083, paired intervals' low
    ends +0.026 / +0.050 / +0.027 / +0.056 (exact match +8.0 / +12.5 / +5.5 / +14.0 points); ~1.5 min each on one
    thread. The floor is half the lowest seed's gain (a margin of 0.025, ~1.5 seed standard deviations, 0.016, under
    the lowest seed); the earlier base (20.0% on the test problems) gave +0.050 / +0.053 / +0.057 at seeds 0 / 1 / 2."""
    from conftest import assert_base_unmoved
    from rlhf_recipes.train import main

    assert_base_unmoved(nano_base, 0.195, "test_grpo_on_nano_raises_heldout_correctness")
    run = tmp_path / "grpo"
    assert main([str(RECIPES / "grpo.yaml"), "--profile", "nano", "--max_steps", str(GRPO_STEPS), "--seed", "42",
                 "--output_dir", str(run)]) == 0
    result = _evaluate(str(run), "--baseline", "--batch_size", "50", "--output", str(tmp_path / "eval.json"))
    gain = result["difference"]["mean_score"]
    assert gain["value"] >= 0.025 and gain["low"] > 0, gain


@pytest.mark.parametrize("family", ["policy_gradient", "direct_alignment"])
def test_nano_book_reads_the_shipped_runs_into_one_figure_and_a_table(family, tmp_path):
    """The recorded nano runs of a family (reference_runs/nano/<algorithm>/seed-<s>/, 2-3 training seeds) go through
    nano-book's own summary, seed aggregation, plot and table: every algorithm of the family is there with every
    seed, a gain per held-out metric inside its interval and a wall time, and the shipped JSON's numbers are what
    the runs give; a bad --algorithms or --family is refused."""
    from rlhf_recipes.paths import REFERENCE_RUNS_DIR
    from lab.nano_book import (book_metrics, nano_algorithms, over_seeds, parse, plot, summary, table,
                                              wall_seconds)

    from rlhf_recipes.book_reference import BOOK

    heldout, _ = book_metrics(family)
    shipped = {row["algorithm"]: row for row in json.loads(
        (REFERENCE_RUNS_DIR / "nano" / f"nano_book_{family}.json").read_text())["algorithms"]}
    # every algorithm of the family the book ran has shipped nano runs; one added since is simply not recorded
    recorded = [name for name in nano_algorithms(family) if (REFERENCE_RUNS_DIR / "nano" / name).is_dir()]
    assert set(shipped) == set(recorded) and {n for n in nano_algorithms(family) if n in BOOK} <= set(recorded)
    rows = []
    for name in recorded:
        per_seed = []
        for run in sorted((REFERENCE_RUNS_DIR / "nano" / name).glob("seed-*")):
            wall = wall_seconds(run)  # the recorded wall, else the trainer's (runs adopted from a sweep)
            row = summary(name, run, wall, json.loads((run / "eval" / "nano_book.json").read_text()), family)
            for metric in heldout:
                low, high = row["metrics"][metric]["gain_interval"]
                assert low <= row["metrics"][metric]["gain"] <= high and row["curves"]["heldout"][metric]
            assert row["curves"]["training"]
            per_seed.append(row)
        assert len(per_seed) == shipped[name]["seeds"] == 3, name  # 3 training seeds in both families
        row = over_seeds(per_seed)
        for metric in heldout:
            assert row["metrics"][metric]["gain"] == pytest.approx(shipped[name]["metrics"][metric]["gain"])
        assert row["learns"] == shipped[name]["learns"]
        rows.append(row)
    plot(rows, tmp_path / "nano_book.png", family)
    assert (tmp_path / "nano_book.png").stat().st_size > 10_000
    assert table(rows, family).row_count == len(recorded)
    for bad in (["--algorithms", "grpo,dpo"], ["--family", "direct_alignment", "--algorithms", "grpo"],
                ["--family", "sft"]):
        with pytest.raises(SystemExit) as stop:
            parse(bad)
        assert stop.value.code == 2


def test_resolving_a_nano_name_never_trains_a_base(monkeypatch, tmp_path):
    """The nano bases are built by the runner's first step (train.main) or `rlhf-recipes nano build`;
    resolving the model name only finds them: a missing base is a one-line error naming the command, and no build
    starts (it used to start `python -m rlhf_recipes.tools.nano_base`, ~2-4 minutes of training)."""
    import rlhf_recipes.nano as nano
    from rlhf_recipes.config import RecipeError
    from rlhf_recipes.models import resolve_model_path

    monkeypatch.setattr(nano, "_sdpo_base_dir", lambda: tmp_path / "nano-sdpo-missing")
    monkeypatch.setattr(nano, "run_sft", lambda *a, **k: pytest.fail("resolving a name started a build"))
    with pytest.raises(RecipeError, match=r"nano-sdpo base is not built yet .*`rlhf-recipes nano build --sdpo`"):
        resolve_model_path("nano-sdpo")
    assert not (tmp_path / "nano-sdpo-missing").exists()


def test_the_shipped_nano_bases_are_the_current_builds():
    """Both SFT bases ship with the checkout (reference_runs/nano/bases/), so every machine and every CI run start
    from the same weights and train no base: the shipped folders carry today's fingerprints (a change to
    recipes/nano_sft.yaml, recipes/nano_sdpo_sft.yaml, the held-out goal or the build makes them stale), nothing
    stale lies beside them, and each holds the model, its tokenizer and its build's record."""
    from rlhf_recipes import nano

    current = sorted([f"nano-sft-{nano.base_fingerprint()}", f"nano-sdpo-{nano.sdpo_base_fingerprint()}"])
    shipped = sorted(folder.name for folder in nano.SHIPPED_BASES.iterdir() if folder.is_dir())
    assert shipped == current, ("the shipped nano bases are not today's builds: `rlhf-recipes nano build --sdpo && "
                                "rlhf-recipes nano ship`, then re-measure the nano tests' floors and commit")
    for name in (nano.BASE, nano.SDPO_BASE):
        folder = Path(nano.built_base_path(name))
        assert folder.parent == nano.SHIPPED_BASES, folder
        assert sorted(p.name for p in folder.iterdir()) == sorted(nano.SHIPPED_FILES)


def test_a_stale_shipped_base_is_not_used_and_ship_replaces_it(monkeypatch, tmp_path):
    """A shipped folder whose fingerprint is not today's is ignored (the cache's build is used, or built); `nano
    ship` copies today's builds in, removes the stale folder and writes the resolved recipe's paths relative to the
    checkout (no machine path ships)."""
    from rlhf_recipes import nano

    checkout = tmp_path / "checkout"
    bases = checkout / "reference_runs" / "nano" / "bases"
    stale = bases / "nano-sft-0000000000000000"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{}")
    monkeypatch.setattr(nano, "REPO_ROOT", checkout)
    monkeypatch.setattr(nano, "SHIPPED_BASES", bases)
    monkeypatch.setattr(nano, "cache_root", lambda: tmp_path / "cache")
    assert nano._base_dir() == tmp_path / "cache" / f"nano-sft-{nano.base_fingerprint()}"

    builds = {}
    for prefix, fingerprint in (("nano-sft", nano.base_fingerprint()), ("nano-sdpo", nano.sdpo_base_fingerprint())):
        built = tmp_path / "cache" / f"{prefix}-{fingerprint}"
        built.mkdir(parents=True)
        for name in nano.SHIPPED_FILES:
            (built / name).write_text(name)
        (built / "build.log").write_text("not shipped")
        (built / "config.yaml").write_text(
            f"# Resolved recipe of this run (from {checkout}/recipes/nano_sft.yaml, world size 1).\n"
            f"# Re-run it with: python recipes/run.py /root/.cache/rlhf-recipes/.building-ab_1/config.yaml "
            f"--output_dir /root/.cache/rlhf-recipes/.building-ab_1-rerun\n"
            f"output_dir: /root/.cache/rlhf-recipes/.building-ab_1\nresolved_from: {checkout}/recipes/nano_sft.yaml\n")
        builds[prefix] = built
    monkeypatch.setattr(nano, "nano_model_path", lambda: str(builds["nano-sft"]))
    monkeypatch.setattr(nano, "nano_sdpo_model_path", lambda: str(builds["nano-sdpo"]))
    shipped = nano.ship_bases()
    assert sorted(p.name for p in bases.iterdir()) == sorted(b.name for b in builds.values()) == sorted(
        p.name for p in shipped)
    for folder in shipped:
        assert sorted(p.name for p in folder.iterdir()) == sorted(nano.SHIPPED_FILES)
        resolved = (folder / "config.yaml").read_text()
        assert str(tmp_path) not in resolved and "/root" not in resolved, resolved
        assert f"output_dir: reference_runs/nano/bases/{folder.name}\n" in resolved
        assert f"--output_dir reference_runs/nano/bases/{folder.name}-rerun\n" in resolved  # a command that runs
        assert "resolved_from: recipes/nano_sft.yaml" in resolved
    assert nano._base_dir() == bases / builds["nano-sft"].name  # now the shipped one
