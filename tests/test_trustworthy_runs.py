"""Runs that never lie: bad input is a one-line error before anything loads, and a run's folder
always says exactly what ran (overwrite, resume, failed starts, checkpoint manifests, health)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import RECIPES, read_metrics, run_recipe
from rlhf_recipes.checkpoints import find_resumable_checkpoint, incomplete_reason
from rlhf_recipes.config import load_recipe
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.train import main as train


def fails(capsys, *argv: str) -> str:
    """Run recipes/run.py ARGV in this process; it must exit 2 with exactly one line on stderr."""
    assert train(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    return errors[0]


def dpo(*extra: str) -> list[str]:
    return [str(RECIPES / "dpo.yaml"), "--profile", "tiny", *extra]


# --------------------------------------------------------------------------------------
# Bad numbers and bad YAML: found while reading the recipe


@pytest.mark.parametrize("recipe, key, value, expected", [
    ("dpo.yaml", "learning_rate", "0", "must be a positive number"),
    ("dpo.yaml", "learning_rate", "-1e-5", "must be a positive number"),
    ("dpo.yaml", "beta", "-0.1", "must be a number >= 0"),
    ("dpo.yaml", "max_steps", "0", "positive number of optimizer steps"),
    ("dpo.yaml", "per_device_train_batch_size", "0", "at least 1"),
    ("dpo.yaml", "num_train_epochs", "0", "positive number of epochs"),
    ("dpo.yaml", "eval_fraction", "1.5", "a fraction in [0, 1)"),
    ("dpo.yaml", "num_samples", "0", "at least 1 row"),
    ("dpo.yaml", "warmup_steps", "-3", "a number >= 0"),
    ("cdpo.yaml", "label_smoothing", "0.7", "a fraction in [0, 0.5)"),
    ("grpo.yaml", "temperature", "0", "positive sampling temperature"),
    ("grpo.yaml", "top_p", "1.5", "a probability in (0, 1]"),
    ("grpo.yaml", "epsilon", "0", "a positive clip range"),
    ("ppo.yaml", "lam", "1.2", "a GAE lambda in [0, 1]"),
    ("preference_rm.yaml", "learning_rate", "nan", "must be a positive number"),
])
def test_out_of_range_values_are_errors_naming_the_key(recipe, key, value, expected):
    with pytest.raises(RecipeError) as e:
        load_recipe([str(RECIPES / recipe), "--profile", "tiny", f"--{key}", value])
    assert str(e.value).startswith(f"command line: `{key}` must be") and expected in str(e.value)


def test_a_key_set_twice_in_a_recipe_is_an_error(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text("algorithm: dpo\nbeta: 0.1\nlearning_rate: 1.0e-6\nbeta: 0.2\n")
    with pytest.raises(RecipeError, match=r"twice.yaml: key `beta` is set twice \(lines 2 and 4\); keep one"):
        load_recipe([str(path)])


def test_a_misspelt_dataset_adapter_gets_a_suggestion():
    with pytest.raises(RecipeError, match="unknown dataset `ultrafedback`. Did you mean `ultrafeedback`"):
        load_recipe(dpo("--dataset", "ultrafedback"))


def test_a_key_error_is_found_without_importing_torch_or_trl(tmp_path, monkeypatch, capsys):
    """What makes a mistake cost a second: once the config schemas are cached, the check imports neither
    torch, transformers nor TRL (they take ~6 s). A structural check, not a timing. A machine's first check (no
    cache yet: it imports TRL to fill it) finds the same mistake; it runs in this process (TRL already imported
    here), the cached one in a process of its own."""
    import subprocess
    import sys

    from rlhf_recipes.train import main

    monkeypatch.setenv("RLHF_RECIPES_CACHE", str(tmp_path / "cache"))
    argv = [str(RECIPES / "grpo.yaml"), "--profile", "tiny", "--learnig_rate", "1"]
    assert main(argv) == 2 and "Did you mean `learning_rate`" in capsys.readouterr().err
    assert list((tmp_path / "cache" / "schemas").glob("*.json"))  # the first check filled the cache
    probe = ("import sys; from rlhf_recipes.train import main; code = main(%r); print(code, sorted(m for m in "
             "('torch', 'transformers', 'trl') if m in sys.modules))" % argv)
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=dict(os.environ),
                         cwd=tmp_path, timeout=600)
    assert run.stdout.strip() == "2 []", run.stdout + run.stderr[-2000:]
    assert "Did you mean `learning_rate`" in run.stderr


def test_cached_schemas_equal_the_config_classes():
    """The schema read from the cache is the one the classes give (types, defaults) for every algorithm."""
    from rlhf_recipes.config_schema import fields_of, read_fields
    from rlhf_recipes.registry import ALGORITHMS, import_object

    for algorithm in ALGORITHMS.values():
        first = fields_of(algorithm.config_class)  # built (or read) once ...
        assert fields_of(algorithm.config_class) == first  # ... then read back from the cache
        assert json.loads(json.dumps(read_fields(import_object(algorithm.config_class)))) == first


# --------------------------------------------------------------------------------------
# Bad data, bad model paths, bad reward models: found before anything loads, folder untouched


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


GOOD_ROW = {"prompt": "Hi?", "chosen": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}],
            "rejected": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Go away."}]}


@pytest.mark.parametrize("case, content, expected", [
    ("missing", None, "no such file"),
    ("empty", "", "is empty"),
    ("not json", '{"prompt": "a", \n', "line 1, column 17: not valid JSON (Expecting property name"),
    ("missing column", json.dumps({"prompt": "a", "chosen": []}) + "\n", "missing column(s) rejected"),
    ("wrong type", json.dumps({**GOOD_ROW, "prompt": 3}) + "\n", "`prompt` must be a non-empty string"),
    ("bad second row", json.dumps(GOOD_ROW) + "\n" + json.dumps({**GOOD_ROW, "chosen": "text"}) + "\n",
     "line 2: column `chosen` must be a list"),
])
def test_bad_data_files_are_one_line_errors_and_leave_no_folder(tmp_path, capsys, case, content, expected):
    data = tmp_path / "data.jsonl"
    if content is not None:
        data.write_text(content)
    out = tmp_path / "run"
    line = fails(capsys, *dpo("--data_files", str(data), "--output_dir", str(out)))
    assert "`data_files`" in line and expected in line, line
    assert not out.exists()


def _model_folder(tmp_path: Path, *files: str) -> str:
    folder = tmp_path / "model"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("{}")
    return str(folder)


@pytest.mark.parametrize("files, expected", [
    ((), "has no config.json"),
    (("config.json",), "has no weights"),
    (("config.json", "model.safetensors"), "has no tokenizer files"),
])
def test_incomplete_model_folders_are_named(tmp_path, capsys, files, expected):
    line = fails(capsys, *dpo("--model_name_or_path", _model_folder(tmp_path, *files),
                              "--output_dir", str(tmp_path / "run")))
    assert "`model_name_or_path`" in line and expected in line


def test_a_model_without_a_chat_template_is_refused_where_the_family_needs_one(tmp_path, capsys):
    folder = _model_folder(tmp_path, "config.json", "model.safetensors")
    (Path(folder) / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    line = fails(capsys, *dpo("--model_name_or_path", folder, "--output_dir", str(tmp_path / "run")))
    assert "has no chat template, which this algorithm needs" in line


def test_missing_model_folder_and_uncached_hub_model_offline(tmp_path, capsys, monkeypatch):
    line = fails(capsys, *dpo("--model_name_or_path", "./no/such/model", "--output_dir", str(tmp_path / "a")))
    assert "no such model folder ./no/such/model" in line
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    line = fails(capsys, *dpo("--model_name_or_path", "nobody/not-a-model", "--output_dir", str(tmp_path / "b")))
    assert "is not in the local model cache and HF_HUB_OFFLINE is set" in line
    assert "(hf download nobody/not-a-model)" in line  # huggingface_hub 2.x ships `hf`, not huggingface-cli


def test_download_hints_name_the_hf_command_that_huggingface_hub_ships(tmp_path, monkeypatch):
    """huggingface_hub 2.x installs `hf` only: a hint naming `huggingface-cli` sends the user to a missing command."""
    import huggingface_hub.constants

    from rlhf_recipes.validation import check_hub_dataset

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(RecipeError) as info:
        check_hub_dataset("nobody/no-data", "`dataset_name`")
    assert "hf download --repo-type dataset nobody/no-data" in str(info.value)
    root = Path(__file__).resolve().parents[1]
    named = [f"{p.relative_to(root)}" for p in [root / "README.md", *(root / "docs").rglob("*.md"),
                                                 *(root / "rlhf_recipes").rglob("*.py"), *(root / "lab").rglob("*.py")]
             if "huggingface-cli" in p.read_text(encoding="utf-8")]
    assert not named, f"files that still name huggingface-cli: {named}"


def test_a_missing_reward_model_is_found_before_the_policy_loads(tmp_path, capsys):
    line = fails(capsys, str(RECIPES / "hh_grpo.yaml"), "--profile", "tiny", "--reward_funcs",
                 f"rm:{tmp_path / 'no-rm'}", "--output_dir", str(tmp_path / "run"))
    assert "`reward_funcs`" in line and "no-rm`: no such folder" in line
    assert not (tmp_path / "run").exists()


def test_a_misspelt_reward_function_is_an_error_with_a_suggestion(tmp_path, capsys):
    line = fails(capsys, str(RECIPES / "grpo.yaml"), "--profile", "tiny", "--reward_funcs",
                 "correctnes_reward,format_reward", "--output_dir", str(tmp_path / "run"))
    assert "correctnes_reward" in line and "Did you mean `correctness_reward`" in line


# --------------------------------------------------------------------------------------
# The reproductions: overwrite, the printed resume command, resume with changes, manifests


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory):
    """A tiny DPO run of 6 steps with a checkpoint every 2."""
    out = tmp_path_factory.mktemp("six") / "run"
    run_recipe("dpo.yaml", out, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2")
    return out


def test_overwrite_removes_the_old_runs_checkpoints(six_steps, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(six_steps, out)
    results = run_recipe("dpo.yaml", out, "--max_steps", "2", "--overwrite")
    assert results["steps"] == 2 and not list(out.glob("checkpoint-*"))
    assert not list(tmp_path.glob(".run.overwritten*"))  # deleted once the new run started
    # Nothing old is left to resume from: --resume refuses instead of training past the old checkpoint.
    assert run_recipe("dpo.yaml", out, "--max_steps", "2", "--resume", expect=2) == results


def test_an_overwrite_whose_start_fails_puts_the_old_run_back(six_steps, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(six_steps, out)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    # A bad row deep in the data (every row is checked before anything loads), named by its 1-based line.
    rows = [json.dumps(GOOD_ROW)] * 210 + [json.dumps({**GOOD_ROW, "prompt": ""})]
    data = _write(tmp_path / "late-bad.jsonl", "\n".join(rows) + "\n")
    assert train(dpo("--output_dir", str(out), "--overwrite", "--data_files", data, "--num_samples", "300")) == 2
    assert "late-bad.jsonl line 211: column `prompt`: the text is empty" in capsys.readouterr().err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert json.loads((out / "final_results.json").read_text())["steps"] == 6


def test_the_printed_resume_command_works_for_tiny_runs(six_steps, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(six_steps, out, ignore=shutil.ignore_patterns("checkpoint-6", "final_results.json"))
    # Exactly what an interrupted run prints: recipes/run.py <output_dir>/config.yaml --resume
    assert train([str(out / "config.yaml"), "--resume"]) == 0
    results = json.loads((out / "final_results.json").read_text())
    assert results["steps"] == 6 and results["status"] == "finished"
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_final_results_records_every_start_and_the_total(six_steps, tmp_path):
    """Issue 54: a run resumed over several starts said only its last start's training seconds."""
    out = tmp_path / "run"
    shutil.copytree(six_steps, out, ignore=shutil.ignore_patterns("checkpoint-6"))
    first = json.loads((out / "final_results.json").read_text())["starts"]
    assert len(first) == 1 and first[0]["resumed_from"] is None and first[0]["seconds"] >= first[0]["train_seconds"] > 0
    assert train([str(out / "config.yaml"), "--resume"]) == 0
    results = json.loads((out / "final_results.json").read_text())
    starts = results["starts"]
    assert [s["resumed_from"] for s in starts] == [None, "checkpoint-4"] and starts[0] == first[0]
    assert results["wall_seconds"] == pytest.approx(sum(s["train_seconds"] for s in starts), abs=0.02)
    assert results["total_seconds"] == pytest.approx(sum(s["seconds"] for s in starts), abs=0.02)


