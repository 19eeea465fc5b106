"""`rlhf-recipes preflight RECIPE [--config_file ACCELERATE.yaml] [--KEY VALUE ...]`: will this run start and finish?

Everything that would stop or spoil a real run, found in seconds and before any weights load, one line each with
its fix (ok / warn / stop); the exit code is 1 when anything would stop the run, else 0. Run it with the same
accelerate config and overrides as the launch:

    rlhf-recipes preflight recipes/dpo.yaml --config_file accelerate_configs/4gpu.yaml
    accelerate launch --config_file accelerate_configs/4gpu.yaml recipes/run.py recipes/dpo.yaml

What it checks: the recipe and its settings (read as the launch's processes would read them, TRL's own checks
included); the GPUs the accelerate config wants against those torch sees, and the driver against torch's CUDA;
the optional packages the run needs and their versions against TRL's ranges; wandb's login and the project the
run lands in; the output folder; the model and the dataset (reachable on the hub, or in the local cache when
offline; online, the split and the columns the data adapter needs, from the first row); the learned reward
models; the free disk against the checkpoints the run keeps; the planner's memory verdict on the GPUs it sees.
`train` runs the network-free part itself before loading anything (rlhf_recipes/preflight.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from rlhf_recipes import preflight as core
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.preflight import OK, STOP, WARN, Finding
from rlhf_recipes.run_folder import has_config

COLOURS = {OK: "green", WARN: "yellow", STOP: "red"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlhf-recipes preflight", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe")
    parser.add_argument("--config_file", "--config", dest="config_file",  # --config: plan's former spelling
                        help="the accelerate config the run will be launched with (accelerate_configs/*.yaml), as "
                             "`accelerate launch --config_file` and `rlhf-recipes plan` take it; default: one process")
    args, overrides = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    start = time.time()
    findings = run_checks([args.recipe, *overrides], args.config_file)
    print_findings(findings, time.time() - start)
    return 1 if any(f.level == STOP for f in findings) else 0


def print_findings(findings: list[Finding], seconds: float) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(soft_wrap=True, highlight=False)  # soft_wrap: one finding, one line, however long
    for f in findings:
        console.print(f"[{COLOURS[f.level]}]{f.level:<4}[/] {f.topic:<9} {escape(f.text)}")
    stops, warns = (sum(f.level == level for f in findings) for level in (STOP, WARN))
    verdict = (f"[red]{stops} would stop the run[/]" if stops else "[green]nothing would stop the run[/]")
    console.print(f"preflight: {verdict}, {warns} warning(s), {len(findings)} checks in {seconds:.1f} s")


def run_checks(argv: list[str], config_file: str | None) -> list[Finding]:
    from rlhf_recipes.tools.planner.launch import read_launch

    try:
        launch = read_launch(config_file)
    except (OSError, ValueError) as e:
        return [Finding(STOP, "launch", f"--config_file {config_file}: {e}")]
    # The environment accelerate gives each process of this launch, while the recipe is read and checked (DeepSpeed
    # changes what some configs accept); restored afterwards. Not WORLD_SIZE: the world size reaches the recipe as
    # an argument (it decides gradient accumulation), and with it set, a CPU profile's TrainingArguments (gloo,
    # use_cpu) would start a process group: "MASTER_ADDR env was not set" for every multi-process tiny launch.
    env = {}
    if launch.distributed == "DEEPSPEED":  # what custom_losses' configs and rewards/zero3.py read
        env.update(ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE=str(launch.zero_stage))
    if launch.cpu:
        env["ACCELERATE_USE_CPU"] = "true"
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return list(_checks(argv, launch))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _checks(argv: list[str], launch) -> Iterator[Finding]:
    from rlhf_recipes.hub import hub_online
    from rlhf_recipes.tools.planner.plan import load_for_planning

    try:
        recipe, bf16 = load_for_planning(argv, launch.processes)
    except RecipeError as e:  # nothing else can be judged without the recipe
        yield Finding(STOP, "recipe", str(e))
        return
    how = launch.describe() if launch.given else "one process (no --config_file)"
    yield Finding(OK, "recipe", f"{recipe.source}: {recipe.algorithm.name}, {how}"
                                + (f", profile {recipe.args.profile}" if recipe.args.profile else ""))
    yield from gpu_findings(recipe, launch)
    yield from core.extras_findings(recipe, deepspeed=launch.distributed == "DEEPSPEED", in_child=True)
    wandb = core.wandb_finding(recipe)
    if wandb is not None:
        yield wandb
    yield from checked("output", lambda: _output_dir(recipe))
    online = hub_online()
    yield from checked("model", lambda: model_finding(recipe, online))
    yield from checked("data", lambda: data_finding(recipe, online))
    yield from checked("rewards", lambda: _rewards(recipe))
    yield from checked("settings", lambda: _settings(recipe))
    shape = None
    if core.is_real_run(recipe):
        shape = _shape(recipe)
        if shape is None:
            yield Finding(WARN, "plan", f"`{recipe.model.model_name_or_path}`: its shape is unknown offline, so "
                                        "the disk and memory checks are skipped (rlhf-recipes plan explains)")
    if shape is not None:
        yield from checked("disk", lambda: _disk(recipe, shape, launch))
        yield from checked("memory", lambda: memory_finding(recipe, launch, shape, bf16))


def checked(topic: str, check) -> Iterator[Finding]:
    """One check's findings; its RecipeError (the one line a run would print) is a stop."""
    try:
        found = check()
    except RecipeError as e:
        yield Finding(STOP, topic, str(e))
        return
    if found is not None:
        yield found


