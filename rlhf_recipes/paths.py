"""Where the checkout keeps what is not Python: recipes, reference runs.

The recipes are data that ship beside the package (a checkout, or an editable install);
tools find a recipe by name here instead of each computing its own path."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RECIPES_DIR = REPO_ROOT / "recipes"
REFERENCE_RUNS_DIR = REPO_ROOT / "reference_runs"


def recipe_path(name: str) -> Path:
    """`dpo` or `dpo.yaml` -> recipes/dpo.yaml (a path that exists is returned as it is)."""
    given = Path(name)
    if given.suffix in (".yaml", ".yml") and given.exists():
        return given
    return RECIPES_DIR / (name if given.suffix else f"{name}.yaml")
