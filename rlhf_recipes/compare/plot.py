"""One figure, one panel per metric: runs in colour, the book's reference in grey."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs on clusters and in CI, never opens a window
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

REFERENCE_COLOR = "0.35"
MAX_COLUMNS = 3
FEW_POINTS = 30  # below this many points, draw markers so short runs stay visible


@dataclass
class Line:
    label: str
    steps: np.ndarray
    values: np.ndarray
    reference: bool = False


@dataclass
class Band:
    """The reference's noise band over the comparison window."""

    start: float
    end: float
    center: float
    half_width: float


@dataclass
class Panel:
    title: str
    lines: list[Line]
    bands: list[Band] = field(default_factory=list)


def _draw_line(ax: plt.Axes, line: Line, color: str | None) -> None:
    marker = "o" if len(line.steps) < FEW_POINTS else None
    if line.reference:
        ax.plot(line.steps, line.values, color=REFERENCE_COLOR, lw=0.9, alpha=0.7,
                marker=marker, ms=3, label=line.label, zorder=1)
    else:
        ax.plot(line.steps, line.values, color=color, lw=1.5, marker=marker, ms=3,
                label=line.label, zorder=2)


def _draw_panel(ax: plt.Axes, panel: Panel) -> None:
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    runs = [line for line in panel.lines if not line.reference]
    for line in panel.lines:
        color = colors[runs.index(line) % len(colors)] if not line.reference else None
        _draw_line(ax, line, color)
    for band in panel.bands:
        ax.fill_between([band.start, band.end], band.center - band.half_width,
                        band.center + band.half_width, color=REFERENCE_COLOR, alpha=0.18,
                        lw=0, zorder=0)
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.grid(alpha=0.3)


def draw(panels: list[Panel], path: Path, title: str) -> Path:
    if not panels:
        raise ValueError("nothing to plot")
    ncols = min(MAX_COLUMNS, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.6 * nrows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        _draw_panel(ax, panel)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    # One legend for the figure: every panel shows the same runs.
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(4, len(labels)),
               bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.suptitle(title, y=1.0 + 0.04 * max(1, 4 / (3.6 * nrows)), fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
