"""Recipe files: reading, validating and resolving them into typed configs.

A recipe is a flat YAML mapping. Its keys come from three typed dataclasses:
  - `RecipeArgs` (below): what this project adds: algorithm, data source, effective batch,
    profile, resume, logging;
  - TRL's `ModelConfig`: the model, dtype, attention implementation, LoRA / 4-bit;
  - the algorithm's TRL config class (e.g. `DPOConfig`, or our subclass of it): everything
    the trainer itself reads.
Values are layered: algorithm defaults < YAML < profile (recipes/profiles/<name>.yaml) < command
line, into one flat dict (`Recipe.settings`) beside a map of where each value came from (`Recipe.origin`). Every
key and value is checked against the classes' fields before any model or dataset is touched (a typo costs a
second, not a model download); then the config objects are built from those values, and consumers read them
after their __post_init__ (`recipe.args.x`, `recipe.model.x`, `recipe.training.x`; see `Recipe.setting`).
"""

from __future__ import annotations

import difflib
import enum
import os
import typing
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from rlhf_recipes.config_schema import Mismatch, coerce, fields_of, import_object, read_fields, text
from rlhf_recipes.data.sources import SOURCES
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.preflight import WANDB_PROJECT, reports_to_wandb
from rlhf_recipes.profiles import profile_names, read_profile
from rlhf_recipes.registry import ALGORITHMS, Algorithm, family_of
from rlhf_recipes.validation import check_ranges
from rlhf_recipes.yaml_files import read_yaml

MODEL_CONFIG = "trl:ModelConfig"  # model, dtype, attention, LoRA / 4-bit options


@dataclass
class RecipeArgs:
    """Options that this project adds on top of TRL's and transformers' own."""

    algorithm: str = field(metadata={"help": "Which algorithm to run; one of the registry's names."})
    dataset: str | None = field(
        default=None,
        metadata={"help": "Data source adapter (e.g. ultrafeedback, hh_rlhf, gsm8k, reasoning_gym)."},
    )
    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub id overriding the source's default (same schema expected)."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset config name."})
    dataset_split: str | None = field(default=None, metadata={"help": "Split to read; the source's default if unset."})
    data_files: str | None = field(
        default=None, metadata={"help": "Local JSON/JSONL file in the source's schema, read instead of the hub."}
    )
    num_samples: int | None = field(
        default=None, metadata={"help": "Use the first N rows (after shuffling, if dataset_shuffle_seed is set)."}
    )
    dataset_shuffle_seed: int | None = field(
        default=None, metadata={"help": "Shuffle the rows with this seed before taking num_samples."}
    )
    eval_fraction: float = field(default=0.0, metadata={"help": "Fraction of the rows held out for evaluation."})
    eval_split_seed: int | None = field(
        default=None, metadata={"help": "Seed of the train/eval split (eval_fraction); dataset_shuffle_seed, else 0, "
                                "if unset."}
    )
    dataset_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Source-specific options (e.g. reasoning-gym task and config)."}
    )
    system_prompt: str | None = field(default=None, metadata={"help": "System message prepended to every prompt."})
    effective_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Sequences per optimizer step across all processes. Gradient accumulation is derived from "
            "it and the world size, so 1 GPU and 4 GPUs train the same recipe."
        },
    )
    profile: str | None = field(
        default=None, metadata={"help": "'tiny': embedded model and data, a few CPU steps (tests, smoke runs). "
                                "'nano': a 0.7M model trained on the book's task, RL that learns on a CPU in minutes "
                                "(docs/nano.md)."}
    )
    resume: str | None = field(
        default=None,
        metadata={"help": "'latest' (or a checkpoint path) to continue an interrupted run in output_dir; 'auto' to "
                  "continue from the newest complete checkpoint if there is one, else start (a requeued cluster job's "
                  "one command; a finished run is refused)."},
    )
    resolved_from: str | None = field(
        default=None,
        metadata={"help": "Set in a run's config.yaml: the recipe it was resolved from. Such a file is already "
                  "resolved, so the profile overlay is not applied to it again."},
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Start over in an output_dir that already holds a run (its files are replaced)."}
    )
    allow_changes: bool = field(
        default=False,
        metadata={"help": "With --resume: continue even though settings that change the run's meaning differ from "
                  "its config.yaml (both values are recorded there)."},
    )
    stop_on_health_warning: bool = field(
        default=False,
        metadata={"help": "Stop the run at the first health warning (exploding loss, vanishing gradients)."},
    )
    eval_every: int = field(
        default=0,
        metadata={"help": "Run the family's held-out evaluation every N optimizer steps during training, on "
                  "`eval_problems` problems, greedy, logged as eval/<metric> (0: off). See "
                  "docs/evaluate.md#evaluate-held-out-before-and-after."},
    )
    eval_problems: int = field(default=32, metadata={"help": "Held-out problems each periodic evaluation scores."})
    torch_threads: int | None = field(
        default=None,
        metadata={"help": "CPU threads of torch in the run's process (unset: torch's own choice, OMP_NUM_THREADS or "
                  "one per core). On a CPU the count changes the arithmetic's last bits, so a run re-run with "
                  "another count drifts from it; the shipped nano runs used 1 (docs/nano.md)."},
    )
    heldout_target: dict[str, Any] | None = field(
        default=None,
        metadata={"help": "Train to a held-out target instead of to a step count (rlhf_recipes/evaluation/target.py "
                  "Goal: target, band, every, problems, metric, recipe): the checkpoint closest to `target` inside "
                  "`band` is kept. How the nano bases are built (rlhf_recipes/nano.py)."},
    )
    wandb_project: str | None = field(default=None, metadata={"help": "wandb project when report_to includes wandb."})
    wandb_mode: str | None = field(default=None, metadata={"help": "online | offline | disabled (sets WANDB_MODE)."})


