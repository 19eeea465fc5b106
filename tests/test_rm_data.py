"""Reward-model data: the four adapters on real-schema rows (and malformed ones), and tokenization."""

from __future__ import annotations

import copy
import json

import pytest
from datasets import Dataset, load_dataset

from custom_losses.reward_models.data import IGNORE_INDEX, preference_examples, rollout_examples, step_examples
from rewards.reward_model_encoding import encode_sequence, split_steps
from rlhf_recipes.data.sources import DROP, FIXTURES, SOURCES, DataError, normalize_rows


def fixture_rows(path: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / path).read_text().splitlines() if line.strip()]


def normalize(name: str, rows: list[dict], system_prompt: str | None = None) -> Dataset:
    return normalize_rows(Dataset.from_list(rows), SOURCES[name], f"test:{name}", system_prompt)


@pytest.fixture(scope="module")
def tokenizer(_tiny_cache):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_tiny_cache)


# --------------------------------------------------------------------------------------
# Adapters


def test_gsm8k_rollouts_fixture_reads_through_the_adapter():
    raw = load_dataset("json", data_files=str(FIXTURES / SOURCES["gsm8k_rollouts"].fixture), split="train")
    assert set(raw.column_names) == {"prompt", "completions", "rewards"}
    out = normalize_rows(raw, SOURCES["gsm8k_rollouts"], "fixture", system_prompt="Answer with '#### N'.")
    assert len(out) == len(raw) == 24
    row = out[0]
    assert row["prompt"] == [{"role": "system", "content": "Answer with '#### N'."},
                             {"role": "user", "content": raw[0]["prompt"]}]
    assert row["completions"] == raw[0]["completions"] and row["rewards"] == raw[0]["rewards"]
    # Correct completions end with the reference answer, as the README says.
    gsm8k = fixture_rows("gsm8k/train.jsonl")
    for r, ref in zip(raw, gsm8k):
        gold = ref["answer"].rsplit("####", 1)[1].strip()
        for completion, reward in zip(r["completions"], r["rewards"]):
            assert (reward == 1.0) == completion.endswith(f"#### {gold}")


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.update(rewards=r["rewards"][:-1]), "one value per completion"),
    (lambda r: r.update(rewards=[2.0] * len(r["rewards"])), r"number in \[0, 1\]"),
    (lambda r: r.update(prompt=""), "non-empty string"),
    (lambda r: r.pop("rewards"), "missing column"),
])
def test_gsm8k_rollouts_malformed_rows_name_the_row(mutate, message):
    rows = fixture_rows("gsm8k-rollouts/train.jsonl")[:4]
    rows = [dict(r) for r in rows]
    if message == "missing column":
        for r in rows:
            mutate(r)
    else:
        mutate(rows[2])
    with pytest.raises(DataError, match=message) as err:
        normalize("gsm8k_rollouts", rows)
    if message != "missing column":
        assert "row 3" in str(err.value)  # rows[2]: 1-based


@pytest.mark.parametrize("cast", [bool, int, float])
def test_gsm8k_rollouts_accept_bool_and_int_correctness(cast):
    """The book reads each reward with int()/bool(): a copy of the set that stores True/False or 0/1 trains alike."""
    rows = [dict(r) for r in fixture_rows("gsm8k-rollouts/train.jsonl")[:3]]
    for r in rows:
        r["rewards"] = [cast(v) for v in r["rewards"]]
    out = normalize("gsm8k_rollouts", rows)
    expected = [[float(v) for v in r["rewards"]] for r in rows]
    # (datasets keeps a column's stored type when a map rewrites it; rollout_examples reads each value as float)
    assert [[float(v) for v in r] for r in out["rewards"]] == expected
    assert any(1.0 in r for r in expected) and any(0.0 in r for r in expected)


