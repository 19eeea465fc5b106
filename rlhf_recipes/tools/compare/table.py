"""The comparison tables: rich in a terminal when it is installed, plain text otherwise.

The plain rendering is also what compare.txt stores, so a file and a terminal agree.
"""

from __future__ import annotations

import math

from rlhf_recipes.tools.compare.verdict import Comparison


def fmt(value: float, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:+.4g}" if signed else f"{value:.4g}"


def reference_table(
    comparisons: list[Comparison], book_names: dict[str, str], several_runs: bool
) -> tuple[list[str], list[list[str]]]:
    headers = ["metric", "book name"] + (["run"] if several_runs else [])
    headers += ["yours", "reference", "diff", "band (±)", "verdict"]
    rows = []
    for c in comparisons:
        row = [c.metric, book_names.get(c.metric, "")] + ([c.run] if several_runs else [])
        row += [fmt(c.yours), fmt(c.reference), fmt(c.diff, signed=True), fmt(c.band), c.verdict]
        rows.append(row)
    return headers, rows


def local_table(
    metrics: list[str], runs: list[str], means: dict[tuple[str, str], float]
) -> tuple[list[str], list[list[str]]]:
    headers = ["metric", *runs]
    rows = [[m, *(fmt(means.get((m, r), float("nan"))) for r in runs)] for m in metrics]
    return headers, rows


def render_plain(headers: list[str], rows: list[list[str]], title: str = "") -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    rule = "  ".join("-" * w for w in widths)
    body = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    return "\n".join(([title] if title else []) + [line, rule, *body])


def print_table(headers: list[str], rows: list[list[str]], title: str = "") -> None:
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except ImportError:  # rich is optional: plain text carries the same content
        print(render_plain(headers, rows, title))
        return
    console = Console()
    # Piped output (CI logs, files) has no terminal width to respect: use what the table
    # needs instead of folding every cell into 80 columns.
    needed = len(render_plain(headers, rows).splitlines()[0]) + 3 * len(headers) + 1
    if not console.is_terminal and console.width < needed:
        console = Console(width=needed)
    table = Table(title=title or None)
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        # escape(): metric names like rewards/*/mean must not be read as rich markup.
        styled = [f"[red]{escape(c)}[/red]" if c.startswith("outside") else escape(c) for c in row]
        table.add_row(*styled)
    console.print(table)