@dataclass
class Recipe:
    """A recipe resolved for one run: the layered values, where each came from, and the three configs. `args` and
    `model` (TRL's ModelConfig, a light import) are built by load_recipe; `training` on first use, because its class
    imports transformers' trainer stack (~12 s): a run checks its data and model paths first."""

    source: str
    algorithm: Algorithm
    args: RecipeArgs
    model: Any  # TRL's ModelConfig
    # Every value the layers set (algorithm defaults < recipe < profile < command line, coerced to its field's
    # type, derived values included): what the configs are built from and config.yaml records.
    settings: dict[str, Any]
    schema: dict[str, dict[str, dict[str, Any]]]  # group (recipe, model, training) -> field -> type, class default
    world_size: int = 1
    origin: dict[str, str] = field(default_factory=dict)  # key -> where its value came from (for messages)

    @cached_property
    def training(self):
        return _construct(import_object(self.algorithm.config_class), self.group_values("training"), self.source)

    def group_of(self, key: str) -> str | None:
        """Which config holds `key` (ours first, then the model's, then the trainer's), or None."""
        return next((g for g, fields in self.schema.items() if key in fields), None)

    def group_values(self, group: str) -> dict[str, Any]:
        """The values the layers set for one config, in the order they were layered."""
        return {k: v for k, v in self.settings.items() if self.group_of(k) == group}

    def setting(self, key: str, default: Any = None) -> Any:
        """A setting of the trainer's config without building it: the layers' value, else the class default (its
        schema); `default` where this algorithm's config has no such field. Only for code that runs before TRL's
        trainer stack is imported on purpose (the checks that refuse a bad path in a second) or where the config
        cannot be built (a bf16 recipe read on a CPU machine: preflight, evaluate, chat); everything else reads
        `recipe.training`. Ours and the model's are always built: read `recipe.args` and `recipe.model`."""
        group = self.group_of(key)
        if group in ("recipe", "model"):
            raise KeyError(f"`{key}` is {'RecipeArgs' if group == 'recipe' else 'ModelConfig'}'s: read recipe."
                           f"{'args' if group == 'recipe' else 'model'}.{key}")
        if key in self.settings:
            return self.settings[key]
        return self.schema["training"].get(key, {}).get("default", default)

    def has(self, key: str) -> bool:
        """Whether `key` is a field of this algorithm's configs (set, or defaulted), without building them."""
        return self.group_of(key) is not None

    def where(self, key: str) -> str:
        """`recipes/x.yaml: `key``-style prefix for a message about one key."""
        return f"{self.origin.get(key, self.source)}: `{key}`"

    @property
    def resolved(self) -> dict[str, Any]:
        """config.yaml: what the layers set, re-runnable as it is (see config_yaml)."""
        return config_yaml(self)

    @property
    def tiny(self) -> bool:
        return self.args.profile == "tiny"


# ---------------------------------------------------------------------------------------
# Command line


