"""A sweep folder's own state: which sweep it holds (sweep_spec.json) and who is writing into it (the lock).

One sweep at a time per folder: a second invocation while one runs is refused with who holds it. The lock is a run
folder's (rlhf_recipes/run_lock.py), taken on the sweep's folder: flock, released however the sweep ends.
A later invocation may add grid values and seeds (the grids and seeds are merged); a different recipe, profile,
set of swept keys or fixed override is another sweep: refused without --overwrite.
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

from rlhf_recipes.errors import RecipeError
from rlhf_recipes.run_lock import RunFolderInUse, RunLock
from rlhf_recipes.tools.document import write_result
from lab.sweep.spec import SweepSpec

SPEC_FILE = "sweep_spec.json"


class SweepLock:
    def __init__(self, sweep_dir: Path):
        self.dir, self._lock = sweep_dir, RunLock(sweep_dir)

    def __enter__(self):
        try:
            self._lock.acquire()
        except RunFolderInUse as e:
            who = e.holder.describe() if e.holder else "a sweep that is starting"
            raise RecipeError(f"{self.dir}: another sweep is writing into this folder ({who}); wait for it to end, "
                              "or use another --out") from None
        return self

    def __exit__(self, *_):
        self._lock.release()
        return False


def save(spec: SweepSpec, sweep_dir: Path) -> None:
    write_result(asdict(spec), sweep_dir / SPEC_FILE)


def load(sweep_dir: Path) -> SweepSpec | None:
    path = sweep_dir / SPEC_FILE
    return SweepSpec(**json.loads(path.read_text())) if path.exists() else None


def merged(spec: SweepSpec, sweep_dir: Path, overwrite: bool) -> SweepSpec:
    """The folder's sweep widened by this invocation's grid values and seeds (what the report covers)."""
    old = load(sweep_dir)
    if old is None or overwrite:
        return spec
    before, now = old.identity(), spec.identity()
    if before != now:
        differ = [k for k in now if now[k] != before[k]]
        raise RecipeError(f"{sweep_dir} holds another sweep (its {', '.join(differ)} differ: "
                          f"{', '.join(f'{k} {before[k]!r}' for k in differ)}); use another --out, or "
                          "--overwrite to train its runs again with these settings")
    grid = {k: [*old.grid[k], *(v for v in spec.grid[k] if v not in old.grid[k])] for k in spec.grid}
    seeds = [*old.seeds, *(s for s in spec.seeds if s not in old.seeds)]
    return replace(spec, grid=grid, seeds=seeds, metric=spec.metric or old.metric)
