"""What would stop or spoil a real run, found before anything loads: wandb's login, a real recipe on a machine
without a GPU, the checkpoints a real run keeps, the free disk, a missing package; `train` refuses them in one line,
and `rlhf-recipes preflight` prints one line per finding with its fix (exit 1 when one would stop the run).
Every condition is faked (the environment, torch.cuda, shutil.disk_usage, find_spec); nothing loads weights."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import namedtuple

import pytest
import torch

from conftest import RECIPES, ROOT, setting_of
from rlhf_recipes import preflight
from rlhf_recipes.config import load_recipe
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.tools.planner.launch import read_launch
from rlhf_recipes.tools.preflight import run_checks

FIXTURES = ROOT / "rlhf_recipes" / "data" / "fixtures"
FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"  # wandb checks a key's form (40+ word characters) only


@pytest.fixture
def no_wandb_login(tmp_path, monkeypatch):
    """A machine where nobody ran `wandb login`: no key in the environment, an empty home (no netrc, no settings),
    WANDB_MODE unset (conftest sets it to offline for every other test)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_CONFIG_DIR", "NETRC",
                 "WANDB_BASE_URL", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    return home


def _recipe(*argv: str):
    return load_recipe([*argv], construct=False)


# --------------------------------------------------------------------------------------
# wandb


