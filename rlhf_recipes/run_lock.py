"""One process writes into a run folder at a time: a lock held for the run's whole life.

The lock is `<output_dir>/.run.lock`, taken with filelock: flock(2) on Linux, which the kernel (or, on NFS, the
server's lock manager) releases when its process ends, however it ends (SIGKILL, the OOM killer), so a killed
run never leaves its folder locked. Beside it `.run.lock.json` says who holds it (host, pid, since when, the
command), written once the lock is held and removed when it is released. So:

- a second start into a folder whose run is alive (a resubmitted job, a second terminal, `--overwrite`) is
  refused in one line naming the holder;
- a `.run.lock.json` found while the lock is free was left by a run that was killed: the new start says whose
  it was and takes the folder over;
- `rlhf-recipes runs --prune` takes the same lock before deleting checkpoints, so a run cannot start in a
  folder while it is being pruned, nor be pruned while it runs.

Where flock does not reach across machines (NFS mounted `nolock`, Lustre mounted `localflock`), set
RLHF_RECIPES_RUN_LOCK=soft: the lock is then a file created exclusively (O_EXCL, which NFSv3+ and Lustre honour
across clients) and removed on release. A killed run leaves that file behind: a start on the same host sees that
the holder's pid is gone and takes over with a message; a start on another host cannot tell and says to delete
`.run.lock` by hand. On a file system without flock at all (Lustre `noflock`, some FUSE mounts), the soft lock is
used automatically. docs/reliability.md has the table. Nothing here imports torch.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from rlhf_recipes.errors import RecipeError

LOCK_FILE = ".run.lock"
HOLDER_FILE = ".run.lock.json"
MODE_ENV = "RLHF_RECIPES_RUN_LOCK"  # "soft": an exclusively created file instead of flock (see above)

logger = logging.getLogger(__name__)


class RunFolderInUse(RecipeError):
    """Another process holds the run folder's lock; `holder` says who, where it has said so; `hint` what to do when
    the holder may be gone (for a caller that words the refusal its own way: the sweep's lock)."""

    def __init__(self, message: str, holder: "Holder | None" = None, hint: str = ""):
        super().__init__(message)
        self.holder, self.hint = holder, hint


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux /proc), which tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3, starttime field 22
    return int(fields[19]) if len(fields) > 19 else None


