"""Which checkpoints a run can resume from: the ones transformers wrote whole, whose weights open.

transformers' Trainer._save_checkpoint writes a checkpoint's trainer_state.json last (after the model, optimizer,
scheduler and RNG states), so a save killed halfway has none. Just before writing it, the Trainer asks every
`ExportableState` callback for its state and stores it inside: `RunRecord` (below) puts there the settings the run
used to reach the checkpoint (run_setup.py compares them on resume) and the size of every file already written.
A checkpoint is complete when its trainer_state.json reads, every file it lists still has its size, and every
weights file opens (a safetensors header that fits its file; a torch .pt/.bin is a zip whose directory, written
at its end, reads). A byte changed in place without changing a file's size is not caught. Nothing here imports
torch or transformers: the runner calls it before any heavy import.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRAINER_STATE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME, written last by every save
RECORD = "RunRecord"  # the key of RunRecord's state in trainer_state.json's `stateful_callbacks`
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_TORCH_FILES = (".pt", ".pth", ".bin")  # torch.save's zip format


def is_checkpoint_dir(path: str | Path) -> bool:
    return bool(_CHECKPOINT.match(Path(path).name))


def checkpoint_step(path: str | Path) -> int:
    m = _CHECKPOINT.match(Path(path).name)
    if not m:
        raise ValueError(f"{path} is not a checkpoint-<step> directory")
    return int(m.group(1))


def read_record(folder: str | Path) -> dict[str, Any] | None:
    """What RunRecord stored in the checkpoint's trainer_state.json ({"settings", "settings_changes", "files"}), or
    None where there is none (a checkpoint from before RunRecord, or none at all)."""
    try:
        return _record_in(json.loads((Path(folder) / TRAINER_STATE).read_text()))
    except (OSError, ValueError):
        return None


def _record_in(state: Any) -> dict[str, Any] | None:
    try:
        record = state["stateful_callbacks"][RECORD]["args"]
    except (KeyError, TypeError):
        return None
    return record if isinstance(record, dict) else None


def incomplete_reason(folder: str | Path) -> str | None:
    """None for a complete checkpoint, else what is wrong with it (one short phrase)."""
    folder = Path(folder)
    try:
        state = json.loads((folder / TRAINER_STATE).read_text())
    except FileNotFoundError:
        return f"no {TRAINER_STATE} (its save did not finish)"
    except (OSError, ValueError):
        return f"unreadable {TRAINER_STATE}"
    for name, size in ((_record_in(state) or {}).get("files") or {}).items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, its save wrote {size}"
    weights = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".safetensors", *_TORCH_FILES))
    if not any(p.suffix == ".safetensors" or p.name.endswith("model.bin") or "global_step" in str(p) for p in weights):
        return "no weights file"
    for path in weights:
        why = weights_file_problem(path)
        if why:
            return f"{path.relative_to(folder)} does not open ({why})"
    return None


def weights_file_problem(path: Path) -> str | None:
    """Why a weights file does not open (its first line), or None: a safetensors header that is whole and whose
    tensors fit the file, or a torch zip file with its central directory. Reads no tensor."""
    if path.suffix == ".safetensors":
        from safetensors import safe_open  # reads the header only; it refuses one whose tensors overrun the file

        try:
            with safe_open(str(path), framework="numpy"):
                return None
        except Exception as e:  # noqa: BLE001  (safetensors raises its own SafetensorError, and OSError)
            return str(e).splitlines()[0] if str(e) else type(e).__name__
    try:
        with zipfile.ZipFile(path):  # the central directory is written last: a torn file has none
            return None
    except (zipfile.BadZipFile, OSError) as e:
        return str(e)


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
