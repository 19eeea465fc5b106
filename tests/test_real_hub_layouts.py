"""Real runs read hub datasets as the hub lays them out; the tiny profile reads one local fixture instead.

These load local folders laid out as the hub repos through the code a real run uses (`load_splits` without a
profile): PRM800K's raw phase files through the hub cache, and a hub-like HH dataset with an odd row and an
empty reply. A user's `--data_files` keeps its one-line error."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from datasets import Dataset

from conftest import RECIPES
from rlhf_recipes.config import load_recipe
from rlhf_recipes.data.sources import FIXTURES, DataError, SOURCES, load_splits

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def fixture_rows(path: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / path).read_text().splitlines() if line.strip()]


def real_recipe(name: str, *overrides: str):
    """The recipe as a real run (no profile) resolves it; bf16 off, as this CPU has none."""
    return load_recipe([str(RECIPES / name), "--bf16", "false", *overrides])


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_prm800k_repo(folder: Path) -> tuple[list[dict], list[dict]]:
    """tasksource/PRM800K as the hub repo is laid out: phase1_train.jsonl (no pre_generated_* fields,
    human_completion objects), phase2_train.jsonl (pre_generated_* in `question`, human_completion null) and a
    README without configs. Returns (phase-1 rows, phase-2 rows)."""
    rows = fixture_rows("prm800k/train.jsonl")
    phase1 = [r for r in rows if "pre_generated_steps" not in r["question"]]
    phase2 = [r for r in rows if "pre_generated_steps" in r["question"]]
    assert len(phase1) >= 10 and len(phase2) >= 10
    write_jsonl(folder / "phase1_train.jsonl", phase1)
    write_jsonl(folder / "phase2_train.jsonl", phase2)
    (folder / "README.md").write_text("---\nlicense: mit\n---\n")
    return phase1, phase2


@pytest.fixture
def prm800k_hub(tmp_path, monkeypatch):
    """The repo in an offline hub cache, where hf_hub_download finds it: what a real run reads."""
    import huggingface_hub.constants

    repo = tmp_path / "hub" / "datasets--tasksource--PRM800K"
    phases = write_prm800k_repo(repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return phases


@pytest.mark.parametrize("where", ["hub cache", "local copy"])
def test_prm800k_reads_the_phase_files_in_file_order(where, prm800k_hub, tmp_path, caplog):
    """The first N usable rows, phase 1 then phase 2, no shuffle (the book); the unusable one dropped, counted.
    From a local copy of the repo (--dataset_name FOLDER), datasets' own loader fails to cast phase 2's rows."""
    phase1, phase2 = prm800k_hub
    normalize = SOURCES["prm800k"].normalize
    usable = [r for r in phase1 + phase2 if "prompt" in normalize(r)]
    count = len([r for r in phase1 if "prompt" in normalize(r)]) + 3  # all of phase 1's, then 3 of phase 2's
    local = ("--dataset_name", str(tmp_path / "copy")) if where == "local copy" else ()
    if local:
        write_prm800k_repo(tmp_path / "copy")
    recipe = real_recipe("prm.yaml", "--num_samples", str(count), "--eval_fraction", "0", *local)
    with caplog.at_level(logging.WARNING):
        train, evals = load_splits(recipe)
    assert evals is None
    assert train["prompt"] == [r["question"]["problem"] for r in usable[:count]]
    assert train[count - 1]["completions"] == normalize(phase2[2])["completions"]
    counts = recipe.data_counts
    assert counts["rows_read"] == len(phase1) + 3 and counts["train_rows"] == count
    assert counts["dropped"] == {"no labeled steps (finish_reason 'bad_problem')": 1}
    assert "dropped 1 of" in caplog.text


def test_prm_recipe_splits_90_10_with_the_books_seed(prm800k_hub):
    """prm.yaml: the first N usable rows, then the book's train_test_split(test_size=0.1, seed=13)."""
    recipe = real_recipe("prm.yaml", "--num_samples", "20")
    assert recipe.args.dataset_shuffle_seed is None
    train, evals = load_splits(recipe)
    first = [r for r in (SOURCES["prm800k"].normalize(r) for r in prm800k_hub[0] + prm800k_hub[1]) if "prompt" in r]
    book = Dataset.from_list(first[:20]).train_test_split(test_size=0.1, seed=13)
    assert (train["prompt"], evals["prompt"]) == (book["train"]["prompt"], book["test"]["prompt"])