def test_ctrl_c_while_a_run_loads_is_one_line_and_the_folder_starts_cleanly_after(six_steps, tmp_path, capsys,
                                                                                  monkeypatch):
    """Issue 54: Ctrl-C while a run was still loading (or sampling the nano pairs) printed a raw KeyboardInterrupt
    traceback. Now one line, exit 130, and the folder as it was found: the same command then runs."""
    import rlhf_recipes.models

    out = tmp_path / "run"
    shutil.copytree(six_steps, out, ignore=shutil.ignore_patterns("checkpoint-6"))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def pressed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rlhf_recipes.models, "load_tokenizer", pressed)
    assert train([str(out / "config.yaml"), "--resume"]) == 130
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "interrupted before training began" in err and "Traceback" not in err, err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    monkeypatch.undo()
    assert train([str(out / "config.yaml"), "--resume"]) == 0
    assert json.loads((out / "final_results.json").read_text())["status"] == "finished"


def test_sigterm_while_a_run_loads_is_one_line_and_the_folder_starts_cleanly_after(six_steps, tmp_path, capsys,
                                                                                    monkeypatch):
    """Issue 54: a sweep's graceful stop (SIGTERM) reached a run still loading, whose default action killed it: exit
    143 and a folder reading `running`, reported as killed. Now as Ctrl-C: one line, 130, the folder as found."""
    import os
    import signal

    import rlhf_recipes.models

    out = tmp_path / "run"
    shutil.copytree(six_steps, out, ignore=shutil.ignore_patterns("checkpoint-6"))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    handler = signal.getsignal(signal.SIGTERM)
    real = rlhf_recipes.models.load_tokenizer

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(rlhf_recipes.models, "load_tokenizer", terminated)
    assert train([str(out / "config.yaml"), "--resume"]) == 130
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "interrupted before training began" in err and "Traceback" not in err, err
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert signal.getsignal(signal.SIGTERM) is handler  # given back: the next run's training puts its own in