def test_a_run_reporting_to_wandb_without_a_login_stops_in_one_line_before_loading(no_wandb_login, tmp_path, capsys):
    from rlhf_recipes.train import main

    out = tmp_path / "run"
    code = main([str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--report_to", "wandb", "--output_dir", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in "\n".join(err), err
    assert "`report_to`" in errors[0] and "not logged in" in errors[0] and "project `rlhf-recipes`" in errors[0]
    assert "wandb login" in errors[0] and "--wandb_mode offline" in errors[0] and "--report_to none" in errors[0]
    assert not out.exists()  # stopped before the data and the model loaded: no trace of the run


def test_a_key_a_netrc_entry_or_an_offline_mode_lets_it_start(no_wandb_login, monkeypatch):
    recipe = _recipe(str(RECIPES / "grpo.yaml"))
    assert preflight.wandb_finding(recipe).level == "stop"
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    assert preflight.wandb_finding(recipe).level == "ok"
    monkeypatch.setenv("WANDB_API_KEY", "too-short")  # wandb.init would refuse it at the first step
    finding = preflight.wandb_finding(recipe)
    assert finding.level == "stop" and "not valid" in finding.text
    monkeypatch.delenv("WANDB_API_KEY")
    # `wandb login` writes a netrc entry for its server (api.wandb.ai); wandb.init reads it from there.
    (no_wandb_login / ".netrc").write_text(f"machine api.wandb.ai\n  login user\n  password {FAKE_KEY}\n")
    finding = preflight.wandb_finding(recipe)
    assert finding.level == "ok" and "netrc" in finding.text, finding
    (no_wandb_login / ".netrc").unlink()
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert preflight.wandb_finding(recipe).level == "ok"
    monkeypatch.delenv("WANDB_MODE")
    assert preflight.wandb_finding(_recipe(str(RECIPES / "grpo.yaml"), "--wandb_mode", "disabled")).level == "ok"
    monkeypatch.setenv("WANDB_MODE", "offlne")  # wandb itself would raise a validation traceback
    finding = preflight.wandb_finding(recipe)
    assert finding.level == "stop" and "`offlne` is not a wandb mode" in finding.text


def test_the_wandb_check_uses_wandb_login_only_and_leaves_this_process_untouched(no_wandb_login, monkeypatch):
    """wandb.login(verify=False, prompt=False), wandb's public API, answers in a child interpreter: this process
    neither imports wandb's private readers nor builds wandb's process-wide settings (wandb.init reads them after the
    run has set WANDB_MODE and WANDB_DIR)."""
    import sys

    monkeypatch.setitem(sys.modules, "wandb.sdk.lib.wbauth", None)  # importing it here raises ImportError
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    assert preflight.wandb_login() == ("WANDB_API_KEY", None)
    monkeypatch.setenv("WANDB_API_KEY", "too-short")
    source, problem = preflight.wandb_login()
    assert source is None and "AuthenticationError" in problem and "40" in problem, problem
    wandb_setup = sys.modules.get("wandb.sdk.wandb_setup")
    assert wandb_setup is None or getattr(wandb_setup, "_singleton", None) is None


def test_runs_land_in_the_rlhf_recipes_project_unless_told_otherwise(no_wandb_login, monkeypatch):
    path = str(RECIPES / "grpo.yaml")
    assert _recipe(path).resolved["wandb_project"] == "rlhf-recipes"  # not wandb's default "huggingface"
    assert _recipe(path, "--wandb_project", "mine").resolved["wandb_project"] == "mine"
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    assert _recipe(path).resolved["wandb_project"] == "from-env"
    assert "wandb_project" not in _recipe(path, "--report_to", "none").resolved


# --------------------------------------------------------------------------------------
# Checkpoints kept by a real run


def test_every_real_recipe_keeps_two_checkpoints_unless_it_says_otherwise():
    """...and saves during the run: transformers' save_steps 500 is past the end of most recipes (DPO's 300 steps),
    so a crash that is not a signal (an OOM, a lost node) left nothing to resume and preflight counted 2 checkpoints
    that were never written."""
    recipes = [p for p in sorted(RECIPES.glob("*.yaml"))]
    for path in recipes:
        recipe = _recipe(str(path))
        assert recipe.resolved.get("save_total_limit") == 2, path.name
        saves_nothing = setting_of(recipe, "save_strategy") == "no"  # the nano base builds: minutes on a CPU
        assert preflight.checkpoint_count(recipe) == (0 if saves_nothing else 2), path.name
    dpo = _recipe(str(RECIPES / "dpo.yaml"))
    assert dpo.resolved["save_steps"] == 0.1 and "default for a real run" in dpo.where("save_steps")
    assert _recipe(str(RECIPES / "grpo.yaml"), "--save_total_limit", "5").resolved["save_total_limit"] == 5
    assert "save_total_limit" not in _recipe(str(RECIPES / "grpo.yaml"), "--profile", "tiny").resolved


def test_a_real_run_with_more_saves_than_the_limit_keeps_the_newest_and_resumes_from_them(tmp_path):
    """A real recipe (no profile) on the embedded tiny model: 4 saves, the newest 2 kept, --resume's pick among them."""
    from rlhf_recipes.checkpoints import find_resumable_checkpoint
    from rlhf_recipes.train import main

    out = tmp_path / "run"
    code = main([str(RECIPES / "sft.yaml"), "--model_name_or_path", "tiny", "--chat_template_from", "null",
                 "--data_files", str(FIXTURES / "no_robots" / "train.jsonl"), "--num_samples", "12",
                 "--dtype", "float32", "--bf16", "false", "--activation_checkpointing", "false", "--max_steps", "4",
                 "--save_steps", "1", "--max_length", "128", "--per_device_train_batch_size", "2",
                 "--effective_batch_size", "2", "--report_to", "none", "--output_dir", str(out)])
    assert code == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]
    assert find_resumable_checkpoint(out).checkpoint.name == "checkpoint-4"


# --------------------------------------------------------------------------------------
# A real recipe on a machine without a GPU


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    if getattr(torch.backends, "mps", None) is not None:
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_a_real_recipe_without_a_gpu_is_refused_unless_the_cpu_is_asked_for(no_gpu, tmp_path):
    from rlhf_recipes.tiny import tiny_model_path
    from rlhf_recipes.validation import check_inputs

    real = [str(RECIPES / "dpo.yaml"), "--model_name_or_path", tiny_model_path(), "--data_files",
            str(FIXTURES / "ultrafeedback" / "train.jsonl"), "--report_to", "none", "--output_dir", str(tmp_path / "r")]
    with pytest.raises(RecipeError) as refused:
        check_inputs(_recipe(*real))
    message = str(refused.value)
    assert "sees no GPU, so it would train on the CPU" in message and "--use_cpu true" in message
    assert "\n" not in message
    check_inputs(_recipe(*real, "--use_cpu", "true"))  # on purpose: allowed
    check_inputs(_recipe(str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--output_dir", str(tmp_path / "t")))


@pytest.fixture
def four_gpus(monkeypatch):
    import transformers.integrations.integration_utils  # noqa: F401  (imported before torch claims GPUs: their
    import trl.trainer.dpo_config  # noqa: F401           imports probe CUDA's own functions)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "NVIDIA RTX A6000")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 6))


def test_one_process_that_sees_several_gpus_is_refused_before_anything_loads(four_gpus, monkeypatch, tmp_path):
    """`python recipes/run.py` (or accelerate's 1gpu.yaml, gpu_ids: all) on a 4-GPU machine: transformers' Trainer
    counts every visible GPU (TrainingArguments.n_gpu) and wraps the model in nn.DataParallel. TRL's trainers then
    refused it after the data and model had loaded; the ORM/PRM's plain Trainer trained at 4x the batch while
    final_results.json reported the recipe's."""
    from rlhf_recipes.validation import check_inputs

    tiny = [str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--output_dir", str(tmp_path / "t")]
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(RecipeError) as refused:
        check_inputs(_recipe(*tiny))
    message = str(refused.value)
    assert "one process sees 4 GPUs" in message and "nn.DataParallel" in message and "\n" not in message
    assert "CUDA_VISIBLE_DEVICES=0" in message and "num_processes 4" in message
    check_inputs(_recipe(*tiny, "--use_cpu", "true"))  # the CPU on purpose: no GPU is used
    monkeypatch.setenv("WORLD_SIZE", "2")  # a process of a launch of several: one GPU each
    check_inputs(_recipe(*tiny))


@pytest.mark.parametrize("config, expected", [
    ("1gpu.yaml", "stop gpus one process sees 4 GPUs"),
    ("4gpu.yaml", "ok gpus accelerate_configs/4gpu.yaml wants 4 GPU(s)"),
])
def test_preflight_names_one_process_on_several_gpus(four_gpus, config, expected):
    from rlhf_recipes.tools.planner.launch import read_launch
    from rlhf_recipes.tools.preflight import gpu_findings

    findings = list(gpu_findings(_recipe(str(RECIPES / "dpo.yaml")), read_launch(f"accelerate_configs/{config}")))
    assert [f"{f.level} {f.topic} {f.text}" for f in findings if f.topic == "gpus"][0].startswith(expected), findings


@pytest.mark.parametrize("capability, level", [((7, 0), "warn"), ((8, 0), "ok")])
def test_bf16_on_a_gpu_before_ampere_is_named(monkeypatch, capability, level):
    """A V100 or T4 has no bf16 units, but torch.cuda.is_bf16_supported() (emulation included) and transformers'
    bf16 check both say yes, so every real recipe (bf16: true) ran emulated without a word."""
    import transformers.integrations.integration_utils  # noqa: F401  (before torch claims a GPU)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100-SXM2-32GB")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    finding = preflight.accelerator_finding(_recipe(str(RECIPES / "dpo.yaml")))
    assert finding.level == level, finding
    if level == "warn":
        assert "compute capability 7.0) has no bf16 units" in finding.text and "--bf16 false" in finding.text
    assert preflight.accelerator_finding(_recipe(str(RECIPES / "dpo.yaml"), "--bf16", "false", "--dtype",
                                                 "float32")).level == "ok"
    from rlhf_recipes.tools.planner.launch import read_launch
    from rlhf_recipes.tools.preflight import gpu_findings

    (tool,) = [f for f in gpu_findings(_recipe(str(RECIPES / "dpo.yaml")), read_launch("accelerate_configs/1gpu.yaml"))
               if f.topic == "gpus"]
    assert tool.level == level, tool


def test_an_accelerate_config_that_names_one_gpu_is_one_gpu(four_gpus, tmp_path):
    """accelerate sets CUDA_VISIBLE_DEVICES from a `gpu_ids` that names GPUs: that one process sees one."""
    from rlhf_recipes.tools.planner.launch import read_launch
    from rlhf_recipes.tools.preflight import gpu_findings

    config = tmp_path / "gpu2.yaml"
    config.write_text((ROOT / "accelerate_configs" / "1gpu.yaml").read_text().replace("gpu_ids: all", 'gpu_ids: "2"'))
    launch = read_launch(str(config))
    assert launch.gpu_ids == "2"
    assert [f.level for f in gpu_findings(_recipe(str(RECIPES / "dpo.yaml")), launch) if f.topic == "gpus"] == ["ok"]


# --------------------------------------------------------------------------------------
# Disk


def test_disk_stops_when_one_checkpoint_does_not_fit_and_warns_when_the_run_does_not(monkeypatch, tmp_path):
    recipe = _recipe(str(RECIPES / "grpo.yaml"), "--output_dir", str(tmp_path / "run"))
    each = preflight.checkpoint_bytes(recipe, 1_700_000_000)  # Qwen3-1.7B in bf16 + AdamW's two bf16 states
    assert each == 1_700_000_000 * 2 * 3
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 5 * 10**9))
    finding = preflight.disk_finding(recipe, params=1_700_000_000)
    assert finding.level == "stop" and "the first save would fail" in finding.text
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 15 * 10**9))
    finding = preflight.disk_finding(recipe, params=1_700_000_000)
    assert finding.level == "warn" and "2 checkpoint(s)" in finding.text and "--save_total_limit 1" in finding.text
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 500 * 10**9))
    assert preflight.disk_finding(recipe, params=1_700_000_000).level == "ok"