USAGE = ("usage: recipes/run.py RECIPE.yaml [--profile tiny|nano] [--resume] [--KEY VALUE ...]   "
         "(RECIPE.yaml --help: the values it trains with; --help --all: every key)")


class _BareFlag(str):
    """The value of a flag given without one: "true", marked so that a key which is not a boolean is refused."""


BARE_FLAG = _BareFlag("true")


def takes_bool(desc: Any) -> bool:
    try:
        coerce(True, desc)
    except Mismatch:
        return False
    return True


def needs_a_value(key: str) -> str:
    return f"command line: `--{key}` needs a value (--{key} VALUE)"


def split_command_line(argv: list[str]) -> tuple[str, dict[str, str]]:
    """`RECIPE.yaml --key value --flag --key=value` -> (path, {key: raw string})."""
    if not argv or argv[0].startswith("-"):
        raise RecipeError(f"{USAGE}\nAvailable algorithms: {', '.join(sorted(ALGORITHMS))}")
    path, rest = argv[0], argv[1:]
    overrides: dict[str, str] = {}
    i = 0
    while i < len(rest):
        token = rest[i]
        if not token.startswith("--") or token == "--":
            raise RecipeError(f"command line: expected --KEY VALUE, got {token!r}")
        key = token[2:]
        if "=" in key:
            key, value = key.split("=", 1)
        elif i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value = rest[i + 1]
            i += 1
        else:
            # A bare flag switches a boolean on (--overwrite); any other key needs its value. Ours are known here;
            # the TRL keys' types only once the algorithm is (load_recipe refuses those, seeing BARE_FLAG).
            name = key.replace("-", "_")
            if name != "resume" and not takes_bool(read_fields(RecipeArgs).get(name, {}).get("type", "bool")):
                raise RecipeError(needs_a_value(name))
            value = BARE_FLAG
        overrides[key.replace("-", "_")] = value
        i += 1
    if overrides.get("resume") == "true":
        overrides["resume"] = "latest"
    return path, overrides


# ---------------------------------------------------------------------------------------
# Resolution