def test_the_rerun_command_config_yaml_names_works_for_a_finished_run(six_steps):
    """config.yaml's header says how to re-run it: as written, not "already holds a run"."""
    import shlex

    header = (six_steps / "config.yaml").read_text().splitlines()[:3]
    command = next(line.split(": ", 1)[1] for line in header if line.startswith("# Re-run it with: "))
    argv = shlex.split(command)
    assert argv[:2] == ["python", "recipes/run.py"] and "--output_dir" in argv
    rerun = Path(argv[argv.index("--output_dir") + 1])
    try:
        assert train(argv[2:]) == 0
        results = json.loads((rerun / "final_results.json").read_text())
        assert results["status"] == "finished" and results["steps"] == 6
    finally:
        shutil.rmtree(rerun, ignore_errors=True)  # beside the module's shared run


def test_resume_refuses_a_changed_setting_and_records_an_allowed_one(six_steps, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(six_steps, out, ignore=shutil.ignore_patterns("checkpoint-6"))
    config = (out / "config.yaml").read_text()
    line = fails(capsys, str(out / "config.yaml"), "--resume", "--learning_rate", "1e-3", "--beta", "0.5")
    assert "`beta` 0.1 -> 0.5" in line and "`learning_rate` 5e-06 -> 0.001" in line and "--allow_changes" in line
    assert (out / "config.yaml").read_text() == config  # the refused resume changed nothing
    # Harmless keys may change without a flag.
    assert train([str(out / "config.yaml"), "--resume", "--logging_steps", "2"]) == 0
    shutil.rmtree(out)
    shutil.copytree(six_steps, out, ignore=shutil.ignore_patterns("checkpoint-6"))
    assert train([str(out / "config.yaml"), "--resume", "--learning_rate", "1e-3", "--allow_changes"]) == 0
    import yaml

    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["learning_rate"] == 1e-3
    assert saved["resumed_with_changes"] == [{"step": 4, "key": "learning_rate", "old": 5e-6, "new": 1e-3}]


@pytest.mark.parametrize("lost", ["optimizer.pt", "model.safetensors"])
def test_resume_skips_a_checkpoint_missing_a_file_to_the_previous_complete_one(six_steps, tmp_path, lost, caplog):
    out = tmp_path / "run"
    shutil.copytree(six_steps, out)
    (out / "checkpoint-6" / lost).unlink()
    (out / "final_results.json").unlink()
    assert train([str(out / "config.yaml"), "--resume"]) == 0
    assert f"skipping {out / 'checkpoint-6'}: {lost} is missing" in caplog.text
    reference = {r["step"]: r["loss"] for r in read_metrics(six_steps) if "loss" in r}
    resumed = {r["step"]: r["loss"] for r in read_metrics(out) if "loss" in r}
    assert resumed == pytest.approx(reference, rel=1e-4)  # steps 5-6 trained again from checkpoint-4, same losses


def test_a_checkpoint_is_complete_once_its_trainer_state_is_written_and_its_weights_open(six_steps, tmp_path):
    """transformers writes trainer_state.json last; the run's record in it lists every file the save wrote, with its
    size; a weights file must open (a safetensors header that fits its file, a torch zip's directory)."""
    folder = tmp_path / "checkpoint-6"
    shutil.copytree(six_steps / "checkpoint-6", folder)
    assert incomplete_reason(folder) is None
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["stateful_callbacks"]["RunRecord"]["args"]["files"]["model.safetensors"] == \
        (folder / "model.safetensors").stat().st_size
    (folder / "trainer_state.json").rename(folder / "held")  # a save killed before its last file
    assert incomplete_reason(folder) == "no trainer_state.json (its save did not finish)"
    (folder / "held").rename(folder / "trainer_state.json")
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[:-10])
    assert incomplete_reason(folder) == f"model.safetensors has {len(weights) - 10} bytes, its save wrote {len(weights)}"
    # A checkpoint without the run's record (an older one): the weights alone must open.
    del state["stateful_callbacks"]["RunRecord"]
    (folder / "trainer_state.json").write_text(json.dumps(state))
    assert incomplete_reason(folder).startswith("model.safetensors does not open (")
    (folder / "model.safetensors").write_bytes(weights)
    optimizer = (folder / "optimizer.pt").read_bytes()
    (folder / "optimizer.pt").write_bytes(optimizer[:-10])
    assert incomplete_reason(folder).startswith("optimizer.pt does not open (")
    newer = tmp_path / "checkpoint-8"
    newer.mkdir()
    point = find_resumable_checkpoint(tmp_path)
    assert point.checkpoint is None and [p.name for p, _ in point.skipped] == ["checkpoint-8", "checkpoint-6"]


