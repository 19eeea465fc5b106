"""What would stop or spoil a real run, found before anything loads: each finding one line with its fix.

A finding is `ok`, `warn` (the run starts, but something will be lost or misread) or `stop` (the run would
fail, after its data and model have loaded or hours later). The checks here need no network and import no
model: `train` runs them before it loads anything (validation.check_inputs, through `stop_at_first`: a stop is a
one-line RecipeError, a warn is logged); `rlhf-recipes preflight` prints them with the checks that need the hub,
the accelerate config and the planner's model sizes.

- wandb: a run that reports to wandb needs an API key (or an offline mode), else wandb raises at the first step,
  after everything has loaded, or waits on a login prompt on rank 0 while the other ranks wait on it;
- extras: the optional packages the run needs (DeepSpeed, bitsandbytes, vLLM, flash-attn): installed, importing
  (a build for another CUDA installs but fails at import, after the model has loaded), and their versions against
  the ranges TRL 1.16 declares for them;
- accelerator: a real recipe (no profile, a hub-size model) on a machine where torch sees no GPU would train on
  the CPU, for days, without a word;
- disk: the checkpoints the run keeps, and its final model, against the free space where it writes them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlhf_recipes.errors import RecipeError
from rlhf_recipes.paths import unwritable_reason

logger = logging.getLogger(__name__)

OK, WARN, STOP = "ok", "warn", "stop"
_CHILD_MARK = "rlhf-recipes preflight child: "  # the line a child interpreter answers on, whatever else it prints
GB = 1e9  # disk sizes in decimal GB, as df -H and cloud quotas give them


@dataclass(frozen=True)
class Finding:
    level: str  # ok | warn | stop
    topic: str  # what was checked: gpus, wandb, disk, ...
    text: str  # one line: what was found and, unless ok, the fix


def stop_at_first(findings: list[Finding | None]) -> list[Finding]:
    """The first stop raises as a one-line RecipeError; warnings are logged; the findings are returned."""
    findings = [f for f in findings if f is not None]
    stop = next((f for f in findings if f.level == STOP), None)
    if stop is not None:
        raise RecipeError(stop.text)
    for finding in findings:
        if finding.level == WARN:
            logger.warning("%s", finding.text)
    return findings


# --------------------------------------------------------------------------------------
# wandb


WANDB_PROJECT = "rlhf-recipes"  # transformers' WandbCallback would log to wandb's project "huggingface"
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "run", "shared")  # what wandb's Settings accepts
NO_LOGIN_MODES = ("offline", "disabled", "dryrun")  # modes in which wandb.init needs no API key


def reports_to_wandb(report_to: Any) -> bool:
    """Whether a `report_to` value sends the run to wandb (transformers' "all" does when wandb is installed)."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "all" in names:
        return importlib.util.find_spec("wandb") is not None
    return "wandb" in names


def wandb_finding(recipe) -> Finding | None:
    """A run that reports to wandb: the package, a valid mode, and an API key unless the mode needs none."""
    if not reports_to_wandb(recipe.setting("report_to")):
        return None
    where = recipe.where("report_to")
    if importlib.util.find_spec("wandb") is None:
        return Finding(STOP, "wandb", f"{where}: needs the package `wandb`, which is not installed. Install it with "
                                      "pip install wandb, or pass --report_to none")
    # What configure_reporting (run_setup.py) will hand to wandb: the recipe's value first, then the environment.
    mode_where = recipe.where("wandb_mode") if recipe.args.wandb_mode else "WANDB_MODE"
    mode = recipe.args.wandb_mode or os.environ.get("WANDB_MODE") or None
    project = recipe.args.wandb_project or os.environ.get("WANDB_PROJECT") or WANDB_PROJECT
    if mode is not None and mode not in WANDB_MODES:
        return Finding(STOP, "wandb", f"{mode_where}: `{mode}` is not a wandb mode; use online, offline or disabled")
    if mode in NO_LOGIN_MODES:
        return Finding(OK, "wandb", f"wandb {mode}: no login needed; the run logs to project `{project}` in "
                                    "<output_dir>/wandb (wandb sync uploads it later)")
    source, problem = wandb_login()
    if problem and problem.startswith(NO_ANSWER):
        return Finding(WARN, "wandb", f"{where}: wandb's login could not be checked ({problem}); the run may fail as "
                                      "training starts: run wandb login, or pass --wandb_mode offline")
    if problem:
        return Finding(STOP, "wandb", f"{where}: wandb's API key is not valid ({problem}). Fix it with wandb login "
                                      "--relogin, or pass --wandb_mode offline or --report_to none")
    if source is None:
        return Finding(STOP, "wandb", f"{where}: wandb (project `{project}`) is not logged in on this machine (no "
                                      "WANDB_API_KEY, no netrc entry for its host): the run would fail as training "
                                      "starts, after everything has loaded. Run wandb login, or pass --wandb_mode "
                                      "offline (sync later) or --report_to none")
    return Finding(OK, "wandb", f"wandb logged in ({source}); the run logs to project `{project}`")


WANDB_LOGIN_TIMEOUT_S = 120
NO_ANSWER = "wandb.login did not answer"
# wandb's public login without a prompt or a request to its server: True when it finds credentials (WANDB_API_KEY,
# an identity token file, the settings' key, the netrc entry for its host), an error when the key is malformed.
_WANDB_LOGIN = f"""
import inspect, json, wandb
try:
    quiet = {{"prompt": False}} if "prompt" in inspect.signature(wandb.login).parameters else {{}}
    answer = {{"logged_in": bool(wandb.login(verify=False, **quiet)), "problem": None}}
except Exception as e:
    answer = {{"logged_in": False, "problem": f"{{type(e).__name__}}: {{(str(e).strip().splitlines() or [''])[0][:200]}}"}}
print({_CHILD_MARK!r} + json.dumps(answer), flush=True)
"""


def wandb_login() -> tuple[str | None, str | None]:
    """(where wandb finds its credentials, or None; their problem, or None), from wandb.login(verify=False), its
    public API, in a child interpreter: login loads wandb's process-wide settings and credentials, which wandb.init
    must read later, after the run has set WANDB_MODE and WANDB_DIR. No network, no prompt (stdin closed)."""
    env = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}  # the mode was judged above
    answer = _child_json(_WANDB_LOGIN, [], WANDB_LOGIN_TIMEOUT_S, env={**env, "WANDB_SILENT": "true"})
    if "timeout" in answer or "died" in answer:
        return None, f"{NO_ANSWER}: " + (f"over {WANDB_LOGIN_TIMEOUT_S} s" if "timeout" in answer else answer["died"])
    if answer["problem"]:
        return None, answer["problem"]
    if not answer["logged_in"]:
        return None, None
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        if os.environ.get(name):
            return name, None
    return "its netrc entry or settings", None


