"""curves.png: a run's training curves (the rest of the run folder: run_folder.py)."""

from __future__ import annotations

import math
from pathlib import Path

from rlhf_recipes.run_folder import CURVES_FILE, read_metrics


def pyplot():
    """matplotlib.pyplot on the Agg backend: headless, runs on clusters and in CI, never opens a window (every figure
    of ours, the tools' too, is drawn through this)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(output_dir: Path, key_metrics: tuple[str, ...], title: str) -> Path | None:
    """curves.png: the loss, the algorithm's key metrics and any held-out eval/* metrics against the optimizer step."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()

    rows = read_metrics(output_dir)
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
    path = output_dir / CURVES_FILE
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