def test_a_run_checks_the_disk_from_the_weights_already_on_this_machine(monkeypatch, tmp_path):
    """`train`'s own disk check (no network, no planner): the parameter count from the safetensors headers."""
    from rlhf_recipes.tiny import tiny_model_path
    from rlhf_recipes.validation import check_inputs

    recipe = _recipe(str(RECIPES / "dpo.yaml"), "--model_name_or_path", tiny_model_path(), "--data_files",
                     str(FIXTURES / "ultrafeedback" / "train.jsonl"), "--report_to", "none", "--use_cpu", "true",
                     "--output_dir", str(tmp_path / "run"))
    assert preflight.cached_parameter_count(tiny_model_path()) == 123_584  # the tiny model's parameters
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 10_000))
    with pytest.raises(RecipeError, match="the first save would fail"):
        check_inputs(recipe)


def test_an_output_dir_that_cannot_be_written_is_one_line_for_the_run_and_the_preflight_tool(tmp_path):
    """preflight.check_output_dir: the one refusal of an unwritable output_dir (validation.check_inputs raises it)."""
    (tmp_path / "afile").write_text("")
    recipe = _recipe(str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--output_dir", str(tmp_path / "afile" / "out"))
    with pytest.raises(RecipeError, match=r"cannot be written: \S+afile is a file, not a folder\. Pick another "
                                          r"--output_dir$"):
        preflight.check_output_dir(recipe)
    fine = _recipe(str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--output_dir", str(tmp_path / "run"))
    assert preflight.check_output_dir(fine) == str(tmp_path / "run")


# --------------------------------------------------------------------------------------
# Packages


def test_a_missing_or_out_of_range_extra_is_named(monkeypatch):
    recipe = _recipe(str(RECIPES / "dpo.yaml"))
    real_find_spec, real_version = importlib.util.find_spec, importlib.metadata.version
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed"
                        else real_find_spec(name, *a))
    (finding,) = preflight.extras_findings(recipe, deepspeed=True)
    assert finding.level == "stop" and 'pip install "rlhf-recipes[deepspeed]"' in finding.text
    monkeypatch.setattr(importlib.util, "find_spec", real_find_spec)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.17.0" if name == "deepspeed"
                        else real_version(name))
    (finding,) = preflight.extras_findings(recipe, deepspeed=True)
    assert finding.level == "warn" and "outside TRL 1.16's range >=0.18.6" in finding.text
    assert preflight.extras_findings(recipe, deepspeed=False) == []


