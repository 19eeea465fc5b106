"""The one writer of every tool's result: a document of numbers -> its JSON (NaN and infinities as null), its tables
as text, its matplotlib figure. The files are written atomically (rlhf_recipes/disk.py): reports are rewritten while
runs finish, as people and scripts read them.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable

from rlhf_recipes.disk import atomic_write_text
from rlhf_recipes.json_safe import json_safe
from rlhf_recipes.report import pyplot  # noqa: F401  (the tools draw through document.pyplot)


def number(value: Any, spec: str = ".4g") -> str:
    """A table cell: "-" for None and NaN, a float by `spec`, anything else as str."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) if isinstance(value, float) else str(value)


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[str]] = (), *,
          right: Iterable[str] = (), caption: str | None = None, **options):
    """A rich Table: its columns (those named in `right` right-justified, every cell folded rather than cut), its
    rows; more rows can be added with add_row."""
    from rich.table import Table

    right = set(right)
    out = Table(title=title, caption=caption, **options)
    for name in columns:
        out.add_column(name, justify="right" if name in right else "left", overflow="fold")
    for row in rows:
        out.add_row(*row)
    return out


def plain_table(headers: list[str], rows: list[list[str]], title: str = "") -> str:
    """The table as aligned plain text (a title line, the headers, a rule, the rows)."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in [headers, *rows]]
    return "\n".join(([title] if title else []) + [lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def print_table(headers: list[str], rows: list[list[str]], title: str = "", *, right: Iterable[str] = (),
                piped_width: int | None = None, **options) -> None:
    """The table on the terminal (rich), as wide as it needs when piped (or `piped_width` columns); cells starting
    "outside" in red; `right` and `options` as table() takes them."""
    from rich.console import Console
    from rich.markup import escape

    console = Console()
    # Piped output (CI logs, files) has no terminal width to respect: use what the table needs instead of folding
    # every cell into 80 columns.
    needed = len(plain_table(headers, rows).splitlines()[0]) + 3 * len(headers) + 1
    if not console.is_terminal and (piped_width or console.width < needed):
        console = Console(width=piped_width or needed)
    # escape(): metric names like rewards/*/mean must not be read as rich markup
    console.print(table(title or None, headers, ([f"[red]{escape(c)}[/red]" if c.startswith("outside") else escape(c)
                                                  for c in row] for row in rows), right=right, **options))


def render_text(items: Iterable[Any], width: int = 160) -> str:
    """Rich tables and lines of text, as the console would print them, recorded (not shown)."""
    from rich.console import Console

    console = Console(record=True, width=width, file=io.StringIO())
    for item in items:
        console.print(item)
    return console.export_text()


# The curves' figure helpers: a metric's points, a running mean, and a band over seeds (pyplot: the core's, headless).
def points(rows: list[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    """(step, value) of a numeric key of metrics.jsonl's rows; the trainer's end-of-training summary row
    (train_runtime) repeats the last step with its epoch, so it is left out."""
    return [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float)) and "train_runtime" not in r]


def logs_window(curves: Iterable[list]) -> int:
    """Logs per running mean of a training curve: 10 where every curve has at least 50 logs, else none (a short
    run's running mean would end far from its last value, the number its table shows)."""
    return 10 if min(map(len, curves), default=0) >= 50 else 1


def running_mean(values: list[float], window: int) -> list[float]:
    return [sum(values[max(0, i - window + 1):i + 1]) / len(values[max(0, i - window + 1):i + 1])
            for i in range(len(values))]


def seed_band(per_seed: dict[int, list[tuple]], smooth: int = 1) -> tuple[list[int], list[float], list[float],
                                                                           list[float]]:
    """(steps, mean, min, max) over seeds at the steps every seed logged (each seed smoothed first)."""
    series = {s: dict(zip([p[0] for p in pts], running_mean([p[1] for p in pts], smooth)))
              for s, pts in per_seed.items()}
    steps = sorted(set.intersection(*(set(v) for v in series.values()))) if series else []
    values = [[series[s][t] for s in series] for t in steps]
    return (steps, [sum(v) / len(v) for v in values], [min(v) for v in values], [max(v) for v in values])


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
    Path(json_path).parent.mkdir(parents=True, exist_ok=True)
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
