"""Accelerate configs as users write them, read by preflight and the planner: broken YAML, a YAML that is not a
mapping, and DeepSpeed settings given as `deepspeed_config_file:` (a DeepSpeed JSON) instead of inline."""

from __future__ import annotations

import json

import pytest

from rlhf_recipes.tools.planner.launch import read_launch
from rlhf_recipes.tools.preflight import STOP, run_checks


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
    assert finding.level == STOP and "\n" not in finding.text
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
    assert read_launch(_deepspeed_file_config(tmp_path, {"stage": 2})).zero_stage == 2


def test_a_missing_deepspeed_config_file_is_one_line_naming_it(tmp_path):
    config = tmp_path / "accel.yaml"
    config.write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: nowhere/ds.json\n")
    with pytest.raises(ValueError, match="deepspeed_config_file nowhere/ds.json cannot be read") as err:
        read_launch(str(config))
    assert "\n" not in str(err.value)