def _broken_package(root, name: str = "bitsandbytes"):
    """A package `name` first on the path whose import fails, as a bitsandbytes built for another CUDA does."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text('raise ImportError("libbitsandbytes_cuda126.so: cannot open shared '
                                             'object file: No such file or directory")\n')
    return root


def test_an_extra_that_is_installed_but_does_not_import_stops_preflight(capsys, tmp_path, monkeypatch):
    """preflight said `ok bitsandbytes` for a bitsandbytes that is installed but fails to import (a CUDA mismatch),
    and the 4-bit run then died with an ImportError traceback: preflight imports each needed extra in a child
    interpreter (this process, where the real one is found, is left as it is)."""
    broken = _broken_package(tmp_path / "broken")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(broken), os.environ.get("PYTHONPATH")])))
    argv = (str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--load_in_4bit", "true", "--use_peft", "true",
            "--report_to", "none", "--output_dir", str(tmp_path / "run"))
    code, lines = _preflight(capsys, *argv)
    (line,) = [line for line in lines if line.split()[1] == "bitsandbytes"]
    assert code == 1 and line.startswith("stop") and "installed but does not import" in line, lines
    assert "cannot open shared object file" in line and 'rlhf-recipes[qlora]' in line
    monkeypatch.delenv("PYTHONPATH")
    code, lines = _preflight(capsys, *argv)
    (line,) = [line for line in lines if line.split()[1] == "bitsandbytes"]
    assert code == 0 and line.startswith("ok"), lines


def test_a_run_whose_extra_does_not_import_stops_in_one_line_before_loading(tmp_path):
    """The run's own check (validation.check_inputs -> preflight.extras_findings) imports the extra it is about to
    use, so the broken install is one line at the start instead of a traceback after the model and data load."""
    broken = _broken_package(tmp_path / "broken")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(broken), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, str(RECIPES / "run.py"), str(RECIPES / "dpo.yaml"), "--profile", "tiny",
                          "--load_in_4bit", "true", "--use_peft", "true", "--report_to", "none", "--output_dir",
                          str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=300, check=False)
    err = run.stderr.strip().splitlines()
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert err[-1].startswith("error: command line: `load_in_4bit`: needs the package `bitsandbytes`"), err[-1]
    assert "installed but does not import" in err[-1] and not (tmp_path / "run").exists()


def test_a_bitsandbytes_optimizer_keeps_bitsandbytes_in_the_run():
    """`--optim adamw_bnb_8bit` (or any of transformers' bitsandbytes optimizers) needs bitsandbytes as 4-bit weights
    do: a run's own process left it out (quiet.leave_out_unused), and the Trainer then failed at its first step,
    after the model loaded: "You need to install `bitsandbytes` in order to use bitsandbytes optimizers"."""
    from transformers.trainer_optimizer import _BITSANDBYTES_OPTIMIZERS

    assert preflight.BITSANDBYTES_OPTIMIZERS == {optim.value for optim in _BITSANDBYTES_OPTIMIZERS}
    for optim in ("adamw_bnb_8bit", "paged_adamw_32bit", "lion_8bit"):
        recipe = _recipe(str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--optim", optim)
        assert preflight.needed_extras(recipe) == [("bitsandbytes", "command line: `optim`")]
        assert "bitsandbytes" in preflight.needed_packages(recipe)
    assert preflight.needed_extras(_recipe(str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--optim",
                                           "adamw_torch")) == []


def test_a_recipes_own_deepspeed_config_needs_the_package_too(monkeypatch, capsys, tmp_path):
    """TrainingArguments' own `deepspeed` key (a DeepSpeed config without an accelerate DeepSpeed launch) needs the
    package as a DeepSpeed launch does: without it the run stops at its start naming the key and the install, and
    leaves no folder (it went on to fail in TRL's config class: "object.__init__() takes exactly one argument")."""
    from rlhf_recipes.train import main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed"
                        else real_find_spec(name, *a))
    config = tmp_path / "ds_config.json"
    config.write_text('{"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto"}')
    (finding,) = preflight.extras_findings(_recipe(str(RECIPES / "dpo.yaml"), "--deepspeed", str(config)))
    assert finding.level == "stop" and "`deepspeed`" in finding.text and "rlhf-recipes[deepspeed]" in finding.text
    run = tmp_path / "run"
    assert main([str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--deepspeed", str(config), "--output_dir",
                 str(run)]) == 2
    err = capsys.readouterr().err
    assert "command line: `deepspeed`: needs the package `deepspeed`" in err and not run.exists(), err


# --------------------------------------------------------------------------------------
# rlhf-recipes preflight


def _preflight(capsys, *argv: str) -> tuple[int, list[str]]:
    # transformers prints "[INFO] Running in WANDB offline mode" when its integrations are first imported under
    # conftest's WANDB_MODE=offline: imported (and that line dropped) before preflight runs, so it is not taken for
    # one of preflight's lines
    import transformers.integrations.integration_utils  # noqa: F401

    from rlhf_recipes.tools.preflight import main

    capsys.readouterr()
    code = main([*argv])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out.strip().splitlines()


def test_preflight_passes_a_runnable_offline_recipe(capsys, tmp_path):
    code, lines = _preflight(capsys, str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--report_to", "none",
                             "--output_dir", str(tmp_path / "run"))
    assert code == 0, lines
    assert all(line.startswith("ok ") for line in lines[:-1]) and "nothing would stop the run" in lines[-1], lines


def test_preflight_names_the_missing_gpus_the_offline_hub_and_wandb(capsys, tmp_path, monkeypatch, no_gpu,
                                                                   no_wandb_login):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    # nothing cached: the constant is read once at import, so the environment variable alone would leave a
    # machine's own cache (where it holds these models) in place
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    code, lines = _preflight(capsys, str(RECIPES / "dpo.yaml"), "--config_file",
                             str(ROOT / "accelerate_configs" / "4gpu.yaml"), "--output_dir", str(tmp_path / "run"))
    assert code == 1
    stops = {line.split()[1]: line for line in lines if line.startswith("stop ")}
    assert set(stops) == {"gpus", "wandb", "model", "data"}, lines
    assert "wants 4 GPU(s)" in stops["gpus"] and "sees 0" in stops["gpus"]
    assert "not in the local model cache" in stops["model"] and "HF_HUB_OFFLINE" in stops["model"]
    assert "not in the local cache" in stops["data"]
    assert "wandb login" in stops["wandb"]
    assert "4 would stop the run" in lines[-1]
    assert len(lines) == len({line.split()[1] for line in lines[:-1]}) + 1  # one line per check, then the summary


def test_preflight_names_a_full_disk_and_a_missing_extra(capsys, tmp_path, monkeypatch, no_gpu):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 10**9))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deepspeed"
                        else real_find_spec(name, *a))
    code, lines = _preflight(capsys, str(RECIPES / "dpo.yaml"), "--config_file",
                             str(ROOT / "accelerate_configs" / "zero3.yaml"), "--output_dir", str(tmp_path / "run"),
                             "--report_to", "none")
    assert code == 1
    stops = {line.split()[1]: line for line in lines if line.startswith("stop ")}
    assert "the first save would fail" in stops["disk"], lines
    assert 'rlhf-recipes[deepspeed]' in stops["deepspeed"], lines


