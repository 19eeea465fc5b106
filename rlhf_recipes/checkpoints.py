"""Which checkpoints a run can resume from: a manifest written last, checked before resuming.

A checkpoint folder counts only when its manifest (every file with its size and its xxh3-64
checksum, written after the Trainer has finished writing the folder) is there and every listed
file still has its size. A save killed halfway, or a file deleted or truncated since, makes the
folder incomplete: `rlhf-recipes runs` shows it, from the sizes alone (cheap). Before resuming,
every file's checksum is verified too, so a file whose bytes changed but whose size did not (a
bad block, a partial copy between file systems) is caught; `--resume` then falls back to the
newest checkpoint that verifies, saying which it skipped and why.

xxh3-64 (the xxhash package) is not a cryptographic hash: it catches corruption, not tampering.
Hashing runs at memory speed (`python -m benchmarks.integrity` measures it; docs/reliability.md
has the number), so what a check costs is reading the files, which a resume does anyway.

The manifest also records the settings the run actually used to reach the checkpoint and their
hash (run_setup.py compares them on resume). Nothing here imports torch or transformers: the
runner calls it before any heavy import.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "checkpoint_manifest.json"
CHECKSUM = "xxh3_64"  # the manifest's key for the per-file checksums, named after the hash
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_CHUNK = 16 * 2**20


def is_checkpoint_dir(path: str | Path) -> bool:
    return bool(_CHECKPOINT.match(Path(path).name))


def checkpoint_step(path: str | Path) -> int:
    m = _CHECKPOINT.match(Path(path).name)
    if not m:
        raise ValueError(f"{path} is not a checkpoint-<step> directory")
    return int(m.group(1))


def file_checksum(path: str | Path) -> str:
    """xxh3-64 of a file's bytes, as 16 hex digits. The file is mapped, not read into buffers: the hash reads the
    page cache directly (about 3x faster than copying 16 MiB chunks, `python -m benchmarks.integrity`)."""
    import mmap

    import xxhash

    with open(path, "rb") as f:
        try:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return xxhash.xxh3_64(mapped).hexdigest()
        except (ValueError, OSError):  # an empty file cannot be mapped (nor can some special files): read it
            h = xxhash.xxh3_64()
            while chunk := f.read(_CHUNK):
                h.update(chunk)
            return h.hexdigest()


def settings_hash(settings: dict[str, Any]) -> str:
    """sha256 of the settings as canonical JSON (sorted keys): equal settings, equal hash."""
    text = json.dumps(settings, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def write_manifest(folder: str | Path, step: int, extra: dict[str, Any] | None = None) -> Path:
    """List every file under `folder` with its size and checksum (and `extra`: the run's settings); written last."""
    from rlhf_recipes.disk import atomic_write_text

    folder = Path(folder)
    paths = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST and not p.name.endswith(".tmp")]
    manifest: dict[str, Any] = {
        "step": step,
        "files": {str(p.relative_to(folder)): p.stat().st_size for p in paths},
        CHECKSUM: {str(p.relative_to(folder)): file_checksum(p) for p in paths},
    }
    manifest.update(extra or {})
    return atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1, default=str))  # whole or absent


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def incomplete_reason(folder: str | Path, checksums: bool = False) -> str | None:
    """None for a complete checkpoint, else what is wrong with it (one short phrase). Sizes only, unless
    `checksums` (what a resume asks): then every file's bytes are read and checked against its checksum."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.exists():
        return "no manifest (its save did not finish)"
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError):
        return "unreadable manifest"
    for name, size in files.items():
        f = folder / name
        if not f.exists():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} has {f.stat().st_size} bytes, the manifest says {size}"
    expected = manifest.get(CHECKSUM) if checksums else None
    for name, digest in (expected or {}).items():  # a manifest from before checksums has sizes only
        actual = file_checksum(folder / name)
        if actual != digest:
            return (f"{name} does not match its checksum: {CHECKSUM} {actual}, the manifest says {digest}; its bytes "
                    "changed after the save, e.g. a bad block or an interrupted copy")
    return None


@dataclass
class ResumePoint:
    checkpoint: Path | None
    skipped: list[tuple[Path, str]]  # newer checkpoints passed over, with the reason


def find_resumable_checkpoint(output_dir: str | Path, checksums: bool = False) -> ResumePoint:
    """The newest complete checkpoint in output_dir, and the newer incomplete ones it skipped (with `checksums`,
    the newest that verifies: what --resume asks)."""
    root = Path(output_dir)
    folders = sorted((p for p in root.iterdir() if p.is_dir() and is_checkpoint_dir(p)),
                     key=checkpoint_step, reverse=True) if root.is_dir() else []
    skipped = []
    for folder in folders:
        reason = incomplete_reason(folder, checksums=checksums)
        if reason is None:
            return ResumePoint(folder, skipped)
        skipped.append((folder, reason))
    return ResumePoint(None, skipped)