def test_adapters_reject_wrong_types_with_the_column_name():
    """Rows whose types differ from the schema (a Dataset cannot even hold them next to good rows)."""
    rollout = fixture_rows("gsm8k-rollouts/train.jsonl")[0]
    with pytest.raises(ValueError, match="`completions` must be a list of strings"):
        SOURCES["gsm8k_rollouts"].normalize({**rollout, "completions": "just one string"})
    with pytest.raises(ValueError, match="`label` must be an object with `steps`"):
        SOURCES["prm800k"].normalize({**_prm_row(), "label": "found_error"})
    with pytest.raises(ValueError, match="`label.steps` must be a list"):
        SOURCES["prm800k"].normalize({**_prm_row(), "label": {"steps": "none"}})
    pair = fixture_rows("ultrafeedback/train.jsonl")[0]
    with pytest.raises(ValueError, match="column `rejected` must be a list"):
        SOURCES["ultrafeedback"].normalize({**pair, "rejected": "not a list"})
    with pytest.raises(ValueError, match="column `chosen` must be a string"):
        SOURCES["hh_rlhf"].normalize({"chosen": ["a"], "rejected": "b"})


def test_gsm8k_rollouts_without_completions_are_dropped():
    rows = fixture_rows("gsm8k-rollouts/train.jsonl")[:3]
    rows[1] = {**rows[1], "completions": [], "rewards": []}
    out = normalize("gsm8k_rollouts", rows)
    assert len(out) == 2 and out[1]["completions"] == rows[2]["completions"]


def test_prm800k_readme_example_follows_the_solution_path():
    (row,) = fixture_rows("prm800k/readme-example.jsonl")
    out = SOURCES["prm800k"].normalize(row)
    assert out["prompt"] == row["question"]["problem"]
    # Two chosen steps rated 0, then the step where the labeler found the error: completions[0], rated -1.
    assert out["labels"] == [0, 0, -1]
    assert out["completions"][2] == row["label"]["steps"][2]["completions"][0]["text"]
    assert out["completions"][:2] == [s["completions"][0]["text"] for s in row["label"]["steps"][:2]]


def test_prm800k_fixture_reads_through_the_adapter():
    raw = load_dataset("json", data_files=str(FIXTURES / SOURCES["prm800k"].fixture), split="train")
    out = normalize_rows(raw, SOURCES["prm800k"], "fixture")
    assert len(out) == len(raw) - 1  # the "bad_problem" row has no labeled step
    assert {len(c) == len(y) for c, y in zip(out["completions"], out["labels"])} == {True}
    ratings = {y for labels in out["labels"] for y in labels}
    assert ratings == {-1, 0, 1}
    # A phase-1 human-written step enters the path with +1.
    human = [s["human_completion"]["text"] for r in raw for s in r["label"]["steps"] if s["human_completion"]]
    assert human
    flat = dict(zip([t for c in out["completions"] for t in c], [y for ys in out["labels"] for y in ys]))
    assert all(flat[t] == 1 for t in human)


def _prm_row():
    return copy.deepcopy(fixture_rows("prm800k/readme-example.jsonl")[0])


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r["label"]["steps"][0].update(chosen_completion=3), "not an index into its 1 completions"),
    (lambda r: r["label"]["steps"][1]["completions"][0].update(rating=2), "rating must be -1, 0 or \\+1"),
    (lambda r: r["question"].pop("problem"), "non-empty `problem`"),
    (lambda r: r["label"]["steps"][0]["completions"][0].update(text=""), "step text must be a non-empty string"),
])
def test_prm800k_malformed_rows_name_the_row(mutate, message):
    rows = [_prm_row() for _ in range(3)]
    mutate(rows[1])
    with pytest.raises(DataError, match=message) as err:
        normalize("prm800k", [json.loads(json.dumps(r)) for r in rows])
    assert "row 2" in str(err.value)  # rows[1]: 1-based