def test_preflight_reads_the_recipe_as_the_launch_would(capsys, tmp_path):
    """The config's processes and ZeRO stage reach the recipe's own checks: PPO's joint value optimizer is refused
    under DeepSpeed, rejection sampling under ZeRO-3; each is one line, and nothing else is judged without it."""
    zero3 = str(ROOT / "accelerate_configs" / "zero3.yaml")
    for recipe, expected in (("ppo.yaml", "under DeepSpeed set value_optimizer: separate"),
                             ("rejection_sampling_top_per_prompt.yaml", "does not run under DeepSpeed ZeRO-3")):
        code, lines = _preflight(capsys, str(RECIPES / recipe), "--config_file", zero3, "--output_dir",
                                 str(tmp_path / "run"))
        assert code == 1 and len(lines) == 2 and lines[0].startswith("stop recipe") and expected in lines[0], lines


def test_preflight_checks_the_split_a_swapped_hub_dataset_has(monkeypatch):
    """The likeliest dataset swap, HuggingFaceH4/ultrafeedback_binarized, has no split `train` (train_prefs...)."""
    import datasets
    from huggingface_hub import HfApi

    from rlhf_recipes.tools.preflight import hub_dataset_finding

    monkeypatch.setattr(HfApi, "auth_check", lambda self, repo_id, repo_type=None, **kwargs: None)
    monkeypatch.setattr(datasets, "get_dataset_split_names", lambda hub_id, config=None: ["train_prefs", "test_prefs"])
    with pytest.raises(RecipeError, match="has no split `train`; it has train_prefs, test_prefs. Pass --dataset_split"):
        hub_dataset_finding("HuggingFaceH4/ultrafeedback_binarized", None, "train", ("chosen", "rejected"),
                            "command line: `dataset_name`")