def _child_json(code: str, args: list[str], timeout: float, env: dict[str, str] | None = None) -> dict:
    """What a child interpreter running `code` printed after _CHILD_MARK, as JSON; {"died": why} when it printed
    nothing there, {"timeout": True} when it ran past `timeout`."""
    import json
    import subprocess
    import sys

    try:
        child = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"timeout": True}
    for line in child.stdout.splitlines():
        if line.startswith(_CHILD_MARK):
            return json.loads(line[len(_CHILD_MARK):])
    last = (child.stderr.strip().splitlines() or ["no output"])[-1][:200]
    return {"died": f"exit {child.returncode}: {last}"}


# --------------------------------------------------------------------------------------
# Optional packages


# package -> (our extra that installs it, TRL's extra whose range applies): pyproject.toml, TRL 1.16's metadata.
EXTRAS = {
    "deepspeed": ("deepspeed", "deepspeed"),
    "bitsandbytes": ("qlora", "quantization"),
    "vllm": ("vllm", "vllm"),
    "flash-attn": ("flash", None),
}


# transformers' optimizers built from bitsandbytes (trainer_optimizer._BITSANDBYTES_OPTIMIZERS; a test keeps the two
# equal): named here so that reading a recipe does not import transformers.
BITSANDBYTES_OPTIMIZERS = frozenset({
    "adamw_8bit", "adamw_bnb_8bit", "ademamix", "ademamix_8bit", "lion_32bit", "lion_8bit", "paged_adamw_32bit",
    "paged_adamw_8bit", "paged_ademamix_32bit", "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit",
    "rmsprop_bnb", "rmsprop_bnb_32bit", "rmsprop_bnb_8bit"})