def test_prm800k_human_completion_and_unrated_steps():
    row = _prm_row()
    steps = row["label"]["steps"]
    human = {"text": "A human step.", "rating": None, "flagged": False}
    steps[1].update(chosen_completion=None, human_completion=human)
    out = SOURCES["prm800k"].normalize(row)
    assert out["completions"][1] == "A human step." and out["labels"][1] == 1
    steps[1]["human_completion"] = "A human step as plain text."
    assert SOURCES["prm800k"].normalize(row)["completions"][1] == "A human step as plain text."
    steps[0]["completions"][0]["rating"] = None  # an unrated step ends the trajectory before it
    assert SOURCES["prm800k"].normalize(row) == {DROP: "no labeled steps (finish_reason 'found_error')"}


def test_hh_rlhf_real_rows_split_the_shared_prefix_into_the_prompt():
    rows = fixture_rows("hh-rlhf/harmless-base-test.jsonl")
    out = normalize("hh_rlhf", rows)
    assert len(out) == len(rows)
    for raw, row in zip(rows, out):
        assert row["prompt"][-1]["role"] == "user" and row["prompt"][0]["role"] == "user"
        assert [m["role"] for m in row["chosen"]] == ["assistant"] == [m["role"] for m in row["rejected"]]
        text = "".join(f"\n\n{'Human' if m['role'] == 'user' else 'Assistant'}: {m['content']}"
                       for m in row["prompt"] + row["chosen"])
        assert text == raw["chosen"]


def test_hh_rlhf_malformed_row_names_the_row():
    rows = fixture_rows("hh-rlhf/harmless-base-test.jsonl")[:3]
    rows[2] = {"chosen": "Human: no leading blank lines", "rejected": rows[2]["rejected"]}
    with pytest.raises(DataError, match="row 3.*must start with"):
        normalize("hh_rlhf", rows)


def test_ultrafeedback_rows_and_malformed_row():
    rows = fixture_rows("ultrafeedback/train.jsonl")
    out = normalize("ultrafeedback", rows)
    assert out[0]["prompt"] == [{"role": "user", "content": rows[0]["prompt"]}]
    assert out[0]["chosen"] == [rows[0]["chosen"][-1]]
    rows[5] = {**rows[5], "rejected": rows[5]["rejected"][1:]}  # the user turn is missing
    with pytest.raises(DataError, match="row 6.*`rejected` must be a list of at least 2 messages"):
        normalize("ultrafeedback", rows)


def test_dropped_rows_keep_the_other_rows_intact():
    """A mix of dropped and kept rows (either first) keeps every kept row's columns."""
    rows = fixture_rows("ultrafeedback/train.jsonl")[:4]
    same = {**rows[1], "rejected": rows[1]["chosen"]}
    for order in ([same, *rows[2:]], [*rows[2:], same]):
        out = normalize("ultrafeedback", order)
        assert len(out) == 2 and set(out.column_names) == {"prompt", "chosen", "rejected"}
        assert [r["prompt"][0]["content"] for r in out] == [r["prompt"] for r in rows[2:]]


# --------------------------------------------------------------------------------------
# Tokenization


def test_preference_truncation_drops_pairs_that_become_identical(tokenizer):
    prompt = [{"role": "user", "content": "Name a fruit that is red."}]
    rows = [
        {"prompt": prompt, "chosen": [{"role": "assistant", "content": "An apple is red."}],
         "rejected": [{"role": "assistant", "content": "A banana is yellow."}]},
        {"prompt": [{"role": "user", "content": "word " * 200}],
         "chosen": [{"role": "assistant", "content": "yes"}], "rejected": [{"role": "assistant", "content": "no"}]},
    ]
    prompt_len = len(encode_sequence(tokenizer, prompt, [{"role": "assistant", "content": ""}]))
    examples, stats = preference_examples(rows, tokenizer, max_length=prompt_len + 4, truncation_mode="keep_start")
    assert len(examples) == 1 and stats["dropped"] == {"identical after truncation": 1}
    assert all(len(e) <= prompt_len + 4 for ex in examples for e in (ex["chosen_ids"], ex["rejected_ids"]))
    lengths = stats["lengths"]
    assert lengths["sequences"] == 4 and lengths["fraction_truncated"] == 1.0 and lengths["max"] > 200
    full = encode_sequence(tokenizer, rows[0]["prompt"], rows[0]["chosen"])
    assert examples[0]["chosen_ids"] == full[: prompt_len + 4]
    # keep_end keeps the differing tail, so the long pair survives.
    examples, stats = preference_examples(rows, tokenizer, max_length=prompt_len + 4, truncation_mode="keep_end")
    assert len(examples) == 2 and stats["dropped"] == {}
    assert examples[0]["chosen_ids"] == full[-(prompt_len + 4):]


