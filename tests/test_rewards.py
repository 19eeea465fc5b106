"""Every reward function on real-format completions (as GRPOTrainer passes them), malformed ones included."""

from __future__ import annotations

import json

import pytest

import rewards
from rewards.length import overlong_penalty
from rewards.reasoning_tasks import composite_entry, composite_spec

SPELL = [{"name": "spell_backward", "weight": 1, "config": {"min_word_len": 3, "max_word_len": 10}}]


def spell_columns(n: int, index: int = 0, tasks=SPELL, size: int = 8, seed: int = 42):
    spec = composite_spec(tasks, size=size, seed=seed)
    return {"rg_dataset": [spec] * n, "rg_index": [index] * n}, composite_entry(spec, index)


def msg(text):
    """A conversational completion, as TRL passes it."""
    return [{"role": "assistant", "content": text}]


def test_registry_keeps_names_and_suggests():
    for name, func in rewards.REWARDS.items():
        assert func.__name__ == name
    assert rewards.get_reward("overlong_penalty_reward", overlong_max_length=10, overlong_cache_length=2).__name__ \
        == "overlong_penalty_reward"
    with pytest.raises(ValueError, match="Did you mean `format_reward`"):
        rewards.get_reward("formatt_reward")
    with pytest.raises(ValueError, match="twice"):
        rewards.build_reward_funcs(["format_reward", "format_reward"])
    with pytest.raises(ValueError, match="keep its __name__"):
        rewards.register(lambda completions, **kw: [0.0], name="other")
    rewards.check_names(["rm:outputs/hh_rm", "format_reward"])  # a trained reward model, loaded when first used
    with pytest.raises(ValueError, match="reward model's path"):
        rewards.check_names(["rm:"])


def test_correctness_uses_the_tasks_own_scorer_on_the_last_answer():
    cols, entry = spell_columns(7)
    word, answer = entry["metadata"]["word"], entry["answer"]
    assert answer == word[::-1]
    wrong_last = answer[:-1] + ("a" if answer[-1] != "a" else "b")
    completions = [
        msg(f"<think>reverse {word}</think>\n<answer>{answer}</answer>"),  # exact
        msg(f"<think>x</think><answer> {answer.upper()} </answer>"),  # case and whitespace ignored
        msg(f"<answer>{answer}</answer> then <answer>{wrong_last}</answer>"),  # the LAST tag counts
        msg(f"<think>{answer}</think>"),  # no answer tag: 0
        msg(f"<answer>{answer}"),  # unclosed tag: 0
        msg(""),  # empty completion
        f"<answer>{answer}</answer>",  # a plain-string completion (standard prompts)
    ]
    scores = rewards.correctness_reward(completions, **cols)
    partial = (len(answer) - 1) / len(answer)
    assert scores[:2] == [1.0, 1.0]
    assert scores[2] == pytest.approx(partial if partial < 1 else partial - 0.2)
    assert scores[3:6] == [0.0, 0.0, 0.0]
    assert scores[6] == 1.0


def test_spell_backward_partial_credit_is_the_librarys():
    import reasoning_gym

    cols, entry = spell_columns(1, index=3)
    scorer = reasoning_gym.create_dataset("spell_backward", min_word_len=3, max_word_len=10)
    guess = entry["answer"][:2] + "zz"
    assert rewards.correctness_reward([msg(f"<answer>{guess}</answer>")], **cols) == [
        pytest.approx(scorer.score_answer(guess, entry))
    ]


def test_any_reasoning_gym_task_is_scored_by_its_own_scorer():
    tasks = [{"name": "basic_arithmetic", "weight": 1, "config": {}}, *SPELL]
    spec = composite_spec(tasks, size=20, seed=3)
    seen = set()
    for index in range(20):
        entry = composite_entry(spec, index)
        seen.add(entry["metadata"]["source_dataset"])
        cols = {"rg_dataset": [spec] * 2, "rg_index": [index] * 2}
        good, bad = msg(f"<answer>{entry['answer']}</answer>"), msg("<answer>#not it#</answer>")
        scores = rewards.correctness_reward([good, bad], **cols)
        assert scores[0] == 1.0 and scores[1] < 1.0
    assert seen == {"basic_arithmetic", "spell_backward"}


def test_correctness_without_its_columns_says_which_source_to_use():
    with pytest.raises(ValueError, match="reasoning_gym"):
        rewards.correctness_reward([msg("<answer>x</answer>")])