def _process_alive(pid: int, start_ticks: int | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
        if state[state.rindex(")") + 2] == "Z":  # killed, not yet reaped: gone
            return False
    except (OSError, IndexError):
        pass
    now = _start_ticks(pid)
    return start_ticks is None or now is None or now == start_ticks


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run folder's lock, from `.run.lock.json`."""

    pid: int
    host: str
    since: str
    command: str = ""
    start_ticks: int | None = None

    @classmethod
    def read(cls, folder: str | Path) -> "Holder | None":
        try:
            data = json.loads((Path(folder) / HOLDER_FILE).read_text())
            return cls(int(data["pid"]), str(data["host"]), str(data.get("since", "?")), str(data.get("command", "")),
                       data.get("start_ticks"))
        except (OSError, ValueError, KeyError, TypeError):  # none, or being written this very moment
            return None

    @classmethod
    def me(cls, command: str) -> "Holder":
        return cls(os.getpid(), socket.gethostname(), time.strftime("%Y-%m-%d %H:%M:%S %Z"), command,
                   _start_ticks(os.getpid()))

    def alive(self) -> bool | None:
        """Whether the holder's process still runs; None when it ran on another host (it cannot be told here)."""
        if self.host != socket.gethostname():
            return None
        return _process_alive(self.pid, self.start_ticks)

    def describe(self) -> str:
        text = f"pid {self.pid} on {self.host}, since {self.since}"
        return text + (f" ({self.command})" if self.command else "")


def soft_mode() -> bool:
    return os.environ.get(MODE_ENV, "").strip().lower() == "soft"


class RunLock:
    """The lock on one run folder. `acquire` raises RunFolderInUse naming the holder; `release` lets go."""

    def __init__(self, folder: str | Path, command: str = ""):
        self.folder = Path(folder)
        self.command = command
        self.path = self.folder / LOCK_FILE
        self._lock = None
        self._soft = False
        self.created_folder = False
        self.created_file = False
        self.took_over: Holder | None = None  # the holder a killed run left behind, when this lock replaced it

    def _try(self, soft: bool) -> bool:
        from filelock import FileLock, SoftFileLock, Timeout

        lock = SoftFileLock(str(self.path)) if soft else FileLock(str(self.path))
        try:
            with warnings.catch_warnings():  # filelock >= 4 falls back to a soft lock on its own where flock is missing
                warnings.filterwarnings("ignore", message="flock not supported")
                lock.acquire(timeout=0)
        except Timeout:
            return False
        self._lock, self._soft = lock, soft
        return True

    def acquire(self) -> "RunLock":
        self.created_folder = not self.folder.exists()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.created_file = not self.path.exists()
        soft = soft_mode()
        try:
            got = self._try(soft)
        except (NotImplementedError, OSError) as e:  # filelock < 4 on a file system without flock
            if soft or not (isinstance(e, NotImplementedError) or getattr(e, "errno", None) == 38):  # ENOSYS
                raise
            logger.warning("%s: this file system has no flock; using an exclusively created lock file instead",
                           self.folder)
            soft = True
            got = self._try(soft)
        previous = Holder.read(self.folder)
        if not got and soft and previous is not None and previous.alive() is False:
            # A soft lock outlives a killed process: its holder, on this host, is gone, so the file is stale.
            self.path.unlink(missing_ok=True)
            got = self._try(soft)
        if not got:
            self.drop(remove=False)
            if previous is None:
                who = "another process (it has not said who yet: it is starting)"
            else:
                who = previous.describe()
                if previous.alive() is False:
                    who += "; that pid is gone, yet the lock is held, by a process it started (kill it)"
            hint = ""
            if soft and (previous is None or previous.alive() is None):
                hint = f". If that process is gone, delete {self.path}"
            raise RunFolderInUse(f"{self.folder} is in use by another run: {who}. Wait for it to end or stop it, "
                                 f"or pick another --output_dir{hint}", previous, hint)
        if previous is not None and (previous.pid, previous.host) != (os.getpid(), socket.gethostname()):
            self.took_over = previous
            state = {False: "which is no longer running", None: "which no longer holds it"}.get(previous.alive(),
                                                                                               "which let go of it")
            logger.warning("%s: taking over the run lock of pid %d on %s (since %s), %s: killed?", self.folder,
                           previous.pid, previous.host, previous.since, state)
        from rlhf_recipes.disk import atomic_write_text

        try:
            atomic_write_text(self.folder / HOLDER_FILE, json.dumps(asdict(Holder.me(self.command))) + "\n")
        except BaseException:
            self.drop(remove=self.created_file)
            raise
        return self

    def release(self) -> None:
        """The run ended: say nobody holds the folder, then let go (the lock file stays: see `drop`)."""
        if self._lock is not None and self._lock.is_locked:
            (self.folder / HOLDER_FILE).unlink(missing_ok=True)
        self.drop(remove=False)

    def drop(self, remove: bool) -> None:
        """Let go of the lock; with `remove`, first put the folder back as this start found it (a start that
        failed leaves no trace): its holder file removed, or the killed run's put back, and the lock file removed
        if this start created it.

        The flock file is otherwise kept: deleting it while another process waits on it would let a third lock a
        new file of the same name (filelock >= 4 re-checks; a soft lock file is deleted by its own release)."""
        if self._lock is None:
            return
        try:
            if remove and self._lock.is_locked:
                from rlhf_recipes.disk import atomic_write_text

                if self.took_over is not None:
                    atomic_write_text(self.folder / HOLDER_FILE, json.dumps(asdict(self.took_over)) + "\n")
                else:
                    (self.folder / HOLDER_FILE).unlink(missing_ok=True)
                if self.created_file and not self._soft:  # a soft lock's release deletes its file itself
                    self.path.unlink(missing_ok=True)
        finally:
            if self._lock.is_locked:
                self._lock.release()
            self._lock = None


def live_holder(folder: str | Path) -> Holder | None:
    """Who holds the run folder's lock right now, without taking it; None when nobody does.

    A probe for tools that start runs into existing folders (sweeps): a run still alive there is running, not
    failed. flock answers for any host that shares the lock; in soft mode the holder file's pid (same host) does.
    A lock held by a process that has not yet said who it is comes back as a Holder with pid 0."""
    folder = Path(folder)
    path = folder / LOCK_FILE
    if not path.exists():
        return None
    holder = Holder.read(folder)
    if soft_mode():
        held = holder is not None and holder.alive() is not False
    else:
        from filelock import FileLock, Timeout

        probe = FileLock(str(path))
        try:
            probe.acquire(timeout=0)
        except Timeout:
            held = True
        except (NotImplementedError, OSError):  # no flock here: the holder file's pid is all there is
            held = holder is not None and holder.alive() is not False
        else:
            probe.release()
            held = False
    if not held:
        return None
    return holder or Holder(0, "?", "?", "a process that is starting")
