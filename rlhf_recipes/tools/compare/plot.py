"""One figure, one panel per metric: runs in colour, the book's reference in grey."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: runs on clusters and in CI, never opens a window
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
import numpy as np  # noqa: E402

from rlhf_recipes.tools.lab.document import save_figure  # noqa: E402

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


def _draw_line(ax: plt.Axes, line: Line, color: str) -> None:
    marker = "o" if len(line.steps) < FEW_POINTS else None
    if line.reference:
        ax.plot(line.steps, line.values, color=color, lw=0.9, alpha=0.7,
                marker=marker, ms=3, label=line.label, zorder=1)
    else:
        ax.plot(line.steps, line.values, color=color, lw=1.5, marker=marker, ms=3,
                label=line.label, zorder=2)


def _colors(panels: list[Panel]) -> dict[str, str]:
    """One colour per run across all panels, so a run missing from one panel keeps its colour."""
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors: dict[str, str] = {}
    for line in (line for panel in panels for line in panel.lines):
        if line.label not in colors:
            runs = sum(1 for c in colors.values() if c != REFERENCE_COLOR)
            colors[line.label] = REFERENCE_COLOR if line.reference else cycle[runs % len(cycle)]
    return colors


def _draw_panel(ax: plt.Axes, panel: Panel, colors: dict[str, str]) -> None:
    for line in panel.lines:
        _draw_line(ax, line, colors[line.label])
    # Several runs compared over the same window share one band: draw it once.
    for band in dict.fromkeys((b.start, b.end, b.center, b.half_width) for b in panel.bands):
        start, end, center, half = band
        ax.fill_between([start, end], center - half, center + half, color=REFERENCE_COLOR,
                        alpha=0.15, lw=0, zorder=0)
    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.grid(alpha=0.3)


def _legend_handles(colors: dict[str, str], panels: list[Panel]) -> list[Line2D]:
    reference = {line.label for panel in panels for line in panel.lines if line.reference}
    return [Line2D([], [], color=c, lw=0.9 if label in reference else 1.5, label=label)
            for label, c in colors.items()]


def draw(panels: list[Panel], path: Path, title: str) -> Path:
    if not panels:
        raise ValueError("nothing to plot")
    ncols = min(MAX_COLUMNS, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    height = 3.6 * nrows + 0.9  # + room for the title and the legend
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, height), squeeze=False)
    colors = _colors(panels)
    for ax, panel in zip(axes.flat, panels):
        _draw_panel(ax, panel, colors)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    # ~13 characters per inch at this font size: wrap rather than clip a long title.
    wrapped = textwrap.fill(title, width=int(13 * 5.0 * ncols), break_on_hyphens=False)
    fig.suptitle(wrapped, y=1 - 0.1 / height, fontsize=11)
    handles = _legend_handles(colors, panels)
    fig.legend(handles=handles, loc="upper center", ncol=min(5, len(handles)),
               bbox_to_anchor=(0.5, 1 - 0.45 / height), frameon=False)
    fig.set_layout_engine("tight", rect=(0, 0, 1, 1 - 0.75 / height))  # room above for the title and legend
    return save_figure(fig, path)
