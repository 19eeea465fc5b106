"""What a sweep is: a recipe, a grid of settings, seeds; read from the command line or a wandb-style sweep file
(wandb's grid sweep configuration, `method`, `metric`, `parameters`, plus `recipe:` and `profile:`: docs/sweeps.md,
"A wandb sweep file"). Every cell x seed is checked with the runner's own recipe validation (unknown keys with the
close name, types, ranges) before anything runs. Loads no model and imports no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from rlhf_recipes.config import RecipeError, _suggest, read_yaml, split_command_line

SEED_LIMIT = 2**32 - 1  # numpy's seed range: transformers' set_seed seeds numpy too
# Keys a sweep sets itself for every run: a grid over them would mean nothing or break the layout.
RESERVED = {"seed": "use --seeds N (or parameters.seed.values in a sweep file)",
            "output_dir": "the sweep places every run in DIR/<cell>/seed-<s>; use --out DIR",
            "resume": "a sweep resumes interrupted runs itself", "overwrite": "use the sweep's --overwrite",
            "profile": "use --profile"}
FILE_KEYS = {"recipe", "profile", "seeds", "first_seed", "name", "description", "program", "method", "metric",
             "parameters", "command", "project", "entity", "early_terminate", "run_cap"}
UNSUPPORTED_FILE_KEYS = {"early_terminate": "early termination (hyperband) needs a scheduler that stops runs; "
                         "remove it: every run of a grid sweep here runs to its end",
                         "run_cap": "a grid sweep runs every cell; remove run_cap"}


@dataclass(frozen=True)
class Run:
    """One cell x seed: its settings and where it lives."""

    cell: str  # "key=value,key=value" (or "default" for a sweep over seeds only)
    params: dict[str, str]
    seed: int

    @property
    def relpath(self) -> Path:
        return Path(self.cell) / f"seed-{self.seed}"


@dataclass
class SweepSpec:
    recipe: str
    profile: str | None = None
    grid: dict[str, list[str]] = field(default_factory=dict)  # key -> values as the command line takes them
    seeds: list[int] = field(default_factory=lambda: [0])
    overrides: list[str] = field(default_factory=list)  # --KEY VALUE for every run
    metric: str | None = None  # what the report ranks (None: the family's held-out metric, else a key metric)
    goal: str = "maximize"  # or minimize (wandb's metric.goal)
    source: str = "command line"  # where the sweep came from, for messages

    def identity(self) -> dict[str, Any]:
        """What may not change between two invocations into one folder (cells and seeds may be added)."""
        return {"recipe": str(Path(self.recipe).resolve()), "profile": self.profile, "grid_keys": list(self.grid),
                "overrides": self.overrides}

    def runs(self) -> list[Run]:
        cells = [dict(zip(self.grid, values)) for values in product(*self.grid.values())] if self.grid else [{}]
        return [Run(cell_name(c), c, s) for c in cells for s in self.seeds]

    def recipe_of(self, run: Run | None = None):
        """The resolved recipe of a run (default: the first), loading nothing heavy."""
        from rlhf_recipes.config import load_recipe

        return load_recipe([*self.train_args(run or self.runs()[0]), "--output_dir", "unused"], construct=False)

    def train_args(self, run: Run) -> list[str]:
        """The runner's arguments of one run (recipe first), without its output folder."""
        args = [self.recipe, *(["--profile", self.profile] if self.profile else []), *self.overrides]
        for key, value in run.params.items():
            args += [f"--{key}", value]
        return [*args, "--seed", str(run.seed)]


_UNSAFE = re.compile(r"[/\\\s]+")  # path separators and spaces: not in a folder name


def cell_name(params: dict[str, str]) -> str:
    """`learning_rate=1e-05,beta=0.1`: a folder name (path separators and spaces replaced)."""
    if not params:
        return "default"
    return ",".join(f"{k}={_UNSAFE.sub('_', v)}" for k, v in params.items())


# YAML 1.2's float: PyYAML follows YAML 1.1, which needs a dot, so it reads `1e-5` as the text "1e-5"
_YAML12_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+")