def test_format_total_and_binary():
    cols, entry = spell_columns(5)
    a = entry["answer"]
    completions = [
        msg(f"<think>t</think><answer>{a}</answer>"),  # format 1, correct
        msg(f"<answer>{a}</answer>"),  # format 0.5, correct
        msg("<think>t</think><answer>nope</answer>"),  # format 1, wrong
        msg("</think></answer> only closing tags"),  # 0.5, no answer pair
        msg("plain text"),
    ]
    fmt = rewards.format_reward(completions)
    assert fmt == [1.0, 0.5, 1.0, 0.5, 0.0]
    correctness = rewards.correctness_reward(completions, **cols)
    assert rewards.total_reward(completions, **cols) == pytest.approx([c + 0.5 * f for c, f in zip(correctness, fmt)])
    binary = rewards.binary_reward(completions, **cols)
    assert binary[0] == 1.0 and binary[1] == 0.0  # correct but format incomplete: 0
    assert binary[2] == correctness[2]  # keeps partial credit when the format is complete
    assert binary[3:] == [0.0, 0.0]


def test_overlong_penalty_boundaries():
    # The book's DAPO values: L_max 512, cache 128 -> no penalty up to 384, -1 at 512
    assert [overlong_penalty(n) for n in (1, 384, 385, 448, 512, 513)] == pytest.approx(
        [0.0, 0.0, -1 / 128, -0.5, -1.0, -1.0]
    )
    reward = rewards.get_reward("overlong_penalty_reward", overlong_max_length=16, overlong_cache_length=4)
    assert reward(["a"] * 3, completion_ids=[[1] * 12, [1] * 14, [1] * 16]) == [0.0, -0.5, -1.0]
    with pytest.raises(ValueError, match="completion_ids"):
        reward(["a"])
    with pytest.raises(ValueError, match="cache_length"):
        rewards.make_overlong_penalty_reward(8, 16)


def test_gsm8k_final_answer_with_math_verify():
    completions = [
        msg("48/2 = 24 in May, 48 + 24 = 72.\n#### 72"),
        msg("The total is \\boxed{72}."),
        msg("<think>...</think><answer>72.0</answer>"),
        msg("So she sold 72 clips"),  # no marker: the last number
        msg("#### 1,072"),  # wrong, with a thousands separator
        msg("I don't know"),  # no answer at all
        msg("#### "),  # malformed marker
        "#### 72",  # plain-string completion
    ]
    gold = ["Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"] + ["72"] * 7
    assert rewards.gsm8k_reward(completions, answer=gold) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert rewards.gsm8k_reward([msg("#### 1,000")], answer=["1000"]) == [1.0]
    with pytest.raises(ValueError, match="answer"):
        rewards.gsm8k_reward([msg("#### 1")])


def test_completion_shapes():
    from rewards.text import completion_text, prompt_text

    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert completion_text([{"role": "assistant", "content": parts}]) == "ab"
    assert completion_text([{"role": "assistant", "content": None}]) == ""
    assert prompt_text([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]) == "q"
    with pytest.raises(TypeError):
        completion_text(3)


def test_reasoning_gym_source_builds_the_books_prompts(tmp_path):
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import DataError, load_splits
    from reasoning_gym.utils import SYSTEM_PROMPTS

    recipe = load_recipe(["recipes/grpo.yaml", "--profile", "tiny", "--output_dir", str(tmp_path)])
    train, _ = load_splits(recipe)
    assert len(train) == recipe.args.num_samples
    row = train[0]
    assert row["prompt"][0] == {"role": "system", "content": SYSTEM_PROMPTS["DeepSeekZero"]}
    assert row["prompt"][1]["content"].startswith("Spell this word backward")
    spec = json.loads(row["rg_dataset"])
    assert spec["seed"] == 42 and spec["datasets"][0]["config"] == {"min_word_len": 3, "max_word_len": 10}
    # the row's own answer scores 1.0 through the registered reward
    good = msg(f"<think>x</think><answer>{row['answer']}</answer>")
    assert rewards.correctness_reward([good], rg_dataset=[row["rg_dataset"]], rg_index=[row["rg_index"]]) == [1.0]

    bad = load_recipe(["recipes/grpo.yaml", "--profile", "tiny", "--output_dir", str(tmp_path),
                       "--dataset_kwargs", "{tasks: [{name: spell_backwards}]}"])
    with pytest.raises(DataError, match="Did you mean `spell_backward`"):
        load_splits(bad)


def test_gsm8k_source_reads_the_fixture(tmp_path):
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits

    recipe = load_recipe(["recipes/grpo.yaml", "--profile", "tiny", "--output_dir", str(tmp_path), "--dataset", "gsm8k",
                          "--reward_funcs", "[gsm8k_reward]", "--reward_weights", "[1.0]", "--num_samples", "5"])
    train, _ = load_splits(recipe)
    assert len(train) == 5 and train[0]["answer"] == "72"
    assert train[0]["prompt"][-1]["role"] == "user"
    assert rewards.gsm8k_reward([msg("#### 72")], answer=[train[0]["answer"]]) == [1.0]