def _suggest(key: str, valid: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f" Did you mean `{close[0]}`?" if close else ""


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def default_output_dir(path: str, profile: str | None) -> str:
    stem = Path(path).stem
    return str(Path("outputs") / (f"{stem}-{profile}" if profile else stem))


def load_recipe(argv: list[str], world_size: int | None = None, construct: bool = True) -> Recipe:
    """Parse `RECIPE.yaml [--KEY VALUE ...]` into a validated Recipe. Loads no model or data.

    construct=False leaves the TRL configs to be built on first use (the runner checks data and model
    paths first); their own validation errors then come as RecipeError from `recipe.training`."""
    path, cli = split_command_line(argv)
    data = read_yaml(path)
    # A run's config.yaml keeps the record of settings changed on resume (run_setup.py): bookkeeping, not a setting.
    data.pop("resumed_with_changes", None)
    world_size = world_size or world_size_from_env()

    name = cli.get("algorithm", data.get("algorithm"))
    if name is None:
        raise RecipeError(f"{path}: missing required key `algorithm`. Available: {', '.join(sorted(ALGORITHMS))}")
    if name not in ALGORITHMS:
        where = "command line" if "algorithm" in cli else path
        raise RecipeError(
            f"{where}: unknown algorithm `{name}`.{_suggest(str(name), ALGORITHMS)} "
            f"Available: {', '.join(sorted(ALGORITHMS))}"
        )
    algorithm = ALGORITHMS[name]
    family = family_of(algorithm)

    # Fields and types of the three configs, without importing TRL when the schema is cached.
    schema = {"recipe": read_fields(RecipeArgs), "model": fields_of(MODEL_CONFIG),
              "training": fields_of(algorithm.config_class)}
    owner: dict[str, str] = {}
    for g, fields in schema.items():
        for f in fields:
            owner.setdefault(f, g)

    for key in data:
        if key not in owner:
            raise RecipeError(f"{path}: unknown key `{key}` for algorithm `{name}`.{_suggest(key, owner)}")
    for key, value in cli.items():
        if key not in owner:
            raise RecipeError(f"command line: unknown option `--{key}` for algorithm `{name}`.{_suggest(key, owner)}")
        if value is BARE_FLAG:
            if not takes_bool(schema[owner[key]][key]["type"]):
                raise RecipeError(needs_a_value(key))
            cli[key] = "true"  # a plain string from here on (config.yaml is dumped by yaml.safe_dump)

    profile = cli.get("profile", data.get("profile"))
    if profile is not None and profile not in profile_names():
        raise RecipeError(f"profile `{profile}` is unknown; available: {', '.join(profile_names())}")

    # Layer the sources; remember where each value came from for error messages.
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}

    def layer(values: dict[str, Any], where: str) -> None:
        for k, v in values.items():
            merged[k] = v
            origin[k] = where

    layer(dict(algorithm.defaults), f"algorithm `{name}` defaults")
    layer(data, path)
    if profile is not None:
        already_resolved = data.get("resolved_from") is not None
        layers = [] if already_resolved else profile_layers(profile, algorithm, path, merged)
        device = tiny_device_settings()
        if not already_resolved:  # a run's own config.yaml names its output_dir: resuming must find it there
            layers.append((f"profile {profile}", {"output_dir": default_output_dir(path, profile)}))
        layers.append((f"profile {profile} (device)", device))
        # Only shrink what the recipe uses: e.g. effective batch only where the recipe sets one.
        for where, values in layers:
            for k, v in values.items():
                if k not in owner:
                    raise RecipeError(f"recipes/profiles/{profile}.yaml ({where}): `{k}` is not an option of "
                                      f"algorithm `{name}`.{_suggest(k, owner)} Fix the profile file")
                if k == "effective_batch_size" and merged.get("effective_batch_size") is None:
                    continue
                merged[k] = v
                origin[k] = where
    if data.get("resolved_from") is not None and Path(path).name == "config.yaml":
        # A run's own config.yaml resumes in the folder that holds it, even after the folder was moved.
        layer({"output_dir": str(Path(path).parent)}, path)
    layer(cli, "command line")
    merged.setdefault("output_dir", default_output_dir(path, profile))
    origin.setdefault("output_dir", "default")
    if data.get("resolved_from") is None:  # a run's own config.yaml already records what it ran with
        real_run_defaults(merged, origin, owner, profile)

    settings: dict[str, Any] = {}
    for key, value in merged.items():
        desc = schema[owner[key]][key]["type"]
        try:
            settings[key] = coerce(value, desc)
        except Mismatch:
            raise RecipeError(
                f"{origin[key]}: `{key}` must be {text(desc)}, got {value!r} ({type(value).__name__})"
            ) from None

    check_ranges(settings, origin)
    for key, rule in algorithm.fixed.items():  # a value the algorithm's loss would not read
        value = settings.get(key, rule.accepted)
        if value != rule.accepted and all(settings.get(k) == v for k, v in rule.when.items()):
            raise RecipeError(f"{origin[key]}: `{key}` {value!r}: {rule.why}; remove it (the book's {name} runs with "
                              f"{rule.accepted!r})")
    dataset = settings.get("dataset")
    if dataset is not None and dataset not in SOURCES:
        raise RecipeError(f"{origin['dataset']}: unknown dataset `{dataset}`.{_suggest(str(dataset), SOURCES)} "
                          f"Available: {', '.join(sorted(SOURCES))}")

    # LoRA adapts every linear layer unless the recipe names its targets: PEFT has no default for some
    # architectures (OLMo-2), and adapters on all linear layers are what QLoRA needs to match a full fine-tune.
    if settings.get("use_peft") and settings.get("lora_target_modules") is None:
        settings["lora_target_modules"] = ["all-linear"]

    # Effective batch is the recipe's meaning; accumulation follows from the world size.
    family.derive_batch(settings, origin, world_size)

    values = {g: {k: v for k, v in settings.items() if owner[k] == g} for g in schema}
    recipe = Recipe(source=path, algorithm=algorithm, args=_construct(RecipeArgs, values["recipe"], path),
                    model=_construct(import_object(MODEL_CONFIG), values["model"], path), settings=settings,
                    schema=schema, world_size=world_size, origin=origin)
    if construct:  # tools want every setting checked, TRL's own checks included, before they go on
        recipe.training  # noqa: B018
    return recipe