# --------------------------------------------------------------------------------------
# Health: divergence is reported as it happens, and can stop the run


def test_an_exploding_loss_is_reported_and_stops_the_run_when_asked(tmp_path):
    out = tmp_path / "run"
    results = run_recipe("dpo.yaml", out, "--learning_rate", "10", "--max_steps", "8", "--stop_on_health_warning",
                         expect=3)
    assert results["status"] == "stopped" and results["steps"] < 8
    # Which check fires first depends on how the step diverges: DPO's loss either explodes or saturates at 0,
    # where sigmoid's gradient vanishes while the loss has moved.
    check = results["stopped_because"].split(" at step")[0]
    assert check in ("loss_exploded", "zero_grad_norm"), results["stopped_because"]
    flagged = [r for r in read_metrics(out) if r.get(f"health/{check}") == 1.0]
    assert len(flagged) == 1 and flagged[0]["step"] == results["steps"]


def test_health_callback_flags_a_loss_that_explodes_against_its_start():
    from transformers import TrainerControl, TrainerState

    from rlhf_recipes.callbacks import HealthCallback

    health, state, control = HealthCallback(stop=True), TrainerState(), TrainerControl()
    for step, loss in enumerate([0.69, 0.7, 7.0, 12.0], start=1):
        state.global_step = step
        logs = {"loss": loss, "grad_norm": 1.0}
        health.on_log(None, state, control, logs=logs)
        assert ("health/loss_exploded" in logs) == (loss > 0.69 + 10 * 1.0), (step, logs)
    assert control.should_training_stop and health.stopped_because.startswith("loss_exploded at step 4")


