"""Your runs at a glance, and old checkpoints pruned.

    rlhf-recipes runs                      # every run under outputs/
    rlhf-recipes runs outputs/hh --json    # the same as JSON
    rlhf-recipes runs --prune 1 --dry-run  # what keeping the last complete checkpoint per run would free
    rlhf-recipes runs --prune 2            # keep the last 2 complete checkpoints of each run, delete the rest

One row per run folder (a folder holding a run's config.yaml): algorithm (with any of its registry defaults the run
changed: `dpo (loss_type hinge)`), model, profile, status
(finished / interrupted at step N / stopped by a health check at step N / failed at step N / running),
steps, the final key metrics (the algorithm's, from the registry), the evaluations in RUN_DIR/eval/,
size on disk and checkpoints (complete, and incomplete ones: saves that did not finish).

--prune K keeps the K newest complete checkpoints of every run (K >= 1: the newest complete one is what
--resume continues from) and deletes its older ones and its incomplete ones. A run being written (its
final_results.json says `running`: it runs, or it was killed outright) is never touched. Each run's
checkpoints are deleted under the run folder's own lock (rlhf_recipes/run_lock.py): a run that holds it
is skipped, and no run can start in the folder until its pruning is done.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from rlhf_recipes.run_folder import Checkpoint, SavedRun, find_runs
from rlhf_recipes.run_lock import RunFolderInUse, RunLock
from rlhf_recipes.tools import document
from rlhf_recipes.tools.document import number

DEFAULT_ROOT = "outputs"


def trained_as(run: SavedRun) -> str:
    """The run's algorithm, with each of its registry defaults that the run's config changed: `dpo (loss_type
    hinge)` trained TRL's hinge loss through recipes/dpo.yaml, which is not DPO."""
    from rlhf_recipes.registry import ALGORITHMS, canonical_name

    entry = ALGORITHMS.get(canonical_name(run.algorithm))
    if entry is None:
        return run.algorithm
    shown = lambda v: ",".join(map(str, v)) if isinstance(v, list) else str(v)
    changed = [f"{key} {shown(run.config[key])}" for key, value in entry.defaults.items()
               if key in run.config and run.config[key] != value]
    return f"{run.algorithm} ({', '.join(changed)})" if changed else run.algorithm


def checkpoints_cell(run: SavedRun) -> str:
    complete = [c.step for c in run.checkpoints if c.complete]
    incomplete = len(run.checkpoints) - len(complete)
    text = f"{len(complete)}" + (f" (last {complete[-1]})" if complete else "")
    return text + (f", {incomplete} incomplete" if incomplete else "")


def evaluations_cell(run: SavedRun) -> str:
    """One entry per evaluation: its first metric, and the difference from its baseline when there is one."""
    parts = []
    for ev in run.evaluations:
        if not ev["metrics"]:
            continue
        metric, value = next(iter(ev["metrics"].items()))
        diff = (ev.get("difference") or {}).get(metric)
        text = f"{ev['name']}: {metric} {number(value)}"
        if isinstance(diff, dict) and isinstance(diff.get("value"), (int, float)):
            text += f" ({diff['value']:+.3g}"
            if isinstance(diff.get("low"), (int, float)) and isinstance(diff.get("high"), (int, float)):
                text += f" [{diff['low']:+.3g}, {diff['high']:+.3g}]"
            text += ")"
        parts.append(text)
    return "; ".join(parts) or "-"


def print_table(runs: list[SavedRun], root: Path) -> None:
    from rich.filesize import decimal

    rows = [[str(run.path.relative_to(root)) if run.path != root else run.path.name, trained_as(run), run.model,
             run.profile or "-", run.status, "-" if run.steps is None else str(run.steps),
             ", ".join(f"{k} {number(v)}" for k, v in list(run.final_metrics().items())[:3]) or "-",
             evaluations_cell(run), decimal(run.bytes), checkpoints_cell(run)] for run in runs]
    document.print_table(["run", "algorithm", "model", "profile", "status", "steps", "final metrics", "evaluations",
                          "size", "checkpoints"], rows, f"{len(runs)} run(s) under {root}", right=("steps", "size"),
                         piped_width=200, title_justify="left")
    for run in runs:
        for problem in run.eval_errors:
            print(f"warning: skipped an unreadable evaluation: {problem}", file=sys.stderr)


