"""Multi-node launches: two "machines" on localhost, one `accelerate launch` each with --machine_rank 0
and 1 (accelerate_configs/cpu/multinode_2machines.yaml: num_machines 2, one process each, gloo), the
way accelerate_configs/slurm/multinode.sbatch starts them on real nodes.

The world is both machines' processes together: the effective batch, and so the run, stay those of
one process (gradient accumulation is derived from the global world size). One launch per family,
each checking several things, to keep CI time down.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT, free_port, launch_machines, read_metrics, run_recipe
from rlhf_recipes.config import load_recipe

CONFIG = "multinode_2machines.yaml"
SAME_RUN = ["--max_steps", "3", "--warmup_steps", "0", "--learning_rate", "1e-4"]  # as tests/test_scale.py


def _results(out):
    return json.loads((out / "final_results.json").read_text())


# Stand-ins for SLURM's commands, so that the batch script itself runs: `srun` starts its command once per
# node at once, with that node's SLURM_NODEID; `scontrol show hostnames` names this host.
FAKE_SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
pids=()
for ((node = 0; node < SLURM_NNODES; node++)); do SLURM_NODEID=$node "$@" & pids+=($!); done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
"""
FAKE_SCONTROL = "#!/bin/bash\necho 127.0.0.1\n"


def sbatch_locally(tmp_path, out, *recipe_args: str) -> subprocess.CompletedProcess:
    """accelerate_configs/slurm/multinode.sbatch on two "nodes" of this machine (CPU config, one process each)."""
    bin_dir = tmp_path / "fake-slurm"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    path = f"{bin_dir}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}"  # the venv's `accelerate`
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": path, "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NNODES": "2",
           "SLURM_GPUS_ON_NODE": "1", "ACCELERATE_CONFIG": f"accelerate_configs/cpu/{CONFIG}",
           "MASTER_PORT": str(free_port())}
    cmd = ["bash", "accelerate_configs/slurm/multinode.sbatch", *recipe_args, "--output_dir", str(out)]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return result


@pytest.mark.multiprocess
def test_dpo_on_two_slurm_nodes_is_the_one_process_run(tmp_path):
    """The SLURM script's launch (machine_rank from SLURM_NODEID, the master from the node list): the same
    effective batch, accumulation halved, and the same losses step by step as one process."""
    single = run_recipe("dpo.yaml", tmp_path / "one", *SAME_RUN)
    out = tmp_path / "two_machines"
    result = sbatch_locally(tmp_path, out, "recipes/dpo.yaml", "--profile", "tiny", *SAME_RUN)
    assert "master 127.0.0.1" in result.stdout and "2 nodes x 1 GPUs" in result.stdout
    double = _results(out)
    assert single["world_size"] == 1 and double["world_size"] == 2, "the two machines did not form one world"
    assert single["effective_batch_size"] == double["effective_batch_size"] == 4
    assert (single["gradient_accumulation_steps"], double["gradient_accumulation_steps"]) == (2, 1)
    one = {r["step"]: r for r in read_metrics(tmp_path / "one") if "loss" in r}
    two = {r["step"]: r for r in read_metrics(out) if "loss" in r}
    assert sorted(one) == sorted(two) == [1, 2, 3]
    assert one[3]["loss"] < one[1]["loss"] - 1e-3, "the run must move for the comparison to mean much"
    for step in (1, 2, 3):
        for key in ("loss", "logps/chosen", "grad_norm"):
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-4, abs=1e-4), (step, key)


@pytest.mark.multiprocess
def test_grpo_on_two_machines_keeps_the_rollout_batch(tmp_path):
    """The book's rollout batch (4 prompts x 8, micro-batch 2, 8 completions per optimizer step) over two
    machines: 2 micro-batches each per step instead of 4, the same 4 optimizer steps per rollout batch."""
    one = load_recipe(["recipes/grpo.yaml", "--profile", "tiny", "--output_dir", str(tmp_path / "plan")],
                      world_size=1)
    out = tmp_path / "two_machines"
    launch_machines(CONFIG, "grpo.yaml", out)
    results = _results(out)
    assert results["world_size"] == 2
    assert results["effective_batch_size"] == one.args.effective_batch_size == 8
    assert (one.training.gradient_accumulation_steps, results["gradient_accumulation_steps"]) == (4, 2)
    assert results["rollout_batch"] == {"completions": 32, "prompts": 4, "rollouts_per_prompt": 8,
                                        "optimizer_steps": 4}
    assert results["steps"] == 4 and not results["interrupted"]
    assert results["rollouts_stored"] == 32, "both machines' completions reach the rollout store"
    assert all(math.isfinite(r["loss"]) for r in read_metrics(out) if "loss" in r)
