"""What a run promises (docs/reliability.md), each fault made real: settings that used to end in a traceback are
one line before any model loads; a NaN stops the run as failed with the last good checkpoint kept; a full disk
(ENOSPC injected at the write call) ends in one line and a folder that `runs` calls failed and --resume continues."""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RECIPES, ROOT, read_metrics
from rlhf_recipes.checkpoints import checkpoint_step, find_resumable_checkpoint
from rlhf_recipes.train import main as train


def fails(capsys, *argv: str, code: int = 2) -> str:
    """Run recipes/run.py ARGV in this process: exit `code`, exactly one `error:` line on stderr, no traceback."""
    assert train(list(argv)) == code
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    return errors[0]


def tiny(recipe: str, out: Path, *extra: str) -> list[str]:
    return [str(RECIPES / recipe), "--profile", "tiny", "--output_dir", str(out), *extra]


# --------------------------------------------------------------------------------------
# Class 2: settings that ended in a traceback (or were accepted silently) are one line, exit 2, folder untouched


@pytest.mark.parametrize("recipe, extra, expected", [
    ("dpo.yaml", ("--seed", "4294967296"), "`seed` must be an integer in [0, 4294967295]"),
    ("dpo.yaml", ("--use_peft", "true", "--lora_r", "0"), "`lora_r` must be a LoRA rank of at least 1"),
    ("dpo.yaml", ("--load_in_4bit", "true"), "`load_in_4bit`: quantized weights cannot be trained directly; set "
                                             "`use_peft: true`"),
    ("dpo.yaml", ("--use_peft", "true", "--lora_target_modules", "q_proj,query_key_value"),
     "`tiny` has no module query_key_value; its linear layers are down_proj, gate_proj, k_proj, lm_head, o_proj, "
     "q_proj, up_proj, v_proj"),
    # one name: ModelConfig's __post_init__ makes the list the bare string, which the check used to skip
    ("dpo.yaml", ("--use_peft", "true", "--lora_target_modules", "query_key_value"),
     "`tiny` has no module query_key_value;"),
    ("dpo.yaml", ("--max_length", "1e8"), "`max_length` is 100000000, more than the 2048 positions of `tiny`"),
    ("grpo.yaml", ("--max_completion_length", "2040"), "plus max_completion_length 2040 exceeds the 2048 positions"),
])
def test_settings_that_used_to_crash_are_one_line(tmp_path, capsys, recipe, extra, expected):
    out = tmp_path / "run"
    line = fails(capsys, *tiny(recipe, out, *extra))
    assert expected in line, line
    assert not out.exists()


def test_an_output_dir_that_cannot_be_written_is_named(tmp_path, capsys):
    (tmp_path / "afile").write_text("in the way")
    line = fails(capsys, *tiny("dpo.yaml", tmp_path / "afile" / "run"))
    assert "`output_dir`" in line and "afile is a file, not a folder" in line, line