# --------------------------------------------------------------------------------------
# GPUs


def gpu_findings(recipe, launch) -> Iterator[Finding]:
    """The GPUs the launch wants on this machine against those torch sees, and the driver against torch's CUDA."""
    import torch

    if launch.cpu or core.cpu_requested(recipe):
        yield Finding(OK, "gpus", f"{launch.processes} CPU process(es) ({launch.source}): no GPU needed")
        return
    wanted = launch.processes // max(1, launch.machines) if launch.given else (1 if core.is_real_run(recipe) else 0)
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    driver = driver_finding(torch)
    if driver is not None:
        yield driver
    if wanted == 0 or (seen == 0 and not core.is_real_run(recipe)):  # a CPU profile's launch falls back to gloo
        yield Finding(OK, "gpus", f"profile {recipe.args.profile}: runs on the CPU"
                                  + (f" in {launch.processes} processes (gloo)" if launch.processes > 1 else "")
                                  + ", no GPU needed")
        return
    asked = (f"{launch.source} wants {wanted} GPU(s) on this machine (num_processes {launch.processes}"
             + (f" over {launch.machines} machines" if launch.machines > 1 else "") + ")"
             if launch.given else "a real run wants a GPU")
    visible = len(launch.gpu_ids.split(",")) if launch.gpu_ids else seen
    if launch.processes == 1 and min(seen, visible) > 1:
        yield core.one_process_many_gpus(min(seen, visible))
        return
    if seen >= wanted:
        names = sorted({torch.cuda.get_device_name(i) for i in range(seen)})
        yield core.bf16_finding(recipe) or Finding(OK, "gpus", f"{asked}; torch {torch.__version__} sees {seen}: "
                                                               f"{', '.join(names)}")
        return
    fix = core.no_gpu_fix() if seen == 0 else "set num_processes to the GPUs this machine has, or check CUDA_VISIBLE_DEVICES"
    yield Finding(STOP, "gpus", f"{asked}, but torch {torch.__version__} sees {seen}. {fix}")