def deepspeed_launch() -> bool:
    """Launched by accelerate with a DeepSpeed config (accelerate sets this for every process)."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def needed_extras(recipe, deepspeed: bool | None = None) -> list[tuple[str, str]]:
    """(package, the setting that needs it) for this recipe under this launch."""
    needs = []
    if deepspeed_launch() if deepspeed is None else deepspeed:
        needs.append(("deepspeed", "the accelerate config (DeepSpeed)"))
    elif recipe.setting("deepspeed"):  # TrainingArguments' own DeepSpeed config, without an accelerate launch
        needs.append(("deepspeed", recipe.where("deepspeed")))
    quantized = [key for key in ("load_in_4bit", "load_in_8bit") if getattr(recipe.model, key)]
    optim = recipe.setting("optim")
    if getattr(optim, "value", optim) in BITSANDBYTES_OPTIMIZERS:  # a name, or TrainingArguments' enum of it
        quantized.append("optim")
    if quantized:
        needs.append(("bitsandbytes", recipe.where(quantized[0])))
    backend = recipe.setting("rollout_backend")
    if isinstance(backend, str) and backend.startswith("vllm"):
        needs.append(("vllm", recipe.where("rollout_backend")))
    attention = recipe.model.attn_implementation
    if isinstance(attention, str) and attention.startswith("flash_attention"):
        needs.append(("flash-attn", recipe.where("attn_implementation")))
    return needs


def needed_packages(recipe) -> set[str]:
    """The optional packages this run's process uses: its extras under this launch, and wandb when it reports there."""
    needed = {package for package, _ in needed_extras(recipe)}
    if reports_to_wandb(recipe.setting("report_to")):
        needed.add("wandb")
    return needed


def extras_findings(recipe, deepspeed: bool | None = None, in_child: bool = False) -> list[Finding]:
    """Each optional package the run needs: missing, or installed but failing to import (a build for another CUDA
    or torch), is a stop; a version outside TRL's range a warning. The imports are tried in this process (a run,
    which imports them anyway moments later) or, `in_child`, in one child interpreter (`rlhf-recipes preflight`,
    which should not pay for or be changed by them)."""
    findings, installed = [], {}
    for package, where in needed_extras(recipe, deepspeed):
        version = installed_version(package)
        if version is None:
            findings.append(Finding(STOP, package, f"{where}: needs the package `{package}`, which is not installed. "
                                                   f"Install it with {_install(package)}"))
        else:
            installed[package] = (where, version)
    problems = import_problems([package.replace("-", "_") for package in installed], in_child)
    for package, (where, version) in installed.items():
        trl_extra = EXTRAS[package][1]
        problem = problems.get(package.replace("-", "_"))
        wanted = trl_range(trl_extra) if trl_extra else None
        if problem is not None:
            findings.append(Finding(STOP, package, f"{where}: needs the package `{package}` {version}, which is "
                                                   f"installed but does not import ({problem}): usually a build for "
                                                   f"another CUDA or torch (this torch: {_torch_build()}). Reinstall "
                                                   f"it for this machine ({_install(package)} --force-reinstall); "
                                                   f"python -c \"import {package.replace('-', '_')}\" shows the "
                                                   "whole error"))
        elif wanted is not None and not wanted.contains(version, prereleases=True):
            findings.append(Finding(WARN, package, f"{package} {version} is outside TRL 1.16's range {wanted} (its "
                                                   f"`{trl_extra}` extra); install the supported one with "
                                                   f"{_install(package)}"))
        else:
            findings.append(Finding(OK, package, f"{package} {version}" + (f" (TRL 1.16 wants {wanted})" if wanted
                                                                          else "") + f", for {where}"))
    return findings