def test_preference_sequence_is_the_chat_templated_conversation(tokenizer):
    prompt = [{"role": "user", "content": "Hi"}]
    chosen = [{"role": "assistant", "content": "Hello!"}]
    ids = encode_sequence(tokenizer, prompt, chosen)
    assert tokenizer.decode(ids) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
    assert encode_sequence(tokenizer, "Hi", "Hello!") == ids  # plain text is put into the same template


def test_rollout_examples_mask_the_completion_and_cap_rollouts(tokenizer):
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    rows = [{"prompt": prompt, "completions": ["2 + 3 = 5\n#### 5", "#### 6", "#### 7"], "rewards": [1.0, 0.0, 0.0]},
            {"prompt": prompt, "completions": ["#### 5"], "rewards": [1.0]}]
    examples, stats = rollout_examples(rows, tokenizer, max_length=None, max_rollouts=2)
    assert [(e["group"], e["rewards"]) for e in examples] == [(0, 1.0), (0, 0.0), (1, 1.0)]
    first = examples[0]
    start = first["completion_mask"].index(1)
    assert tokenizer.decode(first["input_ids"][:start]).endswith("<|im_start|>assistant\n")
    assert tokenizer.decode(first["input_ids"][start:]) == "2 + 3 = 5\n#### 5<|im_end|>"
    assert all(first["completion_mask"][start:])
    assert stats["rollouts"] == 3 and stats["lengths"]["sequences"] == 3
    # The book SKIPS a rollout longer than max_length (no truncation), counted as dropped.
    full = [len(e["input_ids"]) for e in examples]  # 3 rollouts of the 4 (max_rollouts 2)
    examples, stats = rollout_examples(rows, tokenizer, max_length=start)
    assert examples == [] and stats["dropped"] == {"longer than max_length": 4}
    cut = sorted(full)[0]  # only the shortest rollouts fit
    examples, stats = rollout_examples(rows, tokenizer, max_length=cut)
    assert examples and all(len(e["input_ids"]) <= cut for e in examples)
    assert all(tokenizer.decode(e["input_ids"]).endswith("<|im_end|>") for e in examples)  # whole, never cut
    kept = sum(1 for row in rows for c in row["completions"]
               if len(rollout_examples([{**row, "completions": [c], "rewards": [0.0]}], tokenizer, None)[0][0]["input_ids"])
               <= cut)
    assert len(examples) == kept and stats["dropped"] == {"longer than max_length": 4 - kept}