def driver_finding(torch) -> Finding | None:
    """The NVIDIA driver's CUDA version against the one torch was built for (where pynvml is installed; not a
    dependency of this project)."""
    built = torch.version.cuda
    if built is None:
        return None
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12040 for 12.4
        pynvml.nvmlShutdown()
    except Exception:  # no driver at all, or no GPU
        return Finding(WARN, "driver", f"torch is built for CUDA {built}, and no NVIDIA driver answers (nvidia-smi "
                                       "should list the GPUs)")
    driver = (version // 1000, version % 1000 // 10)
    need = tuple(int(x) for x in built.split(".")[:2])
    if driver < need:
        return Finding(STOP, "driver", f"the driver supports CUDA up to {driver[0]}.{driver[1]}, but torch "
                                       f"{torch.__version__} is built for CUDA {built}: install torch from "
                                       f"https://download.pytorch.org/whl/cu{driver[0]}{driver[1]} (or a driver for "
                                       f"CUDA {built})")
    return Finding(OK, "driver", f"the driver supports CUDA {driver[0]}.{driver[1]}; torch is built for {built}")


# --------------------------------------------------------------------------------------
# Output, model, data, rewards, settings (the run's own checks, one line each)


def _output_dir(recipe) -> Finding:
    folder = core.check_output_dir(recipe)
    if has_config(Path(folder)) and not recipe.args.resume and not recipe.args.overwrite:
        from rlhf_recipes.run_setup import holds_a_run

        raise RecipeError(holds_a_run(Path(folder)))
    return Finding(OK, "output", f"{folder} can be written")


def model_finding(recipe, online: bool) -> Finding:
    from rlhf_recipes.models import EMBEDDED
    from rlhf_recipes.registry import family_of
    from rlhf_recipes.validation import check_model, looks_local

    name = recipe.model.model_name_or_path
    check_model(name, recipe.where("model_name_or_path"), chat_template=family_of(recipe.algorithm).needs_chat_template)
    if name in EMBEDDED:
        return Finding(OK, "model", f"`{name}`: built locally (embedded)")
    if looks_local(name):
        return Finding(OK, "model", f"{name}: a saved model folder")
    if not online:
        return Finding(OK, "model", f"`{name}`: in the local cache (the hub is offline or unreachable)")
    return hub_access_finding(name, "model", "model", recipe.where("model_name_or_path")) or \
        Finding(OK, "model", f"`{name}` on the hub")


def hub_access_finding(repo_id: str, repo_type: str, check: str, where: str) -> Finding | None:
    """Whether this machine's hub token may download the repo (repo_type: model or dataset): None when it may, a
    warning when the hub did not answer; a RecipeError naming `where` when it may not (a gated repo whose terms were
    not accepted fails only at its download, after the earlier stages have run)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        HfApi().auth_check(repo_id, repo_type=repo_type)
    except GatedRepoError:
        raise RecipeError(f"{where}: `{repo_id}` is gated and this machine's hub token has no access: accept its "
                          "terms on its hub page and log in (hf auth login)") from None
    except RepositoryNotFoundError:
        raise RecipeError(f"{where}: no {repo_type} `{repo_id}` on the hub (or it is private: log in with hf auth "
                          "login)") from None
    except Exception as e:  # the hub answered the TCP check but not this request
        return Finding(WARN, check, f"`{repo_id}`: the hub did not answer ({type(e).__name__}); it downloads on first "
                                    "use")
    return None


def data_finding(recipe, online: bool) -> Finding | None:
    """The run's data: a local file (read and checked), a procedural source, or a hub dataset: cached when offline;
    online, the split exists and its first row has the adapter's columns (streamed: nothing is downloaded)."""
    from rlhf_recipes.data.sources import SOURCES
    from rlhf_recipes.validation import check_hub_dataset, check_local_data

    args = recipe.args
    source = SOURCES.get(args.dataset)
    if source is None:
        return None
    if args.data_files:
        check_local_data(args.data_files, source, recipe.where("data_files"))
        return Finding(OK, "data", f"{args.data_files}: its first rows fit `{source.name}`")
    if source.generate is not None:
        return Finding(OK, "data", f"`{source.name}`: generated locally")
    if recipe.tiny:
        return Finding(OK, "data", f"`{source.name}`: the shipped fixture (profile tiny)")
    hub_id = args.dataset_name or source.hub_id
    where = recipe.where("dataset_name" if args.dataset_name else "dataset")
    check_hub_dataset(hub_id, where)
    split = args.dataset_split or source.default_split
    if not online:
        return Finding(OK, "data", f"`{hub_id}`: in the local cache (the hub is offline; its split `{split}` and "
                                   "columns are not checked)")
    return hub_dataset_finding(hub_id, args.dataset_config or source.hub_config, split, source.columns, where)


def hub_dataset_finding(hub_id: str, config: str | None, split: str, columns, where: str) -> Finding:
    from datasets import get_dataset_split_names, load_dataset

    access = hub_access_finding(hub_id, "dataset", "data", where)
    if access is not None:
        return access
    try:
        splits = get_dataset_split_names(hub_id, config)
    except Exception as e:
        return Finding(WARN, "data", f"`{hub_id}`: its splits could not be read ({type(e).__name__}: "
                                     f"{str(e).splitlines()[0][:160]})")
    if split not in splits:
        raise RecipeError(f"{where}: `{hub_id}` has no split `{split}`; it has {', '.join(splits)}. Pass "
                          f"--dataset_split {splits[0]}")
    try:
        row = next(iter(load_dataset(hub_id, config, split=split, streaming=True)))
    except Exception as e:
        return Finding(WARN, "data", f"`{hub_id}` [{split}]: its first row could not be read ({type(e).__name__})")
    missing = [c for c in columns if c not in row]
    if missing:
        raise RecipeError(f"{where}: `{hub_id}` [{split}] has no column(s) {', '.join(missing)}, which the adapter "
                          f"needs (it has {', '.join(row)}); --dataset_name must name a dataset in the same schema")
    return Finding(OK, "data", f"`{hub_id}` [{split}] on the hub, with the columns {', '.join(columns)}")


def _rewards(recipe) -> Finding | None:
    from rlhf_recipes.validation import check_rewards

    check_rewards(recipe)
    names = recipe.setting("reward_funcs")
    return Finding(OK, "rewards", ", ".join(map(str, names))) if names else None


def _settings(recipe) -> Finding:
    from rlhf_recipes.model_checks import check_model_settings, model_config
    from rlhf_recipes.validation import check_token_classifiers, check_value_model

    check_value_model(recipe)
    check_token_classifiers(recipe)
    check_model_settings(recipe)
    if model_config(recipe.model.model_name_or_path) is None:
        return Finding(OK, "settings", "quantization settings agree; the lengths and LoRA targets are checked once "
                                       "the model's config.json is on this machine")
    return Finding(OK, "settings", "lengths, quantization and LoRA targets fit the model")


# --------------------------------------------------------------------------------------
# Disk and memory (the planner's model sizes)


def _shape(recipe):
    from rlhf_recipes.tools.planner.shapes import load_shape

    try:
        return load_shape(recipe.model.model_name_or_path, recipe.model.model_revision)
    except Exception:  # an architecture the planner does not model, or a config.json the hub did not give
        return None


def _disk(recipe, shape, launch) -> Finding | None:
    from rlhf_recipes.tools.planner.memory import lora_params

    trainable = (lora_params(shape, recipe.model.lora_r or 16, recipe.model.lora_target_modules)
                 if recipe.model.use_peft else None)
    return core.disk_finding(recipe, params=shape.total_params(), trainable=trainable,
                             deepspeed=launch.distributed == "DEEPSPEED")


def memory_finding(recipe, launch, shape, bf16: bool) -> Finding:
    """The planner's verdict on the GPUs torch sees (their memory), else on a 48 GB A6000, the recipes' card."""
    import torch

    from rlhf_recipes.tools.planner.plan import A6000_GIB, build_plan, default_workload

    seen = torch.cuda.is_available() and torch.cuda.device_count() > 0
    capacity = torch.cuda.get_device_properties(0).total_memory / 2**30 if seen else A6000_GIB
    plan = build_plan(recipe, launch, shape, default_workload(recipe, launch), bf16=bf16,
                      capacity_gib=capacity)
    need = plan.required_bytes / 2**30
    on = f"{capacity:.0f} GiB GPUs (seen)" if seen else f"a {A6000_GIB:g} GB A6000 (no GPU seen: assumed)"
    text = f"{plan.verdict}: about {need:.1f} GiB per GPU on {on}, peak during {plan.peak_phase}"
    if plan.verdict == "fits":
        return Finding(OK, "memory", text)
    fix = "; rlhf-recipes plan with the same arguments lists the settings that fit"
    return Finding(STOP if plan.verdict == "does not fit" and seen else WARN, "memory", text + fix)


if __name__ == "__main__":
    sys.exit(main())