def _install(package: str) -> str:
    return f'pip install "rlhf-recipes[{EXTRAS[package][0]}]"'


def _torch_build() -> str:
    """torch's version and what it is built for (the run and preflight have imported torch already)."""
    try:
        import torch
    except Exception:  # noqa: BLE001  (torch itself broken: its version is all there is to say)
        return importlib.metadata.version("torch")
    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    return f"{torch.__version__}, " + (f"CUDA {cuda}" if cuda else f"ROCm {hip}" if hip else "CPU-only")


IMPORT_CHECK_TIMEOUT_S = 300  # DeepSpeed and bitsandbytes take 7-15 s to import on a loaded 2-core machine
_IMPORT_EACH = f"""
import importlib, json, sys
problems = {{}}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
    except Exception as e:
        problems[module] = f"{{type(e).__name__}}: {{(str(e).strip().splitlines() or [''])[0][:200]}}"
print({_CHILD_MARK!r} + json.dumps(problems), flush=True)
"""


def import_problems(modules: list[str], in_child: bool = False) -> dict[str, str]:
    """{module: its import's error, one line} for the modules that do not import (here, or in one child
    interpreter with this environment: sys.executable, PYTHONPATH and all)."""
    if not modules:
        return {}
    if not in_child:
        problems = {}
        for module in modules:
            try:
                importlib.import_module(module)
            except Exception as e:  # noqa: BLE001  (a CUDA mismatch raises OSError or RuntimeError as often)
                problems[module] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
        return problems
    answer = _child_json(_IMPORT_EACH, modules, IMPORT_CHECK_TIMEOUT_S)
    if "timeout" in answer:
        return {m: f"importing it took over {IMPORT_CHECK_TIMEOUT_S} s" for m in modules}
    if "died" in answer:
        return {m: f"the interpreter died importing them ({answer['died']})" for m in modules}
    return answer


def installed_version(package: str) -> str | None:
    """The installed distribution's version, or None; a package that is installed but cannot be found by import
    (a broken install) counts as missing."""
    module = package.replace("-", "_")
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def trl_range(extra: str):
    """The version range TRL's own metadata gives a package in one of its extras (e.g. deepspeed>=0.18.6)."""
    from packaging.requirements import Requirement

    for line in importlib.metadata.requires("trl") or []:
        requirement = Requirement(line)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}) and \
                requirement.name in {p for p, (_, e) in EXTRAS.items() if e == extra}:
            return requirement.specifier
    return None


# --------------------------------------------------------------------------------------
# The accelerator


ALLOW_CPU_HINT = "pass --use_cpu true to train on the CPU on purpose"


def is_real_run(recipe) -> bool:
    """A recipe run at its own size: no profile, and not one of the embedded CPU-size models (tiny, nano)."""
    from rlhf_recipes.models import EMBEDDED

    return recipe.args.profile is None and recipe.model.model_name_or_path not in EMBEDDED


def cpu_requested(recipe) -> bool:
    """The user chose the CPU: the recipe's `use_cpu`, or an accelerate config with `use_cpu: true`."""
    return bool(recipe.setting("use_cpu")) or os.environ.get("ACCELERATE_USE_CPU", "false").lower() == "true"


