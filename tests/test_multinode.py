"""Multi-node launches: two "machines" on localhost, one `accelerate launch` each with --machine_rank 0
and 1 (accelerate_configs/cpu/multinode_2machines.yaml: num_machines 2, one process each, gloo), the
way accelerate_configs/slurm/multinode.sbatch starts them on real nodes.

The world is both machines' processes together: the effective batch, and so the run, stay those of
one process (gradient accumulation is derived from the global world size). One launch per family,
each checking several things, to keep CI time down: these are also the suite's DDP runs of DPO (against
one process, step by step) and of PPO, whose run is the reference of the two-process resume.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import ROOT, free_port, launch, launch_machines, losses_after, read_metrics, run_recipe
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
    """The SLURM script's launch (machine_rank from SLURM_NODEID, the master from the node list) of DDP over two
    processes: the same effective batch, accumulation halved, and the same losses, log-probs and margins step by step
    as one process (DPO is deterministic: no dropout, no sampling). Step 1's loss is log 2 (policy = reference), so
    the comparison means something from step 2 on, which depends on the averaged gradient of the steps before.
    (ZeRO-3's version, one machine: tests/test_scale.py.)"""
    single = run_recipe("dpo.yaml", tmp_path / "one", *SAME_RUN)
    out = tmp_path / "two_machines"
    result = sbatch_locally(tmp_path, out, "recipes/dpo.yaml", "--profile", "tiny", *SAME_RUN)
    assert "master 127.0.0.1" in result.stdout and "2 nodes x 1 GPUs" in result.stdout
    double = _results(out)
    assert single["world_size"] == 1 and double["world_size"] == 2, "the two machines did not form one world"
    assert single["effective_batch_size"] == double["effective_batch_size"] == 4
    assert (single["gradient_accumulation_steps"], double["gradient_accumulation_steps"]) == (2, 1)
    assert single["steps"] == double["steps"] == 3 and not double["interrupted"]
    one = {r["step"]: r for r in read_metrics(tmp_path / "one") if "loss" in r}
    two = {r["step"]: r for r in read_metrics(out) if "loss" in r}
    assert sorted(one) == sorted(two) == [1, 2, 3]
    assert one[1]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert one[3]["loss"] < one[1]["loss"] - 1e-3, "the run must move for the comparison to mean much"
    for step in (1, 2, 3):
        for key in ("loss", "logps/chosen", "logps/rejected", "grad_norm"):
            assert two[step][key] == pytest.approx(one[step][key], rel=1e-4, abs=1e-4), (step, key)
        assert two[step]["rewards/margins"] == pytest.approx(one[step]["rewards/margins"], abs=1e-4), step


@pytest.fixture(scope="module")
def ppo_on_two_machines(tmp_path_factory):
    """PPO (the book's joint value optimizer, DDP) on two machines, 4 optimizer steps, a checkpoint after each:
    the rollout batch test below and the two-process resume read it."""
    out = tmp_path_factory.mktemp("ppo") / "two_machines"
    launch_machines(CONFIG, "ppo.yaml", out, "--save_strategy", "steps", "--save_steps", "1")
    return out


@pytest.mark.multiprocess
def test_ppo_on_two_machines_keeps_the_rollout_batch(ppo_on_two_machines, tmp_path):
    """The recipe's rollout batch (16 completions, micro-batch 2, 8 completions per optimizer step) over two
    machines: 2 micro-batches each per step instead of 4, the same 2 optimizer steps per rollout batch, both
    machines' completions in the rollout store once; the value model (its own DDP wrapper) trained and saved."""
    one = load_recipe(["recipes/ppo.yaml", "--profile", "tiny", "--output_dir", str(tmp_path / "plan")],
                      world_size=1)
    out = ppo_on_two_machines
    results = _results(out)
    assert results["world_size"] == 2
    assert results["effective_batch_size"] == one.args.effective_batch_size == 8
    assert (one.training.gradient_accumulation_steps, results["gradient_accumulation_steps"]) == (4, 2)
    assert results["rollout_batch"] == {"completions": 16, "prompts": 16, "rollouts_per_prompt": 1,
                                        "optimizer_steps": 2}
    assert results["steps"] == 4 and not results["interrupted"]
    assert results["rollouts_stored"] == 32, "both machines' completions of both rollout batches, each stored once"
    assert (out / "value_model" / "model.safetensors").exists()
    assert all(math.isfinite(r["loss"]) for r in read_metrics(out) if "loss" in r)
    assert all(math.isfinite(r["value_loss"]) for r in read_metrics(out) if "value_loss" in r)


@pytest.mark.multiprocess
def test_two_processes_resume_inside_a_rollout_batch_from_the_checkpoint_the_main_one_verified(ppo_on_two_machines,
                                                                                                tmp_path):
    """A copy of the two-machine PPO run resumed on two processes of one machine: each process keeps its own share
    of the rollout batch (pending_rollouts-<rank>.pt), and every rank resumes from the checkpoint the main process
    verified: the newer one (checkpoint-2, a batch boundary) has its weights' header damaged in place, at the same
    size, so every rank passes over it for checkpoint-1 and none trains other rollouts. PPO takes 2 optimizer steps
    per rollout batch, so checkpoint-1 lies inside the first batch; the value model and its optimizer resume too, and
    every later loss equals the uninterrupted run's."""
    import shutil

    out = ppo_on_two_machines
    assert {p.name for p in (out / "checkpoint-1").glob("pending_rollouts-*.pt")} == {"pending_rollouts-0.pt",
                                                                                        "pending_rollouts-1.pt"}
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed, ignore=shutil.ignore_patterns("checkpoint-3", "checkpoint-4", "final_results.json"))
    damaged = resumed / "checkpoint-2" / "model.safetensors"
    data = bytearray(damaged.read_bytes())
    data[:8] = b"\xff" * 8  # the header's length: the same size, so the recorded sizes alone would pass it
    damaged.write_bytes(bytes(data))
    log = launch("ddp_2proc.yaml", str(resumed / "config.yaml"), resumed, "--resume")
    assert "skipping" in log.stderr and "checkpoint-2: model.safetensors does not open" in log.stderr
    assert log.stderr.count("resuming inside a rollout batch") == 2  # both ranks, from checkpoint-1
    reference, after = losses_after(out, 0), losses_after(resumed, 1)
    assert sorted(after) == [2, 3, 4]
    assert any(abs(reference[step]) > 1e-3 for step in after), reference
    for step, loss in after.items():
        assert loss == pytest.approx(reference[step], rel=1e-6, abs=1e-7), step