def _value_text(value: Any) -> str:
    """A YAML value as the command line would give it (lists and mappings as YAML flow text). A number that YAML 1.1
    leaves as text (`1e-5`) is read as the number, as the runner's recipe reader does for a float key, so `1e-5` and
    `1.0e-5` name the same cell (`1e-05`)."""
    if isinstance(value, str) and _YAML12_FLOAT.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, dict)):
        import yaml

        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """`--grid KEY=V1,V2` (repeatable) -> {key: [values]}."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().removeprefix("--").replace("-", "_")
        if not sep or not key:
            raise RecipeError(f"--grid {item}: expected KEY=V1,V2,... (e.g. --grid learning_rate=1e-5,2e-5)")
        listed = [v.strip() for v in values.split(",")]
        if not values.strip() or any(v == "" for v in listed):
            raise RecipeError(f"--grid {item}: empty value; give one or more comma-separated values, "
                              f"e.g. --grid {key}=1e-5,2e-5")
        add_axis(grid, key, listed, f"--grid {item}")
    return grid


def add_axis(grid: dict[str, list[str]], key: str, values: list[str], where: str) -> None:
    if key in RESERVED:
        raise RecipeError(f"{where}: `{key}` is set by the sweep itself: {RESERVED[key]}")
    if key in grid:
        raise RecipeError(f"{where}: `{key}` is swept twice; give all its values once (KEY=V1,V2,...)")
    if len(set(values)) != len(values):
        raise RecipeError(f"{where}: a value of `{key}` is listed twice")
    grid[key] = values


def parse_seeds(count: int | None, first: int, where: str = "--seeds") -> list[int]:
    if count is None:
        count = 1
    if count < 1:
        raise RecipeError(f"{where}: expected a number of seeds >= 1, got {count}")
    if first < 0 or first + count - 1 > SEED_LIMIT:
        raise RecipeError(f"{where}: seeds {first}..{first + count - 1} must lie in 0..{SEED_LIMIT} (numpy's range)")
    return list(range(first, first + count))


def from_file(path: str) -> SweepSpec:
    """A wandb-style grid sweep file (docs/sweeps.md, "A wandb sweep file")."""
    data = read_yaml(path)
    for key in data:
        if key not in FILE_KEYS:
            raise RecipeError(f"{path}: unknown key `{key}` in a sweep file.{_suggest(key, FILE_KEYS)} "
                              f"Expected some of: {', '.join(sorted(FILE_KEYS))}")
        if key in UNSUPPORTED_FILE_KEYS:
            raise RecipeError(f"{path}: `{key}`: {UNSUPPORTED_FILE_KEYS[key]}")
    method = data.get("method", "grid")
    if method != "grid":
        raise RecipeError(f"{path}: `method: {method}` is not supported: only grid sweeps run here (every "
                          "combination of `parameters.<key>.values`, each with every seed); set `method: grid`")
    recipe = data.get("recipe") or next((str(c) for c in data.get("command") or [] if str(c).endswith((".yaml", ".yml"))
                                         and "accelerate_configs" not in str(c)), None)
    if recipe is None:
        raise RecipeError(f"{path}: no recipe: add `recipe: recipes/<name>.yaml` (or name it in wandb's `command`)")
    parameters = data.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise RecipeError(f"{path}: `parameters` must map each key to {{values: [...]}} or {{value: X}}")
    grid: dict[str, list[str]] = {}
    overrides: list[str] = []
    seeds = None
    for key, spec in parameters.items():
        where = f"{path}: parameters.{key}"
        if not isinstance(spec, dict) or not ({"values", "value"} & set(spec)):
            raise RecipeError(f"{where}: a grid sweep needs `values: [...]` or `value: X` (distributions such as "
                              f"{', '.join(sorted(set(spec) if isinstance(spec, dict) else ()) or ['min/max'])} "
                              "need a random or bayes search, which does not run here)")
        if "value" in spec:
            if key in RESERVED:
                raise RecipeError(f"{where}: `{key}` is set by the sweep itself: {RESERVED[key]}")
            overrides += [f"--{key}", _value_text(spec["value"])]
            continue
        values = spec["values"]
        if not isinstance(values, list) or not values:
            raise RecipeError(f"{where}.values: expected a non-empty list")
        if key == "seed":
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                raise RecipeError(f"{where}.values: seeds must be integers, got {values}")
            seeds = list(values)
            if any(s < 0 or s > SEED_LIMIT for s in seeds):
                raise RecipeError(f"{where}.values: seeds must lie in 0..{SEED_LIMIT}")
            continue
        add_axis(grid, key, [_value_text(v) for v in values], where)
    if seeds is None:
        seeds = parse_seeds(data.get("seeds"), int(data.get("first_seed", 0)), f"{path}: seeds")
    metric = data.get("metric") or {}
    if not isinstance(metric, dict) or metric.get("goal", "maximize") not in ("maximize", "minimize"):
        raise RecipeError(f"{path}: `metric` must be {{name: NAME, goal: maximize | minimize}}, got {metric!r}")
    return SweepSpec(recipe=str(recipe), profile=data.get("profile"), grid=grid, seeds=seeds, overrides=overrides,
                     metric=metric.get("name"), goal=metric.get("goal", "maximize"), source=path)


def check(spec: SweepSpec) -> None:
    """Every cell through the runner's recipe validation (first and last seed), before anything runs."""
    if not Path(spec.recipe).is_file():
        raise RecipeError(f"{spec.source}: recipe {spec.recipe}: no such file")
    split_command_line(["x", *spec.overrides])  # malformed overrides: the runner's own message
    cells = {r.cell: r for r in spec.runs() if r.seed == spec.seeds[0]}
    last = spec.runs()[-1]  # the last seed too: the seed's own range is checked by the recipe
    for run in [*cells.values(), last]:
        try:
            spec.recipe_of(run)
        except RecipeError as e:
            where = f"cell {run.cell}" if run.params else spec.source
            # the runner's own message may already start with it ("command line: unknown option ...")
            raise RecipeError(str(e) if str(e).startswith(f"{where}:") else f"{where}: {e}") from None
