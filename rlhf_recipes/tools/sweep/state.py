"""A sweep folder's own state: which sweep it holds (sweep_spec.json) and who is writing into it (the lock).

One sweep at a time per folder: a second invocation while one runs is refused with who holds it. The lock is
filelock's (fcntl on Linux): it works on local disks and on NFS with a lock daemon; on file systems without
fcntl locks (some Lustre mounts) filelock cannot tell, so keep one sweep per folder there by hand.
A later invocation may add grid values and seeds (the grids and seeds are merged); a different recipe, profile,
set of swept keys or fixed override is another sweep: refused without --overwrite.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.errors import RecipeError
from rlhf_recipes.tools.sweep.spec import SweepSpec

SPEC_FILE = "sweep_spec.json"
LOCK_FILE = ".sweep.lock"
HOLDER_FILE = ".sweep.lock.json"


class SweepLock:
    def __init__(self, sweep_dir: Path):
        from filelock import FileLock

        self.dir = sweep_dir
        self._lock = FileLock(str(sweep_dir / LOCK_FILE))

    def __enter__(self):
        from filelock import Timeout

        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0.5)
        except Timeout:
            holder = self.dir / HOLDER_FILE
            who = json.loads(holder.read_text()) if holder.exists() else {}
            raise RecipeError(f"{self.dir}: another sweep is writing into this folder (pid {who.get('pid', '?')} "
                              f"on {who.get('host', '?')}, since {who.get('since', '?')}); wait for it to end, or "
                              "use another --out") from None
        (self.dir / HOLDER_FILE).write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                        "since": time.strftime("%Y-%m-%d %H:%M:%S")}))
        return self

    def __exit__(self, *exc):
        (self.dir / HOLDER_FILE).unlink(missing_ok=True)
        self._lock.release()
        return False


def save(spec: SweepSpec, sweep_dir: Path) -> None:
    data = {"recipe": spec.recipe, "profile": spec.profile, "grid": spec.grid, "seeds": spec.seeds,
            "overrides": spec.overrides, "metric": spec.metric, "goal": spec.goal, "source": spec.source}
    atomic_write_text(sweep_dir / SPEC_FILE, json.dumps(data, indent=2) + "\n")


def load(sweep_dir: Path) -> SweepSpec | None:
    path = sweep_dir / SPEC_FILE
    if not path.exists():
        return None
    return SweepSpec(**json.loads(path.read_text()))


def merged(spec: SweepSpec, sweep_dir: Path, overwrite: bool) -> SweepSpec:
    """The folder's sweep widened by this invocation's grid values and seeds (what the report covers)."""
    old = load(sweep_dir)
    if old is None or overwrite:
        return spec
    if old.identity() != spec.identity():
        differ = [k for k in spec.identity() if spec.identity()[k] != old.identity()[k]]
        raise RecipeError(f"{sweep_dir} holds another sweep (its {', '.join(differ)} differ: "
                          f"{', '.join(f'{k} {old.identity()[k]!r}' for k in differ)}); use another --out, or "
                          "--overwrite to train its runs again with these settings")
    grid = {k: [*old.grid[k], *(v for v in spec.grid[k] if v not in old.grid[k])] for k in spec.grid}
    seeds = [*old.seeds, *(s for s in spec.seeds if s not in old.seeds)]
    return SweepSpec(recipe=spec.recipe, profile=spec.profile, grid=grid, seeds=seeds, overrides=spec.overrides,
                     metric=spec.metric or old.metric, goal=spec.goal, source=spec.source)
