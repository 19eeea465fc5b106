"""The run folder, the one contract between the runner and every tool: its file names, its writers and its reader.

A run folder is what `recipes/run.py` writes: config.yaml (the resolved recipe, written first, and rewritten by
every start, a --resume included), final_results.json (`status: running` from the start, with `starts`, and
finished / interrupted / stopped / failed with the results at the end), metrics.jsonl, checkpoint-<step>/ folders
(complete once transformers has written them whole, checkpoints.py), the trained model, console.log, curves.png
and, when an evaluation has run, eval/<name>.json. Nothing else spells these names.

A run whose final_results.json still says `running` is alive while its folder's lock is held (run_lock.py); with
the lock free, its process was killed outright (SIGKILL, out of memory, a lost machine). Tools that delete
anything leave both alone. Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from rlhf_recipes.checkpoints import checkpoint_step, incomplete_reason, is_checkpoint_dir
from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.run_lock import Holder, live_holder

CONFIG_FILE = "config.yaml"  # the resolved recipe, re-runnable as it is
METRICS_FILE = "metrics.jsonl"  # one row per log event
FINAL_RESULTS_FILE = "final_results.json"  # written last, however training ended
CURVES_FILE = "curves.png"
EVAL_SUBDIR = "eval"  # RUN_DIR/eval/<name>.json: one evaluation's results
RUNNING = "running"  # final_results.json's status from a start's claim until it ends
EXIT_INTERRUPTED = 130  # the runner's exit code when a signal stopped it after saving a checkpoint
EXIT_STILL_RUNNING = 75  # EX_TEMPFAIL: a run is held by a live process elsewhere; try again when it ends
NOT_RESULTS = {"learning_rate", "epoch"}  # logged each step, but not what a run reached
_STATUS_WORDS = {"interrupted": "interrupted", "stopped": "stopped by a health check", "failed": "failed"}


# --- Writing ---------------------------------------------------------------------------------
def write_config(recipe, output_dir: Path, resolved: dict[str, Any] | None = None) -> Path:
    """config.yaml: the resolved recipe (by default `recipe.resolved`), re-runnable as it is."""
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / CONFIG_FILE
    header = (f"# Resolved recipe of this run (from {recipe.source}, world size {recipe.world_size}).\n"
              # A plain re-run into this folder is refused (it holds this run): the command names a new one.
              f"# Re-run it with: python recipes/run.py {path} --output_dir {output_dir}-rerun\n")
    atomic_write_text(path, header + yaml.safe_dump(recipe.resolved if resolved is None else resolved,
                                                    sort_keys=False))
    return path


def write_final_results(recipe, trainer, output_dir: Path, wall_seconds: float, status: str,
                        extra: dict[str, Any] | None = None) -> Path:
    """final_results.json. status: finished | interrupted | stopped (a health check) | failed (an exception while
    training). World size and batch are read from the trainer, i.e. what really ran."""
    import torch

    args = trainer.args
    results = {
        "algorithm": recipe.algorithm.name,
        "model": recipe.model.model_name_or_path,
        "dataset": recipe.args.dataset_name or recipe.args.dataset,
        "profile": recipe.args.profile,
        "world_size": args.world_size,
        "effective_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "steps": trainer.state.global_step,
        "status": status,
        "interrupted": status == "interrupted",
        "wall_seconds": round(wall_seconds, 2),  # training's, every start's together (`starts` has each)
        "torch_threads": torch.get_num_threads(),  # the CPU threads it ran with (they change a CPU run's last bits)
        "final_metrics": last_values(read_metrics(output_dir)),
        # rows read, dropped (by reason; the first rows that did not fit, named) and trained on (data/sources.py);
        # a family's `data` (token-length statistics) comes in `extra`
        "dataset_rows": getattr(recipe, "data_counts", None),
        **(extra or {}),
    }
    # Atomic: a full disk leaves the previous file (or none), never a 0-byte one that reads as "being written".
    return atomic_write_text(output_dir / FINAL_RESULTS_FILE, json.dumps(results, indent=2, default=str) + "\n")


def write_running(recipe, output_dir: Path, starts: list[dict[str, Any]]) -> Path:
    """final_results.json while a start runs: `running`, and every start so far (when, from which checkpoint, its
    seconds: this one's as of its last checkpoint)."""
    doc = {"algorithm": recipe.algorithm.name, "status": RUNNING, "starts": starts,
           "wall_seconds": round(sum(s.get("train_seconds") or 0 for s in starts), 2)}
    return atomic_write_text(output_dir / FINAL_RESULTS_FILE, json.dumps(doc, indent=2, default=str) + "\n")


# --- Reading ---------------------------------------------------------------------------------
def read_config(output_dir: Path) -> dict[str, Any] | None:
    """config.yaml's settings, or None where the folder has none."""
    path = Path(output_dir) / CONFIG_FILE
    if not path.exists():
        return None
    return yaml.safe_load(path.read_text()) or {}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's rows (`path`: the file or its run folder). A torn last row (its append cut short by a full
    disk or a kill) is skipped; a bad row anywhere else is an error."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except ValueError:
            if i < len(lines) - 1:
                raise
    return rows


