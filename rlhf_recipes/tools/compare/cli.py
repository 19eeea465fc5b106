"""Compare runs with the RLHF book's published runs, or several runs with each other.

    rlhf-recipes compare outputs/grpo-run --reference grpo
    rlhf-recipes compare outputs/grpo-run --reference grpo --reference-csv avg_total.csv loss.csv
    rlhf-recipes compare outputs/dpo outputs/ipo outputs/kto
    rlhf-recipes compare outputs/grpo-nano --reference nano   # over this project's recorded nano run

Writes compare.png, compare.txt and compare.json into --out (default: <first run>/compare/)
and prints the table. The work is done in rlhf_recipes/tools/compare/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlhf_recipes.tools.compare.load import NANO_PROFILE, CompareError
from rlhf_recipes.tools.compare.references import published_algorithms
from rlhf_recipes.tools.compare.report import (
    compare_local_runs, compare_with_nano_runs, compare_with_reference,
)
from rlhf_recipes.tools.compare.verdict import WINDOW_FRACTION
from rlhf_recipes.tools.document import print_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (--output_dir of run.py)")
    parser.add_argument("--reference", metavar="ALGORITHM", help="compare with the book's run of this algorithm "
                        f"(published: {', '.join(published_algorithms())}), or `nano`: with this project's recorded "
                        "nano run of the run's algorithm (reference_runs/nano/)")
    parser.add_argument("--reference-csv", nargs="+", type=Path, metavar="PATH",
                        help="reference history exported from wandb (chart CSVs or an API history CSV) instead of "
                        "fetching; the algorithm is --reference or the run's own")
    parser.add_argument("--reference-run", metavar="NAME",
                        help="run name to read from a chart CSV that holds several runs")
    parser.add_argument("--out", type=Path, help="output folder (default: <first run>/compare/)")
    parser.add_argument("--metrics", nargs="+", metavar="NAME",
                        help="metrics to show, our or the book's names; globs allowed (rewards/*/mean)")
    parser.add_argument("--offline", action="store_true", help="never contact wandb; use the cache or CSVs")
    parser.add_argument("--window", type=float, default=WINDOW_FRACTION,
                        help="final fraction of steps the table averages (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 0 < args.window <= 1:
        print("--window must be in (0, 1].", file=sys.stderr)
        return 2
    try:
        if args.reference == NANO_PROFILE:
            report = compare_with_nano_runs(args.runs, out_dir=args.out, metrics=args.metrics, fraction=args.window)
        elif args.reference or args.reference_csv:
            report = compare_with_reference(args.runs, reference=args.reference, reference_csvs=args.reference_csv,
                                            reference_run=args.reference_run, out_dir=args.out, metrics=args.metrics,
                                            offline=args.offline, fraction=args.window)
        else:
            report = compare_local_runs(args.runs, out_dir=args.out, metrics=args.metrics, fraction=args.window)
    except CompareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_table(report.headers, report.rows, report.title)
    for note in report.notes:
        print(f"note: {note}")
    print(f"figure: {report.figure}\ntable: {report.table_file}\nnumbers: {report.summary_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
