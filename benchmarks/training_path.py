"""How many of our files and lines one training run imports: the weight of the training path, measured on real runs.

    python -m benchmarks.training_path                       # the ten recipes below, --profile tiny, one step each
    python -m benchmarks.training_path recipes/dpo.yaml      # one recipe

Each recipe runs one optimizer step on the tiny profile in its own process, as `recipes/run.py` runs it; at the end
the process lists every module of rlhf_recipes/, custom_losses/, rewards/ (and lab/, which must stay at 0) that it
imported. The union over the recipes is the training path; its lines are counted with `wc -l`'s rule (newlines).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("rlhf_recipes", "custom_losses", "rewards", "lab")
RECIPES = ("dpo", "grpo", "ppo", "orm", "prm", "sft", "sdpo", "rejection_sampling_top_per_prompt", "preference_rm",
           "kto")

# Run in the child: train one step, then print the repository files among the imported modules.
CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from rlhf_recipes.train import main
code = main({argv!r})
repo = Path({repo!r})
files = sorted({{str(Path(m.__file__).resolve().relative_to(repo)) for m in list(sys.modules.values())
                if getattr(m, "__file__", None) and Path(m.__file__).resolve().is_relative_to(repo)}})
print("FILES " + json.dumps({{"code": code, "files": files}}))
"""


def imported_files(recipe: str, workdir: Path) -> list[str]:
    argv = [recipe, "--profile", "tiny", "--max_steps", "1", "--report_to", "none", "--output_dir",
            str(workdir / Path(recipe).stem)]
    done = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), argv=argv)], capture_output=True,
                          text=True, cwd=workdir, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("FILES ")), None)
    if line is None:
        raise SystemExit(f"{recipe}: the run printed no file list (exit {done.returncode}):\n{done.stderr[-2000:]}")
    result = json.loads(line[len("FILES "):])
    if result["code"] != 0:
        raise SystemExit(f"{recipe}: the run exited {result['code']}:\n{done.stderr[-2000:]}")
    return [f for f in result["files"] if f.split("/")[0] in FOLDERS]


def lines(path: str) -> int:
    return (REPO / path).read_bytes().count(b"\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.training_path", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipes", nargs="*", help="recipe files (default: the ten of the module docstring)")
    args = parser.parse_args(argv)
    recipes = args.recipes or [f"recipes/{name}.yaml" for name in RECIPES]
    union: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="training-path-") as tmp:
        for recipe in recipes:
            files = imported_files(str(REPO / recipe) if not Path(recipe).is_absolute() else recipe, Path(tmp))
            union.update(files)
            print(f"{recipe}: {len(files)} files, {sum(map(lines, files)):,} lines")
    print(f"\nthe training path ({len(recipes)} recipes): {len(union)} files, {sum(map(lines, union)):,} lines")
    for folder in FOLDERS:
        mine = [f for f in union if f.startswith(folder + "/")]
        print(f"  {folder + '/':<15} {len(mine):>4} files {sum(map(lines, mine)):>7,} lines")
        parts: dict[str, list[str]] = {}
        for f in mine:  # by sub-folder, where the folder has them
            parts.setdefault("/".join(f.split("/")[:2]) + "/" if f.count("/") > 1 else "(its own files)", []).append(f)
        if len(parts) > 1:
            for part, files in sorted(parts.items(), key=lambda kv: -sum(map(lines, kv[1]))):
                print(f"    {part:<33} {len(files):>4} files {sum(map(lines, files)):>7,} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
