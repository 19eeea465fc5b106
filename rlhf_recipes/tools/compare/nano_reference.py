"""`compare RUN --reference nano`: lay a nano run over this project's recorded nano run of the same algorithm.

The book's published runs train Qwen3-1.7B on GPUs; a `--profile nano` run (docs/nano.md) is the same recipe
in miniature on a CPU, so its natural reference is not the book's run but ours: reference_runs/nano/<algorithm>/
(recorded by `rlhf-recipes nano-book --seeds N`: one folder per training seed, <algorithm>/seed-<s>/; a folder
recorded with one seed holds the run itself), shipped without weights, labelled as this project's runs. This module
finds those folders for each run and hands them to the ordinary local comparison (one figure, the final means,
and each run's held-out evaluation with its interval), offline: every recorded seed is drawn, so the seeds'
spread is on the figure beside your run.
"""

from __future__ import annotations

from pathlib import Path

from rlhf_recipes.paths import REFERENCE_RUNS_DIR
from rlhf_recipes.registry import canonical_name
from rlhf_recipes.run_folder import has_metrics
from rlhf_recipes.tools.compare.errors import CompareError
from rlhf_recipes.tools.compare.load import NANO_PROFILE, run_algorithm, run_profile
from rlhf_recipes.tools.compare.report import CompareReport, compare_local_runs
from rlhf_recipes.tools.compare.verdict import WINDOW_FRACTION

NANO_REFERENCE = NANO_PROFILE  # the --reference value that means "this project's nano runs", not an algorithm
NANO_RUNS_DIR = REFERENCE_RUNS_DIR / "nano"
LABEL_PREFIX = "project nano run: "


def recorded_runs(folder: Path) -> list[Path]:
    """The recorded runs of one algorithm's folder: the folder itself (one seed) or its seed-<s> folders."""
    if has_metrics(folder):
        return [folder]
    seeds = [p for p in folder.glob("seed-*") if p.name[5:].isdigit() and has_metrics(p)]
    return sorted(seeds, key=lambda p: int(p.name[5:]))  # seed-2 before seed-10


def recorded_algorithms(root: Path = NANO_RUNS_DIR) -> list[str]:
    """Algorithms with a recorded nano run (a folder holding metrics.jsonl, or seed folders that do)."""
    return sorted(p.name for p in root.iterdir() if recorded_runs(p)) if root.is_dir() else []


def nano_reference_dirs(run_dirs: list[Path], root: Path = NANO_RUNS_DIR) -> list[Path]:
    """The recorded nano runs (every seed) of each run's algorithm (each once), or a one-line error naming what is
    missing."""
    found: list[Path] = []
    for run_dir in run_dirs:
        algorithm = run_algorithm(Path(run_dir))
        if algorithm is None:
            raise CompareError(f"{run_dir}: no algorithm in its final_results.json or config.yaml, so no recorded "
                               f"nano run to compare with; pass the reference folder itself: "
                               f"rlhf-recipes compare {run_dir} {root}/<algorithm>")
        references = recorded_runs(root / canonical_name(algorithm))
        if not references:
            recorded = ", ".join(recorded_algorithms(root)) or "none"
            raise CompareError(f"--reference nano: no recorded nano run of `{algorithm}` under {root} (recorded: "
                               f"{recorded}); record one with `rlhf-recipes nano-book --algorithms {algorithm} "
                               f"--out DIR` and copy the run folder there")
        found += [r for r in references if r not in found]
    return found


def nano_notes(run_dirs: list[Path], references: list[Path]) -> list[str]:
    notes = [f"{LABEL_PREFIX}{', '.join(str(r) for r in references)}: this project's recorded run(s) on the "
             f"nano profile (a 2-core CPU; one per training seed), not the book's (reference_runs/nano/README.md)"]
    for run_dir in run_dirs:
        if run_profile(run_dir) != NANO_REFERENCE:
            notes.append(f"{run_dir} is not a --profile nano run (config.yaml profile: {run_profile(run_dir)}): its "
                         f"model and data differ from the reference's, so the curves are not like for like")
    return notes


def compare_with_nano_runs(run_dirs: list[Path], out_dir: Path | None = None, metrics: list[str] | None = None,
                           fraction: float = WINDOW_FRACTION, root: Path = NANO_RUNS_DIR) -> CompareReport:
    """The runs and the recorded nano run of each one's algorithm in one figure and table, offline."""
    references = nano_reference_dirs(run_dirs, root)
    labels = [None] * len(run_dirs) + [LABEL_PREFIX + r.relative_to(root).as_posix() for r in references]
    return compare_local_runs([*run_dirs, *references], out_dir=out_dir, metrics=metrics, fraction=fraction,
                              labels=labels, notes=nano_notes(run_dirs, references))