def last_values(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The latest logged value of every numeric metric (train rows and eval_ rows alike)."""
    final: dict[str, float] = {}
    for row in rows:
        for k, v in row.items():
            if k in ("step", "epoch") or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            final[k] = float(v)
    return final


def read_results(output_dir: Path) -> dict[str, Any] | None:
    """final_results.json of a run that has ended (however), or None where there is none or it says `running`."""
    path = Path(output_dir) / FINAL_RESULTS_FILE
    return ended(json.loads(path.read_text()) if path.is_file() else None)


def ended(results: dict[str, Any] | None) -> dict[str, Any] | None:
    """final_results.json's content where the run has ended, None while it says `running` (or there is none)."""
    return None if results is None or results.get("status") == RUNNING else results


def run_finished(output_dir: Path) -> bool:
    """The run in `output_dir` wrote final_results.json with status finished (not interrupted, stopped, failed)."""
    results = read_results(output_dir)
    return results is not None and results.get("status", "finished") == "finished"


def has_config(output_dir: Path) -> bool:
    """A run has started in `output_dir` (its config.yaml is written first)."""
    return (Path(output_dir) / CONFIG_FILE).is_file()


def has_metrics(output_dir: Path) -> bool:
    return (Path(output_dir) / METRICS_FILE).is_file()


class RunFolderError(ValueError):
    """A path that is not what a tool expected (one line for the user)."""


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    incomplete: str | None  # None: complete (checkpoints.incomplete_reason), else why not
    bytes: int

    @property
    def complete(self) -> bool:
        return self.incomplete is None


def folder_bytes(path: Path) -> int:
    """Bytes of every file under `path` (links are not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # removed while we walked (a run writing)
                pass
    return total


def is_run_dir(path: Path) -> bool:
    if not has_config(path):
        return False
    try:
        return "algorithm" in (read_config(path) or {})
    except Exception:  # noqa: BLE001  (a YAML file that is not a run's config: not a run)
        return False


@dataclass
class SavedRun:
    """One run folder, read lazily."""

    path: Path
    config: dict[str, Any] = field(default_factory=dict)
    eval_errors: list[str] = field(default_factory=list)  # eval/*.json files that could not be read, and why

    @classmethod
    def open(cls, path: str | Path) -> "SavedRun":
        path = Path(path)
        if not path.is_dir():
            here = sorted(str(p) for p in path.parent.glob("*") if is_run_dir(p))[:8]  # none where no parent
            raise RunFolderError(f"{path}: no such folder (expected a run's output_dir"
                                 + (f"; run folders in {path.parent}: {', '.join(here)})" if here else
                                    ", the folder recipes/run.py trains into)"))
        if not is_run_dir(path):
            raise RunFolderError(f"{path}: not a run folder (no config.yaml with an `algorithm`, which "
                                 "recipes/run.py writes first into its output_dir)")
        return cls(path, read_config(path) or {})

    # --- What the folder says --------------------------------------------------------------
    @property
    def algorithm(self) -> str:
        return str(self.config.get("algorithm"))

    @property
    def model(self) -> str:
        return str(self.config.get("model_name_or_path"))

    @property
    def profile(self) -> str | None:
        return self.config.get("profile")

    @cached_property
    def raw_results(self) -> dict[str, Any] | None:
        """final_results.json as it is (`running` included), or None where there is none."""
        try:
            return json.loads((self.path / FINAL_RESULTS_FILE).read_text())
        except FileNotFoundError:
            return None
        except ValueError:  # a run by a version that wrote it in place, caught mid-write
            return None

    @property
    def results(self) -> dict[str, Any] | None:
        """final_results.json of a run that has ended, or None while it says `running` (see `being_written`)."""
        return ended(self.raw_results)

    @property
    def being_written(self) -> bool:
        return self.results is None

    @cached_property
    def last_logged_step(self) -> int | None:
        try:
            rows = read_metrics(self.path)
        except ValueError:  # a line being appended this very moment
            return None
        steps = [r["step"] for r in rows if isinstance(r.get("step"), int)]
        return max(steps) if steps else None

    @property
    def steps(self) -> int | None:
        return self.results.get("steps") if self.results else self.last_logged_step

    @cached_property
    def holder(self) -> Holder | None:
        """The process holding the folder's lock now, or None where nobody does."""
        return live_holder(self.path)

    @property
    def status(self) -> str:
        """finished / interrupted at step N / stopped by a health check at step N / failed at step N /
        running (step N) / no result at step N: killed?"""
        step = self.steps
        at = f" at step {step}" if step is not None else ""
        if self.results is None:
            if self.holder is not None:
                return f"running (step {step})" if step is not None else "running (starting)"
            left = Holder.read(self.path)  # its holder file stays where its process was killed
            return f"no result{at}: " + (f"its process (pid {left.pid} on {left.host}) is gone (killed?)" if left
                                         else "its process is gone (killed?)")
        status = self.results.get("status") or ("interrupted" if self.results.get("interrupted") else "finished")
        return "finished" if status == "finished" else f"{_STATUS_WORDS.get(status, status)}{at}"

    @property
    def finished(self) -> bool:
        return bool(self.results) and self.results.get("status", "finished") == "finished"

    @cached_property
    def checkpoints(self) -> list[Checkpoint]:
        """Checkpoint folders, oldest first."""
        folders = sorted((p for p in self.path.iterdir() if p.is_dir() and is_checkpoint_dir(p)), key=checkpoint_step)
        return [Checkpoint(p, checkpoint_step(p), incomplete_reason(p), folder_bytes(p)) for p in folders]

    def checkpoint(self, step_or_name: str) -> Checkpoint:
        """The complete checkpoint named `6`, `checkpoint-6` or by its path; an error names the complete ones."""
        name = Path(step_or_name).name
        step = int(name) if name.isdigit() else checkpoint_step(name) if is_checkpoint_dir(name) else None
        found = next((c for c in self.checkpoints if c.step == step), None)
        complete = ", ".join(str(c.step) for c in self.checkpoints if c.complete) or "none"
        if found is None:
            raise RunFolderError(f"--checkpoint {step_or_name}: {self.path} has no checkpoint-{step} "
                                 f"(complete checkpoints: {complete})")
        if not found.complete:
            raise RunFolderError(f"--checkpoint {step_or_name}: incomplete ({found.incomplete}); complete "
                                 f"checkpoints: {complete}")
        return found

    @cached_property
    def bytes(self) -> int:
        return folder_bytes(self.path)

    @cached_property
    def evaluations(self) -> list[dict[str, Any]]:
        """RUN_DIR/eval/<name>.json results, by name; unreadable files are skipped (named in `eval_errors`)."""
        out = []
        folder = self.path / EVAL_SUBDIR
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                data = json.loads(path.read_text())
            except ValueError as e:
                self.eval_errors.append(f"{path}: {e}")
                continue
            if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
                out.append({"name": data.get("name") or path.stem, **data})
            else:
                self.eval_errors.append(f"{path}: no `metrics` mapping")
        return out

    def final_metrics(self) -> dict[str, float]:
        """The key numbers a run ended with: its algorithm's key metrics (registry), the loss, and a reward
        model's held-out evaluation."""
        from rlhf_recipes.registry import ALGORITHMS, canonical_name

        if not self.results:
            return {}
        final = self.results.get("final_metrics") or {}
        algorithm = ALGORITHMS.get(canonical_name(self.algorithm))
        keys = [k for k in ("loss", *(algorithm.key_metrics if algorithm else ())) if k not in NOT_RESULTS]
        out = {k: final[k] for k in keys if isinstance(final.get(k), (int, float))}
        evaluation = self.results.get("evaluation")  # a reward model's held-out numbers (families/reward_model.py)
        for k, v in (evaluation if isinstance(evaluation, dict) else {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"eval {k}"] = v
        return out

    def summary(self) -> dict[str, Any]:
        """Everything `rlhf-recipes runs` shows, as plain JSON."""
        return {
            "run": str(self.path), "algorithm": self.algorithm, "model": self.model, "profile": self.profile,
            "status": self.status, "being_written": self.being_written, "steps": self.steps,
            "final_metrics": self.final_metrics(), "evaluations": self.evaluations, "bytes": self.bytes,
            "checkpoints": [{"step": c.step, "complete": c.complete, "incomplete": c.incomplete, "bytes": c.bytes}
                            for c in self.checkpoints],
        }


def find_runs(root: str | Path) -> list[SavedRun]:
    """Run folders at or under `root` (a run's own subfolders, and hidden folders, are not searched)."""
    root = Path(root)
    if is_run_dir(root):
        return [SavedRun.open(root)]
    found = []
    for folder, dirs, _ in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        path = Path(folder)
        if path != root and is_run_dir(path):
            found.append(SavedRun.open(path))
            dirs[:] = []
    return found