def test_preflight_online_names_a_gated_model_and_reads_the_datasets_first_row(capsys, tmp_path, monkeypatch, no_gpu):
    """The hub answering (faked): a model whose terms this token has not accepted stops; the dataset's split exists
    and its first row (streamed) has the adapter's columns."""
    import datasets
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError

    from rlhf_recipes import hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=2.0: True)

    def auth_check(self, repo_id, repo_type=None, **kwargs):
        if repo_type == "model":
            raise GatedRepoError.__new__(GatedRepoError)

    monkeypatch.setattr(HfApi, "auth_check", auth_check)
    first = json.loads((FIXTURES / "ultrafeedback" / "train.jsonl").read_text().splitlines()[0])
    monkeypatch.setattr(datasets, "get_dataset_split_names", lambda hub_id, config=None: ["train"])
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: iter([first]))
    code, lines = _preflight(capsys, str(RECIPES / "dpo.yaml"), "--report_to", "none", "--output_dir",
                             str(tmp_path / "run"))
    found = {line.split()[1]: line for line in lines[:-1]}
    assert code == 1 and found["model"].startswith("stop") and "is gated" in found["model"], lines
    assert found["data"].startswith("ok") and "[train] on the hub, with the columns" in found["data"], lines


# --------------------------------------------------------------------------------------
# Accelerate configs as users write them, read by preflight and the planner: broken YAML, a YAML that is not a
# mapping, and DeepSpeed settings given as `deepspeed_config_file:` (a DeepSpeed JSON) instead of inline.