def config_yaml(recipe: Recipe) -> dict[str, Any]:
    """What a run's config.yaml holds: the values the layers set, as plain YAML, re-runnable as it is.

    Written from the layered values rather than the built configs: their __post_init__ is this machine's
    (report_to `all` becomes the integrations installed here) and a bf16 recipe's config cannot be built on a
    CPU machine at all, where a launcher or preflight still reads what the run will record."""
    groups = ("recipe", "model", "training")
    resolved = {k: _plain(v) for g in groups for k, v in recipe.group_values(g).items()}
    if recipe.args.effective_batch_size is not None:
        # Derived from the world size: re-running config.yaml on another GPU count must re-derive it.
        resolved.pop("gradient_accumulation_steps", None)
    device = (k for k, o in recipe.origin.items() if o.endswith(" (device)"))
    for key in ("resume", "overwrite", "allow_changes", *device):
        resolved.pop(key, None)  # per-invocation, or derived again from the next launch
    resolved["resolved_from"] = recipe.args.resolved_from or recipe.source
    return {"algorithm": recipe.algorithm.name, **{k: v for k, v in resolved.items() if k != "algorithm"}}


# What a real run (no profile) gets unless the recipe or the command line says otherwise.
# save_total_limit: transformers keeps every checkpoint without it: ~72 GB for one GRPO-style run of Qwen3-1.7B
# (6 saves of weights + AdamW state). --resume picks the newest complete checkpoint, so two keep a fallback when
# the newest is damaged (checkpoints.py); `--save_total_limit null` keeps them all.
# save_steps: transformers' 500 is past the end of most recipes (DPO 300 steps, SDPO 200), so a crash (an OOM, a
# lost node) left nothing to resume; 0.1 is a save every tenth of the run (a float < 1: a fraction of the steps).
REAL_RUN_DEFAULTS: dict[str, Any] = {"save_total_limit": 2, "save_steps": 0.1}

def real_run_defaults(merged: dict[str, Any], origin: dict[str, str], owner: dict[str, str],
                      profile: str | None) -> None:
    """The defaults a real run needs and TRL does not give, written into config.yaml like any other value."""
    if profile is None:
        for key, value in REAL_RUN_DEFAULTS.items():
            if key in owner and key not in merged:
                merged[key], origin[key] = value, "default for a real run"
    if reports_to_wandb(merged.get("report_to")) and merged.get("wandb_project") is None:
        env = os.environ.get("WANDB_PROJECT")
        merged["wandb_project"], origin["wandb_project"] = (env, "WANDB_PROJECT") if env else (WANDB_PROJECT,
                                                                                               "default")


def profile_layers(profile: str, algorithm: Algorithm, path: str, values: dict[str, Any]) -> list[tuple[str, dict]]:
    """What a profile (recipes/profiles/<profile>.yaml) sets for this recipe (its own `values` so far), as
    (where, values) layers: the common values, the family's, the algorithm's (later wins)."""
    settings = read_profile(profile)
    if not settings.runs(algorithm.family):
        running = ", ".join(settings.families)
        raise RecipeError(f"{path}: profile `{profile}` does not run the {algorithm.family} family (algorithm "
                          f"`{algorithm.name}`) yet; it runs these families' recipes: {running} (docs/nano.md). Use "
                          "--profile tiny for a smoke run")
    if profile == "nano":
        from rewards.reward_model import RM_PREFIX

        # nano swaps the data for the book's spell_backward task but keeps the recipe's rewards: a learned reward
        # model (the HH pipeline's) would score prompts it was never trained on.
        learned = [spec for spec in values.get("reward_funcs") or () if str(spec).startswith(RM_PREFIX)]
        if learned:
            raise RecipeError(f"{path}: profile `nano` runs the book's spell_backward task, which the learned reward "
                              f"model `{learned[0]}` does not score; use a recipe rewarded by the task's own scorer "
                              "(e.g. recipes/grpo.yaml), or --profile tiny for a smoke run")
    return settings.layers(algorithm.family, algorithm.name)


def tiny_device_settings() -> dict[str, Any]:
    """CPU settings under which accelerate sees every launched process.

    Without CUDA, accelerate reports a world of 1 unless told the backend: plain data
    parallel needs `use_cpu` (MULTI_CPU over gloo), while DeepSpeed needs `ddp_backend: gloo`
    WITHOUT `use_cpu` (which would silently turn DeepSpeed off).
    """
    if world_size_from_env() == 1:
        return {}
    import torch

    if torch.cuda.is_available():
        return {}
    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    return {"ddp_backend": "gloo", "use_cpu": not deepspeed}


def _construct(cls: type, values: dict[str, Any], path: str) -> Any:
    try:
        return cls(**values)
    except (ValueError, TypeError) as e:
        raise RecipeError(f"{path}: invalid settings for {cls.__name__}: {e}") from e


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
