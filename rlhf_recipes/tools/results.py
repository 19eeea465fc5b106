"""Final numbers of finished runs next to the book's published ones, one row per run.

    rlhf-recipes results RUN_DIR [RUN_DIR ...] [--metric test_accuracy]

Reads each run's final_results.json; the book's numbers come from rlhf_recipes/book_reference.py (`results` of the
run's algorithm: for rejection sampling, chapter 9, the base model's test_accuracy and the tuned one of each selection
rule and its random control). The last column says which rule graded the run's answers (final_results.json `grading`:
GSM8K's boxed_rule): the book's numbers are graded by its own rule, boxed_rule book. A run on a profile (tiny, nano:
another model and task) says so in its `profile` column: the book's columns are then the real run's, not its peer.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlhf_recipes.run_folder import FINAL_RESULTS_FILE, read_results

BASE_PREFIX = "base_"  # final_results.json key of the same metric measured on the base model


def table(run_dirs: list[str], metric: str = "test_accuracy") -> str:
    from rlhf_recipes.book_reference import book_reference
    from rlhf_recipes.registry import canonical_name
    from rlhf_recipes.tools.document import number, plain_table

    rows = []
    for run in run_dirs:
        results = read_results(Path(run))
        if results is None:
            raise FileNotFoundError(f"{run}: no {FINAL_RESULTS_FILE} (is the run finished?)")
        book = book_reference(canonical_name(str(results.get("algorithm", ""))))
        rows.append([number(cell, ".3f") for cell in (
            results.get("algorithm"), results.get(BASE_PREFIX + metric), results.get(metric),
            book.results.get(BASE_PREFIX + metric), book.results.get(metric), ", ".join(book.runs), str(run),
            results.get("profile"), results.get("grading"))])
    return plain_table(["algorithm", f"base {metric}", f"tuned {metric}", "book base", "book tuned", "book run", "run",
                        "profile", "graded by"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlhf-recipes results", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (each with final_results.json)")
    parser.add_argument("--metric", default="test_accuracy", help="final_results.json key (and base_<key>)")
    args = parser.parse_args(argv)
    try:
        print(table(args.runs, args.metric))
    except FileNotFoundError as e:
        print(f"error: {e}")
        return 2
    return 0
