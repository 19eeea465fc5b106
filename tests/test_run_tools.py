"""After a run: `rlhf-recipes runs` (listing, --prune), `export` (a plain Hugging Face folder) and `chat` (a web
page, driven in headless Chromium). The tiny runs are made once for the module."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, run_recipe

from rlhf_recipes.run_folder import SavedRun, folder_bytes

EVAL = {"name": "gsm8k", "algorithm": "sft", "family": "sft", "metrics": {"accuracy": 0.41, "n": 200},
        "baseline": {"accuracy": 0.37, "n": 200},
        "difference": {"accuracy": {"value": 0.04, "low": -0.01, "high": 0.09}}}
SYSTEM_PROMPT = "Answer in one sentence."


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """outputs/ with a finished run (checkpoints 1-3 and an evaluation), an interrupted one, a failed one,
    a LoRA run and an outcome reward model; each made by the real runner."""
    from rlhf_recipes.callbacks import InterruptCallback, MetricsFileCallback

    root = tmp_path_factory.mktemp("outputs")
    run_recipe("sft.yaml", root / "finished", "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1")
    (root / "finished" / "eval").mkdir()
    (root / "finished" / "eval" / "gsm8k.json").write_text(json.dumps(EVAL))

    # Interrupted: a real SIGINT at step 2, caught by the runner's InterruptCallback (a checkpoint, status).
    patch = pytest.MonkeyPatch()
    original = InterruptCallback.on_step_end

    def interrupt_at_2(self, args, state, control, **kwargs):
        if state.global_step == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, args, state, control, **kwargs)

    patch.setattr(InterruptCallback, "on_step_end", interrupt_at_2)
    run_recipe("sft.yaml", root / "interrupted", "--max_steps", "4", expect=130)
    patch.undo()

    # Failed: an exception while training (the runner writes status `failed`, then re-raises).
    def broken_log(self, args, state, control, logs=None, **kwargs):
        raise RuntimeError("simulated failure")

    patch.setattr(MetricsFileCallback, "on_log", broken_log)
    with pytest.raises(RuntimeError, match="simulated failure"):
        run_recipe("sft.yaml", root / "failed", "--max_steps", "2")
    patch.undo()

    # LoRA with a large learning rate, so that the adapter visibly moves the model.
    run_recipe("sft.yaml", root / "lora", "--max_steps", "2", "--use_peft", "true", "--lora_r", "4",
               "--learning_rate", "1e-2", "--system_prompt", SYSTEM_PROMPT)
    run_recipe("orm.yaml", root / "orm", "--max_steps", "1")  # a reward model (a token classifier)
    return root


def runs_json(root: Path, *extra: str) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "rlhf_recipes.tools", "runs", str(root), "--json", *extra],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    listed = json.loads(out[out.index("["):])
    return {Path(r["run"]).name: r for r in listed}


# --------------------------------------------------------------------------------------
# runs


def test_runs_lists_each_run_with_its_status_steps_metrics_and_checkpoints(runs):
    listed = runs_json(runs)
    assert set(listed) == {"finished", "interrupted", "failed", "lora", "orm"}
    finished, interrupted, failed = listed["finished"], listed["interrupted"], listed["failed"]
    assert finished["status"] == "finished" and finished["steps"] == 3 and finished["algorithm"] == "sft"
    assert finished["profile"] == "tiny" and finished["model"] == "tiny"
    assert [c["step"] for c in finished["checkpoints"] if c["complete"]] == [1, 2, 3]
    results = json.loads((runs / "finished" / "final_results.json").read_text())
    assert finished["final_metrics"]["loss"] == results["final_metrics"]["loss"]
    assert finished["evaluations"][0]["metrics"]["accuracy"] == EVAL["metrics"]["accuracy"]
    assert finished["bytes"] == folder_bytes(runs / "finished") > 0
    assert interrupted["status"] == "interrupted at step 2" and interrupted["steps"] == 2
    assert [c["step"] for c in interrupted["checkpoints"]] == [2]  # the interrupt's own checkpoint
    assert failed["status"].startswith("failed at step") and not failed["being_written"]
    assert listed["lora"]["evaluations"] == []  # no eval/ folder: nothing, no error
    held_out = json.loads((runs / "orm" / "final_results.json").read_text())["evaluation"]
    assert {f"eval {k}": v for k, v in held_out.items() if isinstance(v, float)}.items() <= \
        listed["orm"]["final_metrics"].items()  # a reward model's held-out evaluation


def test_the_table_shows_status_and_the_evaluation_difference(runs):
    from rlhf_recipes.tools.runs import evaluations_cell

    out = subprocess.run([sys.executable, "-m", "rlhf_recipes.tools", "runs", str(runs)], capture_output=True,
                         text=True, cwd=ROOT, check=True).stdout
    assert "5 run(s) under" in out and "interrupted at step 2" in out and "failed at step" in out
    assert evaluations_cell(SavedRun.open(runs / "finished")) == "gsm8k: accuracy 0.41 (+0.04 [-0.01, +0.09])"
    assert evaluations_cell(SavedRun.open(runs / "lora")) == "-"


def test_runs_names_a_run_by_what_it_trained(tmp_path):
    """A run whose config changed one of its algorithm's registry defaults (DPOConfig's loss_type hinge through
    recipes/dpo.yaml) trained another loss than the algorithm's: `runs` names it by that, not as plain dpo."""
    from rlhf_recipes.tools.runs import trained_as

    assert trained_as(SavedRun(tmp_path, {"algorithm": "dpo", "loss_type": ["hinge"]})) == "dpo (loss_type hinge)"
    assert trained_as(SavedRun(tmp_path, {"algorithm": "dpo", "loss_type": ["sigmoid"], "beta": 0.5})) == "dpo"
    assert trained_as(SavedRun(tmp_path, {"algorithm": "dapo", "epsilon_high": 0.3, "loss_type": "bnpo"})) == \
        "dapo (epsilon_high 0.3)"
    assert trained_as(SavedRun(tmp_path, {"algorithm": "no_such_algorithm"})) == "no_such_algorithm"


