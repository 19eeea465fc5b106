"""Compare training runs with the RLHF book's published runs, and with each other.

Entry point: `rlhf-recipes compare RUN_DIR [RUN_DIR ...] [--reference ALGORITHM]`; docs/tools.md says what the
numbers mean.
"""

from rlhf_recipes.tools.compare.load import CompareError
from rlhf_recipes.tools.compare.report import CompareReport, compare_local_runs, compare_with_reference

__all__ = ["CompareError", "CompareReport", "compare_local_runs", "compare_with_reference"]
