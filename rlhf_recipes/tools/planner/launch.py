"""What the planner reads from an accelerate config: processes, DDP or DeepSpeed, ZeRO stage, offload."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Launch:
    """How a recipe is launched: one process per GPU."""

    source: str = "no accelerate config (one process)"
    processes: int = 1
    distributed: str = "NO"  # NO | MULTI_GPU | DEEPSPEED (FSDP is not modelled)
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_params: bool = False
    mixed_precision: str = "no"
    # What the planner does not model but preflight checks: whether a config was named at all (else one process,
    # as `python recipes/run.py`), CPU processes (use_cpu: true, or MULTI_CPU), and the machines.
    given: bool = False
    cpu: bool = False
    machines: int = 1
    gpu_ids: str | None = None  # accelerate's `gpu_ids` when it names GPUs (it sets CUDA_VISIBLE_DEVICES); None: all

    @property
    def zero3(self) -> bool:
        return self.distributed == "DEEPSPEED" and self.zero_stage == 3

    @property
    def ddp(self) -> bool:
        return self.distributed == "MULTI_GPU" and self.processes > 1

    def describe(self) -> str:
        if self.distributed == "DEEPSPEED":
            off = []
            if self.offload_optimizer:
                off.append("optimizer offloaded to CPU")
            if self.offload_params:
                off.append("parameters offloaded to CPU")
            extra = f", {', '.join(off)}" if off else ""
            return f"DeepSpeed ZeRO-{self.zero_stage} over {self.processes} GPUs{extra}"
        if self.processes > 1:
            return f"data parallel (DDP) over {self.processes} GPUs, a full copy on each"
        return "1 GPU"


def read_launch(path: str | None) -> Launch:
    """Launch settings from an accelerate config YAML (accelerate_configs/*.yaml); a ValueError of one line when it
    is not YAML or not a mapping."""
    if path is None:
        return Launch()
    try:
        data = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise ValueError(f"{path} is not valid YAML{where} ({problem}): fix it, or write a new one with "
                         "`accelerate config --config_file PATH`") from None
    if data is None:
        data = {}
    elif not isinstance(data, dict):
        raise ValueError(f"{path} holds a YAML {type(data).__name__}, expected a mapping of accelerate settings "
                         "(distributed_type: ..., num_processes: ...), as `accelerate config` writes")
    distributed = str(data.get("distributed_type", "NO")).upper()
    if distributed not in ("NO", "MULTI_GPU", "DEEPSPEED", "MULTI_CPU"):
        raise ValueError(f"{path}: distributed_type {distributed} is not modelled (NO, MULTI_GPU, DEEPSPEED)")
    ds = data.get("deepspeed_config") or {}
    if distributed == "DEEPSPEED" and ds.get("deepspeed_config_file"):
        ds = _from_deepspeed_json(path, ds["deepspeed_config_file"])
    return Launch(source=str(path), processes=int(data.get("num_processes", 1) or 1),
                  distributed="MULTI_GPU" if distributed == "MULTI_CPU" else distributed,
                  zero_stage=int(ds.get("zero_stage", 0) or 0) if distributed == "DEEPSPEED" else 0,
                  offload_optimizer=str(ds.get("offload_optimizer_device", "none")).lower() not in ("none", "null", ""),
                  offload_params=str(ds.get("offload_param_device", "none")).lower() not in ("none", "null", ""),
                  mixed_precision=str(data.get("mixed_precision", "no")), given=True,
                  cpu=bool(data.get("use_cpu")) or distributed == "MULTI_CPU",
                  machines=int(data.get("num_machines", 1) or 1),
                  gpu_ids=None if str(data.get("gpu_ids", "all")).lower() in ("all", "none", "")
                  else str(data["gpu_ids"]))


def _from_deepspeed_json(path: str, json_path: str) -> dict:
    """The stage and offload of a `deepspeed_config_file:` (DeepSpeed's JSON: zero_optimization.*), in the keys
    of accelerate's inline deepspeed_config. accelerate reads the file relative to the working directory."""
    where = f"{path}: deepspeed_config_file {json_path}"
    try:
        zero = json.loads(Path(json_path).read_text()).get("zero_optimization") or {}
    except OSError as e:
        raise ValueError(f"{where} cannot be read ({e.strerror}): give its path from the launch directory") from None
    except (json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"{where} is not a DeepSpeed JSON object ({e}): fix the file") from None
    stage = zero.get("stage", 0)
    if not isinstance(stage, int):
        raise ValueError(f"{where}: zero_optimization.stage {stage!r} is not 0-3; the planner needs the stage itself")
    return {"zero_stage": stage,
            "offload_optimizer_device": (zero.get("offload_optimizer") or {}).get("device", "none"),
            "offload_param_device": (zero.get("offload_param") or {}).get("device", "none")}