def test_health_callback_flags_vanishing_gradients_and_raises_on_nan():
    from transformers import TrainerControl, TrainerState

    from rlhf_recipes.callbacks import HealthCallback

    health, state, control = HealthCallback(), TrainerState(), TrainerControl()
    for step, (loss, grad) in enumerate([(0.7, 1.0), (0.6, 0.5), (0.5, 0.0)], start=1):
        state.global_step = step
        logs = {"loss": loss, "grad_norm": grad}
        health.on_log(None, state, control, logs=logs)
    assert logs.get("health/zero_grad_norm") == 1.0 and not control.should_training_stop
    quiet = {"loss": 0.5, "grad_norm": 0.0}  # the loss did not move: no warning
    health.on_log(None, state, control, logs=quiet)
    assert "health/zero_grad_norm" not in quiet
    with pytest.raises(FloatingPointError, match="loss is nan at step 3"):
        health.on_log(None, state, control, logs={"loss": float("nan")})


def test_a_feature_whose_extra_is_missing_names_the_extra(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a))
    line = fails(capsys, *dpo("--load_in_4bit", "true", "--output_dir", str(tmp_path / "run")))
    assert "`load_in_4bit`: needs the package `bitsandbytes`" in line and 'pip install "rlhf-recipes[qlora]"' in line


