"""The comparison tables' rows; lab/document.py renders them (rich on the terminal, plain text in compare.txt)."""

from __future__ import annotations

from rlhf_recipes.tools.compare.verdict import Comparison
from rlhf_recipes.tools.lab.document import number


def fmt(value: float, signed: bool = False) -> str:
    return number(value, "+.4g" if signed else ".4g")


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