def one_process_many_gpus(gpus: int) -> Finding:
    """One process that sees several GPUs: the Trainer would spread each batch over them with nn.DataParallel."""
    return Finding(STOP, "gpus", f"one process sees {gpus} GPUs, so transformers' Trainer would wrap the model in "
                                 f"nn.DataParallel (TRL's trainers refuse it after the model has loaded; the others "
                                 f"would train at {gpus}x the recipe's batch). Launch one process per GPU (accelerate "
                                 f"launch --config_file accelerate_configs/4gpu.yaml with num_processes {gpus}), or "
                                 "train on one GPU: CUDA_VISIBLE_DEVICES=0")


def accelerator_finding(recipe) -> Finding | None:
    """A real run where torch sees no GPU would train on the CPU: refused, unless asked for. Any run of one process
    that sees several GPUs: refused (nn.DataParallel)."""
    if cpu_requested(recipe):
        return None
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus > 1 and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return one_process_many_gpus(gpus)
    if not is_real_run(recipe):
        return None
    if gpus:
        return bf16_finding(recipe) or Finding(OK, "gpus", f"torch sees {torch.cuda.device_count()} GPU(s)")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return Finding(OK, "gpus", "torch sees an Apple GPU (MPS)")
    return Finding(STOP, "gpus", f"{recipe.source}: a real run of `{recipe.model.model_name_or_path}` but torch "
                                 f"{torch.__version__} sees no GPU, so it would train on the CPU. {no_gpu_fix()}; or "
                                 f"{ALLOW_CPU_HINT} (--profile tiny for a smoke run)")


