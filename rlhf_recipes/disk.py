"""Writing a run's result files so that a full disk never leaves half of one, and recognising a full disk.

A result file (final_results.json, config.yaml, an evaluation's JSON) is written to a temporary file in the
same folder, flushed to disk, then renamed over its name: the rename is atomic, so a reader (rlhf-recipes
runs, --resume, a sweep) sees the old file or the new one, never a 0-byte or truncated one. On a full disk the
write fails before the rename and the temporary file is removed. Appending metrics rows stays as it is: a
torn last row is skipped where rows are read (run_folder.read_metrics).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

FULL = (errno.ENOSPC, errno.EDQUOT)  # no space left, and a quota reached: the same for a run


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` all at once (temporary file, fsync, rename); on failure `path` is untouched."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); a result file gets the permissions a plain write would give it,
        # so that the rest of a team can read a run's config.yaml and final_results.json.
        os.fchmod(fd, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # a full disk often shows only here, when the data reaches it
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask can only be read by setting it, for every thread)
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def disk_full(error: BaseException, folder: str | Path | None = None) -> str | None:
    """If `error` comes from a full disk, what was being written (a path, or a description); else None.

    Python's own writes raise OSError(ENOSPC) with the file name; torch's checkpoint writer raises a
    RuntimeError ("file write failed") without errno, so that one counts when `folder`'s disk is (nearly) full."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in FULL:
            return str(error.filename) if error.filename else "the run's files"
        if "No space left on device" in str(error):
            return "the run's files"
        if isinstance(error, RuntimeError) and "write failed" in str(error) and folder is not None:
            try:
                if shutil.disk_usage(folder).free < 64 * 2**20:
                    return "the run's files"
            except OSError:
                pass
        error = error.__cause__ or error.__context__
    return None