def test_overlong_rollouts_truncate_is_a_named_option_and_counted(tokenizer, caplog):
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    rows = [{"prompt": prompt, "completions": ["2 + 3 = 5, so the answer is\n#### 5", "#### 6"],
             "rewards": [1.0, 0.0]}]
    whole, _ = rollout_examples(rows, tokenizer, None)
    start = whole[0]["completion_mask"].index(1)
    cut = len(whole[1]["input_ids"])  # the short rollout fits, the long one does not
    assert len(whole[0]["input_ids"]) > cut
    skipped, stats = rollout_examples(rows, tokenizer, cut)  # the default is the book's: skip
    assert [e["rewards"] for e in skipped] == [0.0] and stats["dropped"] == {"longer than max_length": 1}
    assert stats["truncated"] == {}
    kept, stats = rollout_examples(rows, tokenizer, cut, overlong="truncate")
    assert [e["rewards"] for e in kept] == [1.0, 0.0] and stats["dropped"] == {}
    assert stats["truncated"] == {"longer than max_length, cut (keep_start)": 1}
    assert kept[0]["input_ids"] == whole[0]["input_ids"][:cut]  # the start kept, the completion's end cut
    assert kept[0]["completion_mask"] == whole[0]["completion_mask"][:cut]
    ended, _ = rollout_examples(rows, tokenizer, cut, overlong="truncate", truncation_mode="keep_end")
    removed = len(whole[0]["input_ids"]) - cut
    assert ended[0]["input_ids"] == whole[0]["input_ids"][removed:]
    assert ended[0]["completion_mask"] == whole[0]["completion_mask"][removed:]
    nothing, stats = rollout_examples(rows, tokenizer, start, overlong="truncate")  # only the prompt fits
    assert nothing == [] and stats["dropped"] == {"no completion token left after truncation": 2}
    with pytest.raises(ValueError, match="overlong_rollouts must be one of skip, truncate"):
        rollout_examples(rows, tokenizer, cut, overlong="cut")

    # The run's log says how many were skipped (final_results.json `data` holds the same statistics).
    import logging
    from types import SimpleNamespace

    from custom_losses.reward_models.config import OutcomeRMConfig
    from rlhf_recipes.data.reward_model_examples import tokenize_split

    config = OutcomeRMConfig(output_dir="unused", max_length=cut, report_to="none")
    assert config.overlong_rollouts == "skip"
    with caplog.at_level(logging.WARNING):
        _, stats = tokenize_split(SimpleNamespace(training=config, source="orm.yaml"), tokenizer, rows, "train")
    assert "train data: dropped 1 examples: longer than max_length" in caplog.text
    with pytest.raises(ValueError, match="overlong_rollouts must be one of skip, truncate, got 'cut'"):
        OutcomeRMConfig(output_dir="unused", overlong_rollouts="cut", report_to="none")


def test_step_examples_label_only_the_last_separator_token(tokenizer):
    separator, template = "\n<step>\n", "Problem: {problem}\nReasoning trace:\n"
    rows = [{"prompt": "What is 1 + 1?", "completions": ["1 + 1 = 2.", "So 2.", "# Answer\n\n2"], "labels": [1, 0, -1]}]
    examples, stats = step_examples(rows, tokenizer, max_length=None, max_steps=12, prompt_template=template,
                                    separator=separator)
    (ex,) = examples
    labeled = [i for i, y in enumerate(ex["labels"]) if y != IGNORE_INDEX]
    assert [ex["labels"][i] for i in labeled] == [2, 1, 0]  # good, neutral, bad
    sep_id = tokenizer.convert_tokens_to_ids(separator)
    assert all(ex["input_ids"][i] == sep_id for i in labeled)  # a single added token in the tiny tokenizer
    text = tokenizer.decode(ex["input_ids"])
    assert text == ("Problem: What is 1 + 1?\nReasoning trace:\n"
                    "1 + 1 = 2.\n<step>\nSo 2.\n<step>\n# Answer\n\n2\n<step>\n")
    # More steps than max_steps: chunks that each start from the prompt; over-long chunks are dropped.
    examples, stats = step_examples(rows, tokenizer, max_length=None, max_steps=2, prompt_template=template,
                                    separator=separator)
    assert len(examples) == 2 and sum(y != IGNORE_INDEX for y in examples[1]["labels"]) == 1
    assert tokenizer.decode(examples[1]["input_ids"]).startswith("Problem: What is 1 + 1?\nReasoning trace:\n# Answer")
    short = len(examples[1]["input_ids"])
    examples, stats = step_examples(rows, tokenizer, max_length=short, max_steps=2, prompt_template=template,
                                    separator=separator)
    assert len(examples) == 1 and stats["dropped"] == {"longer than max_length": 1}


def test_split_steps():
    assert split_steps("a\n<step>\nb\n<step>\n", "\n<step>\n") == ["a", "b"]
    assert split_steps("a\n\nb", "\n<step>\n") == ["a", "b"]
    assert split_steps("one line", "\n<step>\n") == ["one line"]
    assert split_steps("  ", "\n<step>\n") == []