def test_an_export_destination_that_cannot_be_written_is_named_before_loading(tmp_path, capsys):
    from rlhf_recipes.tools.export import main as export

    (tmp_path / "afile").write_text("in the way")
    assert export([str(tmp_path / "no-run"), str(tmp_path / "afile" / "exported")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OUT" in err[0] and "cannot be written" in err[0] and "afile is a file" in err[0], err


# --------------------------------------------------------------------------------------
# Class 7: NaN and inf stop the run as failed, in one line, with the last good checkpoint kept


def test_a_learning_rate_that_makes_the_weights_nan_fails_the_run_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    from rlhf_recipes.run_folder import SavedRun

    out = tmp_path / "run"
    # A real divergence: 1e30 makes step 1's update overflow the next forward pass, so step 2 writes NaN weights
    # (the Trainer's logging_nan_inf_filter used to hide the NaN losses and the run ended "finished").
    line = fails(capsys, *tiny("dpo.yaml", out, "--learning_rate", "1e30", "--max_steps", "6", "--save_strategy",
                               "steps", "--save_steps", "1"), code=1)
    assert "the weights are not finite after step 2" in line and "checkpoint-1, is kept" in line, line
    results = json.loads((out / "final_results.json").read_text())
    assert results["status"] == "failed" and results["steps"] == 2 and results["last_good_checkpoint"] == "checkpoint-1"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]  # no checkpoint holds the NaNs
    assert SavedRun.open(out).status == "failed at step 2"
    assert find_resumable_checkpoint(out).checkpoint == out / "checkpoint-1"  # complete: what --resume takes
    assert all(math.isfinite(v) for r in read_metrics(out) for v in r.values() if isinstance(v, float))


ZERO3_NAN_SHARD = """
import os, sys
import torch
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1], RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                  ACCELERATE_USE_DEEPSPEED="true")
from rlhf_recipes.cpu_launch import skip_unused_shm_op
skip_unused_shm_op()
import deepspeed
from rlhf_recipes.callbacks import first_nonfinite_parameter
deepspeed.init_distributed(dist_backend="gloo")
with deepspeed.zero.Init(config_dict_or_path={"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1}):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
assert all(p.numel() == 0 for p in model.parameters())  # partitioned: placeholders between forwards
clean = first_nonfinite_parameter(model)
with torch.no_grad():
    model[1].weight.ds_tensor[3] = float("nan")
print(clean, first_nonfinite_parameter(model))
"""


@pytest.mark.multiprocess
def test_nan_weights_are_found_in_a_zero3_shard(tmp_path):
    """Under ZeRO-3 every parameter is an empty placeholder between forwards (DeepSpeed's free_param) and the
    weights live in each rank's `ds_tensor` shard: the per-step weight check must read the shard, or it checks
    nothing and a checkpoint can hold NaN weights. Real DeepSpeed partitioning (zero.Init) in a child process."""
    pytest.importorskip("deepspeed")
    from conftest import free_port

    script = tmp_path / "zero3_nan.py"
    script.write_text(ZERO3_NAN_SHARD)
    done = subprocess.run([sys.executable, str(script), str(free_port())], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "None 1.weight", done.stdout


def test_a_nan_gradient_norm_is_an_error_even_when_the_logged_loss_is_finite():
    from transformers import TrainerControl, TrainerState

    from rlhf_recipes.callbacks import HealthCallback

    state = TrainerState()
    state.global_step = 4
    with pytest.raises(FloatingPointError, match="gradient norm is nan at step 4"):
        HealthCallback().on_log(None, state, TrainerControl(), logs={"loss": 0.7, "grad_norm": float("nan")})


def test_a_reward_function_returning_nan_stops_the_run_naming_it_and_the_completion(tmp_path, capsys, monkeypatch):
    import rewards

    def nan_for_one(completions, **_):
        return [float("nan") if i == 1 else 1.0 for i in range(len(completions))]

    monkeypatch.setitem(rewards.REWARDS, "nan_for_one", nan_for_one)
    out = tmp_path / "run"
    line = fails(capsys, *tiny("grpo.yaml", out, "--reward_funcs", "nan_for_one", "--reward_weights", "1",
                               "--max_steps", "1"), code=1)
    assert "reward function `nan_for_one` returned nan for completion 1 of its batch (" in line, line
    assert json.loads((out / "final_results.json").read_text())["status"] == "failed"
    assert not (out / "rollouts.sqlite").exists() or _stored_rewards(out / "rollouts.sqlite") == []


def _stored_rewards(path: Path) -> list:
    import sqlite3

    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT reward FROM rollouts").fetchall()


def test_none_still_means_does_not_apply():
    from rewards.finite import finite_only

    def sometimes(completions, **_):
        return [None, 0.5]

    assert finite_only(sometimes)(completions=["a", "b"]) == [None, 0.5]
    assert finite_only(sometimes).__name__ == "sometimes"


# --------------------------------------------------------------------------------------
# Class 8: a full disk ends the run in one line, failed, resumable; result files are whole or absent


def _enospc(path) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(path))


def test_a_full_disk_while_saving_a_checkpoint_fails_in_one_line_and_resume_continues(tmp_path, capsys, monkeypatch):
    import io

    import torch

    from rlhf_recipes.run_folder import SavedRun

    real_save = torch.save

    def save(obj, f, *args, **kwargs):  # the disk fills up halfway through checkpoint-4's optimizer state
        if str(f).endswith("checkpoint-4/optimizer.pt"):
            buffer = io.BytesIO()
            real_save(obj, buffer)
            Path(f).write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            raise _enospc(f)
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    out = tmp_path / "run"
    line = fails(capsys, *tiny("dpo.yaml", out, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2"),
                 code=1)
    assert f"no space left on device while writing {out}/checkpoint-4/optimizer.pt" in line, line
    assert "the last good checkpoint, checkpoint-2, is kept" in line, line
    results = json.loads((out / "final_results.json").read_text())
    assert results["status"] == "failed" and results["steps"] == 4 and results["last_good_checkpoint"] == "checkpoint-2"
    assert SavedRun.open(out).status == "failed at step 4"
    assert not (out / "checkpoint-4").exists()  # the torn save is removed: its space is what the results need
    monkeypatch.setattr(torch, "save", real_save)  # space freed: --resume continues from checkpoint-2
    assert train([str(out / "config.yaml"), "--resume"]) == 0
    assert json.loads((out / "final_results.json").read_text())["status"] == "finished"
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_a_full_disk_while_writing_config_yaml_starts_nothing_and_leaves_no_trace(tmp_path, capsys, monkeypatch):
    from rlhf_recipes import run_setup

    out = tmp_path / "run"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "config.yaml").write_text("algorithm: dpo\n")

    def full(recipe, output_dir, resolved=None):
        (output_dir / "config.yaml").write_text("")  # torn, as a full disk leaves it
        raise _enospc(output_dir / "config.yaml")

    monkeypatch.setattr(run_setup, "write_config", full)
    line = fails(capsys, *tiny("dpo.yaml", out, "--overwrite"), code=1)
    assert line == f"error: no space left on device while writing {out}/config.yaml; nothing was started", line
    # --overwrite removed the old run; the failed start left nothing of its own (its torn config.yaml went too)
    assert sorted(p.name for p in out.iterdir()) == [".run.lock"]


def test_a_result_file_on_a_full_filesystem_is_never_left_empty(tmp_path):
    """final_results.json onto a real full filesystem (a 64 KiB tmpfs): the old file stays whole, no temporary is
    left. Needs permission to mount (root in a container that allows it); skipped elsewhere."""
    import subprocess
    from types import SimpleNamespace

    from rlhf_recipes.config import load_recipe
    from rlhf_recipes.run_folder import write_final_results

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        old = '{"status": "finished", "steps": 3}\n'
        (disk / "final_results.json").write_text(old)
        with pytest.raises(OSError) as filled, (disk / "filler").open("wb") as f:
            while True:
                f.write(b"x" * 4096)
                f.flush()
        assert filled.value.errno == errno.ENOSPC
        recipe = load_recipe([str(RECIPES / "dpo.yaml"), "--profile", "tiny"], construct=False)
        trainer = SimpleNamespace(args=SimpleNamespace(world_size=1, per_device_train_batch_size=2,
                                                       gradient_accumulation_steps=1),
                                  state=SimpleNamespace(global_step=3))
        with pytest.raises(OSError) as e:
            write_final_results(recipe, trainer, disk, 1.0, status="failed", extra={"error": "x" * 8192})
        assert e.value.errno == errno.ENOSPC
        assert (disk / "final_results.json").read_text() == old
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "final_results.json"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_metrics_row_torn_by_a_full_disk_is_skipped_where_rows_are_read(tmp_path):
    from rlhf_recipes.run_folder import read_metrics as rows

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 0.7}\n{"step": 2, "lo')
    assert rows(tmp_path / "metrics.jsonl") == [{"step": 1, "loss": 0.7}]


# --------------------------------------------------------------------------------------
# Class 5: one process per run folder, for the run's whole life


def _start(*argv: str, env: dict | None = None):
    """recipes/run.py ARGV as its own process, as a resubmitted job or a second terminal starts it."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    return subprocess.Popen([sys.executable, str(ROOT / "recipes" / "run.py"), *argv], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(condition, process, seconds: float = 180.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the run ended first ({process.returncode}): {process.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.2)


def _complete_checkpoints(out: Path) -> list[str]:
    return sorted((p.name for p in out.glob("checkpoint-*") if (p / "trainer_state.json").exists()),
                  key=lambda n: int(n.split("-")[1]))


@pytest.mark.slow  # two real runner processes, one killed: ~20 s
def test_a_second_process_is_refused_while_the_run_lives_and_takes_over_once_it_is_killed(tmp_path, caplog):
    """One real run, and real processes starting into its folder: refused while it runs (a resubmitted --resume,
    a plain start, an --overwrite), --prune leaves it alone; killed outright, its lock is taken over with a
    message by the next start, which resumes it; ended, --prune prunes it under the same lock."""
    import signal
    import socket
    import subprocess
    import sys

    from conftest import ROOT

    from rlhf_recipes.run_folder import SavedRun

    out = tmp_path / "run"
    first = _start(*tiny("dpo.yaml", out, "--max_steps", "100000", "--save_strategy", "steps", "--save_steps", "2"))
    try:
        _wait_for(lambda: len(_complete_checkpoints(out)) >= 2, first)
        # Each refused in one line naming the holder, before anything is written (and before torch is imported).
        for extra in (["--resume"], [], ["--overwrite"]):
            second = subprocess.run([sys.executable, str(ROOT / "recipes" / "run.py"), str(out / "config.yaml"),
                                     *extra], cwd=ROOT, capture_output=True, text=True, timeout=120)
            errors = [line for line in second.stderr.splitlines() if line.startswith("error:")]
            assert second.returncode == 2 and len(errors) == 1 and "Traceback" not in second.stderr, second.stderr
            assert f"is in use by another run: pid {first.pid} on {socket.gethostname()}, since " in errors[0]
            assert "Wait for it to end or stop it, or pick another --output_dir" in errors[0]
        assert SavedRun.open(out).status.startswith("running (step")
        before = _complete_checkpoints(out)
        pruned = subprocess.run([sys.executable, "-m", "rlhf_recipes.tools", "runs", str(tmp_path), "--prune", "1"],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout
        assert f"{out}: skipped, being written" in pruned, pruned
        assert set(before) <= set(_complete_checkpoints(out))  # a live run's checkpoints are all still there
        steps = [r["step"] for r in read_metrics(out) if "loss" in r]
        assert steps == sorted(set(steps)), "two processes wrote metrics.jsonl"
    finally:
        first.send_signal(signal.SIGKILL)  # preempted outright: no handler runs, the holder file stays
        first.wait()
    assert json.loads((out / ".run.lock.json").read_text())["pid"] == first.pid
    assert f"its process (pid {first.pid} on {socket.gethostname()}) is gone (killed?)" in SavedRun.open(out).status
    assert train([str(out / "config.yaml"), "--resume", "--beta", "0.5"]) == 2  # refused for beta...
    assert json.loads((out / ".run.lock.json").read_text())["pid"] == first.pid  # ...and the folder left as found
    caplog.clear()
    resume_at = checkpoint_step(find_resumable_checkpoint(out).checkpoint)
    assert train([str(out / "config.yaml"), "--resume", "--allow_changes", "--max_steps", str(resume_at + 1)]) == 0
    assert (f"taking over the run lock of pid {first.pid} on" in caplog.text
            and "which no longer holds it: killed?" in caplog.text), caplog.text
    assert json.loads((out / "final_results.json").read_text())["status"] == "finished"
    assert not (out / ".run.lock.json").exists()  # released: nobody holds it
    pruned = subprocess.run([sys.executable, "-m", "rlhf_recipes.tools", "runs", str(tmp_path), "--prune", "1"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "deleted checkpoint-" in pruned and len(_complete_checkpoints(out)) == 1, pruned


# --------------------------------------------------------------------------------------
# Class 3: checkpoints damaged in place (a torn header, a truncated file) are skipped at resume


def _damage_the_header(path: Path) -> None:
    """The same size, its safetensors header overwritten: a bad block, or a copy that wrote the wrong data."""
    data = bytearray(path.read_bytes())
    data[:8] = b"\xff" * 8
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def six_steps(tmp_path_factory):
    """A tiny DPO run of 6 steps with a checkpoint every 2: the uninterrupted reference the copies resume beside."""
    out = tmp_path_factory.mktemp("six") / "run"
    assert train(tiny("dpo.yaml", out, "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "2")) == 0
    return out


def test_a_damaged_checkpoint_is_skipped_for_the_newest_complete_one_and_none_is_one_line(six_steps, tmp_path, capsys,
                                                                                          caplog):
    import shutil

    reference = six_steps
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / "final_results.json").unlink()
    _damage_the_header(out / "checkpoint-6" / "model.safetensors")  # same size: the sizes alone pass it
    optimizer = out / "checkpoint-4" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:-100])  # truncated
    assert train([str(out / "config.yaml"), "--resume"]) == 0
    assert f"skipping {out / 'checkpoint-6'}: model.safetensors does not open (" in caplog.text, caplog.text
    assert f"skipping {out / 'checkpoint-4'}: optimizer.pt has " in caplog.text and "its save wrote" in caplog.text
    # Resumed from checkpoint-2, and exactly: steps 3-6 again, with the uninterrupted run's losses.
    expected = {r["step"]: r["loss"] for r in read_metrics(reference) if "loss" in r}
    assert {r["step"]: r["loss"] for r in read_metrics(out) if "loss" in r} == pytest.approx(expected, rel=1e-4)

    # Every checkpoint damaged: one line naming each, and why.
    for step in (2, 4, 6):
        _damage_the_header(out / f"checkpoint-{step}" / "model.safetensors")
    (out / "final_results.json").unlink()
    line = fails(capsys, str(out / "config.yaml"), "--resume")
    assert f"--resume: no complete checkpoint in {out} verifies: checkpoint-6 (model.safetensors does not open" in line
    assert "; checkpoint-4 (model.safetensors does not open" in line and "; checkpoint-2 (" in line, line
    line = fails(capsys, str(out / "config.yaml"), "--resume", str(out / "checkpoint-4"))
    assert "incomplete or damaged checkpoint (model.safetensors does not open" in line, line


# --------------------------------------------------------------------------------------
# Class 6: a resume is compared with the settings the run used (its checkpoint's record), not an edited config.yaml


def test_a_resume_after_config_yaml_was_edited_by_hand_is_refused_unless_allowed_and_then_recorded(six_steps, tmp_path,
                                                                                                      capsys):
    import shutil

    import yaml

    from rlhf_recipes.checkpoints import read_record

    reference = six_steps
    assert read_record(reference / "checkpoint-4")["settings"]["beta"] == 0.1
    out = tmp_path / "run"
    shutil.copytree(reference, out, ignore=shutil.ignore_patterns("checkpoint-6"))
    config = out / "config.yaml"
    config.write_text(config.read_text().replace("\nbeta: 0.1\n", "\nbeta: 0.5\n"))  # edited by hand
    edited = config.read_text()
    line = fails(capsys, str(config), "--resume")
    assert "--resume would change what" in line and "`beta` 0.1 -> 0.5" in line, line
    assert f"config.yaml was edited after checkpoint-4 was saved" in line and "--allow_changes" in line, line
    assert config.read_text() == edited  # refused: nothing written

    assert train([str(config), "--resume", "--allow_changes"]) == 0
    record = [{"step": 4, "key": "beta", "old": 0.1, "new": 0.5}]
    assert yaml.safe_load(config.read_text())["resumed_with_changes"] == record
    later = read_record(out / "checkpoint-6")
    assert later["settings"]["beta"] == 0.5 and later["settings_changes"] == record
    # Resumed again from checkpoint-6, saved with the new value: no refusal, and the record is kept.
    (out / "final_results.json").unlink()
    assert train([str(config), "--resume"]) == 0
    assert yaml.safe_load(config.read_text())["resumed_with_changes"] == record
    # From checkpoint-4, trained with the old value, the same config.yaml is a change again.
    line = fails(capsys, str(config), "--resume", str(out / "checkpoint-4"))
    assert "`beta` 0.1 -> 0.5" in line, line


# --------------------------------------------------------------------------------------
# Class 1: every data row is checked before anything loads; errors name the 1-based line, the column and the fix

GOOD_ROW = {"prompt": "Hi?", "chosen": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}],
            "rejected": [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Go away."}]}
_GOOD = json.dumps(GOOD_ROW).encode()
_EMPTY_CHOSEN = json.dumps({**GOOD_ROW, "chosen": [GOOD_ROW["chosen"][0], {"role": "assistant", "content": ""}]})


@pytest.mark.parametrize("case, content, expected", [
    ("malformed JSON at line 300", b"\n".join([_GOOD] * 299 + [b'{"prompt": "Hi?", "chosen": ]'] + [_GOOD] * 5),
     "line 300, column 29: not valid JSON (Expecting value). JSONL wants one JSON object per line"),
    ("a file cut off mid-line", b"\n".join([_GOOD] * 299 + [_GOOD[:70]]),
     "line 300 is cut off: the file ends in the middle of a JSON object (an interrupted download or copy?)"),
    ("an empty chosen at line 300", b"\n".join([_GOOD] * 299 + [_EMPTY_CHOSEN.encode()]) + b"\n",
     "line 300: column `chosen`: the assistant's reply is empty; fill it in or remove the row"),
    ("non-UTF-8 bytes at line 300", b"\n".join([_GOOD] * 299 + [_GOOD.replace(b"Hello.", b"H\xe9llo.")]) + b"\n",
     "line 300, column 101: byte e9 is not UTF-8. Save the file as UTF-8"),
    ("a CSV given as JSONL", b"prompt,chosen,rejected\nHi?,Hello.,Go away.\n",
     "line 1 is a CSV header (prompt,chosen,rejected), not a JSON object: this is a CSV file. Convert it to JSONL"),
    ("a bad row at line 100000", b"\n".join([_GOOD] * 99999 + [json.dumps({**GOOD_ROW, "chosen": "text"}).encode()]),
     "line 100000: column `chosen` must be a list of at least 2 messages"),
])
def test_a_bad_row_anywhere_is_one_line_before_anything_loads(tmp_path, capsys, case, content, expected):
    data = tmp_path / "data.jsonl"
    data.write_bytes(content)
    out = tmp_path / "run"
    line = fails(capsys, *tiny("dpo.yaml", out, "--data_files", str(data)))
    assert line.startswith(f"error: command line: `data_files`: {data} "), line
    assert expected in line, line
    assert not out.exists()