def test_a_piped_runs_table_folds_at_200_columns(runs, tmp_path, capsys):
    """Piped into a file or a CI log, the table keeps to 200 columns (a long sweep path folds in its cell) rather
    than one line as wide as the longest row."""
    import shutil

    from rlhf_recipes.tools.runs import print_table

    long = shutil.copytree(runs / "finished", tmp_path / ("sweep-" + "x" * 240) / "seed-0")
    print_table([SavedRun.open(long)], tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert "finished" in "".join(lines) and max(map(len, lines)) <= 200, max(map(len, lines))


def test_prune_keeps_the_last_k_complete_checkpoints_and_never_touches_a_run_being_written(runs, tmp_path):
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.run_setup import prepare_output_dir

    root = tmp_path / "outputs"
    shutil.copytree(runs, root)
    # A save that did not finish, in the finished run: incomplete, so it goes too.
    broken = root / "finished" / "checkpoint-2" / "trainer_state.json"
    broken.unlink()
    # A run being written: a --resume of a copy has claimed its folder (config.yaml rewritten by the runner's
    # own code: final_results.json says running) and is saving a checkpoint (no trainer_state.json yet).
    shutil.copytree(runs / "finished", root / "resuming")
    recipe = load_recipe([str(root / "resuming" / "config.yaml"), "--resume"], construct=False)
    resuming = prepare_output_dir(recipe)  # holds the folder's lock, as the run would, until released
    resuming.claim(recipe)
    (root / "resuming" / "checkpoint-4").mkdir()
    (root / "resuming" / "checkpoint-4" / "model.safetensors").write_bytes(b"0" * 1000)

    expected_free = sum(folder_bytes(root / "finished" / f"checkpoint-{s}") for s in (1, 2))
    before = {p: p.stat().st_mtime_ns for p in (root / "resuming").rglob("*")}
    dry = subprocess.run([sys.executable, "-m", "rlhf_recipes.tools", "runs", str(root), "--prune", "1", "--dry-run"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "would free" in dry and f"({expected_free} bytes)" in dry
    assert (root / "finished" / "checkpoint-1").exists(), "--dry-run deleted something"

    listed = runs_json(root, "--prune", "1")
    assert [c["step"] for c in listed["finished"]["checkpoints"]] == [3]
    assert [c["step"] for c in listed["interrupted"]["checkpoints"]] == [2]  # its only one: kept
    assert listed["resuming"]["being_written"] and listed["resuming"]["status"].startswith("running")
    assert {p: p.stat().st_mtime_ns for p in (root / "resuming").rglob("*")} == before, "touched a live run"

    # The same run, its process killed outright (its lock free, its holder file left, final_results.json still
    # `running`): still never pruned.
    holder = (root / "resuming" / ".run.lock.json").read_text()
    resuming.lock.release()
    (root / "resuming" / ".run.lock.json").write_text(holder)
    again = subprocess.run([sys.executable, "-m", "rlhf_recipes.tools", "runs", str(root), "--prune", "1"],
                           capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "resuming: skipped, being written" in again and "freed 0 bytes;" in again
    assert SavedRun.open(root / "resuming").status == (f"no result at step 3: its process (pid {os.getpid()} on "
                                                       f"{socket.gethostname()}) is gone (killed?)")
    assert sorted(p.name for p in (root / "resuming").glob("checkpoint-*")) == [
        "checkpoint-1", "checkpoint-2", "checkpoint-3", "checkpoint-4"]


def test_runs_bad_inputs_are_one_line_errors(tmp_path, capsys):
    from rlhf_recipes.tools.runs import main

    for argv, expected in [([str(tmp_path / "nowhere")], "nowhere: no such folder"),
                           ([str(tmp_path), "--prune", "0"], "--prune 0: K must be at least 1"),
                           ([str(tmp_path), "--dry-run"], "--dry-run goes with --prune K")]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err and len(err.strip().splitlines()) == 1, err


def test_a_missing_run_folder_names_the_run_folders_beside_it(tmp_path):
    """`rlhf-recipes chat outputs/dpo` after a tiny run: the error offered `outputs/dpo` itself as the example of a
    run folder; it names the ones that are there."""
    from rlhf_recipes.run_folder import RunFolderError, SavedRun

    (tmp_path / "dpo-tiny").mkdir()
    (tmp_path / "dpo-tiny" / "config.yaml").write_text("algorithm: dpo\n")
    (tmp_path / "notes").mkdir()
    with pytest.raises(RunFolderError) as missing:
        SavedRun.open(tmp_path / "dpo")
    assert str(missing.value) == (f"{tmp_path / 'dpo'}: no such folder (expected a run's output_dir; run folders in "
                                  f"{tmp_path}: {tmp_path / 'dpo-tiny'})")
    with pytest.raises(RunFolderError, match=r"no such folder \(expected a run's output_dir, the folder recipes/run"):
        SavedRun.open(tmp_path / "nowhere" / "dpo")


def test_runs_into_a_reader_that_stops_early_exits_quietly(tmp_path):
    """`rlhf-recipes runs --json | head -1`: the reader closes the pipe; no BrokenPipeError traceback."""
    for i in range(300):  # more than a pipe holds (64 KiB), so the write meets the closed pipe whatever the timing
        (tmp_path / f"run-{i}").mkdir()
        (tmp_path / f"run-{i}" / "config.yaml").write_text("algorithm: dpo\nmodel_name_or_path: tiny\n")
    for extra in (["--json"], []):
        reader = subprocess.Popen([sys.executable, "-m", "rlhf_recipes.tools", "runs", str(tmp_path), *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                                  env={**os.environ, "COLUMNS": "200"})
        assert reader.stdout.read(1)  # what `head` reads before it exits
        reader.stdout.close()
        err = reader.stderr.read().decode()
        assert reader.wait(timeout=120) == 0 and "Traceback" not in err and "Broken" not in err, (extra, err)


def test_a_start_that_fails_leaves_the_run_finished(runs, tmp_path, capsys):
    """A --resume whose start is refused puts config.yaml and final_results.json back: the run is still finished."""
    from rlhf_recipes.train import main

    copy = tmp_path / "run"
    shutil.copytree(runs / "finished", copy)
    # Rows that all get dropped (no assistant answer): found while loading the data, after the folder is claimed.
    rows = tmp_path / "no_answers.jsonl"
    row = {"prompt": "q", "prompt_id": "0", "category": "qa", "messages": [{"role": "user", "content": "q"}]}
    rows.write_text("\n".join(json.dumps(row) for _ in range(4)) + "\n")
    before = {name: (copy / name).read_bytes() for name in ("config.yaml", "final_results.json", "console.log")}
    code = main([str(copy / "config.yaml"), "--resume", "--allow_changes", "--data_files", str(rows)])
    assert code == 2 and "no usable rows" in capsys.readouterr().err
    assert {name: (copy / name).read_bytes() for name in before} == before
    assert SavedRun.open(copy).status == "finished"


# --------------------------------------------------------------------------------------
# export


def _logits(model, vocab: int):
    import torch

    ids = torch.arange(5, 37).reshape(2, 16) % vocab
    with torch.no_grad():
        return model.eval()(input_ids=ids).logits


def _export(*argv: str) -> subprocess.CompletedProcess:
    """`rlhf-recipes export ARGV` through the installed command's entry point, in this process: a process of its own
    cost ~5 CPU-s of imports per export. (test_bench_errors_finds_every_tool_mistake_clear starts export as a
    process of its own.)"""
    from rlhf_recipes.tools.cli import main

    argv_before, err = sys.argv[:], io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = main(["export", *argv])
    finally:
        sys.argv[:] = argv_before  # the command names itself in sys.argv for argparse
    return subprocess.CompletedProcess(["rlhf-recipes", "export", *argv], code, "", err.getvalue())


def test_export_loads_with_plain_transformers_and_gives_the_runs_logits(runs, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "exported"
    assert _export(str(runs / "finished"), str(out)).returncode == 0
    assert not list(out.glob("optimizer*")) and not list(out.glob("checkpoint-*"))
    exported = AutoModelForCausalLM.from_pretrained(out)
    trained = AutoModelForCausalLM.from_pretrained(runs / "finished")
    assert torch.equal(_logits(exported, exported.config.vocab_size), _logits(trained, trained.config.vocab_size))
    template = AutoTokenizer.from_pretrained(out).chat_template
    assert template and template == AutoTokenizer.from_pretrained(runs / "finished").chat_template
    card = (out / "README.md").read_text()
    assert "Ouyang et al. 2022" in card and "chapter 4" in card  # the registry's paper and chapter
    assert "| gsm8k | accuracy | 0.41 | 0.37 | +0.04 [-0.01, +0.09] |" in card
    assert (runs / "finished" / "config.yaml").read_text().strip() in card


def test_model_cards_carry_the_hubs_metadata_and_name_the_model(runs, tmp_path):
    """The run folder's README.md was TRL's draft ("a fine-tuned version of [None]" for a model from a local folder,
    no datasets); the exported card had no `datasets` or pipeline tag."""
    from huggingface_hub import ModelCard

    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data.sources import SOURCES
    from rlhf_recipes.model_card import card_metadata

    card = (runs / "interrupted" / "README.md").read_text()
    assert "[None]" not in card and "interrupted, 2 optimizer steps" in card, card
    data = ModelCard.load(runs / "interrupted" / "README.md").data
    assert data.library_name == "transformers" and {"rlhf-recipes", "trl", "sft"} <= set(data.tags)
    assert data.base_model is None and data.datasets is None  # the tiny profile: an embedded model and data

    # A real recipe: its hub model and dataset, as the hub reads them.
    real = card_metadata(load_recipe(["recipes/dpo.yaml"], construct=False).resolved, "dpo")
    assert real.base_model == "allenai/OLMo-2-0425-1B-SFT"
    assert real.datasets == [SOURCES["ultrafeedback"].hub_id] and "/" in real.datasets[0]
    mine = card_metadata(load_recipe(["recipes/dpo.yaml", "--model_name_or_path", str(tmp_path),
                                      "--data_files", "my.jsonl"], construct=False).resolved, "dpo")
    assert mine.base_model is None and mine.datasets is None  # a local model and file are no hub ids

    out = tmp_path / "exported"
    assert _export(str(runs / "finished"), str(out)).returncode == 0
    exported = ModelCard.load(out / "README.md").data
    assert exported.library_name == "transformers" and exported.pipeline_tag == "text-generation"
    assert "sft" in exported.tags


def test_a_lora_runs_merged_export_equals_base_plus_adapter(runs, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rlhf_recipes.tiny import tiny_model_path

    out = tmp_path / "merged"
    result = _export(str(runs / "lora"), str(out), "--merge-lora")
    assert result.returncode == 0, result.stderr[-2000:]
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path())
    vocab = base.config.vocab_size
    base_logits = _logits(base, vocab)
    adapted = _logits(PeftModel.from_pretrained(base, runs / "lora"), vocab)
    assert not torch.allclose(adapted, base_logits, atol=1e-4), "the adapter changes nothing: the test shows nothing"
    torch.testing.assert_close(_logits(merged, vocab), adapted, atol=1e-5, rtol=1e-5)


def test_a_lora_runs_base_loads_at_the_revision_the_run_trained_on(runs, tmp_path, monkeypatch):
    """export / chat of a LoRA run load its base from the hub: at the recipe's `model_revision`, not the newest one
    (the adapter trained on that one). The real loader, with from_pretrained's arguments recorded."""
    import shutil

    import yaml
    from transformers import AutoModelForCausalLM

    from rlhf_recipes.tools.trained_model import open_trained_model

    pinned = tmp_path / "lora"
    shutil.copytree(runs / "lora", pinned)
    config = yaml.safe_load((pinned / "config.yaml").read_text())
    (pinned / "config.yaml").write_text(yaml.safe_dump({**config, "model_revision": "v1.0"}))
    shutil.copystat(runs / "lora" / "config.yaml", pinned / "config.yaml")  # still written before its result
    real, revisions = AutoModelForCausalLM.from_pretrained.__func__, []

    def recording(cls, path, *args, **kwargs):
        revisions.append(kwargs.pop("revision", None))
        return real(cls, path, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(recording))
    open_trained_model(pinned).load_policy(merge=True)
    assert revisions == ["v1.0"]


def test_export_refuses_bad_inputs_in_one_line_and_offers_a_checkpoint(runs, tmp_path, capsys):
    from rlhf_recipes.tools.export import main

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file").write_text("x")
    for argv, expected in [
        ([str(tmp_path), str(tmp_path / "a")], "not a run folder"),
        ([str(runs / "finished"), str(taken)], "exists and is not an empty folder"),
        ([str(runs / "interrupted"), str(tmp_path / "b")], "has not finished (interrupted at step 2)"),
        ([str(runs / "interrupted"), str(tmp_path / "c"), "--checkpoint", "7"], "no checkpoint-7"),
        ([str(runs / "finished"), str(tmp_path / "d"), "--merge-lora"], "not a LoRA adapter"),
    ]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and expected in err and len(err.strip().splitlines()) == 1, (argv, err)
        assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    main([str(runs / "interrupted"), str(tmp_path / "b")])
    assert "--checkpoint STEP" in capsys.readouterr().err
    assert main([str(runs / "interrupted"), str(tmp_path / "e"), "--checkpoint", "2"]) == 0
    assert (tmp_path / "e" / "model.safetensors").exists() and (tmp_path / "e" / "README.md").exists()


def test_export_and_chat_name_a_weights_file_cut_short_in_one_line(runs, tmp_path, capsys):
    """As evaluate does: a finished run whose model.safetensors was cut short (a partial copy) was safetensors'
    traceback at load in export and chat; now one line naming the file, before anything is written."""
    import shutil

    from rlhf_recipes.tools.export import main as export
    from rlhf_recipes.tools.trained_model import open_trained_model

    run = tmp_path / "copied"
    shutil.copytree(runs / "finished", run, ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = run / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    assert export([str(run), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{weights} is cut short or corrupt" in err, err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="is cut short or corrupt"):  # chat opens its models the same way
        open_trained_model(run, flag="MODEL")


def test_a_reward_models_export_loads_as_its_token_classifier(runs, tmp_path):
    """With an evaluation whose fixed numbers have no interval (null low/high, as the shipped ORM's top-1 accuracy):
    the card once failed on them, after the model was written."""
    import shutil

    import torch
    from transformers import AutoModelForTokenClassification

    orm = tmp_path / "orm"
    shutil.copytree(runs / "orm", orm)
    (orm / "eval").mkdir(exist_ok=True)
    (orm / "eval" / "heldout.json").write_text(json.dumps({
        "name": "heldout", "metrics": {"top1_accuracy": 0.19}, "baseline": {"top1_accuracy": 0.11},
        "difference": {"top1_accuracy": {"value": 0.08, "low": None, "high": None, "method": "none"}}}))
    out = tmp_path / "exported"
    result = _export(str(orm), str(out))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| heldout | top1_accuracy | 0.19 | 0.11 | +0.08 |" in (out / "README.md").read_text()
    exported = AutoModelForTokenClassification.from_pretrained(out)
    trained = AutoModelForTokenClassification.from_pretrained(runs / "orm")
    assert exported.config.reward_model["kind"] == "outcome"  # how it reads its input travels with it
    vocab = exported.config.vocab_size
    assert torch.equal(_logits(exported, vocab), _logits(trained, vocab))


# --------------------------------------------------------------------------------------
# chat


def test_chat_prompts_are_built_as_in_training():
    """The system prompt the data source puts in a row (reasoning-gym resolves a name) is the chat's."""
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.data import load_splits
    from rlhf_recipes.data.sources import chat_prompt

    recipe = load_recipe([str(ROOT / "recipes" / "grpo.yaml"), "--profile", "tiny"], construct=False)
    train, _ = load_splits(recipe)
    row = train[0]["prompt"]
    asked = chat_prompt(recipe, row[-1]["content"])
    assert asked == row and asked[0]["role"] == "system" and asked[0]["content"] != recipe.args.system_prompt


def test_chat_refuses_an_unfinished_run_and_names_its_checkpoint_folder(runs, capsys):
    from rlhf_recipes.tools.chat import main

    assert main([str(runs / "interrupted")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "has not finished (interrupted at step 2)" in err
    assert str(runs / "interrupted" / "checkpoint-2") in err and "--checkpoint" not in err


def test_a_streamed_answer_is_the_models_own_generation(runs):
    """Greedy: the streamed text grows piece by piece and ends as generate's answer to the training-style prompt."""
    import torch

    from rlhf_recipes.tools.chat import Column, stream_answer
    from rlhf_recipes.tools.trained_model import open_trained_model

    run = open_trained_model(runs / "lora")
    model, tokenizer = run.load_policy().eval(), run.load_tokenizer()
    pieces = list(stream_answer(Column("lora", model, tokenizer, run), "What is a prime number?", 0.0, 1.0, 0, 24))
    assert len(pieces) > 1 and all(b.startswith(a) for a, b in zip(pieces, pieces[1:]))
    ids = run.prompt_ids(tokenizer, "What is a prime number?")
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([ids]), max_new_tokens=24, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    assert pieces[-1] == tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)


def test_a_generation_that_fails_ends_its_stream_with_the_reason(runs):
    import torch

    from rlhf_recipes.tools.chat import Column, stream_answer
    from rlhf_recipes.tools.trained_model import open_trained_model

    class OutOfMemory(torch.nn.Linear):
        def generate(self, **kwargs):
            raise MemoryError("no room for the KV cache")

    run = open_trained_model(runs / "lora")
    column = Column("broken", OutOfMemory(1, 1), run.load_tokenizer(), run)
    with pytest.raises(RuntimeError, match="broken: generation failed: no room for the KV cache"):
        list(stream_answer(column, "hello", 0.0, 1.0, 0, 8))


def test_chat_without_gradio_names_the_extra(runs, monkeypatch, capsys):
    from rlhf_recipes.tools.chat import main

    monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` fails, installed or not
    assert main([str(runs / "finished"), "--port", str(_free_port())]) == 2
    assert "pip install 'rlhf-recipes[chat]'" in capsys.readouterr().err


def _browser_or_skip():
    import importlib.util

    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if missing:
        pytest.skip(f"no headless browser: {', '.join(missing)} not installed (apt-get install chromium "
                    "chromium-driver; .ci/run tries)")
    for module in ("selenium", "gradio"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_chat_page_answers_in_a_real_browser(runs, tmp_path):
    """The page, served by `rlhf-recipes chat`, driven in headless Chromium: a prompt in, answers out."""
    _browser_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    port = _free_port()
    log = (tmp_path / "chat.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "rlhf_recipes.tools", "chat", str(runs / "lora"), str(runs / "orm"),
                               "--port", str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    browser = None
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "chat.log").read_text()[-3000:]
                assert time.time() < deadline, "the chat server did not start in 120 s"
                time.sleep(0.5)
        browser = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
        browser.get(url)
        wait = WebDriverWait(browser, 60)
        wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#prompt textarea")).send_keys("What is a prime number?")
        browser.find_element(By.CSS_SELECTOR, "#send").click()

        def answers(b):
            values = [b.find_element(By.CSS_SELECTOR, f"#answer-{i} textarea").get_attribute("value") for i in (0, 1)]
            return values if all(v.strip() for v in values) else None

        trained, reference = wait.until(answers)
        labels = browser.find_element(By.TAG_NAME, "body").text
        assert "lora (sft)" in labels and "reference: tiny (the starting policy)" in labels
        # The prompt as the model reads it: the recipe's system prompt and the run's chat template.
        browser.find_element(By.XPATH, "//*[text()='Prompt as the model reads it']").click()  # open the accordion
        rendered = wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#rendered textarea").get_attribute("value"))
        assert rendered == (f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\nWhat is a prime "
                            "number?<|im_end|>\n<|im_start|>assistant\n")
        time.sleep(1)  # let the streams finish drawing before the picture
        shot = tmp_path / "chat_page.png"
        browser.save_screenshot(str(shot))
        print(f"chat page screenshot: {shot}")
        assert shot.stat().st_size > 10_000

        # The reward model's page: a prompt and two responses, each scored (an ORM: P(correct) in [0, 1]).
        tab = [b for b in browser.find_elements(By.XPATH, "//button[normalize-space()='Score two responses']")
               if b.is_displayed()]  # Gradio also keeps a hidden copy of each tab button
        tab[0].click()
        wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#rm-prompt textarea")).send_keys("What is 2 + 3?")
        browser.find_element(By.CSS_SELECTOR, "#response-a textarea").send_keys("2 + 3 = 5\n#### 5")
        browser.find_element(By.CSS_SELECTOR, "#response-b textarea").send_keys("2 + 3 = 6\n#### 6")
        browser.find_element(By.CSS_SELECTOR, "#score").click()
        row = wait.until(lambda b: next((r.text for r in b.find_elements(By.CSS_SELECTOR, "#scores tr")
                                         if "orm (orm) (outcome)" in r.text), None))
        scores = [float(x) for x in row.split()[-3:-1]]
        assert all(0.0 <= x <= 1.0 for x in scores), row
        shot = tmp_path / "score_page.png"
        browser.save_screenshot(str(shot))
        print(f"reward model page screenshot: {shot}")
    finally:
        if browser is not None:
            browser.quit()
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_bench_errors_finds_every_tool_mistake_clear(tmp_path):
    """`python -m benchmarks.bad_inputs --only tools`: each tool, pointed at the wrong thing as its own process, says so
    in one line with exit 2 (the same judge as the recipe cases)."""
    from benchmarks.bad_inputs import CASES, main

    out = tmp_path / "errors.json"
    assert main(["--only", "tools", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert len(results) == sum(c.group == "tools" for c in CASES) >= 10
    unclear = [(r["case"], r["verdict"], r["message"]) for r in results if r["verdict"] != "clear"]
    assert not unclear, unclear