@pytest.mark.parametrize("text, expected", [
    ("distributed_type: DEEPSPEED\n  num_processes: [4\n", "is not valid YAML at line"),  # broken YAML
    ("- distributed_type: MULTI_GPU\n- num_processes: 4\n", "holds a YAML list, expected a mapping"),
    ("MULTI_GPU\n", "holds a YAML str, expected a mapping"),
])
def test_a_malformed_accelerate_config_is_one_stop_line_naming_the_file(tmp_path, text, expected):
    config = tmp_path / "accel.yaml"
    config.write_text(text)
    findings = run_checks(["recipes/sft.yaml", "--profile", "tiny"], str(config))
    assert len(findings) == 1
    [finding] = findings
    assert finding.level == "stop" and "\n" not in finding.text
    assert str(config) in finding.text and expected in finding.text


def _deepspeed_file_config(tmp_path, zero: dict) -> str:
    ds_json = tmp_path / "ds_zero.json"
    ds_json.write_text(json.dumps({"zero_optimization": zero, "train_micro_batch_size_per_gpu": "auto"}))
    config = tmp_path / "accel.yaml"
    config.write_text(f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: {ds_json}\n"
                      "  zero3_init_flag: true\nnum_processes: 4\nmixed_precision: bf16\n")
    return str(config)


def test_the_zero_stage_and_offload_are_read_from_a_deepspeed_config_file(tmp_path):
    launch = read_launch(_deepspeed_file_config(tmp_path, {"stage": 3, "offload_param": {"device": "cpu"}}))
    assert launch.zero3 and launch.zero_stage == 3
    assert launch.offload_params and not launch.offload_optimizer
    assert launch.given and not launch.cpu and launch.machines == 1 and not read_launch(None).given
    assert read_launch(_deepspeed_file_config(tmp_path, {"stage": 2})).zero_stage == 2


def test_a_missing_deepspeed_config_file_is_one_line_naming_it(tmp_path):
    config = tmp_path / "accel.yaml"
    config.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: nowhere/ds.json\n")
    with pytest.raises(ValueError, match="deepspeed_config_file nowhere/ds.json cannot be read") as err:
        read_launch(str(config))
    assert "\n" not in str(err.value)


def test_preflight_and_plan_take_the_accelerate_config_by_the_same_names(capsys, no_gpu):
    """`plan --config` vs `preflight --config_file`: both take --config_file (accelerate launch's name) and --config."""
    config = str(ROOT / "accelerate_configs" / "4gpu.yaml")
    for flag in ("--config_file", "--config"):
        _, lines = _preflight(capsys, str(RECIPES / "dpo.yaml"), flag, config, "--report_to", "none")
        assert any(line.startswith("stop gpus") and "wants 4 GPU(s)" in line for line in lines), (flag, lines)


def test_a_multi_process_tiny_launch_on_a_cpu_machine_is_read_without_starting_a_process_group(capsys, no_gpu):
    """preflight set WORLD_SIZE while reading the recipe, so a CPU profile's TrainingArguments (gloo, use_cpu) tried to
    start a process group: `stop recipe ... MASTER_ADDR env was not set` for every multi-process tiny launch, which
    trains (`accelerate launch --config_file accelerate_configs/cpu/ddp_2proc.yaml ... --profile tiny`)."""
    config = str(ROOT / "accelerate_configs" / "cpu" / "ddp_2proc.yaml")
    code, lines = _preflight(capsys, str(RECIPES / "dpo.yaml"), "--profile", "tiny", "--config_file", config,
                             "--per_device_train_batch_size", "1", "--report_to", "none")
    assert code == 0 and lines[0].startswith("ok   recipe"), lines
    assert lines[1].startswith("ok   gpus") and "2 processes (gloo)" in lines[1], lines
