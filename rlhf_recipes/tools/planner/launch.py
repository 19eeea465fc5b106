"""What the planner reads from an accelerate config: processes, DDP or DeepSpeed, ZeRO stage, offload."""

from __future__ import annotations

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
    """Launch settings from an accelerate config YAML (accelerate_configs/*.yaml)."""
    if path is None:
        return Launch()
    data = yaml.safe_load(Path(path).read_text()) or {}
    distributed = str(data.get("distributed_type", "NO")).upper()
    if distributed not in ("NO", "MULTI_GPU", "DEEPSPEED", "MULTI_CPU"):
        raise ValueError(f"{path}: distributed_type {distributed} is not modelled (NO, MULTI_GPU, DEEPSPEED)")
    ds = data.get("deepspeed_config") or {}
    return Launch(
        source=str(path),
        processes=int(data.get("num_processes", 1) or 1),
        distributed="MULTI_GPU" if distributed == "MULTI_CPU" else distributed,
        zero_stage=int(ds.get("zero_stage", 0) or 0) if distributed == "DEEPSPEED" else 0,
        offload_optimizer=str(ds.get("offload_optimizer_device", "none")).lower() not in ("none", "null", ""),
        offload_params=str(ds.get("offload_param_device", "none")).lower() not in ("none", "null", ""),
        mixed_precision=str(data.get("mixed_precision", "no")),
    )