_RUN_AND_SAY_WHAT_WAS_LEFT_OUT = """
import sys
from rlhf_recipes.train import cli
code = cli(sys.argv[1:])
print("left out:", sorted(name for name, module in sys.modules.items() if module is None and "." not in name))
sys.exit(code)
"""


def test_a_runs_process_leaves_out_bitsandbytes_and_wandb_unless_the_recipe_uses_them(tmp_path):
    """A run's own process (recipes/run.py, rlhf-recipes train: a run of one process) marks the installed
    bitsandbytes and wandb absent before transformers is imported unless its recipe quantizes or reports to wandb
    (rlhf_recipes/quiet.py: ~1.4 s off every start; every single-process run CI starts trains that way); a
    process of a launch (WORLD_SIZE 2) keeps both. Real processes, each stopped by a one-line error found after
    the choice and before any model loads; in a process that has imported transformers already (this one),
    nothing changes."""
    import subprocess
    import sys

    from conftest import ROOT

    load_recipe(dpo(), construct=False)  # the config schema's cache (a machine's first recipe imports TRL to fill it)
    plain = dpo("--report_to", "none", "--max_length", "99999", "--output_dir", str(tmp_path / "p"))  # past positions
    quantized = dpo("--load_in_4bit", "true", "--report_to", "wandb", "--output_dir", str(tmp_path / "q"))  # no LoRA
    for argv, world, left_out in ((plain, "1", ["bitsandbytes", "wandb"]), (quantized, "1", []), (plain, "2", [])):
        done = subprocess.run([sys.executable, "-c", _RUN_AND_SAY_WHAT_WAS_LEFT_OUT, *argv], cwd=ROOT,
                              env={**os.environ, "WORLD_SIZE": world}, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.count("error:") == 1, done.stderr[-2000:]
        assert f"left out: {left_out}" in done.stdout, done.stdout[-2000:]
    from rlhf_recipes.quiet import leave_out_unused

    before = {name: sys.modules.get(name, "absent") for name in ("bitsandbytes", "wandb")}
    leave_out_unused(needed=set())
    assert {name: sys.modules.get(name, "absent") for name in before} == before


def test_help_shows_the_recipes_values_grouped_and_all_lists_every_key(capsys):
    # Before: TRL's defaults in 810 flat lines (`--learning_rate` default 1e-06, not the recipe's 5e-06).
    assert train([str(RECIPES / "dpo.yaml"), "--beta", "0.2", "--help"]) == 0
    out = capsys.readouterr().out
    assert "\nours (rlhf_recipes.config.RecipeArgs):\n" in out and "\nthe model's (trl.ModelConfig):\n" in out, out
    assert "\nthe trainer's (custom_losses.direct_alignment.config.ScheduledDPOConfig):\n" in out, out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "5e-06" in lines["learning_rate"] and lines["learning_rate"].endswith("recipes/dpo.yaml")
    assert "0.2" in lines["beta"] and lines["beta"].endswith("command line")
    assert "allenai/OLMo-2-0425-1B-SFT" in lines["model_name_or_path"] and "--help --all" in out
    # `rlhf-recipes show`'s own table and words (one renderer): the accumulation is the effective batch's, derived
    assert lines["gradient_accumulation_steps"].endswith("derived: effective_batch_size / (per-device batch x 1 "
                                                         "processes)")
    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.show import render
    table = render(load_recipe([str(RECIPES / "dpo.yaml"), "--beta", "0.2"], construct=False), build=False)
    assert table in out
    assert len(out.splitlines()) < 60
    assert train([str(RECIPES / "dpo.yaml"), "--help", "--all"]) == 0
    out = capsys.readouterr().out
    for key in ("--learning_rate", "--beta", "--model_name_or_path", "--effective_batch_size", "--stop_on_health_warning"):
        assert key in out, key
    assert train(["--help"]) == 0 and "Available algorithms: apo_down" in capsys.readouterr().out


def test_a_resumed_run_keeps_its_health_baseline(six_steps, tmp_path):
    """The explode check compares with the run's FIRST loss, also after a resume (read from metrics.jsonl)."""
    from rlhf_recipes.config import load_recipe as resolve
    from rlhf_recipes.run_setup import prepare_output_dir, run_callbacks

    out = tmp_path / "run"
    shutil.copytree(six_steps, out, ignore=shutil.ignore_patterns("checkpoint-6"))
    recipe = resolve([str(out / "config.yaml"), "--resume"], construct=False)
    _, _, health = run_callbacks(recipe, prepare_output_dir(recipe))
    first = next(r["loss"] for r in read_metrics(six_steps) if "loss" in r)
    assert health.start_loss == first
