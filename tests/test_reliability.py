"""What a run promises (docs/reliability.md), each fault made real: settings that used to end in a traceback are
one line before any model loads; a NaN stops the run as failed with the last good checkpoint kept; a full disk
(ENOSPC injected at the write call) ends in one line and a folder that `runs` calls failed and --resume continues."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from conftest import RECIPES, read_metrics
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
