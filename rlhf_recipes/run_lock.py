"""One process writes into a run folder at a time: filelock's lock on `<output_dir>/.run.lock`, held for the run's life.

filelock's FileLock is flock(2) on Linux, which the kernel (or, on NFS, the server's lock manager) releases when its
process ends, however it ends (SIGKILL, the OOM killer), so a killed run never leaves its folder locked, and whether
a run is alive is whether its lock is held. Beside it `.run.lock.json` says who holds it (host, pid, since when,
the command), written once the lock is held and removed when it is released: one found while the lock is free was
left by a run that was killed, and the next start says whose it was. A second start into a live run's folder (a
resubmitted job, a second terminal, `--overwrite`, `rlhf-recipes runs --prune`) is refused in one line naming the
holder. Nothing here imports torch.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.errors import RecipeError

LOCK_FILE = ".run.lock"
HOLDER_FILE = ".run.lock.json"

logger = logging.getLogger(__name__)


class RunFolderInUse(RecipeError):
    """Another process holds the run folder's lock; `holder` says who, where it has said so."""

    def __init__(self, message: str, holder: "Holder | None" = None):
        super().__init__(message)
        self.holder = holder


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run folder's lock, from `.run.lock.json`."""

    pid: int
    host: str
    since: str
    command: str = ""

    @classmethod
    def read(cls, folder: str | Path) -> "Holder | None":
        try:
            data = json.loads((Path(folder) / HOLDER_FILE).read_text())
            return cls(int(data["pid"]), str(data["host"]), str(data.get("since", "?")), str(data.get("command", "")))
        except (OSError, ValueError, KeyError, TypeError):  # none, or being written this very moment
            return None

    def describe(self) -> str:
        text = f"pid {self.pid} on {self.host}, since {self.since}"
        return text + (f" ({self.command})" if self.command else "")


class RunLock:
    """The lock on one run folder. `acquire` raises RunFolderInUse naming the holder; `release` lets go."""

    def __init__(self, folder: str | Path, command: str = ""):
        self.folder, self.command = Path(folder), command
        self._lock = FileLock(str(self.folder / LOCK_FILE))
        self.created_folder = False
        self.took_over: Holder | None = None  # the holder file a killed run left, which a failed start puts back

    def acquire(self) -> "RunLock":
        self.created_folder = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            holder = Holder.read(self.folder)
            who = holder.describe() if holder else "another process (it has not said who yet: it is starting)"
            raise RunFolderInUse(f"{self.folder} is in use by another run: {who}. Wait for it to end or stop it, "
                                 "or pick another --output_dir", holder) from None
        previous = self.took_over = Holder.read(self.folder)
        if previous is not None:
            logger.warning("%s: taking over the run lock of pid %d on %s (since %s), which no longer holds it: "
                           "killed?", self.folder, previous.pid, previous.host, previous.since)
        me = Holder(os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%d %H:%M:%S %Z"), self.command)
        try:
            atomic_write_text(self.folder / HOLDER_FILE, json.dumps(asdict(me)) + "\n")
        except BaseException:
            self._lock.release()
            raise
        return self

    def release(self, put_back: bool = False) -> None:
        """Say nobody holds the folder (`put_back`, a start that failed: the killed run's holder file as it was
        found), then let go. The lock file itself stays: deleting it while another process waits on it would let a
        third lock a new file of the same name."""
        if not self._lock.is_locked:
            return
        try:
            if put_back and self.took_over is not None:
                atomic_write_text(self.folder / HOLDER_FILE, json.dumps(asdict(self.took_over)) + "\n")
            else:
                (self.folder / HOLDER_FILE).unlink(missing_ok=True)
        finally:
            self._lock.release()


def live_holder(folder: str | Path) -> Holder | None:
    """Who holds the run folder's lock right now, without taking it; None when nobody does. A lock held by a process
    that has not yet said who it is comes back as a Holder with pid 0."""
    path = Path(folder) / LOCK_FILE
    if not path.exists():
        return None
    probe = FileLock(str(path))
    try:
        probe.acquire(timeout=0)
    except Timeout:
        return Holder.read(folder) or Holder(0, "?", "?", "a process that is starting")
    probe.release()
    return None
