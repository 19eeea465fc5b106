"""What a run leaves behind: config.yaml first, final_results.json and curves.png last."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import yaml

from rlhf_recipes.disk import atomic_write_text

PLOT_SKIP = {"step", "epoch", "learning_rate", "total_flos", "train_runtime", "train_samples_per_second",
             "train_steps_per_second", "train_loss"}


def write_config(recipe, output_dir: Path, resolved: dict[str, Any] | None = None) -> Path:
    """config.yaml: the resolved recipe (by default `recipe.resolved`), re-runnable as it is."""
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / "config.yaml"
    header = (f"# Resolved recipe of this run (from {recipe.source}, world size {recipe.world_size}).\n"
              f"# Re-run it with: python recipes/run.py {path}\n")
    atomic_write_text(path, header + yaml.safe_dump(recipe.resolved if resolved is None else resolved,
                                                    sort_keys=False))
    return path


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's rows. A torn last row (its append cut short by a full disk or a kill) is skipped;
    a bad row anywhere else is an error."""
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


FINAL_RESULTS = "final_results.json"


def run_finished(output_dir: Path) -> bool:
    """The run in `output_dir` wrote final_results.json with status finished (not interrupted, stopped, failed)."""
    path = Path(output_dir) / FINAL_RESULTS
    return path.exists() and json.loads(path.read_text()).get("status", "finished") == "finished"


def write_final_results(recipe, trainer, output_dir: Path, wall_seconds: float, status: str,
                        extra: dict[str, Any] | None = None) -> Path:
    """status: finished | interrupted | stopped (a health check) | failed (an exception while training)."""
    """final_results.json. World size and batch are read from the trainer, i.e. what really ran."""
    rows = read_metrics(output_dir / "metrics.jsonl")
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
        "wall_seconds": round(wall_seconds, 2),
        "final_metrics": last_values(rows),
        # rows read, dropped (by reason; the first rows that did not fit, named) and trained on (data/sources.py);
        # a family's `data` (token-length statistics) comes in `extra`
        "dataset_rows": getattr(recipe, "data_counts", None),
        **(extra or {}),
    }
    # Atomic: a full disk leaves the previous file (or none), never a 0-byte one that reads as "being written".
    return atomic_write_text(output_dir / FINAL_RESULTS, json.dumps(results, indent=2, default=str) + "\n")


def plot_curves(output_dir: Path, key_metrics: tuple[str, ...], title: str) -> Path | None:
    """curves.png: the loss, the algorithm's key metrics and any held-out eval/* metrics against the optimizer step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = read_metrics(output_dir / "metrics.jsonl")
    names = ["loss", *[m for m in key_metrics if m != "loss"]]
    # Held-out evaluation during training (eval_every): eval/<metric>, next to the training numbers.
    names += sorted({k for r in rows for k in r if k.startswith("eval/") and k not in names})
    series = {}
    for name in names:
        points = [(r["step"], r[name]) for r in rows if isinstance(r.get(name), (int, float)) and math.isfinite(r[name])]
        if points:
            series[name] = points
    if not series:
        return None
    cols = min(3, len(series))
    nrows = math.ceil(len(series) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, (name, points) in zip(axes.flat, series.items()):
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(series):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    path = output_dir / "curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