def test_a_dataset_config_on_prm800k_is_refused_before_reading(tmp_path, monkeypatch):
    """The raw phase files are read, not a datasets config: --dataset_config would be ignored without a word."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))  # nothing to read
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    recipe = real_recipe("prm.yaml", "--num_samples", "4", "--dataset_config", "phase2")
    with pytest.raises(DataError, match="--dataset_config phase2 does not apply to dataset `prm800k`") as err:
        load_splits(recipe)
    assert "\n" not in str(err.value) and "phase1_train.jsonl" in str(err.value)


def test_prm800k_not_cached_offline_is_one_line(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    recipe = real_recipe("prm.yaml", "--num_samples", "4")
    with pytest.raises(DataError, match="phase1_train.jsonl is not in the local hub cache") as err:
        load_splits(recipe)
    assert "\n" not in str(err.value)
    assert "(hf download --repo-type dataset tasksource/PRM800K phase1_train.jsonl)" in str(err.value)


# --------------------------------------------------------------------------------------
# Hub rows that do not fit: dropped and counted; a user's file: one-line error


def _hh_rows() -> list[dict]:
    rows = copy.deepcopy(fixture_rows("hh-rlhf/harmless-base-test.jsonl")[:8])
    rows[3] = {"chosen": "Human: no leading blank lines", "rejected": rows[3]["rejected"]}  # does not fit
    # As hh-rlhf harmless-base test row 87: the chosen side's last Assistant turn is empty.
    rows[5] = {"chosen": rows[5]["rejected"] + "\n\nHuman: And then?\n\nAssistant: ",
               "rejected": rows[5]["rejected"] + "\n\nHuman: And then?\n\nAssistant: Nothing more."}
    return rows


def test_an_hh_pair_whose_last_reply_is_empty_is_dropped():
    """The reply's text is judged, not the list of turns (which holds one assistant turn with empty content)."""
    from rlhf_recipes.data.sources import DROP

    assert SOURCES["hh_rlhf"].normalize(_hh_rows()[5]) == {DROP: "empty response"}


def test_hub_rows_that_do_not_fit_are_dropped_counted_and_named(tmp_path, caplog):
    """A hub-like dataset folder (train.jsonl), read as a real run reads `dataset_name`, shuffled by hh_rm.yaml."""
    from rlhf_recipes.run_folder import write_final_results

    write_jsonl(tmp_path / "hh" / "train.jsonl", _hh_rows())
    recipe = real_recipe("hh_rm.yaml", "--dataset_name", str(tmp_path / "hh"),
                          "--num_samples", "8", "--eval_fraction", "0.25")
    with caplog.at_level(logging.WARNING):
        train, evals = load_splits(recipe)
    assert len(train) + len(evals) == 6
    assert all(r["chosen"][-1]["content"].strip() for r in [*train, *evals])
    counts = recipe.data_counts
    assert (counts["rows_read"], counts["rows_dropped"]) == (8, 2)
    assert counts["dropped"] == {"does not fit the schema": 1, "empty response": 1}
    assert counts["unfit_rows"] == ["row index 3: column `chosen` must start with '\\n\\nHuman: ', got "
                                    "'Human: no leading blank lines'"]  # the hub split's index, not the shuffled one
    assert "row index 3" in caplog.text and "dropped 2 of 8 rows" in caplog.text
    trainer = SimpleNamespace(args=SimpleNamespace(world_size=1, per_device_train_batch_size=1,
                                                   gradient_accumulation_steps=1), state=SimpleNamespace(global_step=0))
    path = write_final_results(recipe, trainer, tmp_path, 1.0, status="finished")
    data = json.loads(path.read_text())["dataset_rows"]
    assert (data["rows_dropped"], data["train_rows"], data["eval_rows"]) == (2, len(train), len(evals))


def test_a_users_data_files_bad_row_is_still_a_one_line_error(tmp_path):
    from rlhf_recipes.errors import RecipeError
    from rlhf_recipes.validation import check_local_data

    path = tmp_path / "pairs.jsonl"
    write_jsonl(path, _hh_rows())
    with pytest.raises(RecipeError, match=r"pairs.jsonl line 4: column `chosen` must start with") as err:
        check_local_data(str(path), SOURCES["hh_rlhf"], "--data_files")  # what a run checks before loading
    assert "\n" not in str(err.value)
    recipe = real_recipe("hh_rm.yaml", "--data_files", str(path), "--eval_fraction", "0")
    with pytest.raises(DataError, match=r"pairs.jsonl: row \d: column `chosen` must start with") as err:
        load_splits(recipe)
    assert "\n" not in str(err.value)
