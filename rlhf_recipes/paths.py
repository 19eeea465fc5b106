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


def unwritable_reason(path: str | Path) -> str | None:
    """Why a folder could not be created or written at `path` (None: it can), found by trying.

    Trying beats os.access: root passes every permission check, yet a read-only mount, a file in the
    way or a full disk still refuse the write."""
    import tempfile

    target = Path(path).expanduser().absolute()
    existing = target
    while not existing.exists():
        if existing.parent == existing:
            return f"{existing} does not exist"
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=existing)
    except OSError as e:
        return f"{existing} is not writable ({e.strerror or e})"
    import os

    os.close(fd)
    os.unlink(probe)
    return None
