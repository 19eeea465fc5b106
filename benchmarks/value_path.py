"""Which of our files one recipe value passes through, from the YAML files to the trainer, measured on a real run.

    python -m benchmarks.value_path beta recipes/dpo.yaml --profile tiny --max_steps 1 --output_dir /tmp/vp

Every YAML file the run reads (the recipe, the profile) has KEY's number replaced by a marker value no default
equals; the run then trains as usual while every call into rlhf_recipes/, custom_losses/ and rewards/ is watched.
A function that holds the marker in an argument or local is on the value's path:
  value    it handles the number itself (reads, converts, checks or uses it);
  carried  it holds a mapping or object with the number inside (a whole config passing by: a writer, a hash).
Files are listed in the order the value first reaches them. The marker changes the run's numbers slightly: this
measures the code's shape, not a result. Numeric (float) keys only.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OURS = tuple(str(REPO / folder) + "/" for folder in ("rlhf_recipes", "custom_losses", "rewards"))
MARKER = 0.1000012345678  # a value of no default, profile or recipe


def _held(value, marker: float, inner: bool = False) -> str | None:
    if type(value) is float and value == marker:
        return "value"
    if inner:
        return None
    if isinstance(value, dict):
        members = value.values()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        members = [getattr(value, f.name, None) for f in dataclasses.fields(value)]
    else:
        try:
            members = vars(value).values()
        except TypeError:
            return None
    return "carried" if any(_held(m, marker, inner=True) for m in list(members)) else None


def trace(key: str, run_argv: list[str], marker: float = MARKER) -> dict[str, dict[str, str]]:
    """Run the recipe `run_argv` in this process; return {file: {function: 'value' | 'carried'}} in first-reach order
    (file paths relative to the repository)."""
    import rlhf_recipes.config  # noqa: F401  (imports every module that reads YAML before we look)
    import rlhf_recipes.yaml_files as yaml_files
    from rlhf_recipes.train import main

    read_yaml = yaml_files.read_yaml

    def marked(data):
        if isinstance(data, dict):
            for k, v in data.items():
                if k == key and isinstance(v, float):
                    data[k] = marker
                else:
                    marked(v)
        return data

    def read_marked(path, what="recipe"):
        return marked(read_yaml(path, what))

    path: dict[str, dict[str, str]] = {}

    def watch(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(OURS):
            return
        for value in list(frame.f_locals.values()):
            how = _held(value, marker)
            if how:
                where = path.setdefault(str(Path(frame.f_code.co_filename).relative_to(REPO)), {})
                if where.get(frame.f_code.co_name) != "value":
                    where[frame.f_code.co_name] = how
                if how == "value":
                    return

    patched = [(module, read_yaml) for name, module in list(sys.modules.items())
               if name.startswith("rlhf_recipes") and getattr(module, "read_yaml", None) is read_yaml]
    for module, _ in patched:
        module.read_yaml = read_marked
    argv, sys.argv = sys.argv, ["recipes/run.py", *run_argv]
    sys.setprofile(watch)
    try:
        code = main(run_argv)  # not cli(): its own_process would leave wandb out of the caller's process for good
    finally:
        sys.setprofile(None)
        sys.argv = argv
        for module, original in patched:
            module.read_yaml = original
    if code not in (0, None):
        raise SystemExit(f"the run failed (exit {code}): its path is incomplete")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.value_path", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("key", help="a numeric recipe key, e.g. beta or learning_rate")
    parser.add_argument("run", nargs=argparse.REMAINDER, help="the recipe and its runner flags")
    args = parser.parse_args(argv)
    path = trace(args.key, args.run)
    handled = [f for f, functions in path.items() if "value" in functions.values()]
    print(f"\n`{args.key}` from the YAML: {len(handled)} of our files handle the value itself, "
          f"{len(path) - len(handled)} more carry it inside a config")
    for file, functions in path.items():
        kind = "value  " if file in handled else "carried"
        print(f"  {kind} {file}: {', '.join(f'{name}' for name in functions)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