# --------------------------------------------------------------------------------------
# Pruning


def prunable(run: SavedRun, keep: int) -> list[Checkpoint]:
    """The checkpoints --prune KEEP deletes from a run: all but its KEEP newest complete ones. A run being
    written keeps everything."""
    if keep < 1:
        raise ValueError("keep must be >= 1: the newest complete checkpoint is what --resume continues from")
    if run.being_written:
        return []
    complete = [c for c in run.checkpoints if c.complete]
    kept = {c.step for c in complete[-keep:]}
    return [c for c in run.checkpoints if c.step not in kept]


def prune(runs: list[SavedRun], keep: int, dry_run: bool) -> int:
    """Delete (or, dry, list) what --prune frees; prints each checkpoint and the total. Returns the bytes."""
    from rich.filesize import decimal

    total = 0
    for run in runs:
        if run.being_written:
            print(f"{run.path}: skipped, being written ({run.status}): its final_results.json says running")
            continue
        if not prunable(run, keep):
            continue
        lock = RunLock(run.path, command="rlhf-recipes runs --prune")
        try:
            if not dry_run:
                lock.acquire()  # a run that starts now is refused until the pruning is done
                # Read again under the lock: a --resume may have started, or ended, since the listing.
                run = SavedRun.open(run.path)
                if run.being_written:
                    print(f"{run.path}: skipped, a run started in it meanwhile")
                    continue
            for c in prunable(run, keep):
                if not dry_run:
                    shutil.rmtree(c.path)
                why = f" (incomplete: {c.incomplete})" if c.incomplete else ""
                print(f"{run.path}: {'would delete' if dry_run else 'deleted'} {c.path.name}{why}, {decimal(c.bytes)}")
                total += c.bytes
        except RunFolderInUse as e:
            who = e.holder.describe() if e.holder is not None else "a process that is starting"
            print(f"{run.path}: skipped, in use by {who}")
        finally:
            lock.release()
    exact = f" ({total} bytes)" if total >= 1000 else ""
    print(f"{'would free' if dry_run else 'freed'} {decimal(total)}{exact}; kept the last {keep} complete "
          "checkpoint(s) of every run")
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlhf-recipes runs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", default=DEFAULT_ROOT, help=f"folder to search (default: {DEFAULT_ROOT})")
    parser.add_argument("--prune", type=int, metavar="K", help="keep the last K complete checkpoints per run")
    parser.add_argument("--dry-run", "--dry_run", action="store_true", help="with --prune: list, delete nothing")
    parser.add_argument("--json", action="store_true", help="print the runs as JSON instead of a table")
    args = parser.parse_args(argv)
    root = Path(args.root)
    if not root.is_dir():
        print(f"error: {root}: no such folder; pass the folder your runs write to (default {DEFAULT_ROOT}/)",
              file=sys.stderr)
        return 2
    if args.prune is not None and args.prune < 1:
        print(f"error: --prune {args.prune}: K must be at least 1 (the newest complete checkpoint is what --resume "
              "continues from; a finished run's model is in the run folder itself)", file=sys.stderr)
        return 2
    if args.dry_run and args.prune is None:
        print("error: --dry-run goes with --prune K", file=sys.stderr)
        return 2
    runs = find_runs(root)
    if args.prune is not None:
        prune(runs, args.prune, args.dry_run)
        runs = find_runs(root)
    try:
        if args.json:
            print(json.dumps([{**r.summary(), "trained": trained_as(r)} for r in runs], indent=2, default=str))
        elif runs:
            print_table(runs, root)
        else:
            print(f"no runs under {root} (a run folder holds the config.yaml that recipes/run.py writes)")
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`| head -1`): it has what it asked for. stdout goes to devnull so that Python's
        # own flush at exit does not hit the closed pipe again (and print a traceback after all).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
