"""How a run's process uses a CPU: its torch threads (the recipe's `torch_threads`), and a DeepSpeed launch without
CUDA.

torch's CPU kernels split their sums across threads, so the thread count changes a run's last bits, and over hundreds
of sampled steps its numbers (a nano GRPO run: grad_norm differs at step 1 between 1 and 2 threads). A recipe that
names its threads re-runs to the same numbers whatever the machine's core count (measured: a shipped nano seed
re-run from its config.yaml, every logged value equal; same torch build, same kind of CPU).

A DeepSpeed launch on a machine without CUDA (accelerate_configs/cpu/: checking a ZeRO-3 launch on a laptop or in
CI before spending GPU time) starts without compiling an op that training never uses.

DeepSpeed's communication backend builds its shared-memory all-reduce op for the CPU whenever it starts
(deepspeed/comm/torch.py, TorchBackend -> build_shm_op): C++ compiled on the machine's first launch, 47 CPU-s
(26 s of wall on 2 cores) measured here, cached afterwards in ~/.cache/torch_extensions. Only DeepSpeed's
tensor-parallel inference calls it (`inference_all_reduce`); the collectives of training, ZeRO-3's gathers and
reductions, are torch.distributed's over gloo either way. Marked not compatible, the op is not built, which is
DeepSpeed's own path on a machine without a compiler. Launches on GPUs are left as they are.
"""

from __future__ import annotations

SHM_OP = "deepspeed_shm_comm"  # ShareMemCommBuilder.NAME


def set_torch_threads(recipe) -> None:
    """The recipe's `torch_threads`, for this process, before anything computes (data sampled by a model included)."""
    threads = recipe.args.torch_threads
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def skip_unused_shm_op() -> None:
    """Before the process group starts (TrainingArguments), under a DeepSpeed launch without CUDA."""
    from rlhf_recipes.preflight import deepspeed_launch

    if not deepspeed_launch():
        return
    import torch

    if torch.cuda.is_available():
        return
    import deepspeed.ops

    # The dict of compatible ops is probed once per process and kept (deepspeed/ops/__init__.py): this entry is the
    # one build_shm_op reads.
    deepspeed.ops.__compatible_ops__[SHM_OP] = False
