"""`rlhf-recipes show RECIPE.yaml [--profile P] [--KEY VALUE ...] [--processes N] [--all]`: what a run would train with.

Every setting the run resolves to, each with where it came from: the class default (TRL's, transformers', ours),
the algorithm's registry defaults, the recipe, the profile (recipes/profiles/<name>.yaml and its section), the
command line, or derived (gradient accumulation from the effective batch and the process count). It is the
runner's own resolution (config.load_recipe, then the config classes built as the trainer gets them, their
__post_init__ included), so it cannot say something the run would not do. Nothing loads a model or data.
`recipes/run.py RECIPE.yaml --help` prints the same table (`recipe_help`), without building the trainer's config
(TRL's import: ~12 s); `--help --all` lists every key the algorithm takes.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from rlhf_recipes.config import MODEL_CONFIG, RecipeArgs, load_recipe
from rlhf_recipes.errors import RecipeError

USAGE = "usage: rlhf-recipes show RECIPE.yaml [--profile tiny|nano] [--KEY VALUE ...] [--processes N] [--all]"


@dataclasses.dataclass(frozen=True)
class Setting:
    group: str  # recipe (ours), model (TRL's ModelConfig), training (the algorithm's config class)
    key: str
    value: Any
    source: str
    default: bool  # the class's own default, set by nothing


def settings(recipe, build: bool = True) -> tuple[list[Setting], str | None]:
    """(every setting of the run, in the three configs' field order; why the configs could not be built here, or
    None). Unbuilt (TRL refuses a value on this machine, e.g. bf16 without a GPU), the values are as resolved;
    build=False leaves the trainer's config unbuilt (its set values as resolved, its defaults not listed)."""
    try:
        built = {"recipe": recipe.args, "model": recipe.model, **({"training": recipe.training} if build else {})}
        problem = None
    except RecipeError as e:
        built, problem = {}, str(e)
    out: list[Setting] = []
    seen: set[str] = set()
    for group, fields in recipe.schema.items():
        values = recipe.group_values(group)  # as layered, before the class's __post_init__
        obj = built.get(group)
        names = [f.name for f in dataclasses.fields(obj)] if obj is not None else list(values)
        for key in names:
            if key in seen or key.startswith("_"):
                continue
            seen.add(key)
            value = getattr(obj, key) if obj is not None else values[key]
            if key in values:
                source = recipe.origin.get(key, "derived")
                if obj is not None and _differs(value, values[key]):
                    source += f"; the config class made it {value!r} from {values[key]!r}"
                out.append(Setting(group, key, value, source, False))
            elif obj is not None and "default" in fields.get(key, {}) and _differs(value, fields[key]["default"]):
                out.append(Setting(group, key, value, f"set by {type(obj).__name__} from its other values", False))
            else:
                out.append(Setting(group, key, value, "default", True))
    return out, problem


def _differs(a: Any, b: Any) -> bool:
    try:
        return bool(a != b) and not (hasattr(a, "value") and a.value == b)  # an enum against its value
    except Exception:  # noqa: BLE001  (values that do not compare: shown as set)
        return False


def render(recipe, all_keys: bool = False, build: bool = True) -> str:
    rows, problem = settings(recipe, build)
    config_class = recipe.algorithm.config_class.replace(":", ".")
    titles = {"recipe": f"ours ({RecipeArgs.__module__}.RecipeArgs)",
              "model": f"the model's ({MODEL_CONFIG.replace(':', '.')})",
              "training": f"the trainer's ({config_class})"}
    profile = recipe.args.profile
    lines = [f"{recipe.source}{f' --profile {profile}' if profile else ''}: algorithm {recipe.algorithm.name} "
             f"(family {recipe.algorithm.family}), {recipe.world_size} process{'es' if recipe.world_size > 1 else ''}"]
    if problem:
        lines.append(f"(the config classes were not built here, so TRL's own checks did not run: {problem})")
    shown = [r for r in rows if all_keys or not r.default]
    width = max((len(r.key) for r in shown), default=0)
    for group, title in titles.items():
        group_rows = [r for r in shown if r.group == group]
        if group_rows:
            lines += ["", f"{title}:"]
            lines += [f"  {r.key:<{width}}  {_text(r.value):<28}  {r.source}" for r in group_rows]
    hidden = sum(r.default for r in rows) if not all_keys else 0
    if hidden:
        lines += ["", f"{hidden} other keys keep their class's default (--all lists them)."]
    return "\n".join(lines)


def _text(value: Any) -> str:
    text = repr(getattr(value, "value", value))
    return text if len(text) <= 60 else text[:57] + "..."


def recipe_help(argv: list[str]) -> str:
    """`RECIPE.yaml [--KEY VALUE ...] --help`: `show`'s table of the values this run would use, each with where it
    came from, the trainer's config left unbuilt so that it answers in a second. `--help --all`: every key the
    algorithm takes, with its type, default and help text (transformers' HfArgumentParser writes it from the three
    dataclasses: the same fields that recipes and the command line set)."""
    from rlhf_recipes.config import USAGE
    from rlhf_recipes.config_schema import import_object
    from rlhf_recipes.registry import ALGORITHMS
    from rlhf_recipes.yaml_files import read_yaml

    names = ", ".join(sorted(ALGORITHMS))
    path = next((a for a in argv if not a.startswith("-")), None)
    if path is None:
        return f"{USAGE}\nAvailable algorithms: {names}"
    name = read_yaml(path).get("algorithm")
    if name not in ALGORITHMS:
        raise RecipeError(f"{path}: unknown algorithm `{name}`. Available: {names}")
    if "--all" in argv:
        from transformers import HfArgumentParser

        classes = (RecipeArgs, import_object(MODEL_CONFIG), import_object(ALGORITHMS[name].config_class))
        return HfArgumentParser(classes, prog=f"recipes/run.py {path}", usage=USAGE.removeprefix("usage: ")
                                ).format_help()
    recipe = load_recipe([a for a in argv if a not in ("-h", "--help", "--all")], construct=False)
    return "\n".join([USAGE, "", render(recipe, build=False), "",
                      "TRL's own defaults are not the recipe's: the values above are what trains. What the trainer's "
                      f"config derives from them: rlhf-recipes show {path}; every key with its type, default and "
                      f"help: recipes/run.py {path} --help --all"])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{USAGE}\n\n{__doc__.split(chr(10), 2)[2].strip()}")
        return 0
    all_keys = "--all" in argv
    argv = [a for a in argv if a != "--all"]
    world_size = None
    if "--processes" in argv:
        i = argv.index("--processes")
        try:
            world_size = int(argv[i + 1])
        except (IndexError, ValueError):
            print(f"rlhf-recipes show: --processes takes a whole number of processes\n{USAGE}", file=sys.stderr)
            return 2
        del argv[i:i + 2]
    try:
        recipe = load_recipe(argv, world_size=world_size, construct=False)
        print(render(recipe, all_keys))
    except RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
