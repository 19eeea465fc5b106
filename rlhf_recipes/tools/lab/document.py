"""The one writer of a many-run tool's result: a result document -> its JSON, its tables as text, its figure.

Every many-run tool (sweep, nano-book, nano-figures, overoptimization, the HH pipeline) ends the same way: a plain
document of numbers (`json_safe`: NaN and infinities as null), rich tables (or plain lines) rendered to text, and
a matplotlib figure. The files are written atomically (rlhf_recipes/disk.py): reports are rewritten while runs
finish, as people and scripts read them.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable, Iterable

from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.json_safe import json_safe


def render_text(items: Iterable[Any], width: int = 160) -> str:
    """Rich tables and lines of text, as the console would print them, recorded (not shown)."""
    from rich.console import Console

    console = Console(record=True, width=width, file=io.StringIO())
    for item in items:
        console.print(item)
    return console.export_text()


def save_figure(fig, path: Path, title: str | None = None) -> Path:
    """The figure's title, a tight layout (unless it has its own), <path> at 110 dpi; the figure closed."""
    import matplotlib.pyplot as plt

    if title:
        fig.suptitle(title)
    if fig.get_layout_engine() is None:  # a figure made with layout="constrained" lays itself out
        fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def write_result(document: dict[str, Any], json_path: Path, *, text: str | None = None,
                 text_path: Path | None = None, draw: Callable[[Path], Any] | None = None,
                 figure_path: Path | None = None) -> list[Path]:
    """<json_path> (the document), <text_path> (`text`: the tables, rendered) and <figure_path> (`draw(path)`
    draws it); returns the paths written, in that order."""
    atomic_write_text(json_path, json.dumps(json_safe(document), indent=2, default=str) + "\n")
    written = [Path(json_path)]
    if text is not None and text_path is not None:
        atomic_write_text(text_path, text if text.endswith("\n") else text + "\n")
        written.append(Path(text_path))
    if draw is not None and figure_path is not None:
        draw(figure_path)
        written.append(Path(figure_path))
    return written


def wrote(paths: Iterable[Path]) -> str:
    return "wrote " + ", ".join(str(p) for p in paths)
