"""Which checkpoints a run can resume from: a manifest written last, checked before resuming.

A checkpoint folder counts only when its manifest (every file with its size, written after the
Trainer has finished writing the folder) is there and every listed file still has its size. A
save killed halfway, or a file deleted or truncated since, makes the folder incomplete, and
`--resume` falls back to the previous complete one, saying why. Nothing here imports torch or
transformers: the runner calls it before any heavy import.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "checkpoint_manifest.json"
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def is_checkpoint_dir(path: str | Path) -> bool:
    return bool(_CHECKPOINT.match(Path(path).name))


def checkpoint_step(path: str | Path) -> int:
    m = _CHECKPOINT.match(Path(path).name)
    if not m:
        raise ValueError(f"{path} is not a checkpoint-<step> directory")
    return int(m.group(1))


def write_manifest(folder: str | Path, step: int) -> Path:
    """List every file under `folder` with its size; the manifest itself is written last."""
    folder = Path(folder)
    files = {str(p.relative_to(folder)): p.stat().st_size
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    path = folder / MANIFEST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"step": step, "files": files}, indent=1))
    tmp.replace(path)  # atomic: a manifest is either whole or absent
    return path


def incomplete_reason(folder: str | Path) -> str | None:
    """None for a complete checkpoint, else what is wrong with it (one short phrase)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.exists():
        return "no manifest (its save did not finish)"
    try:
        files = json.loads(path.read_text())["files"]
    except (ValueError, KeyError):
        return "unreadable manifest"
    for name, size in files.items():
        f = folder / name
        if not f.exists():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} has {f.stat().st_size} bytes, the manifest says {size}"
    return None


@dataclass
class ResumePoint:
    checkpoint: Path | None
    skipped: list[tuple[Path, str]]  # newer checkpoints passed over, with the reason


def find_resumable_checkpoint(output_dir: str | Path) -> ResumePoint:
    """The newest complete checkpoint in output_dir, and the newer incomplete ones it skipped."""
    root = Path(output_dir)
    folders = sorted((p for p in root.iterdir() if p.is_dir() and is_checkpoint_dir(p)),
                     key=checkpoint_step, reverse=True) if root.is_dir() else []
    skipped = []
    for folder in folders:
        reason = incomplete_reason(folder)
        if reason is None:
            return ResumePoint(folder, skipped)
        skipped.append((folder, reason))
    return ResumePoint(None, skipped)