def bf16_finding(recipe) -> Finding | None:
    """bf16 asked for on a GPU before Ampere: no bf16 units, and torch emulates bf16 while reporting it supported
    (torch.cuda.is_bf16_supported, and so transformers' own check, count emulation)."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    if major >= 8 or not (recipe.setting("bf16") or recipe.model.dtype == "bfloat16"):
        return None
    return Finding(WARN, "gpus", f"{torch.cuda.get_device_name()} (compute capability {major}.{minor}) has no bf16 "
                                 "units, and the recipe trains in bf16: torch emulates it, many times slower. Train in "
                                 "fp32 (--bf16 false --dtype float32) or on an Ampere or newer GPU")


def no_gpu_fix() -> str:
    """Why torch sees no GPU, as far as torch itself tells: a CPU-only build, or a driver too old for its CUDA."""
    import torch

    if torch.version.cuda is None:
        return ("This torch is a CPU-only build: install a CUDA build from PyTorch's index for the CUDA your "
                "driver supports (nvidia-smi), e.g. pip install torch --index-url https://download.pytorch.org/whl/cu128")
    return (f"This torch is built for CUDA {torch.version.cuda}: nvidia-smi must list the GPUs and a CUDA version of "
            f"at least {torch.version.cuda} (an older driver needs torch from PyTorch's index for its CUDA, e.g. "
            "https://download.pytorch.org/whl/cu126), and CUDA_VISIBLE_DEVICES must not hide them")


# --------------------------------------------------------------------------------------
# Disk


def check_output_dir(recipe) -> str:
    """The recipe's output_dir, refused in one line when it cannot be written (the run's validation.check_inputs
    and `rlhf-recipes preflight` both refuse with this line)."""
    folder = recipe.setting("output_dir")
    problem = unwritable_reason(folder)
    if problem:
        raise RecipeError(f"{recipe.where('output_dir')} {folder} cannot be written: {problem}. Pick another "
                          "--output_dir")
    return folder


def checkpoint_count(recipe) -> int | None:
    """How many checkpoints the run keeps at most: save_total_limit, else every save it will make (None: unknown,
    an epoch-based run whose steps depend on the data)."""
    strategy = str(getattr(recipe.setting("save_strategy"), "value", recipe.setting("save_strategy")) or "steps")
    if strategy == "no":
        return 0
    saves = None
    steps, every = recipe.setting("max_steps"), recipe.setting("save_steps")
    if strategy == "steps" and every and every < 1:  # a fraction of the steps, however many the data makes
        saves = int(1 / every + 1e-9)
    elif strategy == "steps" and isinstance(steps, int) and steps > 0 and every:
        saves = int(steps // every)
    limit = recipe.setting("save_total_limit")
    if limit:
        return min(limit, saves) if saves is not None else limit
    return saves


def checkpoint_bytes(recipe, params: int, trainable: int | None = None, deepspeed: bool | None = None) -> int:
    """One checkpoint of the run: the weights in their dtype, and the optimizer's state for what trains (AdamW: two
    states in the weights' dtype; DeepSpeed: an fp32 master copy and two fp32 states); PPO's separate value model
    doubles it."""
    p = _bytes_per_weight(recipe)
    trainable = params if trainable is None else trainable
    deepspeed = deepspeed_launch() if deepspeed is None else deepspeed
    optimizer = trainable * (12 if deepspeed else 2 * p)
    weights = params * p if not recipe.model.use_peft else trainable * 4
    size = weights + optimizer
    if recipe.setting("share_value_backbone") is False:  # PPO's own value model is saved with the policy
        size *= 2
    return int(size)


def _bytes_per_weight(recipe) -> int:
    return 4 if str(recipe.model.dtype) in ("float32", "fp32") else 2


def disk_finding(recipe, params: int | None = None, trainable: int | None = None,
                 deepspeed: bool | None = None) -> Finding | None:
    """The checkpoints the run keeps and its final model, against the free space at output_dir. `params`: the
    model's parameter count (the preflight tool has the planner's; `train` reads a local or cached model's
    safetensors headers). Stop when not even the first checkpoint fits; warn when the whole run does not."""
    if params is None:
        params = cached_parameter_count(recipe.model.model_name_or_path)
    if params is None:
        return None
    where = _existing_parent(Path(str(recipe.setting("output_dir"))))
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return None
    kept = checkpoint_count(recipe)
    each = checkpoint_bytes(recipe, params, trainable, deepspeed)
    final = params * _bytes_per_weight(recipe)
    folder = recipe.setting("output_dir")
    if kept == 0:
        need, what = final, "its final model"
    elif kept is None:
        need, what = each + final, (f"every checkpoint (~{each / GB:.1f} GB each; no save_total_limit: their "
                                    "number grows with the data) and the final model")
    else:
        need, what = kept * each + final, f"{kept} checkpoint(s) of ~{each / GB:.1f} GB and the final model"
    fix = "Free space there, set --output_dir on a larger disk, or keep fewer checkpoints (--save_total_limit 1)"
    if kept and free < each:
        return Finding(STOP, "disk", f"{folder}: {free / GB:.1f} GB free, but one checkpoint takes ~{each / GB:.1f} "
                                     f"GB: the first save would fail. {fix}")
    if free < need:
        return Finding(WARN, "disk", f"{folder}: {free / GB:.1f} GB free; the run writes {what}: ~{need / GB:.1f} GB. "
                                     f"{fix}")
    return Finding(OK, "disk", f"{folder}: {free / GB:.0f} GB free; the run writes {what}: ~{need / GB:.1f} GB")


def _existing_parent(path: Path) -> Path:
    path = path.expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def cached_parameter_count(model: Any) -> int | None:
    """The parameter count of a local model folder or a hub model in the local cache, from its safetensors headers
    (shapes only: nothing is loaded and nothing is downloaded); None when the weights are not on this machine."""
    if not isinstance(model, str):
        return None
    from rlhf_recipes.models import EMBEDDED

    if model in EMBEDDED:
        return None
    folder = Path(model).expanduser()
    if not folder.is_dir():
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(model, "config.json")
        except Exception:  # not a valid hub id
            return None
        if not isinstance(found, str):
            return None
        folder = Path(found).parent
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    try:
        from safetensors import safe_open

        total = 0
        for file in files:
            with safe_open(str(file), framework="numpy") as f:
                for name in f.keys():
                    total += math.prod(f.get_slice(name).get_shape())
        return total
    except Exception:  # a weights file safetensors cannot read: the run will say so when it loads it
        return None
